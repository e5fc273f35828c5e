"""Tests of generic ingestion of MNE recordings (in memory, FIF, EDF) into a partnd-sleep store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import mne
import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.store import SleepStore
from preprocessing.errors import NON_FINITE, OUT_OF_RANGE, RecordError
from preprocessing.ingest import (
    annotations_to_sample_stages,
    epochs_to_sample_stages,
    ingest_file,
    ingest_raw,
)

SFREQ = 256.0
CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz"]
AMPLITUDES_UV = np.array([50.0, 30.0])
FREQUENCIES = np.array([3.0, 7.0])
MEAS_DATE = datetime(2020, 1, 2, 22, 0, tzinfo=timezone.utc)


def _raw(seconds: float = 400.0, meas_date: datetime | None = MEAS_DATE) -> mne.io.RawArray:
    time = np.arange(round(seconds * SFREQ)) / SFREQ
    data_uv = AMPLITUDES_UV[:, None] * np.sin(2 * np.pi * FREQUENCIES[:, None] * time[None])
    info = mne.create_info([*CHANNELS, "EMG submental"], SFREQ, ["eeg", "eeg", "emg"])
    raw = mne.io.RawArray(np.vstack([data_uv, data_uv[:1]]) * 1e-6, info, verbose="error")
    raw.set_meas_date(meas_date)
    return raw


def _hypnogram(onset: float, orig_time: datetime | None = MEAS_DATE) -> mne.Annotations:
    """Sleep-EDF style stage annotations (R&K), 30 s each, starting ``onset`` s after orig_time."""
    descriptions = [
        "Sleep stage W",
        "Sleep stage 1",
        "Sleep stage 2",
        "Sleep stage 3",
        "Sleep stage 4",
        "Sleep stage ?",
        "Sleep stage R",
        "Movement time",
        "Sleep stage 2",
        "Sleep stage W",
    ]
    onsets = onset + 30.0 * np.arange(len(descriptions))
    return mne.Annotations(onsets, [30.0] * len(descriptions), descriptions, orig_time=orig_time)


EXPECTED_STAGES = [0, 1, 2, 3, 3, 4, 2, 0]
EXPECTED_EPOCHS = [0, 1, 2, 3, 4, 6, 8, 9]


def _check_windows(store: SleepStore, record_id: str, onset: float) -> None:
    np.testing.assert_array_equal(store.stages(record_id), EXPECTED_STAGES)
    starts = onset + 30.0 * np.array(EXPECTED_EPOCHS)
    np.testing.assert_allclose(store.start_times(record_id), starts, atol=0.5 / SFREQ)
    window_time = store.start_times(record_id)[:, None] + np.arange(3000)[None] / 100.0
    signal = store.read_windows(record_id, 0, len(EXPECTED_STAGES))
    interior = (window_time[:, 0] > 20.0) & (window_time[:, -1] < 380.0)
    assert interior.sum() >= 5
    for channel in range(2):
        expected = AMPLITUDES_UV[channel] * np.sin(2 * np.pi * FREQUENCIES[channel] * window_time)
        np.testing.assert_allclose(signal[interior, channel], expected[interior], atol=0.05)


def test_ingest_raw_with_rk_annotations(tmp_path):
    raw = _raw()
    onset = 7.3
    attrs = ingest_raw(raw, _hypnogram(onset), tmp_path / "s.zarr", "night-1", subject_id="S01")
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == CHANNELS and store.sfreq == 100.0 and store.n_times == 3000
    assert store.attrs["filter"]["l_freq"] == 0.1 and store.attrs["resample"]["from_sfreq"] is None
    assert attrs["subject_id"] == "S01" and attrs["split"] == "training"
    assert attrs["source_sfreq"] == SFREQ and attrs["filter_numtaps"] == 8449
    assert attrs["first_window_sample"] == round(onset * SFREQ)
    assert attrs["dropped"] == {"incomplete": 1, "undefined": 5}  # 2 scored as such + 3 after
    _check_windows(store, "night-1", onset)
    entry = store.manifest["night-1"]
    assert entry["status"] == "done" and entry["n_kept"] == 8
    assert entry["source_checksum"] == attrs["source_checksum"]


def test_ingest_raw_with_epoch_labels_and_channel_mapping(tmp_path):
    raw = _raw()
    labels = ["W", "N1", "N2", "N3", "N3", "?", "REM", "MT", "N2", "W"]
    ingest_raw(
        raw,
        labels,
        tmp_path / "s.zarr",
        "night-2",
        eeg_channels={"EEG Fpz-Cz": "Fpz-Cz", "EEG Pz-Oz": "Pz-Oz"},
        hypnogram_onset=7.3,
    )
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["Fpz-Cz", "Pz-Oz"]
    _check_windows(store, "night-2", 7.3)
    codes = np.array([0, 1, 2, 3, 3, -1, 4, -1, 2, 0])
    ingest_raw(
        raw,
        codes,
        tmp_path / "s.zarr",
        "night-3",
        eeg_channels={"EEG Fpz-Cz": "Fpz-Cz", "EEG Pz-Oz": "Pz-Oz"},
        hypnogram_onset=7.3,
    )
    np.testing.assert_array_equal(
        store.read_windows("night-2", 0, 8), store.read_windows("night-3", 0, 8)
    )
    with pytest.raises(InputError, match="channels"):
        ingest_raw(raw, codes, tmp_path / "s.zarr", "night-4", hypnogram_onset=7.3)


def test_unlabelled_recording_keeps_all_windows(tmp_path):
    attrs = ingest_raw(_raw(), None, tmp_path / "s.zarr", "night-u")
    store = SleepStore(tmp_path / "s.zarr")
    assert attrs["split"] == "test" and attrs["n_labelled"] == 0
    assert (store.stages("night-u") == -1).all() and store.n_windows("night-u") == 13
    np.testing.assert_allclose(store.start_times("night-u"), 30.0 * np.arange(13))
    assert store.record_ids(labelled_only=True) == []


def test_annotation_onsets_follow_mne_conventions():
    raw = _raw().crop(tmin=10.0)
    assert raw.first_samp == 2560
    hypnogram = _hypnogram(onset=17.3)
    codes = annotations_to_sample_stages(raw, hypnogram)
    with_annotations = raw.copy().set_annotations(hypnogram)
    events, _ = mne.events_from_annotations(
        with_annotations, event_id={"Sleep stage 1": 1, "Sleep stage R": 4}, verbose="error"
    )
    for sample, code in zip(events[:, 0] - raw.first_samp, events[:, 2], strict=True):
        assert codes[sample] == code and codes[sample - 1] != code
    first = round(7.3 * SFREQ)
    assert codes[first] == 0 and codes[first - 1] == -1
    relative = _hypnogram(onset=7.3, orig_time=None)
    np.testing.assert_array_equal(annotations_to_sample_stages(raw, relative), codes)


def test_overlapping_different_stages_conflict():
    raw = _raw(seconds=100.0)
    annotations = mne.Annotations([0.0, 20.0], [30.0, 30.0], ["W", "N2"])
    codes = annotations_to_sample_stages(raw, annotations)
    assert codes[round(10 * SFREQ)] == 0
    assert codes[round(25 * SFREQ)] == -2
    assert codes[round(40 * SFREQ)] == 2
    assert codes[round(60 * SFREQ)] == -1


def test_epochs_to_sample_stages_and_its_checks():
    codes = epochs_to_sample_stages(np.array([0, 4]), 10, 0.2, onset=5.0, epoch_seconds=10.0)
    np.testing.assert_array_equal(codes, [-1, 0, 0, 4, 4, -1, -1, -1, -1, -1])
    with pytest.raises(InputError, match="hypnogram"):
        epochs_to_sample_stages(np.array([0, 7]), 10, 1.0)
    with pytest.raises(InputError, match="hypnogram"):
        epochs_to_sample_stages(np.array([0.5]), 10, 1.0)


def test_ingest_rejects_bad_input(tmp_path):
    raw = _raw()
    raw._data[0, 100] = np.nan
    with pytest.raises(RecordError) as error:
        ingest_raw(raw, None, tmp_path / "s.zarr", "bad")
    assert error.value.reason == NON_FINITE
    with pytest.raises(InputError, match="eeg_channels"):
        ingest_raw(_raw(), None, tmp_path / "s.zarr", "bad", eeg_channels=["C3"])
    ingest_raw(_raw(), None, tmp_path / "t.zarr", "once")
    with pytest.raises(InputError, match="record_id"):
        ingest_raw(_raw(), None, tmp_path / "t.zarr", "once")


def test_failures_are_written_to_the_manifest_and_float16_overflow_is_refused(tmp_path):
    raw = _raw()
    raw._data[0, 100] = np.nan
    with pytest.raises(RecordError):
        ingest_raw(raw, None, tmp_path / "s.zarr", "bad")
    entry = SleepStore(tmp_path / "s.zarr").manifest["bad"]
    assert (entry["status"], entry["reason"]) == ("failed", NON_FINITE)
    assert "EEG Fpz-Cz" in entry["detail"]

    loud = _raw(seconds=100.0)
    loud._data[:2] *= 2000.0  # 100 000 µV peaks: finite in float32, infinite in float16
    with pytest.raises(RecordError) as error:
        ingest_raw(loud, None, tmp_path / "half.zarr", "loud", dtype="float16")
    assert error.value.reason == OUT_OF_RANGE
    store = SleepStore(tmp_path / "half.zarr")
    assert store.record_ids() == [] and store.manifest["loud"]["reason"] == OUT_OF_RANGE
    ingest_raw(loud, None, tmp_path / "single.zarr", "loud")
    assert np.abs(SleepStore(tmp_path / "single.zarr").read_windows("loud", 0, 3)).max() > 9e4


def test_ingest_file_reads_fif_and_annotation_files(tmp_path):
    raw = _raw()
    raw.save(tmp_path / "night_raw.fif", verbose="error")
    _hypnogram(7.3).save(tmp_path / "night-annot.fif", verbose="error")
    ingest_file(tmp_path / "night_raw.fif", tmp_path / "night-annot.fif", tmp_path / "s.zarr")
    store = SleepStore(tmp_path / "s.zarr")
    assert store.record_ids() == ["night_raw"]
    _check_windows(store, "night_raw", 7.3)
    with pytest.raises(InputError, match="path"):
        ingest_file(tmp_path / "missing.edf", None, tmp_path / "s.zarr")


def test_ingest_file_reads_edf(tmp_path):
    pytest.importorskip("edfio")
    raw = _raw()
    raw.set_annotations(_hypnogram(7.3))
    mne.export.export_raw(tmp_path / "night.edf", raw, fmt="edf")
    annotations = mne.read_annotations(tmp_path / "night.edf")
    ingest_file(tmp_path / "night.edf", annotations, tmp_path / "s.zarr", eeg_channels=CHANNELS)
    _check_windows(SleepStore(tmp_path / "s.zarr"), "night", 7.3)


def test_meas_date_offsets_are_applied(tmp_path):
    raw = _raw()
    shifted = _hypnogram(onset=0.0, orig_time=MEAS_DATE + timedelta(seconds=7.3))
    ingest_raw(raw, shifted, tmp_path / "s.zarr", "night")
    _check_windows(SleepStore(tmp_path / "s.zarr"), "night", 7.3)
