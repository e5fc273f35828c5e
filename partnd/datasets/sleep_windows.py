"""Torch datasets streaming 30 s EEG windows from a partnd sleep store, and a chunk-aware sampler.

A partnd sleep store (:mod:`partnd.datasets.store`) keeps each record's ``signal`` as a zarr array
``[window, channel, time]`` compressed in chunks of 64 windows. zarr always decodes whole chunks,
so a plain shuffled ``DataLoader`` that asks for one window at a time decodes a 64-window chunk to
use one window of it. Two pieces remove that waste (see ``docs/datasets.md`` for measurements):

* :class:`ChunkShuffleSampler` shuffles the *order of chunks*, then shuffles windows only inside
  consecutive buffers of ``shuffle_buffer_chunks`` chunks, so every chunk's windows are requested
  close together (within ``shuffle_buffer_chunks * 64`` positions);
* :class:`SleepWindowDataset` keeps a small least-recently-used cache of decoded chunks (per
  worker, bounded in bytes) and implements ``__getitems__``, which the ``DataLoader`` calls with a
  whole batch of indices: the chunks the batch needs are read in one block read per contiguous
  chunk run.

Together each chunk is decoded about once per epoch while batches stay shuffled across records.
:class:`InMemoryWindows` loads a small selection (e.g. the 10 fine-tuning subjects) fully into RAM.

Windows are returned as ``x: [C, T]`` tensors (``C = 6`` channels, ``T = 3000`` samples at 100 Hz
for the PhysioNet 2018 store) with their sleep stage code (``0..4`` for W, N1, N2, N3, REM, ``-1``
when unlabelled).
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from partnd._validation import InputError, check
from partnd.datasets.store import UNLABELLED, SleepStore
from partnd.engine.normalization import (
    NORMALIZATIONS,
    NORMALIZE_EPS,
    instance_normalize,
    record_normalize,
    resolve_normalization,
)

__all__ = [
    "NORMALIZATIONS",
    "NORMALIZE_EPS",
    "InMemoryWindows",
    "SleepWindowDataset",
    "instance_normalize",
    "item_position",
    "keep_labels",
    "record_normalize",
    "resolve_normalization",
]

SPLITS = ("training", "test")

Sample = tuple[Tensor, int] | tuple[Tensor, int, int]


def item_position(index: int, length: int) -> int:
    """The position in ``[0, length)`` of a dataset index (negative counts from the end).

    Raises:
        TypeError: ``index`` is not an integer.
        IndexError: ``index`` is outside ``[-length, length)``.
    """
    if not isinstance(index, int | np.integer):
        raise TypeError(f"index: expected an int, got {type(index).__name__}")
    position = int(index) + length if index < 0 else int(index)
    if not 0 <= position < length:
        raise IndexError(f"index: expected -{length} <= index < {length}, got {index}")
    return position


def _store_path(store: str | Path | SleepStore, argument: str) -> Path:
    if isinstance(store, SleepStore):
        return Path(store.path)
    check(isinstance(store, str | Path), argument, "a store path or a SleepStore", store)
    return Path(store)


def keep_labels(
    stages: np.ndarray, record: str, labelled_windows: Mapping[str, Sequence[int]] | None
) -> np.ndarray:
    """The stages of ``record`` with every window outside ``labelled_windows[record]`` unlabelled.

    Args:
        stages: ``[W]`` stage codes of the record's windows (``-1`` unlabelled).
        record: The record's id.
        labelled_windows: ``{record: window indices}`` that keep their stage (a record absent
            keeps none); ``None`` keeps every stage.

    Returns:
        ``[W]`` int8 stage codes, ``-1`` outside the kept windows.

    Raises:
        InputError: A kept window is outside the record or unlabelled.
    """
    if labelled_windows is None:
        return stages
    kept = np.asarray(labelled_windows.get(record, ()), dtype=np.int64)
    check(
        bool(((kept >= 0) & (kept < len(stages))).all()),
        "labelled_windows",
        f"window indices in [0, {len(stages)}) for record {record!r}",
        kept[(kept < 0) | (kept >= len(stages))].tolist(),
    )
    check(
        bool((stages[kept] >= 0).all()),
        "labelled_windows",
        f"labelled windows of record {record!r}",
        f"unlabelled windows {kept[stages[kept] < 0].tolist()}",
    )
    masked = np.full(len(stages), UNLABELLED, dtype=np.int8)
    masked[kept] = stages[kept]
    return masked


def _check_labelled_records(
    labelled_windows: Mapping[str, Sequence[int]] | None, records: Sequence[str]
) -> None:
    """Every record of ``labelled_windows`` must be a selected record."""
    if labelled_windows is not None:
        unknown = sorted(set(labelled_windows) - set(records))
        check(not unknown, "labelled_windows", "records of the selection", unknown)


class _SelectedWindows:
    """Selection of windows of a sleep store: which records, which windows, their labels.

    Shared by :class:`SleepWindowDataset` and :class:`InMemoryWindows`. Builds, for every selected
    window ``i``, its record position ``record_index[i]``, its window index inside the record
    ``window_index[i]`` and its stage ``labels[i]``.
    """

    def __init__(
        self,
        store: str | Path | SleepStore,
        *,
        records: Sequence[str] | None,
        subjects: Sequence[str] | None,
        split: str | None,
        labelled_only: bool,
        normalize: bool | str,
        channels: Sequence[str] | None,
        dtype: torch.dtype,
        return_index: bool,
        labelled_windows: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self.store_path = _store_path(store, "store")
        opened = store if isinstance(store, SleepStore) else SleepStore(self.store_path)
        self._store: SleepStore | None = opened
        self._pid = os.getpid()
        check(
            isinstance(dtype, torch.dtype) and dtype.is_floating_point,
            "dtype",
            "a floating point torch.dtype",
            dtype,
        )
        self.normalize = resolve_normalization(normalize)
        self.dtype = dtype
        self.return_index = bool(return_index)
        self.labelled_only = bool(labelled_only)
        self._sfreq = float(opened.sfreq)
        self._n_times = int(opened.n_times)
        self.stage_names: tuple[str, ...] = tuple(opened.stage_names)
        store_channels = list(opened.channels)
        self._channel_index, self._ch_names = _resolve_channels(store_channels, channels)
        self.records: tuple[str, ...] = tuple(_resolve_records(opened, records, subjects, split))
        self.record_subjects: tuple[str, ...] = tuple(
            str(opened.record_attrs(r)["subject_id"]) for r in self.records
        )
        self._scales: Tensor | None = None
        if self.normalize == "record":
            scales = np.stack([opened.channel_scale(r) for r in self.records])  # [R, C_store]
            if self._channel_index is not None:
                scales = scales[:, self._channel_index]
            self._scales = torch.from_numpy(scales.astype(np.float32))
        _check_labelled_records(labelled_windows, self.records)
        self._build_index(opened, labelled_windows)

    def _build_index(
        self, store: SleepStore, labelled_windows: Mapping[str, Sequence[int]] | None
    ) -> None:
        record_parts, window_parts, label_parts, chunk_parts = [], [], [], []
        chunk_offset = 0
        self.record_n_windows = np.zeros(len(self.records), dtype=np.int64)
        self.record_chunk_windows = np.zeros(len(self.records), dtype=np.int64)
        for position, record_id in enumerate(self.records):
            stages = keep_labels(
                np.asarray(store.stages(record_id), dtype=np.int8), record_id, labelled_windows
            )
            chunk_windows = int(store.chunk_windows(record_id))
            self.record_n_windows[position] = len(stages)
            self.record_chunk_windows[position] = chunk_windows
            windows = np.arange(len(stages), dtype=np.int64)
            if self.labelled_only:
                windows = windows[stages >= 0]
            record_parts.append(np.full(len(windows), position, dtype=np.int64))
            window_parts.append(windows)
            label_parts.append(stages[windows])
            chunk_parts.append(chunk_offset + windows // chunk_windows)
            chunk_offset += math.ceil(len(stages) / chunk_windows)
        self.record_index = np.concatenate(record_parts)
        self.window_index = np.concatenate(window_parts)
        self._labels = np.concatenate(label_parts)
        self.chunk_ids = np.concatenate(chunk_parts)
        for array in (self.record_index, self.window_index, self._labels, self.chunk_ids):
            array.flags.writeable = False
        if len(self._labels) == 0:
            which = "labelled window" if self.labelled_only else "window"
            raise InputError(
                f"selection: expected at least one {which}, got none from {len(self.records)} "
                "record(s)"
            )

    def _open_store(self) -> SleepStore:
        """Return the store, reopening it lazily in a new process (``DataLoader`` worker)."""
        if self._store is None or self._pid != os.getpid():
            self._store = SleepStore(self.store_path)
            self._pid = os.getpid()
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        return state

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def sfreq(self) -> float:
        """Sampling frequency in Hz."""
        return self._sfreq

    @property
    def n_chans(self) -> int:
        """Number of channels ``C`` of every returned window."""
        return len(self._ch_names)

    @property
    def n_times(self) -> int:
        """Number of time samples ``T`` of every returned window."""
        return self._n_times

    @property
    def ch_names(self) -> list[str]:
        """Names of the returned channels, in order."""
        return list(self._ch_names)

    @property
    def labels(self) -> np.ndarray:
        """``[N]`` int8 stage code of every window (``-1`` unlabelled), read-only, no I/O."""
        return self._labels

    @property
    def subjects(self) -> list[str]:
        """Sorted subject ids of the selected records."""
        return sorted(set(self.record_subjects))

    def _check_index(self, index: int) -> int:
        return item_position(index, len(self))

    def locate(self, index: int) -> tuple[str, int]:
        """Return ``(record_id, window index inside that record)`` of dataset item ``index``."""
        position = self._check_index(index)
        return self.records[self.record_index[position]], int(self.window_index[position])

    def record_of(self, index: int) -> str:
        """Return the record id holding dataset item ``index``."""
        return self.locate(index)[0]

    def class_counts(self) -> np.ndarray:
        """Return ``[n_stages]`` int64 window counts per stage code (unlabelled ones excluded)."""
        labelled = self._labels[self._labels >= 0].astype(np.int64)
        return np.bincount(labelled, minlength=len(self.stage_names))

    def _finish(self, windows: Tensor, records: np.ndarray | int) -> Tensor:
        """Normalise (as asked) and cast float32 windows.

        Args:
            windows: ``[N, C, T]`` (or one ``[C, T]``) windows.
            records: ``[N]`` position of each window's record in :attr:`records` (or one int).
        """
        if self.normalize == "window":
            windows = instance_normalize(windows)
        elif self.normalize == "record":
            assert self._scales is not None
            windows = record_normalize(windows, self._scales[torch.as_tensor(records)])
        return windows.to(self.dtype)

    def _sample(self, x: Tensor, position: int) -> Sample:
        label = int(self._labels[position])
        if self.return_index:
            return x, label, position
        return x, label


def _resolve_channels(
    store_channels: list[str], channels: Sequence[str] | None
) -> tuple[np.ndarray | None, list[str]]:
    """Return (channel indices or None for all channels in store order, channel names)."""
    if channels is None:
        return None, store_channels
    check(
        not isinstance(channels, str) and len(channels) > 0,
        "channels",
        "a non-empty sequence of channel names",
        channels,
    )
    unknown = [name for name in channels if name not in store_channels]
    check(not unknown, "channels", f"names among the store's channels {store_channels}", unknown)
    check(len(set(channels)) == len(channels), "channels", "distinct names", list(channels))
    index = np.array([store_channels.index(name) for name in channels], dtype=np.int64)
    if np.array_equal(index, np.arange(len(store_channels))):
        return None, store_channels
    return index, list(channels)


def _resolve_records(
    store: SleepStore,
    records: Sequence[str] | None,
    subjects: Sequence[str] | None,
    split: str | None,
) -> list[str]:
    """Intersect the record, subject and split selections (record order kept as given or stored)."""
    all_records = list(store.record_ids())
    if records is None:
        selected = all_records
    else:
        check(not isinstance(records, str), "records", "a sequence of record ids", records)
        known = set(all_records)
        unknown = [r for r in records if r not in known]
        check(not unknown, "records", f"record ids present in the store ({len(known)})", unknown)
        selected = list(dict.fromkeys(records))
    if split is not None:
        check(split in SPLITS, "split", f"one of {SPLITS} or None", split)
        in_split = set(store.record_ids(split=split))
        selected = [r for r in selected if r in in_split]
    if subjects is not None:
        check(not isinstance(subjects, str), "subjects", "a sequence of subject ids", subjects)
        subject_of = {r: str(store.record_attrs(r)["subject_id"]) for r in all_records}
        wanted = {str(s) for s in subjects}
        unknown = sorted(wanted - set(subject_of.values()))
        check(not unknown, "subjects", "subject ids present in the store", unknown)
        selected = [r for r in selected if subject_of[r] in wanted]
    if not selected:
        raise InputError(
            f"selection: expected at least one record, got none for records={records!r}, "
            f"subjects={subjects!r}, split={split!r}"
        )
    return selected


class SleepWindowDataset(_SelectedWindows, Dataset[Sample]):
    """Map-style dataset of 30 s EEG windows read lazily from a partnd sleep store.

    Each item is ``(x, stage)`` (or ``(x, stage, index)`` with ``return_index=True``): ``x: [C, T]``
    tensor of ``dtype``, ``stage`` an int (``0..4`` for W, N1, N2, N3, REM, ``-1`` unlabelled).
    The store is opened lazily in every process, so the dataset pickles and works with
    ``DataLoader(num_workers > 0)``; each worker keeps its own chunk cache.

    Args:
        store: Path of a ``.zarr`` sleep store or an open :class:`SleepStore`.
        records: Record ids to use (order kept); ``None`` for all.
        subjects: Subject ids whose records to use; ``None`` for all.
        split: ``"training"`` (labelled PhysioNet partition) or ``"test"``; ``None`` for both.
        labelled_only: Drop windows whose stage is ``-1``.
        normalize: ``True`` or ``"window"``: instance-normalise each window per channel,
            ``(x - mean) / (std + eps)`` with ``eps = NORMALIZE_EPS = 1e-6`` (the paper's);
            ``"record"``: remove each window's mean and divide by its record's channel scale
            (:func:`record_normalize`, :meth:`SleepStore.channel_scale`); ``False`` or
            ``"none"``: the stored values exactly. Resolved to one of :data:`NORMALIZATIONS`
            in the ``normalize`` attribute.
        channels: Channel names to return, in this order; ``None`` for all store channels.
        dtype: Floating point dtype of ``x``.
        return_index: Also return the dataset index of each window.
        cache_bytes: Bound of the decoded-chunk LRU cache per process (``0`` disables it). Keep it
            above ``shuffle_buffer_chunks`` chunks (one float32 chunk of 64 × 6 × 3000 is 4.6 MB).
        labelled_windows: ``{record: window indices}`` that keep their stage; every other
            window of the selection is unlabelled (``-1``; dropped with ``labelled_only``). For
            a budget of labelled windows (:mod:`partnd.datasets.label_budget`); ``None`` keeps
            every stored stage.

    Raises:
        InputError: Unknown records, subjects, channels or split, an empty selection, or a
            ``labelled_windows`` entry outside the selection or unlabelled.
    """

    def __init__(
        self,
        store: str | Path | SleepStore,
        *,
        records: Sequence[str] | None = None,
        subjects: Sequence[str] | None = None,
        split: str | None = None,
        labelled_only: bool = False,
        normalize: bool | str = True,
        channels: Sequence[str] | None = None,
        dtype: torch.dtype = torch.float32,
        return_index: bool = False,
        cache_bytes: int = 64 * 2**20,
        labelled_windows: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        super().__init__(
            store,
            records=records,
            subjects=subjects,
            split=split,
            labelled_only=labelled_only,
            normalize=normalize,
            channels=channels,
            dtype=dtype,
            return_index=return_index,
            labelled_windows=labelled_windows,
        )
        check(cache_bytes >= 0, "cache_bytes", "an int >= 0", cache_bytes)
        self.cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._cached_bytes = 0
        self.cache_hits = 0
        self.chunks_decoded = 0

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_cache"] = OrderedDict()
        state["_cached_bytes"] = 0
        return state

    def clear_cache(self) -> None:
        """Drop every cached chunk and reset the ``cache_hits`` / ``chunks_decoded`` counters."""
        self._cache.clear()
        self._cached_bytes = 0
        self.cache_hits = 0
        self.chunks_decoded = 0

    def _select_channels(self, windows: np.ndarray) -> np.ndarray:
        if self._channel_index is None:
            return windows
        return np.ascontiguousarray(windows[:, self._channel_index])

    def _chunk_range(self, record: int, chunk: int) -> tuple[int, int]:
        size = int(self.record_chunk_windows[record])
        return chunk * size, min((chunk + 1) * size, int(self.record_n_windows[record]))

    def _remember(self, key: tuple[int, int], windows: np.ndarray) -> None:
        if windows.nbytes > self.cache_bytes:
            return
        self._cache[key] = windows
        self._cached_bytes += windows.nbytes
        while self._cached_bytes > self.cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.nbytes

    def _cached_chunk(self, key: tuple[int, int]) -> np.ndarray | None:
        windows = self._cache.get(key)
        if windows is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
        return windows

    def _read_chunk_run(self, record: int, first: int, last: int) -> dict[int, np.ndarray]:
        """Block-read chunks ``first..last`` (inclusive) of ``record``; cache and return them."""
        start, _ = self._chunk_range(record, first)
        _, stop = self._chunk_range(record, last)
        block = self._read(record, start, stop)
        chunks = {}
        for chunk in range(first, last + 1):
            chunk_start, chunk_stop = self._chunk_range(record, chunk)
            windows = block[chunk_start - start : chunk_stop - start]
            self._remember((record, chunk), windows)
            chunks[chunk] = windows
        self.chunks_decoded += last - first + 1
        return chunks

    def _read(self, record: int, start: int, stop: int) -> np.ndarray:
        windows = self._open_store().read_windows(self.records[record], start, stop)
        return self._select_channels(np.asarray(windows, dtype=np.float32))

    def _window(self, position: int) -> np.ndarray:
        record = int(self.record_index[position])
        window = int(self.window_index[position])
        if self.cache_bytes == 0:
            self.chunks_decoded += 1
            return self._read(record, window, window + 1)[0]
        chunk = window // int(self.record_chunk_windows[record])
        windows = self._cached_chunk((record, chunk))
        if windows is None:
            windows = self._read_chunk_run(record, chunk, chunk)[chunk]
        return windows[window - self._chunk_range(record, chunk)[0]]

    def _fetch_chunks(
        self, records: np.ndarray, windows: np.ndarray
    ) -> dict[tuple[int, int], tuple[np.ndarray, int]]:
        """The stored blocks holding the windows ``(records[i], windows[i])``, each chunk decoded
        at most once (see :meth:`__getitems__`).

        Args:
            records: ``[N]`` record positions (in :attr:`records`).
            windows: ``[N]`` window indices inside those records.

        Returns:
            ``(record, chunk) -> (block [n, C, T] float32, window index of its first row)``.
        """
        chunks = windows // self.record_chunk_windows[records]
        found: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        missing: dict[int, list[int]] = {}
        for record, chunk in sorted(set(zip(records.tolist(), chunks.tolist(), strict=True))):
            cached = self._cached_chunk((record, chunk))
            if cached is None:
                missing.setdefault(record, []).append(chunk)
            else:
                found[(record, chunk)] = (cached, self._chunk_range(record, chunk)[0])
        for record, needed in missing.items():
            if self.cache_bytes > 0:
                for first, last in _consecutive_runs(needed):
                    for chunk, data in self._read_chunk_run(record, first, last).items():
                        found[(record, chunk)] = (data, self._chunk_range(record, chunk)[0])
                continue
            for chunk in needed:
                wanted = windows[(records == record) & (chunks == chunk)]
                start, stop = int(wanted.min()), int(wanted.max()) + 1
                found[(record, chunk)] = (self._read(record, start, stop), start)
                self.chunks_decoded += 1
        return found

    def read_spans(self, spans: Sequence[tuple[int, int, int]]) -> list[np.ndarray]:
        """Runs of consecutive stored windows, channel-major: each chunk the spans touch is
        decoded at most once (cached chunks reused), and every value is copied once, straight
        into its span's array (no per-window arrays).

        Args:
            spans: ``(record position in records, first window, number of windows n)`` each;
                every window must exist in the record.

        Returns:
            One ``[C, n, T]`` float32 array of stored values per span (channels selected, never
            normalised); ``reshape(C, n * T)`` gives the span as one signal without a copy.

        Raises:
            InputError: A span outside its record.
        """
        for record, first, count in spans:
            check(
                0 <= record < len(self.records)
                and count >= 1
                and first >= 0
                and first + count <= int(self.record_n_windows[record]),
                "spans",
                "(record position, first window, count) inside a selected record",
                repr((record, first, count)),
            )
        if not spans:
            return []
        records = np.concatenate([np.full(count, record) for record, _, count in spans])
        windows = np.concatenate([np.arange(first, first + count) for _, first, count in spans])
        found = self._fetch_chunks(records, windows)
        blocks = []
        for record, first, count in spans:
            size, window = int(self.record_chunk_windows[record]), first
            block = np.empty((self.n_chans, count, self.n_times), dtype=np.float32)
            while window < first + count:
                stored, stored_start = found[(record, window // size)]
                stop = min(first + count, stored_start + len(stored))
                part = stored[window - stored_start : stop - stored_start]
                block[:, window - first : stop - first] = part.transpose(1, 0, 2)
                window = stop
            blocks.append(block)
        return blocks

    def __getitem__(self, index: int) -> Sample:
        position = self._check_index(index)
        window = torch.from_numpy(np.array(self._window(position)))
        x = self._finish(window, int(self.record_index[position]))
        return self._sample(x, position)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Fetch a batch: each chunk the batch touches is decoded at most once.

        Chunks already in the cache are reused. With the cache on, the missing chunks of each
        record are grouped into runs of consecutive chunks, each read whole with one
        ``read_windows`` call and cached; with ``cache_bytes=0`` each touched chunk is read only
        over the span of windows the batch needs from it.

        Args:
            indices: Dataset indices, any order, repeats allowed.

        Returns:
            One sample per index, as :meth:`__getitem__` returns them.
        """
        positions = np.array([self._check_index(i) for i in indices], dtype=np.int64)
        if len(positions) == 0:
            return []
        records = self.record_index[positions]
        windows = self.window_index[positions]
        chunks = windows // self.record_chunk_windows[records]
        found = self._fetch_chunks(records, windows)
        batch = np.empty((len(positions), self.n_chans, self.n_times), dtype=np.float32)
        for row, (record, chunk, window) in enumerate(
            zip(records.tolist(), chunks.tolist(), windows.tolist(), strict=True)
        ):
            block, block_start = found[(record, chunk)]
            batch[row] = block[window - block_start]
        xs = self._finish(torch.from_numpy(batch), records)
        return [self._sample(x, int(p)) for x, p in zip(xs, positions.tolist(), strict=True)]


def _consecutive_runs(sorted_values: list[int]) -> list[tuple[int, int]]:
    """Split sorted distinct ints into ``(first, last)`` runs of consecutive values."""
    runs: list[tuple[int, int]] = []
    for value in sorted_values:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


class InMemoryWindows(_SelectedWindows, Dataset[Sample]):
    """The same selection as :class:`SleepWindowDataset`, loaded fully into RAM.

    Meant for small subsets (e.g. the 10-subject fine-tuning set: about 10 000 windows, 0.7 GB as
    float32). Windows are normalised once at load time. Arguments are those of
    :class:`SleepWindowDataset` (without ``cache_bytes``) plus ``progress``; with
    ``labelled_windows`` and ``labelled_only`` only the kept windows are read.

    Attributes:
        windows: ``[N, C, T]`` tensor of ``dtype`` (normalised if ``normalize``).
    """

    def __init__(
        self,
        store: str | Path | SleepStore,
        *,
        records: Sequence[str] | None = None,
        subjects: Sequence[str] | None = None,
        split: str | None = None,
        labelled_only: bool = False,
        normalize: bool | str = True,
        channels: Sequence[str] | None = None,
        dtype: torch.dtype = torch.float32,
        return_index: bool = False,
        progress: bool = True,
        labelled_windows: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        super().__init__(
            store,
            records=records,
            subjects=subjects,
            split=split,
            labelled_only=labelled_only,
            normalize=normalize,
            channels=channels,
            dtype=dtype,
            return_index=return_index,
            labelled_windows=labelled_windows,
        )
        self.windows = torch.empty((len(self), self.n_chans, self.n_times), dtype=dtype)
        store_handle = self._open_store()
        bounds = np.searchsorted(self.record_index, np.arange(len(self.records) + 1))
        for record in tqdm(
            range(len(self.records)), desc="loading records", unit="record", disable=not progress
        ):
            begin, end = int(bounds[record]), int(bounds[record + 1])
            if begin == end:
                continue
            wanted = self.window_index[begin:end]
            first, last = int(wanted[0]), int(wanted[-1])
            block = np.asarray(
                store_handle.read_windows(self.records[record], first, last + 1), dtype=np.float32
            )
            if self._channel_index is not None:
                block = block[:, self._channel_index]
            self.windows[begin:end] = self._finish(torch.from_numpy(block[wanted - first]), record)

    def __getitem__(self, index: int) -> Sample:
        position = self._check_index(index)
        return self._sample(self.windows[position], position)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Fetch a batch of samples (one tensor gather)."""
        positions = [self._check_index(i) for i in indices]
        xs = self.windows[positions]
        return [self._sample(x, p) for x, p in zip(xs, positions, strict=True)]
