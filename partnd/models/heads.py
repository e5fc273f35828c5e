"""Relative heads: map patch embeddings and (reference, target) index pairs to relative targets.

Every head has the contract ``forward(tokens: [B, N, D], ref, tgt) -> [B, K, out_dim]`` where
``tokens`` are the encoder's patch tokens (no [CLS]) and ``ref``/``tgt`` are patch indices in
``[0, N)``, either ``[K]`` (pairs shared by all examples) or ``[B, K]`` (pairs per example).

The heads are the three relative encoders of the PART paper (Ayoughi et al., "How PARTs assemble
into wholes", Sec. 3 and the relative-encoder ablation): the cross-attention head (the method), the
pairwise MLP and the all-patches MLP. Pair inputs ``[x_ref; x_tgt]`` are never materialised: a
``Linear(2D -> F)`` on a concatenation equals ``W_ref x_ref + W_tgt x_tgt + b``, so both halves are
computed once per *patch* (``[B, N, F]``) and gathered per pair, which costs ``O(N·D·F + K·F)``
instead of ``O(K·D·F)`` for ``K`` pairs (``K`` is 2048-4802 in the paper, ``N`` 40-196).
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
    "check_pair_indices",
    "gather_patches",
    "list_heads",
]


def check_pair_indices(tokens: Tensor, ref: Tensor, tgt: Tensor, embed_dim: int) -> None:
    """Validate a head's inputs.

    Args:
        tokens: [B, N, D] patch tokens with D = ``embed_dim``.
        ref: [K] or [B, K] integer reference indices in [0, N).
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
    batch_size, num_patches = tokens.shape[0], tokens.shape[1]
    for name, index in (("ref", ref), ("tgt", tgt)):
        check(
            not index.is_floating_point()
            and index.dtype != torch.bool
            and (index.dim() == 1 or (index.dim() == 2 and index.shape[0] == batch_size)),
            name,
            f"an integer tensor [K] or [{batch_size}, K] of patch indices",
            index,
        )
        if index.numel() > 0:
            low, high = int(index.min()), int(index.max())
            check(
                low >= 0 and high < num_patches,
                name,
                f"patch indices in [0, {num_patches})",
                f"indices in [{low}, {high}]",
            )
    check(
        ref.shape == tgt.shape,
        "tgt",
        f"the same shape as ref {tuple(ref.shape)}",
        tgt,
    )


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

    For each pair the query is ``Linear(2D -> D)([x_ref; x_tgt])`` (factorised per patch, see
    :class:`PairProjection`); keys and values are linear projections of all patch tokens X' (no
    [CLS]); single-head scaled-dot-product attention by default (as in the authors' code); a final
    ``Linear(D -> out_dim)`` maps the attended value to the relative target. The attention's query
    in-projection is folded into the pair projection and its output projection into the final
    linear layer (compositions of linear maps), so no parameter is redundant.

    The computation never forms a ``[B, K, D]`` tensor for the K pairs. Because the query is a sum
    of a reference and a target half, its attention logits are sums of per-patch logits,
    ``q_k · key_n = (a_ref(k) · key_n) + (b_tgt(k) · key_n)``, so two ``[B, H, N, N]`` logit tables
    are computed once and gathered per pair; and because the final linear layer follows the
    attention directly, it is applied to the N values first (``[B, H, N, out_dim]``). The cost per
    pair is ``O(H · N · out_dim)`` instead of ``O(D² + N · D)``, which keeps the head cheap at the
    paper's thousands of pairs; the result equals the textbook computation (tested).

    Args:
        embed_dim: Token width D.
        out_dim: Target size (``ndim``, or ``2 * ndim`` with scale targets).
        num_heads: Attention heads (must divide ``embed_dim``).
        input_norm: Apply a LayerNorm to the tokens first.
    """

    def __init__(
        self, embed_dim: int, out_dim: int, num_heads: int = 1, input_norm: bool = False
    ) -> None:
        super().__init__()
        check(
            num_heads >= 1 and embed_dim % num_heads == 0,
            "num_heads",
            f"a positive divisor of embed_dim={embed_dim}",
            repr(num_heads),
        )
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.num_heads = num_heads
        self.norm: nn.Module = nn.LayerNorm(embed_dim) if input_norm else nn.Identity()
        self.query = PairProjection(embed_dim, embed_dim)
        self.key_value = nn.Linear(embed_dim, 2 * embed_dim)
        self.out = nn.Linear(embed_dim, out_dim)
        self.apply(init_weights)

    def _split_heads(self, per_patch: Tensor) -> Tensor:
        """[B, N, D] -> [B, H, N, D / H]."""
        batch, num_patches, dim = per_patch.shape
        return per_patch.view(batch, num_patches, self.num_heads, dim // self.num_heads).transpose(
            1, 2
        )

    @staticmethod
    def _gather_rows(table: Tensor, index: Tensor) -> Tensor:
        """Rows of a per-patch table for each pair: [B, H, N, M] -> [B, H, K, M]."""
        if index.dim() == 1:
            return table[:, :, index]
        expanded = index[:, None, :, None].expand(-1, table.shape[1], -1, table.shape[-1])
        return torch.gather(table, 2, expanded)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K]. Returns: [B, K, out_dim]."""
        check_pair_indices(tokens, ref, tgt, self.embed_dim)
        head_dim = self.embed_dim // self.num_heads
        x = self.norm(tokens)
        query_ref = self._split_heads(self.query.ref_proj(x))  # [B, H, N, D / H]
        query_tgt = self._split_heads(self.query.tgt_proj(x))
        key, value = (self._split_heads(part) for part in self.key_value(x).chunk(2, dim=-1))
        scale = head_dim**-0.5
        logits_ref = (query_ref @ key.transpose(-2, -1)) * scale  # [B, H, N, N]
        logits_tgt = (query_tgt @ key.transpose(-2, -1)) * scale
        logits = self._gather_rows(logits_ref, ref) + self._gather_rows(logits_tgt, tgt)
        # The final linear layer, split per head and applied to the values: [B, H, N, out_dim].
        out_weight = self.out.weight.view(self.out_dim, self.num_heads, head_dim).transpose(0, 1)
        projected_value = value @ out_weight.transpose(-2, -1).unsqueeze(0)
        attended = torch.softmax(logits.float(), dim=-1).to(projected_value.dtype) @ projected_value
        return attended.sum(dim=1) + self.out.bias.to(attended.dtype)  # [B, K, out_dim]


class PairwiseMLPHead(nn.Module):
    """Ablation head: an MLP that sees only the two embeddings of a pair.

    ``Linear(2D -> H)([x_ref; x_tgt])`` (factorised per patch) -> GELU -> ``Linear(H -> out_dim)``.

    Args:
        embed_dim: Token width D.
        out_dim: Target size.
        hidden_dim: Hidden width H (defaults to ``embed_dim``).
    """

    def __init__(self, embed_dim: int, out_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden = embed_dim if hidden_dim is None else hidden_dim
        check(hidden >= 1, "hidden_dim", "a positive int or None", repr(hidden_dim))
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.fc1 = PairProjection(embed_dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out_dim)
        self.apply(init_weights)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D]; ref, tgt: [K] or [B, K]. Returns: [B, K, out_dim]."""
        check_pair_indices(tokens, ref, tgt, self.embed_dim)
        return self.fc2(self.act(self.fc1(tokens, ref, tgt)))


class MLPHead(nn.Module):
    """Ablation head: one MLP from all N embeddings (flattened) to the targets of all N x N pairs.

    ``Linear(N·D -> H)`` -> GELU -> ``Linear(H -> N·N·out_dim)``; output ``(i, j)`` is the
    prediction for reference ``i`` and target ``j``, and the requested pairs are gathered from it.
    Needs a fixed number of patches N, and token order matters (no weight sharing).

    Args:
        embed_dim: Token width D.
        out_dim: Target size.
        num_patches: The fixed N.
        hidden_dim: Hidden width H.
    """

    def __init__(
        self, embed_dim: int, out_dim: int, num_patches: int, hidden_dim: int = 512
    ) -> None:
        super().__init__()
        check(num_patches >= 2, "num_patches", "an int >= 2", repr(num_patches))
        check(hidden_dim >= 1, "hidden_dim", "a positive int", repr(hidden_dim))
        self.embed_dim = embed_dim
        self.out_dim = out_dim
        self.num_patches = num_patches
        self.fc1 = nn.Linear(num_patches * embed_dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, num_patches * num_patches * out_dim)
        self.apply(init_weights)

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        """Args: tokens: [B, N, D] with N = ``num_patches``; ref, tgt: [K] or [B, K].

        Returns:
            [B, K, out_dim].
        """
        check_pair_indices(tokens, ref, tgt, self.embed_dim)
        batch, num_patches = tokens.shape[:2]
        check(
            num_patches == self.num_patches,
            "tokens",
            f"{self.num_patches} patch tokens (MLPHead has a fixed number of patches)",
            tokens,
        )
        every_pair = self.fc2(self.act(self.fc1(tokens.flatten(1))))
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
        **kwargs: Extra keywords of the head class (``num_heads``, ``input_norm``, ``hidden_dim``).

    Returns:
        The head module.
    """
    if name not in _HEADS:
        raise InputError(f"name: expected one of {list_heads()}, got {name!r}")
    if name == "mlp":
        check(num_patches is not None, "num_patches", "an int for the 'mlp' head", "None")
        kwargs["num_patches"] = num_patches
    return _HEADS[name](embed_dim=embed_dim, out_dim=out_dim, **kwargs)
