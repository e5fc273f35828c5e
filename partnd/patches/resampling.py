"""Filter taps of the separable triangle resampling that every crop and resize in partnd uses.

One leaf module that both the general sampler (:func:`partnd.patches.sampling.crop_and_resize`) and
the
whole-sample fast path (:mod:`partnd.patches.integer_box_resize`) import, so they share one
definition of
the filter and neither imports the other for it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["resampling_taps"]


def resampling_taps(
    starts: Tensor,
    sizes: Tensor,
    out_size: int,
    length: int,
    antialias: bool,
    dtype: torch.dtype,
    max_size: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Filter taps of one dimension for every box.

    Output sample ``j`` sits at ``u = start + (j + 0.5) * size / P``; input sample ``k`` (value at
    ``k + 0.5``) gets the triangle weight ``max(0, support - |k + 0.5 - u|)``, normalised over the
    taps. The ``K = ceil(2 * max support)`` candidate taps start at the first integer inside
    ``(u - 0.5 - support, u - 0.5 + support)``.

    Args:
        starts: ``[B, N]`` box starts in this dimension.
        sizes: ``[B, N]`` box extents in this dimension.
        out_size: Number of output samples ``P``.
        length: Input length ``L`` (taps are clamped to ``[0, L - 1]``, i.e. edge replication).
        antialias: Widen the triangle filter to ``size / P`` when downsampling.
        dtype: Dtype of the returned weights.
        max_size: A known upper bound of ``sizes`` (sizes the tap count without reading the
            tensor back, i.e. without a host synchronisation); ``None`` reads ``sizes.max()``.

    Returns:
        ``index: [K, B, N, P]`` long input indices (clamped, non-decreasing along ``K`` and
        ``P``) and ``weights: [K, B, N, P]`` normalised filter weights.
    """
    step = sizes / out_size
    positions = torch.arange(out_size, device=starts.device, dtype=starts.dtype) + 0.5
    centres = torch.addcmul(starts[..., None], positions, step[..., None])
    support = (step.clamp(min=1.0) if antialias else torch.ones_like(step))[..., None]
    if not antialias:
        widest = 1.0
    elif max_size is not None:
        widest = max(1.0, max_size / out_size)
    else:
        widest = float(support.max())
    num_taps = max(1, math.ceil(2 * widest))
    first = torch.floor(centres - support - 0.5).add_(1)
    offsets = torch.arange(num_taps, device=starts.device, dtype=starts.dtype).view(-1, 1, 1, 1)
    distance = ((first - centres) + (offsets + 0.5)).abs_()
    weights = torch.sub(support, distance).clamp_(min=0)
    weights = weights.div_(weights.sum(dim=0)).to(dtype)
    index = (first + offsets).long().clamp_(0, length - 1)
    return index, weights
