"""Tests of the typed run configurations, their presets and config resolution on resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig
from partnd.engine.session import resolve_config


def test_eeg_sleep_preset_matches_the_paper() -> None:
    config = PretrainConfig.preset("eeg_sleep")
    assert (config.encoder, config.patch_size, config.num_patches) == ("vit_eeg_12m", 100, 40)
    assert config.head == "cross_attention"
    assert config.method == "part" and config.integer_boxes
    assert config.pos_embed and config.pos_mask_ratio == 0.2  # anchored: leak-free (docs/part.md)
    assert PretrainConfig().pos_embed is False  # the library default: no position embedding
    assert (config.lr, config.lr_reference_batch, config.weight_decay) == (5e-4, 512, 0.05)
    assert config.precision == "auto" and config.ema_decay is not None  # bf16 where it is fast
    assert config.warmup_epochs > 0 and config.scale_range is None


def test_image_presets() -> None:
    cifar = PretrainConfig.preset("images_cifar")
    assert (cifar.encoder, cifar.patch_size, cifar.num_patches, cifar.num_pairs) == (
        "vit_small",
        4,
        64,
        2048,
    )
    # the paper's main setting: fixed-size boxes (the scale/aspect extension is an option)
    assert cifar.scale_range is None and not cifar.scale_targets
    imagenet = PretrainConfig.preset("images_imagenet")
    assert (imagenet.encoder, imagenet.patch_size, imagenet.num_patches) == ("vit_base", 16, 196)
    assert imagenet.num_pairs == 4802 and imagenet.scale_range is None
    test = PretrainConfig.preset("test")
    assert test.encoder == "vit_test" and test.precision == "fp32" and not test.progress
    assert set(PretrainConfig.list_presets()) == {
        "eeg_sleep",
        "eeg_sleep_windows",
        "images_cifar",
        "images_imagenet",
        "images_small",
        "test",
    }
    assert {"eeg_sleep", "test"} <= set(FinetuneConfig.list_presets())


def test_preset_overrides_and_unknown_names() -> None:
    assert PretrainConfig.preset("test", epochs=7).epochs == 7
    with pytest.raises(InputError, match=r"preset: expected one of .*'eeg_sleep'.*got 'eeg'"):
        PretrainConfig.preset("eeg")
    with pytest.raises(InputError, match=r"field names \('epochs', 'batch_size'.*'learning_rate'"):
        PretrainConfig().replace(learning_rate=1.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lr": "fast"}, "PretrainConfig.lr: expected float, got 'fast'"),
        ({"epochs": 1.5}, "PretrainConfig.epochs: expected int"),
        ({"epochs": True}, "PretrainConfig.epochs: expected int"),
        ({"num_pairs": 0}, "PretrainConfig.num_pairs: expected a number > 0"),
        ({"batch_size": -1}, "batch_size"),
        ({"precision": "fp8"}, "precision: expected 'auto' | 'fp32' | 'bf16' | 'fp16'"),
        ({"betas": (0.9,)}, "betas: expected tuple"),
        ({"betas": (0.9, 1.0)}, r"betas: expected two numbers in \[0, 1\)"),
        ({"min_lr": 1.0}, "min_lr: expected <= lr"),
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"device": "gpu"}, "device"),
        ({"head": "transformer"}, "head: expected one of"),
        ({"scale_targets": True}, "scale_targets: expected False unless scale_range"),
        ({"scale_range": (2.0, 1.0)}, "scale_range"),
        ({"min_steps": 0}, "min_steps"),
        ({"patch_size": 0}, "patch_size"),
        ({"warmup_epochs": -1.0}, "warmup_epochs"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_every_field_is_validated(overrides: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        PretrainConfig(**overrides)


def test_an_unknown_method_fails_when_the_config_is_built() -> None:
    with pytest.raises(
        InputError, match=r"PretrainConfig.method: expected one of \[.*'mae'.*'part'"
    ):
        PretrainConfig.preset("eeg_sleep", method="nope")
    assert PretrainConfig(method="part_grid").method == "part_grid"


def test_finetune_fields_are_validated() -> None:
    with pytest.raises(InputError, match="class_weights"):
        FinetuneConfig(class_weights="inverse")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="layer_decay"):
        FinetuneConfig(layer_decay=0.0)
    with pytest.raises(InputError, match="label_smoothing"):
        FinetuneConfig(label_smoothing=1.0)
    assert FinetuneConfig(class_weights="balanced", layer_decay=0.75).layer_decay == 0.75


def test_dict_and_json_round_trip(tmp_path: Path) -> None:
    config = PretrainConfig.preset(
        "images_cifar",
        encoder_overrides={"drop_path_rate": 0.1},
        scale_range=(0.5, 2.0),
        scale_targets=True,
    )
    as_dict = config.to_dict()
    assert as_dict["scale_range"] == [0.5, 2.0]  # JSON form
    assert PretrainConfig.from_dict(as_dict) == config
    config.to_json(tmp_path / "config.json")
    loaded = PretrainConfig.from_json(tmp_path / "config.json")
    assert loaded == config and loaded.scale_range == (0.5, 2.0)
    with pytest.raises(InputError, match="config: expected a readable JSON file"):
        PretrainConfig.from_json(tmp_path / "missing.json")


def test_ints_are_accepted_for_floats_and_lists_for_tuples() -> None:
    config = PretrainConfig(lr=1, betas=[0.8, 0.9], patch_size=[4, 4])  # type: ignore[arg-type]
    assert isinstance(config.lr, float) and config.betas == (0.8, 0.9)
    assert config.patch_size == (4, 4)


def test_parse_value_for_the_command_line() -> None:
    assert PretrainConfig.parse_value("lr", "1e-3") == 1e-3
    assert PretrainConfig.parse_value("max_steps", "none") is None
    assert PretrainConfig.parse_value("progress", "False") is False
    assert PretrainConfig.parse_value("precision", "bf16") == "bf16"
    assert PretrainConfig.parse_value("scale_range", "[0.5, 2]") == [0.5, 2]
    with pytest.raises(InputError, match="--set"):
        PretrainConfig.parse_value("nope", "1")


def test_field_docs_and_types_cover_every_field() -> None:
    for config_cls in (PretrainConfig, FinetuneConfig):
        docs = config_cls.field_docs()
        assert list(docs) == config_cls.field_names()
        assert all(docs.values()), [name for name, doc in docs.items() if not doc]
    assert PretrainConfig.field_types()["max_steps"] == "int | None"
    assert "epochs" in TrainConfig.field_names() and "num_pairs" not in TrainConfig.field_names()


def test_resolve_config_on_resume() -> None:
    stored = PretrainConfig.preset("test").to_dict()
    assert resolve_config(PretrainConfig, None, {}, stored) == PretrainConfig.preset("test")
    longer = resolve_config(PretrainConfig, None, {"epochs": 9, "max_steps": None}, stored)
    assert longer.epochs == 9
    with pytest.raises(InputError, match=r"changes to lr: 0.001 -> 0.1"):
        resolve_config(PretrainConfig, None, {"lr": 0.1}, stored)
    with pytest.raises(InputError, match="config: expected None or a PretrainConfig"):
        resolve_config(PretrainConfig, FinetuneConfig(), {}, None)  # type: ignore[arg-type]
