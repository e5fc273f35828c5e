"""Tests of the sleep-window datasets and the chunk-aware sampler on small synthetic stores."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from partnd._validation import InputError
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset, item_position
from partnd.datasets.store import SleepStore, create_store, write_record
from partnd.engine.normalization import NORMALIZE_EPS, instance_normalize, record_normalize
from partnd.engine.sampler import ChunkShuffleSampler

CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
CHUNK = 8
# record id -> (subject, split, number of windows)
RECORDS = {
    "tr01": ("s1", "training", 20),
    "tr02": ("s1", "training", 13),
    "tr03": ("s2", "training", 25),
    "te01": ("s3", "test", 10),
}


def _write_store(path: Path, *, sfreq: float = 10.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Store of RECORDS at ``sfreq`` (30 s windows, chunks of CHUNK windows); returns the arrays."""
    create_store(
        path, sfreq=sfreq, channels=CHANNELS, window_seconds=30.0, metadata={"filter": "none"}
    )
    rng = np.random.default_rng(0)
    n_times = int(sfreq * 30)
    written = {}
    for record_id, (subject, split, n_windows) in RECORDS.items():
        scale = rng.uniform(5, 50, size=(n_windows, len(CHANNELS), 1))
        offset = rng.uniform(-20, 20, size=(n_windows, len(CHANNELS), 1))
        signal = (rng.normal(size=(n_windows, len(CHANNELS), n_times)) * scale + offset).astype(
            np.float32
        )
        if split == "training":
            stage = rng.integers(-1, 5, size=n_windows).astype(np.int8)
        else:
            stage = np.full(n_windows, -1, dtype=np.int8)
        write_record(
            path,
            record_id,
            signal,
            stage,
            np.arange(n_windows) * 30.0,
            attrs={"subject_id": subject, "split": split},
            chunk_windows=CHUNK,
        )
        written[record_id] = (signal, stage)
    return written


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("sleep") / "store.zarr"
    return path, _write_store(path)


def _expected(written: dict, dataset: SleepWindowDataset, index: int) -> tuple[np.ndarray, int]:
    record_id, window = dataset.locate(index)
    signal, stage = written[record_id]
    return signal[window], int(stage[window])


def test_documented_shape_and_dtype_at_100_hz(tmp_path: Path) -> None:
    path = tmp_path / "full.zarr"
    create_store(path, sfreq=100.0, channels=CHANNELS, window_seconds=30.0, metadata={})
    signal = np.random.default_rng(1).normal(size=(3, 6, 3000)).astype(np.float32)
    write_record(
        path,
        "r",
        signal,
        np.array([0, 4, -1]),
        np.arange(3) * 30.0,
        attrs={"subject_id": "a", "split": "training"},
    )
    dataset = SleepWindowDataset(path)
    x, stage = dataset[1]
    assert x.shape == (6, 3000) and x.dtype == torch.float32
    assert isinstance(stage, int) and stage == 4
    assert (dataset.sfreq, dataset.n_chans, dataset.n_times) == (100.0, 6, 3000)
    assert dataset.ch_names == CHANNELS
    assert dataset[2][1] == -1
    half = SleepWindowDataset(path, dtype=torch.float16, return_index=True)
    x, stage, index = half[2]
    assert x.dtype == torch.float16 and (stage, index) == (-1, 2)


def test_instance_normalize_known_values() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    std = np.sqrt(1.25)
    expected = torch.tensor([[-1.5, -0.5, 0.5, 1.5], [0.0, 0.0, 0.0, 0.0]])
    expected[0] /= std + NORMALIZE_EPS
    torch.testing.assert_close(instance_normalize(x), expected)


def test_normalize_standardises_each_channel_of_each_window(store: tuple[Path, dict]) -> None:
    dataset = SleepWindowDataset(store[0], normalize=True)
    for index in (0, 7, len(dataset) - 1):
        x, _ = dataset[index]
        torch.testing.assert_close(x.mean(dim=-1), torch.zeros(6), atol=1e-5, rtol=0)
        torch.testing.assert_close(x.std(dim=-1, unbiased=False), torch.ones(6), atol=1e-4, rtol=0)


def test_record_normalize_known_values() -> None:
    x = torch.tensor([[[1.0, 2.0, 3.0, 6.0], [4.0, 4.0, 4.0, 4.0]]])  # [1 window, 2 channels, 4]
    scale = torch.tensor([2.0, 5.0])
    expected = torch.tensor([[[-2.0, -1.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0]]])
    expected[0, 0] /= 2.0 + NORMALIZE_EPS
    torch.testing.assert_close(record_normalize(x, scale), expected)
    with pytest.raises(InputError, match="scale"):
        record_normalize(x, torch.ones(3))


def test_record_normalisation_keeps_amplitude_within_a_night(store: tuple[Path, dict]) -> None:
    path, written = store
    opened = SleepStore(path)
    signal, _ = written["tr03"]
    scale = np.median(signal.astype(np.float64).std(axis=-1), axis=0)  # [C]
    np.testing.assert_allclose(opened.channel_scale("tr03"), scale, rtol=1e-6)
    assert opened.record_attrs("tr03")["channel_scale"] == pytest.approx(scale.tolist())
    picked = ["O2-M1", "F3-M2"]
    for dataset in (
        SleepWindowDataset(path, normalize="record", channels=picked),
        InMemoryWindows(path, normalize="record", channels=picked, progress=False),
    ):
        assert dataset.normalize == "record"
        for index in (0, 21, len(dataset) - 1):
            record, window = dataset.locate(index)
            raw = written[record][0][window][[5, 0]].astype(np.float64)
            record_scale = opened.channel_scale(record)[[5, 0]]
            expected = (raw - raw.mean(-1, keepdims=True)) / (record_scale[:, None] + NORMALIZE_EPS)
            np.testing.assert_allclose(dataset[index][0].numpy(), expected, atol=1e-5)
        batch = dataset.__getitems__([3, 40, 60])  # windows of several records in one batch
        for (x, _), index in zip(batch, [3, 40, 60], strict=True):
            torch.testing.assert_close(x, dataset[index][0])
    assert SleepWindowDataset(path, normalize=True).normalize == "window"
    assert SleepWindowDataset(path, normalize=False).normalize == "none"
    with pytest.raises(InputError, match="normalize"):
        SleepWindowDataset(path, normalize="night")


def test_channel_scale_of_a_store_written_without_it(store: tuple[Path, dict]) -> None:
    path, written = store
    opened = SleepStore(path)
    opened._attrs_cache["tr01"] = {
        k: v for k, v in opened.record_attrs("tr01").items() if k != "channel_scale"
    }
    expected = np.median(written["tr01"][0].astype(np.float64).std(axis=-1), axis=0)
    np.testing.assert_allclose(opened.channel_scale("tr01"), expected, rtol=1e-6)


def test_unnormalized_values_are_the_stored_values(store: tuple[Path, dict]) -> None:
    path, written = store
    dataset = SleepWindowDataset(path, normalize=False)
    assert len(dataset) == sum(n for _, _, n in RECORDS.values())
    for index in range(len(dataset)):
        x, stage = dataset[index]
        expected_x, expected_stage = _expected(written, dataset, index)
        np.testing.assert_array_equal(x.numpy(), expected_x)
        assert stage == expected_stage
    batch = dataset.__getitems__([5, 40, 5, 0, 67])
    for (x, stage), index in zip(batch, [5, 40, 5, 0, 67], strict=True):
        np.testing.assert_array_equal(x.numpy(), dataset[index][0].numpy())
        assert stage == dataset[index][1]


def test_channel_selection_reorders(store: tuple[Path, dict]) -> None:
    path, written = store
    dataset = SleepWindowDataset(path, normalize=False, channels=["O2-M1", "F3-M2"])
    assert dataset.ch_names == ["O2-M1", "F3-M2"] and dataset.n_chans == 2
    for index in (3, 30):
        expected, _ = _expected(written, dataset, index)
        np.testing.assert_array_equal(dataset[index][0].numpy(), expected[[5, 0]])
        np.testing.assert_array_equal(dataset.__getitems__([index])[0][0].numpy(), expected[[5, 0]])


def test_selection_by_records_subjects_split_and_labels(store: tuple[Path, dict]) -> None:
    path, written = store
    by_records = SleepWindowDataset(path, records=["tr03", "tr01"])
    assert by_records.records == ("tr03", "tr01") and len(by_records) == 45
    assert by_records.record_of(0) == "tr03" and by_records.record_of(25) == "tr01"
    by_subject = SleepWindowDataset(path, subjects=["s1"])
    assert by_subject.records == ("tr01", "tr02") and by_subject.subjects == ["s1"]
    assert SleepWindowDataset(path, split="test").records == ("te01",)
    labelled = SleepWindowDataset(path, split="training", labelled_only=True)
    expected_labels = np.concatenate([written[r][1][written[r][1] >= 0] for r in labelled.records])
    np.testing.assert_array_equal(labelled.labels, expected_labels)
    assert (labelled.labels >= 0).all()
    for index in range(len(labelled)):
        assert labelled[index][1] == _expected(written, labelled, index)[1]
    np.testing.assert_array_equal(
        labelled.class_counts(), np.bincount(expected_labels.astype(np.int64), minlength=5)
    )
    combined = SleepWindowDataset(path, subjects=["s1", "s3"], split="training")
    assert combined.records == ("tr01", "tr02")


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"records": ["tr01", "nope"]}, "records"),
        ({"subjects": ["s9"]}, "subjects"),
        ({"channels": ["Cz"]}, "channels"),
        ({"split": "validation"}, "split"),
        ({"split": "test", "labelled_only": True}, "selection"),
        ({"records": ["te01"], "split": "training"}, "selection"),
    ],
)
def test_bad_selection_raises_naming_the_argument(
    store: tuple[Path, dict], kwargs: dict, argument: str
) -> None:
    with pytest.raises(InputError, match=f"^{argument}:"):
        SleepWindowDataset(store[0], **kwargs)


@pytest.mark.parametrize(
    ("index", "position"), [(0, 0), (9, 9), (-1, 9), (-10, 0), (np.int64(3), 3)]
)
def test_item_position_counts_negative_indices_from_the_end(index: int, position: int) -> None:
    assert item_position(index, 10) == position


@pytest.mark.parametrize(
    ("index", "error"), [(10, IndexError), (-11, IndexError), (1.0, TypeError)]
)
def test_item_position_refuses_what_is_not_an_index(index: int, error: type) -> None:
    with pytest.raises(error, match=r"^index: expected"):
        item_position(index, 10)


def test_index_errors(store: tuple[Path, dict]) -> None:
    dataset = SleepWindowDataset(store[0], records=["te01"])
    with pytest.raises(IndexError):
        dataset[10]
    np.testing.assert_array_equal(dataset[-1][0].numpy(), dataset[9][0].numpy())


def _sampler_checks(order: np.ndarray, n: int) -> None:
    assert sorted(order.tolist()) == list(range(n))


def test_sampler_is_a_deterministic_permutation_per_epoch(store: tuple[Path, dict]) -> None:
    dataset = SleepWindowDataset(store[0])
    sampler = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=2, seed=3)
    first = np.array(list(sampler))
    _sampler_checks(first, len(dataset))
    assert len(sampler) == len(dataset)
    again = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=2, seed=3)
    np.testing.assert_array_equal(np.array(list(again)), first)
    sampler.set_epoch(1)
    second = np.array(list(sampler))
    _sampler_checks(second, len(dataset))
    assert not np.array_equal(first, second)
    other_seed = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=2, seed=4)
    assert not np.array_equal(np.array(list(other_seed)), first)
    assert not np.array_equal(first, np.arange(len(dataset)))


@pytest.mark.parametrize("buffer_chunks", [1, 3])
def test_sampler_keeps_each_chunk_within_a_bounded_span(
    store: tuple[Path, dict], buffer_chunks: int
) -> None:
    dataset = SleepWindowDataset(store[0])
    sampler = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=buffer_chunks, seed=0)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = sampler.epoch_indices()
        chunks = dataset.chunk_ids[order]
        for chunk in np.unique(chunks):
            positions = np.flatnonzero(chunks == chunk)
            assert positions[-1] - positions[0] < buffer_chunks * CHUNK
        if buffer_chunks > 1:
            runs = np.count_nonzero(chunks[1:] != chunks[:-1]) + 1
            assert runs > len(np.unique(chunks)), "windows of a buffer's chunks are interleaved"


def test_sampler_shards_disjoint_and_covering() -> None:
    chunk_ids = np.repeat(np.arange(10), 6)
    shards = [
        ChunkShuffleSampler(chunk_ids, seed=1, num_replicas=2, rank=r).epoch_indices()
        for r in range(2)
    ]
    assert len(shards[0]) == len(shards[1]) == 30
    assert set(shards[0]).isdisjoint(shards[1])
    assert sorted(np.concatenate(shards).tolist()) == list(range(60))
    shared_chunks = set(chunk_ids[shards[0]]) & set(chunk_ids[shards[1]])
    assert len(shared_chunks) <= 1
    uneven = np.repeat(np.arange(7), 3)
    padded = [ChunkShuffleSampler(uneven, num_replicas=2, rank=r) for r in range(2)]
    covered = np.concatenate([s.epoch_indices() for s in padded])
    assert len(covered) == 22 and set(covered.tolist()) == set(range(21))
    dropped = [
        ChunkShuffleSampler(uneven, num_replicas=2, rank=r, drop_last=True) for r in range(2)
    ]
    kept = np.concatenate([s.epoch_indices() for s in dropped])
    assert len(kept) == 20 and len(set(kept.tolist())) == 20


def test_sampler_without_shuffle_keeps_stored_order() -> None:
    chunk_ids = np.repeat(np.arange(4), 5)
    assert list(ChunkShuffleSampler(chunk_ids, shuffle=False)) == list(range(20))
    assert list(ChunkShuffleSampler(chunk_ids, shuffle=False, num_replicas=2, rank=1)) == list(
        range(10, 20)
    )


def test_sampler_rejects_bad_arguments() -> None:
    with pytest.raises(InputError, match=r"^shuffle_buffer_chunks:"):
        ChunkShuffleSampler(np.zeros(4, dtype=int), shuffle_buffer_chunks=0)
    with pytest.raises(InputError, match=r"^rank:"):
        ChunkShuffleSampler(np.zeros(4, dtype=int), num_replicas=2, rank=2)
    with pytest.raises(InputError, match=r"^dataset:"):
        ChunkShuffleSampler(np.zeros(0, dtype=int))


class _DecodeSpy:
    """Wraps ``SleepStore.read_windows``; counts how often each (record, chunk) was decoded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decodes: Counter[tuple[str, int]] = Counter()
        original = SleepStore.read_windows

        def spy(store: SleepStore, record_id: str, start: int, stop: int) -> np.ndarray:
            for chunk in range(start // CHUNK, (stop - 1) // CHUNK + 1):
                self.decodes[(record_id, chunk)] += 1
            return original(store, record_id, start, stop)

        monkeypatch.setattr(SleepStore, "read_windows", spy)


@pytest.mark.parametrize("cache_bytes", [0, 64 * 2**20])
def test_read_spans_are_channel_major_stored_runs_decoding_each_chunk_once(
    store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch, cache_bytes: int
) -> None:
    path, written = store
    dataset = SleepWindowDataset(
        path, records=["tr03", "tr01"], channels=["C4-M1", "F3-M2"], cache_bytes=cache_bytes
    )
    picks = [CHANNELS.index("C4-M1"), CHANNELS.index("F3-M2")]
    spy = _DecodeSpy(monkeypatch)
    # across chunk boundaries (chunks of 8), overlapping, a whole record, one window
    spans = [(0, 5, 12), (0, 9, 16), (1, 0, 20), (0, 24, 1)]
    blocks = dataset.read_spans(spans)
    for (position, first, count), block in zip(spans, blocks, strict=True):
        signal = written[dataset.records[position]][0]
        expected = signal[first : first + count][:, picks].transpose(1, 0, 2)
        assert block.shape == (2, count, 300) and block.dtype == np.float32
        np.testing.assert_array_equal(block, expected)
        assert block.flags.c_contiguous  # reshape(C, n * T) is a view
    assert set(spy.decodes.values()) == {1}  # tr03's chunks 0-3 and tr01's 0-2, once each
    assert set(spy.decodes) == {("tr03", c) for c in range(4)} | {("tr01", c) for c in range(3)}
    assert dataset.read_spans([]) == []
    for bad in [(2, 0, 1), (0, 20, 6), (0, -1, 2), (1, 0, 0)]:
        with pytest.raises(InputError, match="spans"):
            dataset.read_spans([bad])


def test_cache_decodes_each_chunk_once_in_sampler_order(
    store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _DecodeSpy(monkeypatch)
    chunk_bytes = CHUNK * 6 * 300 * 4
    dataset = SleepWindowDataset(store[0], cache_bytes=3 * chunk_bytes)
    n_chunks = len(np.unique(dataset.chunk_ids))
    sampler = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=3, seed=0)
    for index in sampler:
        dataset[index]
    assert len(spy.decodes) == n_chunks and set(spy.decodes.values()) == {1}
    assert dataset.chunks_decoded == n_chunks
    assert dataset.cache_hits == len(dataset) - n_chunks
    assert dataset._cached_bytes <= 3 * chunk_bytes


def test_without_cache_random_access_decodes_per_window(
    store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _DecodeSpy(monkeypatch)
    dataset = SleepWindowDataset(store[0], cache_bytes=0)
    for index in np.random.default_rng(0).permutation(len(dataset)):
        dataset[int(index)]
    assert sum(spy.decodes.values()) == len(dataset)


def test_batched_fetch_reads_each_chunk_once_per_epoch(
    store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _DecodeSpy(monkeypatch)
    dataset = SleepWindowDataset(store[0], cache_bytes=4 * CHUNK * 6 * 300 * 4)
    sampler = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=2, seed=5)
    loader = DataLoader(dataset, batch_size=10, sampler=sampler)
    labels = torch.cat([y for _, y in loader])
    assert len(labels) == len(dataset)
    assert set(spy.decodes.values()) == {1}
    assert Counter(labels.tolist()) == Counter(dataset.labels.tolist())


def test_dataloader_with_two_workers(store: tuple[Path, dict]) -> None:
    path, written = store
    dataset = SleepWindowDataset(path, normalize=False, return_index=True)
    assert dataset._store is not None
    restored = pickle.loads(pickle.dumps(dataset))
    assert restored._store is None
    np.testing.assert_array_equal(restored[4][0].numpy(), dataset[4][0].numpy())
    sampler = ChunkShuffleSampler(dataset, seed=0, batch_size=16, num_workers=2)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler, num_workers=2)
    seen = []
    for x, stage, index in loader:
        assert x.shape[1:] == (6, 300)
        for row, position in enumerate(index.tolist()):
            expected_x, expected_stage = _expected(written, dataset, position)
            np.testing.assert_array_equal(x[row].numpy(), expected_x)
            assert stage[row] == expected_stage
        seen.extend(index.tolist())
    assert sorted(seen) == list(range(len(dataset)))


def test_in_memory_windows_match_the_streaming_dataset(store: tuple[Path, dict]) -> None:
    path = store[0]
    kwargs = {"subjects": ["s1", "s2"], "labelled_only": True, "channels": ["C4-M1", "C3-M2"]}
    streaming = SleepWindowDataset(path, **kwargs)
    in_memory = InMemoryWindows(path, progress=False, **kwargs)
    assert len(in_memory) == len(streaming) and in_memory.windows.shape == (len(streaming), 2, 300)
    np.testing.assert_array_equal(in_memory.labels, streaming.labels)
    for index in (0, 11, len(streaming) - 1):
        torch.testing.assert_close(in_memory[index][0], streaming[index][0])
        assert in_memory[index][1] == streaming[index][1]
    batch = in_memory.__getitems__([2, 1])
    torch.testing.assert_close(batch[0][0], streaming[2][0])


def test_uncached_batched_fetch_decodes_each_touched_chunk_once(
    store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, written = store
    spy = _DecodeSpy(monkeypatch)
    dataset = SleepWindowDataset(path, normalize=False, cache_bytes=0)
    indices = [3, 1, 17, 3, 60, 45, 46, 0]
    batch = dataset.__getitems__(indices)
    for (x, stage), index in zip(batch, indices, strict=True):
        expected_x, expected_stage = _expected(written, dataset, index)
        np.testing.assert_array_equal(x.numpy(), expected_x)
        assert stage == expected_stage
    touched = {(dataset.locate(i)[0], dataset.locate(i)[1] // CHUNK) for i in indices}
    assert set(spy.decodes) == touched and set(spy.decodes.values()) == {1}
    assert dataset.chunks_decoded == len(touched)


def _decodes_with_simulated_workers(path: Path, order: np.ndarray, workers: int, batch: int) -> int:
    """Deal batches of ``order`` round-robin to per-worker datasets, as the DataLoader does."""
    copies = [SleepWindowDataset(path, cache_bytes=3 * CHUNK * 6 * 300 * 4) for _ in range(workers)]
    for number, start in enumerate(range(0, len(order), batch)):
        copies[number % workers].__getitems__(order[start : start + batch].tolist())
    return sum(copy.chunks_decoded for copy in copies)


def test_more_workers_than_batches_leave_the_idle_workers_no_items(
    store: tuple[Path, dict],
) -> None:
    """Found on a GPU host: a 10-segment pool read by 4 workers in batches of 8 gave two
    workers empty streams, and shuffling an empty stream raised."""
    dataset = SleepWindowDataset(store[0])
    batch = len(dataset) // 2 + 1  # two batches, the second short
    for workers in (3, 4, 8):
        sampler = ChunkShuffleSampler(dataset, seed=1, batch_size=batch, num_workers=workers)
        order = sampler.epoch_indices()
        _sampler_checks(order, len(dataset))
        # the first batch is the first worker's, in its chunks' buffer order
        first = ChunkShuffleSampler(dataset, seed=1, batch_size=batch, num_workers=2)
        np.testing.assert_array_equal(order, first.epoch_indices())


def test_worker_streams_keep_each_chunk_in_one_worker(store: tuple[Path, dict]) -> None:
    path = store[0]
    dataset = SleepWindowDataset(path)
    n_chunks = len(np.unique(dataset.chunk_ids))
    streams = ChunkShuffleSampler(
        dataset, shuffle_buffer_chunks=3, seed=2, batch_size=10, num_workers=2
    ).epoch_indices()
    _sampler_checks(streams, len(dataset))
    plain = ChunkShuffleSampler(dataset, shuffle_buffer_chunks=3, seed=2).epoch_indices()
    assert _decodes_with_simulated_workers(path, streams, 2, 10) <= n_chunks + 1
    assert _decodes_with_simulated_workers(path, plain, 2, 10) > n_chunks + 1
