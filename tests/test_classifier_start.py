"""Fine-tuning from a trained night or sequence classifier, whole (head, time-of-night embedding,
half-lives and both levels), and keeping it when validation prefers it
(``TrainConfig.evaluate_start``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.engine.config import FinetuneConfig
from partnd.engine.trainer import START_EPOCH
from partnd.finetuning.classifier_start import trained_classifier
from partnd.finetuning.sequence import build_sequence_classifier
from partnd.finetuning.training import evaluate, finetune
from partnd.models import NightClassifier, SequenceClassifier
from partnd.models.serialization import CLASSIFIER_FILE, load_classifier
from tests.staged_stores import write_staged_store

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["W", "N1", "N2", "N3", "R"]


def _config(**overrides: object) -> FinetuneConfig:
    values = {
        "patch_size": 30,
        "context": "night",
        "night_crop": 16,
        "temporal_encoder": "temporal_test",
        "channel_mode": "set",
        "batch_size": 4,
        "epochs": 1,
    }
    return FinetuneConfig.preset("test", **{**values, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a channel-set night classifier trained on a two-channel store."""
    root = tmp_path_factory.mktemp("source")
    store = write_staged_store(root / "source.zarr", ["C3", "C4"], records=4)
    finetune(
        None,
        InMemoryWindows(store, records=["r0", "r1", "r2"], progress=False),
        num_classes=5,
        val_dataset=SleepNightDataset(store, records=["r3"], context=1, progress=False),
        out_dir=root / "run",
        config=_config(min_steps=120, lr=2e-3, eval_every_steps=40),
        class_names=NAMES,
    )
    return root / "run"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another montage (C4 and O2) of the same planted task, other subjects."""
    root = tmp_path_factory.mktemp("target")
    return write_staged_store(root / "target.zarr", ["C4", "O2"], seed=7, records=3)


def test_a_classifier_names_itself_by_object_run_directory_or_file(source: Path) -> None:
    model = load_classifier(source)
    assert isinstance(model, NightClassifier)
    for given in (model, source, str(source), source / CLASSIFIER_FILE):
        found = trained_classifier(given)
        assert isinstance(found, NightClassifier) and found is not model
        for name, value in model.state_dict().items():
            torch.testing.assert_close(found.state_dict()[name], value)
        assert found.encoder.window.signal_info == model.signal_info
    # encoders, presets, pretrain run directories and nothing name no classifier
    assert trained_classifier(None) is None and trained_classifier("vit_test") is None
    assert trained_classifier(model.encoder) is None
    assert trained_classifier(source.parent) is None  # no classifier.pt there


def test_finetuning_starts_from_every_weight_of_the_classifier_on_another_montage(
    source: Path, target: Path, tmp_path: Path
) -> None:
    start = load_classifier(source)
    assert isinstance(start, NightClassifier)
    config = _config(lr=1e-12, min_lr=0.0, max_steps=1)
    model = finetune(
        source,
        InMemoryWindows(target, records=["r0"], progress=False),
        num_classes=5,
        out_dir=tmp_path / "ft",
        config=config,
    ).model
    assert isinstance(model, NightClassifier)
    assert model.signal_info.ch_names == ("C3", "C4", "O2")  # every derivation it has seen
    weights = model.state_dict()
    with torch.no_grad():  # one step at a learning rate of 1e-12: the starting weights
        for name, value in start.state_dict().items():
            torch.testing.assert_close(weights[name], value, msg=name)
    # the head, time-of-night embedding and half-lives are the source's, not fresh ones
    fresh = build_sequence_classifier(
        None, config, num_classes=5, in_chans=2, window_samples=300, ch_names=["C4", "O2"]
    )
    for name in ("head.weight", "time_embed.2.weight", "log_half_life"):
        assert not torch.allclose(weights[name], fresh.state_dict()[name]), name
    # so it stages the target as the source classifier does, before any target label
    nights = SleepNightDataset(target, records=["r1", "r2"], context=1, progress=False)
    assert evaluate(model, nights, device="cpu").cohen_kappa == pytest.approx(
        evaluate(start, nights, device="cpu").cohen_kappa, abs=1e-6
    )


def test_validation_keeps_the_starting_classifier_when_training_only_harms_it(
    source: Path, target: Path, tmp_path: Path
) -> None:
    start = load_classifier(source)
    nights = SleepNightDataset(target, records=["r2"], context=1, progress=False)
    before = evaluate(start, nights, device="cpu").cohen_kappa
    assert before > 0.5  # the source classifier reads the target's planted stages
    harmful = _config(lr=0.5, grad_clip=None, weight_decay=0.0, min_steps=20)
    train = InMemoryWindows(target, records=["r0", "r1"], progress=False)
    kept, without = (
        finetune(
            source,
            train,
            num_classes=5,
            val_dataset=nights,
            out_dir=tmp_path / str(flag),
            config=harmful.replace(evaluate_start=flag),
        )
        for flag in (True, False)
    )
    assert kept.best_metrics["epoch"] == START_EPOCH
    assert kept.best_metrics["cohen_kappa"] == pytest.approx(before, abs=1e-6)
    val = [record for record in kept.history if record["phase"] == "val"]
    assert val[0]["step"] == 0 and max(r["cohen_kappa"] for r in val[1:]) < before
    assert without.best_metrics["epoch"] != START_EPOCH
    assert without.best_metrics["cohen_kappa"] < before


def test_a_classifier_of_another_kind_classes_or_levels_is_refused(
    source: Path, target: Path, tmp_path: Path
) -> None:
    train = InMemoryWindows(target, records=["r0"], progress=False)
    cases = [
        ({"num_classes": 6}, _config(max_steps=1), "the 5 classes of the classifier"),
        (
            {"num_classes": 5},
            _config(context=4, night_crop=128, max_steps=1),
            "a trained sequence classifier",
        ),
        (
            {"num_classes": 5},
            _config(max_steps=1, pretrained_levels="temporal"),
            "'all' when starting from a trained classifier",
        ),
    ]
    for index, (sizes, config, message) in enumerate(cases):
        with pytest.raises(InputError, match=message):
            finetune(source, train, out_dir=tmp_path / str(index), config=config, **sizes)


def test_a_sequence_classifier_starts_a_sequence_classifier_of_its_context(
    target: Path, tmp_path: Path
) -> None:
    config = _config(context=4, night_crop=128, max_steps=2, lr=1e-3)
    train = InMemoryWindows(target, records=["r0"], progress=False)
    first = finetune(None, train, num_classes=5, out_dir=tmp_path / "a", config=config).model
    assert isinstance(first, SequenceClassifier)
    again = finetune(
        tmp_path / "a",
        train,
        num_classes=5,
        out_dir=tmp_path / "b",
        config=config.replace(lr=1e-12, min_lr=0.0),
    ).model
    for name, value in first.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, msg=name)
    with pytest.raises(InputError, match="a trained night classifier to start a night"):
        finetune(
            tmp_path / "a",
            train,
            num_classes=5,
            out_dir=tmp_path / "c",
            config=config.replace(context="night", night_crop=16),
        )
