"""Tests of the data subcommands ``partnd ingest`` and ``partnd cohort`` (and the cohort's
injected fault seen through ``partnd preprocess``)."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

import mne
import numpy as np
import pytest

from partnd import cli
from partnd.cohort import command, pc18_cohort
from partnd.datasets.store import SleepStore
from partnd.preprocessing import ingest_command as ingest

SFREQ = 100.0
STAGES = ["W", "1", "2", "3", "R", "2", "W", "2"]
STAGE_CODES = [0, 1, 2, 3, 4, 2, 0, 2]
ONSET = 12.5


def _recording(tmp_path: Path, *, nan: bool = False) -> mne.io.RawArray:
    """300 s at 100 Hz: two 10-20 EEG derivations, an EOG and an EDF test signal, all typed EEG
    (as MNE reads EDF), with Sleep-EDF stage annotations from ``ONSET`` s."""
    time = np.arange(round(300 * SFREQ)) / SFREQ
    data = 20e-6 * np.sin(2 * np.pi * np.array([[3.0], [5.0], [0.5], [1.0]]) * time[None])
    if nan:
        data[0, 500] = np.nan
    names = ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal", "squarewave"]
    raw = mne.io.RawArray(data, mne.create_info(names, SFREQ, "eeg"), verbose="error")
    raw.set_meas_date(datetime(2021, 3, 4, 23, 0, tzinfo=timezone.utc))
    onsets = ONSET + 30.0 * np.arange(len(STAGES))
    raw.set_annotations(mne.Annotations(onsets, 30.0, [f"Sleep stage {s}" for s in STAGES]))
    return raw


def _edf_recording(tmp_path: Path) -> Path:
    """:func:`_recording` written as ``night.edf`` in ``tmp_path`` (EDF+, its annotations in it;
    skips the test without edfio, which MNE writes EDF through)."""
    pytest.importorskip("edfio")
    edf = tmp_path / "night.edf"
    mne.export.export_raw(edf, _recording(tmp_path), fmt="edf")
    return edf


def _has_help_everywhere(parser: argparse.ArgumentParser) -> bool:
    return all(action.help for action in parser._actions)


def test_subcommands_are_registered_with_their_own_usage(capsys: pytest.CaptureFixture) -> None:
    assert cli.SUBCOMMANDS["ingest"].resolve("ingest") is ingest.main
    assert cli.SUBCOMMANDS["cohort"].resolve("cohort") is command.main
    assert _has_help_everywhere(ingest.build_parser())
    assert _has_help_everywhere(command.build_parser())
    for name, flags in [
        ("ingest", ["--out", "--overwrite, --no-overwrite", "--eeg-channels"]),
        (
            "cohort",
            ["--out", "--records", "--hours", "--seed", "--progress, --no-progress", "--profile"],
        ),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            cli.main([name, "--help"])
        assert exit_info.value.code == 0
        usage = capsys.readouterr().out
        assert usage.startswith(f"usage: partnd {name}")
        assert all(flag in usage for flag in flags)
    assert cli.main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert "ingest" in listing and "cohort" in listing


def test_partnd_ingest_edf_with_its_hypnogram(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    edf = _edf_recording(tmp_path)
    out = tmp_path / "sleep.zarr"
    assert cli.main(["ingest", str(edf), str(edf), "--out", str(out)]) == 0  # EDF+ annotations
    printed = capsys.readouterr().out
    assert "from channels ['EEG Fpz-Cz', 'EEG Pz-Oz'] (picked by their 10-20 names" in printed
    store = SleepStore(out)
    assert store.record_ids() == ["night"] and store.channels == ["EEG Fpz-Cz", "EEG Pz-Oz"]
    np.testing.assert_array_equal(store.stages("night"), STAGE_CODES)
    np.testing.assert_allclose(store.start_times("night"), ONSET + 30.0 * np.arange(8))

    assert cli.main(["ingest", str(edf), str(edf), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("partnd ingest: error: --record-id: ")
    assert cli.main(["ingest", str(edf), str(edf), "--out", str(out), "--overwrite"]) == 0

    hypnogram = tmp_path / "night-hypnogram.csv"  # a separate annotation file
    _recording(tmp_path).annotations.save(hypnogram)
    renamed = ["--eeg-channels", "EEG Fpz-Cz=Fpz-Cz", "--record-id", "n2", "--subject-id", "S2"]
    other = tmp_path / "fpz.zarr"
    assert cli.main(["ingest", str(edf), str(hypnogram), "--out", str(other), *renamed]) == 0
    store = SleepStore(other)
    assert store.channels == ["Fpz-Cz"] and store.record_attrs("n2")["subject_id"] == "S2"
    np.testing.assert_array_equal(store.stages("n2"), STAGE_CODES)
    capsys.readouterr()
    assert cli.main(["ingest", str(edf), str(hypnogram), "--out", str(out), *renamed]) == 2
    assert capsys.readouterr().err.startswith("partnd ingest: error: --out: ")


def test_partnd_ingest_usage_errors_and_failed_records(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["ingest", str(tmp_path / "x.edf")])  # no --out
    assert exit_info.value.code == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err
    out = str(tmp_path / "s.zarr")
    assert cli.main(["ingest", str(tmp_path / "missing.edf"), "--out", out]) == 2
    assert capsys.readouterr().err.startswith("partnd ingest: error: RECORDING: ")
    generator = Path(__import__("pyedflib").__file__).parent / "data" / "test_generator.edf"
    assert cli.main(["ingest", str(generator), "--out", out]) == 2
    error = capsys.readouterr().err
    assert error.startswith("partnd ingest: error: --eeg-channels: ") and "squarewave" in error
    assert cli.main(["ingest", str(generator), "--out", out, "--eeg-channels", "C3"]) == 2
    assert "--eeg-channels: expected names among" in capsys.readouterr().err

    fif = tmp_path / "bad_raw.fif"
    _recording(tmp_path, nan=True).save(fif, verbose="error")
    assert cli.main(["ingest", str(fif), str(fif), "--out", out]) == 1
    assert "failed: nan:" in capsys.readouterr().out
    assert not Path(out).exists()  # a failed command leaves no store it created
    good = tmp_path / "good_raw.fif"
    _recording(tmp_path).save(good, verbose="error")
    assert cli.main(["ingest", str(good), str(good), "--out", out]) == 0
    assert cli.main(["ingest", str(fif), str(fif), "--out", out]) == 1
    assert SleepStore(out).manifest["bad_raw"]["reason"] == "nan"  # an existing store records it
    capsys.readouterr()
    for record_id in (".hidden", "a/b"):
        new_store = tmp_path / "never.zarr"
        argv = ["ingest", str(good), str(good), "--out", str(new_store), "--record-id", record_id]
        assert cli.main(argv) == 2
        assert (
            "error: --record-id: expected a non-empty name without '/'" in capsys.readouterr().err
        )
        assert not new_store.exists()


def test_partnd_ingest_surfaces_mne_warnings_about_a_truncated_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    edf = _edf_recording(tmp_path)
    data = edf.read_bytes()
    edf.write_bytes(data[: len(data) // 2])  # truncated: the header says twice as many records
    out = tmp_path / "sleep.zarr"
    assert cli.main(["ingest", str(edf), "--out", str(out), "--strict"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("partnd ingest: error: RECORDING: expected files MNE reads without ")
    assert "when --strict, got night.edf: Number of records from the header does not match" in error
    assert not out.exists()
    assert cli.main(["ingest", str(edf), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "partnd ingest: warning: night.edf: Number of records from the header does not " in (
        captured.err
    )
    assert "MNE warning(s) about the files, see above" in captured.out
    warned = SleepStore(out).record_attrs("night")["source_warnings"]
    assert any("does not match the file size" in text for text in warned)
    assert SleepStore(out).record_start("night") == datetime(2021, 3, 4, 23, 0, tzinfo=timezone.utc)


def test_partnd_cohort_then_preprocess_reports_the_injected_fault_as_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "cohort"
    argv = ["cohort", "--out", str(root), "--records", "12", "--hours", "0.25", "--no-progress"]
    assert cli.main(argv) == 0  # 12 records: the smallest cohort with a flat-channel record
    printed = capsys.readouterr().out
    faults = pc18_cohort.injected_faults(root)
    (flat,) = [name for name, kinds in faults.items() if "flat_channel" in kinds]
    channel = faults[flat]["flat_channel"]["channel"]
    assert f"{flat} flat {channel}" in printed and "12 records (9 training, 3 test)" in printed
    clean = next(p.name for p in (root / "training").iterdir() if p.name not in faults)

    store = tmp_path / "pc18.zarr"
    preprocess = ["preprocess", "--src", str(root), "--out", str(store), "--no-progress"]
    assert cli.main([*preprocess, "--records", f"{flat},{clean}"]) == 0
    printed = capsys.readouterr().out
    assert f"1 record failed as expected: {flat} flat_channel (injected fault)" in printed
    assert SleepStore(store).record_ids() == [clean]

    assert cli.main(argv) == 0  # idempotent: the cohort is there already
    capsys.readouterr()


def test_partnd_cohort_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "cohort"
    assert cli.main(["cohort", "--out", str(root), "--records", "0"]) == 2
    assert capsys.readouterr().err.startswith("partnd cohort: error: --records: ")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["cohort", "--out", str(root), "--hours", "long"])
    assert exit_info.value.code == 2
    assert "--hours: invalid float value" in capsys.readouterr().err
    one = ["--records", "1", "--hours", "0.25", "--test-fraction", "0", "--no-progress"]
    assert cli.main(["cohort", "--out", str(root), *one]) == 0
    capsys.readouterr()
    assert cli.main(["cohort", "--out", str(root), *one, "--seed", "1"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("partnd cohort: error: --out: ") and "--overwrite" in error
    assert cli.main(["cohort", "--out", str(root), *one, "--seed", "1", "--overwrite"]) == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert cli.main(["cohort", "--out", str(foreign)]) == 2
    assert capsys.readouterr().err.startswith("partnd cohort: error: --out: ")
    assert cli.main(["cohort", "--out", str(foreign / "notes.txt")]) == 2  # was "[Errno 17]"
    assert capsys.readouterr().err == (
        f"partnd cohort: error: --out: expected a directory, got the file {foreign / 'notes.txt'}\n"
    )


def test_a_failed_preprocess_leaves_no_store_and_a_corrupt_manifest_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "cohort"
    one = ["--records", "1", "--hours", "0.25", "--test-fraction", "0", "--no-progress"]
    assert cli.main(["cohort", "--out", str(root), *one]) == 0
    store = tmp_path / "pc18.zarr"
    preprocess = ["preprocess", "--src", str(root), "--out", str(store), "--no-progress"]
    capsys.readouterr()
    assert cli.main([*preprocess, "--n-jobs", "0"]) == 2
    assert "error: --n-jobs: expected a non-zero integer" in capsys.readouterr().err
    assert not store.exists()  # refused before the store was created
    assert cli.main(preprocess) == 0
    (store / "manifest.json").write_text("{ not json")
    capsys.readouterr()
    assert cli.main(preprocess) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        "partnd preprocess: error: --out: expected a store whose manifest.json is a JSON object, "
        f"got '{store / 'manifest.json'}' that cannot be read (JSONDecodeError: "
    )

    fif = tmp_path / "night_raw.fif"
    _recording(tmp_path).save(fif, verbose="error")
    ingested = tmp_path / "ingested.zarr"
    assert cli.main(["ingest", str(fif), str(fif), "--out", str(ingested)]) == 0
    (ingested / "manifest.json").write_text("[]")
    argv = ["ingest", str(fif), str(fif), "--out", str(ingested), "--record-id", "again"]
    capsys.readouterr()
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert "error: --out: expected a store whose manifest.json is a JSON object, got " in error
    assert "(holding list)" in error and "Traceback" not in error
    assert SleepStore(ingested).record_ids() == ["night_raw"]  # refused before writing


def test_partnd_ingest_never_suggests_overwrite_for_a_store_it_cannot_add_to(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    fif = tmp_path / "night_raw.fif"
    _recording(tmp_path).save(fif, verbose="error")
    out = tmp_path / "sleep.zarr"
    assert cli.main(["ingest", str(fif), str(fif), "--out", str(out)]) == 0
    capsys.readouterr()
    one_channel = ["--eeg-channels", "EEG Fpz-Cz", "--record-id", "other"]
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "mine.txt").write_text("mine")
    for store, extra, expected in [
        (out, one_channel, "--out: expected an existing store with the same configuration"),
        (folder, [], "--out: expected a new path or an existing partnd-sleep store"),
    ]:
        for overwrite in ([], ["--overwrite"]):  # --overwrite replaces a record, not a store
            argv = ["ingest", str(fif), str(fif), "--out", str(store), *extra, *overwrite]
            assert cli.main(argv) == 2
            error = capsys.readouterr().err
            assert expected in error and "(another store is needed)" in error, error
            assert "--overwrite" not in error
    assert SleepStore(out).record_ids() == ["night_raw"] and (folder / "mine.txt").is_file()
