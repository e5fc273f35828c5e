"""Batch augmentations for low-label fine-tuning (off by default: the paper fine-tunes without).

Each augmentation maps a batch ``x: [B, C, *spatial]`` to a batch of the same shape, drawing its
randomness per example from the training loop's generator (so a resumed run replays it exactly),
except the two EEG transforms taken from braindecode, which draw from numpy's global generator
(also restored on resume).

* ``random_resized_crop`` (any ndim): a box of ``[0.25, 1]`` of the area (aspect ratio in
  ``[3/4, 4/3]`` for 2D) resized back to the input size (torchvision's ``RandomResizedCrop``
  sampling, per example);
* ``hflip`` (images): mirror the last axis with probability 0.5 (``RandomHorizontalFlip``);
* ``time_shift`` (signals): shift by up to 10% of the length, edge samples repeated;
* ``amplitude_scale`` (signals): scale each channel by a factor in ``[0.5, 2]``, with probability
  0.5 (braindecode ``AmplitudeScale``);
* ``channel_dropout`` (signals): zero each channel with probability 0.2, with probability 0.5
  (braindecode ``ChannelsDropout``). For a channel-set model (``absent_channels=True``) a
  dropped channel is marked absent (NaN) instead, as a channel the recording lacks, so the model
  averages over the channels left rather than reading a flat one; an item keeps all its channels
  when every one of them would be dropped.

The crops use :func:`partnd.patches.sampling.crop_and_resize`'s vectorised core, so a whole batch is
cropped in one call on its device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from partnd._validation import check
from partnd.patches.sampling import _crop_and_resize

__all__ = ["AUGMENTATIONS", "Augmentation", "build_augmentation"]

Augmentation = Callable[[Tensor, torch.Generator], Tensor]

CROP_SCALE = (0.25, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
SHIFT_FRACTION = 0.1


def _uniform(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> Tensor:
    return torch.rand(shape, generator=generator, device=generator.device).to(device)


def random_resized_crop(x: Tensor, generator: torch.Generator) -> Tensor:
    """Crop a random box per example and resize it to the input size (anti-aliased).

    The box covers a fraction ``s ~ U[0.25, 1]`` of the input; for 2D inputs its log aspect ratio
    is uniform in ``[log 3/4, log 4/3]`` (torchvision's sampling), other ndim keep the aspect. Sides
    are clamped to the input.

    Args:
        x: [B, C, *spatial].
        generator: Source of the draws.

    Returns:
        [B, C, *spatial].
    """
    batch, ndim = int(x.shape[0]), x.dim() - 2
    lengths = torch.tensor(x.shape[2:], dtype=torch.float32, device=x.device)
    low_area, high_area = CROP_SCALE
    area = low_area + (high_area - low_area) * _uniform((batch, 1), generator, x.device)
    side = area ** (1.0 / ndim)  # [B, 1] relative side at aspect 1
    if ndim == 2:
        low, high = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
        aspect = torch.exp(low + (high - low) * _uniform((batch, 1), generator, x.device))
        relative = torch.cat([side / aspect.sqrt(), side * aspect.sqrt()], dim=1)  # rows, columns
    else:
        relative = side.expand(batch, ndim)
    sizes = (relative * lengths).clamp(max=lengths).clamp(min=1.0)
    starts = _uniform((batch, ndim), generator, x.device) * (lengths - sizes)
    out = _crop_and_resize(x, starts[:, None], sizes[:, None], tuple(x.shape[2:]), antialias=True)
    return out[:, 0]


def hflip(x: Tensor, generator: torch.Generator) -> Tensor:
    """Mirror the last spatial axis of each example with probability 0.5. [B, C, *S] -> same."""
    flip = _uniform((int(x.shape[0]),), generator, x.device) < 0.5
    mask = flip.view(-1, *[1] * (x.dim() - 1))
    return torch.where(mask, x.flip(-1), x)


def time_shift(x: Tensor, generator: torch.Generator) -> Tensor:
    """Shift each example along its last axis by up to 10% of the length (edges repeated).

    Args:
        x: [B, C, T] (any ndim: the last axis is shifted).
        generator: Source of the draws.

    Returns:
        [B, C, T] with ``out[..., t] = x[..., clamp(t + shift)]``.
    """
    length = int(x.shape[-1])
    limit = max(1, round(SHIFT_FRACTION * length))
    shift = (_uniform((int(x.shape[0]),), generator, x.device) * (2 * limit + 1)).floor() - limit
    index = (torch.arange(length, device=x.device) + shift.long()[:, None]).clamp_(0, length - 1)
    index = index.view(x.shape[0], *[1] * (x.dim() - 2), length).expand_as(x)
    return x.gather(-1, index)


def _absent_when_dropped(dropout: Augmentation) -> Augmentation:
    """``dropout`` (which zeroes channels) marking the channels it drops absent (NaN) instead.

    A dropped channel is one that had a non-zero value and came out all zeros; an item none of
    whose present channels would survive is left whole.
    """

    def apply(x: Tensor, generator: torch.Generator) -> Tensor:
        out = dropout(x, generator)
        flat_in, flat_out = x.flatten(2), out.flatten(2)  # [B, C, S]
        present = ~flat_in.isnan().all(dim=-1)
        dropped = present & (flat_out == 0).all(dim=-1) & (flat_in != 0).any(dim=-1)
        dropped &= (present & ~dropped).any(dim=1, keepdim=True)  # some channel survives
        return x.masked_fill(dropped.view(*dropped.shape, *[1] * (x.dim() - 2)), math.nan)

    return apply


def _braindecode(name: str) -> Augmentation:
    try:
        from braindecode.augmentation import AmplitudeScale, ChannelsDropout
    except ImportError as error:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            f"augmentation {name!r} uses braindecode: pip install 'partnd[braindecode]' ({error})"
        ) from error
    transform = (
        AmplitudeScale(0.5, interval=(0.5, 2.0))
        if name == "amplitude_scale"
        else ChannelsDropout(0.5, p_drop=0.2)
    )

    def apply(x: Tensor, generator: torch.Generator) -> Tensor:
        return transform(x)

    return apply


AUGMENTATIONS: dict[str, tuple[str, Callable[[], Augmentation]]] = {
    "random_resized_crop": ("any", lambda: random_resized_crop),
    "hflip": ("image", lambda: hflip),
    "time_shift": ("signal", lambda: time_shift),
    "amplitude_scale": ("signal", lambda: _braindecode("amplitude_scale")),
    "channel_dropout": ("signal", lambda: _braindecode("channel_dropout")),
}


def build_augmentation(
    names: Sequence[str], ndim: int, absent_channels: bool = False
) -> Augmentation | None:
    """Compose the named augmentations in order.

    Args:
        names: Names from :data:`AUGMENTATIONS` (empty: no augmentation).
        ndim: Spatial dimensions of the data (``hflip`` needs ``ndim >= 2``; the signal
            transforms need ``ndim == 1``).
        absent_channels: The model reads a channel set, where NaN marks a channel an item lacks:
            ``channel_dropout`` then marks the channels it drops absent instead of zeroing them.

    Returns:
        ``augment(x: [B, C, *spatial], generator) -> [B, C, *spatial]``, or ``None`` for none.
    """
    steps: list[Augmentation] = []
    for name in names:
        check(name in AUGMENTATIONS, "augmentations", f"names from {sorted(AUGMENTATIONS)}", name)
        kind, make = AUGMENTATIONS[name]
        check(
            kind == "any" or (kind == "image") == (ndim >= 2),
            "augmentations",
            f"{'image (ndim >= 2)' if kind == 'image' else '1D signal'} data for {name!r}",
            f"data with {ndim} spatial dimension(s)",
        )
        step = make()
        steps.append(
            _absent_when_dropped(step) if absent_channels and name == "channel_dropout" else step
        )
    if not steps:
        return None

    def augment(x: Tensor, generator: torch.Generator) -> Tensor:
        with torch.no_grad():
            for step in steps:
                x = step(x, generator)
        return x

    return augment
