"""Tests for partnd.patches.targets: relative translation/scale targets and pair sampling."""

from __future__ import annotations

import pytest
import torch

from partnd._validation import InputError
from partnd.patches.sampling import GridSampler, OffGridSampler
from partnd.patches.targets import all_pairs, relative_targets, sample_pairs


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_boxes(batch: int, num: int, ndim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = _generator(seed)
    centers = torch.rand(batch, num, ndim, generator=generator) * 100
    sizes = 2 + torch.rand(batch, num, ndim, generator=generator) * 30
    return centers, sizes


def _matrix(centers: torch.Tensor, sizes: torch.Tensor, scale: bool = False) -> torch.Tensor:
    """All-pairs targets as [B, N, N, D] (row = reference, column = target)."""
    batch, num = centers.shape[:2]
    ref, tgt = all_pairs(num)
    return relative_targets(centers, sizes, ref, tgt, scale=scale).view(batch, num, num, -1)


def test_hand_computed_two_dimensional_example() -> None:
    centers = torch.tensor([[[10.0, 20.0], [30.0, 10.0], [14.0, 26.0]]])
    sizes = torch.tensor([[[10.0, 20.0], [5.0, 4.0], [8.0, 8.0]]])
    ref = torch.tensor([0, 1, 2, 1])
    tgt = torch.tensor([1, 0, 0, 2])
    expected_translation = torch.tensor(
        [
            [(30 - 10) / 10, (10 - 20) / 20],
            [(10 - 30) / 5, (20 - 10) / 4],
            [(10 - 14) / 8, (20 - 26) / 8],
            [(14 - 30) / 5, (26 - 10) / 4],
        ]
    )
    expected_scale = torch.tensor([[0.5, 0.2], [2.0, 5.0], [1.25, 2.5], [1.6, 2.0]])
    torch.testing.assert_close(
        relative_targets(centers, sizes, ref, tgt), expected_translation[None]
    )
    with_scale = relative_targets(centers, sizes, ref, tgt, scale=True)
    assert with_scale.shape == (1, 4, 4)
    torch.testing.assert_close(with_scale[..., :2], expected_translation[None])
    torch.testing.assert_close(with_scale[..., 2:], expected_scale[None])


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_zero_diagonal_and_unit_scale_diagonal(ndim: int) -> None:
    centers, sizes = _random_boxes(3, 6, ndim, seed=ndim)
    matrix = _matrix(centers, sizes, scale=True)
    assert matrix.shape == (3, 6, 6, 2 * ndim)
    diagonal = matrix.diagonal(dim1=1, dim2=2)  # [B, D, N]
    assert torch.equal(diagonal[:, :ndim], torch.zeros_like(diagonal[:, :ndim]))
    torch.testing.assert_close(diagonal[:, ndim:], torch.ones_like(diagonal[:, ndim:]))


def test_scale_ratios_are_reciprocal() -> None:
    centers, sizes = _random_boxes(2, 7, 2, seed=5)
    ratios = _matrix(centers, sizes, scale=True)[..., 2:]
    torch.testing.assert_close(ratios * ratios.transpose(1, 2), torch.ones_like(ratios))


def test_translations_are_antisymmetric_for_equal_extents() -> None:
    centers, _ = _random_boxes(2, 8, 2, seed=6)
    sizes = torch.tensor([4.0, 7.0]).expand(2, 8, 2)
    translations = _matrix(centers, sizes)
    torch.testing.assert_close(translations, -translations.transpose(1, 2))
    # with unequal extents the relation is Δ_ji = -Δ_ij * s_i / s_j instead
    centers, sizes = _random_boxes(2, 8, 2, seed=7)
    translations = _matrix(centers, sizes)
    ratio = sizes[:, :, None, :] / sizes[:, None, :, :]  # s_i / s_j
    torch.testing.assert_close(translations.transpose(1, 2), -translations * ratio)
    assert not torch.allclose(translations, -translations.transpose(1, 2))


def test_shared_and_per_example_index_forms_agree() -> None:
    centers, sizes = _random_boxes(4, 9, 2, seed=8)
    ref, tgt = sample_pairs(9, 20, generator=_generator(0))
    shared = relative_targets(centers, sizes, ref, tgt, scale=True)
    per_example = relative_targets(centers, sizes, ref.expand(4, -1), tgt.expand(4, -1), scale=True)
    assert shared.shape == (4, 20, 4)
    torch.testing.assert_close(shared, per_example)
    ref_b, tgt_b = sample_pairs(9, 20, batch_size=4, generator=_generator(1))
    per_example = relative_targets(centers, sizes, ref_b, tgt_b)
    for b in range(4):
        one = relative_targets(centers[b : b + 1], sizes[b : b + 1], ref_b[b], tgt_b[b])
        torch.testing.assert_close(per_example[b : b + 1], one)


def test_grid_neighbours_are_one_patch_apart() -> None:
    batch = GridSampler(2, (4, 5))(torch.randn(1, 1, 12, 15))  # 3 x 3 tiles
    ref = torch.tensor([4, 4, 4, 0])
    tgt = torch.tensor([5, 1, 3, 8])
    expected = torch.tensor([[0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [2.0, 2.0]])
    torch.testing.assert_close(
        relative_targets(batch.centers, batch.sizes, ref, tgt), expected[None]
    )


def test_offgrid_targets_follow_the_boxes() -> None:
    batch = OffGridSampler(1, 100, num_patches=40, scale_range=(0.5, 2.0))(
        torch.randn(2, 1, 3000), _generator(2)
    )
    ref, tgt = sample_pairs(40, 64, batch_size=2, generator=_generator(3))
    targets = relative_targets(batch.centers, batch.sizes, ref, tgt, scale=True)
    b = 1
    i, j = int(ref[b, 5]), int(tgt[b, 5])
    expected_shift = (batch.centers[b, j, 0] - batch.centers[b, i, 0]) / batch.sizes[b, i, 0]
    torch.testing.assert_close(targets[b, 5, 0], expected_shift)
    torch.testing.assert_close(targets[b, 5, 1], batch.sizes[b, j, 0] / batch.sizes[b, i, 0])
    assert targets.dtype == torch.float32
    assert float(targets[..., 0].abs().max()) > 1.0  # float, not truncated to integers
    assert not torch.equal(targets[..., 0], targets[..., 0].round())


def test_relative_targets_validation() -> None:
    centers, sizes = _random_boxes(2, 5, 2, seed=9)
    ref, tgt = torch.tensor([0, 1]), torch.tensor([2, 3])
    with pytest.raises(InputError, match=r"^sizes: expected the shape of centers"):
        relative_targets(centers, sizes[..., :1], ref, tgt)
    with pytest.raises(InputError, match=r"^sizes: expected the shape of centers"):
        relative_targets(centers, sizes[:, :4], ref, tgt)
    with pytest.raises(InputError, match=r"^centers: expected a floating point tensor"):
        relative_targets(centers[0], sizes[0], ref, tgt)
    with pytest.raises(InputError, match=r"^sizes: expected positive box extents"):
        relative_targets(centers, sizes.clone().fill_(0.0), ref, tgt)
    with pytest.raises(InputError, match=r"^ref: expected patch indices in \[0, 5\)"):
        relative_targets(centers, sizes, torch.tensor([0, 5]), tgt)
    with pytest.raises(InputError, match=r"^tgt: expected patch indices in \[0, 5\)"):
        relative_targets(centers, sizes, ref, torch.tensor([-1, 2]))
    with pytest.raises(InputError, match=r"^ref: expected an integer index tensor"):
        relative_targets(centers, sizes, ref.float(), tgt)
    with pytest.raises(InputError, match=r"^tgt: expected the shape of ref"):
        relative_targets(centers, sizes, ref, torch.tensor([1, 2, 3]))
    with pytest.raises(InputError, match=r"^ref: expected an index tensor \[K\] or \[B=2, K\]"):
        relative_targets(centers, sizes, ref.expand(3, -1), tgt.expand(3, -1))
    bad = centers.clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(InputError, match=r"^centers: expected only finite values"):
        relative_targets(bad, sizes, ref, tgt)


@pytest.mark.parametrize("batch_size", [None, 3])
def test_sample_pairs_without_replacement(batch_size) -> None:
    num, count = 10, 60
    ref, tgt = sample_pairs(num, count, batch_size=batch_size, generator=_generator(4))
    shape = (count,) if batch_size is None else (batch_size, count)
    assert ref.shape == tgt.shape == shape and ref.dtype == tgt.dtype == torch.long
    assert bool((ref != tgt).all())
    assert int(ref.min()) >= 0 and int(ref.max()) < num
    assert int(tgt.min()) >= 0 and int(tgt.max()) < num
    codes = (ref * num + tgt).reshape(-1, count)
    for row in codes:
        assert row.unique().numel() == count


def test_sample_pairs_exhausts_every_pair_then_replaces() -> None:
    num = 5
    ref, tgt = sample_pairs(num, num * (num - 1), generator=_generator(5))
    expected = {(i, j) for i in range(num) for j in range(num) if i != j}
    assert set(zip(ref.tolist(), tgt.tolist(), strict=True)) == expected
    ref, tgt = sample_pairs(num, 100, batch_size=2, generator=_generator(6))
    assert ref.shape == (2, 100) and bool((ref != tgt).all())
    assert int((ref * num + tgt)[0].unique().numel()) <= num * (num - 1)


def test_sample_pairs_is_uniform() -> None:
    counts = torch.zeros(3, 3)
    ref, tgt = sample_pairs(3, 2, batch_size=3000, generator=_generator(7))
    counts.index_put_((ref.flatten(), tgt.flatten()), torch.ones(ref.numel()), accumulate=True)
    assert float(counts.diagonal().sum()) == 0.0
    off_diagonal = counts[~torch.eye(3, dtype=torch.bool)] / ref.numel()
    torch.testing.assert_close(off_diagonal, torch.full((6,), 1 / 6), atol=0.02, rtol=0)


def test_sample_pairs_is_seeded() -> None:
    first = sample_pairs(12, 30, batch_size=2, generator=_generator(8))
    again = sample_pairs(12, 30, batch_size=2, generator=_generator(8))
    other = sample_pairs(12, 30, batch_size=2, generator=_generator(9))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not (torch.equal(first[0], other[0]) and torch.equal(first[1], other[1]))
    shared = sample_pairs(12, 30, generator=_generator(8))
    assert torch.equal(shared[0], sample_pairs(12, 30, generator=_generator(8))[0])


def test_sample_pairs_validation() -> None:
    with pytest.raises(InputError, match=r"^num_patches: expected an int >= 2"):
        sample_pairs(1, 4)
    with pytest.raises(InputError, match=r"^num_pairs: expected an int >= 1"):
        sample_pairs(4, 0)
    with pytest.raises(InputError, match=r"^batch_size: expected None or an int >= 1"):
        sample_pairs(4, 2, batch_size=0)


def test_all_pairs_row_major_with_diagonal() -> None:
    ref, tgt = all_pairs(3)
    assert ref.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert tgt.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    with pytest.raises(InputError, match=r"^num_patches: expected an int >= 1"):
        all_pairs(0)
