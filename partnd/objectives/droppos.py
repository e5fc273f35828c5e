"""DropPos (Wang et al., NeurIPS 2023) on on-grid N-D patches.

"DropPos: Pre-Training Vision Transformers by Reconstructing Dropped Positions". Official code:
``github.com/Haochen-Wang409/DropPos`` (``models_DropPos_mae.py``, ``engine_pretrain.py``,
``scripts/pretrain_base.sh``); the choices below follow that code, with its file named.

One training step, for inputs ``x: [B, C, *spatial]``:

1. the input is tiled on the regular grid (:class:`~partnd.patches.sampling.GridSampler`, N slots);
2. per example ``round(mask_ratio * N)`` patches (clamped to ``[1, N - 1]``; at least 2 must
   remain) are dropped; the encoder sees the ``K`` kept ones (``random_masking`` in
   ``models_DropPos_mae.py``);
3. among the kept, ``round(position_mask_ratio * K)`` (clamped to ``[1, K - 1]``) get the
   encoder's learnable position mask token instead of their slot embedding
   (``mask_token_type='param'``), the others keep their slot embedding;
4. a small decoder without position embedding (``Linear(D -> D_dec)``, pre-norm blocks over
   [CLS] and the K tokens, LayerNorm, ``Linear(D_dec -> N)``) scores the N slots for each kept
   token (``forward_decoder``);
5. **position smoothing**: the target of a token from slot ``i`` is the distribution
   ``q_i(j) ∝ exp(-||g_i - g_j||² / σ²)`` over slots ``j`` (``g`` the grid coordinates, in cells;
   ``_get_label_smoothing_map`` in ``engine_pretrain.py``); ``σ`` decays linearly from
   ``smoothing_sigma`` to 0 over training (``--sigma_decay``: ``(1 - epoch / epochs) * σ₀``;
   here per step via :meth:`DropPosModel.set_training_progress`); ``σ = 0`` is one-hot;
6. **attentive reconstruction** (``--attn_guide``, ``get_feature_similarity``): without gradient,
   the encoder also encodes the *whole* input with every slot embedding visible; the cosine
   similarity of [CLS] to each patch token, ``softmax(sim / 0.1)`` over the N patches, gathered
   at the kept patches and renormalised to sum to 1 over them, weighs each token's loss;
7. loss (``forward_drop_pos_loss``): ``Σ w · CE(q, p) / Σ w`` over the batch, with
   ``w = [position hidden] · attention weight`` and ``CE(q, p) = -Σ_j q(j) log p(j)``: only the
   tokens whose position was dropped carry the loss.

Diagnostics (:func:`~partnd.objectives.diagnostics.classification_diagnostics`): accuracy of the
slot prediction on the tokens whose position was dropped (unweighted) next to chance ``1 / N``;
``accuracy_floor``, the best content-free predictor's accuracy, ``1 / (N - A)``: it sees the
``A`` anchors' slot embeddings and can rule those slots out, nothing more; and
``smoothing_sigma``, the current ``σ``.

**Differences from the official code** (see ``docs/baselines.md``): the encoder's slot embedding
is learnable (``ViTEncoder``'s, trunc-normal init) instead of fixed 2D sin-cos; soft labels are
normalised per target slot (each row of the smoothing map sums to 1; the official
``weight / weight.sum(-1)`` broadcasts over the last axis and so divides column ``j`` by row sum
``j``, which leaves border rows summing to less than 1); ``σ`` decays per step instead of per
epoch; the decoder's width and depth are derived from the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from partnd._validation import check
from partnd.models.vit import ViTEncoder
from partnd.objectives.base import GridObjective, ObjectiveOutput, add_slot_embedding, build_encoder
from partnd.objectives.diagnostics import classification_diagnostics
from partnd.objectives.mae import TokenDecoder, decoder_width, masked_count, random_split

if TYPE_CHECKING:
    from partnd.engine.config import PretrainConfig
    from partnd.signal_info import SignalSpec

__all__ = [
    "DropPosDecoder",
    "DropPosDraws",
    "DropPosModel",
    "DropPosOutput",
    "build_droppos",
    "grid_coordinates",
    "position_smoothing",
    "smoothed_labels",
]

#: Temperature of the [CLS]-to-patch similarity softmax (``get_feature_similarity``: ``/ 0.1``).
ATTENTION_TEMPERATURE = 0.1

#: Decoder depth of the official pretraining script (``DropPos_mae_vit_base_patch16_dec512d2b``).
DEFAULT_DECODER_DEPTH = 2


def grid_coordinates(grid_shape: tuple[int, ...]) -> Tensor:
    """Integer cell coordinates of the slots of a grid, in row-major slot order.

    Args:
        grid_shape: Tiles per dimension, ``(L_d // P_d)``.

    Returns:
        [N, ndim] float32 coordinates; row ``i`` is slot ``i``'s (last dimension fastest).
    """
    axes = [torch.arange(g, dtype=torch.float32) for g in grid_shape]
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh], dim=-1)


#: Widths below this give one-hot labels: slots lie at least one grid cell apart, and
#: ``exp(-1 / 0.01²)`` is 0 in float32, so clamping the width here changes nothing and needs no
#: branch on its value (a compiled step reads it from a tensor without a host synchronisation).
ONE_HOT_WIDTH = 0.01


def smoothed_labels(coordinates: Tensor, labels: Tensor, sigma: float | Tensor) -> Tensor:
    """DropPos position smoothing: a Gaussian over grid distance around each label's slot.

    ``q_i(j) = exp(-||g_i - g_j||² / σ²) / Σ_k exp(-||g_i - g_k||² / σ²)`` (the official
    ``exp(-dist / sigma ** 2)`` with ``dist`` the squared distance, normalised per label).

    Args:
        coordinates: [N, ndim] slot coordinates in grid cells (:func:`grid_coordinates`).
        labels: [...] long slot indices.
        sigma: Width in grid cells (a number or a 0-d tensor); 0 gives one-hot labels.

    Returns:
        [..., N] float32 distributions (each sums to 1).
    """
    width = torch.as_tensor(sigma, dtype=torch.float32, device=coordinates.device)
    width = width.clamp(min=ONE_HOT_WIDTH)
    centre = coordinates[labels]  # [..., ndim]
    distance = (centre.unsqueeze(-2) - coordinates).square().sum(dim=-1)  # [..., N]
    weight = torch.exp(-distance / width.square())
    return weight / weight.sum(dim=-1, keepdim=True)


def position_smoothing(grid_shape: tuple[int, ...], sigma: float) -> Tensor:
    """The full smoothing map of a grid: row ``i`` is the soft label of slot ``i``.

    Args:
        grid_shape: Tiles per dimension.
        sigma: Width in grid cells (0: identity).

    Returns:
        [N, N] float32, rows summing to 1.
    """
    coordinates = grid_coordinates(grid_shape)
    return smoothed_labels(coordinates, torch.arange(coordinates.shape[0]), sigma)


@dataclass(frozen=True)
class DropPosDraws:
    """The random masks of one DropPos step (:meth:`DropPosModel.draw`).

    Attributes:
        kept: [B, K] slot indices of the patches the encoder sees, ascending.
        hidden: [B, M] positions among the K kept tokens whose slot embedding is dropped,
            ascending.
    """

    kept: Tensor
    hidden: Tensor


@dataclass(frozen=True)
class DropPosOutput(ObjectiveOutput):
    """Result of one DropPos forward pass.

    Attributes:
        loss: Scalar float32 weighted soft-label cross-entropy on the position-dropped tokens.
        metrics: ``accuracy``, ``accuracy_chance`` (``1 / N``) and ``accuracy_floor``
            (``1 / (N - anchors)``) on the position-dropped tokens, ``smoothing_sigma``.
        logits: [B, K, N] slot scores of the K kept tokens.
        labels: [B, K] slot index of each kept token (ascending).
        soft_labels: [B, K, N] smoothed targets at the current ``σ``.
        position_mask: [B, K] bool, True where the token's position embedding was dropped.
        weights: [B, K] loss weight of each token (0 where the position was visible).
    """

    logits: Tensor
    labels: Tensor
    soft_labels: Tensor
    position_mask: Tensor
    weights: Tensor


class DropPosDecoder(TokenDecoder):
    """DropPos's decoder: ``Linear(D -> width)``, pre-norm blocks, LayerNorm, ``Linear(-> N)``.

    No position embedding (``models_DropPos_mae.py``: "DropPos decoder specifics (w/o position
    embedding)").

    Args:
        embed_dim: Encoder width D.
        num_positions: Number of slots N (classes).
        width: Decoder width.
        depth: Number of blocks.
        num_heads: Attention heads (must divide ``width``).
        mlp_ratio: Feed-forward width relative to ``width``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_positions: int,
        *,
        width: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__(
            embed_dim,
            num_positions,
            width=width,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
        )

    def forward(self, features: Tensor) -> Tensor:
        """Args: features: [B, 1 + K, D] encoder output, [CLS] first.

        Returns: [B, K, N] slot logits of the patch tokens ([CLS] dropped)."""
        return self.decode(self.embed(features))


class DropPosModel(GridObjective):
    """Encoder with a maskable slot position embedding + position-classifying decoder.

    Args:
        encoder: A :class:`ViTEncoder` without classifier, with a slot position embedding of the
            grid's size N and a position mask token (``add_position_embedding(N, ratio > 0)``).
        spatial_shape: Spatial shape of every input (fixes the grid).
        mask_ratio: Fraction of patches dropped per example (DropPos: 0.75).
        position_mask_ratio: Fraction of the kept patches whose position is dropped (0.75).
        smoothing_sigma: Initial smoothing width in grid cells (1.0), decayed linearly to 0 over
            training; 0 disables smoothing.
        decoder_dim: Decoder width (``None``: see :func:`~partnd.objectives.mae.decoder_width`).
        decoder_depth: Decoder blocks (``None``: 2, the official script's).
        attentive: Weigh each token's loss by the [CLS]-to-patch similarity (the official
            script's ``--attn_guide``); ``False`` weighs the position-dropped tokens equally.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        spatial_shape: tuple[int, ...],
        *,
        mask_ratio: float = 0.75,
        position_mask_ratio: float = 0.75,
        smoothing_sigma: float = 1.0,
        decoder_dim: int | None = None,
        decoder_depth: int | None = None,
        attentive: bool = True,
    ) -> None:
        super().__init__(encoder, spatial_shape, "DropPos")
        grid_shape = tuple(
            length // p for length, p in zip(self.spatial_shape, encoder.patch_size, strict=True)
        )
        num_positions = self.num_positions
        check(
            encoder.num_positions == num_positions and encoder.pos_mask_token is not None,
            "encoder",
            f"an encoder with a slot position embedding of {num_positions} slots and a position "
            "mask token (add_position_embedding(N, position_mask_ratio))",
            f"num_positions={encoder.num_positions}, pos_mask_ratio={encoder.pos_mask_ratio}",
        )
        check(0.0 < mask_ratio < 1.0, "mask_ratio", "a ratio in (0, 1)", repr(mask_ratio))
        check(
            0.0 < position_mask_ratio < 1.0,
            "position_mask_ratio",
            "a ratio in (0, 1)",
            repr(position_mask_ratio),
        )
        check(smoothing_sigma >= 0.0, "smoothing_sigma", "a width >= 0", repr(smoothing_sigma))
        num_dropped = masked_count(mask_ratio, num_positions) if num_positions >= 2 else 0
        num_kept = num_positions - num_dropped
        check(
            num_kept >= 2,
            "mask_ratio",
            "a ratio that keeps at least 2 patches (one with its position dropped, one anchor "
            "whose slot embedding is trained)",
            f"{mask_ratio} keeps {num_kept} of {num_positions} patch(es)",
        )
        width, num_heads = decoder_width(encoder, decoder_dim)
        self.decoder = DropPosDecoder(
            encoder.embed_dim,
            num_positions,
            width=width,
            depth=decoder_depth if decoder_depth is not None else DEFAULT_DECODER_DEPTH,
            num_heads=num_heads,
            mlp_ratio=float(encoder.architecture["mlp_ratio"]),
        )
        self.register_buffer("coordinates", grid_coordinates(grid_shape), persistent=False)
        self.coordinates: Tensor
        self.grid_shape = grid_shape
        self.mask_ratio = mask_ratio
        self.position_mask_ratio = position_mask_ratio
        self.num_dropped = num_dropped
        self.num_kept = num_kept
        self.num_position_masked = masked_count(position_mask_ratio, num_kept)
        self.smoothing_sigma = smoothing_sigma
        self.attentive = attentive
        # a tensor, not a Python number: a compiled forward reads it without recompiling
        self.register_buffer("progress", torch.zeros(()), persistent=False)
        self.progress: Tensor

    def set_training_progress(self, fraction: float) -> None:
        """Set the fraction of training done (``step / total_steps``, clamped to [0, 1])."""
        self.progress.fill_(min(1.0, max(0.0, float(fraction))))

    @property
    def sigma(self) -> Tensor:
        """Current smoothing width (0-d float32): ``smoothing_sigma * (1 - progress)`` (linear
        decay to 0)."""
        return self.smoothing_sigma * (1.0 - self.progress)

    @torch.no_grad()
    def patch_similarity(self, patches: Tensor) -> Tensor:
        """Attentive-reconstruction weights of every patch (no gradient).

        The encoder encodes all N patches with every slot embedding visible; the weights are
        ``softmax(cos([CLS], patch) / 0.1)`` over the patches (``get_feature_similarity``).

        Args:
            patches: [B, N, C, *P] all on-grid patches, slot order.

        Returns:
            [B, N] float32 weights, summing to 1 per example.
        """
        batch = patches.shape[0]
        positions = torch.arange(self.num_positions, device=patches.device).expand(batch, -1)
        hidden = torch.zeros(positions.shape, dtype=torch.bool, device=patches.device)
        features = self.encoder.forward_features(patches, positions, position_mask=hidden).float()
        cls, tokens = features[:, :1], features[:, self.encoder.num_prefix_tokens :]
        similarity = F.cosine_similarity(cls, tokens, dim=-1)
        return torch.softmax(similarity / ATTENTION_TEMPERATURE, dim=-1)

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> DropPosDraws:
        """Draw the dropped patches, then the dropped positions among the kept ones.

        Args:
            x: [B, C, *spatial] inputs (shape and device read).
            generator: Random source of the masks (same seed, same masks).

        Returns:
            The :class:`DropPosDraws`.
        """
        self.check_input(x)
        batch, device = int(x.shape[0]), x.device
        _, kept = random_split(batch, self.num_positions, self.num_dropped, generator, device)
        hidden, _ = random_split(batch, self.num_kept, self.num_position_masked, generator, device)
        return DropPosDraws(kept=kept, hidden=hidden)

    def forward_with_draws(self, x: Tensor, draws: DropPosDraws) -> DropPosOutput:
        """Run one DropPos step on the step's dropped patches and positions
        (``forward(x, generator)`` draws them).

        Args:
            x: [B, C, *spatial] inputs.
            draws: The step's masks (:meth:`draw`).

        Returns:
            A :class:`DropPosOutput`; call ``output.loss.backward()`` to train.
        """
        kept, hidden = draws.kept, draws.hidden
        patches = self.sample(x).patches  # [B, N, C, *P], slot order
        batch, device = patches.shape[0], patches.device
        position_mask = torch.zeros(batch, self.num_kept, dtype=torch.bool, device=device)
        position_mask.scatter_(1, hidden, True)
        rows = torch.arange(batch, device=device).unsqueeze(1)
        features = self.encoder.forward_features(
            patches[rows, kept], kept, position_mask=position_mask
        )
        logits = self.decoder(features)  # [B, K, N]
        labels = kept
        soft_labels = smoothed_labels(self.coordinates, labels, self.sigma)
        weights = position_mask.float()
        if self.attentive:
            attention = self.patch_similarity(patches).gather(1, kept)
            weights = weights * (attention / attention.sum(dim=-1, keepdim=True))
        cross_entropy = -(soft_labels * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1)
        loss = (cross_entropy * weights).sum() / weights.sum()
        index = hidden.unsqueeze(-1).expand(-1, -1, self.num_positions)
        metrics = classification_diagnostics(
            logits.gather(1, index).flatten(0, 1),
            labels.gather(1, hidden).flatten(),
            self.num_positions,
        )
        anchors = self.num_kept - self.num_position_masked
        metrics["accuracy_floor"] = metrics["accuracy"].new_full(
            (), 1.0 / (self.num_positions - anchors)
        )
        metrics["smoothing_sigma"] = self.sigma.detach().float()
        return DropPosOutput(
            loss=loss,
            metrics=metrics,
            logits=logits,
            labels=labels,
            soft_labels=soft_labels,
            position_mask=position_mask,
            weights=weights.detach(),
        )

    def extra_repr(self) -> str:
        return (
            f"grid_shape={self.grid_shape}, num_kept={self.num_kept}, "
            f"num_position_masked={self.num_position_masked}, "
            f"smoothing_sigma={self.smoothing_sigma}, attentive={self.attentive}"
        )


def build_droppos(config: PretrainConfig, spec: SignalSpec) -> DropPosModel:
    """DropPos: the configured encoder with a maskable slot position embedding, and a decoder.

    Args:
        config: ``encoder``, ``encoder_overrides``, ``patch_size``, ``mask_ratio``,
            ``position_mask_ratio``, ``smoothing_sigma``, ``decoder_dim`` and ``decoder_depth``
            are read.
        spec: Shape of the data.

    Returns:
        The objective.
    """
    encoder = build_encoder(config, spec)
    add_slot_embedding(encoder, spec.spatial_shape, config.position_mask_ratio)
    return DropPosModel(
        encoder,
        spec.spatial_shape,
        mask_ratio=config.mask_ratio,
        position_mask_ratio=config.position_mask_ratio,
        smoothing_sigma=config.smoothing_sigma,
        decoder_dim=config.decoder_dim,
        decoder_depth=config.decoder_depth,
    )
