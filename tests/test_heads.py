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


def test_cross_attention_is_the_papers_formula() -> None:
    """One head: softmax(X^ X'^T / sqrt(D)) X' with K = V = X', then Linear(D -> out)."""
    head = CrossAttentionHead(D, 2)
    assert head.key is None  # no key projection: it would be absorbed by the query projection
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    query = explicit_linear(head.query)(concat_pairs(tokens, ref, tgt))  # [B, K, D], the paper's X^
    attended = (query @ tokens.transpose(1, 2) / math.sqrt(D)).softmax(dim=-1) @ tokens
    expected = attended @ head.value_out[0].T + head.out_bias
    torch.testing.assert_close(head(tokens, ref, tgt), expected, atol=1e-5, rtol=1e-5)


def test_projected_cross_attention_equals_a_naive_multi_head_attention() -> None:
    heads = 4
    head = CrossAttentionHead(D, 3, num_heads=heads)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    query = explicit_linear(head.query)(concat_pairs(tokens, ref, tgt))
    assert head.key is not None and head.key.bias is None
    keys = head.key(tokens)
    head_dim = D // heads
    expected = head.out_bias.expand(B, K, 3).clone()
    for h in range(heads):
        part = slice(h * head_dim, (h + 1) * head_dim)
        scores = query[..., part] @ keys[..., part].transpose(1, 2) / math.sqrt(head_dim)
        expected = expected + (scores.softmax(dim=-1) @ tokens) @ head.value_out[h].T
    torch.testing.assert_close(head(tokens, ref, tgt), expected, atol=1e-5, rtol=1e-5)


def textbook_cross_attention(
    head: CrossAttentionHead, tokens: torch.Tensor, ref: torch.Tensor, tgt: torch.Tensor
) -> torch.Tensor:
    """The head as the paper writes it, with the head's own parameters (so gradients reach them):
    the [B, K, D] queries from [x_ref; x_tgt], per-head softmax over the keys, values read through
    value_out, summed over heads."""
    if ref.dim() == 1:
        ref, tgt = ref.expand(tokens.shape[0], -1), tgt.expand(tokens.shape[0], -1)
    weight = torch.cat([head.query.ref_proj.weight, head.query.tgt_proj.weight], dim=1)
    query = concat_pairs(tokens, ref, tgt) @ weight.T + head.query.ref_proj.bias  # [B, K, D]
    keys = tokens if head.key is None else head.key(tokens)
    width = head.head_dim
    out = head.out_bias
    for h in range(head.num_heads):
        part = slice(h * width, (h + 1) * width)
        scores = query[..., part] @ keys[..., part].transpose(1, 2) / math.sqrt(width)
        out = out + (scores.softmax(dim=-1) @ tokens) @ head.value_out[h].T
    return out


def gradients(module: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    grads = [p.grad for p in module.parameters()] + [tokens.grad]
    assert all(g is not None for g in grads)
    return [g.clone() for g in grads]  # type: ignore[union-attr]


@pytest.mark.parametrize("num_heads", [1, 4])
@pytest.mark.parametrize("out_dim", [1, 2, 4])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_attention_values_and_gradients_equal_the_textbook_head(
    num_heads: int, out_dim: int, shared: bool, dtype: torch.dtype
) -> None:
    """The all-pairs factorisation computes the paper's head: same outputs, same gradients."""
    head = CrossAttentionHead(D, out_dim, num_heads=num_heads).to(dtype)
    with torch.no_grad():  # non-trivial logits and bias
        head.query.ref_proj.weight.mul_(20.0)
        head.query.tgt_proj.weight.mul_(20.0)
        head.out_bias.normal_()
    tokens = torch.randn(B, N, D, dtype=dtype, requires_grad=True)
    ref, tgt = random_pairs((K,) if shared else (B, K))
    weights = torch.randn(B, K, out_dim, dtype=dtype)
    results = []
    for forward in (head, lambda *a: textbook_cross_attention(head, *a)):
        head.zero_grad()
        tokens.grad = None
        out = forward(tokens, ref, tgt)
        (out * weights).sum().backward()
        results.append((out.detach(), gradients(head, tokens)))
    tolerance = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(results[0][0], results[1][0], **tolerance)
    for fast, reference in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(fast, reference, **tolerance)


def test_cross_attention_stays_exact_when_attention_is_sharp() -> None:
    """Logits spread over hundreds (where float32 factors exp(l - max l) would underflow to 0/0)
    still give the paper's softmax: the factors are taken in float64."""
    head = CrossAttentionHead(D, 2).double()
    with torch.no_grad():
        head.query.ref_proj.weight.normal_(std=30.0)
        head.query.tgt_proj.weight.normal_(std=30.0)
    tokens = torch.randn(B, N, D, dtype=torch.float64)
    ref, tgt = random_pairs((B, K))
    with torch.no_grad():
        query = explicit_linear(head.query.float())(concat_pairs(tokens.float(), ref, tgt))
        head.double()
        logits = query.double() @ tokens.transpose(1, 2) / math.sqrt(D)
        assert float((logits.amax(-1) - logits.amin(-1)).min()) > 200
        expected = textbook_cross_attention(head, tokens, ref, tgt)
        for dtype in (torch.float64, torch.float32):
            out = head.to(dtype)(tokens.to(dtype), ref, tgt)
            assert bool(torch.isfinite(out).all())
            tolerance = {} if dtype == torch.float64 else {"atol": 0.05, "rtol": 0.0}
            torch.testing.assert_close(out.double(), expected, **tolerance)


@pytest.mark.parametrize("anchored", [False, True])
def test_part_step_loss_and_gradients_equal_the_textbook_head(anchored: bool) -> None:
    """A whole PART step (sampling, anchored or plain pairs, head, loss) with the factorised head
    gives the loss and every gradient of the same step with the paper's textbook head."""
    from partnd.models.registry import create_encoder
    from partnd.objectives import PARTModel
    from partnd.patches.sampling import OffGridSampler

    position = {"num_positions": 8, "pos_mask_ratio": 0.25} if anchored else {}
    encoder = create_encoder("vit_test", in_chans=2, patch_size=5, ndim=1, **position)
    model = PARTModel(
        encoder,
        CrossAttentionHead(32, 1),
        OffGridSampler(1, 5, 10),
        num_pairs=24,
        shared_pairs=not anchored,
    ).train()
    x = torch.randn(4, 2, 40)
    head = model.head
    assert isinstance(head, CrossAttentionHead)
    steps = []
    for textbook in (False, True):
        if textbook:
            head.forward = lambda tokens, ref, tgt: textbook_cross_attention(head, tokens, ref, tgt)
        model.zero_grad()
        out = model(x, generator=torch.Generator().manual_seed(3))
        out.loss.backward()
        steps.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(steps[0][0], steps[1][0], atol=1e-6, rtol=1e-5)
    for fast, reference in zip(steps[0][1], steps[1][1], strict=True):
        torch.testing.assert_close(fast, reference, atol=1e-6, rtol=1e-4)


def test_cross_attention_under_autocast_returns_the_autocast_dtype() -> None:
    head = CrossAttentionHead(D, 2)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((K,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(tokens, ref, tgt)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), head(tokens, ref, tgt), atol=0.05, rtol=0.02)


def test_pairwise_mlp_is_one_linear_layer_on_the_pair() -> None:
    head = PairwiseMLPHead(D, 2)
    assert sum(p.numel() for p in head.parameters()) == 2 * D * 2 + 2  # the paper's 2·d·2 (+bias)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((B, K))
    expected = explicit_linear(head.linear)(concat_pairs(tokens, ref, tgt))
    torch.testing.assert_close(head(tokens, ref, tgt), expected)


def test_mlp_head_is_one_linear_layer_from_all_patches_to_all_pairs() -> None:
    head = MLPHead(D, 2, num_patches=N)
    assert head.linear.weight.shape == (N * N * 2, N * D)  # the paper's N·d·N²·2
    tokens = torch.randn(B, N, D)
    every = head.linear(tokens.reshape(B, N * D)).reshape(B, N, N, 2)
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


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("cross_attention", {}),
        ("cross_attention", {"num_heads": 4}),
        ("pairwise_mlp", {}),
        ("mlp", {}),
    ],
)
def test_every_head_parameter_gets_a_gradient(name: str, kwargs: dict) -> None:
    """No dead parameter: every gradient is non-zero well above float32 round-off."""
    head = make_head(name, **kwargs).double()
    tokens = torch.randn(B, N, D, dtype=torch.float64, requires_grad=True)
    ref, tgt = random_pairs((B, K))
    head(tokens, ref, tgt).square().mean().backward()
    for parameter_name, parameter in head.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert float(parameter.grad.abs().max()) > 1e-8, parameter_name
    assert tokens.grad is not None and bool(tokens.grad.abs().sum() > 0)


def test_a_key_bias_would_get_exactly_zero_gradient() -> None:
    """Why the head has no key bias: softmax ignores a shift shared by all keys of a query."""
    tokens = torch.randn(B, N, D, dtype=torch.float64)
    query = torch.randn(B, K, D, dtype=torch.float64)
    bias = torch.randn(D, dtype=torch.float64, requires_grad=True)
    ((query @ (tokens + bias).transpose(1, 2)).softmax(-1) @ tokens).square().sum().backward()
    assert bias.grad is not None and float(bias.grad.abs().max()) < 1e-12


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
    with pytest.raises(InputError, match="head_overrides"):
        build_head("pairwise_mlp", embed_dim=D, out_dim=2, hidden_dim=8)


@pytest.mark.parametrize("name", ["cross_attention", "pairwise_mlp", "mlp"])
def test_shape_validation_names_ref_and_tgt(name: str) -> None:
    head = make_head(name)
    tokens = torch.randn(B, N, D)
    ref, tgt = random_pairs((K,))
    with pytest.raises(InputError, match="tgt"):
        head(tokens, ref, tgt[:-1])
    with pytest.raises(InputError, match="ref"):
        head(tokens, ref.float(), tgt)
    with pytest.raises(InputError, match="ref"):
        head(tokens, torch.zeros(B + 1, K, dtype=torch.long), tgt)
    with pytest.raises(InputError, match="tokens"):
        head(torch.randn(B, N, D + 1), ref, tgt)
    with pytest.raises(IndexError):  # index values are left to torch (no host sync)
        head(tokens, torch.full((K,), N), tgt)
