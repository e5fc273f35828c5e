"""Voting over channel subsets at prediction (U-Sleep's vote over channel combinations).

A channel-set model (:class:`~partnd.models.channel_set.ChannelSetPatchEmbed`) reads any subset
of its layout's channels: a channel that is NaN in an item is absent. With ``vote="subsets"`` a
prediction runs the model once per subset of the item's present channels (the others set to NaN,
as the front-end reads an absent channel) and averages the class probabilities.

**Soft vote.** The probabilities are averaged (a soft vote), not the argmax labels counted. An
average keeps a probability per window and class, so the hypnogram exports keep their
``p_<class>`` columns and the cross-entropy of ``evaluate`` stays defined; it has no ties, and a
subset that is unsure weighs less than one that is sure. U-Sleep's software (U-Time's
``majority_vote.py``) offers both: the mode of the combinations' labels by default, and with
``--soft`` the mean of their probabilities, which is what this computes.

**Which subsets.** For ``n`` present channels there are ``2^n - 1`` non-empty subsets. When they
number at most ``max_subsets`` all are used; otherwise the full set and ``max_subsets - 1``
distinct smaller subsets drawn with a fixed seed (each size uniform in ``1..n-1``, as the
training-time ``subset_sampling``). The draw is made over the channels' names in sorted order,
so a layout given in another order votes over the same subsets. ``max_subsets=1`` is the plain
prediction.

**Present channels.** A channel is present in an item when it holds a finite value: per window
for a window classifier (items with the same present channels vote together), per night for a
sequence or night classifier (the whole night is read once per subset).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.signal_info import SignalInfo

__all__ = [
    "VOTES",
    "VOTE_SEED",
    "SubsetVote",
    "channel_subsets",
    "check_vote",
    "present_channels",
    "vote_night",
]

#: The accepted values of ``vote``: ``None`` (plain prediction) or ``"subsets"``.
VOTES = (None, "subsets")

#: Seed of the subsets drawn when there are more than ``max_subsets``.
VOTE_SEED = 0


def check_vote(vote: str | None, max_subsets: int, info: SignalInfo | None) -> bool:
    """Check a prediction's ``vote`` and ``max_subsets`` for a model of signal ``info``.

    Returns:
        Whether to vote.

    Raises:
        InputError: For an unknown ``vote``, ``max_subsets < 1``, or a vote asked of a model that
            does not read a channel set (a fixed-channel model reads all its channels or none).
    """
    check(vote in VOTES, "vote", f"one of {list(VOTES)}", repr(vote))
    check(
        isinstance(max_subsets, int) and not isinstance(max_subsets, bool) and max_subsets >= 1,
        "max_subsets",
        "an integer >= 1 (the number of channel subsets a prediction votes over)",
        repr(max_subsets),
    )
    if vote is None:
        return False
    mode = None if info is None else info.channel_mode
    check(
        mode == "set",
        "vote",
        "no vote (None) for this model: voting over channel subsets needs a channel-set "
        "model (channel_mode='set'), which reads any subset of its channels",
        f"{vote!r} for a model with channel_mode={mode!r}",
    )
    return True


def channel_subsets(
    names: Sequence[str], max_subsets: int, seed: int = VOTE_SEED
) -> list[tuple[int, ...]]:
    """The subsets of channels a prediction votes over.

    Args:
        names: The n present channels' names.
        max_subsets: The most subsets (>= 1).
        seed: Seed of the draw when ``2^n - 1 > max_subsets``.

    Returns:
        Subsets as sorted indices into ``names``, the full set first; all ``2^n - 1`` non-empty
        ones (largest first) when they number at most ``max_subsets``, else the full set and
        ``max_subsets - 1`` distinct smaller ones drawn over the sorted names (so the same
        channels in another order give the same subsets).
    """
    count = len(names)
    check(count >= 1, "names", "at least one present channel", "none")
    full = tuple(range(count))
    if 2**count - 1 <= max_subsets:
        return [
            subset
            for size in range(count, 0, -1)
            for subset in itertools.combinations(range(count), size)
        ]
    order = sorted(range(count), key=lambda index: str(names[index]))
    generator = np.random.default_rng(seed)
    chosen: list[tuple[int, ...]] = [full]
    seen = {full}
    while len(chosen) < max_subsets:
        size = int(generator.integers(1, count))  # 1 .. n - 1
        ranks = generator.choice(count, size=size, replace=False)
        subset = tuple(sorted(order[int(rank)] for rank in ranks))
        if subset not in seen:
            seen.add(subset)
            chosen.append(subset)
    return chosen


def present_channels(x: Tensor) -> Tensor:
    """[B, C] whether each channel of ``x: [B, C, ...]`` holds a finite value in each item."""
    return torch.isfinite(x.flatten(2)).any(dim=-1)


def _keep_only(x: Tensor, keep: Tensor) -> Tensor:
    """``x: [B, C, ...]`` with the channels outside ``keep: [C]`` set to NaN (absent)."""
    spread = (None, slice(None)) + (None,) * (x.dim() - 2)
    return torch.where(keep.to(x.device)[spread], x, torch.full_like(x, float("nan")))


def _subset_masks(present: Tensor, names: Sequence[str], max_subsets: int) -> list[Tensor]:
    """[C] masks of the subsets of the channels ``present: [C]`` votes over."""
    indices = torch.nonzero(present).flatten().tolist()
    masks = []
    for subset in channel_subsets([names[i] for i in indices], max_subsets):
        mask = torch.zeros(len(names), dtype=torch.bool)
        mask[[indices[i] for i in subset]] = True
        masks.append(mask)
    return masks


class SubsetVote(nn.Module):
    """A window classifier that votes over subsets of every item's present channels.

    Args:
        model: A channel-set window classifier, ``x: [B, C, *spatial] -> logits [B, K]``.
        channels: The C channel names of the items (the model's current layout).
        max_subsets: The most subsets per item (see :func:`channel_subsets`).

    ``forward`` returns ``log(mean_s softmax(model(x_s)))``: logits whose softmax is the soft
    vote. Items with the same present channels vote together; an item with none present gets the
    model's output on it as it is.
    """

    def __init__(self, model: nn.Module, channels: Sequence[str], max_subsets: int) -> None:
        super().__init__()
        self.model = model
        self.channels = tuple(str(name) for name in channels)
        self.max_subsets = max_subsets
        self.train(model.training)  # the wrapper starts in the model's mode and hands it back

    def forward(self, x: Tensor) -> Tensor:
        """Args: x: [B, C, *spatial], NaN in absent channels. Returns: [B, K] log-probabilities."""
        check(
            x.shape[1] == len(self.channels),
            "x",
            f"items of the {len(self.channels)} channels {list(self.channels)}",
            x,
        )
        present = present_channels(x)
        patterns, group = torch.unique(present.cpu(), dim=0, return_inverse=True)
        output: Tensor | None = None
        for index, pattern in enumerate(patterns):
            rows = torch.nonzero(group == index).flatten().to(x.device)
            items = x[rows]
            if not bool(pattern.any()):
                log_probabilities = self.model(items).float().log_softmax(-1)
            else:
                masks = _subset_masks(pattern, self.channels, self.max_subsets)
                votes = [self.model(_keep_only(items, mask)).float().softmax(-1) for mask in masks]
                log_probabilities = torch.stack(votes).mean(0).clamp(min=1e-30).log()
            if output is None:
                output = torch.empty(len(x), log_probabilities.shape[1], device=x.device)
            output[rows] = log_probabilities
        assert output is not None
        return output


def vote_night(
    predict_night: Callable[[Tensor], Tensor],
    windows: Tensor,
    channels: Sequence[str],
    max_subsets: int,
) -> Tensor:
    """Soft vote of a sequence or night classifier over subsets of a night's present channels.

    Args:
        predict_night: The classifier's prediction of one night, ``[N, C, T] -> [N, K]``
            probabilities.
        windows: [N, C, T] the night's windows (NaN in absent channels).
        channels: The C channel names.
        max_subsets: The most subsets (see :func:`channel_subsets`).

    Returns:
        [N, K] the probabilities averaged over the subsets of the channels present in the night.
    """
    present = present_channels(windows.transpose(0, 1)[None])[0]  # [C]: anywhere in the night
    if not bool(present.any()):
        return predict_night(windows)
    masks = _subset_masks(present.cpu(), channels, max_subsets)
    return torch.stack([predict_night(_keep_only(windows, mask)) for mask in masks]).mean(0)
