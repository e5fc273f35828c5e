"""Sequences of consecutive 30 s windows from a sleep store, for models that read context.

A sequence classifier (:class:`~partnd.models.sequence.SequenceClassifier`) scores each window
with its neighbours. :class:`SleepSequenceDataset` cuts the selected records into sequences of
``context`` consecutive windows:

* a sequence never crosses two records, nor a gap inside a record (windows dropped by
  preprocessing split a record into runs: :meth:`SleepStore.contiguous_runs`);
* a run shorter than ``context`` gives one sequence padded at its end: padded places have
  ``valid = False`` (the model removes them from attention) and label ``-1``;
* unscored windows stay in the sequence as context, with label ``-1`` (no loss, no score);
* sequences start every ``stride`` windows, and the last one of a run ends at the run's end, so
  every window is in at least one sequence.

Items are ``(x: [L, C, T], labels: [L] int64, valid: [L] bool)``;
:meth:`SleepSequenceDataset.nights` yields every run of a selected record whole (for whole-night
prediction and evaluation).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from partnd._validation import InputError, check
from partnd.datasets.sleep_windows import (
    _check_labelled_records,
    _resolve_channels,
    _resolve_records,
    _store_path,
    item_position,
    keep_labels,
)
from partnd.datasets.store import SleepStore
from partnd.engine.normalization import instance_normalize, record_normalize, resolve_normalization

__all__ = ["Night", "SequenceItem", "SleepSequenceDataset"]

SequenceItem = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class Night:
    """One run of consecutive windows of a record, whole.

    Attributes:
        record: Record id.
        first: Index of the run's first window in the record.
        windows: [N, C, T] windows (normalised as the dataset's).
        labels: [N] int64 stages (``-1`` unscored).
        start_times: [N] window starts in seconds from the recording start.
        store: Path of the record's store (record ids may repeat across stores).
    """

    record: str
    first: int
    windows: Tensor
    labels: Tensor
    start_times: np.ndarray
    store: str | None = None


class SleepSequenceDataset(Dataset[SequenceItem]):
    """Sequences of ``context`` consecutive windows of the selected records of a sleep store.

    Args:
        store: Path of a sleep store or an open :class:`SleepStore`.
        records: Record ids (order kept); ``None`` for all.
        subjects: Subject ids whose records to use; ``None`` for all.
        split: ``"training"`` or ``"test"`` partition; ``None`` for both.
        context: Windows per sequence L.
        stride: Windows between the starts of consecutive sequences of a run (1: every window
            starts one, the usual training set; ``context``: no overlap).
        labelled_only: Keep only sequences with at least one labelled window.
        normalize: ``True``/``"window"``, ``"record"`` or ``False``/``"none"``, as the window
            datasets (:class:`~partnd.datasets.SleepWindowDataset`).
        channels: Channel names to return, in this order; ``None`` for all store channels.
        dtype: Floating point dtype of ``x``.
        in_memory: Load the selected records once (fast; ``N * C * T * 4`` bytes) instead of
            reading every item from the store.
        progress: Show a progress bar while loading.
        labelled_windows: ``{record: window indices}`` that keep their stage; every other window
            is unlabelled (``-1``) and stays in its sequences as context (for a budget of labelled
            windows, :mod:`partnd.datasets.label_budget`: with ``labelled_only`` only sequences
            holding a kept window remain). ``None`` keeps every stored stage.

    Raises:
        InputError: Unknown records, subjects, channels or split; an empty selection; a bad
            ``context`` or ``stride``; a ``labelled_windows`` entry outside the selection or
            unlabelled.
    """

    def __init__(
        self,
        store: str | Path | SleepStore,
        *,
        records: Sequence[str] | None = None,
        subjects: Sequence[str] | None = None,
        split: str | None = None,
        context: int = 21,
        stride: int = 1,
        labelled_only: bool = True,
        normalize: bool | str = True,
        channels: Sequence[str] | None = None,
        dtype: torch.dtype = torch.float32,
        in_memory: bool = True,
        progress: bool = True,
        labelled_windows: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        check(isinstance(context, int) and context >= 1, "context", "an int >= 1 windows", context)
        check(isinstance(stride, int) and stride >= 1, "stride", "an int >= 1 windows", stride)
        check(
            isinstance(dtype, torch.dtype) and dtype.is_floating_point,
            "dtype",
            "a floating point torch.dtype",
            dtype,
        )
        self.store_path = _store_path(store, "store")
        opened = store if isinstance(store, SleepStore) else SleepStore(self.store_path)
        self._store: SleepStore | None = opened
        self.context = context
        self.stride = stride
        self.normalize = resolve_normalization(normalize)
        self.dtype = dtype
        self.sfreq = float(opened.sfreq)
        self.n_times = int(opened.n_times)
        self.window_seconds = float(opened.window_seconds)
        self.stage_names: tuple[str, ...] = tuple(opened.stage_names)
        self._channel_index, self._ch_names = _resolve_channels(list(opened.channels), channels)
        self.records: tuple[str, ...] = tuple(_resolve_records(opened, records, subjects, split))
        _check_labelled_records(labelled_windows, self.records)
        self._stages = {
            r: keep_labels(opened.stages(r), r, labelled_windows).astype(np.int64)
            for r in self.records
        }
        self._runs = {r: self._spans(opened, r) for r in self.records}
        self._index = self._build_index(labelled_only)
        self._memory: dict[str, Tensor] | None = None
        if in_memory:
            self._memory = {
                record: self._read(record, 0, len(self._stages[record]))
                for record in tqdm(self.records, desc="loading records", disable=not progress)
            }

    def _spans(self, store: SleepStore, record: str) -> list[tuple[int, int]]:
        """``(start, stop)`` window ranges of ``record`` that sequences stay inside: its runs of
        consecutive windows."""
        return store.contiguous_runs(record)

    def _build_index(self, labelled_only: bool) -> np.ndarray:
        """``[S, 3]`` rows ``(record position, first window, windows before padding)``."""
        rows: list[tuple[int, int, int]] = []
        for position, record in enumerate(self.records):
            stages = self._stages[record]
            for start, stop in self._runs[record]:
                length = min(self.context, stop - start)
                firsts = list(range(start, stop - length + 1, self.stride))
                if firsts[-1] != stop - length:
                    firsts.append(stop - length)
                for first in firsts:
                    if not labelled_only or (stages[first : first + length] >= 0).any():
                        rows.append((position, first, length))
        if not rows:
            which = "sequence holding a labelled window" if labelled_only else "sequence"
            raise InputError(
                f"selection: expected at least one {which}, got none from {len(self.records)} "
                "record(s)"
            )
        index = np.array(rows, dtype=np.int64)
        index.flags.writeable = False
        return index

    def _open_store(self) -> SleepStore:
        if self._store is None:
            self._store = SleepStore(self.store_path)
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        return state

    def _read(self, record: str, start: int, stop: int) -> Tensor:
        """Windows ``start:stop`` of ``record``, channels picked, normalised, cast."""
        block = self._open_store().read_windows(record, start, stop)
        if self._channel_index is not None:
            block = block[:, self._channel_index]
        windows = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))
        if self.normalize == "window":
            windows = instance_normalize(windows)
        elif self.normalize == "record":
            scale = self._open_store().channel_scale(record)
            if self._channel_index is not None:
                scale = scale[self._channel_index]
            windows = record_normalize(windows, torch.from_numpy(scale.astype(np.float32)))
        return windows.to(self.dtype)

    def _windows(self, record: str, start: int, stop: int) -> Tensor:
        if self._memory is not None:
            return self._memory[record][start:stop]
        return self._read(record, start, stop)

    @property
    def n_chans(self) -> int:
        """Channels C of every window."""
        return len(self._ch_names)

    @property
    def ch_names(self) -> list[str]:
        """Names of the returned channels, in order."""
        return list(self._ch_names)

    @property
    def num_sequences(self) -> int:
        """Number of sequences (items)."""
        return len(self._index)

    def window_labels(self) -> np.ndarray:
        """[W] int64 stages of every window of the selected records (``-1`` unscored), in record
        order; reads no signal."""
        return np.concatenate([self._stages[record] for record in self.records])

    def __len__(self) -> int:
        return len(self._index)

    def locate(self, index: int) -> tuple[str, int, int]:
        """``(record, first window, windows before padding)`` of item ``index``."""
        position, first, length = (int(v) for v in self._index[index])
        return self.records[position], first, length

    def __getitem__(self, index: int) -> SequenceItem:
        record, first, length = self.locate(item_position(index, len(self)))
        x = torch.zeros((self.context, self.n_chans, self.n_times), dtype=self.dtype)
        x[:length] = self._windows(record, first, first + length)
        labels = torch.full((self.context,), -1, dtype=torch.long)
        labels[:length] = torch.from_numpy(self._stages[record][first : first + length])
        valid = torch.zeros(self.context, dtype=torch.bool)
        valid[:length] = True
        return x, labels, valid

    def nights(self) -> Iterator[Night]:
        """Every run of every selected record, whole and in order (for whole-night prediction)."""
        store = self._open_store()
        for record in self.records:
            starts = store.start_times(record)
            for start, stop in self._runs[record]:
                yield Night(
                    record=record,
                    first=start,
                    windows=self._windows(record, start, stop),
                    labels=torch.from_numpy(self._stages[record][start:stop].copy()),
                    start_times=starts[start:stop],
                    store=str(self.store_path),
                )
