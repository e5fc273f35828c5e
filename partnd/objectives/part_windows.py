"""PART across windows: relative time shifts between whole windows of a longer segment.

Within a 30 s window a 1 s patch's content does not say where it sits
(``docs/results/part.md``), but the night has structure at the scale of tens of minutes: the sleep
cycle. PART across windows applies PART one level up, as the paper describes its EEG pretext
("relative time shifts between randomly-sampled, unequally-spaced windows from longer
sequences"). One step, for a batch of
segments ``x: [B, C, S*T]`` (``S`` consecutive windows of ``T`` samples of one record,
:class:`~partnd.datasets.segments.SleepSegmentDataset`):

1. :class:`~partnd.patches.sampling.OffGridSampler` draws ``N`` windows of ``T`` samples at random
integer
   starts inside each segment (exact slices; off the stored 30 s grid);
2. every drawn window is normalised as fine-tuning windows will be (``PretrainConfig.normalize``):
   instance-normalised (``"window"``, :func:`~partnd.engine.normalization.instance_normalize`),
   or, with segments already divided by their night's channel scales (``"record"``), only its
   mean removed, so its amplitude relative to the night stays visible;
3. the :class:`~partnd.models.sequence.HierarchicalEncoder` embeds each window with the window
   ViT (1 s tiles; its mean patch token, or [CLS] with ``window_pool="token"``) and mixes the
   ``N`` embeddings with the temporal ViT;
4. the relative head predicts, for ``num_pairs`` (reference, target) pairs, the shift
   ``Δt = (c_tgt - c_ref) / T`` in window lengths; the loss is the mean squared error.

**Anchored** (``pos_embed=True``, the default of the ``eeg_sleep_windows`` preset): the temporal
encoder has a slot position embedding over the segment's ``S`` slots (slot = stored window holding
a drawn window's centre); per segment ``pos_mask_ratio`` of the drawn windows get the mask
embedding, the others are anchors whose slot is visible. Loss and diagnostics use the pairs whose
target is hidden, and the diagnostics' floor is the content-free predictor that knows every
visible slot (:class:`~partnd.objectives.part.PARTModel` does all of this for any encoder with a
slot and a mask embedding). A hidden window can only be placed from its content, relative to the
anchors: "this looks like the deep sleep 20 minutes after that anchor". **Plain**
(``pos_embed=False``): no temporal position embedding, every pair counts, the floor is the best
constant.

**Overlap is not the answer.** Two drawn windows closer than one window length share samples,
and matching them would place a hidden window without learning anything about sleep. Besides
``nmse`` the objective logs ``nmse_isolated``: the same ratio over the pairs whose two windows
overlap no other drawn window (``isolated_share`` of the pairs). The two staying alike means the
error falls through content, not through shared samples (measured on the demo store in
``docs/results/part.md``).

**Scales.** The shifts span ``±(S - 1)`` window lengths (standard deviation ``(S - 1) / √6`` for
independent uniform windows: 24 for S = 60), where a freshly initialised head outputs values near
0; the head's output is therefore multiplied by that standard deviation (:class:`ScaledHead`, a
fixed reparametrisation: targets, loss and diagnostics stay in window lengths). The temporal slot
embedding starts from a sine-cosine table (as MAE's fixed embeddings; here only the
initialisation, it is learned), so that neighbouring slots start alike and a slot is linearly
readable from the start. Measured on the demo store (S = 60, N = 32, 80% anchors): the
content-free floor is reached in about 50 steps with both, about 250 without
(``docs/results/part.md``).

The pretrained window encoder alone initialises a single-window classifier; with the temporal
encoder it initialises a :class:`~partnd.models.sequence.SequenceClassifier`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import cast

import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.engine.config import PretrainConfig
from partnd.models.heads import build_head
from partnd.models.sequence import TEMPORAL_PRESETS, HierarchicalEncoder, create_temporal_encoder
from partnd.models.vit import ViTEncoder
from partnd.objectives.base import build_encoder
from partnd.objectives.part import PARTDraws, PARTModel, PARTOutput
from partnd.objectives.window_context import (
    check_normalize,
    check_segment_spec,
    normalize_windows,
)
from partnd.patches.sampling import Boxes, OffGridSampler, PatchBatch
from partnd.signal_info import SignalSpec

__all__ = [
    "CrossWindowPART",
    "ScaledHead",
    "build_part_windows",
    "isolated_windows",
    "part_windows_parts",
    "sincos_positions",
]

_TEMPORAL_OVERRIDES = frozenset({"embed_dim", "depth", "num_heads", "mlp_ratio", "drop_path_rate"})


#: Scale of the sine-cosine initialisation of the temporal slot embedding: rows of norm
#: ``0.1 * sqrt(D / 2)`` (0.8 for D = 128), the norm of a temporal token at initialisation.
_SINCOS_SCALE = 0.1


def sincos_positions(num_positions: int, dim: int) -> Tensor:
    """The 1-D sine-cosine position table of MAE (and "Attention is all you need").

    Args:
        num_positions: Slots P.
        dim: Width D (even).

    Returns:
        [P, D] float32: ``sin(p ω_k)`` in the first D/2 columns, ``cos(p ω_k)`` in the others,
        ``ω_k = 10000^(-k / (D/2))``.
    """
    check(dim >= 2 and dim % 2 == 0, "dim", "an even width >= 2", repr(dim))
    position = torch.arange(num_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))
    return torch.cat([torch.sin(position * omega), torch.cos(position * omega)], dim=1)


def isolated_windows(centers: Tensor, length: int) -> Tensor:
    """Which windows share no sample with any other window of their segment.

    Args:
        centers: [B, N] window centres in samples.
        length: Window length T in samples.

    Returns:
        [B, N] bool: True where every other window's centre is at least ``length`` away.
    """
    distance = (centers[:, :, None] - centers[:, None, :]).abs()
    distance.diagonal(dim1=1, dim2=2).fill_(float("inf"))
    return (distance >= length).all(dim=-1)


class ScaledHead(nn.Module):
    """A relative head whose output is multiplied by a fixed ``scale``.

    Args:
        head: The relative head (``head(tokens, ref, tgt) -> [B, K, out_dim]``).
        scale: The factor, e.g. the targets' standard deviation.
    """

    def __init__(self, head: nn.Module, scale: float) -> None:
        super().__init__()
        check(scale > 0, "scale", "a positive number", repr(scale))
        self.head = head
        self.scale = float(scale)
        self.out_dim = getattr(head, "out_dim", None)
        self.embed_dim = getattr(head, "embed_dim", None)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K]. Returns: [B, K, out_dim]."""
        return self.head(tokens, ref, tgt) * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}"


class CrossWindowPART(PARTModel):
    """PART over whole windows drawn off-grid from segments of consecutive windows.

    Args:
        encoder: A :class:`HierarchicalEncoder`; with a temporal slot position embedding (and a
            mask embedding) the model is anchored, and that embedding must have
            ``segment_windows`` slots.
        head: A relative head with ``out_dim=1`` and the temporal encoder's width; its output
            is multiplied by ``(S - 1) / √6`` (:class:`ScaledHead`).
        segment_windows: Windows S per segment; inputs are ``[B, C, S * T]``.
        num_windows: Windows N drawn per segment.
        num_pairs: (reference, target) pairs K per segment.
        shared_pairs: Plain mode: one set of pairs for the batch (anchored mode draws per
            segment).
        normalize: How drawn windows are normalised, as the window datasets' ``normalize``:
            ``"window"`` (instance normalisation) or ``"record"`` (the segments come divided by
            their night's channel scales, see :class:`SleepSegmentDataset`; the drawn window's
            mean is removed).
        variance_weight: Weight of the anti-collapse variance term on the window embeddings
            (:mod:`partnd.objectives.anti_collapse`; 0: off).
        covariance_weight: Weight of its covariance term.

    ``self.encoder`` is the hierarchical encoder (typed as PART's encoder interface);
    :attr:`hierarchical` gives it with its own type.
    """

    def __init__(
        self,
        encoder: HierarchicalEncoder,
        head: nn.Module,
        *,
        segment_windows: int,
        num_windows: int,
        num_pairs: int,
        shared_pairs: bool = True,
        normalize: str = "window",
        variance_weight: float = 0.0,
        covariance_weight: float = 0.0,
    ) -> None:
        check_normalize(normalize)
        check(
            isinstance(encoder, HierarchicalEncoder),
            "encoder",
            "a HierarchicalEncoder (window encoder + temporal encoder)",
            type(encoder).__name__,
        )
        check(segment_windows >= 2, "segment_windows", "an int >= 2", repr(segment_windows))
        check(num_windows >= 2, "num_windows", "an int >= 2", repr(num_windows))
        check(
            encoder.pos_embed is None or encoder.num_positions == segment_windows,
            "encoder",
            f"a temporal position embedding of segment_windows={segment_windows} slots",
            f"{encoder.num_positions} slots",
        )
        sampler = OffGridSampler(1, encoder.window_samples, num_windows, integer_boxes=True)
        # HierarchicalEncoder has the encoder interface PART uses, one level up.
        super().__init__(
            cast(ViTEncoder, encoder),
            ScaledHead(head, (segment_windows - 1) / math.sqrt(6)),
            sampler,
            num_pairs=num_pairs,
            shared_pairs=shared_pairs,
            variance_weight=variance_weight,
            covariance_weight=covariance_weight,
        )
        self.segment_windows = int(segment_windows)
        self.num_windows = int(num_windows)
        self.normalize = normalize

    @property
    def hierarchical(self) -> HierarchicalEncoder:
        """The window encoder and the temporal encoder."""
        return cast(HierarchicalEncoder, self.encoder)

    def _check_input(self, x: Tensor) -> None:
        hierarchical = self.hierarchical
        length = self.segment_windows * hierarchical.window_samples
        check(
            x.dim() == 3 and x.shape[1] == hierarchical.in_chans and x.shape[2] == length,
            "x",
            f"segments [B, {hierarchical.in_chans}, {length}] ({self.segment_windows} windows "
            f"of {hierarchical.window_samples} samples)",
            x,
        )

    def cut(self, x: Tensor, boxes: Boxes) -> PatchBatch:
        """Cut the drawn windows of every segment and normalise each as fine-tuning windows are
        (no gradient): instance normalisation, or (``normalize="record"``, segments already
        divided by their night's channel scales) the window's mean removed.

        Args:
            x: [B, C, S * T] segments of raw (not per-window normalised) values.
            boxes: The windows drawn by :meth:`draw` (``N`` per segment).

        Returns:
            A :class:`~partnd.patches.sampling.PatchBatch` with ``patches: [B, N, C, T]`` normalised
            per window and channel, centres and sizes in samples, ``grid_index`` the slot of
            each window's centre.
        """
        windows = super().cut(x, boxes)
        with torch.no_grad():
            patches = normalize_windows(windows.patches, self.normalize)
            return dataclasses.replace(windows, patches=patches)

    def encode(
        self, patches: PatchBatch, position_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Embed every drawn window, then mix them with the temporal encoder.

        Returns:
            ``[B, N, D_t]`` temporal tokens, and ``[B, N, D_w]`` window embeddings (what the
            anti-collapse term reads: the features a probe or a classifier reads).
        """
        positions, position_mask = self.slots(patches, position_mask)
        hierarchical = self.hierarchical
        batch, count = int(patches.patches.shape[0]), int(patches.patches.shape[1])
        embeddings = hierarchical.embed_windows(patches.patches.flatten(0, 1))
        embeddings = embeddings.view(batch, count, -1)
        tokens = hierarchical.encode_embeddings(embeddings, positions, position_mask=position_mask)
        return tokens[:, hierarchical.num_prefix_tokens :], embeddings

    def forward_with_draws(self, x: Tensor, draws: PARTDraws) -> PARTOutput:
        """One step (see :meth:`PARTModel.forward_with_draws`), plus the diagnostics of isolated
        pairs.

        Args:
            x: [B, C, S * T] segments.
            draws: The step's windows, hidden slots and pairs
                (:meth:`~partnd.objectives.part.PARTModel.draw`).

        Returns:
            PART's output; ``metrics`` also hold ``nmse_isolated`` (error over the content-free
            floor on the pairs whose two windows overlap no other drawn window) and
            ``isolated_share`` (their share of the pairs); a batch without such a pair counts
            as the floor (1).
        """
        output = super().forward_with_draws(x, draws)
        with torch.no_grad():
            alone = isolated_windows(
                output.patches.centers[..., 0], self.hierarchical.window_samples
            )
            ref, tgt = output.ref, output.tgt
            if ref.dim() == 1:  # shared pairs
                ref, tgt = ref.expand(alone.shape[0], -1), tgt.expand(alone.shape[0], -1)
            weight = (alone.gather(1, ref) & alone.gather(1, tgt)).float()[..., None]
            target = output.target.float()
            if output.baseline is None:  # the best constant of these pairs
                floor = (target * weight).sum() / weight.sum().clamp_min(1.0)
            else:
                floor = output.baseline.float()
            error = ((output.pred.float() - target).square() * weight).sum()
            floor_error = ((floor - target).square() * weight).sum()
            ratio = error / floor_error.clamp_min(1e-12)
            output.metrics["nmse_isolated"] = torch.where(weight.sum() > 0, ratio, 1.0)
            output.metrics["isolated_share"] = weight.mean()
        return output

    def extra_repr(self) -> str:
        return (
            f"segment_windows={self.segment_windows}, num_windows={self.num_windows}, "
            + super().extra_repr()
        )


def part_windows_parts(
    config: PretrainConfig, spec: SignalSpec
) -> tuple[HierarchicalEncoder, nn.Module]:
    """The hierarchical encoder and the relative head of PART across windows (and of
    ``part_joint``, which adds PART within windows), for segments
    ``[C, segment_windows * window_samples]``.

    The window encoder is ``config.encoder`` (with ``encoder_overrides``, tiles of
    ``patch_size``) on windows of ``window_samples``, pooled by ``window_pool``; the temporal
    encoder is ``config.temporal_encoder`` (with ``temporal_overrides``), with
    ``segment_windows`` slots and ``pos_mask_ratio`` hidden when ``pos_embed`` (anchored).
    With ``trained_levels="temporal"`` the window encoder's parameters take no gradient.
    """
    check_segment_spec(config, spec)
    check(
        config.scale_range is None and config.pair_radius is None,
        "PretrainConfig.scale_range",
        "None, and pair_radius None, for part_windows (whole windows of fixed length)",
        f"scale_range={config.scale_range}, pair_radius={config.pair_radius}",
    )
    check(
        config.temporal_encoder in TEMPORAL_PRESETS,
        "PretrainConfig.temporal_encoder",
        f"one of {sorted(TEMPORAL_PRESETS)}",
        repr(config.temporal_encoder),
    )
    unknown = sorted(set(config.temporal_overrides) - _TEMPORAL_OVERRIDES)
    check(
        not unknown,
        "PretrainConfig.temporal_overrides",
        f"keys among {sorted(_TEMPORAL_OVERRIDES)}",
        f"unknown key(s) {unknown}",
    )
    window = build_encoder(config, SignalSpec(spec.in_chans, (config.window_samples,)))
    window.reset_classifier(0, config.window_pool)
    temporal = create_temporal_encoder(
        window.embed_dim,
        config.temporal_encoder,
        num_positions=config.segment_windows if config.pos_embed else None,
        pos_mask_ratio=config.pos_mask_ratio if config.pos_embed else 0.0,
        **config.temporal_overrides,
    )
    if temporal.pos_embed is not None:
        with torch.no_grad():
            table = sincos_positions(config.segment_windows, temporal.embed_dim)
            temporal.pos_embed.copy_(_SINCOS_SCALE * table)
    encoder = HierarchicalEncoder(
        window, temporal, config.window_samples, trained_levels=config.trained_levels
    )
    if config.trained_levels == "temporal":
        window.requires_grad_(False)
    head = build_head(
        config.head,
        embed_dim=encoder.embed_dim,
        out_dim=1,
        num_patches=config.num_windows,
        **config.head_overrides,
    )
    return encoder, head


def build_part_windows(config: PretrainConfig, spec: SignalSpec) -> CrossWindowPART:
    """PART across windows for segments ``[C, segment_windows * window_samples]``
    (:func:`part_windows_parts` gives its encoder and head)."""
    encoder, head = part_windows_parts(config, spec)
    return CrossWindowPART(
        encoder,
        head,
        segment_windows=config.segment_windows,
        num_windows=config.num_windows,
        num_pairs=config.num_pairs,
        shared_pairs=config.shared_pairs,
        normalize=config.normalize,
        variance_weight=config.variance_weight,
        covariance_weight=config.covariance_weight,
    )
