"""Dataset-level ingest: pairing by each dataset's naming, parallel runs, resume after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import mne
import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.store import RECORDS_GROUP, SleepStore
from partnd.preprocessing.dataset_ingest import ingest_dataset, pair_recordings
from partnd.preprocessing.ingest_command import main
from tests.hypnogram_fixtures import (
    expected_codes,
    write_bids_events,
    write_edf_hypnogram,
    write_nsrr_xml,
)

START = datetime(2021, 3, 1, 22, 0, tzinfo=timezone.utc)


def labels_of(seed: int, n: int = 20) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(rng.choice(list("W1234R"), size=n))


def write_edf(path: Path, names: list[str], sfreq: float, seconds: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((len(names), round(sfreq * seconds))) * 20e-6
    raw = mne.io.RawArray(data, mne.create_info(names, sfreq, "eeg"), verbose="error")
    raw.set_meas_date(START)
    path.parent.mkdir(parents=True, exist_ok=True)
    mne.export.export_raw(path, raw, overwrite=True, verbose="error")
    return path


def sleep_edf_dir(root: Path, n: int, epochs: int = 20) -> dict[str, list[str]]:
    """``n`` Sleep-EDF-like nights: ``SC4ssNE0-PSG.edf`` + ``SC4ssNEC-Hypnogram.edf``."""
    written = {}
    for index in range(n):
        subject, night = index // 2, index % 2 + 1
        stem = f"SC4{subject:02d}{night}"
        labels = labels_of(index, epochs)
        write_edf(
            root / f"{stem}E0-PSG.edf", ["EEG Fpz-Cz", "EEG Pz-Oz"], 100.0, 30 * epochs, index
        )
        write_edf_hypnogram(
            root / f"{stem}EC-Hypnogram.edf", labels, start=START.replace(tzinfo=None)
        )
        written[f"{stem}E0"] = labels
    return written


def test_pairing_rules_of_every_family_and_what_stays_unpaired(tmp_path):
    for name in [
        "sleep-edf/SC4001E0-PSG.edf",
        "sleep-edf/SC4001EC-Hypnogram.edf",
        "sleep-edf/SC4012E0-PSG.edf",  # no hypnogram
        "sleep-edf/SC4021EH-Hypnogram.edf",  # no recording
        "shhs/polysomnography/edfs/shhs1/shhs1-200001.edf",
        "shhs/polysomnography/annotations-events-nsrr/shhs1/shhs1-200001-nsrr.xml",
        "shhs/polysomnography/edfs/shhs2/shhs2-200001.edf",
        "shhs/polysomnography/annotations-events-nsrr/shhs2/shhs2-200001-nsrr.xml",
        "mesa/mesa-sleep-0001.edf",
        "mesa/mesa-sleep-0001-nsrr.xml",
        "mass/SS1/01-01-0001 PSG.edf",
        "mass/SS1/01-01-0001 Base.edf",
        "mass/SS1/01-01-0002 PSG.edf",  # no Base
        "bids/sub-01/ses-02/eeg/sub-01_ses-02_task-sleep_eeg.edf",
        "bids/sub-01/ses-02/eeg/sub-01_ses-02_task-sleep_events.tsv",
        "bids/sub-02/eeg/sub-02_task-sleep_eeg.edf",
        "bids/sub-02/eeg/sub-02_task-sleep_events.tsv",
        "other/night.edf",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    report = pair_recordings(tmp_path)
    found = {
        pair.record_id: (pair.hypnogram.name, pair.subject_id, pair.session_id, pair.family)
        for pair in report.pairs
    }
    assert found == {
        "SC4001E0": ("SC4001EC-Hypnogram.edf", "SC400", "1", "sleep-edf"),
        "shhs1-200001": ("shhs1-200001-nsrr.xml", "200001", "shhs1", "nsrr"),
        "shhs2-200001": ("shhs2-200001-nsrr.xml", "200001", "shhs2", "nsrr"),
        "mesa-sleep-0001": ("mesa-sleep-0001-nsrr.xml", "0001", "mesa-sleep", "nsrr"),
        "01-01-0001": ("01-01-0001 Base.edf", "01-01-0001", None, "mass"),
        "sub-01_ses-02_task-sleep": (
            "sub-01_ses-02_task-sleep_events.tsv",
            "sub-01",
            "ses-02",
            "bids",
        ),
        "sub-02_task-sleep": ("sub-02_task-sleep_events.tsv", "sub-02", None, "bids"),
    }
    why = {
        path.relative_to(tmp_path).as_posix(): reason for path, reason in report.unpaired.items()
    }
    assert why == {
        "sleep-edf/SC4012E0-PSG.edf": "no SC4012??-Hypnogram.edf beside it",
        "sleep-edf/SC4021EH-Hypnogram.edf": "no *-PSG.edf with the same first 6 characters "
        "beside it",
        "mass/SS1/01-01-0002 PSG.edf": "no 01-01-0002 Base.edf beside it",
        "other/night.edf": "no hypnogram by any naming rule (Sleep-EDF, NSRR, MASS, BIDS); use "
        "--pattern",
    }
    patterned = pair_recordings(tmp_path / "other", pattern="{id}.edf=scores/{id}.xml")
    assert patterned.pairs == []
    assert list(patterned.unpaired.values()) == ["no hypnogram scores/night.xml"]
    (tmp_path / "other/scores").mkdir()
    (tmp_path / "other/scores/night.xml").write_text("x")
    patterned = pair_recordings(tmp_path / "other", pattern="{id}.edf=scores/{id}.xml")
    assert [(p.record_id, p.hypnogram.name) for p in patterned.pairs] == [("night", "night.xml")]


def test_sleep_edf_directory_ingests_with_ids_channels_and_stages(tmp_path, capsys):
    written = sleep_edf_dir(tmp_path / "data", 3)
    (tmp_path / "data" / "SC4099E0-PSG.edf").write_text("x")  # unpaired, reported
    status = main(
        [
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "s.zarr"),
            "--no-progress",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert "paired 3: sleep-edf 3" in printed
    assert "not paired: SC4099E0-PSG.edf: no SC4099??-Hypnogram.edf beside it" in printed
    assert "done 3, skipped 0, failed 0" in printed
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["Fpz-Cz", "Pz-Oz"]
    assert store.record_ids() == sorted(written)
    for record_id, labels in written.items():
        codes = expected_codes(labels)
        np.testing.assert_array_equal(store.stages(record_id), codes[codes >= 0])
        attrs = store.record_attrs(record_id)
        assert attrs["subject_id"] == record_id[:5]
        assert attrs["session_id"] == record_id[5]
        assert attrs["channel_derivations"] == {"Fpz-Cz": "EEG Fpz-Cz", "Pz-Oz": "EEG Pz-Oz"}
    assert set(store.manifest) == set(written)
    again = main([str(tmp_path / "data"), "--out", str(tmp_path / "s.zarr"), "--no-progress"])
    assert again == 0 and "done 0, skipped 3, failed 0" in capsys.readouterr().out


def test_nsrr_layout_with_shhs_channel_names(tmp_path):
    root = tmp_path / "polysomnography"
    labels = labels_of(7)
    write_edf(root / "edfs/shhs1/shhs1-200001.edf", ["EEG(sec)", "EEG", "EMG"], 125.0, 600, 1)
    write_nsrr_xml(root / "annotations-events-nsrr/shhs1/shhs1-200001-nsrr.xml", labels)
    report = ingest_dataset(root, tmp_path / "s.zarr", progress=False)
    assert report.outcomes == {"shhs1-200001": "done"}
    assert "warning" not in report.summary()
    short = root / "annotations-events-nsrr/shhs1/shhs1-200002-nsrr.xml"
    write_edf(root / "edfs/shhs1/shhs1-200002.edf", ["EEG(sec)", "EEG", "EMG"], 125.0, 1200, 2)
    write_nsrr_xml(short, labels)  # 10 min scored of 20
    again = ingest_dataset(root, tmp_path / "s.zarr", progress=False)
    assert again.outcomes == {"shhs1-200001": "skipped", "shhs1-200002": "done"}
    assert (
        "warning shhs1-200002: shhs1-200002-nsrr.xml: the hypnogram ends 10.0 min before the end "
        "of shhs1-200002.edf" in again.summary()
    )
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["C4-A1", "C3-A2"]
    codes = expected_codes(labels)
    np.testing.assert_array_equal(store.stages("shhs1-200001"), codes[codes >= 0])
    assert store.record_attrs("shhs1-200001")["subject_id"] == "200001"


def test_a_record_missing_a_channel_fails_alone_and_is_reported(tmp_path):
    written = sleep_edf_dir(tmp_path / "data", 2)
    write_edf(tmp_path / "data/SC4001E0-PSG.edf", ["EEG Fpz-Cz", "EOG"], 100.0, 600, 3)
    report = ingest_dataset(tmp_path / "data", tmp_path / "s.zarr", progress=False)
    assert report.failed == ["SC4001E0"]
    entry = report.manifest["SC4001E0"]
    assert entry["reason"] == "missing_channel"
    assert "SC4001E0: the channel map 'sleep-edf' needs Pz-Oz" in entry["detail"]
    assert SleepStore(tmp_path / "s.zarr").record_ids() == sorted(set(written) - {"SC4001E0"})


def test_nothing_to_pair_is_refused_with_the_report(tmp_path):
    (tmp_path / "a.edf").write_text("x")
    with pytest.raises(InputError, match=r"(?s)root: .*nothing paired.*a\.edf: no hypnogram"):
        ingest_dataset(tmp_path, tmp_path / "s.zarr", progress=False)
    assert not (tmp_path / "s.zarr").exists()


def _store_contents(path: Path) -> dict[str, tuple]:
    store = SleepStore(path)
    return {
        record_id: (
            store.read_windows(record_id, 0, store.n_windows(record_id)),
            store.stages(record_id),
            store.start_times(record_id),
            store.record_attrs(record_id),
        )
        for record_id in store.record_ids()
    }


@pytest.mark.slow
def test_kill_9_mid_way_then_rerun_equals_an_uninterrupted_run(tmp_path):
    sleep_edf_dir(tmp_path / "data", 8, epochs=120)
    ingest_dataset(tmp_path / "data", tmp_path / "whole.zarr", progress=False)
    command = [
        sys.executable,
        "-m",
        "partnd.preprocessing.ingest_command",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "killed.zarr"),
        "--no-progress",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = tmp_path / "killed.zarr" / RECORDS_GROUP
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = (
            [p for p in records.iterdir() if not p.name.startswith(".")] if records.is_dir() else []
        )
        if done:
            break
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    stored = [p for p in records.iterdir() if not p.name.startswith(".")]
    assert 1 <= len(stored) < 8, "the kill must land mid-way"
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    whole, resumed = (
        _store_contents(tmp_path / "whole.zarr"),
        _store_contents(tmp_path / "killed.zarr"),
    )
    assert sorted(whole) == sorted(resumed)
    for record_id, (signal_a, stage_a, start_a, attrs_a) in whole.items():
        signal_b, stage_b, start_b, attrs_b = resumed[record_id]
        np.testing.assert_array_equal(signal_a, signal_b)
        np.testing.assert_array_equal(stage_a, stage_b)
        np.testing.assert_array_equal(start_a, start_b)
        assert attrs_a == attrs_b
    assert set(SleepStore(tmp_path / "killed.zarr").manifest) == set(whole)


@pytest.mark.slow
def test_two_processes_store_what_one_does(tmp_path):
    sleep_edf_dir(tmp_path / "data", 4)
    serial = ingest_dataset(tmp_path / "data", tmp_path / "one.zarr", progress=False)
    parallel = ingest_dataset(tmp_path / "data", tmp_path / "two.zarr", n_jobs=2, progress=False)
    assert serial.outcomes == parallel.outcomes == dict.fromkeys(serial.outcomes, "done")
    one, two = _store_contents(tmp_path / "one.zarr"), _store_contents(tmp_path / "two.zarr")
    assert sorted(one) == sorted(two)
    for record_id, (signal_a, stage_a, _, attrs_a) in one.items():
        np.testing.assert_array_equal(signal_a, two[record_id][0])
        np.testing.assert_array_equal(stage_a, two[record_id][1])
        assert attrs_a == two[record_id][3]


def test_bids_dataset_keeps_subject_and_session(tmp_path):
    root = tmp_path / "bids"
    for subject, session in (("01", "1"), ("01", "2")):
        stem = f"sub-{subject}_ses-{session}_task-sleep"
        folder = root / f"sub-{subject}" / f"ses-{session}" / "eeg"
        write_edf(folder / f"{stem}_eeg.edf", ["C3-M2", "C4-M1"], 256.0, 600, int(session))
        write_bids_events(folder / f"{stem}_events.tsv", labels_of(int(session)))
    report = ingest_dataset(root, tmp_path / "s.zarr", progress=False)
    assert report.outcomes == {
        "sub-01_ses-1_task-sleep": "done",
        "sub-01_ses-2_task-sleep": "done",
    }
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["C3-M2", "C4-M1"]
    for session in ("1", "2"):
        attrs = store.record_attrs(f"sub-01_ses-{session}_task-sleep")
        assert (attrs["subject_id"], attrs["session_id"]) == ("sub-01", f"ses-{session}")
        codes = expected_codes(labels_of(int(session)))
        np.testing.assert_array_equal(
            store.stages(f"sub-01_ses-{session}_task-sleep"), codes[codes >= 0]
        )


def test_full_disk_ends_a_dataset_run_in_one_line(tmp_path, monkeypatch, capsys):
    import xarray as xr

    from tests.test_recordings_ingest import _full_disk

    sleep_edf_dir(tmp_path / "data", 2)
    _full_disk(monkeypatch, xr.Dataset)
    status = main([str(tmp_path / "data"), "--out", str(tmp_path / "s.zarr"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1
    assert err[0].endswith("; nothing half-written was kept")
    assert not (tmp_path / "s.zarr").exists()
    assert not [p for p in tmp_path.rglob(".tmp-*")]
