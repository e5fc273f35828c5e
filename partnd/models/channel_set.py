"""A front-end that reads any set of named EEG derivations: channel-then-time pooling.

The fixed-channel front-ends (:mod:`partnd.models.frontends`) flatten a patch ``[C, P]`` into one
token, so a model is bound to its C channels in their order. :class:`ChannelSetPatchEmbed`
(front-end ``"channel_set"``) tokenises every channel of a patch on its own with a shared
per-channel tokenizer (any fixed front-end with ``in_chans=1``, e.g. the standardised spectrum),
adds a channel embedding computed from the positions of the derivation's two electrodes
(:mod:`partnd.models.electrodes`; LaBraM and EEGPT look a learned embedding up by name, here it is
a learned function of where the electrodes sit, so an unseen derivation such as Fpz-Cz is
embedded between its neighbours), mixes the two with a residual GELU layer, and pools the
mixed tokens over the channels present: a mean by default, or attention pooling
(``channel_pool="attention"``, :mod:`partnd.models.channel_pool`). The transformer then sees
one token per patch, as with a fixed front-end, so every objective, classifier and sampler runs
unchanged and the sequence is not C times longer (BIOT's all-channels-in-one-sequence design
would cost C^2 more attention).

**Layout and absent channels.** The items are laid out in a named channel layout
(``channels``; :meth:`ViTEncoder.read_channels` switches it, no weight depends on it). A channel
an item lacks is NaN in that item (braindecode's ``pad_channels_collate`` pads with zeros and
passes a mask; a NaN marks the channel inside the tensor itself, so the mask travels through
every sampler, crop and objective with the values): it takes no part in the token, and a
patch with no channel present gets the zero token. Either pooling makes the token independent
of the layout's order (a permutation of channels and data gives the same output).

**Pooling.** ``channel_pool="mean"`` (the default, and what a model saved without the option
reads as) weighs every present channel alike. ``channel_pool="attention"`` weighs them by a
softmax over the present channels of learned per-head scores
(:class:`~partnd.models.channel_pool.ChannelAttentionPool`, ``channel_pool_heads`` heads,
default 4): a convex combination of the channel tokens, so one present channel gives its own
token exactly; it starts as the mean and adds ``H * D`` parameters.

**Training-time channel sampling.** ``channel_dropout = p`` drops every present channel of an
item with probability ``p`` in training (at least one is kept); ``subset_sampling`` keeps a
uniformly drawn number ``1..n`` of an item's ``n`` present channels, chosen at random (U-Sleep's
random channel choice), so a model trained on six channels has seen every smaller subset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.channel_pool import CHANNEL_POOLS, ChannelAttentionPool, mean_over_channels
from partnd.models.electrodes import derivation_positions
from partnd.models.frontends import FRONTENDS, build_frontend

__all__ = [
    "CHANNEL_OPTIONS",
    "CHANNEL_SET",
    "ChannelSetPatchEmbed",
    "build_channel_set",
    "channel_features",
    "check_channel_options",
]

#: The front-end name of :class:`ChannelSetPatchEmbed` in a ViTEncoder's architecture.
CHANNEL_SET = "channel_set"

#: Options of the channel-set front-end beyond its layout and tokenizer.
CHANNEL_OPTIONS = (
    "frequencies",
    "channel_dropout",
    "subset_sampling",
    "channel_pool",
    "channel_pool_heads",
)

#: Scale from metres to the unit of the position features (a head radius is about 0.1 m).
_HEAD_RADIUS = 0.1


def channel_features(names: Sequence[str], frequencies: int) -> Tensor:
    """Fixed features of derivations from their electrode positions.

    Each end's position (metres, divided by a 0.1 m head radius) ``u: [3]`` gives
    ``[u, sin(2^f pi u), cos(2^f pi u)]`` for ``f = 0 .. frequencies - 1``; a single electrode's
    missing reference gives zeros and a final flag 1 (0 for a bipolar derivation).

    Args:
        names: C derivation names (see :func:`partnd.models.electrodes.derivation_ends`).
        frequencies: Octaves of sines and cosines per coordinate.

    Returns:
        [C, 2 * 3 * (1 + 2 * frequencies) + 1] float32 features.

    Raises:
        InputError: Naming the channels whose electrodes are unknown.
    """
    positions = torch.as_tensor(derivation_positions(names), dtype=torch.float64) / _HEAD_RADIUS
    scales = math.pi * 2.0 ** torch.arange(frequencies, dtype=torch.float64)
    angles = positions[..., None] * scales  # [C, 2, 3, F]
    ends = torch.cat([positions, angles.sin().flatten(2), angles.cos().flatten(2)], dim=-1)
    single = torch.as_tensor(
        [float(not np.any(end)) for end in positions[:, 1].numpy()], dtype=torch.float64
    )
    ends[:, 1] = ends[:, 1] * (1.0 - single)[:, None]
    return torch.cat([ends.flatten(1), single[:, None]], dim=1).float()


class ChannelSetPatchEmbed(nn.Module):
    """Per-channel tokens, a channel embedding from electrode positions, a pool over channels.

    For a patch ``x: [C, *P]`` of the layout ``channels``, with ``S`` the channels present (not
    NaN, and kept by training-time sampling)::

        t_c = tokenizer(x_c)                                # [D], shared, in_chans=1
        e_c = Linear(channel_features(channels[c]))         # [D]
        m_c = t_c + Linear(GELU(t_c + e_c))                 # [D]
        token = mean_{c in S} m_c                           # [D]; zeros when S is empty

    or, with ``channel_pool="attention"``, ``token = sum_{c in S} w_c m_c`` with per-head weights
    ``w_c`` from a softmax over S (:class:`~partnd.models.channel_pool.ChannelAttentionPool`).

    The residual keeps the tokenizer's scale (a one-channel layout starts as that front-end)
    while the channel embedding modulates the token through the GELU.

    Args:
        in_chans: Channels C of the layout (``len(channels)``).
        patch_size: Patch extent P per dimension.
        embed_dim: Token width D.
        channels: The layout's derivation names (e.g. ``["F3-M2", "C4-M1"]``).
        tokenizer: The per-channel front-end (``"linear"``, ``"spectral"``, ``"conv"``).
        tokenizer_options: Its options (e.g. ``{"max_frequency": 0.3, "standardize": True}``).
        frequencies: Octaves of the position features (see :func:`channel_features`).
        channel_dropout: Probability of dropping each present channel of an item in training.
        subset_sampling: In training, keep a random subset of a random size of each item's
            present channels.
        channel_pool: How the channel tokens become one token, one of
            :data:`~partnd.models.channel_pool.CHANNEL_POOLS`: ``"mean"`` or ``"attention"``.
        channel_pool_heads: Heads of the attention pooling (a divisor of ``embed_dim``).
    """

    def __init__(
        self,
        in_chans: int,
        patch_size: Sequence[int],
        embed_dim: int,
        *,
        channels: Sequence[str] = (),
        tokenizer: str = "linear",
        tokenizer_options: Mapping[str, Any] | None = None,
        frequencies: int = 4,
        channel_dropout: float = 0.0,
        subset_sampling: bool = False,
        channel_pool: str = "mean",
        channel_pool_heads: int = 4,
    ) -> None:
        super().__init__()
        check(
            len(channels) == in_chans,
            "frontend_options",
            f"'channels': the names of the {in_chans} channels of the layout (channel_set)",
            repr(list(channels)),
        )
        check(
            tokenizer in FRONTENDS,
            "frontend_options",
            f"'tokenizer' one of {list(FRONTENDS)}",
            repr(tokenizer),
        )
        check(
            isinstance(frequencies, int) and frequencies >= 0,
            "frontend_options",
            "'frequencies' >= 0",
            repr(frequencies),
        )
        check(
            0.0 <= channel_dropout < 1.0,
            "frontend_options",
            "'channel_dropout' in [0, 1)",
            repr(channel_dropout),
        )
        check(
            channel_pool in CHANNEL_POOLS,
            "frontend_options",
            f"'channel_pool' one of {list(CHANNEL_POOLS)}",
            repr(channel_pool),
        )
        self.patch_size = tuple(int(size) for size in patch_size)
        self.frequencies = frequencies
        self.channel_dropout = float(channel_dropout)
        self.subset_sampling = bool(subset_sampling)
        self.tokenizer = build_frontend(
            tokenizer,
            in_chans=1,
            patch_size=self.patch_size,
            embed_dim=embed_dim,
            options=tokenizer_options,
        )
        width = 2 * 3 * (1 + 2 * frequencies) + 1
        self.channel_embed = nn.Linear(width, embed_dim)
        self.mix = nn.Linear(embed_dim, embed_dim)
        #: The attention pooling, or ``None`` for the mean (no parameters, so the state of a
        #: mean-pooling model is what it was before the option existed).
        self.pool = (
            ChannelAttentionPool(embed_dim, channel_pool_heads)
            if channel_pool == "attention"
            else None
        )
        #: [C, features] fixed position features of the layout; recomputed, not saved.
        self.features: Tensor
        self.register_buffer("features", torch.zeros(0, width), persistent=False)
        self.channels: tuple[str, ...] = ()
        self.set_channels(channels)

    def set_channels(self, channels: Sequence[str]) -> None:
        """Read items laid out in ``channels`` from now on (no weight changes).

        Raises:
            InputError: Naming the channels whose electrodes are not in the 10-05 montage.
        """
        features = channel_features(list(channels), self.frequencies)
        self.features = features.to(self.channel_embed.weight.device)
        self.channels = tuple(str(name) for name in channels)

    def _keep(self, present: Tensor) -> Tensor:
        """Training-time channel sampling of ``present: [B, C]`` (at least one kept per item
        that has one)."""
        if not self.training or (self.channel_dropout == 0.0 and not self.subset_sampling):
            return present
        scores = torch.rand(present.shape, device=present.device)
        scores = scores.masked_fill(~present, 2.0)  # absent channels rank last
        rank = scores.argsort(dim=1).argsort(dim=1)  # 0 = the item's first channel kept
        keep = present
        if self.subset_sampling:
            count = present.sum(dim=1, keepdim=True)
            size = (torch.rand_like(count, dtype=torch.float32) * count).floor().long() + 1
            keep = keep & (rank < size)
        if self.channel_dropout > 0.0:
            survive = torch.rand(present.shape, device=present.device) >= self.channel_dropout
            keep = keep & (survive | (rank == 0))
        return keep

    def forward(self, patches: Tensor) -> Tensor:
        """Args: patches: [B, N, C, *P], NaN in the channels an item lacks. Returns: [B, N, D].

        Every channel is tokenised (no data-dependent shapes, so no host synchronisation); an
        absent channel is first filled with the patch's first present channel, so that running
        statistics of the tokenizer (the standardised spectrum's) see only real signals, and its
        token is then left out of the pooling.
        """
        batch, count, chans = patches.shape[:3]
        check(
            chans == len(self.channels),
            "patches",
            f"patches of the {len(self.channels)} channels {list(self.channels)}",
            f"{chans} channels",
        )
        absent = patches.flatten(3).isnan().any(dim=-1)  # [B, N, C]
        item_present = ~absent.all(dim=1)  # [B, C]: a channel an item has
        present = ~absent & self._keep(item_present)[:, None, :]
        spread = (...,) + (None,) * (patches.dim() - 3)  # [B, N, C] -> [B, N, C, 1, ...]
        values = torch.where(absent[spread], 0.0, patches)
        donor = (~absent).to(torch.uint8).argmax(dim=2)  # [B, N] first present channel
        index = donor[(...,) + (None,) * (patches.dim() - 2)].expand(
            batch, count, 1, *patches.shape[3:]
        )
        values = torch.where(absent[spread], values.gather(2, index), values)
        tokens = self.tokenizer(values.flatten(1, 2).unsqueeze(2))  # [B, N * C, D]
        tokens = tokens.view(batch, count, chans, -1)
        embedding = self.channel_embed(self.features).to(tokens.dtype)  # [C, D]
        mixed = tokens + self.mix(F.gelu(tokens + embedding))  # [B, N, C, D]
        if self.pool is None:
            return mean_over_channels(mixed, present)
        return self.pool(mixed, present)

    def extra_repr(self) -> str:
        return (
            f"channels={list(self.channels)}, channel_dropout={self.channel_dropout}, "
            f"subset_sampling={self.subset_sampling}, "
            f"channel_pool={'mean' if self.pool is None else 'attention'}"
        )


def build_channel_set(
    in_chans: int,
    patch_size: Sequence[int],
    embed_dim: int,
    options: Mapping[str, Any] | None = None,
) -> ChannelSetPatchEmbed:
    """A :class:`ChannelSetPatchEmbed` (``frontend="channel_set"`` of a
    :class:`~partnd.models.ViTEncoder`), refusing unknown options by name."""
    accepted = ("channels", "tokenizer", "tokenizer_options", *CHANNEL_OPTIONS)
    given = dict(options or {})
    unknown = sorted(set(given) - set(accepted))
    check(
        not unknown,
        "frontend_options",
        f"options of the 'channel_set' front-end ({', '.join(accepted)})",
        f"unknown {', '.join(unknown)}",
    )
    return ChannelSetPatchEmbed(in_chans, patch_size, embed_dim, **given)


def check_channel_options(options: Mapping[str, Any], argument: str = "channel_options") -> None:
    """Refuse unknown channel-set options, and a ``channel_pool`` or ``channel_pool_heads`` that
    no front-end accepts, naming ``argument`` (e.g. ``"FinetuneConfig.channel_options"``), when a
    configuration is made rather than when its encoder is built.

    Raises:
        InputError: Naming the option and what it accepts.
    """
    unknown = sorted(set(options) - set(CHANNEL_OPTIONS))
    check(not unknown, argument, f"options among {list(CHANNEL_OPTIONS)}", unknown)
    pool = options.get("channel_pool", "mean")
    check(
        pool in CHANNEL_POOLS,
        argument,
        f"'channel_pool' one of {list(CHANNEL_POOLS)}",
        repr(pool),
    )
    heads = options.get("channel_pool_heads", 4)
    check(
        isinstance(heads, int) and not isinstance(heads, bool) and heads >= 1,
        argument,
        "'channel_pool_heads' an int >= 1 (a divisor of the token width)",
        repr(heads),
    )
