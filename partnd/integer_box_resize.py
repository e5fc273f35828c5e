"""Anti-aliased resampling of whole-sample boxes on the CPU, by matrix products grouped by extent.

The result is :func:`partnd.sampling.crop_and_resize`'s (the same triangle filter, edge samples
repeated) up to float rounding, for boxes whose starts and extents are whole samples, the
default of :class:`partnd.sampling.OffGridSampler`. It exists for speed on the CPU, where the
general path's per-tap gathers move several times the output through memory:

* With a whole-sample start, the filter taps of a box relative to its start depend only on its
  extent. One table per dimension holds, for every extent the sampler can draw, the dense
  resampling matrix ``[P_d, span]`` over the samples the taps reach.
* The input is moved channels-last and padded by repeating its edge samples, so that no tap is
  clamped and every box of one extent uses its extent's matrix unchanged.
* Dimension 0: the boxes are grouped by their extent along it; each group's windows (the rows its
  taps reach, times the window of the later dimensions and the channels) are gathered once and
  resampled by one matrix product with the shared matrix.
* Every later dimension: one batched product of each box's matrix (looked up by its extent) with
  its partial result; the results leave in the boxes' original order.
* The images go through in chunks whose largest intermediate result stays near
  :data:`CHUNK_ELEMENTS` values, so it stays in cache and the allocator reuses its memory.

Measured by ``benchmarks/bench_sampler.py`` (see ``docs/images.md``).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from partnd.resampling import resampling_taps

__all__ = ["CHUNK_ELEMENTS", "ExtentTable", "extent_table", "resize_integer_boxes"]

CHUNK_ELEMENTS = 1 << 21
"""Target size (values) of the largest intermediate result of one chunk of images."""


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

    def padding(self, fixed_width: bool) -> tuple[int, int]:
        """Samples to add before and after the input so that no window leaves it.

        Args:
            fixed_width: Windows take :attr:`width` samples for every extent (else their own span).

        Returns:
            ``(before, after)``.
        """
        extents = torch.arange(self.low, self.low + len(self.offsets))
        reach = self.offsets + (self.width if fixed_width else self.spans)
        return max(0, -int(self.offsets.min())), max(0, int((reach - extents).max()))


@functools.lru_cache(maxsize=64)
def extent_table(out_size: int, low: int, high: int, antialias: bool) -> ExtentTable:
    """Dense resampling matrices for every whole-sample extent in ``[low, high]``.

    Built from :func:`partnd.resampling.resampling_taps` on boxes that start far from the input's
    edges (no tap is clamped), in float64.

    Args:
        out_size: Output samples ``P``.
        low: Smallest extent (>= 1).
        high: Largest extent (>= low).
        antialias: Widen the filter when downsampling, as :func:`partnd.sampling.crop_and_resize`.

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


def resize_integer_boxes(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: Sequence[int],
    size_bounds: Sequence[tuple[int, int]],
    antialias: bool = True,
) -> Tensor:
    """Cut whole-sample boxes out of ``x`` and resample each one to the patch size.

    Same contract and result as :func:`partnd.sampling.crop_and_resize` (up to float rounding)
    for boxes inside the input with whole-sample ``starts`` and ``sizes``; unvalidated and not
    differentiable (a sampler's call). The images are processed in chunks whose intermediate
    results stay near :data:`CHUNK_ELEMENTS` values (in cache, and reused by the allocator).

    Args:
        x: ``[B, C, *spatial]`` floating point input on the CPU.
        starts: ``[B, N, ndim]`` whole-sample box starts.
        sizes: ``[B, N, ndim]`` whole-sample box extents, in ``size_bounds`` per dimension.
        patch_shape: Output samples ``P_d`` per dimension.
        size_bounds: ``(low, high)`` extents per dimension, the range ``sizes`` is drawn from (sizes
            the cached tables).
        antialias: Widen the filter when downsampling.

    Returns:
        ``[B, N, C, *patch_shape]`` patches with ``x``'s dtype.
    """
    tables = [
        extent_table(int(patch_shape[d]), int(low), int(high), antialias)
        for d, (low, high) in enumerate(size_bounds)
    ]
    batch, channels, num_boxes = int(x.shape[0]), int(x.shape[1]), int(starts.shape[1])
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = x.new_empty((batch, num_boxes, channels, *patch_shape), dtype=dtype)
    windows = math.prod(table.width for table in tables[1:])
    per_image = num_boxes * windows * channels * int(patch_shape[0])
    chunk = max(1, CHUNK_ELEMENTS // per_image)
    matrices = [table.matrices.to(dtype) for table in tables]
    workspace = _workspace()
    with torch.no_grad():
        for first in range(0, batch, chunk):
            images = slice(first, first + chunk)
            _resize_chunk(
                x[images],
                starts[images],
                sizes[images],
                patch_shape,
                tables,
                matrices,
                workspace,
                out[images],
            )
    return out.to(x.dtype)


def _resize_chunk(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: Sequence[int],
    tables: Sequence[ExtentTable],
    matrices: Sequence[Tensor],
    workspace: _Workspace,
    out: Tensor,
) -> None:
    """:func:`resize_integer_boxes` of the images of one chunk, into ``out: [B, N, C, *P]``.

    ``matrices`` are the tables' matrices and ``out`` is in the dtype it computes in (float32 or
    float64), the workspace's.
    """
    batch, channels = int(x.shape[0]), int(x.shape[1])
    ndim = x.dim() - 2
    num_boxes = int(starts.shape[1])
    count = batch * num_boxes
    paddings = [table.padding(fixed_width=d > 0) for d, table in enumerate(tables)]
    lengths = [b + int(n) + a for n, (b, a) in zip(x.shape[2:], paddings, strict=True)]
    padded = _pad_channels_last(
        x, paddings, workspace.take("padded", (batch, *lengths, channels), out.dtype)
    )
    strides = [math.prod(lengths[d + 1 :]) for d in range(ndim)]  # in units of C samples
    widths = [table.width for table in tables]

    extent_index = (sizes.reshape(count, ndim).long() - torch.tensor([t.low for t in tables])).T
    box_starts = starts.reshape(count, ndim).long().T
    corner = torch.arange(batch).repeat_interleave(num_boxes) * math.prod(lengths)
    for d, table in enumerate(tables):
        first = box_starts[d] + table.offsets[extent_index[d]] + paddings[d][0]
        corner = corner + first * strides[d]
    order = torch.argsort(extent_index[0], stable=True)
    later_extents = [extent_index[d][order] for d in range(1, ndim)]
    groups = torch.bincount(extent_index[0], minlength=len(tables[0].offsets)).tolist()

    window = [*widths[1:], channels]
    window_strides = [s * channels for s in strides[1:]] + [1]
    extent = sum((w - 1) * s for w, s in zip(window, window_strides, strict=True)) + 1
    positions = (padded.numel() - extent) // channels + 1
    windows = padded.view(-1).as_strided((positions, *window), (channels, *window_strides))

    later_size = math.prod(window)
    spans = tables[0].spans.tolist()
    # window row r of the i-th box (in extent order) at position rows[r, i]
    rows = corner[order][None] + torch.arange(max(spans))[:, None] * strides[0]
    # [boxes, S_1, ..., S_{ndim-1}, C, P_0]: dimension 0 resampled, the later ones windowed
    partial = workspace.take("partial", (count, *window, int(patch_shape[0])), out.dtype)
    matrices0 = matrices[0].transpose(1, 2)  # [E, width, P_0]
    largest = max(g * s for g, s in zip(groups, spans, strict=True))
    buffer = workspace.take("windows", (largest * later_size,), out.dtype)
    done = 0
    for e, group_count in enumerate(groups):
        if not group_count:
            continue
        group_rows = rows[: spans[e], done : done + group_count].reshape(-1)
        gathered = buffer[: len(group_rows) * later_size].view(-1, *window)
        torch.index_select(windows, 0, group_rows, out=gathered)
        into = partial[done : done + group_count].view(group_count * later_size, -1)
        torch.mm(gathered.view(spans[e], -1).t(), matrices0[e, : spans[e]], out=into)
        done += group_count

    for d in range(1, ndim):  # [boxes, S_d, ..., S_{ndim-1}, C, P_0, ..., P_{d-1}]
        box_matrices = workspace.take(
            f"matrices{d}", (count, int(patch_shape[d]), widths[d]), out.dtype
        )
        torch.index_select(matrices[d], 0, later_extents[d - 1], out=box_matrices)
        later = partial.view(count, widths[d], -1).transpose(1, 2)
        step = workspace.take(f"step{d}", (*later.shape[:2], int(patch_shape[d])), out.dtype)
        partial = torch.bmm(later, box_matrices.transpose(1, 2), out=step)  # P_d joins the end

    # [boxes, C, P_0, ..., P_{ndim-1}] back in the original box order
    torch.index_select(partial.view(count, -1), 0, torch.argsort(order), out=out.view(count, -1))
