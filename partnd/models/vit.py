"""Dimension-generic Vision Transformer encoder for patch sets (timm-style).

The encoder consumes a *set* of patches that a sampler already cut out of the input
(``[B, N, C, *P]``), so one module serves 1D EEG (``P = (100,)``), 2D images (``P = (4, 4)``) and
3D volumes. Tokens are linear projections of the flattened patches (``C * prod(P)`` values; other
per-patch tokenizers in :mod:`partnd.models.frontends`), preceded by a [CLS] token and fed through
pre-norm transformer blocks. PART pretraining uses no
position embedding, so by default the encoder is permutation-equivariant over patch tokens;
fine-tuning adds a learnable slot position embedding with
:meth:`ViTEncoder.add_position_embedding`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import InputError, check, describe
from partnd.models.channel_set import CHANNEL_SET, ChannelSetPatchEmbed, build_channel_set
from partnd.models.frontends import build_frontend
from partnd.signal_info import SignalInfo

__all__ = [
    "Attention",
    "Block",
    "DropPath",
    "Mlp",
    "ViTEncoder",
    "check_tiles",
    "init_weights",
    "to_size_tuple",
]


def to_size_tuple(
    size: int | Sequence[int], ndim: int, argument: str = "patch_size"
) -> tuple[int, ...]:
    """Expand an int (or check a sequence) into a per-dimension size tuple of length ``ndim``.

    Args:
        size: One positive int for every dimension, or one positive int per dimension.
        ndim: Number of spatial dimensions.
        argument: Argument name used in error messages.

    Returns:
        A tuple of ``ndim`` positive ints.
    """
    sizes = (size,) * ndim if isinstance(size, int) else tuple(size)
    check(
        len(sizes) == ndim and all(isinstance(s, int) and s > 0 for s in sizes),
        argument,
        f"a positive int or {ndim} positive ints",
        repr(size),
    )
    return sizes


def check_tiles(
    spatial_shape: Sequence[int], patch_size: Sequence[int], argument: str = "patch_size"
) -> None:
    """Refuse a patch size whose grid does not cover the items whole: fine-tuning and inference
    tile every item on the regular grid (:meth:`ViTEncoder.forward_grid`), which would drop the
    remainder of ``L_d // P_d`` tiles in every step.

    Args:
        spatial_shape: The items' spatial size (e.g. ``(3000,)``: 30 s at 100 Hz).
        patch_size: The patch extent per dimension.
        argument: Name of the patch size in error messages.
    """
    spatial, patch = tuple(spatial_shape), tuple(patch_size)
    check(
        all(length % size == 0 for length, size in zip(spatial, patch, strict=True)),
        argument,
        f"a patch size that divides the items' spatial size {spatial} (items are tiled on the "
        f"grid of patches; {tuple(n % p for n, p in zip(spatial, patch, strict=True))} "
        "sample(s) per dimension would never be seen)",
        repr(patch if len(set(patch)) > 1 else patch[0]),
    )


def init_weights(module: nn.Module) -> None:
    """timm ViT init: trunc-normal(0.02) Linear weights, zero biases, LayerNorm ones/zeros."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class DropPath(nn.Module):
    """Stochastic depth: drop the residual branch per example with probability ``drop_prob``."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        check(0.0 <= drop_prob < 1.0, "drop_prob", "a probability in [0, 1)", repr(drop_prob))
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        """Args: x: [B, ...]. Returns x with whole examples zeroed and survivors rescaled."""
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep_prob = 1.0 - self.drop_prob
        keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep_prob)
        return x * keep / keep_prob

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class Attention(nn.Module):
    """Multi-head self-attention: fused qkv projection, ``scaled_dot_product_attention``."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        check(dim % num_heads == 0, "num_heads", f"a divisor of embed_dim={dim}", repr(num_heads))
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """Args: x: [B, L, D]; attn_mask: [B, 1, 1, L] bool, True where a key may be attended
        (``None``: every key). Returns: [B, L, D]."""
        batch, length, dim = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, L, D / H]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


class Mlp(nn.Module):
    """Transformer feed-forward block: Linear -> activation -> Linear."""

    def __init__(self, dim: int, hidden_dim: int, act_layer: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        """Args: x: [B, L, D]. Returns: [B, L, D]."""
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``, with stochastic depth."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        norm_layer: Callable[[int], nn.Module],
        act_layer: Callable[[], nn.Module],
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """Args: x: [B, L, D]; attn_mask: see :class:`Attention`. Returns: [B, L, D]."""
        x = x + self.drop_path(self.attn(self.norm1(x), attn_mask))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ViTEncoder(nn.Module):
    """ViT encoder over a set of N-D patches, with an optional learnable slot position embedding.

    Tokens are ``Linear(C * prod(P) -> D)`` projections of the flattened patches (the default
    ``frontend="linear"``; see :mod:`partnd.models.frontends` for the spectral and convolutional
    tokenizers, each a function of one patch's content); a learnable [CLS] token is prepended;
    pre-norm blocks and a final norm follow. Without a position embedding (the default, used by
    PART pretraining) the patch-token outputs are equivariant to permutations of the patches: the
    encoder only sees content.

    **Slot position embedding.** With ``num_positions`` set, a learnable table
    ``pos_embed: [num_positions, D]`` is added to each patch token according to its slot index
    (``positions: [B, N]``, e.g. ``PatchBatch.grid_index`` of an on-grid sampler); the [CLS] token
    gets none. The paper's EEG recipe says "we randomly mask out 20% of the position embeddings". We
    implement this as DropPos-style masking: with ``pos_mask_ratio = r > 0``, in training mode each
    example independently has ``max(1, round(r * N))`` of its patch tokens, chosen uniformly at
    random, receive one shared learnable mask embedding ``pos_mask_token: [D]`` instead of their
    slot embedding (the token content is kept, only its position is hidden). At least one token is
    masked, so the mask embedding takes part in every training step (DDP without
    ``find_unused_parameters`` needs every parameter in the graph). In eval mode every token gets
    its own slot embedding.

    Args:
        in_chans: Channels C of each patch.
        patch_size: Patch extent P per dimension (an int for all dimensions, or ``ndim`` ints).
        ndim: Number of spatial dimensions of the patches (1 for EEG, 2 for images).
        embed_dim: Token width D.
        depth: Number of transformer blocks.
        num_heads: Attention heads per block (must divide ``embed_dim``).
        mlp_ratio: Hidden width of the feed-forward block relative to ``embed_dim``.
        qkv_bias: Whether the fused qkv projection has a bias.
        drop_path_rate: Stochastic depth rate of the last block (linearly increasing from 0).
        norm_layer: Normalisation layer factory ``norm_layer(dim)``.
        act_layer: Activation factory ``act_layer()`` of the feed-forward block.
        num_positions: Size of the slot position embedding; ``None`` for none.
        pos_mask_ratio: Fraction of each example's slot embeddings replaced by the mask embedding in
            training (see above); requires ``num_positions``.
        num_classes: Width of the linear classifier on [CLS]; 0 means ``head`` is the identity.
        frontend: How a patch becomes a token (``patch_embed``): ``"linear"``, ``"spectral"``
            (1-D only) or ``"conv"`` (see :func:`partnd.models.frontends.build_frontend`), or
            ``"channel_set"``: any named channel set, each channel tokenised by one of those
            (see :class:`partnd.models.channel_set.ChannelSetPatchEmbed`).
        frontend_options: Options of the front-end (e.g. ``{"max_frequency": 0.3}`` for
            ``"spectral"``).
    """

    num_prefix_tokens = 1

    def __init__(
        self,
        *,
        in_chans: int,
        patch_size: int | Sequence[int],
        ndim: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path_rate: float = 0.0,
        norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
        act_layer: Callable[[], nn.Module] = nn.GELU,
        num_positions: int | None = None,
        pos_mask_ratio: float = 0.0,
        num_classes: int = 0,
        frontend: str = "linear",
        frontend_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        check(isinstance(ndim, int) and ndim >= 1, "ndim", "a positive int", repr(ndim))
        check(in_chans >= 1, "in_chans", "a positive int", repr(in_chans))
        check(embed_dim >= 1, "embed_dim", "a positive int", repr(embed_dim))
        check(depth >= 1, "depth", "a positive int", repr(depth))
        check(mlp_ratio > 0, "mlp_ratio", "a positive number", repr(mlp_ratio))
        check(
            0.0 <= drop_path_rate < 1.0, "drop_path_rate", "a rate in [0, 1)", repr(drop_path_rate)
        )
        check(num_classes >= 0, "num_classes", "an int >= 0", repr(num_classes))
        check(
            num_positions is not None or pos_mask_ratio == 0.0,
            "pos_mask_ratio",
            "0.0 when num_positions is None (there is no position embedding to mask)",
            repr(pos_mask_ratio),
        )
        self.in_chans = in_chans
        self.ndim = ndim
        self.patch_size = to_size_tuple(patch_size, ndim)
        #: The JSON-serialisable constructor arguments that fix the architecture (default norm and
        #: activation layers), so a saved encoder or classifier can be rebuilt.
        self.architecture: dict[str, Any] = {
            "in_chans": in_chans,
            "patch_size": list(self.patch_size),
            "ndim": ndim,
            "embed_dim": embed_dim,
            "depth": depth,
            "num_heads": num_heads,
            "mlp_ratio": mlp_ratio,
            "qkv_bias": qkv_bias,
            "drop_path_rate": drop_path_rate,
            "frontend": frontend,
            "frontend_options": dict(frontend_options or {}),
        }
        self.embed_dim = embed_dim
        self.num_classes = num_classes
        #: Values of one patch, ``C * prod(P)`` (what MAE reconstructs, whatever the front-end).
        self.patch_dim = in_chans * math.prod(self.patch_size)
        #: The signal the encoder was trained on (recorded by ``pretrain`` and saved in
        #: ``encoder.pt``), or ``None`` when unknown.
        self.signal_info: SignalInfo | None = None

        #: The tokenizer: patches [B, N, C, *P] -> tokens [B, N, D].
        self.patch_embed: nn.Module = (
            build_channel_set(in_chans, self.patch_size, embed_dim, frontend_options)
            if frontend == CHANNEL_SET
            else build_frontend(
                frontend,
                in_chans=in_chans,
                patch_size=self.patch_size,
                embed_dim=embed_dim,
                options=frontend_options,
            )
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        drop_rates = torch.linspace(0.0, drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, rate, norm_layer, act_layer)
            for rate in drop_rates
        )
        self.norm = norm_layer(embed_dim)
        self.head: nn.Module = nn.Identity()
        self.global_pool = "token"
        self.num_positions: int | None = None
        self.pos_mask_ratio = 0.0
        self.pos_embed: nn.Parameter | None = None
        self.pos_mask_token: nn.Parameter | None = None

        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(init_weights)
        self.reset_classifier(num_classes)
        if num_positions is not None:
            self.add_position_embedding(num_positions, pos_mask_ratio)

    @property
    def channel_mode(self) -> str:
        """``"set"`` when the front-end reads any named channel set (``frontend="channel_set"``,
        :class:`partnd.models.channel_set.ChannelSetPatchEmbed`), else ``"fixed"``."""
        return "set" if self.architecture["frontend"] == CHANNEL_SET else "fixed"

    def read_channels(self, channels: Sequence[str]) -> None:
        """Read items laid out in the named ``channels`` from now on (channel-set encoders).

        No weight changes: the front-end embeds every channel from its electrodes' positions, so
        any derivations of 10-05 electrodes, in any order and number, can be read.
        ``in_chans`` and :attr:`architecture` follow the layout.

        Args:
            channels: Derivation names of the items' channels, in order (e.g. ``["Fpz-Cz"]``).

        Raises:
            InputError: For a fixed-channel encoder, or naming the channels whose electrodes are
                not in the 10-05 montage.
        """
        check(
            self.channel_mode == "set",
            "channels",
            f"the encoder's own {self.in_chans} channels (a fixed-channel encoder: train with "
            "channel_mode='set' to read other channel sets)",
            repr(list(channels)),
        )
        assert isinstance(self.patch_embed, ChannelSetPatchEmbed)
        self.patch_embed.set_channels(channels)
        names = [str(name) for name in channels]
        self.in_chans = len(names)
        self.patch_dim = self.in_chans * math.prod(self.patch_size)
        options = dict(self.architecture["frontend_options"], channels=names)
        self.architecture = dict(
            self.architecture, in_chans=self.in_chans, frontend_options=options
        )

    def add_position_embedding(self, num_positions: int, pos_mask_ratio: float = 0.0) -> None:
        """Install a freshly initialised (trunc-normal 0.02) slot position embedding.

        Replaces any existing one. Used to fine-tune a PART encoder (pretrained without one).

        Args:
            num_positions: Number of slots (e.g. the on-grid patch count).
            pos_mask_ratio: Fraction in [0, 1) of each example's slot embeddings replaced by a
                learnable mask embedding during training (see the class docstring).
        """
        check(num_positions >= 1, "num_positions", "a positive int", repr(num_positions))
        check(
            0.0 <= pos_mask_ratio < 1.0, "pos_mask_ratio", "a ratio in [0, 1)", repr(pos_mask_ratio)
        )
        like = self.cls_token
        self.pos_embed = nn.Parameter(like.new_empty(num_positions, self.embed_dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.pos_mask_token = None
        if pos_mask_ratio > 0.0:
            self.pos_mask_token = nn.Parameter(like.new_empty(self.embed_dim))
            nn.init.trunc_normal_(self.pos_mask_token, std=0.02)
        self.num_positions = num_positions
        self.pos_mask_ratio = pos_mask_ratio

    def set_position_mask_ratio(self, pos_mask_ratio: float) -> None:
        """Change the training-time mask ratio of the existing position embedding, keeping the
        slot embeddings (a mask embedding is created when needed, dropped for ratio 0)."""
        check(self.pos_embed is not None, "pos_mask_ratio", "a position embedding to mask", "none")
        check(
            0.0 <= pos_mask_ratio < 1.0, "pos_mask_ratio", "a ratio in [0, 1)", repr(pos_mask_ratio)
        )
        if pos_mask_ratio == 0.0:
            self.pos_mask_token = None
        elif self.pos_mask_token is None:
            self.pos_mask_token = nn.Parameter(self.cls_token.new_empty(self.embed_dim))
            nn.init.trunc_normal_(self.pos_mask_token, std=0.02)
        self.pos_mask_ratio = pos_mask_ratio

    def remove_position_embedding(self) -> None:
        """Delete the slot position embedding (and its mask embedding), if any."""
        self.pos_embed = None
        self.pos_mask_token = None
        self.num_positions = None
        self.pos_mask_ratio = 0.0

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier by a fresh ``Linear(D -> num_classes)`` (identity for 0).

        Args:
            num_classes: Number of classes (0: no classifier).
            global_pool: ``"token"`` classifies the [CLS] token (the paper), ``"avg"`` the mean
                of the patch tokens (timm's ``global_pool="avg"``, MAE's fine-tuning default);
                ``None`` keeps the current choice.
        """
        check(num_classes >= 0, "num_classes", "an int >= 0", repr(num_classes))
        if global_pool is not None:
            check(global_pool in ("token", "avg"), "global_pool", "'token' or 'avg'", global_pool)
            self.global_pool = global_pool
        self.num_classes = num_classes
        if num_classes == 0:
            self.head = nn.Identity()
            return
        head = nn.Linear(self.embed_dim, num_classes)
        init_weights(head)
        self.head = head.to(self.cls_token.device)

    def embed_positions(self, positions: Tensor, position_mask: Tensor | None = None) -> Tensor:
        """Look up slot embeddings, with the mask embedding where positions are hidden.

        Args:
            positions: [B, N] integer slot indices in ``[0, num_positions)`` (not range-checked:
                that would cost a host synchronisation; an index outside fails in torch).
            position_mask: [B, N] bool, True where the token gets the mask embedding instead of
                its slot's (DropPos); needs ``pos_mask_ratio > 0``. ``None``: in training mode,
                ``max(1, round(pos_mask_ratio * N))`` random tokens per example are masked; in
                eval mode none.

        Returns:
            [B, N, D] position embeddings to add to the patch tokens.
        """
        pos_embed, num_positions = self.pos_embed, self.num_positions
        if pos_embed is None or num_positions is None:
            raise InputError(
                "positions: expected None (this encoder has no position embedding; add one with "
                f"add_position_embedding), got {describe(positions)}"
            )
        check(
            positions.dim() == 2
            and not positions.is_floating_point()
            and positions.dtype != torch.bool,
            "positions",
            "an integer tensor [B, N] of slot indices",
            positions,
        )
        embedded = pos_embed[positions]
        mask_token = self.pos_mask_token
        if position_mask is not None:
            check(
                mask_token is not None,
                "position_mask",
                "None (this encoder has no mask embedding: add_position_embedding with "
                "pos_mask_ratio > 0)",
                position_mask,
            )
            check(
                position_mask.shape == positions.shape and position_mask.dtype == torch.bool,
                "position_mask",
                f"a bool tensor of the positions' shape {tuple(positions.shape)}",
                position_mask,
            )
        elif self.training and mask_token is not None and positions.shape[1] > 0:
            num_masked = max(1, round(self.pos_mask_ratio * positions.shape[1]))
            noise = torch.rand(positions.shape, device=positions.device)
            chosen = noise.argsort(dim=1)[:, :num_masked]
            position_mask = torch.zeros_like(noise, dtype=torch.bool).scatter_(1, chosen, True)
        if position_mask is not None and mask_token is not None:
            embedded = torch.where(position_mask.unsqueeze(-1), mask_token, embedded)
        return embedded

    def forward_features(
        self,
        patches: Tensor,
        positions: Tensor | None = None,
        *,
        position_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        without_positions: bool = False,
    ) -> Tensor:
        """Encode a patch set.

        Args:
            patches: [B, N, C, *P] patches (C = ``in_chans``, P = ``patch_size``).
            positions: [B, N] slot indices; required iff the encoder has a position embedding.
            position_mask: [B, N] bool, tokens whose slot embedding is replaced by the mask
                embedding (see :meth:`embed_positions`).
            key_mask: [B, N] bool, patch tokens removed from the keys and values of every
                attention layer (MP3); they are still queries and outputs. [CLS] is always a key.
            without_positions: Add no position embedding, even where the encoder has one
                (``positions`` must then be ``None``): off-grid patches that have no slot, as
                PART within the windows of ``part_joint`` encodes them with the window encoder
                whose tile embedding the across-windows view uses.

        Returns:
            [B, 1 + N, D] normalised tokens, [CLS] first.
        """
        expected = f"a tensor [B, N, {self.in_chans}, {', '.join(map(str, self.patch_size))}]"
        check(
            patches.dim() == 3 + self.ndim
            and patches.shape[2] == self.in_chans
            and tuple(patches.shape[3:]) == self.patch_size,
            "patches",
            expected,
            patches,
        )
        tokens = self.patch_embed(patches)
        check(
            positions is None or not without_positions,
            "positions",
            "None with without_positions=True",
            positions,
        )
        if positions is not None:
            check(
                tuple(positions.shape) == tuple(patches.shape[:2]),
                "positions",
                f"slot indices of shape {tuple(patches.shape[:2])} matching patches [B, N]",
                positions,
            )
            tokens = tokens + self.embed_positions(positions, position_mask)
        elif self.pos_embed is not None and not without_positions:
            raise InputError(
                "positions: expected a [B, N] slot index tensor (the encoder has a position "
                "embedding), got None"
            )
        attn_mask = None
        if key_mask is not None:
            check(
                key_mask.shape == tokens.shape[:2] and key_mask.dtype == torch.bool,
                "key_mask",
                f"a bool tensor [B, N] = {tuple(tokens.shape[:2])}",
                key_mask,
            )
            keep = torch.cat([key_mask.new_zeros(key_mask.shape[0], 1), key_mask], dim=1)
            attn_mask = (~keep)[:, None, None, :]
        cls = self.cls_token.expand(tokens.shape[0], -1, -1).to(tokens.dtype)
        x = torch.cat([cls, tokens], dim=1)
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.norm(x)

    def forward_grid(self, x: Tensor) -> Tensor:
        """Tile whole inputs on the regular grid and encode them (what fine-tuning does).

        Args:
            x: [B, C, *spatial] inputs (the remainder of ``L_d // P_d`` tiles is dropped; for a
                channel-set encoder, NaN in the channels an item lacks); the
                grid must have ``num_positions`` tiles when the encoder has a position embedding.

        Returns:
            [B, 1 + N, D] tokens, [CLS] first, N = ``prod(L_d // P_d)``.
        """
        from partnd.patches.sampling import GridSampler

        sampler = GridSampler(self.ndim, self.patch_size)
        if self.channel_mode == "set":  # NaN marks the channels an item lacks
            sampler(torch.nan_to_num(x[:1, :1], nan=0.0))  # the checks of shape and type
            check(not bool(torch.isinf(x).any()), "x", "finite values or NaN (absent channels)", x)
            patches = sampler(x, validate=False)
        else:
            patches = sampler(x)
        positions = patches.grid_index if self.pos_embed is not None else None
        if positions is not None:
            check(
                patches.num_patches == self.num_positions,
                "x",
                f"inputs tiled into {self.num_positions} patches (the position embedding's size)",
                f"{patches.num_patches} tiles for spatial shape {tuple(x.shape[2:])}",
            )
        return self.forward_features(patches.patches, positions)

    def _as_input(self, x: Tensor | np.ndarray) -> Tensor:
        """A float tensor on the encoder's device (numpy arrays are converted)."""
        reference = self.cls_token
        return torch.as_tensor(x).to(device=reference.device, dtype=reference.dtype)

    def embed(self, x: Tensor | np.ndarray) -> Tensor:
        """One embedding per input: the [CLS] token (or the mean patch token with
        ``global_pool="avg"``) of the on-grid tiling. Call ``encoder.eval()`` first for inference
        (and wrap in ``torch.no_grad()`` for speed).

        Args:
            x: [B, C, *spatial] inputs (tensor or numpy array), e.g. ``[B, 6, 3000]`` EEG windows
                or ``[B, 1, 28, 28]`` images.

        Returns:
            [B, D] embeddings on the encoder's device.
        """
        return self.forward_head(self.forward_grid(self._as_input(x)), pre_logits=True)

    def embed_tokens(self, x: Tensor | np.ndarray) -> Tensor:
        """Per-patch embeddings of the on-grid tiling (row-major slot order).

        Args:
            x: [B, C, *spatial] inputs (tensor or numpy array).

        Returns:
            [B, N, D] patch tokens ([CLS] dropped).
        """
        return self.forward_grid(self._as_input(x))[:, self.num_prefix_tokens :]

    def forward_head(self, features: Tensor, pre_logits: bool = False) -> Tensor:
        """Classify from the [CLS] token (``global_pool="token"``) or the mean patch token
        (``"avg"``).

        Args:
            features: [B, 1 + N, D] output of :meth:`forward_features`.
            pre_logits: Return the pooled features [B, D] instead of the logits.

        Returns:
            [B, num_classes] logits ([B, D] when ``num_classes == 0`` or ``pre_logits``).
        """
        if self.global_pool == "avg":
            pooled = features[:, self.num_prefix_tokens :].mean(dim=1)
        else:
            pooled = features[:, 0]
        return pooled if pre_logits else self.head(pooled)

    def forward(self, patches: Tensor, positions: Tensor | None = None) -> Tensor:
        """Args: patches: [B, N, C, *P]; positions: [B, N] or None. Returns: [B, num_classes]."""
        return self.forward_head(self.forward_features(patches, positions))
