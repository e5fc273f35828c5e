"""Tests of the braindecode <-> partnd store conversion."""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest
from braindecode.datasets import BaseConcatDataset, RawDataset, WindowsDataset
from braindecode.preprocessing import create_windows_from_events

from partnd._validation import InputError
from partnd.datasets.braindecode_interop import from_braindecode, to_braindecode
from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.datasets.store import SleepStore, create_store, write_record

CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
SFREQ = 10.0
N_TIMES = 300


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bd") / "store.zarr"
    create_store(path, sfreq=SFREQ, channels=CHANNELS, window_seconds=30.0, metadata={})
    rng = np.random.default_rng(0)
    for record_id, subject, split, n_windows, first_start in [
        ("tr01", "s1", "training", 7, 60.05),  # half a sample off the grid, as PC18 windows
        ("tr02", "s2", "training", 5, 0.0),
        ("te01", "s3", "test", 4, 30.0),
    ]:
        signal = (rng.normal(size=(n_windows, 6, N_TIMES)) * 30).astype(np.float32)
        stage = (
            rng.integers(-1, 5, size=n_windows) if split == "training" else np.full(n_windows, -1)
        )
        write_record(
            path,
            record_id,
            signal,
            stage,
            first_start + np.arange(n_windows) * 30.0,
            attrs={"subject_id": subject, "split": split},
            chunk_windows=4,
        )
    return path


def test_to_braindecode_matches_our_dataset(store_path: Path) -> None:
    converted = to_braindecode(store_path, progress=False)
    assert isinstance(converted, BaseConcatDataset)
    assert all(isinstance(ds, WindowsDataset) for ds in converted.datasets)
    assert list(converted.description["record_id"]) == ["te01", "tr01", "tr02"]
    assert list(converted.description["subject"]) == ["s3", "s1", "s2"]
    assert list(converted.description["split"]) == ["test", "training", "training"]
    ours = SleepWindowDataset(store_path, normalize=False)
    assert len(converted) == len(ours) == 16
    for index in (0, 5, 9, 15):
        x, y, crop = converted[index]
        our_x, our_y = ours[index]
        np.testing.assert_allclose(x, our_x.numpy() * 1e-6, rtol=1e-6)  # volts, as MNE holds EEG
        assert y == our_y
        record_id, window = ours.locate(index)
        start = round(SleepStore(store_path).start_times(record_id)[window] * SFREQ)
        assert crop == [window, start, start + N_TIMES]
    store = SleepStore(store_path)
    for dataset in converted.datasets:
        record_id = dataset.description["record_id"]
        stored = store.read_windows(record_id, 0, store.n_windows(record_id))
        np.testing.assert_allclose(dataset.windows.get_data(units="uV"), stored, rtol=1e-12)
        assert 1e-6 < np.median(np.abs(dataset.windows.get_data())) < 1e-4  # tens of µV, in V
    normalized = to_braindecode(store_path, ["tr01"], normalize=True, progress=False)
    ours_normalized = SleepWindowDataset(store_path, records=["tr01"], normalize=True)
    np.testing.assert_allclose(normalized[3][0], ours_normalized[3][0].numpy(), atol=1e-6)


def test_round_trip_store_braindecode_store(store_path: Path, tmp_path: Path) -> None:
    converted = to_braindecode(store_path, ["tr01", "te01"], progress=False)
    original = SleepStore(store_path)
    np.testing.assert_array_equal(
        converted.datasets[0].windows.metadata["start_time"], original.start_times("tr01")
    )
    copy = from_braindecode(converted, tmp_path / "copy.zarr", sfreq=SFREQ, progress=False)
    assert copy.record_ids() == ["te01", "tr01"]
    assert copy.channels == CHANNELS and copy.sfreq == SFREQ and copy.n_times == N_TIMES
    for record_id in copy.record_ids():
        n = original.n_windows(record_id)
        np.testing.assert_array_equal(  # µV -> V -> µV: exact after float32 rounding
            copy.read_windows(record_id, 0, n), original.read_windows(record_id, 0, n)
        )
        np.testing.assert_array_equal(copy.stages(record_id), original.stages(record_id))
        np.testing.assert_array_equal(copy.start_times(record_id), original.start_times(record_id))
        for key in ("subject_id", "split"):
            assert copy.record_attrs(record_id)[key] == original.record_attrs(record_id)[key]
    resumed = from_braindecode(converted, tmp_path / "copy.zarr", sfreq=SFREQ, progress=False)
    assert resumed.record_ids() == ["te01", "tr01"]


def _sleep_edf_like(sfreq: float, factor: float = 1.0) -> BaseConcatDataset:
    """Two continuous recordings (about 10 µV in volts, times ``factor``) annotated with Sleep-EDF
    stage descriptions, windowed by braindecode's ``create_windows_from_events``
    (EEGWindowsDataset)."""
    rng = np.random.default_rng(3)
    stages = ["Sleep stage W", "Sleep stage 1", "Sleep stage 2", "Sleep stage 3", "Sleep stage R"]
    raws = []
    for subject in range(2):
        n_windows = 6
        info = mne.create_info(["Fpz-Cz", "Pz-Oz"], sfreq, ch_types="eeg")
        raw = mne.io.RawArray(
            rng.normal(size=(2, int(n_windows * 30 * sfreq))) * 1e-5 * factor,
            info,
            verbose="error",
        )
        descriptions = [stages[(subject + k) % 5] for k in range(n_windows)]
        raw.set_annotations(mne.Annotations(np.arange(n_windows) * 30.0, 30.0, descriptions))
        raws.append(RawDataset(raw, description={"subject": subject, "recording": 1}))
    mapping = {name: code for code, name in enumerate(stages)}
    window = int(30 * sfreq)
    return create_windows_from_events(
        BaseConcatDataset(raws),
        window_size_samples=window,
        window_stride_samples=window,
        mapping=mapping,
        preload=True,
    )


def test_from_braindecode_eeg_windows_dataset(tmp_path: Path) -> None:
    windows = _sleep_edf_like(sfreq=SFREQ)
    store = from_braindecode(windows, tmp_path / "edf.zarr", sfreq=SFREQ, progress=False)
    assert store.record_ids() == ["0-0", "1-1"]
    assert store.channels == ["Fpz-Cz", "Pz-Oz"]
    np.testing.assert_array_equal(store.stages("1-1"), [1, 2, 3, 4, 0, 1])
    assert store.record_attrs("0-0")["split"] == "training"
    x, y, _ = windows[8]
    np.testing.assert_allclose(store.read_windows("1-1", 2, 3)[0], x * 1e6, rtol=1e-6)
    assert y == 3
    np.testing.assert_allclose(store.start_times("0-0"), np.arange(6) * 30.0)
    by_name = from_braindecode(
        windows,
        tmp_path / "named.zarr",
        sfreq=SFREQ,
        stage_mapping={0: "W", 1: "N1", 2: "N2", 3: -1, 4: "REM"},
        progress=False,
    )
    np.testing.assert_array_equal(by_name.stages("1-1"), [1, 2, -1, 4, 0, 1])


def test_from_braindecode_stores_volts_as_microvolts_and_refuses_implausible_units(
    tmp_path: Path,
) -> None:
    volts = _sleep_edf_like(sfreq=SFREQ)
    x = volts[3][0]
    assert 1e-6 < np.median(np.abs(x)) < 1e-4  # EEG in volts, as MNE holds it
    store = from_braindecode(volts, tmp_path / "v.zarr", sfreq=SFREQ, progress=False)
    np.testing.assert_allclose(store.read_windows("0-0", 3, 4)[0], x * 1e6, rtol=1e-6)

    microvolts = _sleep_edf_like(sfreq=SFREQ, factor=1e6)  # e.g. scaled in a Preprocessor
    with pytest.raises(InputError, match=r"^scale: expected scale=1.0 .* look like µV"):
        from_braindecode(microvolts, tmp_path / "uv.zarr", sfreq=SFREQ, progress=False)
    store = from_braindecode(
        microvolts, tmp_path / "uv.zarr", sfreq=SFREQ, scale=1.0, progress=False
    )
    np.testing.assert_allclose(store.read_windows("0-0", 3, 4)[0], x * 1e6, rtol=1e-5)

    with pytest.raises(InputError, match=r"^scale: .* look like volts stored as µV"):
        from_braindecode(volts, tmp_path / "bad.zarr", sfreq=SFREQ, scale=1.0, progress=False)


def test_from_braindecode_rejects_mismatches(tmp_path: Path) -> None:
    windows = _sleep_edf_like(sfreq=SFREQ)
    with pytest.raises(InputError, match=r"^sfreq:"):
        from_braindecode(windows, tmp_path / "a.zarr", progress=False)
    with pytest.raises(InputError, match=r"^window_seconds:"):
        from_braindecode(
            windows, tmp_path / "b.zarr", sfreq=SFREQ, window_seconds=20.0, progress=False
        )
    with pytest.raises(InputError, match=r"^stage_mapping:"):
        from_braindecode(
            windows, tmp_path / "c.zarr", sfreq=SFREQ, stage_mapping={0: 0}, progress=False
        )
    with pytest.raises(InputError, match=r"^subject_key:"):
        from_braindecode(
            windows, tmp_path / "d.zarr", sfreq=SFREQ, subject_key="patient", progress=False
        )
    with pytest.raises(InputError, match=r"^records:"):
        to_braindecode(_any_store(tmp_path), ["nope"])


def _any_store(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.zarr"
    create_store(path, sfreq=SFREQ, channels=["C3"], window_seconds=30.0, metadata={})
    write_record(
        path,
        "r",
        np.zeros((1, 1, N_TIMES), dtype=np.float32),
        np.array([0]),
        np.array([0.0]),
        attrs={"subject_id": "s", "split": "training"},
    )
    return path
