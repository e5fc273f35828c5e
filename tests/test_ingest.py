"""Tests of generic ingestion of MNE recordings (in memory, FIF, EDF) into a partnd-sleep store."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import mne
import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.store import SleepStore
from partnd.preprocessing.errors import NON_FINITE, OUT_OF_RANGE, RecordError
from partnd.preprocessing.ingest import (
    annotation_sample_indices,
    annotations_to_sample_stages,
    epochs_to_sample_stages,
    ingest_file,
    ingest_raw,
    is_ten_twenty_name,
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
    mapped = {
        "eeg_channels": {"EEG Fpz-Cz": "Fpz-Cz", "EEG Pz-Oz": "Pz-Oz"},
        "hypnogram_onset": 7.3,
    }
    ingest_raw(raw, labels, tmp_path / "s.zarr", "night-2", **mapped)
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["Fpz-Cz", "Pz-Oz"]
    _check_windows(store, "night-2", 7.3)
    codes = np.array([0, 1, 2, 3, 3, -1, 4, -1, 2, 0])
    ingest_raw(raw, codes, tmp_path / "s.zarr", "night-3", **mapped)
    np.testing.assert_array_equal(
        store.read_windows("night-2", 0, 8), store.read_windows("night-3", 0, 8)
    )
    with pytest.raises(InputError, match=r"^store_path: .*\['channels'\] differ"):
        ingest_raw(raw, codes, tmp_path / "s.zarr", "night-4", hypnogram_onset=7.3)


def test_unlabelled_recording_keeps_all_windows(tmp_path):
    attrs = ingest_raw(_raw(), None, tmp_path / "s.zarr", "night-u")
    store = SleepStore(tmp_path / "s.zarr")
    assert attrs["split"] == "test" and attrs["n_labelled"] == 0
    assert (store.stages("night-u") == -1).all() and store.n_windows("night-u") == 13
    np.testing.assert_allclose(store.start_times("night-u"), 30.0 * np.arange(13))
    assert store.record_ids(labelled_only=True) == []


@pytest.mark.parametrize("meas_date", [MEAS_DATE, None], ids=["meas_date", "no_meas_date"])
def test_annotation_onsets_follow_mne_conventions(meas_date):
    full = _raw(meas_date=meas_date)
    full.set_annotations(_hypnogram(onset=17.3, orig_time=meas_date))
    raw = full.crop(tmin=10.0)  # raw.annotations keep MNE's time reference through the crop
    assert raw.first_samp == 2560
    codes = annotations_to_sample_stages(raw, raw.annotations)
    events, _ = mne.events_from_annotations(
        raw, event_id={"Sleep stage 1": 1, "Sleep stage R": 4}, verbose="error"
    )
    assert len(events) == 2
    for sample, code in zip(events[:, 0] - raw.first_samp, events[:, 2], strict=True):
        assert codes[sample] == code and codes[sample - 1] != code
    first = round(7.3 * SFREQ)
    assert codes[first] == 0 and codes[first - 1] == -1
    # orig_time None: seconds from the acquisition's sample 0 (10 s before this first sample)
    relative = _hypnogram(onset=17.3, orig_time=None)
    np.testing.assert_array_equal(annotations_to_sample_stages(raw, relative), codes)
    onsets = raw.annotations.onset
    np.testing.assert_array_equal(
        annotation_sample_indices(raw, raw.annotations, onsets),
        raw.time_as_index(onsets, use_rounding=True, origin=raw.annotations.orig_time)
        - (raw.first_samp if raw.annotations.orig_time is None else 0),
    )


# Stage encoded in the signal: a 10 Hz sine whose amplitude is that of the scored stage.
ENCODED_SFREQ = 100.0
STAGE_AMPLITUDES_UV = np.array([10.0, 25.0, 45.0, 70.0, 100.0])  # W, N1, N2, N3, REM
ENCODED_STAGES = np.array([0, 1, 2, 3, 4, 2, 0, 4, 1, 3, 2, 0])  # neighbours always differ
SCORING_ONSET = 61.25  # seconds after the acquisition's first sample
UNSCORED_UV = 5.0


def _stage_encoded_raw(meas_date: datetime | None) -> mne.io.RawArray:
    """440 s at 100 Hz: ``SCORING_ONSET`` s unscored (5 µV), then one 30 s epoch per stage of
    ``ENCODED_STAGES`` at its amplitude, annotated (on ``raw.annotations``) like a hypnogram."""
    n_times = round(440 * ENCODED_SFREQ)
    time = np.arange(n_times) / ENCODED_SFREQ
    amplitude = np.full(n_times, UNSCORED_UV)
    onsets = SCORING_ONSET + 30.0 * np.arange(len(ENCODED_STAGES))
    for onset, stage in zip(onsets, ENCODED_STAGES, strict=True):
        amplitude[round(onset * ENCODED_SFREQ) : round((onset + 30) * ENCODED_SFREQ)] = (
            STAGE_AMPLITUDES_UV[stage]
        )
    signal_uv = amplitude * np.sin(2 * np.pi * 10.0 * time)
    info = mne.create_info(["C3-M2", "C4-M1"], ENCODED_SFREQ, "eeg")
    raw = mne.io.RawArray(np.vstack([signal_uv, 0.5 * signal_uv]) * 1e-6, info, verbose="error")
    raw.set_meas_date(meas_date)
    names = ["W", "N1", "N2", "N3", "R"]
    descriptions = [f"Sleep stage {names[stage]}" for stage in ENCODED_STAGES]
    raw.set_annotations(mne.Annotations(onsets, 30.0, descriptions))  # from the first sample
    return raw


def _assert_labels_match_signal(store: SleepStore, record_id: str, first_time: float) -> None:
    """Every stored window's label is the stage encoded in its signal, at the exact time."""
    stages = store.stages(record_id)
    np.testing.assert_array_equal(stages, ENCODED_STAGES)
    expected_starts = SCORING_ONSET - first_time + 30.0 * np.arange(len(ENCODED_STAGES))
    np.testing.assert_allclose(store.start_times(record_id), expected_starts, atol=1e-9)
    signal = store.read_windows(record_id, 0, len(stages))[:, 0, 300:2700]  # skip 3 s edges
    encoded = np.abs(np.sqrt(2) * signal.std(axis=1)[:, None] - STAGE_AMPLITUDES_UV).argmin(1)
    np.testing.assert_array_equal(encoded, stages)


@pytest.mark.parametrize("crop", [0.0, 23.4], ids=["uncropped", "cropped"])
@pytest.mark.parametrize("meas_date", [MEAS_DATE, None], ids=["meas_date", "no_meas_date"])
def test_stored_labels_match_the_signal_with_or_without_meas_date(tmp_path, meas_date, crop):
    raw = _stage_encoded_raw(meas_date).crop(tmin=crop)
    assert raw.first_samp == round(crop * ENCODED_SFREQ)
    assert (raw.annotations.orig_time is None) == (meas_date is None)
    attrs = ingest_raw(raw, raw.annotations, tmp_path / "s.zarr", "night")
    assert attrs["first_window_sample"] == round((SCORING_ONSET - crop) * ENCODED_SFREQ)
    _assert_labels_match_signal(SleepStore(tmp_path / "s.zarr"), "night", crop)


def test_cropped_fif_without_meas_date_keeps_labels_on_their_signal(tmp_path):
    raw = _stage_encoded_raw(None).crop(tmin=23.4)
    raw.save(tmp_path / "night_raw.fif", verbose="error")
    fif = tmp_path / "night_raw.fif"
    assert mne.io.read_raw(fif, verbose="error").first_samp == 2340
    ingest_file(fif, fif, tmp_path / "s.zarr", "night")  # the FIF's own annotations
    _assert_labels_match_signal(SleepStore(tmp_path / "s.zarr"), "night", 23.4)


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
    assert not (tmp_path / "s.zarr").exists()  # the store this call created is removed again
    ingest_raw(_raw(), None, tmp_path / "s.zarr", "good")
    with pytest.raises(RecordError):
        ingest_raw(raw, None, tmp_path / "s.zarr", "bad")
    entry = SleepStore(tmp_path / "s.zarr").manifest["bad"]  # an existing store records it
    assert (entry["status"], entry["reason"]) == ("failed", NON_FINITE)
    assert "EEG Fpz-Cz" in entry["detail"]

    loud = _raw(seconds=100.0)
    ingest_raw(loud, None, tmp_path / "half.zarr", "quiet", dtype="float16")
    loud._data[:2] *= 2000.0  # 100 000 µV peaks: finite in float32, infinite in float16
    with pytest.raises(RecordError) as error:
        ingest_raw(loud, None, tmp_path / "half.zarr", "loud", dtype="float16")
    assert error.value.reason == OUT_OF_RANGE
    store = SleepStore(tmp_path / "half.zarr")
    assert store.record_ids() == ["quiet"] and store.manifest["loud"]["reason"] == OUT_OF_RANGE
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
    with pytest.raises(InputError, match=r"^path:"):
        ingest_file(tmp_path / "missing.edf", None, tmp_path / "s.zarr")
    (tmp_path / "notes.txt").write_text("not a recording")
    with pytest.raises(InputError, match=r"^path: .*mne.io.read_raw"):
        ingest_file(tmp_path / "notes.txt", None, tmp_path / "s.zarr")
    with pytest.raises(InputError, match=r"^hypnogram: .*mne.read_annotations"):
        ingest_file(tmp_path / "night_raw.fif", tmp_path / "notes.txt", tmp_path / "s.zarr")


def test_store_errors_name_store_path(tmp_path):
    raw = _raw(seconds=100.0)
    ingest_raw(raw, None, tmp_path / "s.zarr", "a", eeg_channels=["EEG Fpz-Cz"])
    raw.save(tmp_path / "night_raw.fif", verbose="error")
    with pytest.raises(InputError, match=r"^store_path: .*\['channels'\] differ"):
        ingest_file(tmp_path / "night_raw.fif", None, tmp_path / "s.zarr")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "data.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"^store_path: "):
        ingest_file(tmp_path / "night_raw.fif", None, tmp_path / "folder")


EDF_LIKE_CHANNELS = [
    "EEG Fpz-Cz",
    "EEG Pz-Oz",
    "EOG horizontal",
    "EMG submental",
    "squarewave",
    "C3-M2",
    "E1-M2",
    "F4-A1",
]


def test_default_channels_are_the_eeg_channels_with_ten_twenty_names(tmp_path, caplog):
    time = np.arange(round(100 * SFREQ)) / SFREQ
    data = 20e-6 * np.sin(2 * np.pi * (3.0 + np.arange(8)[:, None]) * time[None])
    info = mne.create_info(EDF_LIKE_CHANNELS, SFREQ, "eeg")  # as MNE types EDF channels
    raw = mne.io.RawArray(data, info, verbose="error")
    with caplog.at_level(logging.INFO, logger="partnd.preprocessing.ingest"):
        attrs = ingest_raw(raw, None, tmp_path / "s.zarr", "night")
    picked = ["EEG Fpz-Cz", "EEG Pz-Oz", "C3-M2", "F4-A1"]
    assert attrs["source_channels"] == picked and SleepStore(tmp_path / "s.zarr").channels == picked
    assert "picked ['EEG Fpz-Cz', 'EEG Pz-Oz', 'C3-M2', 'F4-A1']" in caplog.text
    assert "squarewave" in caplog.text  # named among those left out


def test_ten_twenty_names():
    for name in ["EEG Fpz-Cz", "C3-M2", "F4-A1", "FP1-A2", "Oz", "EEG Fp1-REF", "cz", "T3-A1"]:
        assert is_ten_twenty_name(name), name
    for name in ["E1-M2", "Chin1-Chin2", "EEG(sec)", "squarewave", "M1", "A1-A2", "ECG", "C3-X"]:
        assert not is_ten_twenty_name(name), name


PYEDFLIB_DATA = Path(__import__("pyedflib").__file__).parent / "data"


def test_edf_test_signals_are_refused_and_a_real_fp1_channel_is_taken(tmp_path):
    generator = PYEDFLIB_DATA / "test_generator.edf"  # squarewave, ramp, pulse, noise, sines
    with pytest.raises(InputError, match=r"^eeg_channels: .*10-20.*'squarewave', 'ramp'"):
        ingest_file(generator, None, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()
    real = Path(__import__("pyedflib").__file__).parent / "tests" / "data" / "test_subsecond.edf"
    if not real.is_file():
        pytest.skip("this pyedflib wheel ships no test_subsecond.edf")
    attrs = ingest_file(real, None, tmp_path / "s.zarr")  # one real 128 Hz Fp1 channel
    assert attrs["source_channels"] == ["Fp1"] and attrs["n_windows"] == 23


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
