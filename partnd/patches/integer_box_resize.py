"""Anti-aliased resampling of whole-sample boxes on the CPU: a compiled kernel, or matrix products.

The result is :func:`partnd.patches.sampling.crop_and_resize`'s (the same triangle filter, edge
samples
repeated) up to float rounding, for boxes whose starts and extents are whole samples, the
default of :class:`partnd.patches.sampling.OffGridSampler`. It exists for speed on the CPU, where
the
general path's per-tap gathers move several times the output through memory. With a whole-sample
start, the filter taps of a box relative to its start depend only on its extent: one table per
dimension holds, for every extent the sampler can draw, the dense resampling matrix
``[P_d, span]`` over the samples the taps reach (:func:`extent_table`).

**The compiled kernel** (``method="taps"``, the default where numba is installed;
:mod:`partnd.patches.box_taps_kernel`) applies only the non-zero taps of those matrices, box by
box: it
copies the box's window (edge samples repeated), resamples every dimension but the last as
weighted sums of the 2-4 rows each output row's taps reach (contiguous runs of the later
dimensions and the channels), then weighs each output sample's taps along the last dimension.

**The matrix products** (``method="products"``, the path without numba):

* The input is moved channels-last and padded by repeating its edge samples, so that no tap is
  clamped and every box of one extent uses its extent's matrix unchanged.
* The later dimensions' extents fall into :data:`WIDTH_CLASSES` classes each; a box's window
  along such a dimension is its class's widest span (not the widest of all extents), which cuts
  the data every later step moves and multiplies.
* Dimension 0: per combination of classes, the boxes are grouped by their extent along dimension
  0 (in memory order within a group); each group's windows (the rows its taps reach, times the
  classes' windows of the later dimensions and the channels) are gathered and at once resampled
  by one matrix product with the extent's matrix.
* Every later dimension: one batched product of each box's matrix (looked up by its extent) with
  its partial result; the patches are put back in the boxes' original order at the end.
* The images go through in chunks whose largest intermediate result stays near
  :data:`CHUNK_ELEMENTS` values (one chunk for a batch of 52 ImageNet images).

Measured by ``python benchmarks/bench_sampler.py --repeats 15 --samplers-only`` (one thread,
process CPU time, the sampler on both paths and the authors' per-box crop and resize timed in
turns): at the ImageNet setting (196 boxes of 8-32 px in 224 x 224, P = 16) the sampler takes
0.62-0.71 ms an image with the kernel, 1.13-1.44 with the products, the authors' loop 20.7-21.9
(29-35x and 15-19x at batch 8 and 32); see ``docs/results/cost.md`` and ``docs/images.md``.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from partnd.patches.resampling import resampling_taps

__all__ = [
    "CHUNK_ELEMENTS",
    "ExtentTable",
    "extent_table",
    "resize_integer_boxes",
    "taps_kernel_available",
]

CHUNK_ELEMENTS = 1 << 24
"""Target size (values) of the largest intermediate result of one chunk of images (larger chunks
measured faster: fewer, larger operations)."""

WIDTH_CLASSES = 3
"""Classes of extents per later dimension, each with the window of its widest extent."""


@dataclass(frozen=True)
class ExtentTable:
    """Resampling matrices of one dimension for every whole-sample extent in a range.

    Attributes:
        low: Smallest extent covered.
        offsets: ``[E]`` long, first tap of each extent relative to the box start (``E = high -
            low + 1`` extents, ``offsets[e]`` for extent ``low + e``); may be negative.
        spans: ``[E]`` long, number of consecutive input samples the taps of each extent reach.
        matrices: ``[E, P, max(spans)]`` float64: row ``j`` holds the weights of output sample
            ``j`` over the samples ``start + offsets[e] + k``; columns past ``spans[e]`` are zero.
    """

    low: int
    offsets: Tensor
    spans: Tensor
    matrices: Tensor

    @property
    def width(self) -> int:
        """Columns of every matrix, the widest span."""
        return int(self.matrices.shape[-1])

    def padding(self, windows: Tensor) -> tuple[int, int]:
        """Samples to add before and after the input so that no window leaves it.

        Args:
            windows: ``[E]`` samples each extent's window takes from its first tap (at least
                :attr:`spans`).

        Returns:
            ``(before, after)``.
        """
        extents = torch.arange(self.low, self.low + len(self.offsets))
        reach = self.offsets + windows
        return max(0, -int(self.offsets.min())), max(0, int((reach - extents).max()))


@functools.lru_cache(maxsize=64)
def extent_table(out_size: int, low: int, high: int, antialias: bool) -> ExtentTable:
    """Dense resampling matrices for every whole-sample extent in ``[low, high]``.

    Built from :func:`partnd.patches.resampling.resampling_taps` on boxes that start far from the
    input's
    edges (no tap is clamped), in float64.

    Args:
        out_size: Output samples ``P``.
        low: Smallest extent (>= 1).
        high: Largest extent (>= low).
        antialias: Widen the filter when downsampling, as
        :func:`partnd.patches.sampling.crop_and_resize`.

    Returns:
        The :class:`ExtentTable`.
    """
    margin = math.ceil(high / out_size) + 2
    extents = torch.arange(low, high + 1, dtype=torch.float64)[None]
    starts = torch.full_like(extents, float(margin))
    index, weights = resampling_taps(
        starts, extents, out_size, high + 2 * margin, antialias, torch.float64
    )
    index, weights = index[:, 0] - margin, weights[:, 0]  # [K, E, P] relative to the start
    offsets = index[0, :, 0]
    spans = index[-1, :, -1] - offsets + 1
    columns = index - offsets[None, :, None]
    count = int(extents.shape[1])
    matrices = torch.zeros(count, out_size, int(spans.max()), dtype=torch.float64)
    rows = torch.arange(out_size).expand(count, -1)
    boxes = torch.arange(count)[:, None].expand(-1, out_size)
    for tap_columns, tap_weights in zip(columns, weights, strict=True):
        matrices.index_put_((boxes, rows, tap_columns), tap_weights, accumulate=True)
    return ExtentTable(low=low, offsets=offsets, spans=spans, matrices=matrices)


class _Workspace:
    """Buffers that every chunk reuses, kept between calls (fresh large allocations cost page
    faults)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype], Tensor] = {}

    def take(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> Tensor:
        """A tensor of ``shape`` on buffer ``name``, which grows when it is too small."""
        numel = math.prod(shape)
        buffer = self._buffers.get((name, dtype))
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(numel, dtype=dtype)
            self._buffers[(name, dtype)] = buffer
        return buffer[:numel].view(*shape)


_WORKSPACES = threading.local()


def _workspace() -> _Workspace:
    """This thread's workspace (a sampler may run in several threads)."""
    workspace = getattr(_WORKSPACES, "workspace", None)
    if workspace is None:
        workspace = _WORKSPACES.workspace = _Workspace()
    return workspace


def _pad_channels_last(x: Tensor, paddings: Sequence[tuple[int, int]], padded: Tensor) -> Tensor:
    """``x: [B, C, *L]`` into ``padded: [B, *(L_d + before_d + after_d), C]``, edges repeated.

    The copy into the middle moves the channels last; each dimension's margins are then filled
    from its edge samples over the whole extent of the others (margins included), so corners
    repeat the corner sample.
    """
    lengths = [int(length) for length in x.shape[2:]]
    middle = padded
    for d, (length, (before, _)) in enumerate(zip(lengths, paddings, strict=True)):
        middle = middle.narrow(1 + d, before, length)
    middle.copy_(x.movedim(1, -1))
    for d, (length, (before, after)) in enumerate(zip(lengths, paddings, strict=True)):
        axis = 1 + d
        if before:
            padded.narrow(axis, 0, before).copy_(padded.narrow(axis, before, 1))
        if after:
            edge = padded.narrow(axis, before + length - 1, 1)
            padded.narrow(axis, before + length, after).copy_(edge)
    return padded


@dataclass(frozen=True)
class _Layout:
    """How one kind of call (patch shape, extent ranges, filter, dtype) lays out its work.

    Attributes:
        tables: The :class:`ExtentTable` of every dimension.
        paddings: ``(before, after)`` samples of edge padding per dimension.
        buckets: Per later dimension ``d >= 1``: ``[E_d]`` long, the width class of each extent.
        widths: Per later dimension: the window (samples) of each width class, its widest span.
        matrices0: ``[E_0, width_0, P_0]`` dimension 0's matrices, transposed, in the compute dtype.
        later: Per later dimension and width class: ``[E_d, width, P_d]`` the matrices cut to the
            class's window, transposed, in the compute dtype.
    """

    tables: tuple[ExtentTable, ...]
    paddings: tuple[tuple[int, int], ...]
    buckets: tuple[Tensor, ...]
    widths: tuple[tuple[int, ...], ...]
    matrices0: Tensor
    later: tuple[tuple[Tensor, ...], ...]

    @functools.cached_property
    def lows(self) -> Tensor:
        """``[ndim]`` long, the smallest extent of every dimension."""
        return torch.tensor([table.low for table in self.tables])

    @functools.cached_property
    def combinations(self) -> list[tuple[int, ...]]:
        """Every combination of the later dimensions' width classes, in the order of their key
        ``sum_d class_d * radix[d]``."""
        return list(itertools.product(*(range(len(widths)) for widths in self.widths)))

    @functools.cached_property
    def radix(self) -> list[int]:
        """Weight of each later dimension's width class in a combination's key."""
        classes = [len(widths) for widths in self.widths]
        return [math.prod(classes[d + 1 :]) for d in range(len(classes))]

    def window_shape(self, combination: Sequence[int]) -> tuple[int, ...]:
        """The later dimensions' window of a combination of width classes."""
        return tuple(self.widths[d][k] for d, k in enumerate(combination))


@functools.lru_cache(maxsize=64)
def _layout(
    patch_shape: tuple[int, ...],
    size_bounds: tuple[tuple[int, int], ...],
    antialias: bool,
    dtype: torch.dtype,
    width_classes: int,
) -> _Layout:
    """The :class:`_Layout` of a call (cached: the sampler makes the same call every step)."""
    tables = tuple(
        extent_table(int(p), int(low), int(high), antialias)
        for p, (low, high) in zip(patch_shape, size_bounds, strict=True)
    )
    buckets: list[Tensor] = []
    widths: list[tuple[int, ...]] = []
    later: list[tuple[Tensor, ...]] = []
    for table in tables[1:]:
        spans = table.spans
        classes = torch.tensor_split(torch.arange(len(spans)), min(width_classes, len(spans)))
        bucket = torch.empty(len(spans), dtype=torch.long)
        class_widths: list[int] = []
        for k, members in enumerate(classes):
            bucket[members] = k
            class_widths.append(int(spans[members].max()))
        buckets.append(bucket)
        widths.append(tuple(class_widths))
        transposed = table.matrices.transpose(1, 2).to(dtype)
        later.append(tuple(transposed[:, :width].contiguous() for width in class_widths))
    paddings = [tables[0].padding(tables[0].spans)]
    for table, bucket, class_window in zip(tables[1:], buckets, widths, strict=True):
        paddings.append(table.padding(torch.tensor(class_window)[bucket]))
    return _Layout(
        tables=tables,
        paddings=tuple(paddings),
        buckets=tuple(buckets),
        widths=tuple(widths),
        matrices0=tables[0].matrices.transpose(1, 2).to(dtype).contiguous(),
        later=tuple(later),
    )


@dataclass(frozen=True)
class _TapTables:
    """The non-zero filter taps of every dimension and extent, for the compiled kernel.

    Every output sample of one extent gets the same number of taps, the most any of them has (the
    others padded with zero weights, their first tap moved back where the window would end
    first): the kernel then runs the same count of taps for every sample of a box.

    Attributes:
        offsets: ``[n, E]`` long, first sample of each extent's window relative to a box's start
            (``E``: the most extents of any dimension; rows past a dimension's extents unused).
        spans: ``[n, E]`` int64, samples of each extent's window.
        first: ``[n, E, P]`` int64, first tap of each output sample in the window (``P``: the
            largest patch size).
        taps: ``[n, E]`` int64, taps of every output sample of an extent.
        weights: ``[n, E, P, K]`` the taps' weights in the compute dtype (``K``: the most taps).
        window: Values of the largest window of one channel (``prod_d max(spans[d])``).
    """

    offsets: Tensor
    spans: np.ndarray
    first: np.ndarray
    taps: np.ndarray
    weights: np.ndarray
    window: int


@functools.lru_cache(maxsize=64)
def _tap_tables(
    patch_shape: tuple[int, ...],
    size_bounds: tuple[tuple[int, int], ...],
    antialias: bool,
    dtype: torch.dtype,
) -> _TapTables:
    """The non-zero entries of a call's :func:`extent_table` matrices (cached like `_layout`)."""
    tables = [
        extent_table(p, low, high, antialias)
        for p, (low, high) in zip(patch_shape, size_bounds, strict=True)
    ]
    ndim, extents, patch = len(tables), max(len(t.offsets) for t in tables), max(patch_shape)
    most = max(int((t.matrices != 0).sum(-1).max()) for t in tables)
    offsets = torch.zeros(ndim, extents, dtype=torch.long)
    spans = torch.ones(ndim, extents, dtype=torch.long)
    first = torch.zeros(ndim, extents, patch, dtype=torch.long)
    taps = torch.ones(ndim, extents, dtype=torch.long)
    weights = torch.zeros(ndim, extents, patch, most, dtype=torch.float64)
    for d, table in enumerate(tables):
        count, size = len(table.offsets), int(table.matrices.shape[1])
        columns = torch.arange(table.width).expand_as(table.matrices)
        nonzero = table.matrices != 0
        low = torch.where(nonzero, columns, table.width).amin(-1)  # [E_d, P_d]
        high = torch.where(nonzero, columns, -1).amax(-1)
        extent_taps = (high - low + 1).amax(-1)  # [E_d]
        start = torch.minimum(low, (table.spans - extent_taps)[:, None])
        k = torch.arange(most)
        tap_columns = (start[..., None] + k).clamp_(max=table.width - 1)  # [E_d, P_d, K]
        tap_weights = table.matrices.gather(-1, tap_columns)
        weights[d, :count, :size] = tap_weights.where(k < extent_taps[:, None, None], 0.0)
        offsets[d, :count], spans[d, :count], taps[d, :count] = (
            table.offsets,
            table.spans,
            extent_taps,
        )
        first[d, :count, :size] = start
    return _TapTables(
        offsets=offsets,
        spans=spans.numpy(),
        first=first.numpy(),
        taps=taps.numpy(),
        weights=weights.to(dtype).numpy(),
        window=math.prod(int(t.spans.max()) for t in tables),
    )


@functools.cache
def _kernel() -> Callable[..., None] | None:
    """:func:`partnd.patches.box_taps_kernel.resample_boxes`, or ``None`` where numba is not
    installed
    (imported on first use: numba takes a fraction of a second to import)."""
    try:
        from partnd.patches.box_taps_kernel import resample_boxes
    except ImportError:
        return None
    return resample_boxes


def taps_kernel_available() -> bool:
    """Whether the compiled kernel (``method="taps"``) can run: numba is installed."""
    return _kernel() is not None


def _resize_by_taps(
    kernel: Callable[..., None],
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: tuple[int, ...],
    size_bounds: tuple[tuple[int, int], ...],
    antialias: bool,
    dtype: torch.dtype,
) -> Tensor:
    """:func:`resize_integer_boxes` by the compiled kernel: the non-zero taps alone, box by box.

    Returns:
        ``[B, N, C, *patch_shape]`` patches in the compute ``dtype``.
    """
    tables = _tap_tables(patch_shape, size_bounds, antialias, dtype)
    ndim = len(patch_shape)
    batch, channels, num_boxes = int(x.shape[0]), int(x.shape[1]), int(starts.shape[1])
    count = batch * num_boxes
    extents = sizes.reshape(count, ndim).long() - torch.tensor([low for low, _ in size_bounds])
    positions = starts.reshape(count, ndim).long() + tables.offsets[torch.arange(ndim), extents]
    out = torch.empty(count, channels * math.prod(patch_shape), dtype=dtype)
    workspace = _workspace()
    kernel(
        x.detach().to(dtype).contiguous().view(-1).numpy(),
        np.array(x.shape[2:], dtype=np.int64),
        positions.numpy(),
        extents.numpy(),
        num_boxes,
        tables.spans,
        tables.first,
        tables.taps,
        tables.weights,
        np.array(patch_shape, dtype=np.int64),
        out.numpy(),
        workspace.take("window", (channels * tables.window,), dtype).numpy(),
        workspace.take("partial", (channels * tables.window,), dtype).numpy(),
    )
    return out.view(batch, num_boxes, channels, *patch_shape)


def resize_integer_boxes(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: Sequence[int],
    size_bounds: Sequence[tuple[int, int]],
    antialias: bool = True,
    method: Literal["auto", "taps", "products"] = "auto",
) -> Tensor:
    """Cut whole-sample boxes out of ``x`` and resample each one to the patch size.

    Same contract and result as :func:`partnd.patches.sampling.crop_and_resize` (up to float
    rounding)
    for boxes inside the input with whole-sample ``starts`` and ``sizes``; unvalidated and not
    differentiable (a sampler's call: the patches never require grad).

    Args:
        x: ``[B, C, *spatial]`` floating point input on the CPU.
        starts: ``[B, N, ndim]`` whole-sample box starts.
        sizes: ``[B, N, ndim]`` whole-sample box extents, in ``size_bounds`` per dimension.
        patch_shape: Output samples ``P_d`` per dimension.
        size_bounds: ``(low, high)`` extents per dimension, the range ``sizes`` is drawn from (sizes
            the cached tables).
        antialias: Widen the filter when downsampling.
        method: ``"taps"``: the compiled kernel (numba, CPU tensors); ``"products"``: the dense
            matrix products grouped by extent, in chunks whose intermediate results stay near
            :data:`CHUNK_ELEMENTS` values; ``"auto"``: ``"taps"`` where it can run, else
            ``"products"``.

    Returns:
        ``[B, N, C, *patch_shape]`` patches with ``x``'s dtype.

    Raises:
        ValueError: ``method`` is none of the three, or ``"taps"`` for a tensor off the CPU.
        ImportError: ``method="taps"`` without numba.
    """
    if method not in ("auto", "taps", "products"):
        raise ValueError(f"method must be 'auto', 'taps' or 'products', got {method!r}")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    shape = tuple(int(p) for p in patch_shape)
    bounds = tuple((int(low), int(high)) for low, high in size_bounds)
    kernel = None if method == "products" else _kernel()
    if method == "taps":
        if kernel is None:
            raise ImportError("method='taps' needs numba: pip install 'partnd[vision]'")
        if x.device.type != "cpu":
            raise ValueError(f"method='taps' runs on CPU tensors, got x on {x.device}")
    if kernel is not None and x.device.type == "cpu":
        patches = _resize_by_taps(kernel, x, starts, sizes, shape, bounds, bool(antialias), dtype)
        return patches.to(x.dtype)
    layout = _layout(shape, bounds, bool(antialias), dtype, WIDTH_CLASSES)
    batch, channels, num_boxes = int(x.shape[0]), int(x.shape[1]), int(starts.shape[1])
    out = x.new_empty((batch, num_boxes, channels, *patch_shape), dtype=dtype)
    windows = math.prod(max(widths) for widths in layout.widths)
    per_image = num_boxes * windows * channels * int(patch_shape[0])
    chunk = max(1, CHUNK_ELEMENTS // per_image)
    workspace = _workspace()
    with torch.no_grad():
        for first in range(0, batch, chunk):
            images = slice(first, first + chunk)
            _resize_chunk(x[images], starts[images], sizes[images], layout, workspace, out[images])
    return out.to(x.dtype)


def _resize_chunk(
    x: Tensor, starts: Tensor, sizes: Tensor, layout: _Layout, workspace: _Workspace, out: Tensor
) -> None:
    """:func:`resize_integer_boxes` of the images of one chunk, into ``out: [B, N, C, *P]`` (in
    the layout's compute dtype).

    The boxes are ordered by the width classes of their later dimensions, then by their extent
    along dimension 0. Per combination of width classes: per extent of dimension 0, one gather
    of its boxes' windows (the extent's span of rows times the classes' window of the later
    dimensions and the channels) and one matrix product with the extent's matrix; then one
    batched product per later dimension with each box's matrix. The patches are put back in place
    at the end.
    """
    batch, channels = int(x.shape[0]), int(x.shape[1])
    ndim = x.dim() - 2
    num_boxes = int(starts.shape[1])
    count = batch * num_boxes
    tables, paddings = layout.tables, layout.paddings
    lengths = [b + int(n) + a for n, (b, a) in zip(x.shape[2:], paddings, strict=True)]
    padded = _pad_channels_last(
        x, paddings, workspace.take("padded", (batch, *lengths, channels), out.dtype)
    )
    strides = [math.prod(lengths[d + 1 :]) for d in range(ndim)]  # in units of C samples

    extents = (sizes.reshape(count, ndim).long() - layout.lows).T
    corner = torch.arange(count).div_(num_boxes, rounding_mode="floor").mul_(math.prod(lengths))
    for d, table in enumerate(tables):
        first = starts[..., d].reshape(count).long() + table.offsets[extents[d]] + paddings[d][0]
        corner += first * strides[d]
    num_extents = len(tables[0].offsets)
    key = extents[0].clone()
    for d in range(1, ndim):  # combination of width classes, then the extent along dimension 0
        key += layout.buckets[d - 1][extents[d]] * (layout.radix[d - 1] * num_extents)
    counts = torch.bincount(key, minlength=len(layout.combinations) * num_extents)
    # each group in memory order: its gathers then sweep the input forwards
    order = torch.argsort(key * (int(corner.max()) + 1) + corner)
    corners = corner[order]
    later_extents = extents[1:, order]
    row_steps = torch.arange(int(tables[0].spans.max())) * strides[0]
    ordered = workspace.take("ordered", (count, out[0, 0].numel()), out.dtype)
    done = 0
    for classes, group_counts in zip(
        layout.combinations, counts.view(-1, num_extents).tolist(), strict=True
    ):
        total = sum(group_counts)
        if not total:
            continue
        boxes = slice(done, done + total)
        window = (*layout.window_shape(classes), channels)
        later_size = math.prod(window)
        # [boxes, S_1, ..., S_{ndim-1}, C, P_0]: dimension 0 resampled, the later ones windowed
        result = (
            ordered[boxes]
            if ndim == 1
            else workspace.take("partial", (total, later_size * int(out.shape[3])), out.dtype)
        )
        first_box = done
        for e, group_count in enumerate(group_counts):
            if not group_count:
                continue
            span = int(tables[0].spans[e])
            rows = workspace.take("rows", (span, group_count), torch.long)
            torch.add(
                corners[first_box : first_box + group_count], row_steps[:span, None], out=rows
            )
            gathered = workspace.take("windows", (span * group_count, *window), out.dtype)
            torch.index_select(_windows(padded, window, strides), 0, rows.view(-1), out=gathered)
            into = result[first_box - done : first_box - done + group_count].view(
                -1, int(out.shape[3])
            )
            torch.mm(gathered.view(span, -1).t(), layout.matrices0[e, :span], out=into)
            first_box += group_count
        for d in range(1, ndim):  # [boxes, S_d, ..., S_{ndim-1}, C, P_0, ..., P_{d-1}]
            matrices = layout.later[d - 1][classes[d - 1]]
            box_matrices = workspace.take(f"matrices{d}", (total, *matrices.shape[1:]), out.dtype)
            torch.index_select(matrices, 0, later_extents[d - 1, boxes], out=box_matrices)
            later = result.view(total, matrices.shape[1], -1).transpose(1, 2)
            shape = (*later.shape[:2], int(matrices.shape[2]))
            step = ordered[boxes] if d == ndim - 1 else workspace.take(f"step{d}", shape, out.dtype)
            result = torch.bmm(later, box_matrices, out=step.view(shape))  # P_d joins the end
        done += total
    # [boxes, C, P_0, ..., P_{ndim-1}] back in place
    torch.index_select(ordered, 0, torch.argsort(order), out=out.view(count, -1))


def _windows(padded: Tensor, window: Sequence[int], strides: Sequence[int]) -> Tensor:
    """Every window of shape ``window = (S_1, ..., S_{ndim-1}, C)`` in ``padded: [B, *L, C]``, as
    a view ``[positions, *window]`` indexed by the position (in units of C samples) of its first
    sample."""
    channels = int(padded.shape[-1])
    window_strides = [s * channels for s in strides[1:]] + [1]
    extent = sum((w - 1) * s for w, s in zip(window, window_strides, strict=True)) + 1
    positions = (padded.numel() - extent) // channels + 1
    return padded.view(-1).as_strided((positions, *window), (channels, *window_strides))
