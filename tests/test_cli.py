"""Tests of the ``partnd`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partnd import cli
from partnd.engine.config import PretrainConfig


@pytest.fixture
def signals(tmp_path: Path) -> Path:
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((16, 2, 80)).astype(np.float32))
    return path


def test_pretrain_end_to_end(tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    status = cli.main(
        [
            "pretrain",
            "--data", str(signals),
            "--out", str(out),
            "--preset", "test",
            "--set", "epochs=1",
            "--set", "scale_range=[0.5, 1.5]",
            "--patch-size", "20",
            "--num-pairs", "8",
            "--no-progress",
        ]
    )  # fmt: skip
    assert status == 0
    assert "encoder saved" in capsys.readouterr().out
    config = PretrainConfig.from_json(out / "config.json")
    assert (config.epochs, config.patch_size, config.num_pairs) == (1, 20, 8)
    assert config.scale_range == (0.5, 1.5) and config.progress is False
    assert config.encoder == "vit_test"  # from the preset
    assert (out / "encoder.pt").is_file()


def test_config_file_then_options(tmp_path: Path, signals: Path) -> None:
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"num_pairs": 5, "epochs": 3}))
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(signals), "--out", str(out), "--preset", "test"]
    argv += ["--config", str(config_path), "--epochs", "1", "--patch-size", "20"]
    assert cli.main(argv) == 0
    config = PretrainConfig.from_json(out / "config.json")
    assert (config.num_pairs, config.epochs, config.encoder) == (5, 1, "vit_test")


def test_finetune_end_to_end(tmp_path: Path, signals: Path) -> None:
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    out = tmp_path / "ft"
    argv = ["finetune", "--data", str(signals), "--labels", str(labels), "--num-classes", "2"]
    argv += ["--val-data", str(signals), "--val-labels", str(labels), "--class-names", "a,b"]
    argv += ["--out", str(out), "--preset", "test", "--patch-size", "20", "--epochs", "1"]
    assert cli.main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["per_class_f1"]) == {"a", "b"}


def test_help_lists_every_config_field(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["pretrain", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for name in PretrainConfig.field_names():
        assert "--" + name.replace("_", "-") in text, name
    assert "--no-progress" in text and "eeg_sleep" in text


def test_bad_input_exits_with_status_2(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["pretrain", "--data", str(signals), "--out", str(tmp_path / "r"), "--set", "nope=1"]
    assert cli.main(argv) == 2
    assert "unknown name(s) 'nope'" in capsys.readouterr().err
    argv = ["pretrain", "--data", str(tmp_path / "x.csv"), "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 2
    assert "expected an existing .npy file" in capsys.readouterr().err
    assert cli.main(["frobnicate"]) == 2


def test_non_finite_loss_exits_with_status_1_and_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    huge = tmp_path / "huge.npy"  # finite input whose activations overflow
    np.save(huge, np.full((8, 2, 80), 1e30, dtype=np.float32))
    argv = ["pretrain", "--data", str(huge), "--out", str(tmp_path / "r"), "--preset", "test"]
    assert cli.main([*argv, "--patch-size", "20", "--batch-size", "4"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("partnd pretrain: error: training stopped: non-finite loss")
    assert "Traceback" not in error


def test_subcommand_registry_is_lazy(capsys: pytest.CaptureFixture) -> None:
    calls: list[list[str]] = []
    cli.register_subcommand("echo-test", lambda argv: calls.append(argv) or 0, "test only")
    cli.register_subcommand("missing-test", "partnd_no_such_module:main", "not installed")
    try:
        assert cli.main(["echo-test", "--flag", "1"]) == 0
        assert calls == [["--flag", "1"]]
        assert cli.main(["missing-test"]) == 1
        assert "needs the module 'partnd_no_such_module'" in capsys.readouterr().err
        assert cli.main([]) == 2
        usage = capsys.readouterr().out
        assert "echo-test" in usage and "preprocess" in usage and "demo" in usage
    finally:
        del cli.SUBCOMMANDS["echo-test"], cli.SUBCOMMANDS["missing-test"]
    assert cli.SUBCOMMANDS["preprocess"].target == "partnd.preprocessing.physionet2018:main"
    assert cli.SUBCOMMANDS["demo"].target == "partnd.recipes.sleep_staging:demo"


@pytest.mark.slow
def test_console_entry_point_runs(tmp_path: Path, signals: Path) -> None:
    argv = ["pretrain", "--data", str(signals), "--out", str(tmp_path / "r"), "--preset", "test"]
    argv += ["--set", "epochs=1", "--patch-size", "20"]
    done = subprocess.run(
        [sys.executable, "-m", "partnd.cli", *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r" / "encoder.pt").is_file()


def write_sleep_store(path: Path) -> None:
    """A tiny sleep store: 2 channels at 10 Hz (300 samples per 30 s window), chunks of 8."""
    from partnd.datasets.store import create_store, write_record

    create_store(path, sfreq=10.0, channels=["C3", "C4"], window_seconds=30.0, metadata={})
    rng = np.random.default_rng(0)
    for record, subject in (("tr01", "s1"), ("tr02", "s2")):
        signal = rng.standard_normal((20, 2, 300)).astype(np.float32)
        stage = rng.integers(0, 5, 20).astype(np.int8)
        write_record(
            path,
            record,
            signal,
            stage,
            np.arange(20) * 30.0,
            attrs={"subject_id": subject, "split": "training"},
            chunk_windows=8,
        )


def copy_store(
    source: Path, path: Path, channels: list[str], order: list[int] | None = None
) -> None:
    """The windows of ``source`` under other channel names; ``order`` picks (and reorders) the
    source channels plus one extra noise channel (index 2)."""
    from partnd.datasets.store import SleepStore, create_store, write_record

    store = SleepStore(source)
    create_store(path, sfreq=10.0, channels=channels, window_seconds=30.0, metadata={})
    for record in store.record_ids():
        signal = store.read_windows(record, 0, store.n_windows(record))
        if order is not None:
            extra = np.random.default_rng(1).standard_normal(signal[:, :1].shape)
            signal = np.concatenate([signal, extra.astype(np.float32)], axis=1)[:, order]
        attrs = {"subject_id": record, "split": "training"}
        stages, starts = store.stages(record), store.start_times(record)
        write_record(path, record, signal, stages, starts, attrs=attrs, chunk_windows=8)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """:func:`write_sleep_store` written to ``tmp_path / "sleep.zarr"``."""
    path = tmp_path / "sleep.zarr"
    write_sleep_store(path)
    return path


def finetuned_on_store(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny store (:func:`write_sleep_store`) and a classifier fine-tuned on it (run dir)."""
    store, ft = tmp_path / "sleep.zarr", tmp_path / "ft"
    write_sleep_store(store)
    argv = ["finetune", "--data", str(store), "--out", str(ft), "--preset", "test"]
    assert cli.main([*argv, "--patch-size", "30", "--epochs", "1", "--batch-size", "8"]) == 0
    return store, ft


def finetuned_on_signals(tmp_path: Path, signals: Path) -> Path:
    """A two-class classifier fine-tuned on the ``signals`` array (run dir ``tmp_path/ft``)."""
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    argv = ["finetune", "--data", str(signals), "--labels", str(labels), "--num-classes", "2"]
    argv += ["--out", str(tmp_path / "ft"), "--preset", "test", "--patch-size", "20"]
    assert cli.main([*argv, "--epochs", "1"]) == 0
    return tmp_path / "ft"


def test_zarr_sleep_store_end_to_end(store: Path, tmp_path: Path) -> None:
    common = ["--preset", "test", "--patch-size", "30", "--epochs", "1", "--batch-size", "8"]
    pre = ["pretrain", "--data", str(store), "--out", str(tmp_path / "pre"), *common]
    assert cli.main(pre) == 0
    meta = json.loads((tmp_path / "pre" / "meta.json").read_text())
    assert meta["resolved"]["data"] == {"in_chans": 2, "spatial_shape": [300]}
    assert meta["resolved"]["steps_per_epoch"] == 5  # 40 windows / batch 8
    from partnd.models.serialization import load_encoder

    assert load_encoder(tmp_path / "pre").signal_info.normalization == "window"
    record = ["pretrain", "--data", str(store), "--out", str(tmp_path / "rec"), *common]
    assert cli.main([*record, "--normalize", "record", "--max-steps", "1"]) == 0
    assert load_encoder(tmp_path / "rec").signal_info.normalization == "record"
    ft = ["finetune", "--data", str(store), "--subjects", "s1", "--val-data", str(store)]
    ft += ["--val-subjects", "s2", "--init-weights", str(tmp_path / "pre")]
    ft += ["--out", str(tmp_path / "ft"), *common]
    assert cli.main(ft) == 0
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert metrics["n"] == 20  # subject s2's windows
    # class names come from the store; the classifier is saved and can be reloaded
    from partnd.models.serialization import load_classifier

    assert load_classifier(tmp_path / "ft").class_names == ["W", "N1", "N2", "N3", "REM"]
    report = tmp_path / "report.json"
    argv = ["evaluate", "--model", str(tmp_path / "ft"), "--data", str(store), "--subjects", "s2"]
    assert cli.main([*argv, "--out", str(report)]) == 0
    assert json.loads(report.read_text())["n"] == 20
    out = tmp_path / "hypnograms"
    argv = ["predict", "--model", str(tmp_path / "ft"), "--data", str(store), "--out", str(out)]
    assert cli.main([*argv, "--edf"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["tr01.csv", "tr01.edf", "tr02.csv", "tr02.edf"]
    rows = (out / "tr02.csv").read_text().splitlines()
    assert rows[0].startswith("onset,duration,description,stage,onset_s,p_W,p_N1")
    assert rows[2].split(",")[1] == "30.0" and rows[2].split(",")[4] == "30.0"
    assert cli.main(argv) == 2  # existing predictions are not overwritten silently


def test_pretrain_on_a_saved_split_excludes_the_test_subjects(tmp_path: Path) -> None:
    from partnd.datasets.splits import SubjectSplit, make_subject_split
    from partnd.datasets.store import SleepStore

    store = tmp_path / "any-name"  # a store directory is recognised by its content, not its name
    write_sleep_store(store)
    split = make_subject_split(SleepStore(store), n_test_subjects=1, finetune_sizes=(1,), seed=0)
    split.save(tmp_path / "split.json")
    argv = ["pretrain", "--data", str(store), "--split", str(tmp_path / "split.json")]
    argv += ["--out", str(tmp_path / "pre"), "--preset", "test", "--patch-size", "30"]
    assert cli.main([*argv, "--epochs", "1", "--batch-size", "4"]) == 0
    meta = json.loads((tmp_path / "pre" / "meta.json").read_text())
    assert meta["resolved"]["num_items"] == 20  # the one non-test subject's windows
    assert SubjectSplit.load(tmp_path / "split.json").pretrain == split.pretrain


def test_help_shows_the_presets_values(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli.main(["pretrain", "--preset", "eeg_sleep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 'vit_eeg_12m'" in text and "default 1000]" in text
    with pytest.raises(SystemExit):
        cli.main(["pretrain", "--help"])
    assert "default 100]" in " ".join(capsys.readouterr().out.split())  # the plain default epochs


def test_errors_name_the_options_not_the_python_arguments(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(signals), "--out", str(out), "--preset", "test"]
    argv += ["--patch-size", "20", "--epochs", "1"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        "partnd pretrain: error: --out: expected a new or empty directory (pass --overwrite to "
        "clear it, or --resume to continue the run in it)"
    )
    assert cli.main([*argv, "--resume", "--overwrite"]) == 2
    assert "--resume/--overwrite: expected at most one of --resume and --overwrite" in (
        capsys.readouterr().err
    )
    assert cli.main([*argv, "--overwrite", "--batch-size", "0"]) == 2
    assert "error: --batch-size: expected a number > 0" in capsys.readouterr().err
    argv = ["evaluate", "--model", str(tmp_path / "nope"), "--data", str(signals)]
    assert cli.main(argv) == 2
    assert "error: --model: expected a classifier.pt" in capsys.readouterr().err


def test_labels_must_be_integers_at_the_command_line_as_in_the_api(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    labels = tmp_path / "y.npy"
    argv = ["finetune", "--data", str(signals), "--labels", str(labels), "--num-classes", "2"]
    argv += ["--out", str(tmp_path / "ft"), "--preset", "test", "--patch-size", "20"]
    for values, message in [
        (np.arange(16) % 2 + 0.5, "--labels: expected integer class labels"),
        (np.ones(16), "--labels: expected integer class labels"),  # 1.0 is not a class index
        (np.zeros((16, 2), dtype=np.int64), "--labels: expected labels [N]"),
    ]:
        np.save(labels, values)
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    labels.write_text("0\n1\n")  # a text file named .npy
    assert cli.main(argv) == 2
    assert "--labels: expected a .npy array file written by numpy.save" in capsys.readouterr().err
    text = tmp_path / "x.npy"
    text.write_text("not an array")
    assert cli.main(["pretrain", "--data", str(text), "--out", str(tmp_path / "pre")]) == 2
    assert "--data: expected a .npy array file" in capsys.readouterr().err
    store = tmp_path / "sleep.zarr"
    write_sleep_store(store)
    for split in (tmp_path / "missing.json", text):  # no file, not JSON
        argv = ["pretrain", "--data", str(store), "--split", str(split), "--out", str(tmp_path)]
        assert cli.main(argv) == 2
        assert "error: --split: expected a readable split JSON file" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists() and not (tmp_path / "pre").exists()


def test_predict_epoch_seconds_must_be_positive(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    finetuned_on_signals(tmp_path, signals)
    out = tmp_path / "hypnograms"
    argv = ["predict", "--model", str(tmp_path / "ft"), "--data", str(signals), "--out", str(out)]
    for seconds in ("-30", "0", "nan", "inf"):
        with pytest.raises(SystemExit) as exited:
            cli.main([*argv, "--epoch-seconds", seconds])
        assert exited.value.code == 2
        assert "--epoch-seconds: expected a" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main([*argv, "--epoch-seconds", "20"]) == 0
    rows = (out / "predictions.csv").read_text().splitlines()
    assert [row.split(",")[4] for row in rows[1:4]] == ["0.0", "20.0", "40.0"]  # onset_s


def test_resume_on_other_records_is_refused_naming_the_options(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "pre"
    common = ["--data", str(store), "--out", str(run), "--preset", "test", "--patch-size", "30"]
    assert cli.main(["pretrain", *common, "--records", "tr01", "--epochs", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["pretrain", *common, "--records", "tr02", "--resume", "--epochs", "2"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"partnd pretrain: error: --data: expected the data the interrupted run in {run} was "
        "trained on when --resume, got other data (records: 1 left out (tr01); 1 added (tr02))"
    )
    assert "--overwrite to replace this one" in error
    assert cli.main(["pretrain", *common, "--records", "tr01", "--resume", "--epochs", "2"]) == 0


def test_resume_with_another_normalisation_is_refused(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "ft"
    common = ["finetune", "--data", str(store), "--out", str(run), "--preset", "test"]
    common += ["--patch-size", "30", "--batch-size", "8"]
    assert cli.main([*common, "--normalize", "window", "--epochs", "1"]) == 0
    capsys.readouterr()
    argv = [*common, "--resume", "--epochs", "2"]
    assert cli.main([*argv, "--normalize", "record"]) == 2  # the same records, read another way
    error = capsys.readouterr().err
    assert "error: --data: expected the data the interrupted run in " in error
    assert "got other data (normalization: window -> record)" in error
    meta = json.loads((run / "meta.json").read_text())
    del meta["data"]["train_dataset"]["normalization"]  # as recorded before the key existed
    (run / "meta.json").write_text(json.dumps(meta))
    assert cli.main([*argv, "--normalize", "window"]) == 0


def test_a_classifier_records_its_signal_and_refuses_other_channels(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import torch

    from partnd.models.serialization import load_classifier
    from partnd.signal_info import SignalInfo

    store, ft = finetuned_on_store(tmp_path)
    model = load_classifier(ft)
    assert model.signal_info == SignalInfo(2, (300,), ("C3", "C4"), 10.0, "window")
    copy_store(store, tmp_path / "other.zarr", ["Fp1", "Fp2"], [0, 1])
    copy_store(store, tmp_path / "reordered.zarr", ["O1", "C4", "C3"], [2, 1, 0])
    predict = ["predict", "--model", str(ft), "--out"]
    assert cli.main([*predict, str(tmp_path / "a"), "--data", str(tmp_path / "other.zarr")]) == 2
    error = capsys.readouterr().err
    assert "error: --data: expected the channels ['C3', 'C4'] (the model was trained on 2 " in error
    assert "got channels ['Fp1', 'Fp2'] (missing ['C3', 'C4'])" in error
    assert not (tmp_path / "a").exists()
    assert cli.main([*predict, str(tmp_path / "b"), "--data", str(store)]) == 0
    assert (
        cli.main([*predict, str(tmp_path / "c"), "--data", str(tmp_path / "reordered.zarr")]) == 0
    )
    for name in ("tr01.csv", "tr02.csv"):  # the model's channels, picked by name
        assert (tmp_path / "b" / name).read_text() == (tmp_path / "c" / name).read_text()
    payload = torch.load(ft / "classifier.pt", weights_only=False)
    del payload["signal"]  # as written before the signal was recorded
    torch.save(payload, tmp_path / "old.pt")
    assert load_classifier(tmp_path / "old.pt").signal_info == SignalInfo(2, (300,))


def test_evaluate_and_init_weights_refuse_other_channels(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    other = tmp_path / "other.zarr"  # the same windows, recorded from other electrodes
    copy_store(store, other, ["Fp1", "Fp2"])
    tiny = ["--preset", "test", "--patch-size", "30", "--epochs", "1", "--batch-size", "8"]
    pre, ft = tmp_path / "pre", tmp_path / "ft"
    assert cli.main(["pretrain", "--data", str(store), "--out", str(pre), *tiny]) == 0
    assert cli.main(["finetune", "--data", str(store), "--out", str(ft), *tiny]) == 0
    capsys.readouterr()
    new = tmp_path / "new"
    for argv in [
        ["evaluate", "--model", str(ft), "--data", str(other), "--out", str(new / "r.json")],
        ["finetune", "--data", str(other), "--init-weights", str(pre), "--out", str(new), *tiny],
        ["pretrain", "--data", str(other), "--init-weights", str(pre), "--out", str(new), *tiny],
    ]:
        assert cli.main(argv) == 2, argv
        error = capsys.readouterr().err
        assert "error: --data: expected the channels ['C3', 'C4'] (the model was trained on " in (
            error
        )
        assert "got channels ['Fp1', 'Fp2'] (missing ['C3', 'C4'])" in error
        assert not new.exists()


def test_predict_refuses_a_window_duration_that_is_not_positive(tmp_path: Path) -> None:
    import partnd

    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    x = np.random.default_rng(0).standard_normal((16, 2, 80)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = ["finetune", "--data", str(tmp_path / "x.npy"), "--labels", str(labels)]
    argv += ["--num-classes", "2", "--out", str(tmp_path / "ft"), "--preset", "test"]
    assert cli.main([*argv, "--patch-size", "20", "--epochs", "1"]) == 0
    model = partnd.load_classifier(tmp_path / "ft")
    for seconds in (-30.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(partnd.InputError, match=r"^epoch_seconds: expected a window duration"):
            partnd.predict(model, x, epoch_seconds=seconds)
    assert partnd.predict(model, x, epoch_seconds=20.0).window_onsets()[1] == 20.0


def test_a_corrupt_store_is_refused_with_a_message(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (store / "zarr.json").write_text("{ not json")
    assert cli.main(["pretrain", "--data", str(store), "--out", str(tmp_path / "r")]) == 2
    error = capsys.readouterr().err
    assert "error: --data: expected a zarr store whose zarr.json is JSON" in error
    assert "Traceback" not in error and not (tmp_path / "r").exists()


def test_a_record_array_with_corrupt_metadata_is_refused_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store, ft = finetuned_on_store(tmp_path)
    capsys.readouterr()
    for array in ("stage", "start_time", "signal"):
        metadata = store / "records" / "tr02" / array / "zarr.json"
        original = metadata.read_text()
        metadata.write_text("{ not json")
        out = tmp_path / f"predicted_{array}"
        assert (
            cli.main(["predict", "--model", str(ft), "--data", str(store), "--out", str(out)]) == 2
        )
        error = capsys.readouterr().err
        assert f"error: --data: expected a readable zarr array, got '{metadata.parent}'" in error
        assert "Traceback" not in error and not out.exists()
        metadata.write_text(original)


@pytest.mark.slow
def test_ctrl_c_saves_a_resumable_checkpoint_and_ends_with_one_line(
    tmp_path: Path, signals: Path
) -> None:
    import signal
    import time

    run = tmp_path / "run"
    argv = ["pretrain", "--data", str(signals), "--out", str(run), "--preset", "test"]
    argv += [
        "--patch-size",
        "20",
        "--epochs",
        "100000",
        "--batch-size",
        "4",
        "--log-every-steps",
        "1",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "partnd.cli", *argv], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, error = process.communicate(timeout=120)
    assert process.returncode == 130
    lines = error.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in error, error
    last = run / "checkpoints" / "last.pt"
    assert lines[0].startswith("partnd pretrain: interrupted by SIGINT after step ")
    assert lines[0].endswith(f"resumable checkpoint {last} (continue with --resume)")
    from partnd.engine.checkpoint import load_checkpoint

    step = load_checkpoint(last)["trainer"]["step"]
    assert f"after step {step};" in lines[0]
    resume = ["pretrain", "--data", str(signals), "--out", str(run), "--resume"]
    assert cli.main([*resume, "--max-steps", str(step + 2)]) == 0
    assert load_checkpoint(last)["trainer"]["step"] == step + 2


def test_options_that_would_be_ignored_are_refused_naming_them(
    store: Path, tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    ft = tmp_path / "ft"
    finetune = ["finetune", "--data", str(signals), "--labels", str(labels), "--num-classes", "2"]
    finetune += ["--preset", "test", "--patch-size", "20", "--epochs", "1"]
    assert cli.main([*finetune, "--out", str(ft)]) == 0
    capsys.readouterr()
    out = ["--out", str(tmp_path / "new")]
    predict = ["predict", "--model", str(ft), *out]
    for argv, message in [
        (
            [*predict, "--data", str(signals), "--records", "tr01"],
            f"--records: expected a sleep store as --data (they select a store's records), got "
            f"the array file {signals}",
        ),
        (
            [*predict, "--data", str(store), "--epoch-seconds", "20"],
            "--epoch-seconds: expected no --epoch-seconds with a sleep store as --data",
        ),
        (
            [*finetune, *out, "--subjects", "s1", "--val-records", "tr02"],
            "--subjects: expected a sleep store as --data",
        ),
        (
            [*finetune, *out, "--val-records", "tr02"],
            "--val-records: expected a sleep store as --val-data (they select a store's "
            "records), got no --val-data",
        ),
        (
            [*finetune, *out, "--val-labels", str(labels)],
            "--val-labels: expected labels of .npy data given as --val-data",
        ),
        (
            ["evaluate", "--model", str(ft), "--data", str(store), "--labels", str(labels)],
            "--labels: expected labels of .npy data given as --data (a sleep store's stages are "
            "its labels)",
        ),
        (
            ["finetune", "--data", str(store), *out, "--num-classes", "2"],
            "--num-classes: expected 5, the store's stages W, N1, N2, N3, REM (or --class-names "
            "naming as many classes), got 2",  # the names came from the store, not --class-names
        ),
        (
            [*finetune, *out, "--normalize", "record"],
            "--normalize: expected no normalisation for .npy data (arrays are used as given; it "
            "says how a sleep store's windows are normalised), got record for the array file",
        ),
        (
            ["pretrain", "--data", str(signals), *out, "--preset", "test", "--normalize", "record"],
            "--normalize: expected no normalisation for .npy data",
        ),
    ]:
        assert cli.main(argv) == 2, argv
        error = capsys.readouterr().err
        assert message in error and len(error.splitlines()) == 1, error
    (tmp_path / "reports").mkdir()
    argv = ["evaluate", "--model", str(ft), "--data", str(signals), "--labels", str(labels)]
    assert cli.main([*argv, "--out", str(tmp_path / "reports")]) == 2  # before evaluating
    assert "error: --out: expected a path for the JSON report (not a directory), got the " in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):  # predict reads no labels: the option does not exist
        cli.main([*predict, "--data", str(signals), "--labels", str(labels)])
    assert "unrecognized arguments: --labels" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_config_field_names_stay_field_names_in_messages(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["pretrain", "--data", str(signals), "--out", str(tmp_path / "r"), "--preset", "test"]
    assert cli.main([*argv, "--set", "batch_sise=4"]) == 2
    error = capsys.readouterr().err  # --set takes field names: list them as such
    assert "--set: expected PretrainConfig field names ('epochs', 'batch_size', 'lr'," in error
    assert "--batch-size" not in error and "unknown name(s) 'batch_sise'" in error
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"warmup_epoch": 1}))
    assert cli.main([*argv, "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert "--config: expected PretrainConfig field names (" in error
    assert "'warmup_epochs'" in error and "--warmup-epochs" not in error


def test_an_empty_selection_is_described_without_python_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from partnd.datasets.store import write_record

    store = tmp_path / "sleep.zarr"
    write_sleep_store(store)
    signal = np.random.default_rng(0).standard_normal((4, 2, 300)).astype(np.float32)
    unscored = np.full(4, -1, np.int8)
    attrs = {"subject_id": "s3", "split": "test"}
    write_record(store, "te01", signal, unscored, np.arange(4) * 30.0, attrs=attrs)
    argv = ["finetune", "--data", str(store), "--records", "te01", "--out", str(tmp_path / "f")]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert "error: --records/--subjects: expected at least one labelled window, got none " in error
    assert "labelled_only" not in error and not (tmp_path / "f").exists()


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_closed_standard_output_ends_quietly_instead_of_a_traceback(
    tmp_path: Path, signals: Path, unbuffered: str
) -> None:
    import os

    finetuned_on_signals(tmp_path, signals)
    argv = ["evaluate", "--model", str(tmp_path / "ft"), "--data", str(signals)]
    process = subprocess.Popen(
        [sys.executable, "-m", "partnd.cli", *argv, "--labels", str(tmp_path / "y.npy")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader went away, as `partnd evaluate ... | head -0`
    _, error = process.communicate(timeout=120)
    assert process.returncode == 141 and error == "", error


def test_a_message_embedding_a_library_report_stays_one_line(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    common = ["--data", str(signals), "--preset", "test", "--patch-size", "20", "--epochs", "1"]
    argv = ["finetune", *common, "--labels", str(labels), "--num-classes", "2"]
    assert cli.main([*argv, "--out", str(tmp_path / "ft")]) == 0
    capsys.readouterr()
    argv = [
        "pretrain",
        *common,
        "--init-weights",
        str(tmp_path / "ft"),
        "--out",
        str(tmp_path / "p"),
    ]
    assert cli.main(argv) == 2  # a classifier's encoder has a position embedding PART has not
    error = capsys.readouterr().err
    assert error.startswith("partnd pretrain: error: --init-weights: expected encoder weights")
    assert len(error.strip().splitlines()) == 1 and '"pos_embed"' in error  # a key, not an option
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    "context", [["--context", "5"], ["--context", "night", "--night-crop", "8"]]
)
def test_a_sequence_classifier_from_the_command_line(
    tmp_path: Path, context: list[str], capsys: pytest.CaptureFixture
) -> None:
    """finetune --context trains a sequence classifier (--context night a night classifier;
    record normalisation), evaluate and predict read whole nights of the store as the model was
    trained; an array is predicted as one night in its order (said), and evaluated or trained on
    not at all."""
    from partnd.models import NightClassifier, SequenceClassifier
    from partnd.models.serialization import load_classifier

    store = tmp_path / "sleep.zarr"
    write_sleep_store(store)
    ft = ["finetune", "--data", str(store), "--subjects", "s1", "--val-data", str(store)]
    ft += ["--val-subjects", "s2", "--out", str(tmp_path / "seq"), "--preset", "test"]
    ft += ["--patch-size", "30", "--epochs", "2", "--batch-size", "4", "--normalize", "record"]
    ft += [*context, "--temporal-encoder", "temporal_test"]
    assert cli.main(ft) == 0
    model = load_classifier(tmp_path / "seq")
    if context[1] == "night":
        assert isinstance(model, NightClassifier)
    else:
        assert isinstance(model, SequenceClassifier) and model.context == 5
    assert model.signal_info.normalization == "record"
    report = tmp_path / "report.json"
    argv = ["evaluate", "--model", str(tmp_path / "seq"), "--data", str(store)]
    assert cli.main([*argv, "--subjects", "s2", "--out", str(report)]) == 0
    assert json.loads(report.read_text())["n"] == 20
    out = tmp_path / "hypnograms"
    argv = ["predict", "--model", str(tmp_path / "seq"), "--data", str(store), "--out", str(out)]
    assert cli.main(argv) == 0
    rows = (out / "tr02.csv").read_text().splitlines()
    assert len(rows) == 1 + 20 and rows[0].startswith("onset,duration,description")
    from partnd.inference import predict_records

    written = np.loadtxt(out / "tr02.csv", delimiter=",", skiprows=1, usecols=range(5, 10))
    expected = predict_records(model, store, ["tr02"], device="cpu")["tr02"].probabilities
    np.testing.assert_allclose(written, expected, atol=1e-6)  # the CSV keeps 6 decimals
    capsys.readouterr()
    windows, labels = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(windows, np.random.default_rng(0).standard_normal((6, 2, 300)).astype(np.float32))
    np.save(labels, np.arange(6) % 5)
    argv = ["predict", "--model", str(tmp_path / "seq"), "--data", str(windows), "--out", str(out)]
    assert cli.main(argv) == 0  # an array is read as one night in its order: said, not silent
    assert "reads the 6 windows of " in capsys.readouterr().out
    npy = ["--data", str(windows), "--labels", str(labels)]
    sequence = ["--num-classes", "5", "--preset", "test", "--patch-size", "30", *context]
    for command in (
        ["evaluate", "--model", str(tmp_path / "seq"), *npy],
        ["finetune", *npy, *sequence, "--out", str(tmp_path / "new")],
    ):  # the data's form is the problem, not the labels
        assert cli.main(command) == 2, command
        error = capsys.readouterr().err
        assert ": error: --data: expected a sleep store or a dataset of its windows" in error
        assert "got memmap of shape (6, 2, 300)" in error and "--labels" not in error


def test_the_encoder_field_and_architecture_options_of_finetune(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    """--encoder / --set encoder=... choose a from-scratch preset (it was a TypeError: the API's
    first argument shares the name); architecture options pretrained weights would ignore, a
    patch size that does not tile the items and an unknown preset are refused naming them."""
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(16) % 2)
    argv = ["finetune", "--data", str(signals), "--labels", str(labels), "--num-classes", "2"]
    argv += ["--preset", "test", "--epochs", "1", "--batch-size", "8"]
    for extra, run in ((["--encoder", "vit_test_wide"], "a"), (["--set", "encoder=vit_mini"], "b")):
        assert cli.main([*argv, "--patch-size", "20", *extra, "--out", str(tmp_path / run)]) == 0
    assert json.loads((tmp_path / "a" / "config.json").read_text())["encoder"] == "vit_test_wide"
    assert json.loads((tmp_path / "b" / "config.json").read_text())["encoder"] == "vit_mini"
    pre = ["pretrain", "--data", str(signals), "--preset", "test", "--patch-size", "20"]
    assert cli.main([*pre, "--epochs", "1", "--out", str(tmp_path / "pre")]) == 0
    capsys.readouterr()
    new = ["--out", str(tmp_path / "new")]
    pretrained = [*argv, "--init-weights", str(tmp_path / "pre"), *new]
    for command, message in [
        ([*pretrained, "--patch-size", "20", "--encoder", "vit_test"], "--encoder: expected no "
         "architecture setting with pretrained weights (they bring their own encoder and patch "
         "size (20,)), got 'vit_test'"),
        ([*pretrained, "--patch-size", "40"], "--patch-size: expected no architecture setting"),
        ([*pretrained, "--set", 'encoder_overrides={"depth": 1}'], "--encoder-overrides: "),
        ([*argv, *new, "--patch-size", "30"], "--patch-size: expected a patch size that divides "
         "the items' spatial size (80,) (items are tiled on the grid of patches; (20,) sample(s) "
         "per dimension would never be seen), got 30"),
        ([*pre, *new, "--patch-size", "30"], "--patch-size: expected a patch size that divides"),
        ([*argv, *new, "--encoder", "vit_nope"], "--encoder: expected one of ['vit_base', "),
        ([*pre, *new, "--encoder", "vit_nope"], "--encoder: expected one of ['vit_base', "),
    ]:  # fmt: skip
        assert cli.main(command) == 2, command
        error = capsys.readouterr().err
        assert message in error and len(error.splitlines()) == 1, error
        assert not (tmp_path / "new").exists()


def test_evaluate_keeps_an_existing_report_and_init_weights_names_what_it_reads(
    tmp_path: Path, signals: Path, capsys: pytest.CaptureFixture
) -> None:
    """evaluate --out refuses an existing report unless --overwrite (as predict does); a missing
    --init-weights path is described as the files the option reads, not API types."""
    ft = finetuned_on_signals(tmp_path, signals)
    report = tmp_path / "report.json"
    report.write_text("earlier")
    argv = [
        "evaluate",
        "--model",
        str(ft),
        "--data",
        str(signals),
        "--labels",
        str(tmp_path / "y.npy"),
    ]
    assert cli.main([*argv, "--out", str(report)]) == 2
    assert "--out: expected a new path for the JSON report (or --overwrite), got the existing " in (
        capsys.readouterr().err
    )
    assert report.read_text() == "earlier"
    assert cli.main([*argv, "--out", str(report), "--overwrite"]) == 0
    assert json.loads(report.read_text())["n"] == 16
    capsys.readouterr()
    np.save(tmp_path / "y5.npy", np.arange(16) % 5)  # the classifier has 2 classes
    argv[-1] = str(tmp_path / "y5.npy")
    assert cli.main(argv) == 2  # its classes are fixed: no "raise --num-classes" here
    assert "--labels: expected class labels in [0, 2) (the classifier's classes), got labels " in (
        capsys.readouterr().err
    )
    finetune = ["finetune", "--data", str(signals), "--labels", str(tmp_path / "y.npy")]
    finetune += ["--num-classes", "2", "--preset", "test", "--patch-size", "20"]
    missing = tmp_path / "no_such_run"
    assert cli.main([*finetune, "--init-weights", str(missing), "--out", str(tmp_path / "n")]) == 2
    error = capsys.readouterr().err
    assert error == (
        "partnd finetune: error: --init-weights: expected an existing pretrain run directory, "
        f"encoder.pt or training checkpoint, got {missing} (no such file or directory)\n"
    )
