"""Pooling the per-channel tokens of a patch into one token: a mean, or attention over channels.

:class:`~partnd.models.channel_set.ChannelSetPatchEmbed` makes one token per channel of a patch
and pools them over the channels present (``channel_pool``):

- ``"mean"`` (default): every present channel weighs the same.
- ``"attention"``: :class:`ChannelAttentionPool`, multi-head attention pooling with learned
  queries, as Set Transformer's pooling by multi-head attention (PMA) with one seed vector. Each
  head ``h`` scores every channel token ``t_c: [D]`` against its query ``q_h: [D]``, takes a
  softmax over the channels present, and averages the ``h``-th slice of the tokens (``D / H``
  values) with those weights::

      s_ch  = q_h . t_c / sqrt(D)                     # [C, H]
      w_ch  = softmax over present c of s_ch          # sums to 1 per head
      token = concat_h sum_c w_ch t_c[h-th slice]     # [D]

  A key projection ``W_k`` would add nothing (``q_h . W_k t_c`` is a dot product of ``t_c`` with
  the vector ``W_k^T q_h``), and there is no value or output projection: the token is a convex
  combination of the channel tokens, slice by slice. So one channel present gives that channel's
  token exactly, the order of the channels does not matter, an absent channel weighs exactly 0,
  and a patch with no channel present still gets the zero token. The queries start at zero, so
  the weights start uniform and the pooling starts as the mean (``ViTEncoder``'s
  trunc-normal init touches ``nn.Linear`` weights only, not these parameters).

  Cost: ``H * D`` parameters (512 for 4 heads of a 128-wide token) and ``H * D`` multiply-adds
  per channel and patch, ``H / D`` of the front-end's ``D x D`` mixing layer (3 % at 4 heads of
  128), plus a softmax over C per head.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from partnd._validation import check

__all__ = ["CHANNEL_POOLS", "ChannelAttentionPool", "mean_over_channels"]

#: The ways of pooling a patch's channel tokens into one token (option ``channel_pool``).
CHANNEL_POOLS = ("mean", "attention")


def mean_over_channels(tokens: Tensor, present: Tensor) -> Tensor:
    """The mean of the present channels' tokens.

    Args:
        tokens: [B, N, C, D] channel tokens.
        present: [B, N, C] bool, the channels that take part.

    Returns:
        [B, N, D]; zeros for a patch with no channel present.
    """
    weights = present.to(tokens.dtype)
    total = (tokens * weights.unsqueeze(-1)).sum(dim=2)
    return total / weights.sum(dim=2, keepdim=True).clamp(min=1.0)


class ChannelAttentionPool(nn.Module):
    """Multi-head attention pooling over the channels present, with learned queries (see the
    module's docstring).

    Args:
        embed_dim: Token width D.
        heads: Heads H, a divisor of D; head h pools the h-th slice of ``D / H`` values.
    """

    def __init__(self, embed_dim: int, heads: int) -> None:
        super().__init__()
        check(
            isinstance(heads, int) and heads >= 1 and embed_dim % heads == 0,
            "frontend_options",
            f"'channel_pool_heads' a divisor of the token width {embed_dim}",
            repr(heads),
        )
        self.heads = heads
        #: [H, D] one learned query per head; zeros, so the pooling starts as the mean.
        self.query = nn.Parameter(torch.zeros(heads, embed_dim))

    def weights(self, tokens: Tensor, present: Tensor) -> Tensor:
        """Args: tokens: [B, N, C, D]; present: [B, N, C] bool. Returns: [B, N, C, H] weights
        that sum to 1 over the present channels of each head (all 0 where none is present)."""
        scores = tokens @ self.query.to(tokens.dtype).t() / math.sqrt(tokens.shape[-1])
        mask = present.unsqueeze(-1)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return scores.softmax(dim=2).to(tokens.dtype) * mask.to(tokens.dtype)

    def forward(self, tokens: Tensor, present: Tensor) -> Tensor:
        """Args: tokens: [B, N, C, D] channel tokens; present: [B, N, C] bool, the channels that
        take part. Returns: [B, N, D]; zeros for a patch with no channel present."""
        batch, count, chans, width = tokens.shape
        slices = tokens.reshape(batch, count, chans, self.heads, width // self.heads)
        pooled = (slices * self.weights(tokens, present).unsqueeze(-1)).sum(dim=2)
        return pooled.reshape(batch, count, width)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
