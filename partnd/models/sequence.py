"""Models over sequences of 30 s windows: a hierarchical encoder and a sequence classifier.

Sleep is scored window by window, but every state-of-the-art stager reads a window with its
neighbours (XSleepNet and SleepTransformer 20-21 windows, U-Sleep 35). The models here put a
*temporal* transformer on top of the per-window ViT:

* :class:`HierarchicalEncoder`: a per-window :class:`~partnd.models.vit.ViTEncoder` (1 s tiles,
  its [CLS] token is the window's embedding) followed by a temporal ViT whose tokens are the window
  embeddings. It exposes the encoder interface PART uses (``forward_features`` of a patch set,
  ``patch_size``, slot position embedding with a mask embedding), so PART runs one level up,
  across windows (:mod:`partnd.objectives.part_windows`).
* :class:`SequenceClassifier`: a hierarchical encoder classifying every window of ``L``
  consecutive windows, ``x: [B, L, C, T] -> [B, L, K]``; :meth:`SequenceClassifier.predict_night`
  predicts every window of a whole night with its context (overlapping sequences, probabilities
  averaged).

The temporal encoder is a :class:`ViTEncoder` with ``in_chans=1``, ``ndim=1`` and a "patch" of one
window embedding (``patch_size = D_window``): the same blocks, [CLS] token, slot position
embedding and key mask serve both levels.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from partnd._validation import check, check_batch_size
from partnd.models.vit import ViTEncoder
from partnd.patches.sampling import GridSampler
from partnd.signal_info import SignalInfo

__all__ = [
    "TEMPORAL_PRESETS",
    "TRAINED_LEVELS",
    "HierarchicalEncoder",
    "RecordClassifier",
    "SequenceClassifier",
    "create_temporal_encoder",
    "hierarchical_from_window",
]

#: What :attr:`HierarchicalEncoder.trained_levels` can say: every level learned, or only the
#: temporal one (its window encoder is untrained).
TRAINED_LEVELS = ("all", "temporal")

#: Temporal encoder presets: a light transformer over window embeddings (SleepTransformer uses 4
#: blocks of width 128 at the sequence level; the demo's 2 suffice for 21 windows).
TEMPORAL_PRESETS: dict[str, dict[str, float | int]] = {
    "temporal_small": {"embed_dim": 128, "depth": 2, "num_heads": 4, "mlp_ratio": 2.0},
    "temporal_base": {"embed_dim": 256, "depth": 4, "num_heads": 8, "mlp_ratio": 2.0},
    "temporal_test": {"embed_dim": 16, "depth": 1, "num_heads": 2, "mlp_ratio": 2.0},
}


def create_temporal_encoder(
    window_dim: int,
    name: str = "temporal_small",
    *,
    num_positions: int | None = None,
    pos_mask_ratio: float = 0.0,
    **overrides: Any,
) -> ViTEncoder:
    """A temporal ViT whose tokens are window embeddings of width ``window_dim``.

    Args:
        window_dim: Width of the per-window embedding (the window encoder's ``embed_dim``).
        name: One of :data:`TEMPORAL_PRESETS`.
        num_positions: Slots of a position embedding over the sequence (``None``: none).
        pos_mask_ratio: Fraction of slot embeddings replaced by the mask embedding in training.
        **overrides: ``embed_dim``, ``depth``, ``num_heads``, ``mlp_ratio``, ``drop_path_rate``.

    Returns:
        A :class:`ViTEncoder` with ``in_chans=1``, ``ndim=1``, ``patch_size=window_dim``.
    """
    check(name in TEMPORAL_PRESETS, "name", f"one of {sorted(TEMPORAL_PRESETS)}", repr(name))
    settings = {**TEMPORAL_PRESETS[name], **overrides}
    return ViTEncoder(
        in_chans=1,
        patch_size=window_dim,
        ndim=1,
        embed_dim=int(settings["embed_dim"]),
        depth=int(settings["depth"]),
        num_heads=int(settings["num_heads"]),
        mlp_ratio=float(settings["mlp_ratio"]),
        drop_path_rate=float(settings.get("drop_path_rate", 0.0)),
        num_positions=num_positions,
        pos_mask_ratio=pos_mask_ratio,
    )


def hierarchical_from_window(
    window: ViTEncoder,
    window_samples: int,
    temporal: str = "temporal_small",
    temporal_overrides: dict[str, Any] | None = None,
) -> HierarchicalEncoder:
    """A (pretrained or fresh) window encoder, copied and without classifier, under a fresh
    temporal encoder (``temporal``: a :data:`TEMPORAL_PRESETS` name, ``temporal_overrides`` its
    overrides); ``window_samples`` is the samples T of one window."""
    window = copy.deepcopy(window)
    window.reset_classifier(0)
    temporal_encoder = create_temporal_encoder(
        window.embed_dim, temporal, **(temporal_overrides or {})
    )
    return HierarchicalEncoder(window, temporal_encoder, window_samples)


class HierarchicalEncoder(nn.Module):
    """Per-window ViT, then a temporal ViT over the window embeddings.

    A window ``[C, T]`` is tiled on the window encoder's grid (1 s tiles for EEG) and encoded; its
    [CLS] token (or mean patch token, with the window encoder's ``global_pool="avg"``) is its
    embedding ``[D_w]``. A set of ``N`` windows then becomes ``N`` tokens of the temporal encoder.

    The module mirrors the :class:`ViTEncoder` interface that PART uses, at the window level: its
    "patches" are whole windows ``[B, N, C, T]`` (``patch_size = (T,)``), its width is the
    temporal encoder's, and its slot position embedding (the temporal encoder's) places windows
    in a sequence.

    Args:
        window: The per-window encoder (no classifier). It gets a slot position embedding over its
            tiles when it has none (as fine-tuning gives one): a tile's place inside its window is
            not what the window level predicts.
        temporal: The temporal encoder (``in_chans=1``, ``ndim=1``, ``patch_size=(D_w,)``, no
            classifier), e.g. from :func:`create_temporal_encoder`.
        window_samples: Samples ``T`` of one window (e.g. 3000 for 30 s at 100 Hz).
        trained_levels: The levels pretraining trained: ``"all"`` (also from scratch), or
            ``"temporal"`` when the window encoder holds no learned weights (held at its random
            start by ``PretrainConfig.trained_levels``, or drawn fresh under a kept temporal
            level). Fine-tuning's layer-wise decay then leaves the window level at the full
            rate.
    """

    num_prefix_tokens = 1
    ndim = 1

    def __init__(
        self,
        window: ViTEncoder,
        temporal: ViTEncoder,
        window_samples: int,
        trained_levels: str = "all",
    ) -> None:
        super().__init__()
        check(
            trained_levels in TRAINED_LEVELS,
            "trained_levels",
            f"one of {TRAINED_LEVELS}",
            repr(trained_levels),
        )
        check(window.ndim == 1, "window", "a 1D ViTEncoder (windows [C, T])", f"ndim={window.ndim}")
        check(
            window.num_classes == 0 and temporal.num_classes == 0,
            "window",
            "encoders without classifier (num_classes=0)",
            f"num_classes {window.num_classes} and {temporal.num_classes}",
        )
        check(
            temporal.in_chans == 1
            and temporal.ndim == 1
            and temporal.patch_size == (window.embed_dim,),
            "temporal",
            f"a ViTEncoder with in_chans=1, ndim=1, patch_size={window.embed_dim} (the window "
            "embedding width)",
            f"in_chans={temporal.in_chans}, ndim={temporal.ndim}, patch_size={temporal.patch_size}",
        )
        check(
            window_samples >= window.patch_size[0],
            "window_samples",
            f"at least the window encoder's tile ({window.patch_size[0]} samples)",
            repr(window_samples),
        )
        tiles = GridSampler(1, window.patch_size).num_patches((window_samples,))
        if window.pos_embed is None:
            window.add_position_embedding(tiles)
        check(
            window.num_positions == tiles,
            "window",
            f"a tile position embedding of {tiles} slots ({window_samples} samples)",
            f"{window.num_positions} slots",
        )
        self.window = window
        self.temporal = temporal
        self.window_samples = int(window_samples)
        self.trained_levels = trained_levels
        self.patch_size = (self.window_samples,)
        self.embed_dim = temporal.embed_dim
        self.num_classes = 0

    @property
    def in_chans(self) -> int:
        """Channels C of a window (the window encoder's; a channel-set encoder's follow the
        layout it reads)."""
        return self.window.in_chans

    @property
    def pos_embed(self) -> nn.Parameter | None:
        """The temporal encoder's slot position embedding (a window's place in the sequence)."""
        return self.temporal.pos_embed

    @property
    def pos_mask_token(self) -> nn.Parameter | None:
        """The temporal encoder's mask embedding."""
        return self.temporal.pos_mask_token

    @property
    def pos_mask_ratio(self) -> float:
        """Fraction of window slots hidden per sequence in training."""
        return self.temporal.pos_mask_ratio

    @property
    def num_positions(self) -> int | None:
        """Slots of the temporal position embedding."""
        return self.temporal.num_positions

    def embed_windows(self, windows: Tensor) -> Tensor:
        """One embedding per window.

        Args:
            windows: [M, C, T] windows.

        Returns:
            [M, D_w] window embeddings.
        """
        # The tiling of forward_grid without its finite-value check (a host synchronisation):
        # inputs are checked where they enter (datasets, forward_features' shape check).
        tiles = GridSampler(1, self.window.patch_size)(windows, validate=False)
        tokens = self.window.forward_features(tiles.patches, tiles.grid_index)
        return self.window.forward_head(tokens, pre_logits=True)

    def embed_sequences(self, x: Tensor, valid: Tensor | None) -> Tensor:
        """One embedding per window of a batch of sequences, after checking their shapes.

        Args:
            x: [B, L, C, T] sequences of consecutive windows.
            valid: [B, L] bool, False for padding, or ``None``.

        Returns:
            [B, L, D_w] window embeddings.
        """
        check(
            x.dim() == 4 and x.shape[2] == self.in_chans and x.shape[3] == self.window_samples,
            "x",
            f"sequences [B, L, {self.in_chans}, {self.window_samples}]",
            x,
        )
        if valid is not None:
            check(
                valid.shape == x.shape[:2] and valid.dtype == torch.bool,
                "valid",
                f"a bool tensor [B, L] = {tuple(x.shape[:2])}",
                valid,
            )
        batch, length = int(x.shape[0]), int(x.shape[1])
        return self.embed_windows(x.flatten(0, 1)).view(batch, length, -1)

    def embed_night(self, windows: Tensor, batch_size: int) -> Tensor:
        """One embedding per window of a night, ``batch_size`` windows at a time, on the
        encoder's device.

        Args:
            windows: [N, C, T] the night's windows (any device).
            batch_size: Windows per pass of the window encoder.

        Returns:
            [N, D_w] window embeddings.
        """
        check(
            windows.dim() == 3 and len(windows) >= 1,
            "windows",
            f"a night of windows [N, {self.in_chans}, {self.window_samples}]",
            windows,
        )
        check_batch_size(batch_size)
        device = self.window.cls_token.device
        return torch.cat(
            [self.embed_windows(chunk.to(device)) for chunk in windows.split(batch_size)]
        )

    def encode_embeddings(
        self,
        embeddings: Tensor,
        positions: Tensor | None = None,
        *,
        position_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
    ) -> Tensor:
        """Run the temporal encoder over window embeddings.

        Args:
            embeddings: [B, N, D_w] window embeddings.
            positions: [B, N] slot indices (required iff the temporal encoder has a position
                embedding).
            position_mask: [B, N] bool, windows whose slot embedding is hidden.
            key_mask: [B, N] bool, windows removed from the keys and values (padding).

        Returns:
            [B, 1 + N, D_t] tokens, [CLS] first.
        """
        return self.temporal.forward_features(
            embeddings.unsqueeze(2), positions, position_mask=position_mask, key_mask=key_mask
        )

    def forward_features(
        self,
        patches: Tensor,
        positions: Tensor | None = None,
        *,
        position_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
    ) -> Tensor:
        """Encode sets of windows (the interface PART calls).

        Args:
            patches: [B, N, C, T] windows.
            positions: [B, N] slot indices of the windows in their sequence.
            position_mask: [B, N] bool, windows whose slot embedding is hidden.
            key_mask: [B, N] bool, windows removed from the keys and values (padding).

        Returns:
            [B, 1 + N, D_t] tokens, [CLS] first.
        """
        check(
            patches.dim() == 4
            and patches.shape[2] == self.in_chans
            and patches.shape[3] == self.window_samples,
            "patches",
            f"windows [B, N, {self.in_chans}, {self.window_samples}]",
            patches,
        )
        batch, count = int(patches.shape[0]), int(patches.shape[1])
        embeddings = self.embed_windows(patches.flatten(0, 1)).view(batch, count, -1)
        return self.encode_embeddings(
            embeddings, positions, position_mask=position_mask, key_mask=key_mask
        )


def _fit_positions(temporal: ViTEncoder, context: int) -> None:
    """Give ``temporal`` a slot position embedding of ``context`` slots, keeping the first
    ``context`` learned rows of a longer one (slot ``i`` is the ``i``-th window either way)."""
    learned = temporal.pos_embed
    if learned is not None and temporal.num_positions == context:
        temporal.set_position_mask_ratio(0.0)
        return
    temporal.add_position_embedding(context)
    if learned is not None and learned.shape[0] >= context:
        with torch.no_grad():
            assert temporal.pos_embed is not None
            temporal.pos_embed.copy_(learned[:context])


class RecordClassifier(nn.Module):
    """What the classifiers that read a window with other windows of its record share: a
    hierarchical encoder, a linear layer classifying every temporal token, the class names and
    the signal of one window.

    Args:
        encoder: The hierarchical encoder (copied unless ``copy_encoder=False``).
        num_classes: Number of classes K.
        copy_encoder: Deep-copy ``encoder`` (default) instead of modifying it in place.
    """

    def __init__(
        self, encoder: HierarchicalEncoder, num_classes: int, *, copy_encoder: bool = True
    ) -> None:
        super().__init__()
        check(num_classes >= 2, "num_classes", "an int >= 2", repr(num_classes))
        check(
            isinstance(encoder, HierarchicalEncoder),
            "encoder",
            "a HierarchicalEncoder (window encoder + temporal encoder)",
            type(encoder).__name__,
        )
        self.encoder = copy.deepcopy(encoder) if copy_encoder else encoder
        self.num_classes = int(num_classes)
        self.head = nn.Linear(self.encoder.embed_dim, num_classes)
        nn.init.trunc_normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)
        #: Class names of the labels, recorded by ``finetune`` (``None`` if not given).
        self.class_names: list[str] | None = None
        #: The signal of one window it was trained on (``finetune`` records names and rate).
        self.signal_info = SignalInfo(self.encoder.in_chans, (self.encoder.window_samples,))

    @property
    def spatial_shape(self) -> tuple[int]:
        """``(T,)``: samples of one window."""
        return (self.encoder.window_samples,)


class SequenceClassifier(RecordClassifier):
    """Classify every window of ``L`` consecutive windows with a hierarchical encoder.

    ``x: [B, L, C, T] -> [B, L, K]``: each window is embedded by the window encoder, the temporal
    encoder (with a slot position embedding over the ``L`` places) mixes the sequence, and a
    linear layer classifies every output token. Padding (record edges) is removed from the
    temporal encoder's keys with ``valid``.

    Args:
        encoder: The hierarchical encoder (copied unless ``copy_encoder=False``); a pretrained
            window encoder alone is wrapped with a fresh temporal encoder by
            :meth:`from_window_encoder`.
        num_classes: Number of classes K.
        context: Windows per sequence L.
        copy_encoder: Deep-copy ``encoder`` (default) instead of modifying it in place.

    The temporal slot embedding keeps the first ``L`` rows of a pretrained one with at least
    ``L`` slots (anchored pretraining learned it), else it is fresh; its mask embedding is
    dropped.
    """

    def __init__(
        self,
        encoder: HierarchicalEncoder,
        num_classes: int,
        *,
        context: int,
        copy_encoder: bool = True,
    ) -> None:
        check(context >= 1, "context", "a positive number of windows", repr(context))
        super().__init__(encoder, num_classes, copy_encoder=copy_encoder)
        _fit_positions(self.encoder.temporal, context)
        self.context = int(context)

    @classmethod
    def from_window_encoder(
        cls,
        window: ViTEncoder,
        num_classes: int,
        *,
        context: int,
        window_samples: int,
        temporal: str = "temporal_small",
        temporal_overrides: dict[str, Any] | None = None,
    ) -> SequenceClassifier:
        """A sequence classifier on a (pretrained or fresh) window encoder, with a fresh temporal
        encoder.

        Args:
            window: Window encoder (copied).
            num_classes: Number of classes K.
            context: Windows per sequence L.
            window_samples: Samples T of one window.
            temporal: Temporal preset (:data:`TEMPORAL_PRESETS`).
            temporal_overrides: Overrides of that preset.
        """
        encoder = hierarchical_from_window(window, window_samples, temporal, temporal_overrides)
        return cls(encoder, num_classes, context=context, copy_encoder=False)

    def classify_embeddings(self, embeddings: Tensor, valid: Tensor | None = None) -> Tensor:
        """Classify sequences of window embeddings.

        Args:
            embeddings: [B, L', D_w] with ``L' <= context``.
            valid: [B, L'] bool, False for padding (``None``: all valid).

        Returns:
            [B, L', K] logits.
        """
        batch, length = int(embeddings.shape[0]), int(embeddings.shape[1])
        check(
            1 <= length <= self.context,
            "embeddings",
            f"sequences of 1 to {self.context} windows",
            embeddings,
        )
        positions = torch.arange(length, device=embeddings.device).expand(batch, length)
        key_mask = None if valid is None else ~valid
        tokens = self.encoder.encode_embeddings(embeddings, positions, key_mask=key_mask)
        return self.head(tokens[:, self.encoder.num_prefix_tokens :])

    def forward(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """Classify every window of a batch of sequences.

        Args:
            x: [B, L, C, T] sequences of consecutive windows.
            valid: [B, L] bool, False for padding past a record's edge (``None``: all valid).

        Returns:
            [B, L, K] logits.
        """
        return self.classify_embeddings(self.encoder.embed_sequences(x, valid), valid)

    @torch.no_grad()
    def predict_night(self, windows: Tensor, *, batch_size: int = 256) -> Tensor:
        """Probabilities of every window of one night, each read with its context.

        Every window is embedded once; the temporal encoder then reads every run of ``L``
        consecutive windows (stride 1; a night shorter than ``L`` is one padded sequence) and a
        window's probabilities are the mean over the sequences that hold it.

        Args:
            windows: [N, C, T] the night's consecutive windows, in order.
            batch_size: Windows (and sequences) per forward pass.

        Returns:
            [N, K] float32 probabilities on the CPU.
        """
        device = self.head.weight.device
        embeddings = self.encoder.embed_night(windows, batch_size)
        count = len(embeddings)
        length = min(self.context, count)
        starts = torch.arange(count - length + 1, device=device)
        index = starts[:, None] + torch.arange(length, device=device)  # [S, L']
        totals = torch.zeros(count, self.num_classes, device=device)
        for rows in index.split(batch_size):
            probabilities = self.classify_embeddings(embeddings[rows]).float().softmax(-1)
            totals.index_add_(0, rows.flatten(), probabilities.flatten(0, 1))
        coverage = torch.bincount(index.flatten(), minlength=count).clamp(min=1)
        return (totals / coverage[:, None]).cpu()
