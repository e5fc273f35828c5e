"""End-to-end tests of the PC18 reader and the ``partnd.preprocessing.physionet2018`` command.

Tiny records are written in the challenge layout with :mod:`partnd.cohort.pc18_format`: EEG
channels are pure sinusoids (known µV values at every instant), stages change every 30 s after an
odd-length unscored prefix, so the stored values, labels and window start times can be predicted.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from partnd import cli
from partnd._validation import InputError
from partnd.cohort import pc18_cohort, pc18_format
from partnd.cohort.hypnogram import hypnogram_from_string
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.datasets.store import SleepStore
from partnd.preprocessing import physionet2018
from partnd.preprocessing.errors import (
    ALL_UNDEFINED,
    FLAT_CHANNEL,
    LABEL_LENGTH_MISMATCH,
    MISSING_CHANNEL,
    MISSING_FILE,
    NON_FINITE,
    UNREADABLE_HEADER,
    UNREADABLE_SIGNAL,
    RecordError,
)
from partnd.preprocessing.manifest import Manifest
from partnd.preprocessing.pc18_reader import (
    PC18_EEG_CHANNELS,
    PC18Record,
    find_records,
    read_eeg,
    read_sample_stages,
)

FS = 200
EPOCH = 30 * FS
PREFIX = 1001
FREQUENCIES = np.array([2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
AMPLITUDES = np.array([40.0, 60.0, 80.0, 100.0, 120.0, 140.0])
# Epoch stages after the prefix; "mix" puts N3 into the last 100 samples of an N2 epoch.
EPOCHS = ("W", "W", "N1", "N2", "mix", "N3", "U", "R", "R", "N2", "N3", "W")
STAGE_CODE = {"W": 0, "N1": 1, "N2": 2, "N3": 3, "R": 4, "U": -1, "mix": 2}
SECONDS = (PREFIX + len(EPOCHS) * EPOCH + 2000) / FS


def _eeg_uv(n_samples: int) -> np.ndarray:
    """``[6, n]`` µV sinusoids of the six EEG columns (in file column order)."""
    time = np.arange(n_samples) / FS
    return AMPLITUDES[:, None] * np.sin(2 * np.pi * FREQUENCIES[:, None] * time[None, :])


def _sample_stages(n_samples: int) -> np.ndarray:
    stages = np.full(n_samples, -1, dtype=np.int8)
    for index, name in enumerate(EPOCHS):
        start = PREFIX + index * EPOCH
        stages[start : start + EPOCH] = STAGE_CODE[name]
        if name == "mix":
            stages[start + EPOCH - 100 : start + EPOCH] = 3
    return stages


def write_record(
    root: Path, split: str, record_id: str, *, seconds: float = SECONDS, break_as: str | None = None
) -> Path:
    """Write one record in the challenge layout, optionally broken in one way."""
    record_dir = root / split / record_id
    record_dir.mkdir(parents=True)
    n_samples = round(seconds * FS)
    time = np.arange(n_samples) / FS
    physical = np.zeros((13, n_samples))
    physical[:6] = _eeg_uv(n_samples)
    physical[6:11] = 30.0 * np.sin(2 * np.pi * 1.0 * time)
    physical[11] = 96.0
    physical[12] = 0.5 * np.sin(2 * np.pi * 1.2 * time)
    digital, _ = pc18_format.physical_to_digital(physical)
    if break_as == "nan":
        digital[2, 5000] = -32768
    if break_as == "flat":
        digital[3] = 7
    pc18_format.write_signal_mat(record_dir / f"{record_id}.mat", digital)
    header = pc18_format.write_header(record_dir, record_id, digital)
    if break_as == "missing_channel":
        header.write_text(header.read_text().replace(" O1-M2\n", " O1-XX\n"))
    if break_as == "unreadable_header":
        header.write_text("this is not a header\n")
    if break_as == "truncated":
        mat = record_dir / f"{record_id}.mat"
        mat.write_bytes(mat.read_bytes()[: mat.stat().st_size // 2])
    if split == "training" and break_as != "missing_labels":
        stages = _sample_stages(n_samples)
        if break_as == "all_undefined":
            stages[:] = -1
        if break_as == "label_length":
            stages = stages[:-10]
        pc18_format.write_arousal_mat(
            record_dir / f"{record_id}-arousal.mat", stages, np.zeros(len(stages), dtype=np.int8)
        )
    return record_dir


def _swap_header_names(record_dir: Path, first: str, second: str) -> None:
    header = record_dir / f"{record_dir.name}.hea"
    text = header.read_text().replace(f" {first}\n", " @\n").replace(f" {second}\n", f" {first}\n")
    header.write_text(text.replace(" @\n", f" {second}\n"))


def _expected_windows() -> tuple[list[int], list[int]]:
    """Kept window starts (source samples) and stage codes for the labelled test record."""
    starts, stages = [], []
    for index, name in enumerate(EPOCHS):
        if name not in ("U", "mix"):
            starts.append(PREFIX + index * EPOCH)
            stages.append(STAGE_CODE[name])
    return starts, stages


def _run(src: Path, out: Path, *extra: str) -> int:
    return physionet2018.main(["--src", str(src), "--out", str(out), "--no-progress", *extra])


def _assert_same_store(first: Path, second: Path) -> None:
    store_a, store_b = SleepStore(first), SleepStore(second)
    assert store_a.record_ids() == store_b.record_ids()
    for record_id in store_a.record_ids():
        signal_a = store_a.signal_array(record_id)[:]
        signal_b = store_b.signal_array(record_id)[:]
        assert signal_a.dtype == signal_b.dtype
        assert signal_a.tobytes() == signal_b.tobytes()
        np.testing.assert_array_equal(store_a.stages(record_id), store_b.stages(record_id))
        np.testing.assert_array_equal(
            store_a.start_times(record_id), store_b.start_times(record_id)
        )
        assert store_a.record_attrs(record_id) == store_b.record_attrs(record_id)


@pytest.fixture
def cohort(tmp_path: Path) -> Path:
    src = tmp_path / "pc18"
    write_record(src, "training", "tr01-0001")
    write_record(src, "training", "tr01-0002", seconds=SECONDS + 60)
    write_record(src, "test", "te01-0001", seconds=200.0)
    return src


def test_find_records_lists_both_splits(cohort):
    (cohort / "training" / "notes").mkdir()
    records = find_records(cohort)
    assert [(r.record_id, r.split) for r in records] == [
        ("tr01-0001", "training"),
        ("tr01-0002", "training"),
        ("te01-0001", "test"),
    ]
    assert records[0].labelled and not records[2].labelled
    assert [path.name for path in records[2].source_files()] == ["te01-0001.hea", "te01-0001.mat"]
    with pytest.raises(FileNotFoundError, match="src"):
        find_records(cohort / "training")


def test_read_eeg_picks_channels_by_name_in_microvolts(tmp_path):
    record_dir = write_record(tmp_path, "training", "tr02-0001", seconds=40.0)
    _swap_header_names(record_dir, "F3-M2", "O2-M1")
    recording = read_eeg(PC18Record("tr02-0001", "training", record_dir))
    assert recording.sfreq == 200.0 and recording.channels == list(PC18_EEG_CHANNELS)
    assert recording.data.dtype == np.float32 and recording.data.shape == (6, 8000)
    expected = np.rint(_eeg_uv(8000))[[5, 1, 2, 3, 4, 0]]
    np.testing.assert_array_equal(recording.data, expected)


def test_a_header_start_date_becomes_the_record_start(tmp_path):
    record_dir = write_record(tmp_path / "src", "training", "tr02-0001", seconds=120.0)
    header = record_dir / "tr02-0001.hea"
    lines = header.read_text().split("\n")
    lines[0] += " 23:10:05 04/03/2021"  # WFDB: base time, base date (dd/mm/yyyy)
    header.write_text("\n".join(lines))
    assert _run(tmp_path / "src", tmp_path / "s.zarr") == 0
    start = SleepStore(tmp_path / "s.zarr").record_start("tr02-0001")
    assert start == datetime(2021, 3, 4, 23, 10, 5, tzinfo=timezone.utc)


def _permute_signals(record_dir: Path, order: list[int]) -> None:
    """Rewrite a record with its 13 signals (data and header lines) in file order ``order``."""
    name = record_dir.name
    mat = record_dir / f"{name}.mat"
    digital = np.frombuffer(mat.read_bytes()[24:], dtype="<i2").reshape(-1, 13).T
    pc18_format.write_signal_mat(mat, np.ascontiguousarray(digital[order]))
    header = record_dir / f"{name}.hea"
    lines = header.read_text().splitlines()
    header.write_text("\n".join([lines[0], *(lines[1 + index] for index in order)]) + "\n")


def test_command_picks_eeg_channels_by_name_whatever_their_file_order(tmp_path):
    src = tmp_path / "pc18"
    write_record(src, "training", "tr05-0001", seconds=150.0)
    permuted = write_record(src, "training", "tr05-0002", seconds=150.0)
    order = [12, 5, 3, 11, 0, 8, 1, 4, 7, 2, 6, 9, 10]  # EEG columns scattered and reversed
    _permute_signals(permuted, order)
    names = [line.split(" ")[-1] for line in (permuted / "tr05-0002.hea").read_text().split("\n")]
    assert names[1:7] == ["ECG", "O2-M1", "C4-M1", "SaO2", "F3-M2", "ABD"]
    assert _run(src, tmp_path / "pc18.zarr") == 0
    store = SleepStore(tmp_path / "pc18.zarr")
    assert store.channels == list(PC18_EEG_CHANNELS)
    n_windows = store.n_windows("tr05-0001")
    assert n_windows == store.n_windows("tr05-0002") >= 2
    np.testing.assert_array_equal(store.stages("tr05-0002"), store.stages("tr05-0001"))
    in_order = store.read_windows("tr05-0001", 0, n_windows)
    np.testing.assert_array_equal(store.read_windows("tr05-0002", 0, n_windows), in_order)
    # each stored channel is its own sinusoid: amplitudes differ, so a swap could not pass
    np.testing.assert_allclose(
        in_order[:, :, 1000:2000].std(axis=(0, 2)), AMPLITUDES / np.sqrt(2), rtol=0.05
    )


def test_read_sample_stages_decodes_one_hot_vectors(tmp_path):
    n_samples = 1000
    stages = np.repeat(np.array([-1, 0, 1, 2, 3, 4, -1, 2], dtype=np.int8), 125)
    path = tmp_path / "x-arousal.mat"
    pc18_format.write_arousal_mat(path, stages, np.zeros(n_samples, dtype=np.int8))
    np.testing.assert_array_equal(read_sample_stages(path, n_samples), stages)
    with pytest.raises(RecordError) as error:
        read_sample_stages(path, n_samples + 1)
    assert error.value.reason == LABEL_LENGTH_MISMATCH


def test_command_stores_values_labels_and_alignment(cohort, tmp_path):
    out = tmp_path / "pc18.zarr"
    assert _run(cohort, out) == 0
    store = SleepStore(out)
    assert store.record_ids() == ["te01-0001", "tr01-0001", "tr01-0002"]
    assert store.record_ids(split="training", labelled_only=True) == ["tr01-0001", "tr01-0002"]
    assert store.channels == list(PC18_EEG_CHANNELS) and store.sfreq == 100.0
    assert store.attrs["filter"]["numtaps"] == 6601 and store.attrs["filter"]["l_freq"] == 0.1
    assert store.attrs["resample"]["from_sfreq"] == 200.0
    assert store.attrs["resample"]["up_down"] == [1, 2]
    assert store.attrs["signal_dtype"] == "float32"
    assert set(store.attrs["library_versions"]) >= {"mne", "wfdb", "zarr"}

    starts, stages = _expected_windows()
    np.testing.assert_array_equal(store.stages("tr01-0001"), stages)
    np.testing.assert_allclose(store.start_times("tr01-0001"), np.array(starts) / FS)
    attrs = store.record_attrs("tr01-0001")
    assert attrs["first_window_sample"] == PREFIX
    assert attrs["dropped"] == {"incomplete": 1, "mixed": 1, "undefined": 1}
    assert attrs["subject_id"] == "tr01-0001" and attrs["split"] == "training"
    assert attrs["n_windows"] == len(stages) and attrs["duration_s"] == SECONDS

    signal = store.read_windows("tr01-0001", 0, len(stages))
    window_time = store.start_times("tr01-0001")[:, None] + np.arange(3000)[None, :] / 100.0
    interior = (window_time[:, 0] > 20) & (window_time[:, -1] < SECONDS - 20)
    assert interior.sum() >= 6
    for channel in range(6):
        expected = AMPLITUDES[channel] * np.sin(2 * np.pi * FREQUENCIES[channel] * window_time)
        np.testing.assert_allclose(signal[interior, channel], expected[interior], atol=1.0)

    test_stages = store.stages("te01-0001")
    assert len(test_stages) == 6 and (test_stages == -1).all()
    np.testing.assert_allclose(store.start_times("te01-0001"), 30.0 * np.arange(6))
    assert store.record_attrs("te01-0001")["dropped"] == {"incomplete": 1}
    assert store.record_attrs("te01-0001")["n_labelled"] == 0

    manifest = store.manifest
    assert {entry["status"] for entry in manifest.values()} == {"done"}
    assert manifest["tr01-0001"]["n_kept"] == len(stages)
    assert manifest["tr01-0001"]["n_dropped_by_reason"] == attrs["dropped"]
    assert manifest["tr01-0001"]["source_checksum"] == attrs["source_checksum"]
    assert manifest["tr01-0001"]["source_checksum"] != manifest["tr01-0002"]["source_checksum"]
    record_dir = cohort / "training" / "tr01-0001"
    file_hashes = {
        name: hashlib.sha256((record_dir / name).read_bytes()).hexdigest()
        for name in ("tr01-0001.hea", "tr01-0001.mat", "tr01-0001-arousal.mat")
    }
    assert manifest["tr01-0001"]["source_sha256"] == attrs["source_sha256"] == file_hashes
    assert list(manifest["te01-0001"]["source_sha256"]) == ["te01-0001.hea", "te01-0001.mat"]


def test_broken_records_are_reported_and_the_rest_completes(tmp_path, capsys):
    src = tmp_path / "pc18"
    broken = {
        "tr09-0001": ("truncated", UNREADABLE_SIGNAL),
        "tr09-0002": ("missing_channel", MISSING_CHANNEL),
        "tr09-0003": ("label_length", LABEL_LENGTH_MISMATCH),
        "tr09-0004": ("nan", NON_FINITE),
        "tr09-0005": ("flat", FLAT_CHANNEL),
        "tr09-0006": ("all_undefined", ALL_UNDEFINED),
        "tr09-0007": ("missing_labels", MISSING_FILE),
        "tr09-0008": ("unreadable_header", UNREADABLE_HEADER),
    }
    for record_id, (breakage, _) in broken.items():
        write_record(src, "training", record_id, seconds=120.0, break_as=breakage)
    write_record(src, "training", "tr09-0009", seconds=120.0)
    out = tmp_path / "pc18.zarr"
    assert _run(src, out) == 1
    store = SleepStore(out)
    assert store.record_ids() == ["tr09-0009"]
    manifest = store.manifest
    for record_id, (_, reason) in broken.items():
        assert manifest[record_id]["status"] == "failed"
        assert manifest[record_id]["reason"] == reason, manifest[record_id]["detail"]
    assert "C4-M1" in manifest["tr09-0005"]["detail"]
    assert "O1-M2" in manifest["tr09-0002"]["detail"]
    assert manifest["tr09-0009"]["status"] == "done"
    printed = capsys.readouterr().out
    assert "failed            8" in printed and "label_length_mismatch" in printed


def test_rerun_skips_finished_records_and_redoes_changed_ones(cohort, tmp_path, capsys):
    out = tmp_path / "pc18.zarr"
    assert _run(cohort, out) == 0
    chunk = out / "records" / "tr01-0001" / "signal" / "c" / "0" / "0" / "0"
    before = chunk.stat().st_mtime_ns
    old_checksum = SleepStore(out).record_attrs("tr01-0002")["source_checksum"]
    capsys.readouterr()

    report = physionet2018.preprocess_physionet2018(cohort, out, progress=False)
    assert set(report.outcomes.values()) == {"skipped"}
    assert chunk.stat().st_mtime_ns == before

    record_dir = cohort / "training" / "tr01-0002"
    for path in record_dir.iterdir():
        path.unlink()
    record_dir.rmdir()
    write_record(cohort, "training", "tr01-0002", seconds=SECONDS + 90)
    report = physionet2018.preprocess_physionet2018(cohort, out, progress=False)
    assert report.outcomes == {"tr01-0001": "skipped", "tr01-0002": "done", "te01-0001": "skipped"}
    store = SleepStore(out)
    assert store.record_attrs("tr01-0002")["source_checksum"] != old_checksum
    assert store.record_attrs("tr01-0002")["duration_s"] == SECONDS + 90

    report = physionet2018.preprocess_physionet2018(
        cohort, out, progress=False, verify_checksums=True
    )
    assert set(report.outcomes.values()) == {"skipped"}


def test_killed_run_resumes_to_an_identical_store(cohort, tmp_path, monkeypatch, capsys):
    reference = tmp_path / "reference.zarr"
    assert _run(cohort, reference) == 0

    resumed = tmp_path / "resumed.zarr"
    original_update = Manifest.update
    calls = []

    def dying_update(self, record_id, entry):
        calls.append(record_id)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        original_update(self, record_id, entry)

    monkeypatch.setattr(Manifest, "update", dying_update)
    capsys.readouterr()
    assert _run(cohort, resumed) == 130  # Ctrl-C: one line, the shell's status for SIGINT
    assert capsys.readouterr().err == "partnd preprocess: killed\n"
    monkeypatch.setattr(Manifest, "update", original_update)
    leftover = resumed / "records" / ".tmp-tr01-0002-deadbeef"
    leftover.mkdir()
    (leftover / "zarr.json").write_text("{}")
    written_before = SleepStore(resumed).record_ids()
    assert len(written_before) == 2
    assert list(json.loads((resumed / "manifest.json").read_text())) == [calls[0]]

    report = physionet2018.preprocess_physionet2018(cohort, resumed, progress=False)
    assert report.outcomes[calls[0]] == "skipped"
    assert report.outcomes[calls[1]] == "skipped"
    assert not leftover.exists()
    _assert_same_store(reference, resumed)
    assert set(SleepStore(resumed).manifest) == set(SleepStore(reference).manifest)


@pytest.mark.slow
def test_two_jobs_give_the_same_store_as_one(cohort, tmp_path):
    assert _run(cohort, tmp_path / "one.zarr", "--n-jobs", "1") == 0
    assert _run(cohort, tmp_path / "two.zarr", "--n-jobs", "2") == 0
    _assert_same_store(tmp_path / "one.zarr", tmp_path / "two.zarr")


@pytest.mark.slow
def test_dask_backend_gives_the_same_store(cohort, tmp_path):
    pytest.importorskip("dask.distributed")
    assert _run(cohort, tmp_path / "loky.zarr") == 0
    assert _run(cohort, tmp_path / "dask.zarr", "--backend", "dask", "--n-jobs", "2") == 0
    _assert_same_store(tmp_path / "loky.zarr", tmp_path / "dask.zarr")


def test_float16_option_and_record_selection(cohort, tmp_path):
    out16 = tmp_path / "half.zarr"
    assert _run(cohort, out16, "--dtype", "float16", "--records", "tr01-0001") == 0
    store = SleepStore(out16)
    assert store.record_ids() == ["tr01-0001"]
    assert store.signal_array("tr01-0001").dtype == np.float16
    assert store.attrs["signal_dtype"] == "float16"
    out32 = tmp_path / "single.zarr"
    assert _run(cohort, out32, "--records", "tr01-0001") == 0
    single = SleepStore(out32).read_windows("tr01-0001", 0, 9)
    half = store.read_windows("tr01-0001", 0, 9)
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, single, rtol=1e-3, atol=1e-3)
    with pytest.raises(InputError, match="signal_dtype"):
        physionet2018.preprocess_physionet2018(cohort, out16, progress=False)


def test_unusable_arguments_exit_with_status_2_and_a_message(cohort, tmp_path, capsys):
    out = tmp_path / "half.zarr"
    assert _run(cohort, out, "--dtype", "float16", "--records", "te01-0001") == 0
    capsys.readouterr()
    assert _run(cohort, out, "--dtype", "float32") == 2
    assert "signal_dtype" in capsys.readouterr().err
    assert _run(cohort, tmp_path / "x.zarr", "--records", "tr77-0001") == 2
    assert "tr77-0001" in capsys.readouterr().err
    assert _run(tmp_path / "missing", tmp_path / "y.zarr") == 2
    error = capsys.readouterr().err
    assert error.startswith("partnd preprocess: error: --src:")
    assert "Traceback" not in error
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "mine.txt").write_text("not a store")
    assert _run(cohort, tmp_path / "folder") == 2
    assert capsys.readouterr().err.startswith("partnd preprocess: error: --out: ")
    assert SleepStore(out).record_ids() == ["te01-0001"]


def test_command_usage_says_partnd_preprocess_and_spells_options_like_the_others(
    cohort, tmp_path, capsys
):
    parser = physionet2018.build_parser()
    assert parser.prog == "partnd preprocess"
    assert all(action.help for action in parser._actions), "every option has help text"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["preprocess", "--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: partnd preprocess")
    for flag in ("--out", "--overwrite, --no-overwrite", "--progress, --no-progress"):
        assert flag in usage
    out = tmp_path / "pc18.zarr"
    argv = ["--src", str(cohort), "--out", str(out), "--no-progress"]
    assert physionet2018.main([*argv, "--records", "te01-0001,tr01-0001"]) == 0
    assert SleepStore(out).record_ids() == ["te01-0001", "tr01-0001"]
    assert physionet2018.main([*argv, "--records", "te01-0001", "--overwrite"]) == 0
    assert SleepStore(out).record_ids() == ["te01-0001"]


def test_partnd_cli_runs_the_command(cohort, tmp_path, capsys):
    out = tmp_path / "cli.zarr"
    argv = ["preprocess", "--src", str(cohort), "--out", str(out), "--no-progress"]
    assert cli.main([*argv, "--records", "te01-0001"]) == 0
    assert "done              1" in capsys.readouterr().out
    assert SleepStore(out).record_ids() == ["te01-0001"]
    (cohort / "test" / "te01-0001" / "te01-0001.mat").write_bytes(b"")
    assert cli.main(argv) == 1
    assert SleepStore(out).manifest["te01-0001"]["reason"] == UNREADABLE_SIGNAL
    assert SleepStore(out).record_ids() == ["te01-0001", "tr01-0001", "tr01-0002"]


def _declare_faults(src: Path, faults: dict[str, dict]) -> None:
    """Write a generated cohort's ``cohort.json`` declaring ``{record: artefacts}`` as injected."""
    records = {record_id: {"artefacts": artefacts} for record_id, artefacts in faults.items()}
    manifest = {"format": pc18_cohort.COHORT_FORMAT, "records": records}
    (src / pc18_cohort.COHORT_FILE).write_text(json.dumps(manifest))


def test_declared_injected_faults_are_expected_failures_and_others_are_not(tmp_path, capsys):
    src = tmp_path / "pc18"
    write_record(src, "training", "tr09-0001", seconds=120.0)
    write_record(src, "training", "tr09-0005", seconds=120.0, break_as="flat")  # C4-M1 flat
    flat = {"flat_channel": {"channel": "C4-M1", "start": 0, "stop": 24000}}
    _declare_faults(src, {"tr09-0005": flat})
    assert _run(src, tmp_path / "a.zarr") == 0
    printed = capsys.readouterr().out
    assert "1 record failed as expected: tr09-0005 flat_channel (injected fault)" in printed
    assert "failed            1" in printed and "unexpectedly" not in printed
    report = physionet2018.preprocess_physionet2018(src, tmp_path / "a.zarr", progress=False)
    assert report.failed == report.expected_failures == ["tr09-0005"]
    assert report.unexpected_failures == []

    # a flat channel other than the declared one is a real problem
    _declare_faults(src, {"tr09-0005": {"flat_channel": {"channel": "F3-M2"}}})
    assert _run(src, tmp_path / "b.zarr") == 1
    assert "failed as expected" not in capsys.readouterr().out

    # any failure the source does not declare still fails the run
    _declare_faults(src, {"tr09-0005": flat})
    write_record(src, "training", "tr09-0004", seconds=120.0, break_as="nan")
    assert _run(src, tmp_path / "c.zarr") == 1
    printed = capsys.readouterr().out
    assert "1 record failed as expected: tr09-0005 flat_channel (injected fault)" in printed
    assert "1 record failed unexpectedly: tr09-0004" in printed

    # without cohort.json (real data) nothing is expected
    (src / pc18_cohort.COHORT_FILE).unlink()
    assert _run(src, tmp_path / "d.zarr", "--records", "tr09-0005") == 1


def test_generated_cohort_windows_match_the_ground_truth_hypnogram(tmp_path):
    cohort = make_pc18_cohort(
        tmp_path / "cohort", n_records=3, hours=0.25, seed=3, test_fraction=0.34, progress=False
    )
    out = tmp_path / "pc18.zarr"
    assert _run(cohort.root, out) == 0
    store = SleepStore(out)
    assert store.record_ids(split="training") == [path.name for path in cohort.training_records]
    assert store.record_ids(split="test") == [path.name for path in cohort.test_records]
    for record_dir in cohort.training_records:
        truth = cohort.truth[record_dir.name]
        hypnogram = hypnogram_from_string(truth["hypnogram"])
        np.testing.assert_array_equal(store.stages(record_dir.name), hypnogram)
        starts = truth["scoring_start"] + EPOCH * np.arange(len(hypnogram))
        np.testing.assert_allclose(store.start_times(record_dir.name), starts / FS)
        assert store.record_attrs(record_dir.name)["first_window_sample"] == truth["scoring_start"]
    for record_dir in cohort.test_records:
        n_windows = cohort.truth[record_dir.name]["n_samples"] // EPOCH
        assert (store.stages(record_dir.name) == -1).all()
        assert store.n_windows(record_dir.name) == n_windows


def test_unexpected_errors_are_reported_with_a_traceback(cohort, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(physionet2018, "preprocess_continuous", broken)
    out = tmp_path / "pc18.zarr"
    assert _run(cohort, out, "--records", "tr01-0001") == 1
    entry = SleepStore(out).manifest["tr01-0001"]
    assert entry["reason"] == "error" and entry["detail"] == "RuntimeError: simulated bug"
    assert "simulated bug" in entry["traceback"]
    assert SleepStore(out).record_ids() == []
