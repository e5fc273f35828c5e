"""Linear probe, then fine-tune (``FinetuneConfig.probe_steps``): the pretrained encoder is held
fixed for the first steps while the new parameters train, then everything trains."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.engine import compilation
from partnd.engine.config import FinetuneConfig
from partnd.engine.distributed import DistributedContext
from partnd.engine.trainer import Trainer
from partnd.finetuning.tasks import ClassificationTask
from partnd.finetuning.training import finetune
from partnd.models import (
    HierarchicalEncoder,
    NightClassifier,
    PatchClassifier,
    create_encoder,
    create_temporal_encoder,
)
from partnd.recipes import sleep_staging
from partnd.recipes.study_config import StudyConfig
from tests.finetune_helpers import optimiser_state_names, tiny_night_config

pytestmark = pytest.mark.usefixtures("one_thread")


def tones(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """[n, 1, 200] noisy sines whose frequency (2, 6 or 15 cycles) is the label."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    time = np.arange(200) / 200
    phases = rng.uniform(0, 2 * np.pi, n)
    clean = np.sin(2 * np.pi * np.array([2, 6, 15])[labels, None] * time + phases[:, None])
    signals = clean[:, None] + 0.3 * rng.standard_normal((n, 1, 200))
    return signals.astype(np.float32), labels.tolist()


def window_config(**overrides: Any) -> FinetuneConfig:
    """4 steps an epoch on 32 tones; weight decay on (it must not shrink a held encoder)."""
    base = {"patch_size": 20, "epochs": 3, "batch_size": 8, "lr": 3e-3, "weight_decay": 0.05}
    return FinetuneConfig.preset("test", **{**base, **overrides})


def pretrained_window_encoder(in_chans: int = 1, patch_size: int = 20) -> nn.Module:
    torch.manual_seed(7)
    return create_encoder("vit_test", in_chans=in_chans, patch_size=patch_size, ndim=1)


def tuned(encoder: Any, out: Path, config: FinetuneConfig, **kwargs: Any) -> nn.Module:
    x, y = tones(32, seed=0)
    return finetune(
        encoder, x, train_labels=y, num_classes=3, out_dir=out, config=config, **kwargs
    ).model


def initial_classifier(encoder: nn.Module, config: FinetuneConfig) -> PatchClassifier:
    """The window classifier ``finetune`` starts from (its fresh parts drawn as it draws them)."""
    torch.manual_seed(config.seed)
    return PatchClassifier(copy.deepcopy(encoder), 3, spatial_shape=(200,), copy_encoder=False)


WINDOW_NEW = {"encoder.head.weight", "encoder.head.bias", "encoder.pos_embed"}


def test_the_window_encoder_is_held_for_probe_steps_then_trains(tmp_path: Path) -> None:
    encoder = pretrained_window_encoder()
    original = {f"encoder.{name}": value for name, value in encoder.state_dict().items()}
    config = window_config(probe_steps=4)
    probed = tuned(encoder, tmp_path / "probe", config, max_steps=4)
    assert isinstance(probed, PatchClassifier)
    weights = probed.state_dict()
    assert set(weights) - set(original) == WINDOW_NEW  # the fresh classifier and slots
    for name, value in original.items():  # weights, norms, [CLS]: not one bit moved
        assert torch.equal(weights[name], value), name
    initial = initial_classifier(encoder, config).state_dict()
    for name in WINDOW_NEW:  # trained while the encoder was held
        assert not torch.equal(weights[name], initial[name]), name
    # no AdamW moments or step count for the held parameters: they start when released
    assert optimiser_state_names(tmp_path / "probe") == WINDOW_NEW
    assert all(param.requires_grad for param in probed.parameters())  # returned as it came

    trained = tuned(encoder, tmp_path / "full", config).state_dict()  # 12 steps, 8 of them free
    assert not torch.equal(
        trained["encoder.blocks.0.attn.qkv.weight"], weights["encoder.blocks.0.attn.qkv.weight"]
    )
    assert not torch.equal(
        trained["encoder.patch_embed.weight"], original["encoder.patch_embed.weight"]
    )
    assert optimiser_state_names(tmp_path / "full") == set(trained)


def test_the_probe_phase_trains_the_head_as_if_the_encoder_were_not_there(tmp_path: Path) -> None:
    """k held steps give the weights of k steps of an optimiser that never saw the encoder:
    nothing of the held parameters (gradient norm, decay, moments) reaches the others."""
    x, y = tones(32, seed=0)
    config = window_config(probe_steps=3, max_steps=3)
    probed = tuned(pretrained_window_encoder(), tmp_path / "probe", config)

    model = initial_classifier(pretrained_window_encoder(), config)
    for name, param in model.named_parameters():
        param.requires_grad_(name in WINDOW_NEW)
    trainer = Trainer(
        model,
        ClassificationTask(3, None, 0.0, None),
        list(zip(torch.from_numpy(x), y, strict=True)),
        config,
        context=DistributedContext(),
        run_dir=None,
    )
    trainer.fit()
    for name, value in model.state_dict().items():
        assert torch.equal(value, probed.state_dict()[name]), name


def test_resume_inside_the_probe_phase_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    encoder = pretrained_window_encoder()
    config = window_config(probe_steps=6, layer_decay=0.8)
    full = tuned(encoder, tmp_path / "full", config).state_dict()
    cut = tuned(encoder, tmp_path / "cut", config, max_steps=3)  # held at step 3 of 6
    assert torch.equal(
        cut.state_dict()["encoder.blocks.0.mlp.fc1.weight"],
        encoder.state_dict()["blocks.0.mlp.fc1.weight"],
    )
    x, y = tones(32, seed=0)
    resumed = finetune(
        encoder,
        x,
        train_labels=y,
        num_classes=3,
        out_dir=tmp_path / "cut",
        resume=True,
        max_steps=None,
    ).model.state_dict()
    for name, value in full.items():
        assert torch.equal(value, resumed[name]), name
    assert not torch.equal(
        full["encoder.blocks.0.mlp.fc1.weight"], cut.state_dict()["encoder.blocks.0.mlp.fc1.weight"]
    )


def test_a_compiled_model_is_held_then_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled forward and backward follow the held parameters (a graph traced while they
    took no gradient must not serve once they do): the eager run's weights, within rounding."""
    monkeypatch.setattr(compilation, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    encoder = pretrained_window_encoder()
    config = window_config(probe_steps=3, epochs=2)
    eager = tuned(encoder, tmp_path / "eager", config).state_dict()
    compiled = tuned(encoder, tmp_path / "compiled", config.replace(compile="default"))
    probed = tuned(encoder, tmp_path / "probe", config.replace(compile="default", max_steps=3))
    for name, value in encoder.state_dict().items():
        assert torch.equal(probed.state_dict()[f"encoder.{name}"], value), name
    for name, value in eager.items():
        torch.testing.assert_close(compiled.state_dict()[name], value, rtol=1e-3, atol=1e-5)
    assert not torch.equal(
        compiled.state_dict()["encoder.blocks.0.attn.qkv.weight"],
        encoder.state_dict()["blocks.0.attn.qkv.weight"],
    )


def test_no_probe_steps_is_todays_fine_tuning(tmp_path: Path) -> None:
    encoder = pretrained_window_encoder()
    default = tuned(encoder, tmp_path / "default", window_config(epochs=1)).state_dict()
    zero = tuned(encoder, tmp_path / "zero", window_config(epochs=1, probe_steps=0)).state_dict()
    for name, value in default.items():
        assert torch.equal(value, zero[name]), name
    assert not torch.equal(
        default["encoder.blocks.0.attn.qkv.weight"],
        encoder.state_dict()["blocks.0.attn.qkv.weight"],
    )


def test_probe_steps_is_refused_where_it_means_nothing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"FinetuneConfig\.probe_steps: expected a number >= 0"):
        window_config(probe_steps=-1)
    with pytest.raises(InputError, match=r"FinetuneConfig\.probe_steps: expected int"):
        window_config(probe_steps=2.5)
    with pytest.raises(InputError, match=r"FinetuneConfig\.probe_steps: expected 0 with a"):
        FinetuneConfig.preset("test", stager="chambon2018", probe_steps=3)
    with pytest.raises(InputError, match=r"FinetuneConfig\.probe_steps: expected 0 when training"):
        tuned(None, tmp_path / "scratch", window_config(probe_steps=2))
    with pytest.raises(InputError, match=r"FinetuneConfig\.probe_steps: expected 0 when training"):
        tuned("vit_test", tmp_path / "preset", window_config(probe_steps=2))
    assert not (tmp_path / "scratch" / "checkpoints").exists()
    model = PatchClassifier(pretrained_window_encoder(), 3, spatial_shape=(200,))
    x, y = tones(8, seed=0)
    unknown = ["encoder.blocks.9.weight"]
    for argument, names in (("freeze", {"freeze": unknown}), ("full_rate", {"full_rate": unknown})):
        with pytest.raises(InputError, match=f"{argument}: expected names of the model's param"):
            Trainer(
                model,
                ClassificationTask(3, None, 0.0, None),
                list(zip(torch.from_numpy(x), y, strict=True)),
                window_config(),
                context=DistributedContext(),
                run_dir=None,
                layer_decay=0.5,
                freeze_steps=2,
                **names,
            )


def test_a_night_classifier_holds_its_pretrained_window_encoder(
    gappy_store: Path, tmp_path: Path
) -> None:
    window = pretrained_window_encoder(in_chans=3, patch_size=10)
    original = window.state_dict()
    config = tiny_night_config(probe_steps=3, epochs=4)
    probed = finetune(
        window,
        str(gappy_store),
        num_classes=5,
        out_dir=tmp_path / "probe",
        config=config,
        max_steps=3,
    ).model
    assert isinstance(probed, NightClassifier)
    held = probed.encoder.window.state_dict()
    fresh = {"pos_embed"}  # a PART encoder has no tile slots: the classifier's are new
    assert set(held) - set(original) == fresh
    for name, value in original.items():
        assert torch.equal(held[name], value), name
    state = optimiser_state_names(tmp_path / "probe")
    assert "encoder.window.pos_embed" in state and "head.weight" in state
    assert {"encoder.temporal.blocks.0.attn.qkv.weight", "time_embed.0.weight"} <= state
    assert not any(
        name.startswith("encoder.window.") and name != "encoder.window.pos_embed" for name in state
    )
    trained = finetune(
        window, str(gappy_store), num_classes=5, out_dir=tmp_path / "full", config=config
    ).model.encoder.window.state_dict()
    assert not torch.equal(
        trained["blocks.0.attn.qkv.weight"], original["blocks.0.attn.qkv.weight"]
    )


def test_a_pretrained_temporal_level_is_held_with_the_window_level(
    gappy_store: Path, tmp_path: Path
) -> None:
    window = pretrained_window_encoder(in_chans=3, patch_size=10)
    temporal = create_temporal_encoder(
        window.embed_dim, "temporal_test", num_positions=4, pos_mask_ratio=0.5
    )
    pretrained = HierarchicalEncoder(window, temporal, 50)
    original = pretrained.state_dict()
    config = tiny_night_config(probe_steps=2, epochs=2)
    run = tmp_path / "probe"
    model = finetune(
        pretrained, str(gappy_store), num_classes=5, out_dir=run, config=config, max_steps=2
    ).model
    held = model.encoder.state_dict()
    for name, value in original.items():
        if name == "temporal.patch_embed.bias":  # the mask embedding folded in, then held
            value = value + temporal.pos_mask_token
        if name not in ("temporal.pos_embed", "temporal.pos_mask_token"):
            assert torch.equal(held[name], value), name
    assert optimiser_state_names(run) == {
        "head.weight",
        "head.bias",
        "log_half_life",
        *(f"time_embed.{i}.{kind}" for i in (0, 2) for kind in ("weight", "bias")),
    }


def test_the_study_holds_pretrained_rows_only(tmp_path: Path) -> None:
    study = StudyConfig(out=tmp_path, night_overrides={"probe_steps": 50})
    assert study.finetune_config("part", 0, "night").probe_steps == 50
    assert study.finetune_config("part", 0, "window").probe_steps == 0
    assert study.finetune_config("supervised", 0, "night").probe_steps == 0  # from scratch
    assert study.finetune_config("usleep", 0, "night").probe_steps == 0
    every_arm = StudyConfig(out=tmp_path, finetune_overrides={"probe_steps": 50})
    assert every_arm.finetune_config("mae", 0, "window").probe_steps == 50
    assert every_arm.finetune_config("supervised_no_pos", 0, "window").probe_steps == 0
    assert every_arm.pool_ceiling_config().probe_steps == 0  # its supervised pretraining


def test_the_study_command_line_sets_it_for_the_night_arm(tmp_path: Path) -> None:
    def study(out: str, *night_set: str) -> StudyConfig:
        options = [item for value in night_set for item in ("--night-set", value)]
        args = sleep_staging.build_parser("t").parse_args(["all", "--out", out, *options])
        return sleep_staging.study_from_args(args).config

    config = study(str(tmp_path / "lpft"), "probe_steps=50", "warmup_steps=80")
    assert config.night_overrides == {"probe_steps": 50, "warmup_steps": 80}
    assert config.settings["night_overrides"] == {"probe_steps": 50, "warmup_steps": 80}
    night = config.finetune_config("part_windows", 0, "night")
    assert (night.probe_steps, night.warmup_steps) == (50, 80)
    assert config.finetune_config("supervised", 0, "night").probe_steps == 0
    refused = str(tmp_path / "refused")
    with pytest.raises(InputError, match=r"^--night-set: expected FIELD=VALUE, got 'probe_steps'"):
        study(refused, "probe_steps")
    with pytest.raises(InputError, match=r"^--night-set: expected FinetuneConfig field names"):
        study(refused, "probe_step=5")
    with pytest.raises(InputError, match=r"^FinetuneConfig\.probe_steps: expected a number >= 0"):
        study(refused, "probe_steps=-1")
    assert not Path(refused).exists()  # refused before the study directory is claimed
