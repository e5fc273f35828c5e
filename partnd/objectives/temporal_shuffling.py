"""Temporal shuffling (TS; Banville et al. 2021): is a window between two close windows, in order?

For every segment ``x: [C, S * T]`` of consecutive stored windows (see
:mod:`~partnd.objectives.window_context`) the objective draws ``K = num_windows // 3`` triplets
``(t1, t2, t3)``:

1. the label: in order with probability 1/2;
2. two anchors ``t1 < t3`` of the positive context, ``2 <= t3 - t1 <= tau_pos`` (room for a
   window between them), uniformly among such pairs (for a shuffled triplet, among the pairs
   that leave a window of the negative context inside the segment);
3. the third window ``t2``: uniformly among the windows strictly between the anchors (in order,
   label 1: ``t1 < t2 < t3``), or among those of the negative context (shuffled, label 0:
   ``t2 <= t1 - tau_neg`` or ``t2 >= t3 + tau_neg``).

The three windows are embedded by the window encoder (``h``); Banville's head is a logistic
regression on the concatenated absolute differences,
``logit = w^T [|h(x1) - h(x2)|, |h(x2) - h(x3)|] + b``, trained with binary cross-entropy. A
content-free predictor is right half of the time (``accuracy_chance``). Banville's settings:
``tau_pos`` 1 min (2 windows of 30 s: the middle window is then the one between the anchors),
``tau_neg`` 15 min (30 windows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.engine.config import PretrainConfig
from partnd.models.vit import ViTEncoder
from partnd.objectives.base import ObjectiveOutput
from partnd.objectives.window_context import (
    WindowContextObjective,
    binary_output,
    build_window_encoder,
    uniform_choice,
    uniform_draw,
    window_context_options,
)
from partnd.signal_info import SignalSpec

__all__ = [
    "TemporalShuffling",
    "TemporalShufflingDraws",
    "anchor_pairs",
    "build_temporal_shuffling",
    "temporal_shuffling_triplets",
]


def anchor_pairs(segment_windows: int, tau_pos: int, tau_neg: int) -> tuple[Tensor, Tensor]:
    """Every anchor pair of the positive context, and which of them admit a shuffled triplet.

    Args:
        segment_windows: Slots S.
        tau_pos: Positive context in windows (>= 2).
        tau_neg: Negative context in windows.

    Returns:
        ``pairs: [P, 2]`` int64 ``(t1, t3)`` with ``2 <= t3 - t1 <= tau_pos``, and
        ``shuffleable: [P]`` bool: some slot ``t2 <= t1 - tau_neg`` or ``t2 >= t3 + tau_neg``
        lies in the segment.
    """
    first, last = torch.triu_indices(segment_windows, segment_windows, offset=2)
    keep = last - first <= tau_pos
    pairs = torch.stack([first[keep], last[keep]], dim=1)
    shuffleable = (pairs[:, 0] >= tau_neg) | (pairs[:, 1] <= segment_windows - 1 - tau_neg)
    return pairs, shuffleable


def temporal_shuffling_triplets(
    batch: int,
    num_triplets: int,
    segment_windows: int,
    tau_pos: int,
    tau_neg: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """Draw temporal-shuffling triplets (see the module docstring).

    Args:
        batch: Segments B.
        num_triplets: Triplets K per segment.
        segment_windows: Slots S (at least ``tau_neg + 3``).
        tau_pos: Positive context in windows (>= 2).
        tau_neg: Negative context in windows.
        generator: Random source.
        device: Device of the results.

    Returns:
        ``triplets: [B, K, 3]`` int64 slots ``(t1, t2, t3)`` and ``labels: [B, K]`` bool (True:
        ``t1 < t2 < t3``; False: ``t2`` at least ``tau_neg`` from both anchors).
    """
    device = torch.device(device)
    pairs, shuffleable = (t.to(device) for t in anchor_pairs(segment_windows, tau_pos, tau_neg))
    labels = uniform_draw((batch, num_triplets), generator, device) < 0.5
    allowed_pairs = labels[..., None] | shuffleable  # [B, K, P]
    anchors = pairs[uniform_choice(allowed_pairs, generator, device)]  # [B, K, 2]
    first, last = anchors[..., :1], anchors[..., 1:]
    slots = torch.arange(segment_windows, device=device)
    between = (slots > first) & (slots < last)
    outside = (slots <= first - tau_neg) | (slots >= last + tau_neg)
    middle = uniform_choice(torch.where(labels[..., None], between, outside), generator, device)
    triplets = torch.stack([anchors[..., 0], middle, anchors[..., 1]], dim=-1)
    return triplets, labels


@dataclass(frozen=True)
class TemporalShufflingDraws:
    """The random triplets of one temporal-shuffling step (:meth:`TemporalShuffling.draw`).

    Attributes:
        triplets: [B, K, 3] int64 slots ``(t1, t2, t3)`` of every triplet.
        labels: [B, K] bool, True where ``t1 < t2 < t3`` (False: ``t2`` at least ``tau_neg``
            from both anchors).
    """

    triplets: Tensor
    labels: Tensor


class TemporalShuffling(WindowContextObjective):
    """Temporal shuffling on stored windows of segments (see the module docstring).

    Args:
        encoder: The window encoder (``num_classes == 0``).
        segment_windows: Windows S per segment (at least ``tau_neg + 3``).
        window_samples: Samples T of one window.
        num_triplets: Triplets K per segment.
        tau_pos: Positive context in windows (>= 2).
        tau_neg: Negative context in windows.
        normalize: See :class:`WindowContextObjective`.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        *,
        segment_windows: int,
        window_samples: int,
        num_triplets: int,
        tau_pos: int,
        tau_neg: int,
        normalize: str = "window",
    ) -> None:
        super().__init__(
            encoder,
            segment_windows=segment_windows,
            window_samples=window_samples,
            tau_pos=tau_pos,
            tau_neg=tau_neg,
            normalize=normalize,
        )
        check(
            tau_pos >= 2,
            "PretrainConfig.tau_pos_windows",
            "an int >= 2 for temporal shuffling (a window must fit between the anchors)",
            repr(tau_pos),
        )
        check(
            segment_windows >= tau_neg + 3,
            "PretrainConfig.segment_windows",
            f"at least tau_neg_windows + 3 = {tau_neg + 3} (room for a shuffled triplet)",
            repr(segment_windows),
        )
        check(num_triplets >= 1, "num_triplets", "an int >= 1", repr(num_triplets))
        self.num_triplets = int(num_triplets)
        self.head = nn.Linear(2 * encoder.embed_dim, 1)

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> TemporalShufflingDraws:
        """Draw every segment's triplets and labels (:func:`temporal_shuffling_triplets`).

        Args:
            x: [B, C, S * T] segments (shape and device read).
            generator: Random source of the triplets and labels (same seed, same triplets).

        Returns:
            The :class:`TemporalShufflingDraws`.
        """
        triplets, labels = self.draw_examples(
            x, temporal_shuffling_triplets, self.num_triplets, generator
        )
        return TemporalShufflingDraws(triplets=triplets, labels=labels)

    def forward_with_draws(self, x: Tensor, draws: TemporalShufflingDraws) -> ObjectiveOutput:
        """One step on the step's triplets and labels (``forward(x, generator)`` draws them).

        Args:
            x: [B, C, S * T] segments.
            draws: The step's triplets and labels (:meth:`draw`).

        Returns:
            Binary cross-entropy of the head on ``[|h(x1) - h(x2)|, |h(x2) - h(x3)|]``,
            ``accuracy`` next to ``accuracy_chance`` and ``positive_share``.
        """
        self.check_segments(x)
        slots = draws.triplets.flatten(1)
        embeddings = self.embed(x, slots).unflatten(1, (self.num_triplets, 3))
        z1, z2, z3 = embeddings.unbind(dim=2)
        features = torch.cat([(z1 - z2).abs(), (z2 - z3).abs()], dim=-1)
        return binary_output(self.head(features)[..., 0], draws.labels)

    def extra_repr(self) -> str:
        return f"num_triplets={self.num_triplets}, " + super().extra_repr()


def build_temporal_shuffling(config: PretrainConfig, spec: SignalSpec) -> TemporalShuffling:
    """Temporal shuffling for segments ``[C, segment_windows * window_samples]``: the window
    encoder of :func:`build_window_encoder`, ``num_windows // 3`` triplets per segment,
    ``tau_pos_windows`` and ``tau_neg_windows``."""
    return TemporalShuffling(
        build_window_encoder(config, spec),
        num_triplets=max(1, config.num_windows // 3),
        **window_context_options(config),
    )
