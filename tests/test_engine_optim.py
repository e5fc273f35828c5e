"""Tests of weight-decay/layer-decay parameter groups, the warm-up + cosine schedule and the EMA."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from partnd.engine.optim import (
    ModelEMA,
    WarmupCosineSchedule,
    build_optimizer,
    layer_id,
    no_weight_decay_names,
    param_groups,
)
from partnd.models import create_encoder


def group_names(groups: list[dict], decayed: bool) -> set[str]:
    return {
        name
        for group in groups
        if (group["weight_decay"] > 0) == decayed
        for name in group["param_names"]
    }


def test_weight_decay_only_on_weight_matrices_of_a_vit() -> None:
    encoder = create_encoder("vit_test", in_chans=2, patch_size=4, ndim=1, num_positions=5)
    encoder.add_position_embedding(5, pos_mask_ratio=0.2)
    groups = param_groups(encoder, weight_decay=0.05)
    decayed, free = group_names(groups, True), group_names(groups, False)
    expected_decay = {
        name
        for name, param in encoder.named_parameters()
        if param.ndim == 2 and name != "pos_embed"
    }
    assert decayed == expected_decay
    assert {"cls_token", "pos_embed", "pos_mask_token", "patch_embed.bias", "norm.weight"} <= free
    assert "blocks.0.attn.qkv.weight" in decayed and "patch_embed.weight" in decayed
    assert decayed | free == {name for name, _ in encoder.named_parameters()}
    assert all(group["lr_scale"] == 1.0 for group in groups)


class WithCustomList(nn.Module):
    """A module that lists an extra no-decay parameter, timm style."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(3, 3))
        self.linear = nn.Linear(3, 3)

    def no_weight_decay(self) -> set[str]:
        return {"table"}


def test_no_weight_decay_hook_and_frozen_parameters() -> None:
    model = nn.Sequential(WithCustomList(), nn.Linear(3, 2))
    model[1].weight.requires_grad_(False)
    assert no_weight_decay_names(model) == {"0.table", "0.linear.bias", "1.bias"}
    groups = param_groups(model, weight_decay=0.1)
    assert group_names(groups, True) == {"0.linear.weight"}
    assert "1.weight" not in group_names(groups, False)


def test_layer_wise_decay_scales() -> None:
    assert layer_id("encoder.patch_embed.weight", 4) == 0
    assert layer_id("encoder.cls_token", 4) == 0
    assert layer_id("encoder.blocks.0.mlp.fc1.weight", 4) == 1
    assert layer_id("encoder.blocks.3.norm1.bias", 4) == 4
    assert layer_id("encoder.norm.weight", 4) == 5
    assert layer_id("encoder.head.weight", 4) == 5
    encoder = create_encoder("vit_test", in_chans=1, patch_size=4, ndim=1, num_classes=3)
    groups = param_groups(encoder, weight_decay=0.05, layer_decay=0.5)
    scale = {name: g["lr_scale"] for g in groups for name in g["param_names"]}
    assert scale["patch_embed.weight"] == 0.5**3  # depth 2: levels 0..3
    assert scale["blocks.0.attn.qkv.weight"] == 0.5**2
    assert scale["blocks.1.attn.qkv.weight"] == 0.5
    assert scale["head.weight"] == 1.0
    optimizer = build_optimizer(
        encoder, lr=1e-3, weight_decay=0.05, betas=(0.9, 0.95), layer_decay=0.5
    )
    assert {g["lr"] for g in optimizer.param_groups} == {1e-3 * 0.5**k for k in range(4)}


def test_layer_decay_of_a_sequence_classifier_spares_its_temporal_encoder() -> None:
    from partnd.models import SequenceClassifier

    window = create_encoder("vit_test", in_chans=2, patch_size=10, ndim=1)  # depth 2
    model = SequenceClassifier.from_window_encoder(
        window, 5, context=3, window_samples=40, temporal="temporal_test"
    )
    groups = param_groups(model, weight_decay=0.05, layer_decay=0.5)
    scale = {name: g["lr_scale"] for g in groups for name in g["param_names"]}
    assert scale["encoder.window.patch_embed.weight"] == 0.5**3  # the window encoder's depth
    assert scale["encoder.window.blocks.1.mlp.fc1.weight"] == 0.5
    assert scale["encoder.temporal.blocks.0.attn.qkv.weight"] == 1.0
    assert scale["encoder.temporal.pos_embed"] == 1.0
    assert scale["head.weight"] == 1.0
    assert layer_id("encoder.temporal.blocks.0.norm1.weight", 2) == 3


def test_full_rate_parameters_skip_layer_wise_decay_and_nothing_else() -> None:
    from partnd.models import SequenceClassifier

    window = create_encoder("vit_test", in_chans=2, patch_size=10, ndim=1)  # depth 2
    model = SequenceClassifier.from_window_encoder(
        window, 5, context=3, window_samples=40, temporal="temporal_test"
    )
    names = [name for name, _ in model.named_parameters()]
    untrained = [name for name in names if name.startswith("encoder.window.")]
    plain = param_groups(model, weight_decay=0.05, layer_decay=0.5)
    groups = param_groups(model, weight_decay=0.05, layer_decay=0.5, full_rate=untrained)
    scale = {name: g["lr_scale"] for g in groups for name in g["param_names"]}
    before = {name: g["lr_scale"] for g in plain for name in g["param_names"]}
    assert before["encoder.window.patch_embed.weight"] == 0.5**3
    assert all(scale[name] == 1.0 for name in names)  # the rest was at the top level already
    assert group_names(groups, True) == group_names(plain, True)  # weight decay unchanged
    one = ["encoder.window.blocks.0.attn.qkv.weight"]
    scale = {
        name: g["lr_scale"]
        for g in param_groups(model, weight_decay=0.05, layer_decay=0.5, full_rate=one)
        for name in g["param_names"]
    }
    assert scale[one[0]] == 1.0
    assert {name for name in names if scale[name] != before[name]} == set(one)
    # without layer-wise decay every rate is the full one anyway
    assert all(
        g["lr_scale"] == 1.0 for g in param_groups(model, weight_decay=0.05, full_rate=untrained)
    )


def test_schedule_values_at_known_steps() -> None:
    param = nn.Parameter(torch.zeros(2, 2))
    optimizer = torch.optim.AdamW([{"params": [param], "lr_scale": 0.5}])
    schedule = WarmupCosineSchedule(
        optimizer, base_lr=1e-3, min_lr=1e-5, warmup_steps=4, total_steps=14
    )
    assert schedule.lr_at(0) == pytest.approx(1e-3 / 4)
    assert schedule.lr_at(1) == pytest.approx(2e-3 / 4)
    assert schedule.lr_at(3) == pytest.approx(1e-3)  # last warm-up step reaches lr
    assert schedule.lr_at(4) == pytest.approx(1e-3)  # cosine starts at lr
    assert schedule.lr_at(4 + 9 / 2) == pytest.approx((1e-3 + 1e-5) / 2)  # half way
    assert schedule.lr_at(13) == pytest.approx(1e-5)  # last step ends at min_lr
    assert schedule.lr_at(100) == pytest.approx(1e-5)
    seen = []
    for _ in range(14):
        seen.append(optimizer.param_groups[0]["lr"])
        schedule.step()
    assert seen == pytest.approx([0.5 * schedule.lr_at(k) for k in range(14)])
    assert all(a <= b for a, b in itertools.pairwise(seen[:4]))
    assert all(a >= b for a, b in itertools.pairwise(seen[4:]))
    restored = WarmupCosineSchedule(
        optimizer, base_lr=1e-3, min_lr=1e-5, warmup_steps=4, total_steps=14
    )
    restored.load_state_dict({"steps_done": 6})
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * schedule.lr_at(6))


def test_schedule_without_warmup_is_pure_cosine() -> None:
    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(1))])
    schedule = WarmupCosineSchedule(
        optimizer, base_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=5
    )
    expected = [0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert [schedule.lr_at(k) for k in range(5)] == pytest.approx(expected)


@pytest.mark.parametrize("warmup", [False, True])
def test_ema_update_formula(warmup: bool) -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    ema = ModelEMA(model, decay=0.9, warmup=warmup)
    for update in (1, 2):
        before = {k: v.clone() for k, v in ema.module.state_dict().items()}
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param))
        model.train()(torch.randn(4, 3))  # moves the BatchNorm running stats and counter
        ema.update(model)
        decay = min(0.9, (1 + update) / (10 + update)) if warmup else 0.9
        assert ema.decay_at(update) == pytest.approx(decay)
        current = model.state_dict()
        for name, averaged in ema.module.state_dict().items():
            if averaged.is_floating_point():
                expected = decay * before[name] + (1 - decay) * current[name]
                assert torch.allclose(averaged, expected, atol=1e-6), name
            else:
                assert torch.equal(averaged, current[name]), name
    assert not any(p.requires_grad for p in ema.module.parameters())
    assert not ema.module.training
    with pytest.raises(ValueError, match="decay"):
        ModelEMA(model, decay=1.0)


def test_ema_warmup_follows_the_weights_early_and_reaches_the_full_decay() -> None:
    """With decay 0.9999 and no warm-up, 840 steps leave the average 92% at its start."""
    param = nn.Parameter(torch.zeros(1))
    plain = ModelEMA(nn.ParameterList([param]), decay=0.9999, warmup=False)
    warm = ModelEMA(nn.ParameterList([param]), decay=0.9999)
    with torch.no_grad():
        param.fill_(1.0)  # the trained weights jump to 1 and stay there
    for _ in range(840):
        plain.update(nn.ParameterList([param]))
        warm.update(nn.ParameterList([param]))
    assert float(plain.module[0]) == pytest.approx(1 - 0.9999**840, rel=1e-3)  # ~0.08
    assert float(warm.module[0]) > 0.99
    assert warm.decay_at(10**6) == 0.9999
    restored = ModelEMA(nn.ParameterList([param]), decay=0.9999)
    restored.load_state_dict(warm.state_dict())
    assert restored.updates == 840
