"""Attention pooling over channels (``channel_pool="attention"``): a softmax over the present
channels only, order-free, exact on one channel, the zero token on none, trainable, saved with
the model, refused by name when misspelt; ``"mean"`` stays the default for old models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.models import create_encoder
from partnd.models.channel_pool import ChannelAttentionPool
from partnd.models.channel_set import ChannelSetPatchEmbed
from partnd.models.serialization import load_encoder, save_encoder

PC18 = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]


def front(channel_pool: str = "attention", **options: object) -> ChannelSetPatchEmbed:
    """A front-end of 16-wide tokens, its pooling queries drawn (non-zero, as after training)."""
    torch.manual_seed(0)
    module = ChannelSetPatchEmbed(
        6, (10,), 16, channels=PC18, channel_pool=channel_pool, **options
    ).eval()
    if module.pool is not None:
        with torch.no_grad():
            module.pool.query.normal_(0.0, 3.0)
    return module


def patches(seed: int = 0) -> torch.Tensor:
    """[B=3, N=4, C=6, P=10], item 1 without F4-M1 and O1-M2, one patch of item 2 empty."""
    x = torch.randn(3, 4, 6, 10, generator=torch.Generator().manual_seed(seed))
    x[1, :, [1, 4]] = float("nan")
    x[2, 3] = float("nan")
    return x


def test_attention_starts_as_the_mean_and_weights_channels_once_its_queries_move() -> None:
    torch.manual_seed(0)
    attention = ChannelSetPatchEmbed(6, (10,), 16, channels=PC18, channel_pool="attention")
    torch.manual_seed(0)
    mean = ChannelSetPatchEmbed(6, (10,), 16, channels=PC18)
    assert mean.pool is None and set(attention.state_dict()) - set(mean.state_dict()) == {
        "pool.query"
    }
    x = patches()
    with torch.no_grad():
        torch.testing.assert_close(attention(x), mean(x), atol=1e-6, rtol=1e-6)
        assert attention.pool is not None
        attention.pool.query.normal_(0.0, 3.0)
        assert not torch.allclose(attention(x), mean(x), atol=1e-3)


def test_weights_sum_to_one_over_present_channels_and_absent_ones_weigh_nothing() -> None:
    pool = ChannelAttentionPool(16, 4)
    with torch.no_grad():
        pool.query.normal_(0.0, 3.0)
    present = torch.ones(2, 3, 6, dtype=torch.bool)
    present[0, :, [0, 5]] = False
    present[1, 2] = False  # a patch with no channel
    with torch.no_grad():
        weights = pool.weights(torch.randn(2, 3, 6, 16), present)
    assert weights.shape == (2, 3, 6, 4)
    assert bool((weights[~present] == 0).all())
    sums = weights.sum(dim=2)
    torch.testing.assert_close(sums[present.any(dim=2)], torch.ones(5, 4))
    assert bool((sums[1, 2] == 0).all())
    assert float(weights[0, 0, 1:5].std()) > 0.01  # not the mean's uniform weights


def test_any_order_of_channels_gives_the_same_token() -> None:
    module = front()
    x = patches()
    order = [4, 0, 5, 2, 1, 3]
    with torch.no_grad():
        expected = module(x)
        module.set_channels([PC18[i] for i in order])
        permuted = module(x[:, :, order])
    torch.testing.assert_close(permuted, expected, atol=1e-5, rtol=1e-5)


def test_an_absent_channel_has_no_influence_and_a_present_one_has() -> None:
    module = front()
    x = patches()
    with torch.no_grad():
        out = module(x)
        other = x.clone()
        other[0, :, 2] = torch.randn(4, 10)  # C3-M2 of item 0: present, other values
        other[0, :, 2, 0] = float("nan")  # ... now absent from every patch of item 0
        absent = module(other)
        again = other.clone()
        again[0, :, 2, 1:] = 100.0  # other values of the absent channel
        torch.testing.assert_close(module(again), absent, atol=0.0, rtol=0.0)
        changed = x.clone()
        changed[0, :, 2] = torch.randn(4, 10)  # the same channel present with other values
        assert not torch.allclose(module(changed)[0], out[0], atol=1e-3)
    assert not torch.allclose(absent[0], out[0], atol=1e-3)
    torch.testing.assert_close(absent[1:], out[1:], atol=0.0, rtol=0.0)  # others unchanged


def test_one_present_channel_gives_its_own_token_and_none_gives_zeros() -> None:
    attention = front()
    mean = front("mean")
    mean.load_state_dict(attention.state_dict(), strict=False)
    x = patches()
    x[0, :, 1:] = float("nan")  # item 0: F3-M2 alone
    with torch.no_grad():
        alone = attention(x)
        torch.testing.assert_close(alone[0], mean(x)[0], atol=1e-6, rtol=1e-6)
        attention.set_channels(PC18[:1])
        torch.testing.assert_close(alone[0], attention(x[:1, :, :1])[0], atol=1e-6, rtol=1e-6)
    assert bool((alone[2, 3] == 0).all()) and bool(alone[2, :3].abs().sum(dim=-1).gt(0).all())


@pytest.mark.parametrize(
    "sampling", [{"subset_sampling": True}, {"channel_dropout": 0.5}], ids=["subset", "dropout"]
)
def test_the_queries_get_a_finite_gradient_with_channel_sampling(
    sampling: dict[str, object],
) -> None:
    module = front(**sampling).train()
    torch.manual_seed(1)
    out = module(patches())
    assert bool(torch.isfinite(out).all()) and bool((out[2, 3] == 0).all())
    (out * torch.randn_like(out)).sum().backward()
    for name, parameter in module.named_parameters():
        assert parameter.grad is not None and bool(torch.isfinite(parameter.grad).all()), name
    assert module.pool is not None
    grad = module.pool.query.grad
    assert grad is not None and float(grad.abs().sum()) > 0


def test_save_and_load_keep_the_pooling_and_an_old_model_reads_as_the_mean(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    options = {"channels": PC18, "tokenizer": "spectral", "channel_pool": "attention"}
    encoder = create_encoder(
        "vit_test",
        in_chans=6,
        patch_size=10,
        ndim=1,
        frontend="channel_set",
        frontend_options={**options, "channel_pool_heads": 2},
    ).eval()
    assert isinstance(encoder.patch_embed, ChannelSetPatchEmbed)
    assert encoder.patch_embed.pool is not None and encoder.patch_embed.pool.heads == 2
    with torch.no_grad():
        encoder.patch_embed.pool.query.normal_(0.0, 3.0)
    save_encoder(encoder, tmp_path / "attention.pt")
    loaded = load_encoder(tmp_path / "attention.pt")
    assert loaded.architecture["frontend_options"]["channel_pool"] == "attention"
    x = torch.randn(2, 6, 100)
    x[0, 3] = float("nan")
    with torch.no_grad():
        torch.testing.assert_close(loaded.embed(x), encoder.embed(x), atol=0.0, rtol=0.0)

    # a model saved before the option existed records no channel_pool: it reads as the mean
    old = create_encoder(
        "vit_test",
        in_chans=6,
        patch_size=10,
        ndim=1,
        frontend="channel_set",
        frontend_options={"channels": PC18, "tokenizer": "spectral"},
    ).eval()
    save_encoder(old, tmp_path / "old.pt")
    reloaded = load_encoder(tmp_path / "old.pt")
    assert "channel_pool" not in reloaded.architecture["frontend_options"]
    assert isinstance(reloaded.patch_embed, ChannelSetPatchEmbed)
    assert reloaded.patch_embed.pool is None
    assert not any("pool" in key for key in reloaded.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(reloaded.embed(x), old.embed(x), atol=0.0, rtol=0.0)


def test_a_bad_pooling_is_refused_naming_the_option_and_the_allowed_values() -> None:
    allowed = r"'channel_pool' one of \['mean', 'attention'\], got 'max'"
    with pytest.raises(InputError, match=rf"frontend_options: expected {allowed}"):
        ChannelSetPatchEmbed(6, (10,), 16, channels=PC18, channel_pool="max")
    with pytest.raises(InputError, match=rf"FinetuneConfig.channel_options: expected {allowed}"):
        FinetuneConfig.preset("test", channel_mode="set", channel_options={"channel_pool": "max"})
    with pytest.raises(InputError, match=rf"PretrainConfig.channel_options: expected {allowed}"):
        PretrainConfig.preset("test", channel_options={"channel_pool": "max"})
    with pytest.raises(InputError, match="'channel_pool_heads' an int >= 1"):
        FinetuneConfig.preset("test", channel_options={"channel_pool_heads": 0})
    with pytest.raises(InputError, match=r"options among \[.*'channel_pool'.*got \['pool'\]"):
        FinetuneConfig.preset("test", channel_options={"pool": "attention"})
    heads = {"channel_pool": "attention", "channel_pool_heads": 3}
    with pytest.raises(InputError, match="'channel_pool_heads' a divisor of the token width 16"):
        ChannelSetPatchEmbed(6, (10,), 16, channels=PC18, **heads)
    config = FinetuneConfig.preset("test", channel_options={"channel_pool": "attention"})
    assert config.channel_options == {"channel_pool": "attention"}
