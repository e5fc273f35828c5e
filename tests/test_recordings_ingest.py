"""Recordings as datasets hold them: hypnogram files of every format placed on the signal,
channel maps (rename, derive), any sampling rate, and the checks of a hypnogram against its
recording."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import mne
import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.store import SleepStore
from partnd.preprocessing.channel_maps import BUILTIN_CHANNEL_MAPS, parse_channel_map
from partnd.preprocessing.errors import MISSING_CHANNEL, RecordError
from partnd.preprocessing.ingest import SourceWarning, ingest_file
from tests.hypnogram_fixtures import (
    expected_codes,
    write_bids_events,
    write_edf_hypnogram,
    write_nsrr_xml,
    write_profusion_xml,
)

MEAS_DATE = datetime(2021, 3, 1, 22, 0, tzinfo=timezone.utc)
FREQUENCY = 3.0
LABELS = list("WW12234R2W")


def _save_raw(path, sfreq, names, signals_uv, meas_date=MEAS_DATE):
    info = mne.create_info(names, sfreq, "eeg")
    raw = mne.io.RawArray(np.asarray(signals_uv) * 1e-6, info, verbose="error")
    raw.set_meas_date(meas_date)
    raw.save(path, verbose="error")
    return path


def _sine(sfreq, seconds, frequency=FREQUENCY, amplitude=40.0):
    time = np.arange(round(seconds * sfreq)) / sfreq
    return amplitude * np.sin(2 * np.pi * frequency * time)


@pytest.mark.parametrize("sfreq", [100.0, 125.0, 128.0, 200.0, 256.0, 500.0])
def test_every_rate_keeps_windows_aligned_with_the_hypnogram(tmp_path, sfreq):
    seconds = 30.0 * len(LABELS) + 20.0
    recording = _save_raw(tmp_path / "night_raw.fif", sfreq, ["C4-A1"], [_sine(sfreq, seconds)])
    hypnogram = write_nsrr_xml(tmp_path / "night-nsrr.xml", LABELS)
    ingest_file(recording, hypnogram, tmp_path / "s.zarr", "night")
    store = SleepStore(tmp_path / "s.zarr")
    expected = expected_codes(LABELS)
    np.testing.assert_array_equal(store.stages("night"), expected[expected >= 0])
    starts = store.start_times("night")
    np.testing.assert_allclose(starts, 30.0 * np.flatnonzero(expected >= 0), atol=0.5 / sfreq)
    time = starts[:, None] + np.arange(3000)[None] / 100.0
    interior = (time[:, 0] > 20.0) & (time[:, -1] < seconds - 20.0)
    truth = 40.0 * np.sin(2 * np.pi * FREQUENCY * time)
    signal = store.read_windows("night", 0, len(starts))[:, 0]
    np.testing.assert_allclose(signal[interior], truth[interior], atol=0.1)
    assert store.record_attrs("night")["source_sfreq"] == sfreq


@pytest.mark.parametrize(
    ("writer", "name"),
    [
        (write_nsrr_xml, "n-nsrr.xml"),
        (write_profusion_xml, "n-profusion.xml"),
        (write_bids_events, "n_events.tsv"),
        (write_edf_hypnogram, "n-Hypnogram.edf"),
    ],
)
def test_every_format_places_its_stages_window_by_window(tmp_path, writer, name):
    recording = _save_raw(
        tmp_path / "n_raw.fif", 100.0, ["C3-A2"], [_sine(100.0, 30.0 * len(LABELS))]
    )
    ingest_file(recording, writer(tmp_path / name, LABELS), tmp_path / "s.zarr", "n")
    store = SleepStore(tmp_path / "s.zarr")
    expected = expected_codes(LABELS)
    np.testing.assert_array_equal(store.stages("n"), expected[expected >= 0])
    np.testing.assert_allclose(store.start_times("n"), 30.0 * np.flatnonzero(expected >= 0))


def test_twenty_second_epochs_are_stored_by_the_majority_rule(tmp_path):
    labels = list("W122RR33W")
    recording = _save_raw(tmp_path / "m_raw.fif", 256.0, ["C3"], [_sine(256.0, 180.0)])
    hypnogram = write_edf_hypnogram(tmp_path / "m Base.edf", labels, epoch_seconds=20.0)
    ingest_file(recording, hypnogram, tmp_path / "s.zarr", "m")
    np.testing.assert_array_equal(SleepStore(tmp_path / "s.zarr").stages("m"), [0, 2, 2, 4, 3, 0])


def test_channel_map_renames_and_derives_and_records_the_derivation(tmp_path):
    c4, m1 = _sine(200.0, 300.0, 3.0, 40.0), _sine(200.0, 300.0, 7.0, 10.0)
    recording = _save_raw(tmp_path / "ref_raw.fif", 200.0, ["C4", "M1", "EEG"], [c4, m1, c4])
    hypnogram = write_bids_events(tmp_path / "ref_events.tsv", list("W2222R2222"))
    ingest_file(
        recording,
        hypnogram,
        tmp_path / "s.zarr",
        "ref",
        channels="C4-M1=C4-M1,C4-A1=EEG",
    )
    store = SleepStore(tmp_path / "s.zarr")
    attrs = store.record_attrs("ref")
    assert store.channels == ["C4-M1", "C4-A1"]
    assert attrs["channel_derivations"] == {"C4-M1": "C4 - M1", "C4-A1": "EEG"}
    assert store.attrs["source"]["channel_map"] == "C4-M1=C4-M1,C4-A1=EEG"
    time = store.start_times("ref")[:, None] + np.arange(3000)[None] / 100.0
    interior = (time[:, 0] > 20.0) & (time[:, -1] < 280.0)
    derived = 40 * np.sin(2 * np.pi * 3 * time) - 10 * np.sin(2 * np.pi * 7 * time)
    signal = store.read_windows("ref", 0, len(time))
    np.testing.assert_allclose(signal[interior, 0], derived[interior], atol=0.1)


def test_builtin_maps_and_their_alternatives():
    shhs = BUILTIN_CHANNEL_MAPS["shhs"]
    for second in ("EEG(sec)", "EEG2", "EEG 2"):
        resolved = shhs.resolve(["SaO2", "EEG", second, "EOG(L)"], "shhs1-200001")
        assert resolved.descriptions == {"C4-A1": "EEG", "C3-A2": second}
    sleep_edf = BUILTIN_CHANNEL_MAPS["sleep-edf"].resolve(
        ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal"], "SC4001E0"
    )
    assert sleep_edf.descriptions == {"Fpz-Cz": "EEG Fpz-Cz", "Pz-Oz": "EEG Pz-Oz"}
    pc18 = BUILTIN_CHANNEL_MAPS["pc18"].resolve(
        ["F3", "F4", "C3", "C4", "O1", "O2", "M1", "M2"], "r"
    )
    assert pc18.descriptions["O2-M1"] == "O2 - M1"
    assert parse_channel_map("shhs") is BUILTIN_CHANNEL_MAPS["shhs"]
    assert parse_channel_map("C4-A1=EEG,C3-A2=EEG(sec)|EEG2").channels == (
        ("C4-A1", ("EEG",)),
        ("C3-A2", ("EEG(sec)", "EEG2")),
    )


def test_a_missing_channel_names_the_record_and_what_it_holds(tmp_path):
    recording = _save_raw(tmp_path / "x_raw.fif", 100.0, ["EEG", "EOG(L)"], [_sine(100, 60)] * 2)
    with pytest.raises(RecordError) as caught:
        ingest_file(recording, None, tmp_path / "s.zarr", "x", channels="shhs")
    assert caught.value.reason == MISSING_CHANNEL
    assert "x: the channel map 'shhs' needs C3-A2 (tried EEG(sec) | EEG2 | EEG 2)" in str(
        caught.value
    )
    assert "['EEG', 'EOG(L)']" in str(caught.value)
    assert not (tmp_path / "s.zarr").exists()


def test_hypnogram_of_another_date_is_refused(tmp_path):
    """Issue 43 item 7: a hypnogram of 1985 on a 2021 recording."""
    recording = _save_raw(tmp_path / "r_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 300)])
    other = write_edf_hypnogram(
        tmp_path / "other.edf", list("W2222R2222"), start=datetime(1990, 6, 1, 23, 0)
    )
    with pytest.raises(InputError, match=r"hypnogram of r_raw\.fif.*other\.edf.*1990-06-01"):
        ingest_file(recording, other, tmp_path / "s.zarr")
    from partnd.inference import Prediction

    labels = np.array([0, 2, 2, 4, 2, 0, 2, 2, 4, 0])
    written = Prediction(
        labels,
        np.eye(5)[labels],
        ["W", "N1", "N2", "N3", "REM"],
        onsets=125.4 + 30.0 * np.arange(10),
        start=datetime(1985, 1, 1, 23, 0, tzinfo=timezone.utc),
    )
    written.write_csv(tmp_path / "other.csv")
    with pytest.raises(InputError, match=r"other\.csv.*1985-01-01 23:02:05"):
        ingest_file(recording, tmp_path / "other.csv", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_hypnogram_longer_than_the_signal_is_refused_and_shorter_warned(tmp_path):
    recording = _save_raw(tmp_path / "r_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 300)])
    longer = write_profusion_xml(tmp_path / "longer.xml", list("W2") * 10)  # 600 s of 300
    with pytest.raises(InputError, match=r"longer\.xml.*5\.0 min past its end"):
        ingest_file(recording, longer, tmp_path / "s.zarr")
    long_recording = _save_raw(tmp_path / "l_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 1200)])
    shorter = write_profusion_xml(tmp_path / "shorter.xml", list("W2") * 5)  # 300 s of 1200
    with pytest.warns(SourceWarning, match=r"ends 15\.0 min before the end of l_raw\.fif"):
        attrs = ingest_file(long_recording, shorter, tmp_path / "s.zarr")
    assert attrs["n_windows"] == 10
    assert any("15.0 min" in warning for warning in attrs["source_warnings"])


def test_float_onset_csv_shows_mnes_warning(tmp_path):
    """Issue 43 item 7: MNE's warning that a CSV's float onsets were read as milliseconds (it
    only logs it) is shown with the refusal the misread onsets lead to."""
    recording = _save_raw(tmp_path / "r_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 300)], None)
    csv = tmp_path / "floats.csv"
    rows = [f"{30.0 * k},30.0,Sleep stage {'W' if k % 2 else '2'}" for k in range(10)]
    csv.write_text("onset,duration,description\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"floats\.csv.*MNE warned while reading: .*MILLISECONDS"):
        ingest_file(recording, csv, tmp_path / "s.zarr")


def _full_disk(monkeypatch, target):
    """Make ``target``'s ``to_zarr`` write a partial group and then fail with ENOSPC."""
    import errno

    def write_then_fail(self, store, *args, **kwargs):
        Path(store).mkdir(parents=True, exist_ok=True)
        (Path(store) / "zarr.json").write_text("{")
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(store) / "signal"))

    monkeypatch.setattr(target, "to_zarr", write_then_fail)


def test_full_disk_during_ingest_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """Issue 43 items 11 and 12 (ingest): no traceback, no .tmp-* directory, no new store."""
    import xarray as xr

    from partnd.preprocessing.ingest_command import main

    recording = _save_raw(tmp_path / "r_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 300)])
    hypnogram = write_profusion_xml(tmp_path / "r.xml", list("W2222R2222"))
    _full_disk(monkeypatch, xr.Dataset)
    status = main([str(recording), str(hypnogram), "--out", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert len(err) == 1
    assert err[0].startswith("partnd ingest: no space left on device while writing ")
    assert err[0].endswith("; nothing half-written was kept")
    assert not (tmp_path / "s.zarr").exists()
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_full_disk_while_creating_the_store_leaves_no_staging_directory(tmp_path, monkeypatch):
    import errno

    import zarr

    from partnd.preprocessing.ingest_command import main

    recording = _save_raw(tmp_path / "r_raw.fif", 100.0, ["Fpz-Cz"], [_sine(100, 300)])
    hypnogram = write_profusion_xml(tmp_path / "r.xml", list("W2222R2222"))

    def open_then_fail(store, *args, **kwargs):
        Path(store).mkdir(parents=True)
        raise OSError(errno.ENOSPC, "No space left on device", str(store))

    monkeypatch.setattr(zarr, "open_group", open_then_fail)
    assert main([str(recording), str(hypnogram), "--out", str(tmp_path / "s.zarr")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.xml", "r_raw.fif"]
