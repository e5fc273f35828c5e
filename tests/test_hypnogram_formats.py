"""Each hypnogram reader against a fixture written from its format's specification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.hypnogram_formats import detect_format, read_hypnogram
from tests.hypnogram_fixtures import (
    expected_codes,
    write_bids_events,
    write_edf_hypnogram,
    write_nsrr_xml,
    write_profusion_xml,
)

LABELS = list("WW1122223344R22RRMW??2W")
"""Every R&K label, runs of several epochs, movement and unscored epochs inside the night."""


def test_nsrr_xml_reads_stages_runs_and_keeps_other_events(tmp_path):
    events = [
        ("Arousals|Arousals", "Arousal|Arousal ()", 95.0, 12.5, "EEG"),
        ("Respiratory|Respiratory", "Obstructive apnea|Obstructive Apnea", 300.0, 21.0, "THOR RES"),
        ("Respiratory|Respiratory", "SpO2 desaturation|SpO2 desaturation", 320.0, 30.0, "SaO2"),
    ]
    path = write_nsrr_xml(tmp_path / "shhs1-200001-nsrr.xml", LABELS, other_events=events)
    assert detect_format(path) == "nsrr-xml"
    hypnogram = read_hypnogram(path)
    np.testing.assert_array_equal(hypnogram.stages, expected_codes(LABELS))
    np.testing.assert_array_equal(hypnogram.window_stages(), expected_codes(LABELS))
    assert (hypnogram.epoch_seconds, hypnogram.onset, hypnogram.start) == (30.0, 0.0, None)
    assert hypnogram.clock_time == "00.00.00 22.00.00"
    kept = [(e.description, e.onset, e.duration, e.location) for e in hypnogram.events]
    assert kept == [(concept, start, duration, loc) for _, concept, start, duration, loc in events]


def test_profusion_xml_maps_as_its_spec_and_as_yasa_except_nine(tmp_path):
    yasa = pytest.importorskip("yasa")
    path = write_profusion_xml(tmp_path / "night-profusion.xml", LABELS)
    assert detect_format(path) == "profusion-xml"
    hypnogram = read_hypnogram(path)
    np.testing.assert_array_equal(hypnogram.stages, expected_codes(LABELS))
    # YASA 0.8.1 reads the same stages, except 9 (our "?") which it calls wake; it refuses 6
    without_movement = [label for label in LABELS if label != "M"]
    yasa_path = write_profusion_xml(tmp_path / "no-movement.xml", without_movement)
    theirs = yasa.Hypnogram.from_profusion(yasa_path).as_int().to_numpy()
    ours = read_hypnogram(yasa_path).stages
    scored = ours >= 0
    assert (theirs[~scored] == 0).all()
    yasa_code = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}  # YASA: 0 W, 1 N1, 2 N2, 3 N3, 4 REM
    np.testing.assert_array_equal([yasa_code[c] for c in theirs[scored]], ours[scored])
    overridden = read_hypnogram(path, stage_mapping={"0": 0, "2": 2, "9": 0})
    assert overridden.stages[LABELS.index("?")] == 0
    assert overridden.stages[LABELS.index("1")] == -1


def test_edf_plus_hypnogram_sleep_edf_style(tmp_path):
    path = write_edf_hypnogram(tmp_path / "SC4001EC-Hypnogram.edf", LABELS)
    assert detect_format(path) == "annotations"
    hypnogram = read_hypnogram(path)
    np.testing.assert_array_equal(hypnogram.stages, expected_codes(LABELS))
    assert hypnogram.file_start is not None
    assert hypnogram.file_start.isoformat() == "2021-03-01T22:00:00+00:00"
    assert {e.description for e in hypnogram.events} == {"Movement time", "Sleep stage ?"}


@pytest.mark.parametrize("column", ["trial_type", "value"])
def test_bids_events(tmp_path, column):
    path = write_bids_events(tmp_path / "sub-01_task-sleep_events.tsv", LABELS, column=column)
    hypnogram = read_hypnogram(path)
    np.testing.assert_array_equal(hypnogram.stages, expected_codes(LABELS))
    assert hypnogram.format == "bids-events" and hypnogram.start is None


def test_twenty_second_epochs_take_the_stage_covering_most_of_each_window(tmp_path):
    # 20 s epochs: window k covers epochs 3k/2 ...; two windows span three epochs
    labels = list("W122RR33W")
    path = write_edf_hypnogram(tmp_path / "01-01-0001 Base.edf", labels, epoch_seconds=20.0)
    hypnogram = read_hypnogram(path)
    assert hypnogram.epoch_seconds == 20.0
    # [0,30): W 20 s, N1 10 s -> W; [30,60): N1 10 s, N2 20 s -> N2; [60,90): N2 20, R 10 -> N2;
    # [90,120): R 10 + R 20 -> R; [120,150): N3 20 + N3 10 -> N3; [150,180): N3 10, W 20 -> W
    np.testing.assert_array_equal(hypnogram.window_stages(), [0, 2, 2, 4, 3, 0])


def test_ten_second_epochs_tie_stays_unscored(tmp_path):
    labels = list("12112?222")
    path = write_bids_events(tmp_path / "x_events.tsv", labels, epoch_seconds=10.0)
    np.testing.assert_array_equal(read_hypnogram(path).window_stages(), [1, -1, 2])


def test_sixty_second_epochs_give_two_windows_each(tmp_path):
    path = write_profusion_xml(tmp_path / "p.xml", list("W2R"), epoch_seconds=60.0)
    np.testing.assert_array_equal(read_hypnogram(path).window_stages(), [0, 0, 2, 2, 4, 4])


def test_refusals_name_the_file(tmp_path):
    bad_epoch = write_profusion_xml(tmp_path / "seven.xml", list("W2"), epoch_seconds=7.0)
    with pytest.raises(InputError, match=r"divides 60 s.*seven\.xml.* 7 s"):
        read_hypnogram(bad_epoch)
    empty = write_nsrr_xml(tmp_path / "empty-nsrr.xml", [])
    with pytest.raises(InputError, match=r"Stages\|Stages.*empty-nsrr\.xml.*none"):
        read_hypnogram(empty)
    overlap = tmp_path / "overlap_events.tsv"
    overlap.write_text("onset\tduration\ttrial_type\n0\t60\tW\n30\t30\tN2\n")
    with pytest.raises(InputError, match=r"not overlap.*overlap_events\.tsv.*overlap at 30 s"):
        read_hypnogram(overlap)
    other = tmp_path / "other.xml"
    other.write_text("<Something/>")
    with pytest.raises(InputError, match=r"other\.xml.*root element 'Something'"):
        read_hypnogram(other)


PYEDFLIB_FILES = sorted(
    {
        path.name: path for path in Path(__import__("pyedflib").__file__).parent.rglob("*.edf")
    }.values()
)


@pytest.mark.parametrize("path", PYEDFLIB_FILES, ids=lambda path: path.name)
def test_real_edf_files_without_stages_are_refused_naming_their_events(path):
    """pyedflib's shipped EDFs (real recordings, no sleep stages) read, and are refused as
    hypnograms with the descriptions they hold."""
    with pytest.raises(InputError, match=rf"stage annotations.*{path.name}.* with descriptions"):
        read_hypnogram(path)


def _mne_exported_night(tmp_path, n=120):
    """An EDF+ of 1 h at 256 Hz with stage annotations, exported by MNE (edfio): a file that
    mne.read_annotations fails to decode (UnicodeDecodeError, MNE 1.x)."""
    import datetime

    import mne

    info = mne.create_info(["C3-M2", "C4-M1", "E1-M2"], 256.0, ["eeg", "eeg", "eog"])
    data = np.random.default_rng(0).standard_normal((3, 256 * 30 * n)) * 20e-6
    raw = mne.io.RawArray(data, info, verbose="error")
    raw.set_meas_date(datetime.datetime(2021, 3, 1, 22, 0, tzinfo=datetime.timezone.utc))
    labels = ["Sleep stage W", "Sleep stage 2", "Sleep stage R"] * (n // 3)
    raw.set_annotations(mne.Annotations(np.arange(n) * 30.0, [30.0] * n, labels))
    path = tmp_path / "night.edf"
    mne.export.export_raw(path, raw, verbose="error")
    return path


def test_edf_exported_by_mne_reads_through_read_raw_edf(tmp_path):
    """Issue 43 item 21: mne.read_annotations fails to decode MNE's own EDF+ export."""
    import mne

    path = _mne_exported_night(tmp_path)
    with pytest.raises(UnicodeDecodeError):
        mne.read_annotations(path)
    np.testing.assert_array_equal(read_hypnogram(path).stages, [0, 2, 4] * 40)


@pytest.mark.slow
def test_mne_exported_recording_is_its_own_hypnogram(tmp_path):
    from partnd.datasets.store import SleepStore
    from partnd.preprocessing.ingest import ingest_file

    path = _mne_exported_night(tmp_path)
    ingest_file(path, path, tmp_path / "s.zarr")  # the recording as its own HYPNOGRAM
    np.testing.assert_array_equal(SleepStore(tmp_path / "s.zarr").stages("night"), [0, 2, 4] * 40)
