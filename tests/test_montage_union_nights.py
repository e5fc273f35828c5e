"""Sequence and night classifiers on stores of different montages: MontageUnion of sequence and
night datasets (items and whole nights laid out by channel name), fine-tuning and evaluation on a
list of stores in set mode, the fixed-mode refusal, and predictions that keep their store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Subset

from partnd._validation import InputError
from partnd.datasets import MontageUnion
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.engine.config import FinetuneConfig
from tests.staged_stores import write_staged_store

pytestmark = pytest.mark.usefixtures("one_thread")

THREE = ["F3-M2", "C4-M1", "O2-M1"]
TWO = ["O2-M1", "Fpz-Cz"]
UNION = ["F3-M2", "C4-M1", "O2-M1", "Fpz-Cz"]
SPECTRAL = {"frontend": "spectral", "frontend_options": {"standardize": True}}


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """A three-channel store and a two-channel one (one shared derivation, O2-M1), 2 records of
    48 windows of 300 samples at 10 Hz each; both name their records r0 and r1."""
    return (
        write_staged_store(tmp_path / "three.zarr", THREE, records=2),
        write_staged_store(tmp_path / "two.zarr", TWO, seed=1, records=2),
    )


def placed(windows: torch.Tensor, names: list[str]) -> torch.Tensor:
    """``[..., C_k, T]`` windows of channels ``names`` placed by name on :data:`UNION`."""
    out = torch.full((*windows.shape[:-2], len(UNION), windows.shape[-1]), float("nan"))
    for position, name in enumerate(names):
        out[..., UNION.index(name), :] = windows[..., position, :]
    return out


@pytest.mark.parametrize("kind", [SleepSequenceDataset, SleepNightDataset])
def test_sequence_and_night_items_are_each_parts_with_channels_placed_by_name(stores, kind) -> None:
    three, two = stores
    parts = [kind(path, context=5, stride=3, progress=False) for path in (three, two)]
    union = MontageUnion(parts)
    assert union.kind == ("night" if kind is SleepNightDataset else "sequence")
    assert union.ch_names == UNION and union.context == 5 and union.window_seconds == 30.0
    assert len(union) == len(parts[0]) + len(parts[1])
    assert union.records == ("r0", "r1", "r0", "r1")
    rows = [0, len(parts[0]) - 1, len(parts[0]), len(union) - 1]
    batch = union.__getitems__(rows)
    for row, item in zip(rows, batch, strict=True):
        part, inner = union.part_of(row)
        own = parts[part][inner]
        names = [THREE, TWO][part]
        assert item[0].shape == (5, 4, 300)
        torch.testing.assert_close(item[0], placed(own[0], names), equal_nan=True)
        torch.testing.assert_close(union[row][0], item[0], equal_nan=True)
        for got, expected in zip(item[1:], own[1:], strict=True):  # labels, valid[, time]
            assert torch.equal(got, expected)
        assert len(item) == (4 if kind is SleepNightDataset else 3)
    # a window of the two-channel store: its O2-M1 and Fpz-Cz, NaN in F3-M2 and C4-M1
    x = union[len(parts[0])][0]
    assert torch.isnan(x[:, :2]).all() and torch.equal(x[:, 2:], parts[1][0][0])
    assert np.array_equal(union.window_labels(), np.concatenate([p.window_labels() for p in parts]))
    assert union.stride == [3, 3] and len(union.chunk_ids) == len(union)


def test_whole_nights_are_laid_out_per_part_with_their_store_and_time(stores) -> None:
    three, two = stores
    parts = [SleepNightDataset(path, context=4, progress=False) for path in (three, two)]
    nights = list(MontageUnion(parts).nights())
    assert [(night.store, night.record) for night in nights] == [
        (str(three), "r0"),
        (str(three), "r1"),
        (str(two), "r0"),
        (str(two), "r1"),
    ]
    own = next(iter(parts[1].nights()))
    night = nights[2]
    assert night.windows.shape == (48, 4, 300) and night.first == 0
    torch.testing.assert_close(night.windows, placed(own.windows, TWO), equal_nan=True)
    assert torch.equal(night.labels, own.labels)
    assert np.array_equal(night.start_times, np.arange(48) * 30.0)
    # the time of night of a crop is its own part's
    item = MontageUnion(parts)[len(parts[0])]
    assert torch.equal(item[3], parts[1].record_time("r0")[:4])


def test_parts_of_different_kinds_or_contexts_are_refused(stores) -> None:
    three, two = stores
    sequences = SleepSequenceDataset(three, context=5, progress=False)
    with pytest.raises(InputError, match=r"datasets: expected all window datasets or all"):
        MontageUnion([sequences, SleepNightDataset(two, context=5, progress=False)])
    with pytest.raises(InputError, match=r"windows per sequence \(context\)"):
        MontageUnion([sequences, SleepSequenceDataset(two, context=4, progress=False)])
    with pytest.raises(InputError, match=r"datasets\[1\]: expected a SleepSequenceDataset"):
        MontageUnion([sequences, Subset(SleepSequenceDataset(two, context=5, progress=False), [0])])
    with pytest.raises(InputError, match=r"datasets: expected sequence or night datasets"):
        from partnd.datasets import SleepWindowDataset

        MontageUnion([SleepWindowDataset(three)]).window_labels()


def context_config(context: int | str, **overrides: object) -> FinetuneConfig:
    values: dict[str, object] = {
        "patch_size": 30,
        "batch_size": 4,
        "max_steps": 4,
        "encoder_overrides": SPECTRAL,
        "temporal_encoder": "temporal_test",
        "context": context,
        **({"night_crop": 16} if context == "night" else {}),
    }
    return FinetuneConfig.preset("test", **{**values, **overrides})


@pytest.mark.parametrize("context", [5, "night"])
def test_a_set_context_classifier_trains_on_two_montages_and_evaluates_a_third(
    stores, tmp_path: Path, context
) -> None:
    from partnd.finetuning.training import evaluate, finetune
    from partnd.models import NightClassifier, SequenceClassifier

    three, two = stores
    third = write_staged_store(tmp_path / "third.zarr", ["Pz-Oz", "C4-M1"], seed=2, records=1)
    val = write_staged_store(tmp_path / "val.zarr", ["Fpz-Cz", "F3-M2"], seed=3, records=1)
    result = finetune(
        None,
        [three, two],
        val_dataset=val,  # a store of another montage: read on the training layout
        num_classes=5,
        out_dir=tmp_path / f"run-{context}",
        config=context_config(context, channel_mode="set"),
    )
    model = result.model
    kind = NightClassifier if context == "night" else SequenceClassifier
    assert isinstance(model, kind) and model.signal_info.channel_mode == "set"
    assert model.signal_info.ch_names == tuple(UNION)
    losses = [r["loss"] for r in result.history if r.get("phase") == "train"]
    assert losses and all(np.isfinite(losses))
    assert result.best_metrics["n"] == 48  # the validation store's windows
    report = evaluate(model, [third], device="cpu")
    assert report.n == 48 and np.isfinite(report.loss)
    assert model.encoder.window.architecture["frontend_options"]["channels"] == ["Pz-Oz", "C4-M1"]
    both = evaluate(model, [third, two], device="cpu")  # stores' nights scored together
    assert both.n == 48 + 2 * 48


def test_a_fixed_context_classifier_refuses_stores_of_different_montages(
    stores, tmp_path: Path
) -> None:
    from partnd.finetuning.training import evaluate, finetune

    three, two = stores
    with pytest.raises(
        InputError,
        match=r"train_dataset: expected datasets holding every channel of \['F3-M2', 'C4-M1', "
        r"'O2-M1', 'Fpz-Cz'\] for a model of fixed channels, got train_dataset\[0\] "
        r"\(three.zarr\) lacking \['Fpz-Cz'\]; train_dataset\[1\] \(two.zarr\) lacking "
        r"\['F3-M2', 'C4-M1'\] \(channel_mode='set'",
    ):
        finetune(
            None, [three, two], num_classes=5, out_dir=tmp_path / "f", config=context_config(5)
        )
    # a fixed classifier reads stores holding its channels (in any order), and refuses others
    narrow = write_staged_store(tmp_path / "narrow.zarr", ["O2-M1", "C4-M1"], seed=3, records=1)
    model = finetune(
        None,
        narrow,
        num_classes=5,
        out_dir=tmp_path / "fixed",
        config=context_config("night", max_steps=1),
    ).model
    assert model.signal_info.channel_mode == "fixed"
    assert evaluate(model, [three, narrow], device="cpu").n == 3 * 48
    with pytest.raises(
        InputError,
        match=r"dataset: expected datasets holding every channel of \['O2-M1', 'C4-M1'\] for a "
        r"model of fixed channels, got dataset\[1\] \(two.zarr\) lacking \['C4-M1'\]",
    ):
        evaluate(model, [three, two], device="cpu")


def test_predict_records_keeps_each_stores_records_apart(stores, tmp_path: Path) -> None:
    from partnd.finetuning.training import finetune
    from partnd.inference import predict_records

    three, two = stores

    def nights(crop: int, record: str) -> list[SleepNightDataset]:
        return [
            SleepNightDataset(path, context=crop, records=[record], progress=False)
            for path in (three, two)
        ]

    config = context_config("night", channel_mode="set", max_steps=2)
    with pytest.raises(InputError, match=r"val_dataset: expected windows other than those"):
        finetune(
            None,
            nights(16, "r0"),
            val_dataset=nights(1, "r0"),
            num_classes=5,
            out_dir=tmp_path / "leak",
            config=config,
        )
    result = finetune(  # each source's own held-out nights validate, as a transfer study's
        None,
        nights(16, "r0"),
        val_dataset=nights(1, "r1"),
        num_classes=5,
        out_dir=tmp_path / "run",
        config=config,
    )
    assert result.best_metrics["n"] == 2 * 48
    model = result.model
    predictions = predict_records(model, [three, str(two)], device="cpu")
    assert list(predictions) == [str(three), str(two)]
    assert all(list(by_record) == ["r0", "r1"] for by_record in predictions.values())
    alone = predict_records(model, two, device="cpu")
    for record in ("r0", "r1"):  # the same record ids, other stores' windows
        np.testing.assert_allclose(
            predictions[str(two)][record].probabilities, alone[record].probabilities, atol=1e-6
        )
        assert len(predictions[str(three)][record].labels) == 48
        assert not np.allclose(
            predictions[str(three)][record].probabilities,
            predictions[str(two)][record].probabilities,
        )
    with pytest.raises(InputError, match=r"records: expected None with several stores"):
        predict_records(model, [three, two], ["r0"], device="cpu")
    with pytest.raises(InputError, match=r"store: expected distinct sleep stores"):
        predict_records(model, [three, three], device="cpu")


def test_the_command_line_evaluates_and_predicts_several_stores(
    stores, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import json

    import pandas as pd

    from partnd import cli
    from partnd.finetuning.training import finetune

    three, two = stores
    run = tmp_path / "run"
    finetune(
        None,
        [three, two],
        num_classes=5,
        out_dir=run,
        config=context_config(5, channel_mode="set", max_steps=2),
    )
    report = tmp_path / "report.json"
    evaluate = ["evaluate", "--model", str(run), "--data", str(three), str(two)]
    assert cli.main([*evaluate, "--out", str(report)]) == 0
    assert json.loads(report.read_text())["n"] == 4 * 48
    out = tmp_path / "hypnograms"
    predict = ["predict", "--model", str(run), "--data", str(three), str(two), "--out", str(out)]
    assert cli.main(predict) == 0
    written = sorted(str(path.relative_to(out)) for path in out.rglob("*.csv"))
    assert written == ["three/r0.csv", "three/r1.csv", "two/r0.csv", "two/r1.csv"]
    first, second = (pd.read_csv(out / name / "r0.csv") for name in ("three", "two"))
    assert len(first) == len(second) == 48 and not first.equals(second)
    capsys.readouterr()
    assert cli.main(predict) == 2  # earlier predictions are kept unless --overwrite
    assert "--out: expected a directory without earlier predictions" in capsys.readouterr().err
    twin = write_staged_store(tmp_path / "twin" / "three.zarr", TWO, seed=4, records=1)
    assert cli.main([*predict[:-4], str(three), str(twin), "--out", str(tmp_path / "x")]) == 2
    assert "--data: expected stores of distinct names" in capsys.readouterr().err
    selected = [*predict, "--overwrite", "--records", "r0"]
    assert cli.main(selected) == 2
    assert "--records: expected one sleep store as --data" in capsys.readouterr().err
