"""Relative positioning (RP; Banville et al. 2021): are two windows of a recording close or far?

For every segment ``x: [C, S * T]`` of consecutive stored windows (see
:mod:`~partnd.objectives.window_context`) the objective draws ``K = num_windows // 2`` pairs by
braindecode's ``RelativePositioningSampler`` rule (``braindecode.samplers.ssl``,
``same_rec_neg=True``), in windows instead of samples:

1. the first window ``t1`` uniformly among the segment's ``S`` slots;
2. the label: positive with probability 1/2 (``rng.binomial(1, 0.5)``);
3. the second window ``t2`` uniformly among the slots with ``0 < |t2 - t1| <= tau_pos``
   (positive) or ``tau_neg <= |t2 - t1| <= tau_max`` (negative); the same window never twice.

``tau_max`` is the segment (``S - 1`` windows): braindecode's default ``tau_max=None`` draws the
negative anywhere in the recording, here anywhere in the segment; segments of 60 windows (30 min)
keep Banville's 15 min negative context (``tau_neg = 30`` windows of 30 s) reachable from every
slot. Banville's settings: ``tau_pos`` 1 min (2 windows), ``tau_neg`` 15 min (30 windows).

Both windows are embedded by the window encoder (``h``); the contrastive head is Banville's
logistic regression on the absolute difference of the embeddings,
``logit = w^T |h(x1) - h(x2)| + b``, trained with binary cross-entropy. A content-free predictor
is right half of the time (``accuracy_chance``).
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
    "RelativePositioning",
    "RelativePositioningDraws",
    "build_relative_positioning",
    "relative_positioning_pairs",
]


@dataclass(frozen=True)
class RelativePositioningDraws:
    """The random pairs of one relative-positioning step (:meth:`RelativePositioning.draw`).

    Attributes:
        first: [B, K] int64 slot of every pair's first window.
        second: [B, K] int64 slot of its second window.
        labels: [B, K] bool, True where the pair is within ``tau_pos`` (False: at least
            ``tau_neg`` apart).
    """

    first: Tensor
    second: Tensor
    labels: Tensor


def relative_positioning_pairs(
    batch: int,
    num_pairs: int,
    segment_windows: int,
    tau_pos: int,
    tau_neg: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor, Tensor]:
    """Draw relative-positioning pairs by braindecode's rule (``tau_max`` = the segment).

    Args:
        batch: Segments B.
        num_pairs: Pairs K per segment.
        segment_windows: Slots S per segment (at least ``2 * tau_neg``, so every first window
            has a negative partner).
        tau_pos: Positive context in windows.
        tau_neg: Negative context in windows.
        generator: Random source.
        device: Device of the results.

    Returns:
        ``first, second: [B, K]`` int64 slots and ``labels: [B, K]`` bool (True: within
        ``tau_pos``; False: at least ``tau_neg`` apart).
    """
    device = torch.device(device)
    first = (uniform_draw((batch, num_pairs), generator, device) * segment_windows).long()
    first = first.clamp_(max=segment_windows - 1)
    labels = uniform_draw((batch, num_pairs), generator, device) < 0.5
    slots = torch.arange(segment_windows, device=device)
    distance = (slots - first[..., None]).abs()  # [B, K, S]
    positive = (distance > 0) & (distance <= tau_pos)
    negative = distance >= tau_neg
    second = uniform_choice(torch.where(labels[..., None], positive, negative), generator, device)
    return first, second, labels


class RelativePositioning(WindowContextObjective):
    """Relative positioning on stored windows of segments (see the module docstring).

    Args:
        encoder: The window encoder (``num_classes == 0``).
        segment_windows: Windows S per segment (at least ``2 * tau_neg``).
        window_samples: Samples T of one window.
        num_pairs: Pairs K per segment.
        tau_pos: Positive context in windows.
        tau_neg: Negative context in windows (at least ``tau_pos``).
        normalize: See :class:`WindowContextObjective`.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        *,
        segment_windows: int,
        window_samples: int,
        num_pairs: int,
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
            tau_neg >= tau_pos,
            "PretrainConfig.tau_neg_windows",
            f"at least tau_pos_windows={tau_pos} (a pair is never both close and far)",
            repr(tau_neg),
        )
        check(
            segment_windows >= 2 * tau_neg,
            "PretrainConfig.segment_windows",
            f"at least 2 * tau_neg_windows = {2 * tau_neg} (every window of a segment needs a "
            f"partner at least tau_neg_windows away)",
            repr(segment_windows),
        )
        check(num_pairs >= 1, "num_pairs", "an int >= 1", repr(num_pairs))
        self.num_pairs = int(num_pairs)
        self.head = nn.Linear(encoder.embed_dim, 1)

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> RelativePositioningDraws:
        """Draw every segment's pairs and labels (:func:`relative_positioning_pairs`).

        Args:
            x: [B, C, S * T] segments (shape and device read).
            generator: Random source of the pairs and labels (same seed, same pairs).

        Returns:
            The :class:`RelativePositioningDraws`.
        """
        first, second, labels = self.draw_examples(
            x, relative_positioning_pairs, self.num_pairs, generator
        )
        return RelativePositioningDraws(first=first, second=second, labels=labels)

    def forward_with_draws(self, x: Tensor, draws: RelativePositioningDraws) -> ObjectiveOutput:
        """One step on the step's pairs and labels (``forward(x, generator)`` draws them).

        Args:
            x: [B, C, S * T] segments.
            draws: The step's pairs and labels (:meth:`draw`).

        Returns:
            Binary cross-entropy of the head on ``|h(x1) - h(x2)|``, ``accuracy`` next to
            ``accuracy_chance`` and ``positive_share``.
        """
        self.check_segments(x)
        embeddings = self.embed(x, torch.cat([draws.first, draws.second], dim=1))
        z1, z2 = embeddings.split(self.num_pairs, dim=1)
        logits = self.head((z1 - z2).abs())[..., 0]
        return binary_output(logits, draws.labels)

    def extra_repr(self) -> str:
        return f"num_pairs={self.num_pairs}, " + super().extra_repr()


def build_relative_positioning(config: PretrainConfig, spec: SignalSpec) -> RelativePositioning:
    """Relative positioning for segments ``[C, segment_windows * window_samples]``: the window
    encoder of :func:`build_window_encoder`, ``num_windows // 2`` pairs per segment (as many
    windows embedded as PART across windows draws), ``tau_pos_windows`` and
    ``tau_neg_windows``."""
    return RelativePositioning(
        build_window_encoder(config, spec),
        num_pairs=max(1, config.num_windows // 2),
        **window_context_options(config),
    )
