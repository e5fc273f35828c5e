"""Tests for the dimension-generic ViT encoder and its presets."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.models.registry import create_encoder, list_encoders
from partnd.models.vit import DropPath, ViTEncoder, to_size_tuple


def tiny(ndim: int = 1, **kwargs: object) -> ViTEncoder:
    patch = {1: 5, 2: 3, 3: 2}[ndim]
    return create_encoder("vit_test", in_chans=2, patch_size=patch, ndim=ndim, **kwargs)


def patches_for(encoder: ViTEncoder, batch: int = 3, num: int = 7) -> torch.Tensor:
    return torch.randn(batch, num, encoder.in_chans, *encoder.patch_size)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_shapes_for_every_dimensionality(ndim: int) -> None:
    encoder = tiny(ndim, num_classes=4)
    x = patches_for(encoder)
    features = encoder.forward_features(x)
    assert features.shape == (3, 1 + 7, 32)
    assert encoder.forward_head(features).shape == (3, 4)
    assert encoder(x).shape == (3, 4)
    assert encoder.patch_size == (tuple([{1: 5, 2: 3, 3: 2}[ndim]]) * ndim)
    assert encoder.num_prefix_tokens == 1 and encoder.ndim == ndim and encoder.in_chans == 2


def test_eeg_preset_has_the_papers_parameter_count() -> None:
    encoder = create_encoder("vit_eeg_12m", in_chans=6, patch_size=100, ndim=1, num_positions=30)
    count = sum(p.numel() for p in encoder.parameters())
    assert 12.85e6 <= count <= 12.95e6
    # By hand: patch embed 600*512+512, [CLS] 512, positions 30*512, final norm 1024 and four
    # blocks of 2 norms (2048), qkv (512*1536+1536), proj (512*512+512),
    # fc1 + fc2 (2*512*2048 + 2048 + 512).
    block = 2048 + 512 * 1536 + 1536 + 512 * 512 + 512 + 2 * 512 * 2048 + 2048 + 512
    assert count == 600 * 512 + 512 + 512 + 30 * 512 + 1024 + 4 * block


def test_registry_lists_presets_and_rejects_unknown_names() -> None:
    names = list_encoders()
    for name in ("vit_eeg_12m", "vit_small", "vit_base", "vit_tiny", "vit_test", "vit_test_wide"):
        assert name in names
    small = create_encoder("vit_small", in_chans=3, patch_size=4, ndim=2)
    assert (small.embed_dim, len(small.blocks), small.blocks[0].attn.num_heads) == (384, 12, 6)
    wide = create_encoder("vit_test_wide", in_chans=1, patch_size=4, ndim=1, depth=3)
    assert (wide.embed_dim, len(wide.blocks)) == (64, 3)
    with pytest.raises(InputError, match="vit_test_wide"):
        create_encoder("vit_huge", in_chans=1, patch_size=4, ndim=1)


@torch.no_grad()
def test_timm_initialisation() -> None:
    encoder = tiny()
    linears = [m for m in encoder.modules() if isinstance(m, nn.Linear)]
    assert all(float(m.bias.abs().max()) == 0.0 for m in linears if m.bias is not None)
    norms = [m for m in encoder.modules() if isinstance(m, nn.LayerNorm)]
    assert all(bool((m.weight == 1).all()) and bool((m.bias == 0).all()) for m in norms)
    big = create_encoder("vit_test_wide", in_chans=8, patch_size=16, ndim=1)
    for weight in (big.patch_embed.weight, big.blocks[0].mlp.fc1.weight, big.cls_token):
        assert abs(float(weight.std()) - 0.02) < 0.1 * 0.02 + 3 * 0.02 / weight.numel() ** 0.5


def test_without_position_embedding_patch_tokens_are_permutation_equivariant() -> None:
    encoder = tiny(2).eval()
    x = patches_for(encoder)
    perm = torch.randperm(7)
    out = encoder.forward_features(x)
    out_perm = encoder.forward_features(x[:, perm])
    torch.testing.assert_close(out_perm[:, 1:], out[:, 1:][:, perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_perm[:, 0], out[:, 0], atol=1e-5, rtol=1e-5)


def test_position_embedding_is_added_per_slot() -> None:
    encoder = tiny(1, num_positions=7).eval()
    x = patches_for(encoder)
    slots = torch.arange(7).expand(3, -1)
    perm = torch.randperm(7)
    out = encoder.forward_features(x, slots)
    # Moving patches together with their slot indices permutes the tokens ...
    moved = encoder.forward_features(x[:, perm], slots[:, perm])
    torch.testing.assert_close(moved[:, 1:], out[:, 1:][:, perm], atol=1e-5, rtol=1e-5)
    # ... but moving only the patches changes what the encoder sees.
    shuffled = encoder.forward_features(x[:, perm], slots)
    assert not torch.allclose(shuffled[:, 1:], out[:, 1:][:, perm], atol=1e-3)
    # Equal to adding pos_embed[slots] to the patch tokens by hand.
    assert encoder.pos_embed is not None
    torch.testing.assert_close(encoder.embed_positions(slots), encoder.pos_embed[slots])


@torch.no_grad()
def test_position_mask_only_in_training_and_with_the_requested_count() -> None:
    encoder = tiny(1, num_positions=10, pos_mask_ratio=0.3)
    assert encoder.pos_embed is not None and encoder.pos_mask_token is not None
    slots = torch.arange(10).expand(4, -1)
    encoder.train()
    embedded = encoder.embed_positions(slots)
    is_mask = (embedded == encoder.pos_mask_token).all(dim=-1)
    assert is_mask.sum(dim=1).tolist() == [3, 3, 3, 3]
    unmasked = ~is_mask
    torch.testing.assert_close(embedded[unmasked], encoder.pos_embed[slots][unmasked])
    assert len({tuple(m) for m in is_mask.tolist()}) > 1  # chosen independently per example
    encoder.eval()
    torch.testing.assert_close(encoder.embed_positions(slots), encoder.pos_embed[slots])
    x = patches_for(encoder, batch=4, num=10)
    torch.testing.assert_close(encoder(x, slots), encoder(x, slots))


def test_ratio_zero_is_identical_in_train_and_eval() -> None:
    encoder = tiny(1, num_positions=7)
    assert encoder.pos_mask_token is None
    x, slots = patches_for(encoder), torch.arange(7).expand(3, -1)
    train_out = encoder.train().forward_features(x, slots)
    torch.testing.assert_close(train_out, encoder.eval().forward_features(x, slots))


def test_add_and_remove_position_embedding() -> None:
    encoder = tiny(1)
    x = patches_for(encoder, num=40)
    with pytest.raises(InputError, match="positions"):
        encoder(x, torch.zeros(3, 40, dtype=torch.long))
    encoder.add_position_embedding(500, pos_mask_ratio=0.2)
    assert encoder.num_positions == 500 and encoder.pos_embed is not None
    assert encoder.pos_embed.shape == (500, 32)
    assert abs(float(encoder.pos_embed.detach().std()) - 0.02) < 0.003
    assert any(p is encoder.pos_embed for p in encoder.parameters())
    with pytest.raises(InputError, match="positions"):
        encoder(x)
    assert encoder(x, torch.randint(0, 500, (3, 40))).shape == (3, 32)
    encoder.remove_position_embedding()
    assert encoder.pos_embed is None and encoder.num_positions is None
    assert encoder(x).shape == (3, 32)


def test_forward_head_split_and_reset_classifier() -> None:
    encoder = tiny(2, num_classes=5).eval()
    x = patches_for(encoder)
    features = encoder.forward_features(x)
    torch.testing.assert_close(encoder(x), encoder.forward_head(features))
    torch.testing.assert_close(encoder.forward_head(features, pre_logits=True), features[:, 0])
    assert isinstance(encoder.head, nn.Linear)
    torch.testing.assert_close(encoder(x), encoder.head(features[:, 0]))
    encoder.reset_classifier(0)
    assert isinstance(encoder.head, nn.Identity) and encoder(x).shape == (3, 32)
    encoder.reset_classifier(9)
    assert encoder(x).shape == (3, 9) and encoder.num_classes == 9


def test_drop_path_is_stochastic_in_training_only() -> None:
    encoder = tiny(1, drop_path_rate=0.5)
    x = patches_for(encoder, batch=16)
    encoder.train()
    assert not torch.allclose(encoder(x), encoder(x))
    encoder.eval()
    torch.testing.assert_close(encoder(x), encoder(x))
    drop = DropPath(0.5).train()
    ones = torch.ones(4000, 3)
    out = drop(ones)
    assert set(out[:, 0].unique().tolist()) == {0.0, 2.0}  # whole examples, survivors rescaled
    assert abs(float(out.mean()) - 1.0) < 0.1


def test_gradient_reaches_every_parameter() -> None:
    encoder = tiny(1, num_positions=7, pos_mask_ratio=0.3, num_classes=3).train()
    x = patches_for(encoder)
    encoder(x, torch.arange(7).expand(3, -1)).square().sum().backward()
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None, name
        assert bool(parameter.grad.abs().sum() > 0), name


def test_validation_names_the_argument() -> None:
    encoder = tiny(2)
    with pytest.raises(InputError, match="patches"):
        encoder(torch.randn(3, 7, 2, 3))  # missing a patch dimension
    with pytest.raises(InputError, match="patches"):
        encoder(torch.randn(3, 7, 1, 3, 3))  # wrong channel count
    with pytest.raises(InputError, match="patches"):
        encoder(torch.randn(3, 7, 2, 3, 4))  # wrong patch size
    positioned = tiny(1, num_positions=7)
    x = patches_for(positioned)
    with pytest.raises(InputError, match="positions"):
        positioned(x, torch.arange(6).expand(3, -1))
    with pytest.raises(IndexError):  # index values are left to torch (no host sync)
        positioned(x, torch.full((3, 7), 7))
    with pytest.raises(InputError, match="positions"):
        positioned(x, torch.zeros(3, 7))
    with pytest.raises(InputError, match="pos_mask_ratio"):
        tiny(1, pos_mask_ratio=0.2)
    with pytest.raises(InputError, match="num_heads"):
        tiny(1, num_heads=3)
    with pytest.raises(InputError, match="patch_size"):
        to_size_tuple((4, 4), 1)
