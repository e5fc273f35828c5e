"""Resumes that would change the model are refused (issue 43)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.training import finetune


def test_sequence_resume_refuses_another_normalisation(gappy_store: Path, tmp_path: Path) -> None:
    """Resuming a sequence classifier on record-normalised windows with window-normalised ones
    went on and relabelled the model: the fingerprint left the normalisation out."""
    config = FinetuneConfig.preset(
        "test", patch_size=10, context=3, temporal_encoder="temporal_test", epochs=2, max_steps=1
    )
    out = tmp_path / "run"
    record = SleepSequenceDataset(gappy_store, context=3, normalize="record", progress=False)
    finetune(None, record, num_classes=5, out_dir=out, config=config)
    window = SleepSequenceDataset(gappy_store, context=3, normalize="window", progress=False)
    with pytest.raises(InputError, match="normali"):
        finetune(None, window, num_classes=5, out_dir=out, resume=True)
    finetune(None, record, num_classes=5, out_dir=out, resume=True)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"night_crop": 20}, "night_crop"),
        ({"night_crop": 20, "context": 21}, "night_crop"),
        ({"temporal_encoder": "temporal_base"}, "temporal_encoder"),
        ({"temporal_overrides": {"depth": 1}}, "temporal_overrides"),
    ],
)
def test_night_and_sequence_settings_without_their_context_are_refused(overrides, named) -> None:
    """--night-crop without --context night, --temporal-encoder without --context were ignored
    yet recorded in config.json."""
    with pytest.raises(InputError, match=rf"FinetuneConfig\.{named}"):
        FinetuneConfig.preset("test", **overrides)
    FinetuneConfig.preset("test", **{**overrides, "context": "night"})


def test_a_temporal_preset_is_refused_beside_a_pretrained_temporal_encoder(tmp_path: Path) -> None:
    """A hierarchical encoder brings its temporal transformer: --temporal-encoder was ignored."""
    from partnd.models import create_encoder
    from partnd.models.sequence import hierarchical_from_window

    window = create_encoder("vit_test", in_chans=1, patch_size=10, ndim=1)
    encoder = hierarchical_from_window(window, 50, "temporal_test")
    with pytest.raises(InputError, match=r"FinetuneConfig\.temporal_encoder"):
        finetune(
            encoder,
            str(tmp_path),
            num_classes=5,
            out_dir=tmp_path / "run",
            context=3,
            temporal_encoder="temporal_base",
        )


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"patience": 2, "patience_start": float("nan")}, "patience_start"),
        ({"patience": 2, "patience_start": float("inf")}, "patience_start"),
        ({"lr": float("inf")}, "lr"),
        ({"epochs": float("inf")}, "epochs"),
    ],
)
def test_config_numbers_without_a_bound_are_refused(overrides, named) -> None:
    """PretrainConfig(patience_start=nan) was accepted: no value ever passes it, so patience
    never counted."""
    from partnd.engine.config import PretrainConfig

    with pytest.raises(InputError, match=rf"PretrainConfig\.{named}"):
        PretrainConfig.preset("test", **overrides)
