"""Tests for partnd.patches.sampling: box geometry, resampling conventions, grid tiling and
validation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from partnd._validation import InputError
from partnd.patches.sampling import GridSampler, OffGridSampler, PatchBatch, crop_and_resize

INTERPOLATION_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("spatial", "patch_size", "expected_patch"),
    [
        ((300,), 10, (10,)),
        ((300,), (12,), (12,)),
        ((24, 20), 4, (4, 4)),
        ((24, 20), (6, 5), (6, 5)),
        ((12, 10, 8), 2, (2, 2, 2)),
        ((12, 10, 8), (3, 2, 4), (3, 2, 4)),
    ],
)
def test_offgrid_shapes(spatial, patch_size, expected_patch) -> None:
    ndim = len(spatial)
    x = torch.randn(3, 2, *spatial)
    batch = OffGridSampler(ndim, patch_size, num_patches=7)(x, _generator(0))
    assert batch.patches.shape == (3, 7, 2, *expected_patch)
    assert batch.centers.shape == batch.sizes.shape == (3, 7, ndim)
    assert batch.centers.dtype == batch.sizes.dtype == torch.float32
    assert batch.grid_index is not None and batch.grid_index.shape == (3, 7)
    assert batch.grid_index.dtype == torch.long
    assert (batch.ndim, batch.num_patches, batch.batch_size) == (ndim, 7, 3)
    torch.testing.assert_close(batch.starts, batch.centers - batch.sizes / 2)


def test_default_num_patches_is_the_grid_count() -> None:
    sampler = OffGridSampler(2, 4)
    assert sampler.num_patches_for((32, 32)) == 64
    assert sampler.num_patches_for((34, 30)) == 8 * 7
    assert sampler(torch.randn(2, 3, 32, 32)).num_patches == 64
    eeg = OffGridSampler(1, 100, num_patches=40)
    assert eeg.num_patches_for((3000,)) == 40
    batch = eeg(torch.randn(2, 6, 3000), _generator(0))
    assert batch.patches.shape == (2, 40, 6, 100)


def test_num_patches_may_exceed_the_grid_count() -> None:
    batch = OffGridSampler(1, 10, num_patches=50)(torch.randn(2, 1, 40), _generator(0))
    assert batch.patches.shape == (2, 50, 1, 10)


@pytest.mark.parametrize("scale_range", [None, (0.5, 2.0), (1.5, 3.0)])
def test_boxes_lie_inside_the_input(scale_range) -> None:
    spatial = (37, 23)
    x = torch.randn(16, 1, *spatial)
    sampler = OffGridSampler(2, (8, 6), num_patches=64, scale_range=scale_range)
    lengths = torch.tensor(spatial, dtype=torch.float32)
    for seed in range(5):
        batch = sampler(x, _generator(seed))
        starts = batch.starts
        assert bool((starts >= -1e-4).all())
        assert bool((starts + batch.sizes <= lengths + 1e-4).all())


def test_extents_within_the_scale_range_and_clamped_to_the_input() -> None:
    patch = torch.tensor([8.0, 6.0])
    x = torch.randn(32, 1, 40, 40)
    batch = OffGridSampler(2, (8, 6), num_patches=50, scale_range=(0.5, 2.0))(x, _generator(1))
    sizes = batch.sizes.reshape(-1, 2)
    assert bool((sizes >= 0.5 * patch - 1e-5).all()) and bool((sizes <= 2 * patch + 1e-5).all())
    # the range is covered and each side is drawn independently, so aspect ratios vary
    assert bool((sizes.min(0).values < 0.6 * patch).all())
    assert bool((sizes.max(0).values > 1.9 * patch).all())
    aspect = sizes[:, 0] / sizes[:, 1]
    assert float(aspect.std()) > 0.2
    fixed = OffGridSampler(2, (8, 6), num_patches=50)(x, _generator(1))
    torch.testing.assert_close(fixed.sizes, patch.expand(32, 50, 2))
    # an input shorter than b * P clamps the largest extent to the input length
    short = OffGridSampler(1, 16, num_patches=200, scale_range=(0.5, 2.0))
    sizes_1d = short(torch.randn(4, 1, 20), _generator(2)).sizes
    assert float(sizes_1d.max()) <= 20.0 and float(sizes_1d.max()) > 19.0
    assert float(sizes_1d.min()) >= 8.0 - 1e-5


def test_integer_boxes_by_default_continuous_on_request() -> None:
    x = torch.randn(8, 1, 110)
    batch = OffGridSampler(1, 10, num_patches=100)(x, _generator(3))
    starts = batch.starts.flatten()
    torch.testing.assert_close(starts, starts.round())  # whole samples, as the authors' boxes
    assert float(starts.min()) == 0.0 and float(starts.max()) == 100.0  # both ends reachable
    # every integer start in [0, L - P] is drawn about equally often
    many = OffGridSampler(1, 10, num_patches=2000)(torch.randn(8, 1, 20), _generator(5)).starts
    counts = torch.bincount(many.flatten().long(), minlength=11).float()
    assert counts.shape == (11,) and float(counts.min() / counts.max()) > 0.85
    continuous = OffGridSampler(1, 10, num_patches=100, integer_boxes=False)(x, _generator(3))
    fractional = continuous.starts.flatten()
    assert float(fractional.min()) < 2.0 and float(fractional.max()) > 98.0
    assert float((fractional - fractional.round()).abs().max()) > 0.1


def test_integer_scaled_boxes_have_whole_extents_in_the_range() -> None:
    sampler = OffGridSampler(2, 4, num_patches=500, scale_range=(0.5, 2.0))
    batch = sampler(torch.randn(4, 1, 32, 32), _generator(6))
    torch.testing.assert_close(batch.sizes, batch.sizes.round())
    torch.testing.assert_close(batch.starts, batch.starts.round())
    assert set(batch.sizes.unique().tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_offgrid_patches_are_exact_slices_and_an_on_grid_box_equals_its_tile(ndim: int) -> None:
    """The pretraining crop is the fine-tuning tile: same values, no interpolation."""
    spatial = (24, 20, 16)[:ndim]
    patch = (4, 5, 4)[:ndim]
    x = torch.randn(3, 2, *spatial)
    batch = OffGridSampler(ndim, patch, num_patches=40)(x, _generator(7))
    tiles = GridSampler(ndim, patch)(x)
    grid_shape = [length // p for length, p in zip(spatial, patch, strict=True)]
    matched = 0
    for b in range(3):
        for n in range(40):
            start = [int(v) for v in batch.starts[b, n]]
            region = x[b]
            for d in range(ndim):
                region = region.narrow(1 + d, start[d], patch[d])
            torch.testing.assert_close(batch.patches[b, n], region, rtol=0, atol=0)
            if all(s % p == 0 for s, p in zip(start, patch, strict=True)):
                slot = 0
                for d in range(ndim):
                    slot = slot * grid_shape[d] + start[d] // patch[d]
                torch.testing.assert_close(
                    batch.patches[b, n], tiles.patches[b, slot], rtol=0, atol=0
                )
                matched += 1
    assert matched > 0
    # and a box placed on the grid by hand gives the tile exactly
    starts = tiles.starts[:, :5].contiguous()
    sliced = crop_and_resize(x, starts, tiles.sizes[:, :5].contiguous(), patch)
    torch.testing.assert_close(sliced, tiles.patches[:, :5], rtol=0, atol=0)


def test_sampling_needs_no_host_synchronisation(host_syncs, monkeypatch) -> None:
    # the accelerator path: on the CPU whole-sample scale boxes take resize_integer_boxes, which
    # reads the extents back (free there)
    monkeypatch.setattr("partnd.patches.sampling._resample_by_extent", lambda x: False)
    x = torch.randn(2, 3, 30, 26)
    generator = _generator(8)
    samplers = [
        OffGridSampler(2, (5, 4), num_patches=9),
        OffGridSampler(2, (5, 4), num_patches=9, scale_range=(0.5, 2.0)),
        OffGridSampler(2, (5, 4), num_patches=9, integer_boxes=False),
        GridSampler(2, (5, 4)),
    ]
    with host_syncs:
        for sampler in samplers:
            sampler(x, generator, validate=False)
    assert host_syncs.calls == []


def test_sampler_patches_are_crop_and_resize_of_its_boxes() -> None:
    x = torch.randn(2, 3, 30, 26)
    sampler = OffGridSampler(2, (5, 4), num_patches=9, scale_range=(0.5, 2.0))
    batch = sampler(x, _generator(4))
    expected = crop_and_resize(x, batch.starts, batch.sizes, (5, 4))
    torch.testing.assert_close(batch.patches, expected, atol=1e-5, rtol=1e-5)
    plain = OffGridSampler(2, (5, 4), num_patches=9, scale_range=(0.5, 2.0), antialias=False)
    plain_batch = plain(x, _generator(4))
    expected = crop_and_resize(x, plain_batch.starts, plain_batch.sizes, (5, 4), antialias=False)
    torch.testing.assert_close(plain_batch.patches, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_integer_starts_of_patch_extent_are_exact_slices(ndim: int) -> None:
    spatial = (19, 15, 11, 7)[:ndim]
    patch = (5, 4, 3, 2)[:ndim]
    x = torch.randn(2, 3, *spatial)
    num_boxes = 6
    starts = torch.stack(
        [
            torch.randint(0, length - p + 1, (2, num_boxes))
            for length, p in zip(spatial, patch, strict=True)
        ],
        dim=-1,
    ).float()
    sizes = torch.tensor(patch, dtype=torch.float32).expand(2, num_boxes, ndim)
    for antialias in (True, False):
        patches = crop_and_resize(x, starts, sizes, patch, antialias=antialias)
        for b in range(2):
            for n in range(num_boxes):
                window = tuple(
                    slice(int(s), int(s) + p)
                    for s, p in zip(starts[b, n].tolist(), patch, strict=True)
                )
                torch.testing.assert_close(
                    patches[b, n], x[(b, slice(None), *window)], atol=1e-6, rtol=0
                )


def test_fractional_start_interpolates_linearly_between_neighbours() -> None:
    x = torch.tensor([[[0.0, 10.0, 4.0, 8.0, -2.0, 6.0, 1.0]]])
    starts = torch.tensor([[[1.25], [0.5]]])
    sizes = torch.tensor([[[4.0], [4.0]]])
    patches = crop_and_resize(x, starts, sizes, 4)
    # output j sits at start + j + 0.5, i.e. between samples start + j and start + j + 1
    expected_quarter = [0.75 * 10 + 0.25 * 4, 0.75 * 4 + 0.25 * 8, 0.75 * 8 - 0.25 * 2, -1.5 + 1.5]
    expected_half = [5.0, 7.0, 6.0, 3.0]
    torch.testing.assert_close(patches[0, 0, 0], torch.tensor(expected_quarter))
    torch.testing.assert_close(patches[0, 1, 0], torch.tensor(expected_half))


def test_upsampling_with_edge_replication() -> None:
    x = torch.tensor([[[2.0, 6.0, 0.0]]])
    # box [0, 2) resampled to 4: positions 0.25, 0.75, 1.25, 1.75 -> index coords -0.25 .. 1.25
    patches = crop_and_resize(x, torch.tensor([[[0.0]]]), torch.tensor([[[2.0]]]), 4)
    torch.testing.assert_close(patches[0, 0, 0], torch.tensor([2.0, 3.0, 5.0, 4.5]))


@pytest.mark.parametrize("ndim", [1, 2])
def test_linear_ramp_is_reproduced_at_any_extent(ndim: int) -> None:
    spatial = (60, 50)[:ndim]
    slopes = (0.7, -1.3)[:ndim]
    coords = torch.meshgrid(
        *[torch.arange(length, dtype=torch.float64) + 0.5 for length in spatial], indexing="ij"
    )
    ramp = 3.0 + sum(s * c for s, c in zip(slopes, coords, strict=True))
    x = ramp[None, None].expand(1, 2, *spatial).contiguous()
    patch = (7, 5)[:ndim]
    generator = _generator(5)
    sizes = 2 + torch.rand(1, 40, ndim, generator=generator, dtype=torch.float64) * 25
    lengths = torch.tensor(spatial, dtype=torch.float64)
    # keep output positions inside [0.5, L - 0.5] where no edge replication happens
    starts = 1 + torch.rand(1, 40, ndim, generator=generator, dtype=torch.float64) * (
        lengths - sizes - 2
    )
    patches = crop_and_resize(x, starts, sizes, patch, antialias=False)
    positions = [
        starts[..., d, None]
        + (torch.arange(patch[d], dtype=torch.float64) + 0.5) * sizes[..., d, None] / patch[d]
        for d in range(ndim)
    ]
    expected = torch.full((1, 40, *patch), 3.0, dtype=torch.float64)
    for d in range(ndim):
        shape = [1, 40] + [1] * ndim
        shape[2 + d] = patch[d]
        expected = expected + slopes[d] * positions[d].view(shape)
    torch.testing.assert_close(patches[:, :, 0], expected, atol=1e-10, rtol=0)
    torch.testing.assert_close(patches[:, :, 1], expected, atol=1e-10, rtol=0)


def test_antialiased_integer_downsampling_keeps_a_ramp() -> None:
    x = (torch.arange(80, dtype=torch.float64) + 0.5)[None, None] * 0.5
    starts = torch.tensor([[[10.0], [23.0], [30.0]]], dtype=torch.float64)
    sizes = torch.tensor([[[10.0], [20.0], [30.0]]], dtype=torch.float64)
    patches = crop_and_resize(x, starts, sizes, 5)
    positions = starts + (torch.arange(5, dtype=torch.float64) + 0.5) * sizes / 5
    torch.testing.assert_close(patches[:, :, 0], 0.5 * positions, atol=1e-10, rtol=0)


@pytest.mark.parametrize("antialias", [True, False])
def test_constant_input_stays_constant(antialias: bool) -> None:
    x = torch.full((2, 2, 30, 30), 4.5)
    sampler = OffGridSampler(2, 6, num_patches=40, scale_range=(0.4, 3.0), antialias=antialias)
    batch = sampler(x, _generator(6))
    torch.testing.assert_close(batch.patches, torch.full_like(batch.patches, 4.5))


def test_antialias_suppresses_aliasing_of_a_high_frequency() -> None:
    positions = torch.arange(4000, dtype=torch.float32) + 0.5
    x = torch.sin(2 * math.pi * 0.4 * positions)[None, None]  # period 2.5 samples
    starts = torch.rand(1, 200, 1, generator=_generator(7)) * (4000 - 80)
    sizes = torch.full((1, 200, 1), 80.0)  # downsample by 4
    smooth = crop_and_resize(x, starts, sizes, 20, antialias=True)
    aliased = crop_and_resize(x, starts, sizes, 20, antialias=False)
    assert float(aliased.std()) > 0.3
    assert float(smooth.std()) < 0.1 * float(aliased.std())


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_whole_input_matches_torch_interpolate_without_antialias(ndim: int) -> None:
    spatial = (13, 11, 9)[:ndim]
    out = (5, 17, 4)[:ndim]  # mixes downsampling and upsampling
    x = torch.randn(2, 3, *spatial, dtype=torch.float64)
    lengths = torch.tensor(spatial, dtype=torch.float64)
    patches = crop_and_resize(
        x, torch.zeros(2, 1, ndim, dtype=torch.float64), lengths.expand(2, 1, ndim), out, False
    )
    expected = F.interpolate(x, size=out, mode=INTERPOLATION_MODES[ndim], align_corners=False)
    torch.testing.assert_close(patches[:, 0], expected, atol=1e-12, rtol=0)


def test_antialias_matches_torch_interpolate_away_from_the_edges() -> None:
    x = torch.randn(2, 3, 40, 44, dtype=torch.float64)
    out = (15, 11)  # scale factors 8/3 and 4
    reference = F.interpolate(x, size=out, mode="bilinear", align_corners=False, antialias=True)
    scale = torch.tensor([40 / 15, 44 / 11], dtype=torch.float64)
    corner = torch.tensor([5, 3])  # patch of (5, 4) output samples starting there
    starts = (corner * scale).expand(2, 1, 2)
    sizes = (torch.tensor([5, 4]) * scale).expand(2, 1, 2)
    patches = crop_and_resize(x, starts, sizes, (5, 4), antialias=True)
    torch.testing.assert_close(patches[:, 0], reference[:, :, 5:10, 3:7], atol=1e-10, rtol=0)


def test_seeded_draws_are_reproducible_and_seeds_differ() -> None:
    x = torch.randn(4, 2, 64)
    sampler = OffGridSampler(1, 8, scale_range=(0.5, 2.0))
    first, again, other = (sampler(x, _generator(s)) for s in (11, 11, 12))
    for name in ("patches", "centers", "sizes", "grid_index"):
        assert torch.equal(getattr(first, name), getattr(again, name))
    assert not torch.equal(first.centers, other.centers)
    assert not torch.equal(first.sizes, other.sizes)
    # draws are independent per example
    assert not torch.equal(first.centers[0], first.centers[1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_dtype_and_device_are_kept(dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 24, 24)
    sampler = OffGridSampler(2, 4, num_patches=10, scale_range=(0.5, 2.0))
    reference = sampler(x, _generator(13))
    batch = sampler(x.to(dtype), _generator(13))
    assert batch.patches.dtype == dtype and batch.patches.device == x.device
    assert batch.centers.dtype == batch.sizes.dtype == torch.float32
    torch.testing.assert_close(batch.centers, reference.centers)
    tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(
        batch.patches.float(), reference.patches, atol=tolerance, rtol=tolerance
    )


def test_crop_and_resize_is_differentiable_in_x() -> None:
    x = torch.randn(1, 2, 9, 8, dtype=torch.float64, requires_grad=True)
    starts = torch.tensor([[[0.3, 1.7], [4.0, 2.2]]], dtype=torch.float64)
    sizes = torch.tensor([[[6.1, 3.0], [2.5, 5.8]]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda v: crop_and_resize(v, starts, sizes, (3, 4)), (x,))


@pytest.mark.parametrize(
    ("spatial", "patch_size"), [((23,), 5), ((10, 13), (3, 4)), ((6, 7, 9), (2, 3, 4))]
)
def test_grid_tiles_fold_back_into_the_input(spatial, patch_size) -> None:
    ndim = len(spatial)
    x = torch.randn(2, 3, *spatial)
    sampler = GridSampler(ndim, patch_size)
    batch = sampler(x)
    patch = (patch_size,) * ndim if isinstance(patch_size, int) else patch_size
    grid = [length // p for length, p in zip(spatial, patch, strict=True)]
    assert sampler.num_patches(spatial) == math.prod(grid) == batch.num_patches
    tiles = batch.patches.reshape(2, *grid, 3, *patch)
    # [B, G_0, .., C, P_0, ..] -> [B, C, G_0, P_0, G_1, P_1, ..] -> [B, C, *covered]
    order = [0, ndim + 1]
    for d in range(ndim):
        order += [1 + d, ndim + 2 + d]
    folded = tiles.permute(order).reshape(2, 3, *[g * p for g, p in zip(grid, patch, strict=True)])
    covered = x[(..., *(slice(0, g * p) for g, p in zip(grid, patch, strict=True)))]
    assert torch.equal(folded, covered)
    assert batch.grid_index is not None
    assert torch.equal(batch.grid_index, torch.arange(batch.num_patches).expand(2, -1))


def test_grid_centres_sizes_and_crop_consistency() -> None:
    x = torch.randn(1, 2, 9, 14)
    batch = GridSampler(2, (4, 5))(x)
    expected_centres = torch.tensor(
        [[2.0, 2.5], [2.0, 7.5], [6.0, 2.5], [6.0, 7.5]], dtype=torch.float32
    )
    torch.testing.assert_close(batch.centers[0], expected_centres)
    torch.testing.assert_close(batch.sizes[0], torch.tensor([[4.0, 5.0]]).expand(4, 2))
    torch.testing.assert_close(
        crop_and_resize(x, batch.starts, batch.sizes, (4, 5)), batch.patches, atol=1e-6, rtol=0
    )
    assert torch.equal(GridSampler(2, (4, 5))(x, _generator(0)).patches, batch.patches)


def test_offgrid_grid_index_is_the_tile_containing_the_centre() -> None:
    x = torch.randn(3, 1, 21, 17)
    batch = OffGridSampler(2, (4, 5), num_patches=30, scale_range=(0.5, 2.0))(x, _generator(8))
    grid = (21 // 4, 17 // 5)
    row = (batch.centers[..., 0] // 4).long().clamp(max=grid[0] - 1)
    column = (batch.centers[..., 1] // 5).long().clamp(max=grid[1] - 1)
    assert batch.grid_index is not None
    assert torch.equal(batch.grid_index, row * grid[1] + column)
    assert int(batch.grid_index.max()) < math.prod(grid)


def test_patch_batch_to_moves_every_tensor() -> None:
    batch = OffGridSampler(1, 4, num_patches=3)(torch.randn(2, 1, 16))
    moved = batch.to("cpu")
    assert isinstance(moved, PatchBatch)
    assert torch.equal(moved.patches, batch.patches)
    assert moved.grid_index is not None and moved.grid_index.device.type == "cpu"
    empty = PatchBatch(batch.patches, batch.centers, batch.sizes).to("cpu")
    assert empty.grid_index is None


def test_generator_controls_the_draws_not_the_global_seed() -> None:
    x = torch.randn(2, 1, 50)
    sampler = OffGridSampler(1, 5, num_patches=4)
    torch.manual_seed(1)
    first = sampler(x, _generator(0))
    torch.manual_seed(2)
    second = sampler(x, _generator(0))
    assert torch.equal(first.centers, second.centers)


@pytest.mark.parametrize(
    ("build", "argument"),
    [
        (lambda: OffGridSampler(0, 4), "ndim"),
        (lambda: OffGridSampler(2, 0), "patch_size"),
        (lambda: OffGridSampler(2, (4, 4, 4)), "patch_size"),
        (lambda: OffGridSampler(1, 4, scale_range=(0.0, 1.0)), "scale_range"),
        (lambda: OffGridSampler(1, 4, scale_range=(2.0, 1.0)), "scale_range"),
        (lambda: OffGridSampler(1, 4, num_patches=0), "num_patches"),
        (lambda: OffGridSampler(1, 4, num_patches=20, max_patches=10), "num_patches"),
        (lambda: GridSampler(2, -1), "patch_size"),
    ],
)
def test_constructor_validation(build, argument: str) -> None:
    with pytest.raises(InputError, match=f"^{argument}: expected"):
        build()


def test_call_validation() -> None:
    sampler = OffGridSampler(2, 4)
    with pytest.raises(InputError, match=r"^x: expected a floating point tensor"):
        sampler(torch.ones(1, 1, 8, 8, dtype=torch.long))
    with pytest.raises(InputError, match=r"^x: expected .*2 spatial dim"):
        sampler(torch.randn(1, 8, 8))
    with pytest.raises(InputError, match=r"^x: expected spatial size >= patch size"):
        sampler(torch.randn(1, 1, 3, 8))
    with pytest.raises(InputError, match=r"^x: expected .*spatial size >= patch size"):
        GridSampler(1, 10)(torch.randn(1, 1, 9))
    bad = torch.randn(1, 1, 8, 8)
    bad[0, 0, 3, 3] = float("nan")
    with pytest.raises(InputError, match=r"^x: expected only finite values, got 1 NaN"):
        sampler(bad)
    with pytest.raises(InputError, match=r"^x: expected a grid count"):
        OffGridSampler(1, 1, max_patches=10)(torch.randn(1, 1, 20))
    with pytest.raises(InputError, match=r"^spatial_shape: expected a grid count"):
        OffGridSampler(1, 1, max_patches=10).num_patches_for((20,))
    with pytest.raises(InputError, match=r"^spatial_shape: expected 1 spatial length"):
        OffGridSampler(1, 1).num_patches_for((20, 20))


def test_crop_and_resize_validation() -> None:
    x = torch.randn(1, 2, 10)
    good_starts, good_sizes = torch.zeros(1, 3, 1), torch.full((1, 3, 1), 4.0)
    with pytest.raises(InputError, match=r"^sizes: expected positive"):
        crop_and_resize(x, good_starts, torch.zeros(1, 3, 1), 4)
    with pytest.raises(InputError, match=r"^starts: expected boxes inside the input"):
        crop_and_resize(x, good_starts + 7, good_sizes, 4)
    with pytest.raises(InputError, match=r"^starts: expected a floating point tensor"):
        crop_and_resize(x, torch.zeros(1, 3, 2), good_sizes, 4)
    with pytest.raises(InputError, match=r"^sizes: expected the shape of starts"):
        crop_and_resize(x, good_starts, torch.full((1, 2, 1), 4.0), 4)
    with pytest.raises(InputError, match=r"^patch_size: expected 1 value"):
        crop_and_resize(x, good_starts, good_sizes, (4, 4))


def test_finite_check_finds_nan_and_inf_also_when_the_sum_overflows() -> None:
    """check_finite's one-reduction fast path: a finite sum proves every value finite; a sum that
    overflows (finite values near the float maximum) falls back to looking at every value."""
    from partnd._validation import check_finite

    large = torch.full((4, 5), 3e38)
    assert not bool(torch.isfinite(large.sum()))
    check_finite(large, "x")  # finite values: no error despite the overflowing sum
    for bad in (float("nan"), float("inf"), -float("inf")):
        for values in (torch.randn(4, 5), large.clone()):
            values[2, 3] = bad
            with pytest.raises(InputError, match="x: expected only finite values, got 1 NaN/Inf"):
                check_finite(values, "x")
    check_finite(torch.tensor([1, 2]), "x")  # integer tensors are always finite
