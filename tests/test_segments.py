"""Segments of consecutive windows: contiguity, no record or gap crossing, exact stored values,
stride and count, batched reads, pickling, and conversion of other sleep data."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from partnd._validation import InputError
from partnd.datasets.segments import SleepSegmentDataset, as_segment_dataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.store import SleepStore, create_store, write_record

CHANNELS = ["F3-M2", "C4-M1", "O2-M1"]
SFREQ, WINDOW = 1.0, 30  # 30 samples per 30 s window
CHUNK = 4
# record id -> (subject, split, window start times in units of 30 s; a jump is a gap)
RECORDS = {
    "tr01": ("s1", "training", list(range(14))),  # one run of 14
    "tr02": ("s2", "training", [*range(5), *range(7, 15)]),  # runs of 5 and 8
    "te01": ("s3", "test", list(range(3))),  # too short for any segment of 4
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A store whose every sample encodes (record, window, channel, sample)."""
    path = tmp_path_factory.mktemp("segments") / "store.zarr"
    create_store(path, sfreq=SFREQ, channels=CHANNELS, window_seconds=30.0, metadata={})
    written = {}
    for number, (record_id, (subject, split, slots)) in enumerate(RECORDS.items()):
        n = len(slots)
        values = (
            1000.0 * number
            + 10.0 * np.arange(n)[:, None, None]
            + np.arange(len(CHANNELS))[None, :, None]
            + np.linspace(0.0, 0.9, WINDOW)[None, None, :]
        ).astype(np.float32)
        stage = np.full(n, -1 if split == "test" else 2, dtype=np.int8)
        write_record(
            path,
            record_id,
            values,
            stage,
            30.0 * np.asarray(slots, dtype=np.float64),
            attrs={"subject_id": subject, "split": split},
            chunk_windows=CHUNK,
        )
        written[record_id] = values
    return path, written


def _stored(written: dict[str, np.ndarray], record: str, first: int, size: int) -> np.ndarray:
    """[C, size * T] stored windows ``first .. first + size - 1`` joined in time."""
    block = written[record][first : first + size]  # [S, C, T]
    return block.transpose(1, 0, 2).reshape(len(CHANNELS), size * WINDOW)


def test_segments_are_exact_contiguous_stored_values(store) -> None:
    path, written = store
    dataset = SleepSegmentDataset(path, segment_windows=4, stride=3)
    assert (dataset.n_chans, dataset.window_samples, dataset.n_times) == (3, WINDOW, 4 * WINDOW)
    assert dataset.sfreq == SFREQ and dataset.ch_names == CHANNELS
    assert dataset.records == ("te01", "tr01", "tr02")
    runs = {r: SleepStore(path).contiguous_runs(r) for r in dataset.records}
    for index in range(len(dataset)):
        record, first = dataset.locate(index)
        x = dataset[index]
        assert x.shape == (3, 4 * WINDOW) and x.dtype == torch.float32
        np.testing.assert_array_equal(x.numpy(), _stored(written, record, first, 4))
        # inside one run of one record: no gap and no other record
        assert any(start <= first and first + 4 <= stop for start, stop in runs[record])


def test_stride_count_and_tail_coverage(store) -> None:
    path, _ = store
    dataset = SleepSegmentDataset(path, segment_windows=4, stride=3)
    starts = [dataset.locate(i) for i in range(len(dataset))]
    # tr01 (14 windows): 0, 3, 6, 9 and the tail 10; tr02: run 0-4 gives 0 and the tail 1, run
    # 5-12 gives 5, 8 and the tail 9; te01 (3 windows) gives none
    assert starts == [
        ("tr01", 0),
        ("tr01", 3),
        ("tr01", 6),
        ("tr01", 9),
        ("tr01", 10),
        ("tr02", 0),
        ("tr02", 1),
        ("tr02", 5),
        ("tr02", 8),
        ("tr02", 9),
    ]
    default = SleepSegmentDataset(path, segment_windows=8)  # stride 2, only runs of >= 8
    assert default.stride == 2
    assert [default.locate(i) for i in range(len(default))] == [
        ("tr01", 0),
        ("tr01", 2),
        ("tr01", 4),
        ("tr01", 6),
        ("tr02", 5),
    ]
    chunks = dataset.chunk_ids.tolist()
    assert chunks == sorted(chunks) and len(set(chunks)) > 1


def test_batched_reads_channels_and_selection(store) -> None:
    path, written = store
    dataset = SleepSegmentDataset(
        path, subjects=["s2"], segment_windows=3, channels=["O2-M1", "F3-M2"]
    )
    assert dataset.records == ("tr02",) and dataset.subjects == ["s2"]
    batch = dataset.__getitems__([2, 0, 2])
    for x, index in zip(batch, [2, 0, 2], strict=True):
        record, first = dataset.locate(index)
        expected = _stored(written, record, first, 3)[[2, 0]]
        np.testing.assert_array_equal(x.numpy(), expected)
    assert dataset.windows.chunks_decoded <= 3  # a batch decodes each chunk it needs once
    half = SleepSegmentDataset(path, records=["tr01"], segment_windows=2, dtype=torch.float16)
    assert half[0].dtype == torch.float16


def test_pickles_and_loads_in_worker_processes(store) -> None:
    path, _ = store
    dataset = SleepSegmentDataset(path, segment_windows=4)
    copy = pickle.loads(pickle.dumps(dataset))
    torch.testing.assert_close(copy[3], dataset[3])
    loader = DataLoader(dataset, batch_size=3, num_workers=2)
    batches = torch.cat(list(loader))
    torch.testing.assert_close(batches, torch.stack([dataset[i] for i in range(len(dataset))]))


def test_bad_arguments_are_named(store) -> None:
    path, _ = store
    with pytest.raises(InputError, match="segment_windows"):
        SleepSegmentDataset(path, segment_windows=1)
    with pytest.raises(InputError, match="stride"):
        SleepSegmentDataset(path, segment_windows=4, stride=0)
    with pytest.raises(InputError, match=r"longest contiguous run .*14 windows"):
        SleepSegmentDataset(path, segment_windows=15)
    with pytest.raises(InputError, match="records"):
        SleepSegmentDataset(path, records=["nope"])
    with pytest.raises(IndexError):
        SleepSegmentDataset(path, segment_windows=4)[99]


def test_other_sleep_data_become_segments_over_the_same_records(store) -> None:
    path, _ = store
    from_path = as_segment_dataset(path, 4, WINDOW)
    assert isinstance(from_path, SleepSegmentDataset)
    assert from_path.records == ("te01", "tr01", "tr02")
    windows = SleepWindowDataset(path, records=["tr02"], labelled_only=True, channels=["C4-M1"])
    segments = as_segment_dataset(windows, 4, WINDOW)
    assert segments.records == ("tr02",) and segments.ch_names == ["C4-M1"]
    memory = InMemoryWindows(path, records=["tr01"], progress=False)
    assert as_segment_dataset(memory, 4, WINDOW).records == ("tr01",)
    array = np.zeros((2, 3, 4 * WINDOW), dtype=np.float32)
    assert as_segment_dataset(array, 4, WINDOW) is array
    with pytest.raises(InputError, match="segment_windows=5"):
        as_segment_dataset(segments, 5, WINDOW)
    with pytest.raises(InputError, match="window_samples=3000"):
        as_segment_dataset(segments, 4, 3000)


def test_record_scaled_segments_and_normalisation_agreement(store) -> None:
    path, _ = store
    opened = SleepStore(path)
    raw = SleepSegmentDataset(path, segment_windows=4)
    scaled = SleepSegmentDataset(path, segment_windows=4, normalize="record")
    assert scaled.normalize == "record" and raw.normalize == "none"
    for index in (0, len(raw) - 1):
        record, _ = raw.locate(index)
        scale = torch.from_numpy(opened.channel_scale(record).astype(np.float32))
        # one constant per record and channel: no step at the boundaries of stored windows
        torch.testing.assert_close(scaled[index], raw[index] / (scale[:, None] + 1e-6))
    windows = SleepWindowDataset(path, normalize="record")
    converted = as_segment_dataset(windows, 4, WINDOW, "record")
    assert converted.normalize == "record"
    with pytest.raises(InputError, match=r"PretrainConfig\.normalize"):
        as_segment_dataset(windows, 4, WINDOW, "window")
    with pytest.raises(InputError, match="normalize"):
        as_segment_dataset(raw, 4, WINDOW, "record")
    with pytest.raises(InputError, match="normalize"):
        SleepSegmentDataset(path, segment_windows=4, normalize="window")
