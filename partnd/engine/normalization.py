"""How windows are normalised before a model reads them: per window (instance normalisation, the
paper's), per record (YASA-style night z-scores), or not at all.

Shared by the sleep readers (:mod:`partnd.datasets`) and the objectives that normalise what they cut
(:mod:`partnd.objectives.part_windows`), so neither imports the other.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from partnd._validation import check

__all__ = [
    "NORMALIZATIONS",
    "NORMALIZE_EPS",
    "instance_normalize",
    "record_normalize",
    "resolve_normalization",
]

NORMALIZE_EPS = 1e-6
"""``eps`` of :func:`instance_normalize`, ``(x - mean) / (std + eps)``: a flat channel maps to 0."""


def instance_normalize(x: Tensor, eps: float = NORMALIZE_EPS) -> Tensor:
    """Standardise every channel of every window over time (instance normalisation, as the paper).

    Args:
        x: ``[..., C, T]`` floating point windows.
        eps: Added to the standard deviation, so that a flat channel maps to zeros.

    Returns:
        ``[..., C, T]`` tensor ``(x - mean) / (std + eps)`` with mean and (population, ``ddof=0``)
        standard deviation taken over the last axis, same dtype as ``x``.
    """
    check(x.is_floating_point(), "x", "a floating point tensor [..., C, T]", x)
    check(x.ndim >= 1 and x.shape[-1] >= 1, "x", "a tensor [..., C, T] with T >= 1", x)
    centred = x - x.mean(dim=-1, keepdim=True)  # two passes (numpy's std): ~4x torch.std_mean
    std = torch.linalg.vector_norm(centred, dim=-1, keepdim=True).div_(math.sqrt(x.shape[-1]))
    return centred.div_(std.add_(eps))


#: How windows are normalised: ``"window"`` (each window and channel standardised over time,
#: instance normalisation, the paper's), ``"record"`` (each window's mean removed and divided by
#: its record's channel scale, so amplitude differences between windows of a night are kept and
#: differences between nights and subjects removed, as YASA's per-night z-scores), ``"none"``.
NORMALIZATIONS = ("window", "record", "none")


def resolve_normalization(normalize: bool | str, argument: str = "normalize") -> str:
    """The normalisation named by ``normalize``: ``True`` is ``"window"``, ``False``
    ``"none"``, else one of :data:`NORMALIZATIONS`."""
    if isinstance(normalize, bool):
        return "window" if normalize else "none"
    check(
        normalize in NORMALIZATIONS,
        argument,
        f"True, False or one of {list(NORMALIZATIONS)}",
        repr(normalize),
    )
    return str(normalize)


def record_normalize(x: Tensor, scale: Tensor, eps: float = NORMALIZE_EPS) -> Tensor:
    """Remove each window's mean and divide by its record's channel scale.

    Args:
        x: ``[..., C, T]`` floating point windows.
        scale: ``[..., C]`` scale of each channel of each window's record (broadcast against
            ``x``'s leading dimensions), e.g. :meth:`SleepStore.channel_scale`.
        eps: Added to the scale, so that a flat channel maps to zeros.

    Returns:
        ``[..., C, T]`` ``(x - mean_t(x)) / (scale + eps)``, same dtype as ``x``.
    """
    check(x.is_floating_point(), "x", "a floating point tensor [..., C, T]", x)
    check(
        scale.shape[-1] == x.shape[-2],
        "scale",
        f"one scale per channel ({x.shape[-2]})",
        scale,
    )
    divisor = scale.to(x.dtype).unsqueeze(-1).add(eps)
    return x.sub(x.mean(dim=-1, keepdim=True)).div_(divisor)
