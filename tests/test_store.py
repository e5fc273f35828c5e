"""Tests of the partnd-sleep zarr store: creation, atomic record writes, the SleepStore reader."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import zarr

from partnd._validation import InputError
from partnd.datasets.store import (
    FORMAT_NAME,
    FORMAT_VERSION,
    STAGE_NAMES,
    SleepStore,
    create_store,
    remove_incomplete_records,
    write_record,
)

CHANNELS = ["F3-M2", "C4-M1"]
N_TIMES = 3000


def _create(path, **overrides):
    arguments = {
        "sfreq": 100.0,
        "channels": CHANNELS,
        "window_seconds": 30.0,
        "stage_names": STAGE_NAMES,
        "metadata": {"filter": {"type": "fir", "l_freq": 0.1}, "source": {"dataset": "test"}},
    }
    arguments.update(overrides)
    return create_store(path, **arguments)


def _record_dirs(path):
    return sorted(entry.name for entry in (path / "records").iterdir() if entry.is_dir())


def _record(n_windows, seed):
    rng = np.random.default_rng(seed)
    signal = (rng.standard_normal((n_windows, len(CHANNELS), N_TIMES)) * 30).astype(np.float32)
    stage = rng.integers(0, 5, n_windows).astype(np.int8)
    start_time = 17.5 + 30.0 * np.arange(n_windows)
    return signal, stage, start_time


@pytest.fixture
def store_with_records(tmp_path):
    path = tmp_path / "store.zarr"
    _create(path)
    written = {}
    for index, (record_id, split, n_windows) in enumerate(
        [("tr-b", "training", 70), ("tr-a", "training", 5), ("te-a", "test", 3)]
    ):
        signal, stage, start_time = _record(n_windows, index)
        if split == "test":
            stage = np.full(n_windows, -1, dtype=np.int8)
        write_record(
            path,
            record_id,
            signal,
            stage,
            start_time,
            attrs={"subject_id": f"subject-{index}", "split": split, "dropped": {"mixed": index}},
        )
        written[record_id] = (signal, stage, start_time)
    return path, written


def test_create_store_writes_root_attributes(tmp_path):
    store = _create(tmp_path / "s.zarr")
    assert store.attrs["format"] == FORMAT_NAME
    assert store.attrs["format_version"] == FORMAT_VERSION
    assert store.sfreq == 100.0 and store.n_times == N_TIMES and store.window_seconds == 30.0
    assert store.channels == CHANNELS
    assert store.stage_names == ["W", "N1", "N2", "N3", "REM"]
    assert store.attrs["filter"] == {"type": "fir", "l_freq": 0.1}
    assert "created" in store.attrs
    assert store.record_ids() == []
    assert store.manifest == {}
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    assert group.metadata.zarr_format == 3
    assert "records" in group


def test_create_store_reopens_same_configuration_and_rejects_another(tmp_path):
    path = tmp_path / "s.zarr"
    created = _create(path).attrs["created"]
    assert _create(path).attrs["created"] == created
    with pytest.raises(InputError, match="channels"):
        _create(path, channels=["F3-M2", "O1-M2"])
    with pytest.raises(InputError, match="filter"):
        _create(path, metadata={"filter": {"type": "iir"}, "source": {"dataset": "test"}})
    replaced = _create(path, channels=["O1-M2"], overwrite=True)
    assert replaced.channels == ["O1-M2"]


def test_create_store_validates_arguments(tmp_path):
    with pytest.raises(InputError, match="window_seconds"):
        _create(tmp_path / "a.zarr", window_seconds=30.005)
    with pytest.raises(InputError, match="channels"):
        _create(tmp_path / "b.zarr", channels=["a", "a"])
    with pytest.raises(InputError, match="metadata"):
        _create(tmp_path / "c.zarr", metadata={"sfreq": 3})
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileExistsError, match="not a zarr store"):
        _create(tmp_path / "plain")


def test_sleep_store_rejects_missing_and_foreign_stores(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        SleepStore(tmp_path / "nothing.zarr")
    zarr.open_group(tmp_path / "other.zarr", mode="w", attributes={"format": "something-else"})
    with pytest.raises(InputError, match="format"):
        SleepStore(tmp_path / "other.zarr")
    zarr.open_group(
        tmp_path / "future.zarr", mode="w", attributes={"format": FORMAT_NAME, "format_version": 99}
    )
    with pytest.raises(InputError, match="format_version"):
        SleepStore(tmp_path / "future.zarr")


def test_reader_returns_what_was_written(store_with_records):
    path, written = store_with_records
    store = SleepStore(path)
    assert store.record_ids() == ["te-a", "tr-a", "tr-b"]
    for record_id, (signal, stage, start_time) in written.items():
        assert store.n_windows(record_id) == len(stage)
        np.testing.assert_array_equal(store.stages(record_id), stage)
        assert store.stages(record_id).dtype == np.int8
        np.testing.assert_array_equal(store.start_times(record_id), start_time)
        block = store.read_windows(record_id, 1, len(stage))
        assert block.dtype == np.float32
        np.testing.assert_array_equal(block, signal[1:])
    attrs = store.record_attrs("tr-b")
    assert attrs["subject_id"] == "subject-0" and attrs["split"] == "training"
    assert attrs["n_windows"] == 70 and attrs["n_labelled"] == 70 and attrs["sfreq"] == 100.0
    assert attrs["dropped"] == {"mixed": 0} and attrs["record_id"] == "tr-b"
    assert store.record_attrs("te-a")["n_labelled"] == 0


def test_record_ids_filters_by_split_and_labels(store_with_records):
    store = SleepStore(store_with_records[0])
    assert store.record_ids(split="training") == ["tr-a", "tr-b"]
    assert store.record_ids(split="test") == ["te-a"]
    assert store.record_ids(labelled_only=True) == ["tr-a", "tr-b"]
    assert store.record_ids(split="test", labelled_only=True) == []
    assert store.record_ids(split="validation") == []


def test_open_record_is_a_lazy_dataset_with_coordinates(store_with_records):
    path, written = store_with_records
    dataset = SleepStore(path).open_record("tr-a")
    signal, stage, start_time = written["tr-a"]
    assert dataset["signal"].dims == ("window", "channel", "time")
    assert list(dataset["channel"].values) == CHANNELS
    np.testing.assert_array_equal(dataset["window"].values, np.arange(5))
    np.testing.assert_array_equal(dataset["signal"].sel(channel="C4-M1").values, signal[:, 1])
    np.testing.assert_array_equal(dataset["stage"].values, stage)
    np.testing.assert_array_equal(dataset["start_time"].values, start_time)
    assert dataset.attrs["subject_id"] == "subject-1"


def test_signal_array_and_chunking(store_with_records):
    store = SleepStore(store_with_records[0])
    array = store.signal_array("tr-b")
    assert array.shape == (70, 2, N_TIMES)
    assert array.chunks == (64, 2, N_TIMES)
    assert store.chunk_windows("tr-b") == 64
    assert store.chunk_windows("tr-a") == 5


def test_read_windows_checks_bounds(store_with_records):
    store = SleepStore(store_with_records[0])
    with pytest.raises(InputError, match="start, stop"):
        store.read_windows("tr-a", 3, 6)
    with pytest.raises(InputError, match="start, stop"):
        store.read_windows("tr-a", 2, 2)
    with pytest.raises(KeyError, match="nope"):
        store.read_windows("nope", 0, 1)


def test_float16_records_read_back_as_float32(tmp_path):
    path = tmp_path / "s.zarr"
    _create(path)
    signal, stage, start_time = _record(4, 7)
    write_record(
        path,
        "r",
        signal,
        stage,
        start_time,
        attrs={"subject_id": "s", "split": "x"},
        dtype="float16",
    )
    store = SleepStore(path)
    assert store.signal_array("r").dtype == np.float16
    block = store.read_windows("r", 0, 4)
    assert block.dtype == np.float32
    np.testing.assert_array_equal(block, signal.astype(np.float16).astype(np.float32))
    assert not np.array_equal(block, signal)


def test_float16_refuses_values_it_would_turn_into_infinity(tmp_path):
    path = tmp_path / "s.zarr"
    _create(path)
    signal, stage, start_time = _record(2, 1)
    attrs = {"subject_id": "s", "split": "x"}
    signal[1, 0, 3] = 65504.0  # float16's largest finite value is stored as it is
    write_record(path, "edge", signal, stage, start_time, attrs=attrs, dtype="float16")
    assert SleepStore(path).read_windows("edge", 1, 2)[0, 0, 3] == 65504.0
    signal[1, 0, 3] = -70000.0
    with pytest.raises(InputError, match=r"^signal: .*float16.*70000"):
        write_record(path, "loud", signal, stage, start_time, attrs=attrs, dtype="float16")
    write_record(path, "loud", signal, stage, start_time, attrs=attrs)
    assert SleepStore(path).read_windows("loud", 1, 2)[0, 0, 3] == -70000.0
    assert SleepStore(path).record_ids() == ["edge", "loud"]


def test_write_record_validates_inputs(tmp_path):
    path = tmp_path / "s.zarr"
    _create(path)
    signal, stage, start_time = _record(3, 0)
    attrs = {"subject_id": "s", "split": "training"}
    with pytest.raises(InputError, match="signal"):
        write_record(path, "r", signal[:, :1], stage, start_time, attrs=attrs)
    with pytest.raises(InputError, match="stage"):
        write_record(path, "r", signal, stage[:2], start_time, attrs=attrs)
    with pytest.raises(InputError, match="stage"):
        write_record(path, "r", signal, np.array([0, 5, 1], dtype=np.int8), start_time, attrs=attrs)
    with pytest.raises(InputError, match="record_id"):
        write_record(path, ".hidden", signal, stage, start_time, attrs=attrs)
    with pytest.raises(InputError, match="attrs"):
        write_record(path, "r", signal, stage, start_time, attrs={"split": "x"})
    with pytest.raises(InputError, match="dtype"):
        write_record(path, "r", signal, stage, start_time, attrs=attrs, dtype="int16")
    bad = signal.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(InputError, match="finite"):
        write_record(path, "r", bad, stage, start_time, attrs=attrs)
    assert SleepStore(path).record_ids() == []
    assert _record_dirs(path) == []


def test_write_record_refuses_to_replace_unless_overwrite(tmp_path):
    path = tmp_path / "s.zarr"
    _create(path)
    first, stage, start_time = _record(3, 0)
    second = first + 1.0
    attrs = {"subject_id": "s", "split": "training"}
    write_record(path, "r", first, stage, start_time, attrs=attrs)
    with pytest.raises(FileExistsError, match="overwrite"):
        write_record(path, "r", second, stage, start_time, attrs=attrs)
    write_record(path, "r", second, stage, start_time, attrs=attrs, overwrite=True)
    np.testing.assert_array_equal(SleepStore(path).read_windows("r", 0, 3), second)
    assert _record_dirs(path) == ["r"]


def test_incomplete_records_are_invisible_and_removable(store_with_records):
    path, _ = store_with_records
    leftover = path / "records" / ".tmp-tr-c-0123"
    leftover.mkdir()
    (leftover / "zarr.json").write_text(json.dumps({"node_type": "group", "zarr_format": 3}))
    (path / "records" / ".old-tr-a-99").mkdir()
    store = SleepStore(path)
    assert store.record_ids() == ["te-a", "tr-a", "tr-b"]
    with pytest.raises(KeyError):
        store.record_attrs(".tmp-tr-c-0123")
    assert remove_incomplete_records(path) == [".old-tr-a-99", ".tmp-tr-c-0123"]
    assert _record_dirs(path) == ["te-a", "tr-a", "tr-b"]


def test_store_pickles_without_caches(store_with_records):
    store = SleepStore(store_with_records[0])
    expected = store.read_windows("tr-b", 60, 70)
    clone = pickle.loads(pickle.dumps(store))
    assert clone._array_cache == {} and clone._attrs_cache == {}
    np.testing.assert_array_equal(clone.read_windows("tr-b", 60, 70), expected)


def test_manifest_property_reads_manifest_json(store_with_records):
    path, _ = store_with_records
    (path / "manifest.json").write_text(json.dumps({"tr-a": {"status": "done"}}))
    assert SleepStore(path).manifest == {"tr-a": {"status": "done"}}


def test_contiguous_runs_split_where_windows_were_dropped(tmp_path):
    path = tmp_path / "store.zarr"
    _create(path)
    signal, stage, _ = _record(7, 0)
    start_time = 10.0 + 30.0 * np.array([0, 1, 2, 5, 6, 8, 9])  # windows 3-4 and 7 dropped
    write_record(path, "gappy", signal, stage, start_time, attrs={"subject_id": "s", "split": "x"})
    write_record(
        path, "whole", signal, stage, 30.0 * np.arange(7), attrs={"subject_id": "t", "split": "x"}
    )
    store = SleepStore(path)
    assert store.contiguous_runs("gappy") == [(0, 3), (3, 5), (5, 7)]
    assert store.contiguous_runs("whole") == [(0, 7)]
