"""partnd.transfer and partnd transfer: pretrain on stores of two montages, fine-tune, test and
predict on a third; resumed without redoing a finished stage; bad input refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from partnd._validation import InputError
from partnd.cli.commands import main
from partnd.datasets.label_budget import LabelBudget, draw_labels, draw_named_labels
from partnd.datasets.splits import make_subject_split
from partnd.datasets.store import SleepStore
from partnd.models import NightClassifier
from partnd.models.serialization import load_classifier
from partnd.recipes.transfer import SUPERVISED, _draw_labels, transfer
from tests.staged_stores import write_staged_store

SPECTRAL = {"frontend": "spectral", "frontend_options": {"standardize": True}}
PRETRAIN = {  # PART across windows on 10 Hz windows of 300 samples, two steps
    "patch_size": 30,
    "num_patches": 10,
    "window_samples": 300,
    "segment_windows": 4,
    "num_windows": 3,
    "temporal_encoder": "temporal_test",
    "batch_size": 8,
    "max_steps": 2,
    "encoder_overrides": SPECTRAL,
}
FINETUNE = {"patch_size": 30, "batch_size": 16, "epochs": 1, "max_steps": 3, "lr": 2e-3}


@pytest.fixture
def stores(tmp_path: Path) -> tuple[list[Path], Path]:
    """Two pool stores of different montages and a target store of a third (4 subjects)."""
    pool = [
        write_staged_store(tmp_path / "pc18.zarr", ["F3-M2", "C4-M1", "O2-M1"], seed=0, records=2),
        write_staged_store(tmp_path / "edf.zarr", ["Fpz-Cz", "Pz-Oz"], seed=1, records=2),
    ]
    target = write_staged_store(tmp_path / "shhs.zarr", ["C4-A1", "C3-A2"], seed=2, records=4)
    return pool, target


def run(pool: list[Path], target: Path, out: Path, **options: object):
    settings: dict[str, object] = {
        "preset": "test",
        "pretrain_overrides": PRETRAIN,
        "finetune_overrides": FINETUNE,
        "device": "cpu",
        "progress": False,
    }
    return transfer(pool, target, out_dir=out, **{**settings, **options})  # type: ignore[arg-type]


def test_transfer_pretrains_on_two_montages_and_predicts_a_third(
    stores: tuple[list[Path], Path], tmp_path: Path
) -> None:
    pool, target = stores
    out = tmp_path / "run"
    result = run(pool, target, out, labels=1)
    config = json.loads((out / "config.json").read_text())
    assert config["pretrain_config"]["method"] == "part_windows"
    assert config["pretrain_config"]["channel_mode"] == "set"
    assert config["finetune_config"]["channel_mode"] == "set"
    union = json.loads((out / "pretrain" / "result.json").read_text())["channels"]
    assert union == ["F3-M2", "C4-M1", "O2-M1", "Fpz-Cz", "Pz-Oz"]  # both montages pretrained on
    assert result.model.signal_info.channel_mode == "set"
    assert result.model.signal_info.ch_names == (*union, "C4-A1", "C3-A2")
    assert len(result.labelled_subjects) == 1 and len(result.validation_subjects) == 1
    assert len(result.test_subjects) == 2  # half of the target's four subjects
    subjects = set(result.labelled_subjects) | set(result.validation_subjects)
    assert not subjects & set(result.test_subjects)
    # every record but the labelled and validation subjects' has a hypnogram
    assert len(result.predictions) == 2
    store = SleepStore(target)
    for record, path in result.predictions.items():
        assert path.is_file() and store.record_attrs(record)["subject_id"] in result.test_subjects
    assert result.n_test_windows == 96 and -1.0 <= result.kappa <= 1.0
    assert result.kappa_interval is not None
    low, high = result.kappa_interval
    assert low <= result.kappa <= high

    # resumed: nothing is redone, the result is read back
    stamp = (out / "pretrain" / "run" / "encoder.pt").stat().st_mtime_ns
    again = run(pool, target, out, labels=1, resume=True)
    assert again.kappa == result.kappa and again.predictions == result.predictions
    assert (out / "pretrain" / "run" / "encoder.pt").stat().st_mtime_ns == stamp


def test_a_resumed_transfer_skips_the_finished_pretraining(
    stores: tuple[list[Path], Path], tmp_path: Path
) -> None:
    pool, target = stores
    out = tmp_path / "run"
    first = run(pool, target, out, labels="w4")  # 4 windows of each stage
    drawn = json.loads((out / "config.json").read_text())["labelled_windows"]
    store = SleepStore(target)
    subjects = {store.record_attrs(record)["subject_id"] for record in drawn}
    assert subjects == set(first.labelled_subjects)
    assert not subjects & (set(first.test_subjects) | set(first.validation_subjects))
    stages = np.concatenate([store.stages(record)[windows] for record, windows in drawn.items()])
    assert np.bincount(stages, minlength=5).max() <= 4
    (out / "result.json").unlink()  # as if stopped after the pretraining and fine-tuning
    (out / "finetune" / "result.json").unlink()
    stamp = (out / "pretrain" / "run" / "encoder.pt").stat().st_mtime_ns
    history = (out / "pretrain" / "run" / "metrics.jsonl").read_text()
    result = run(pool, target, out, labels="w4", resume=True)
    assert (out / "pretrain" / "run" / "encoder.pt").stat().st_mtime_ns == stamp
    assert (out / "pretrain" / "run" / "metrics.jsonl").read_text() == history
    assert (out / "result.json").is_file() and np.isfinite(result.kappa)
    with pytest.raises(InputError, match=r"resume: expected the arguments of the run .*labels"):
        run(pool, target, out, labels="w2", resume=True)
    with pytest.raises(InputError, match="out_dir: expected a new or empty directory"):
        run(pool, target, out, labels="w4")


def draw(target: Path, labels: int | str = 1, seed: int = 0, **named: list[str] | None):
    """The one command's split and draw of ``target`` (1 validation subject)."""
    subjects = {"labelled_subjects": None, "test_subjects": None, **named}
    budget = LabelBudget.parse(labels)
    return _draw_labels(target, labels=budget, validation_subjects=1, seed=seed, **subjects)


def test_the_one_command_draws_its_labels_as_the_studies_do(tmp_path: Path) -> None:
    """Every budget form, drawn by draw_labels on the target's split: the same draw as a
    sample-efficiency study's for that split, seed and budget."""
    target = write_staged_store(tmp_path / "t.zarr", ["C4-A1"], seed=2, records=12, nights=2)
    for seed in (0, 1):
        split = make_subject_split(target, n_test_subjects=0.5, finetune_sizes=(1,), seed=seed)
        for budget in (1, 2, "1n", "3n", "w4"):
            ours, drawn = draw(target, budget, seed)
            assert ours == split  # half of the six subjects tested
            studied = draw_labels(split, target, budget, seed, n_validation=1)
            assert drawn.to_dict() == studied.to_dict()
            assert not (set(drawn.subjects) | set(drawn.validation)) & set(split.test)
            assert not set(drawn.subjects) & set(drawn.validation)
    _, nights = draw(target, "3n", 0)
    assert nights.nights is not None and len(nights.nights) == 3
    store = SleepStore(target)
    for record, windows in nights.nights.items():  # whole nights: every labelled window
        np.testing.assert_array_equal(windows, np.flatnonzero(store.stages(record) >= 0))
    # named test subjects: held out as given, never labelled or validation
    for budget in (1, "1n", "3n", "w4"):
        split, drawn = draw(target, budget, test_subjects=["s2-4", "s2-1"])
        assert split.test == ("s2-1", "s2-4")
        assert not ({"s2-1", "s2-4"} & (set(drawn.subjects) | set(drawn.validation)))
        named = make_subject_split(target, test_subjects=["s2-1", "s2-4"], finetune_sizes=(1,))
        assert drawn.to_dict() == draw_labels(named, target, budget, 0, n_validation=1).to_dict()
    # named labelled subjects: their validation subject drawn as a subject budget's
    split, drawn = draw(target, labelled_subjects=["s2-5"], test_subjects=["s2-0"])
    assert drawn == draw_named_labels(split, ["s2-5"], 0, n_validation=1)
    assert drawn.subjects == ("s2-5",) and drawn.validation[0] not in {"s2-0", "s2-5"}
    split, drawn = draw(target, labelled_subjects=["s2-5", "s2-2"])  # tests half of the others
    assert len(split.test) == 2 and not {"s2-5", "s2-2"} & set(split.test)
    assert drawn.subjects == ("s2-2", "s2-5") and len(drawn.validation) == 1


def test_transfer_fine_tunes_on_one_labelled_night(tmp_path: Path) -> None:
    pool = [write_staged_store(tmp_path / "p.zarr", ["F3-M2", "O2-M1"], seed=0, records=2)]
    target = write_staged_store(tmp_path / "t.zarr", ["C4-A1"], seed=2, records=8, nights=2)
    out = tmp_path / "run"
    result = run(pool, target, out, labels="1n", validation_subjects=0)
    config = json.loads((out / "config.json").read_text())
    assert config["labels"] == "1n" and config["labelled_windows"] is None
    (night,) = config["labelled_nights"]
    store = SleepStore(target)
    assert result.labelled_subjects == (store.record_attrs(night)["subject_id"],)
    assert result.validation_subjects == () and len(result.test_subjects) == 2
    # the labelled subject's other night is neither tested nor predicted
    assert len(result.predictions) == 6 and result.n_test_windows == 4 * 48
    assert -1.0 <= result.kappa <= 1.0


def test_transfer_refuses_bad_input_by_name(
    stores: tuple[list[Path], Path], tmp_path: Path
) -> None:
    pool, target = stores
    out = tmp_path / "refused"
    with pytest.raises(InputError, match=r"pool: expected stores without the target's test"):
        run([*pool, target], target, out, test_subjects=["s2-0", "s2-1"])
    with pytest.raises(InputError, match=r"test_subjects: expected subjects with labelled .*'s9'"):
        run(pool, target, out, test_subjects=["s9"])
    with pytest.raises(InputError, match=r"labelled_subjects: expected subjects with .*'x'"):
        run(pool, target, out, labelled_subjects=["x"])
    with pytest.raises(InputError, match=r"labels: expected at most 2 labelled subjects"):
        run(pool, target, out, labels=4)
    with pytest.raises(InputError, match="labelled_subjects: expected subjects that are not test"):
        run(pool, target, out, labelled_subjects=["s2-0"], test_subjects=["s2-0", "s2-1"])
    with pytest.raises(InputError, match="labels: expected no label budget when labelled_subj"):
        run(pool, target, out, labels=1, labelled_subjects=["s2-0"])
    with pytest.raises(InputError, match=r"labels: expected at most 1 labelled nights"):
        run(pool, target, out, labels="2n")  # 4 one-night subjects: 2 tested, 1 validates
    with pytest.raises(InputError, match=r"labels: expected a number of labelled subjects .*1n"):
        run(pool, target, out, labels="2x")
    with pytest.raises(InputError, match="test_subjects: expected between 1 and 3 of the 4"):
        run(pool, target, out, test_subjects=["s2-0", "s2-1", "s2-2", "s2-3"])
    with pytest.raises(InputError, match="test_subjects: expected target subjects left to test"):
        run(pool, target, out, labelled_subjects=["s2-0", "s2-1", "s2-2", "s2-3"])
    with pytest.raises(InputError, match="pretrain_overrides: expected channel_mode 'set'"):
        run(pool, target, out, pretrain_overrides={**PRETRAIN, "channel_mode": "fixed"})
    with pytest.raises(InputError, match="target: expected sleep store directories"):
        run(pool, tmp_path / "nowhere.zarr", out)
    assert not out.exists()  # nothing written for refused input


def test_the_transfer_command_trains_a_voting_night_classifier_and_refuses_in_one_line(
    stores: tuple[list[Path], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, target = stores
    base = ["transfer", "--pool", ",".join(map(str, pool)), "--target", str(target)]
    base += ["--preset", "test", "--device", "cpu", "--no-progress"]
    base += [f"--pretrain-set={key}={json.dumps(value)}" for key, value in PRETRAIN.items()]
    base += [f"--finetune-set={key}={json.dumps(value)}" for key, value in FINETUNE.items()]
    out = tmp_path / "cli"
    night = ["--finetune-set", 'context="night"', "--finetune-set", "night_crop=16"]
    options = ["--labelled-subjects", "s2-3", "--edf", "--vote", "subsets"]
    assert main([*base, *night, "--out", str(out), *options]) == 0
    printed = capsys.readouterr().out
    assert "test kappa" in printed and str(out / "predictions") in printed
    result = json.loads((out / "result.json").read_text())
    model = load_classifier(out / "finetune" / "run")
    assert isinstance(model, NightClassifier) and model.signal_info.channel_mode == "set"
    assert result["labelled_subjects"] == ["s2-3"] and "s2-3" not in result["test_subjects"]
    record = next(iter(result["predictions"]))
    assert (out / "predictions" / f"{record}.edf").is_file()
    for labels, what in (("9", "2 labelled subjects"), ("9n", "1 labelled nights")):
        assert main([*base, "--out", str(tmp_path / "bad"), "--labels", labels]) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"partnd transfer: error: --labels: expected at most {what}")
        assert "\n" not in error


NIGHT = {**FINETUNE, "context": "night", "night_crop": 16, "temporal_encoder": "temporal_test"}


def test_supervised_transfer_trains_on_the_pools_labels_then_fine_tunes_the_whole_classifier(
    stores: tuple[list[Path], Path], tmp_path: Path
) -> None:
    pool, target = stores
    out = tmp_path / "run"
    options = {"method": SUPERVISED, "pretrain_overrides": None, "labels": 1}
    result = run(pool, target, out, finetune_overrides={**NIGHT, "max_steps": 6}, **options)
    config = json.loads((out / "config.json").read_text())
    assert config["method"] == SUPERVISED and config["pretrain_config"] is None
    assert not config["source_config"]["evaluate_start"]  # the pool classifier starts fresh
    assert config["finetune_config"]["evaluate_start"]  # the target's may keep it
    # the pool classifier: every pool store's labelled nights but one held-out subject each
    source = json.loads((out / "pretrain" / "result.json").read_text())
    assert [len(records) for records in source["validation_records"].values()] == [1, 1]
    assert list(source["validation_records"]) == [str(path) for path in pool]
    trained = load_classifier(out / "pretrain" / "run")
    assert isinstance(trained, NightClassifier)
    assert trained.signal_info.ch_names == ("F3-M2", "C4-M1", "O2-M1", "Fpz-Cz", "Pz-Oz")
    # the target's fine-tuning started from it whole, and was evaluated at step 0 first
    history = [
        json.loads(line)
        for line in (out / "finetune" / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    first = next(record for record in history if record["phase"] == "val")
    assert (first["epoch"], first["step"]) == (-1, 0)
    assert (
        isinstance(result.model, NightClassifier)
        and result.pretrain_dir == out / "pretrain" / "run"
    )
    assert result.model.signal_info.ch_names[-2:] == ("C4-A1", "C3-A2")
    assert np.isfinite(result.kappa) and len(result.predictions) == 2
    # resumed: nothing is redone
    stamp = (out / "pretrain" / "run" / "classifier.pt").stat().st_mtime_ns
    again = run(
        pool, target, out, finetune_overrides={**NIGHT, "max_steps": 6}, resume=True, **options
    )
    assert again.kappa == result.kappa
    assert (out / "pretrain" / "run" / "classifier.pt").stat().st_mtime_ns == stamp


def test_supervised_transfer_refuses_what_it_cannot_train_on(
    stores: tuple[list[Path], Path], tmp_path: Path
) -> None:
    pool, target = stores
    out = tmp_path / "refused"
    options = {"method": SUPERVISED, "finetune_overrides": NIGHT}
    with pytest.raises(InputError, match="pretrain_overrides: expected none with method='superv"):
        run(pool, target, out, **options)
    with pytest.raises(InputError, match=r"pool: expected stores with labelled nights of more"):
        run(pool, target, out, pretrain_overrides=None, validation_subjects=2, **options)
    other = write_staged_store(tmp_path / "other.zarr", ["C3-M2"], seed=5, records=2)
    zarr.open_group(str(other), mode="r+").attrs["stage_names"] = ["Wake", "NREM", "REM"]
    with pytest.raises(InputError, match=r"pool: expected stores scored in the target's stages"):
        run([other], target, out, pretrain_overrides=None, **options)
    assert not out.exists()  # nothing written for refused input
