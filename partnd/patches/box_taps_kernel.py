"""Compiled kernel of :mod:`partnd.patches.integer_box_resize`: each box resampled by its filter
taps alone.

Imported only where numba is installed (it is compiled on first use, and cached next to this file
or in numba's user-wide cache; where neither can be written it is compiled once per process). One
kernel serves every number of spatial dimensions: the boxes' windows, the tap tables and the
input are flat arrays addressed through their shapes and strides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

__all__ = ["CACHE_LINE", "resample_boxes"]

CACHE_LINE = 64
"""Bytes of a cache line: the step of the in-order read that brings an image into cache."""


def _compile(function: Callable[..., None]) -> Any:
    """``function`` compiled without the GIL, cached where numba finds a writable place."""
    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError:  # no cache locator can write (read-only install, no writable home)
        return numba.njit(nogil=True)(function)


@numba.njit(inline="always")  # inlined into the kernel (and cached with it)
def _weigh_taps(
    values: np.ndarray, first: np.ndarray, weights: np.ndarray, count: int, result: np.ndarray
) -> None:
    """``result[j] = sum_k weights[j, k] * values[first[j] + k]`` over ``count`` taps, the first
    four written out (a loop over 2-4 taps costs more than the taps; the compiler makes one copy
    of the loop per count)."""
    for j in range(result.shape[0]):
        b = first[j]
        total = weights[j, 0] * values[b]
        if count > 1:
            total += weights[j, 1] * values[b + 1]
        if count > 2:
            total += weights[j, 2] * values[b + 2]
        if count > 3:
            total += weights[j, 3] * values[b + 3]
        for k in range(4, count):
            total += weights[j, k] * values[b + k]
        result[j] = total


@_compile
def resample_boxes(
    x: np.ndarray,
    lengths: np.ndarray,
    positions: np.ndarray,
    extents: np.ndarray,
    boxes_per_image: int,
    spans: np.ndarray,
    first: np.ndarray,
    taps: np.ndarray,
    weights: np.ndarray,
    patch: np.ndarray,
    out: np.ndarray,
    window: np.ndarray,
    partial: np.ndarray,
) -> None:
    """Cut every box's window out of ``x`` and resample it one dimension after the other.

    Per box: its window (the samples its taps reach, edge samples repeated where it leaves the
    input) is copied into ``window`` as ``[S_0, ..., S_{n-2}, C, S_{n-1}]`` (the channels next to
    the last dimension: long contiguous runs for every dimension but the last). Each dimension
    ``d < n - 1`` then turns ``[P_0, ..., P_{d-1}, S_d, ...]`` into ``[..., P_d, ...]``, every
    output row the weighted sum of its taps' rows; the last dimension weighs the taps of every
    output sample and writes the patch ``[C, *P]`` into ``out``.

    Args:
        x: ``[B * C * prod(L)]`` the input, contiguous ``[B, C, *L]``.
        lengths: ``[n]`` the input's spatial lengths ``L``.
        positions: ``[M, n]`` first sample of each box's window (may leave the input).
        extents: ``[M, n]`` row of each box's extent in the tap tables, per dimension.
        boxes_per_image: ``N``, box ``m`` belongs to image ``m // N``.
        spans: ``[n, E]`` window samples per extent.
        first: ``[n, E, P]`` first tap of each output sample in the window.
        taps: ``[n, E]`` taps of every output sample of an extent (``first + taps <= spans``).
        weights: ``[n, E, P, K]`` the taps' weights.
        patch: ``[n]`` output samples ``P_d``.
        out: ``[M, C * prod(P)]`` the patches, ``[C, *P]`` each.
        window: scratch of at least ``C * prod(max spans)`` values.
        partial: scratch of the same size.
    """
    ndim = lengths.shape[0]
    last = ndim - 1
    plane = 1
    for d in range(ndim):
        plane *= patch[d]
    channels = out.shape[1] // plane
    channel_size = 1
    for d in range(ndim):
        channel_size *= lengths[d]
    strides = np.empty(ndim, dtype=np.int64)
    strides[last] = 1
    for d in range(last - 1, -1, -1):
        strides[d] = strides[d + 1] * lengths[d + 1]
    index = np.zeros(ndim, dtype=np.int64)
    line_values = max(1, CACHE_LINE // x.itemsize)
    for m in range(positions.shape[0]):
        image = (m // boxes_per_image) * channels * channel_size
        if m % boxes_per_image == 0:  # read the image in order first: its lines come in at once
            image_values = x[image : image + channels * channel_size]
            warm = image_values[0]
            for t in range(0, image_values.shape[0], line_values):
                warm += image_values[t]
            window[0] = warm
        width = spans[last, extents[m, last]]
        start = positions[m, last]
        inside = start >= 0 and start + width <= lengths[last]
        rows = channels
        for d in range(last):
            rows *= spans[d, extents[m, d]]
        index[:] = 0
        offset = image
        for row in range(rows):
            channel = row % channels
            if channel == 0:  # the next row of the leading dimensions (a mixed-radix count)
                if row > 0:
                    d = last - 1
                    while d >= 0:
                        index[d] += 1
                        if index[d] < spans[d, extents[m, d]]:
                            break
                        index[d] = 0
                        d -= 1
                offset = image
                for d in range(last):
                    sample = min(max(positions[m, d] + index[d], 0), lengths[d] - 1)
                    offset += sample * strides[d]
            target = window[row * width : (row + 1) * width]
            line_start = offset + channel * channel_size
            if inside:
                line = x[line_start + start : line_start + start + width]
                for t in range(width):
                    target[t] = line[t]
            else:
                line = x[line_start : line_start + lengths[last]]
                for t in range(width):
                    target[t] = line[min(max(start + t, 0), lengths[last] - 1)]
        source, target = window, partial
        outer, inner = 1, rows * width
        for d in range(last):
            e = extents[m, d]
            span, size, count = spans[d, e], patch[d], taps[d, e]
            inner //= span
            for o in range(outer):
                for j in range(size):
                    result = target[(o * size + j) * inner : (o * size + j + 1) * inner]
                    base = (o * span + first[d, e, j]) * inner
                    row_weights = weights[d, e, j]
                    values = source[base : base + inner]
                    for t in range(inner):
                        result[t] = row_weights[0] * values[t]
                    for k in range(1, count):
                        values = source[base + k * inner : base + (k + 1) * inner]
                        for t in range(inner):
                            result[t] += row_weights[k] * values[t]
            outer *= size
            source, target = target, source
        e = extents[m, last]
        span, size, count = spans[last, e], patch[last], taps[last, e]
        patches, tap_first, tap_weights = out[m], first[last, e], weights[last, e]
        for o in range(outer * channels):
            at = (o % channels) * plane + (o // channels) * size
            values = source[o * span : (o + 1) * span]
            _weigh_taps(values, tap_first, tap_weights, count, patches[at : at + size])
