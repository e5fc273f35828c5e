"""What the EEG context objectives share: stored windows of a segment, embedded one by one.

Relative positioning (:mod:`~partnd.objectives.relative_positioning`) and temporal shuffling
(:mod:`~partnd.objectives.temporal_shuffling`) (Banville et al. 2021, "Uncovering the structure of
clinical EEG signals with self-supervised learning") learn a window encoder from *where windows
of one recording lie relative to each other*. They read the same data as PART across windows:
segments ``x: [B, C, S * T]`` of ``S`` consecutive stored windows of ``T`` samples of one record
(:class:`~partnd.datasets.segments.SleepSegmentDataset`). Unlike PART across windows, they draw
*stored* windows (the dataset's 30 s grid, as braindecode's samplers draw the windows of a
windowed dataset), so a window's slot ``s`` in the segment is its time ``s * T`` samples after the
segment's start, and time distances between windows are whole numbers of windows.

Every drawn window is normalised as fine-tuning windows are (``PretrainConfig.normalize``:
instance normalisation, or its mean removed when the segments come divided by their night's
channel scales) and embedded by the window ViT (tiles of ``patch_size``, the mean patch token or
[CLS], ``window_pool``; a position embedding over the tiles), the same window encoder and
front-ends as PART across windows; the saved encoder is that window encoder.

The label of every example is drawn with probability 1/2 (braindecode's
``rng.binomial(1, 0.5)``), so a content-free predictor is right half of the time; the objectives
log ``accuracy`` next to ``accuracy_chance``, the accuracy of the best constant on the batch's own
labels (about 0.5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from partnd._validation import check
from partnd.engine.config import PretrainConfig
from partnd.models.vit import ViTEncoder
from partnd.objectives.base import Objective, ObjectiveOutput, build_encoder
from partnd.patches.sampling import GridSampler
from partnd.signal_info import SignalSpec

#: What a context objective draws per segment: pairs, triplets.
_Examples = TypeVar("_Examples")

__all__ = [
    "WindowContextObjective",
    "binary_output",
    "build_window_encoder",
    "check_normalize",
    "check_segment_spec",
    "normalize_windows",
    "uniform_choice",
    "uniform_draw",
    "window_context_options",
]


def uniform_choice(
    allowed: Tensor, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """One index drawn uniformly among the allowed ones of every row.

    Args:
        allowed: [..., K] bool; every row must allow at least one index.
        generator: Random source (its device is used for the draw).
        device: Device of the result.

    Returns:
        [...] int64 indices ``k`` with ``allowed[..., k]`` True (the arg-max of independent
        uniform scores over the allowed indices: each allowed index equally likely).
    """
    draw_device = generator.device if generator is not None else device
    scores = torch.rand(allowed.shape, generator=generator, device=draw_device).to(device)
    return scores.masked_fill(~allowed, -1.0).argmax(dim=-1)


def uniform_draw(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform numbers in ``[0, 1)`` of ``shape`` on ``device`` (drawn on the generator's)."""
    draw_device = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=draw_device).to(device)


def check_normalize(normalize: str) -> None:
    """Refuse a ``normalize`` other than ``"window"`` or ``"record"``."""
    check(
        normalize in ("window", "record"),
        "normalize",
        "'window' (each drawn window standardised) or 'record' (segments scaled by their "
        "night's channel scales, each drawn window's mean removed)",
        repr(normalize),
    )


def normalize_windows(windows: Tensor, normalize: str) -> Tensor:
    """Normalise drawn windows as fine-tuning windows are.

    Args:
        windows: [..., T] windows.
        normalize: ``"window"`` (instance normalisation) or ``"record"`` (the segments are
            already divided by their night's channel scales: the window's mean is removed).

    Returns:
        [..., T] normalised windows.
    """
    from partnd.engine.normalization import instance_normalize  # the reader pulls zarr

    if normalize == "window":
        return instance_normalize(windows)
    return windows - windows.mean(dim=-1, keepdim=True)


def binary_output(logits: Tensor, labels: Tensor) -> ObjectiveOutput:
    """Logistic loss and accuracy of binary predictions, next to the best constant's accuracy.

    Args:
        logits: [B, K] logits (any float dtype; the loss is computed in float32).
        labels: [B, K] bool labels.

    Returns:
        ``loss`` (binary cross-entropy with logits), ``accuracy``, ``accuracy_chance`` (the
        accuracy of predicting the batch's majority label, the content-free floor) and
        ``positive_share``.
    """
    logits = logits.float()
    target = labels.float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
    with torch.no_grad():
        accuracy = ((logits > 0) == labels).float().mean()
        share = target.mean()
        chance = torch.maximum(share, 1.0 - share)
    return ObjectiveOutput(
        loss=loss,
        metrics={"accuracy": accuracy, "accuracy_chance": chance, "positive_share": share},
    )


class WindowContextObjective(Objective):
    """Base of the objectives that embed stored windows of a segment one by one.

    Args:
        encoder: The window :class:`ViTEncoder` (``num_classes == 0``).
        segment_windows: Windows S per segment; inputs are ``[B, C, S * T]``.
        window_samples: Samples T of one window.
        tau_pos: Positive context in windows (>= 1).
        tau_neg: Negative context in windows (>= 1).
        normalize: ``"window"`` (instance normalisation of every drawn window) or ``"record"``
            (segments come divided by their night's channel scales; each window's mean is
            removed).
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        *,
        segment_windows: int,
        window_samples: int,
        tau_pos: int,
        tau_neg: int,
        normalize: str = "window",
    ) -> None:
        super().__init__()
        check(
            encoder.num_classes == 0,
            "encoder",
            "a window encoder with num_classes=0",
            f"num_classes={encoder.num_classes}",
        )
        check_normalize(normalize)
        check(segment_windows >= 2, "segment_windows", "an int >= 2", repr(segment_windows))
        check(tau_pos >= 1, "tau_pos", "an int >= 1 (windows)", repr(tau_pos))
        check(tau_neg >= 1, "tau_neg", "an int >= 1 (windows)", repr(tau_neg))
        self.encoder = encoder
        self.segment_windows = int(segment_windows)
        self.window_samples = int(window_samples)
        self.tau_pos = int(tau_pos)
        self.tau_neg = int(tau_neg)
        self.normalize = normalize
        self.tiler = GridSampler(1, encoder.patch_size)

    def check_segments(self, x: Tensor) -> None:
        """Refuse anything but segments ``[B, C, S * T]``."""
        length = self.segment_windows * self.window_samples
        check(
            x.dim() == 3 and x.shape[1] == self.encoder.in_chans and x.shape[2] == length,
            "x",
            f"segments [B, {self.encoder.in_chans}, {length}] ({self.segment_windows} windows "
            f"of {self.window_samples} samples)",
            x,
        )

    def draw_examples(
        self,
        x: Tensor,
        sampler: Callable[
            [int, int, int, int, int, torch.Generator | None, torch.device], _Examples
        ],
        count: int,
        generator: torch.Generator | None,
    ) -> _Examples:
        """Check the segments, then draw ``count`` examples per segment with ``sampler``.

        Args:
            x: [B, C, S * T] segments (shape and device read).
            sampler: ``sampler(batch, count, segment_windows, tau_pos, tau_neg, generator,
                device)``: relative positioning's pairs or temporal shuffling's triplets.
            count: Examples K per segment.
            generator: Random source (same seed, same examples).

        Returns:
            What ``sampler`` returns.
        """
        self.check_segments(x)
        return sampler(
            x.shape[0],
            count,
            self.segment_windows,
            self.tau_pos,
            self.tau_neg,
            generator,
            x.device,
        )

    def windows(self, x: Tensor, slots: Tensor) -> Tensor:
        """The stored windows at ``slots``, normalised as fine-tuning windows are.

        Args:
            x: [B, C, S * T] segments.
            slots: [B, M] int64 slots in ``[0, S)``.

        Returns:
            [B, M, C, T] windows.
        """
        batch, channels = x.shape[0], x.shape[1]
        stored = x.view(batch, channels, self.segment_windows, self.window_samples).transpose(1, 2)
        picked = stored[torch.arange(batch, device=x.device)[:, None], slots]
        return normalize_windows(picked, self.normalize)

    def embed(self, x: Tensor, slots: Tensor) -> Tensor:
        """Window embeddings of the stored windows at ``slots``.

        Args:
            x: [B, C, S * T] segments.
            slots: [B, M] int64 slots.

        Returns:
            [B, M, D] embeddings (the window encoder's pooled token).
        """
        windows = self.windows(x, slots)
        flat = windows.flatten(0, 1)
        tiles = self.tiler(flat, validate=False)
        tokens = self.encoder.forward_features(tiles.patches, tiles.grid_index)
        pooled = self.encoder.forward_head(tokens, pre_logits=True)
        return pooled.view(*slots.shape, -1)

    def extra_repr(self) -> str:
        return (
            f"segment_windows={self.segment_windows}, window_samples={self.window_samples}, "
            f"tau_pos={self.tau_pos}, tau_neg={self.tau_neg}, normalize={self.normalize!r}"
        )


def check_segment_spec(config: PretrainConfig, spec: SignalSpec) -> None:
    """Refuse data whose items are not segments ``[C, segment_windows * window_samples]``."""
    length = config.segment_windows * config.window_samples
    check(
        spec.ndim == 1 and spec.spatial_shape[0] == length,
        "dataset",
        f"segments [C, {length}] (segment_windows={config.segment_windows} x "
        f"window_samples={config.window_samples}; see partnd.datasets.SleepSegmentDataset)",
        f"items of shape {spec.item_shape}",
    )


def window_context_options(config: PretrainConfig) -> dict[str, Any]:
    """The :class:`WindowContextObjective` arguments a context objective's builder reads from
    ``config``: ``segment_windows``, ``window_samples``, ``tau_pos`` and ``tau_neg`` (from
    ``tau_pos_windows`` and ``tau_neg_windows``) and ``normalize``."""
    return {
        "segment_windows": config.segment_windows,
        "window_samples": config.window_samples,
        "tau_pos": config.tau_pos_windows,
        "tau_neg": config.tau_neg_windows,
        "normalize": config.normalize,
    }


def build_window_encoder(config: PretrainConfig, spec: SignalSpec) -> ViTEncoder:
    """The window encoder of a context objective, after checking that ``spec`` holds segments.

    The encoder is ``config.encoder`` (with ``encoder_overrides``, tiles of ``patch_size``) on
    windows of ``window_samples``, pooled by ``window_pool``, with a slot position embedding over
    its tiles, as PART across windows' window encoder (a tile's place inside its window is not
    what these objectives predict).
    """
    check_segment_spec(config, spec)
    encoder = build_encoder(config, SignalSpec(spec.in_chans, (config.window_samples,)))
    encoder.reset_classifier(0, config.window_pool)
    encoder.add_position_embedding(
        GridSampler(1, encoder.patch_size).num_patches((config.window_samples,))
    )
    return encoder
