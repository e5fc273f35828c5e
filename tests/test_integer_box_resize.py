"""Tests for partnd.patches.integer_box_resize: whole-sample boxes on the CPU, equal to
crop_and_resize."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
import torch.nn.functional as F

import partnd.patches.integer_box_resize as integer_box_resize
from partnd.patches.integer_box_resize import (
    _pad_channels_last,
    extent_table,
    resize_integer_boxes,
    taps_kernel_available,
)
from partnd.patches.sampling import OffGridSampler, crop_and_resize

needs_numba = pytest.mark.skipif(not taps_kernel_available(), reason="numba is not installed")
Method = Literal["taps", "products"]
METHODS = [pytest.param("taps", marks=needs_numba), "products"]

CASES = {  # ndim: (spatial, patch, size bounds)
    1: ((300,), (10,), [(3, 40)]),
    2: ((40, 33), (5, 4), [(2, 13), (1, 11)]),
    3: ((17, 12, 15), (3, 4, 2), [(1, 9), (2, 12), (1, 4)]),
}


def _integer_boxes(
    spatial: tuple[int, ...], bounds: list[tuple[int, int]], batch: int, count: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random whole-sample boxes inside ``spatial``, the first ones touching every edge."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.stack(
        [torch.randint(low, high + 1, (batch, count), generator=generator) for low, high in bounds],
        dim=-1,
    ).double()
    lengths = torch.tensor(spatial, dtype=torch.float64)
    starts = torch.rand(batch, count, len(spatial), generator=generator) * (lengths - sizes + 1)
    starts = starts.floor()
    starts[:, 0] = 0.0  # at the lower edges
    starts[:, 1] = lengths - sizes[:, 1]  # at the upper edges
    return starts, sizes


@pytest.mark.parametrize(
    ("method", "classes"),
    [pytest.param("taps", 3, marks=needs_numba), ("products", 1), ("products", 3)],
)
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_equals_crop_and_resize(
    ndim: int, antialias: bool, method: Method, classes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every box equals the general path: the compiled kernel, and the products with one window
    for all extents of a later dimension or one per width class (boxes of several combinations
    of classes in one call)."""
    monkeypatch.setattr(integer_box_resize, "WIDTH_CLASSES", classes)
    spatial, patch, bounds = CASES[ndim]
    x = torch.randn(3, 2, *spatial, dtype=torch.float64)
    starts, sizes = _integer_boxes(spatial, bounds, 3, 60, seed=ndim)
    expected = crop_and_resize(x, starts, sizes, patch, antialias=antialias)
    patches = resize_integer_boxes(x, starts, sizes, patch, bounds, antialias, method=method)
    assert patches.shape == expected.shape and patches.dtype == torch.float64
    torch.testing.assert_close(patches, expected, rtol=0, atol=1e-12)


@needs_numba
@pytest.mark.parametrize("batch", [1, 8, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_equals_the_products(batch: int, dtype: torch.dtype) -> None:
    """Both methods and the general path agree at the batches the benchmark times, with odd
    patch sizes and extents (up- and downsampled, on every edge), three channels, both dtypes."""
    spatial, patch, bounds = (23, 37), (5, 7), [(3, 11), (4, 17)]
    x = torch.randn(batch, 3, *spatial, dtype=dtype)
    starts, sizes = _integer_boxes(spatial, bounds, batch, 9, seed=batch)
    expected = crop_and_resize(x.double(), starts, sizes, patch)
    taps = resize_integer_boxes(x, starts, sizes, patch, bounds, method="taps")
    products = resize_integer_boxes(x, starts, sizes, patch, bounds, method="products")
    assert taps.dtype == products.dtype == dtype and taps.shape == expected.shape
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(taps, products, rtol=0, atol=tolerance)
    torch.testing.assert_close(taps.double(), expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("method", METHODS)
def test_float32_is_closer_to_float64_than_the_gather_path(method: Method) -> None:
    """Taps relative to the start are exact at any start; the gather path rounds at large ones."""
    x = torch.randn(2, 3, 3000, dtype=torch.float64)
    starts, sizes = _integer_boxes((3000,), [(3, 40)], 2, 80, seed=5)
    exact = crop_and_resize(x, starts, sizes, 10)
    ours = resize_integer_boxes(
        x.float(), starts.float(), sizes.float(), (10,), [(3, 40)], method=method
    )
    gather = crop_and_resize(x.float(), starts.float(), sizes.float(), 10)
    assert ours.dtype == torch.float32
    ours_error = float((ours.double() - exact).abs().max())
    assert ours_error < 1e-5
    assert ours_error <= float((gather.double() - exact).abs().max())


@pytest.mark.parametrize("method", METHODS)
def test_half_precision_input_keeps_its_dtype(method: Method) -> None:
    x = torch.randn(2, 3, 24, 20)
    starts, sizes = _integer_boxes((24, 20), [(2, 8), (2, 8)], 2, 16, seed=6)
    expected = crop_and_resize(x, starts.float(), sizes.float(), 4)
    patches = resize_integer_boxes(
        x.bfloat16(), starts, sizes, (4, 4), [(2, 8), (2, 8)], method=method
    )
    assert patches.dtype == torch.bfloat16
    torch.testing.assert_close(patches.float(), expected, rtol=0, atol=0.05)


@pytest.mark.parametrize("method", METHODS)
def test_patches_never_require_grad(method: Method) -> None:
    """A sampler's call: the input may require grad, the patches are the same and detached."""
    spatial, patch, bounds = CASES[2]
    x = torch.randn(2, 2, *spatial)
    starts, sizes = _integer_boxes(spatial, bounds, 2, 10, seed=8)
    expected = resize_integer_boxes(x, starts, sizes, patch, bounds, method=method)
    patches = resize_integer_boxes(x.requires_grad_(), starts, sizes, patch, bounds, method=method)
    assert not patches.requires_grad and patches.grad_fn is None
    assert torch.equal(patches, expected)


def test_method_falls_back_to_the_products_without_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    spatial, patch, bounds = CASES[2]
    x = torch.randn(2, 2, *spatial)
    starts, sizes = _integer_boxes(spatial, bounds, 2, 10, seed=9)
    products = resize_integer_boxes(x, starts, sizes, patch, bounds, method="products")
    monkeypatch.setattr(integer_box_resize, "_kernel", lambda: None)  # as if numba were missing
    assert torch.equal(resize_integer_boxes(x, starts, sizes, patch, bounds), products)
    with pytest.raises(ImportError, match="needs numba"):
        resize_integer_boxes(x, starts, sizes, patch, bounds, method="taps")


def test_method_is_checked() -> None:
    spatial, patch, bounds = CASES[1]
    x = torch.randn(1, 1, *spatial)
    starts, sizes = _integer_boxes(spatial, bounds, 1, 4, seed=10)
    with pytest.raises(ValueError, match="'auto', 'taps' or 'products', got 'dense'"):
        resize_integer_boxes(x, starts, sizes, patch, bounds, method="dense")  # type: ignore[arg-type]


@needs_numba
def test_kernel_runs_on_the_cpu_only() -> None:
    spatial, patch, bounds = CASES[1]
    x = torch.randn(1, 1, *spatial, device="meta")
    starts, sizes = _integer_boxes(spatial, bounds, 1, 4, seed=10)
    with pytest.raises(ValueError, match="runs on CPU tensors, got x on meta"):
        resize_integer_boxes(x, starts, sizes, patch, bounds, method="taps")


def test_chunks_give_the_same_patches(monkeypatch: pytest.MonkeyPatch) -> None:
    spatial, patch, bounds = CASES[2]
    x = torch.randn(7, 2, *spatial)
    starts, sizes = _integer_boxes(spatial, bounds, 7, 30, seed=7)
    whole = resize_integer_boxes(x, starts, sizes, patch, bounds, method="products")
    monkeypatch.setattr(integer_box_resize, "CHUNK_ELEMENTS", 1)  # one image per chunk
    chunked = resize_integer_boxes(x, starts, sizes, patch, bounds, method="products")
    assert torch.equal(chunked, whole)


def test_extent_table_known_values() -> None:
    identity = extent_table(4, 4, 4, True)
    assert identity.offsets.tolist() == [0]
    torch.testing.assert_close(identity.matrices[0, :, :4], torch.eye(4, dtype=torch.float64))
    # extent 2P anti-aliased: support 2, taps at distances 1.5, 0.5, 0.5, 1.5 from each centre
    table = extent_table(4, 2, 8, True)
    double = table.matrices[8 - 2]
    assert int(table.offsets[8 - 2]) == -1 and int(table.spans[8 - 2]) == 10
    for j in range(4):
        row = torch.zeros(table.width, dtype=torch.float64)
        row[2 * j : 2 * j + 4] = torch.tensor([1, 3, 3, 1], dtype=torch.float64) / 8
        torch.testing.assert_close(double[j], row)
    # without anti-aliasing: plain linear interpolation, two taps of one half
    plain = extent_table(4, 8, 8, False).matrices[0]
    for j in range(4):
        assert plain[j, 2 * j].item() == plain[j, 2 * j + 1].item() == 0.5
        assert plain[j].count_nonzero().item() == 2
    # every row of every extent sums to one; no weight past an extent's span
    assert torch.allclose(table.matrices.sum(-1), torch.ones(7, 4, dtype=torch.float64))
    for e, span in enumerate(table.spans.tolist()):
        assert not table.matrices[e, :, span:].any()


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_padding_repeats_the_edges(ndim: int) -> None:
    x = torch.randn(2, 3, *[5, 6, 4][:ndim])
    paddings = [(2, 3), (0, 4), (1, 1)][:ndim]
    lengths = [b + n + a for n, (b, a) in zip(x.shape[2:], paddings, strict=True)]
    padded = _pad_channels_last(x, paddings, torch.empty(2, *lengths, 3, dtype=torch.float64))
    flat = [side for before, after in reversed(paddings) for side in (before, after)]
    expected = F.pad(x, flat, mode="replicate").movedim(1, -1).double()
    assert padded.dtype == torch.float64
    torch.testing.assert_close(padded, expected, rtol=0, atol=0)


def test_off_grid_sampler_takes_this_path_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[tuple[int, int]]] = []

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(list(args[4]))  # type: ignore[call-overload]
        return resize_integer_boxes(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("partnd.patches.sampling.resize_integer_boxes", spy)
    x = torch.randn(2, 3, 40, 36)
    generator = torch.Generator().manual_seed(3)
    batch = OffGridSampler(2, (8, 6), 30, scale_range=(0.5, 2.0))(x, generator)
    assert calls == [[(4, 16), (3, 12)]]
    expected = crop_and_resize(x, batch.starts, batch.sizes, (8, 6))
    torch.testing.assert_close(batch.patches, expected, rtol=0, atol=1e-5)
    OffGridSampler(2, (8, 6), 30)(x, generator)  # fixed size: exact slices
    OffGridSampler(2, (8, 6), 30, scale_range=(0.5, 2.0), integer_boxes=False)(x, generator)
    assert len(calls) == 1


def test_off_grid_sampler_extents_stay_whole_and_positive() -> None:
    """Rounding can leave no whole extent in [a P, b P]; boxes then take the largest, at least 1."""
    x = torch.randn(2, 1, 20, 20)
    generator = torch.Generator().manual_seed(0)
    inverted = OffGridSampler(2, 3, 10, scale_range=(0.5, 0.55))(x, generator)  # [1.5, 1.65]
    assert torch.equal(inverted.sizes, torch.ones_like(inverted.sizes))
    tiny = OffGridSampler(2, 1, 10, scale_range=(0.1, 0.5))(x, generator)  # [0.1, 0.5]
    assert torch.equal(tiny.sizes, torch.ones_like(tiny.sizes))
    torch.testing.assert_close(
        tiny.patches, crop_and_resize(x, tiny.starts, tiny.sizes, 1), rtol=0, atol=1e-6
    )
