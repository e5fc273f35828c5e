"""MAE (masked autoencoder, He et al., CVPR 2022) on on-grid N-D patches.

One training step, for inputs ``x: [B, C, *spatial]`` (He et al., Sec. 3; official code
``facebookresearch/mae``, ``models_mae.py``):

1. the input is tiled on the regular grid (:class:`~partnd.patches.sampling.GridSampler`, N slots,
   row-major);
2. per example, ``M = round(mask_ratio * N)`` patches (clamped to ``[1, N - 1]``: at least one
   visible, at least one masked), chosen uniformly at random with the step's generator, are
   masked: the encoder sees only the ``N - M`` visible patches, each with its slot position
   embedding;
3. a light decoder embeds the encoded tokens (``Linear(D -> D_dec)``), puts a learnable mask
   token at every masked slot, adds its *own* slot position embedding to every slot, runs
   ``decoder_depth`` pre-norm blocks over [CLS] plus all N slots, normalises and predicts the
   ``C * prod(P)`` values of every patch;
4. the loss is the mean squared error over the values of the **masked** patches only (and
   of the channels present: a channel-set encoder's items mark absent channels NaN); with
   ``norm_pix_loss`` the targets are each patch's values standardised by their own mean and
   (unbiased) variance, ``(v - mean) / sqrt(var + 1e-6)``, as MAE's ``norm_pix_loss``.

Diagnostics (:func:`~partnd.objectives.diagnostics.reconstruction_diagnostics`) put the error on
the masked patches next to that of predicting zero (each normalised patch's own mean):
``recon_nmse = 1`` is no better than ignoring the input.

**Decoder size.** MAE's decoder is 512 wide, 8 deep with 16 heads for ViT-B/L/H. partnd derives
it from the encoder (``decoder_dim`` / ``decoder_depth`` override): width ``D / 2`` rounded to a
multiple of the encoder's head count (the encoder's heads, each half as wide), depth
``max(1, min(8, encoder_depth // 2))``, the encoder's MLP ratio (see ``docs/baselines.md``).

**Every parameter is trained.** The mask token takes part at the ``M >= 1`` masked slots, both
position embeddings at every step; the encoder must have no classifier and no position mask
token (both would go unused, and DDP runs without ``find_unused_parameters``).

The per-example masking helpers here (:func:`masked_count`, :func:`random_split`) are shared with
MP3 and DropPos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.vit import Block, ViTEncoder, init_weights
from partnd.objectives.base import GridObjective, ObjectiveOutput, add_slot_embedding, build_encoder
from partnd.objectives.diagnostics import reconstruction_diagnostics

if TYPE_CHECKING:
    from partnd.engine.config import PretrainConfig
    from partnd.signal_info import SignalSpec

__all__ = [
    "MAEDecoder",
    "MAEDraws",
    "MAEModel",
    "MAEOutput",
    "TokenDecoder",
    "build_mae",
    "decoder_width",
    "masked_count",
    "normalized_patch_targets",
    "random_split",
]

#: MAE's ``norm_pix_loss`` epsilon (``models_mae.py``: ``(var + 1.e-6) ** .5``).
NORM_PIX_EPS = 1e-6


def masked_count(ratio: float, num: int) -> int:
    """How many of ``num`` items a ratio selects: ``round(ratio * num)`` clamped to
    ``[1, num - 1]`` (at least one selected and one left; Python rounds halves to even).

    Args:
        ratio: Fraction in (0, 1).
        num: Number of items, at least 2.

    Returns:
        The count.
    """
    check(num >= 2, "num", "at least 2 items to split", repr(num))
    return min(num - 1, max(1, round(ratio * num)))


def random_split(
    batch: int,
    num: int,
    num_first: int,
    generator: torch.Generator | None,
    device: torch.device,
) -> tuple[Tensor, Tensor]:
    """Split ``range(num)`` per example into a uniform random subset and the rest.

    MAE's per-sample shuffle (argsort of uniform noise), drawn from ``generator`` on its own device
    and moved to ``device``, so the same seed gives the same split on any device.

    Args:
        batch: Number of examples B.
        num: Number of items N per example.
        num_first: Size of the random subset.
        generator: Random source (``None``: the global one, on ``device``).
        device: Device of the returned indices.

    Returns:
        ``first: [B, num_first]`` and ``rest: [B, num - num_first]`` long indices, each sorted
        ascending.
    """
    draw_device = generator.device if generator is not None else device
    noise = torch.rand(batch, num, generator=generator, device=draw_device).to(device)
    order = noise.argsort(dim=1)
    first = order[:, :num_first].sort(dim=1).values
    rest = order[:, num_first:].sort(dim=1).values
    return first, rest


def normalized_patch_targets(patches: Tensor, normalize: bool = True) -> Tensor:
    """Reconstruction targets: flattened patch values, optionally standardised per patch.

    As MAE's ``forward_loss`` with ``norm_pix_loss``: mean and unbiased variance over all
    ``C * prod(P)`` values of each patch, ``(v - mean) / sqrt(var + 1e-6)``. NaN values (the
    channels an item lacks, for a channel-set encoder) stay NaN and take no part in the
    statistics.

    Args:
        patches: [B, N, C, *P] patch values.
        normalize: Standardise each patch (``norm_pix_loss``); ``False`` returns the raw values.

    Returns:
        [B, N, C * prod(P)] float32 targets (flattened in ``[C, *P]`` order).
    """
    target = patches.detach().flatten(2).float()
    if not normalize:
        return target
    mean = target.nanmean(dim=-1, keepdim=True)
    count = (~target.isnan()).sum(dim=-1, keepdim=True)
    var = (target - mean).square().nansum(dim=-1, keepdim=True) / (count - 1).clamp_min(1)
    return (target - mean) / (var + NORM_PIX_EPS).sqrt()


def decoder_width(encoder: ViTEncoder, width: int | None) -> tuple[int, int]:
    """Decoder width and heads derived from the encoder.

    Args:
        encoder: The encoder (its ``embed_dim`` D and ``num_heads`` H are read).
        width: An explicit width, or ``None`` for ``D / 2`` rounded to a multiple of H (at
            least H).

    Returns:
        ``(width, num_heads)``: H heads when H divides the width, else the largest divisor of the
        width not above H.
    """
    heads = int(encoder.architecture["num_heads"])
    if width is None:
        width = max(1, round(encoder.embed_dim / (2 * heads))) * heads
    check(width >= 1, "decoder_dim", "a positive int", repr(width))
    num_heads = max(h for h in range(1, min(heads, width) + 1) if width % h == 0)
    return width, num_heads


@dataclass(frozen=True)
class MAEDraws:
    """The random masks of one MAE step (:meth:`MAEModel.draw`).

    Attributes:
        masked: [B, M] slot indices of the masked patches, ascending.
        visible: [B, N - M] slot indices of the visible patches, ascending.
    """

    masked: Tensor
    visible: Tensor


@dataclass(frozen=True)
class MAEOutput(ObjectiveOutput):
    """Result of one MAE forward pass.

    Attributes:
        loss: Scalar float32 MSE over the values of the masked patches.
        metrics: ``recon_mse``, ``recon_mse_floor``, ``recon_nmse`` on the masked patches.
        pred: [B, N, C * prod(P)] reconstruction of every patch (slot order).
        target: [B, N, C * prod(P)] float32 targets (normalised with ``norm_pix_loss``).
        mask: [B, N] bool, True where the patch was masked (hidden from the encoder).
        visible: [B, N - M] slot indices of the visible patches, ascending.
        masked: [B, M] slot indices of the masked patches, ascending.
    """

    pred: Tensor
    target: Tensor
    mask: Tensor
    visible: Tensor
    masked: Tensor


class TokenDecoder(nn.Module):
    """A light pre-norm transformer decoder: ``Linear(D -> width)``, blocks, LayerNorm, ``Linear``.

    The shared body of MAE's and DropPos's decoders; subclasses add what goes between the
    embedding and the blocks.

    Args:
        embed_dim: Encoder width D.
        out_dim: Outputs per token.
        width: Decoder width.
        depth: Number of pre-norm blocks.
        num_heads: Attention heads (must divide ``width``).
        mlp_ratio: Feed-forward width relative to ``width``.
    """

    def __init__(
        self,
        embed_dim: int,
        out_dim: int,
        *,
        width: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        check(depth >= 1, "decoder_depth", "a positive int", repr(depth))
        self.width = width
        self.embed = nn.Linear(embed_dim, width)
        self.blocks = nn.ModuleList(
            Block(width, num_heads, mlp_ratio, True, 0.0, nn.LayerNorm, nn.GELU)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(width)
        self.pred = nn.Linear(width, out_dim)
        self.apply(init_weights)

    def decode(self, x: Tensor) -> Tensor:
        """Args: x: [B, 1 + K, width] embedded tokens, [CLS] first.

        Returns: [B, K, out_dim] predictions of the K tokens after [CLS]."""
        for block in self.blocks:
            x = block(x)
        return self.pred(self.norm(x))[:, 1:]


class MAEDecoder(TokenDecoder):
    """MAE's light decoder: embed, fill masked slots with a mask token, slot embedding, blocks.

    Args:
        embed_dim: Encoder width D.
        num_positions: Number of grid slots N.
        out_dim: Values per patch, ``C * prod(P)``.
        width: Decoder width.
        depth: Number of pre-norm blocks.
        num_heads: Attention heads (must divide ``width``).
        mlp_ratio: Feed-forward width relative to ``width``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_positions: int,
        out_dim: int,
        *,
        width: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__(
            embed_dim, out_dim, width=width, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio
        )
        self.num_positions = num_positions
        self.mask_token = nn.Parameter(torch.zeros(width))
        self.pos_embed = nn.Parameter(torch.zeros(num_positions, width))
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, features: Tensor, visible: Tensor) -> Tensor:
        """Reconstruct every slot.

        Args:
            features: [B, 1 + K, D] encoder output, [CLS] first, then the K visible patches.
            visible: [B, K] slot index of each visible patch.

        Returns:
            [B, N, out_dim] predicted patch values, in slot order.
        """
        x = self.embed(features)
        cls, tokens = x[:, :1], x[:, 1:]
        batch = x.shape[0]
        slots = self.mask_token.to(tokens.dtype).expand(batch, self.num_positions, self.width)
        index = visible.unsqueeze(-1).expand(-1, -1, self.width)
        slots = slots.scatter(1, index, tokens)
        slots = slots + self.pos_embed.to(slots.dtype)
        return self.decode(torch.cat([cls, slots], dim=1))


class MAEModel(GridObjective):
    """Encoder + MAE decoder, trained to reconstruct masked on-grid patches.

    Args:
        encoder: A :class:`ViTEncoder` without classifier, with a slot position embedding of the
            grid's size ``N = prod(L_d // P_d)`` and no position mask token.
        spatial_shape: Spatial shape of every input (fixes the grid).
        mask_ratio: Fraction of patches masked per example (MAE: 0.75).
        decoder_dim: Decoder width (``None``: see :func:`decoder_width`).
        decoder_depth: Decoder blocks (``None``: ``max(1, min(8, encoder_depth // 2))``).
        norm_pix_loss: Reconstruct per-patch standardised values (MAE's recommended setting).
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        spatial_shape: tuple[int, ...],
        *,
        mask_ratio: float = 0.75,
        decoder_dim: int | None = None,
        decoder_depth: int | None = None,
        norm_pix_loss: bool = True,
    ) -> None:
        super().__init__(encoder, spatial_shape, "MAE")
        num_positions = self.num_positions
        check(
            num_positions >= 2,
            "spatial_shape",
            "a grid of at least 2 patches (MAE masks some and keeps some)",
            f"{num_positions} patch(es) for {self.spatial_shape} and patch size "
            f"{encoder.patch_size}",
        )
        check(
            encoder.num_positions == num_positions and encoder.pos_mask_token is None,
            "encoder",
            f"an encoder with a slot position embedding of {num_positions} slots and no position "
            "mask token (add_position_embedding(N, 0.0))",
            f"num_positions={encoder.num_positions}, pos_mask_ratio={encoder.pos_mask_ratio}",
        )
        check(0.0 < mask_ratio < 1.0, "mask_ratio", "a ratio in (0, 1)", repr(mask_ratio))
        check(
            not norm_pix_loss or encoder.patch_dim >= 2,
            "norm_pix_loss",
            "False for patches of a single value (their variance is undefined)",
            "True",
        )
        width, num_heads = decoder_width(encoder, decoder_dim)
        encoder_depth = len(encoder.blocks)
        depth = decoder_depth if decoder_depth is not None else max(1, min(8, encoder_depth // 2))
        self.decoder = MAEDecoder(
            encoder.embed_dim,
            num_positions,
            encoder.patch_dim,
            width=width,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=float(encoder.architecture["mlp_ratio"]),
        )
        self.mask_ratio = mask_ratio
        self.num_masked = masked_count(mask_ratio, num_positions)
        self.norm_pix_loss = norm_pix_loss

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> MAEDraws:
        """Draw the masked and visible slots of every example of ``x`` (shape and device read).

        Args:
            x: [B, C, *spatial] inputs.
            generator: Random source of the masks (same seed, same masks).

        Returns:
            The :class:`MAEDraws`.
        """
        self.check_input(x)
        masked, visible = random_split(
            int(x.shape[0]), self.num_positions, self.num_masked, generator, x.device
        )
        return MAEDraws(masked=masked, visible=visible)

    def forward_with_draws(self, x: Tensor, draws: MAEDraws) -> MAEOutput:
        """Run one MAE step on the step's masks (``forward(x, generator)`` draws them).

        Args:
            x: [B, C, *spatial] inputs.
            draws: The step's masks (:meth:`draw`).

        Returns:
            An :class:`MAEOutput`; call ``output.loss.backward()`` to train.
        """
        masked, visible = draws.masked, draws.visible
        patches = self.sample(x).patches  # [B, N, C, *P], slot order (grid_index = arange)
        batch = patches.shape[0]
        rows = torch.arange(batch, device=patches.device).unsqueeze(1)
        features = self.encoder.forward_features(patches[rows, visible], visible)
        pred = self.decoder(features, visible)  # [B, N, F]
        target = normalized_patch_targets(patches, self.norm_pix_loss)
        index = masked.unsqueeze(-1).expand(-1, -1, target.shape[-1])
        target_masked = target.gather(1, index)
        present = ~target_masked.isnan()  # absent channels (NaN) are not reconstructed
        target_masked = target_masked.nan_to_num(0.0)
        pred_masked = pred.gather(1, index).float() * present
        loss = (pred_masked - target_masked).square().sum() / present.sum().clamp_min(1)
        metrics = reconstruction_diagnostics(pred_masked.flatten(0, 1), target_masked.flatten(0, 1))
        mask = torch.zeros(batch, self.num_positions, dtype=torch.bool, device=patches.device)
        mask.scatter_(1, masked, True)
        return MAEOutput(
            loss=loss,
            metrics=metrics,
            pred=pred,
            target=target,
            mask=mask,
            visible=visible,
            masked=masked,
        )

    def extra_repr(self) -> str:
        return (
            f"num_positions={self.num_positions}, mask_ratio={self.mask_ratio}, "
            f"num_masked={self.num_masked}, norm_pix_loss={self.norm_pix_loss}"
        )


def build_mae(config: PretrainConfig, spec: SignalSpec) -> MAEModel:
    """MAE: the configured encoder with a slot position embedding over the grid, and a decoder.

    Args:
        config: ``encoder``, ``encoder_overrides``, ``patch_size``, ``mask_ratio``,
            ``decoder_dim``, ``decoder_depth`` and ``norm_pix_loss`` are read.
        spec: Shape of the data.

    Returns:
        The objective.
    """
    encoder = build_encoder(config, spec)
    add_slot_embedding(encoder, spec.spatial_shape, 0.0)
    return MAEModel(
        encoder,
        spec.spatial_shape,
        mask_ratio=config.mask_ratio,
        decoder_dim=config.decoder_dim,
        decoder_depth=config.decoder_depth,
        norm_pix_loss=config.norm_pix_loss,
    )
