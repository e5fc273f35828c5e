"""Relative heads: map patch embeddings and (reference, target) index pairs to relative targets.

Every head has the contract ``forward(tokens: [B, N, D], ref, tgt) -> [B, K, out_dim]`` where
``tokens`` are the encoder's patch tokens X' (no [CLS]) and ``ref``/``tgt`` are patch indices in
``[0, N)``, either ``[K]`` (pairs shared by all examples) or ``[B, K]`` (pairs per example).

The heads are the three relative encoders of the PART paper (Ayoughi et al., "How PARTs assemble
into wholes", Sec. 3 "Relative encoder architecture" and the relative-encoder ablation), exactly as
the paper defines them:

* ``cross_attention`` (the method): ``X^ = Linear(2D -> D)([x_ref; x_tgt])`` is the query of a
  cross-attention whose keys and values are X' itself, ``softmax(X^ X'^T / sqrt(D)) X'``, followed
  by ``Linear(D -> out_dim)``. With ``num_heads > 1`` it becomes the *projected* variant (per-head
  key projections), see :class:`CrossAttentionHead`.
* ``pairwise_mlp``: one ``Linear(2D -> out_dim)`` on the two embeddings of a pair (the paper's
  "2·d·2 parameters"); it sees nothing but the pair.
* ``mlp``: one ``Linear(N·D -> N²·out_dim)`` on all N embeddings flattened, predicting every ordered
  pair at once (the paper's "N·d·N²·2 parameters"); needs a fixed N and is order-dependent.

Pair inputs ``[x_ref; x_tgt]`` are never materialised: a ``Linear(2D -> F)`` on a concatenation
equals ``W_ref x_ref + W_tgt x_tgt + b``, so both halves are computed once per *patch*
(``[B, N, F]``) and gathered per pair, which costs ``O(N·D·F + K·F)`` instead of ``O(K·D·F)`` for
``K`` pairs (``K`` is 1024-4802 in the paper, ``N`` 40-196).

The heads check shapes (free) but not index values (that would cost a host synchronisation per
step); out-of-range indices fail inside torch's gather.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from partnd._validation import InputError, check
from partnd.models.vit import init_weights

__all__ = [
    "CrossAttentionHead",
    "MLPHead",
    "PairProjection",
    "PairwiseMLPHead",
    "build_head",
    "check_pair_shapes",
    "gather_patches",
    "list_heads",
]


def check_pair_shapes(tokens: Tensor, ref: Tensor, tgt: Tensor, embed_dim: int) -> None:
    """Validate the shapes and dtypes of a head's inputs (no host synchronisation).

    Args:
        tokens: [B, N, D] patch tokens with D = ``embed_dim``.
        ref: [K] or [B, K] integer reference indices.
        tgt: Target indices, same shape as ``ref``.
        embed_dim: Expected token width D.

    Raises:
        InputError: Naming ``tokens``, ``ref`` or ``tgt``.
    """
    check(
        tokens.dim() == 3 and tokens.shape[2] == embed_dim,
        "tokens",
        f"a tensor [B, N, {embed_dim}] of patch tokens",
        tokens,
    )
    batch_size = tokens.shape[0]
    for name, index in (("ref", ref), ("tgt", tgt)):
        check(
            not index.is_floating_point()
            and index.dtype != torch.bool
            and (index.dim() == 1 or (index.dim() == 2 and index.shape[0] == batch_size)),
            name,
            f"an integer tensor [K] or [{batch_size}, K] of patch indices",
            index,
        )
    check(ref.shape == tgt.shape, "tgt", f"the same shape as ref {tuple(ref.shape)}", tgt)


def gather_patches(per_patch: Tensor, index: Tensor) -> Tensor:
    """Pick rows of a per-patch tensor for each pair.

    Args:
        per_patch: [B, N, F] values computed once per patch.
        index: [K] (shared by all examples) or [B, K] patch indices.

    Returns:
        [B, K, F] with ``out[b, k] = per_patch[b, index[k]]`` (or ``index[b, k]``).
    """
    if index.dim() == 1:
        return per_patch[:, index]
    return torch.gather(per_patch, 1, index.unsqueeze(-1).expand(-1, -1, per_patch.shape[-1]))


class PairProjection(nn.Module):
    """``Linear(2D -> F)`` applied to ``[x_ref; x_tgt]``, factorised per patch.

    Equals ``Linear(2D -> F)`` with weight ``[ref_proj.weight | tgt_proj.weight]`` and bias
    ``ref_proj.bias``, but each half is computed once per patch and gathered per pair.

    Args:
        embed_dim: Token width D.
        out_features: Output width F.
    """

    def __init__(self, embed_dim: int, out_features: int) -> None:
        super().__init__()
        self.ref_proj = nn.Linear(embed_dim, out_features)
        self.tgt_proj = nn.Linear(embed_dim, out_features, bias=False)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K]. Returns: [B, K, F]."""
        return gather_patches(self.ref_proj(tokens), ref) + gather_patches(
            self.tgt_proj(tokens), tgt
        )


class CrossAttentionHead(nn.Module):
    """The paper's relative encoder: a pair query cross-attends over all patch embeddings.

    **Paper form** (``num_heads=1``, the default): the query of pair ``(i, j)`` is
    ``q = Linear(2D -> D)([x_i; x_j])``; keys and values are the patch tokens X' themselves (K = V =
    X', no projections), ``a = softmax(q X'^T / sqrt(D)) X'``; ``Linear(D -> out_dim)`` maps ``a``
    to the target. A key or value projection would add nothing here: a key projection ``W_k`` is
    absorbed by the query projection (``q^T W_k x = (W_k^T q)^T x``), a key bias shifts all logits
    of a query equally (softmax ignores it, so it gets exactly zero gradient), and a value
    projection followed by the output layer is one linear map.

    **Projected variant** (``num_heads = H > 1``): multi-head attention where head ``h`` compares
    its slice ``q_h`` (``D / H`` wide) with keys ``X' W_h^T`` (a bias-free ``Linear(D -> D / H)``
    per head, which selects what the head looks at, so it is not redundant) and reads the values
    through its own ``Linear(D -> out_dim)`` (the value projection and the output layer folded into
    one map per head); the heads' outputs are summed and one shared bias added. Every parameter of
    either form receives a gradient.

    **How it is computed.** Nothing is formed per pair: the query is a sum of a reference and a
    target half, so the logits of pair ``(i, j)`` over the keys ``n`` are ``l_ref[i, n] + l_tgt[j,
    n]``, two per-patch ``[B, H, N, N]`` tables (one product for both), and the output layer is
    applied to the N values first (``v: [B, H, out_dim, N]``). The exponential of a sum is a
    product, so with each table shifted by its row maximum (``w = exp((l - max_n l) / sqrt(D /
    H))``) the softmax-weighted values of *every* pair are two matrix products per head, ``(w_ref
    * v) @ w_tgt^T`` over ``w_ref @ w_tgt^T``, and the K requested pairs are read from that ``[B,
    N, N, out_dim]`` table. This costs ``O(N^3 · out_dim)`` multiply-adds in matrix products per
    example instead of about fifteen memory-bound passes over ``[B, H, K, N]`` logits (gather,
    add, softmax and their backward), which dominated the head. The weights are taken in float64
    (outside autocast): a pair whose scaled logits' largest sum lies more than ~700 below the sum
    of the two row maxima would underflow (NaN, which stops training as a non-finite loss); in
    float32 the limit would be ~87. The result equals the textbook computation within float
    tolerance, values and gradients (tested).

    Args:
        embed_dim: Token width D.
        out_dim: Target size (``ndim``, or ``2 * ndim`` with scale targets).
        num_heads: 1 for the paper's form; H > 1 (dividing ``embed_dim``) for the projected
            variant.
    """

    def __init__(self, embed_dim: int, out_dim: int, num_heads: int = 1) -> None:
        super().__init__()
        check(
            isinstance(num_heads, int) and num_heads >= 1 and embed_dim % num_heads == 0,
            "num_heads",
            f"a positive divisor of embed_dim={embed_dim}",
            repr(num_heads),
        )
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.query = PairProjection(embed_dim, embed_dim)
        self.key: nn.Linear | None = (
            nn.Linear(embed_dim, embed_dim, bias=False) if num_heads > 1 else None
        )
        # Per head: Linear(D -> out_dim) applied to the attended tokens (value map + output layer).
        self.value_out = nn.Parameter(torch.empty(num_heads, out_dim, embed_dim))
        self.out_bias = nn.Parameter(torch.zeros(out_dim))
        self.apply(init_weights)
        nn.init.trunc_normal_(self.value_out, std=0.02)

    def _split_heads(self, per_patch: Tensor) -> Tensor:
        """[B, N, D] -> [B, H, N, D / H]."""
        batch, num_patches, _ = per_patch.shape
        return per_patch.view(batch, num_patches, self.num_heads, self.head_dim).transpose(1, 2)

    def pair_table(self, tokens: Tensor) -> Tensor:
        """The prediction for every ordered (reference, target) pair, before the output bias.

        Args:
            tokens: [B, N, D] patch tokens.

        Returns:
            [B, out_dim, N, N] float64; entry ``[b, o, i, j]`` is channel ``o`` of pair ``(i, j)``
            without ``out_bias``.
        """
        num_patches = tokens.shape[1]
        keys = self._split_heads(tokens if self.key is None else self.key(tokens))  # [B,H,N,D/H]
        # both halves' logits in one product: rows [0, N) reference, [N, 2N) target
        queries = torch.cat([self.query.ref_proj(tokens), self.query.tgt_proj(tokens)], dim=1)
        logits = self._split_heads(queries) @ keys.transpose(-2, -1)  # [B, H, 2N, N]
        values = torch.einsum("bnd,hod->bhon", tokens, self.value_out.to(tokens.dtype))
        with torch.autocast(tokens.device.type, enabled=False):
            logits = logits.double()
            weights = ((logits - logits.amax(dim=-1, keepdim=True)) * self.head_dim**-0.5).exp()
            weights_ref, weights_tgt = weights.split(num_patches, dim=2)  # [B, H, N(i|j), N(n)]
            weights_tgt = weights_tgt.transpose(-2, -1)  # [B, H, N(n), N(j)]
            weighted = weights_ref.unsqueeze(2) * values.double().unsqueeze(-2)  # [B,H,O,N,N]
            numerator = weighted @ weights_tgt.unsqueeze(2)  # [B, H, O, N(i), N(j)]
            normaliser = weights_ref @ weights_tgt  # [B, H, N(i), N(j)]
            per_head = numerator / normaliser.unsqueeze(2)
            return per_head[:, 0] if self.num_heads == 1 else per_head.sum(dim=1)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K].

        Returns:
            [B, K, out_dim] in the tokens' dtype (the autocast dtype under autocast).
        """
        check_pair_shapes(tokens, ref, tgt, self.embed_dim)
        table = self.pair_table(tokens)  # [B, O, N, N]
        num_patches = table.shape[-1]
        flat = table.flatten(2)  # [B, O, N * N]
        pair = ref * num_patches + tgt
        if pair.dim() == 1:
            picked = flat[:, :, pair]
        else:
            picked = torch.gather(flat, 2, pair.unsqueeze(1).expand(-1, flat.shape[1], -1))
        device = tokens.device.type
        dtype = (
            torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tokens.dtype
        )
        return picked.transpose(1, 2).to(dtype) + self.out_bias.to(dtype)


class PairwiseMLPHead(nn.Module):
    """Ablation head (paper): one ``Linear(2D -> out_dim)`` on the pair's two embeddings.

    It sees only the two patches of a pair, so it must read their relative position from their
    content alone.

    Args:
        embed_dim: Token width D.
        out_dim: Target size.
    """

    def __init__(self, embed_dim: int, out_dim: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.linear = PairProjection(embed_dim, out_dim)
        self.apply(init_weights)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K]. Returns: [B, K, out_dim]."""
        check_pair_shapes(tokens, ref, tgt, self.embed_dim)
        return self.linear(tokens, ref, tgt)


class MLPHead(nn.Module):
    """Ablation head (paper): one ``Linear(N·D -> N²·out_dim)`` from all embeddings to all pairs.

    Output ``(i, j)`` is the prediction for reference ``i`` and target ``j``; the requested pairs
    are gathered from it. Needs a fixed number of patches N, and token order matters (no weight
    sharing). It is large: ``N·D·N²·out_dim`` weights (65 M for the EEG preset's N = 40, D = 512).

    Args:
        embed_dim: Token width D.
        out_dim: Target size.
        num_patches: The fixed N.
    """

    def __init__(self, embed_dim: int, out_dim: int, num_patches: int) -> None:
        super().__init__()
        check(
            isinstance(num_patches, int) and num_patches >= 2,
            "num_patches",
            "an int >= 2",
            repr(num_patches),
        )
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.num_patches = num_patches
        self.linear = nn.Linear(num_patches * embed_dim, num_patches * num_patches * out_dim)
        self.apply(init_weights)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D] with N = ``num_patches``; ref, tgt: [K] or [B, K].

        Returns:
            [B, K, out_dim].
        """
        check_pair_shapes(tokens, ref, tgt, self.embed_dim)
        batch, num_patches = tokens.shape[:2]
        check(
            num_patches == self.num_patches,
            "tokens",
            f"{self.num_patches} patch tokens (MLPHead has a fixed number of patches)",
            tokens,
        )
        every_pair = self.linear(tokens.flatten(1))
        every_pair = every_pair.view(batch, num_patches, num_patches, self.out_dim)
        if ref.dim() == 1:
            return every_pair[:, ref, tgt]
        rows = torch.arange(batch, device=tokens.device).unsqueeze(1)
        return every_pair[rows, ref, tgt]


_HEADS: dict[str, type[nn.Module]] = {
    "cross_attention": CrossAttentionHead,
    "pairwise_mlp": PairwiseMLPHead,
    "mlp": MLPHead,
}


def list_heads() -> list[str]:
    """Return the names accepted by :func:`build_head`, sorted."""
    return sorted(_HEADS)


def build_head(
    name: str, *, embed_dim: int, out_dim: int, num_patches: int | None = None, **kwargs: Any
) -> nn.Module:
    """Build a relative head by name.

    Args:
        name: ``"cross_attention"``, ``"pairwise_mlp"`` or ``"mlp"``.
        embed_dim: Token width D of the encoder.
        out_dim: Target size (``ndim``, or ``2 * ndim`` with scale targets).
        num_patches: Fixed patch count N; required by ``"mlp"``, ignored by the others.
        **kwargs: Extra keywords of the head class (``num_heads`` of the cross-attention head).

    Returns:
        The head module.
    """
    if name not in _HEADS:
        raise InputError(f"name: expected one of {list_heads()}, got {name!r}")
    if name == "mlp":
        check(num_patches is not None, "num_patches", "an int for the 'mlp' head", "None")
        kwargs["num_patches"] = num_patches
    try:
        return _HEADS[name](embed_dim=embed_dim, out_dim=out_dim, **kwargs)
    except TypeError as error:
        raise InputError(f"head_overrides: not accepted by the {name!r} head ({error})") from None
