"""Tests for the relative heads: shared contract, factorised projections, naive references."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.models.heads import (
    CrossAttentionHead,
    MLPHead,
    PairProjection,
    PairwiseMLPHead,
    build_head,
    list_heads,
)

B, N, D, K = 3, 6, 16, 11


def make_head(name: str, out_dim: int = 2, **kwargs: object) -> nn.Module:
    return build_head(name, embed_dim=D, out_dim=out_dim, num_patches=N, **kwargs)


def random_pairs(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, N, shape), torch.randint(0, N, shape)


def explicit_linear(projection: PairProjection) -> nn.Linear:
    """The un-factorised Linear(2D -> F) that a PairProjection stands for."""
    out_features = projection.ref_proj.out_features
    linear = nn.Linear(2 * D, out_features)
    with torch.no_grad():
        linear.weight.copy_(torch.cat([projection.ref_proj.weight, projection.tgt_proj.weight], 1))
        linear.bias.copy_(projection.ref_proj.bias)
    return linear


def concat_pairs(tokens: torch.Tensor, ref: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Naive [B, K, 2D] concatenation [x_ref; x_tgt] for [B, K] indices."""
    rows = torch.arange(tokens.shape[0]).unsqueeze(1)
    return torch.cat([tokens[rows, ref], tokens[rows, tgt]], dim=-1)


@pytest.mark.parametrize("name", ["cross_attention", "pairwise_mlp", "mlp"])
@pytest.mark.parametrize("out_dim", [1, 2, 4])
def test_shared_contract_shapes(name: str, out_dim: int) -> None:
    head = make_head(name, out_dim)
    tokens = torch.randn(B, N, D)
    shared_ref, shared_tgt = random_pairs((K,))
    assert head(tokens, shared_ref, shared_tgt).shape == (B, K, out_dim)
    per_ref, per_tgt = random_pairs((B, K))
    assert head(tokens, per_ref, per_tgt).shape == (B, K, out_dim)
    assert (head.embed_dim, head.out_dim) == (D, out_dim)


@pytest.mark.parametrize("name", ["cross_attention", "pairwise_mlp", "mlp"])
def test_shared_pairs_equal_the_same_pairs_given_per_example(name: str) -> None:
    head = make_head(name)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((K,))
    shared = head(tokens, ref, tgt)
    per_example = head(tokens, ref.expand(B, -1), tgt.expand(B, -1))
    torch.testing.assert_close(shared, per_example)
    # and each example's pairs are applied to that example only
    ref2, tgt2 = random_pairs((B, K))
    out = head(tokens, ref2, tgt2)
    for b in range(B):
        torch.testing.assert_close(out[b : b + 1], head(tokens[b : b + 1], ref2[b], tgt2[b]))


def test_pair_projection_equals_the_explicit_concatenated_linear() -> None:
    projection = PairProjection(D, 24)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    expected = explicit_linear(projection)(concat_pairs(tokens, ref, tgt))
    torch.testing.assert_close(projection(tokens, ref, tgt), expected)


@pytest.mark.parametrize("num_heads", [1, 4])
@pytest.mark.parametrize("input_norm", [False, True])
def test_cross_attention_equals_a_naive_implementation(num_heads: int, input_norm: bool) -> None:
    head = CrossAttentionHead(D, 2, num_heads=num_heads, input_norm=input_norm)
    with torch.no_grad():  # make the optional norm non-trivial
        for parameter in head.norm.parameters():
            parameter.normal_()
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    x = head.norm(tokens)
    query = explicit_linear(head.query)(concat_pairs(x, ref, tgt))  # [B, K, D], the paper's X^
    key, value = head.key_value(x).chunk(2, dim=-1)
    head_dim = D // num_heads
    outputs = []
    for h in range(num_heads):
        part = slice(h * head_dim, (h + 1) * head_dim)
        scores = query[..., part] @ key[..., part].transpose(1, 2) / math.sqrt(head_dim)
        outputs.append(scores.softmax(dim=-1) @ value[..., part])
    expected = head.out(torch.cat(outputs, dim=-1))
    torch.testing.assert_close(head(tokens, ref, tgt), expected, atol=1e-5, rtol=1e-5)


def test_pairwise_mlp_equals_a_naive_implementation() -> None:
    head = PairwiseMLPHead(D, 3, hidden_dim=20)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    hidden = nn.functional.gelu(explicit_linear(head.fc1)(concat_pairs(tokens, ref, tgt)))
    torch.testing.assert_close(head(tokens, ref, tgt), head.fc2(hidden))


def test_mlp_head_gathers_from_the_full_pair_map() -> None:
    head = MLPHead(D, 2, num_patches=N, hidden_dim=8)
    tokens = torch.randn(B, N, D)
    every = head.fc2(head.act(head.fc1(tokens.reshape(B, N * D)))).reshape(B, N, N, 2)
    ref, tgt = random_pairs((B, K))
    out = head(tokens, ref, tgt)
    for b in range(B):
        for k in range(K):
            torch.testing.assert_close(out[b, k], every[b, ref[b, k], tgt[b, k]])
    with pytest.raises(InputError, match="tokens"):
        head(torch.randn(B, N + 1, D), ref, tgt)


def test_factorised_heads_have_no_pair_sized_input_layer() -> None:
    """No Linear takes 2D inputs: the [K, 2D] concatenation is never materialised."""
    for name in ("cross_attention", "pairwise_mlp"):
        layers = [m for m in make_head(name).modules() if isinstance(m, nn.Linear)]
        assert layers and all(layer.in_features == D for layer in layers)


def test_cross_attention_is_equivariant_to_patch_order() -> None:
    head = CrossAttentionHead(D, 2)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((K,))
    perm = torch.randperm(N)
    inverse = torch.argsort(perm)  # tokens[:, perm][:, inverse[i]] == tokens[:, i]
    torch.testing.assert_close(
        head(tokens[:, perm], inverse[ref], inverse[tgt]), head(tokens, ref, tgt)
    )


@pytest.mark.parametrize("name", ["cross_attention", "pairwise_mlp", "mlp"])
def test_every_head_parameter_gets_a_gradient(name: str) -> None:
    head = make_head(name, input_norm=True) if name == "cross_attention" else make_head(name)
    tokens = torch.randn(B, N, D, requires_grad=True)
    ref, tgt = random_pairs((B, K))
    head(tokens, ref, tgt).square().mean().backward()
    for parameter_name, parameter in head.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert bool(parameter.grad.abs().sum() > 0), parameter_name
    assert tokens.grad is not None and bool(tokens.grad.abs().sum() > 0)


def test_build_head_names_and_errors() -> None:
    assert list_heads() == ["cross_attention", "mlp", "pairwise_mlp"]
    assert isinstance(make_head("cross_attention", num_heads=2), CrossAttentionHead)
    assert isinstance(make_head("pairwise_mlp"), PairwiseMLPHead)
    assert isinstance(make_head("mlp"), MLPHead)
    with pytest.raises(InputError, match="pairwise_mlp"):
        build_head("transformer", embed_dim=D, out_dim=2)
    with pytest.raises(InputError, match="num_patches"):
        build_head("mlp", embed_dim=D, out_dim=2)
    with pytest.raises(InputError, match="num_heads"):
        CrossAttentionHead(D, 2, num_heads=3)


@pytest.mark.parametrize("name", ["cross_attention", "pairwise_mlp", "mlp"])
def test_index_validation_names_ref_and_tgt(name: str) -> None:
    head = make_head(name)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((K,))
    with pytest.raises(InputError, match=r"ref.*\[0, 6\)"):
        head(tokens, torch.full((K,), N), tgt)
    with pytest.raises(InputError, match="tgt"):
        head(tokens, ref, torch.full((K,), -1))
    with pytest.raises(InputError, match="tgt"):
        head(tokens, ref, tgt[:-1])
    with pytest.raises(InputError, match="ref"):
        head(tokens, ref.float(), tgt)
    with pytest.raises(InputError, match="ref"):
        head(tokens, torch.zeros(B + 1, K, dtype=torch.long), tgt)
    with pytest.raises(InputError, match="tokens"):
        head(torch.randn(B, N, D + 1), ref, tgt)
