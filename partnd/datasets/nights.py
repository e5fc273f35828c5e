"""Whole nights and crops of nights from a sleep store, with every window's time of night.

A :class:`~partnd.models.night.NightClassifier` reads a whole record at prediction and trains on
crops of it. :class:`SleepNightDataset` is a :class:`~partnd.datasets.SleepSequenceDataset` whose
sequences (the *crops*, ``context`` windows each) run over a record's stored windows in order,
across gaps (the time input says how far apart two windows are), and whose items carry each
window's time of night:

* items are ``(x: [L, C, T], labels: [L], valid: [L], time: [L, 2])``; a record shorter than the
  crop is one crop padded at its end (``valid`` False, label ``-1``, time 0);
* :meth:`SleepNightDataset.nights` yields every selected record whole (one
  :class:`~partnd.datasets.sequences.Night` per record, ``first = 0``).

:func:`time_of_night` is what a model may legitimately know of a window's time at inference: its
onset from the record's first stored window and the fraction of the recording elapsed (the
recording is read whole, so its length is known). It never uses the stages: the first window is
the first one stored, scored or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from partnd._validation import check
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import item_position
from partnd.datasets.store import SleepStore

__all__ = ["NightItem", "SleepNightDataset", "time_of_night"]

NightItem = tuple[Tensor, Tensor, Tensor, Tensor]


def time_of_night(start_times: np.ndarray | Sequence[float], window_seconds: float) -> Tensor:
    """The time features of every window of one recording.

    Args:
        start_times: [N] window onsets in seconds (any origin), in order.
        window_seconds: Duration of one window.

    Returns:
        [N, 2] float32: hours since the first window's onset, and that time over the recording's
        length (first onset to the last window's end), the fraction of the night elapsed.
    """
    onsets = np.asarray(start_times, dtype=np.float64)
    check(
        onsets.ndim == 1
        and len(onsets) >= 1
        and bool(np.all(np.isfinite(onsets)))
        and bool(np.all(np.diff(onsets) > 0)),
        "start_times",
        "[N >= 1] finite, increasing window onsets in seconds",
        onsets,
    )
    check(window_seconds > 0, "window_seconds", "a duration > 0 seconds", repr(window_seconds))
    elapsed = onsets - onsets[0]
    length = elapsed[-1] + window_seconds
    features = np.stack([elapsed / 3600.0, elapsed / length], axis=1)
    return torch.from_numpy(features.astype(np.float32))


class SleepNightDataset(SleepSequenceDataset):
    """Crops of ``context`` consecutive stored windows of whole records, with their time of night.

    The arguments are those of :class:`~partnd.datasets.SleepSequenceDataset` (``context``: windows
    per crop; ``stride``: windows between crop starts, the last crop of a record ends at its end).
    Unlike its sequences, crops run across gaps inside a record.
    """

    def __init__(self, store: str | Path | SleepStore, **options: Any) -> None:
        super().__init__(store, **options)
        opened = self._open_store()
        self._time = {
            record: time_of_night(opened.start_times(record), self.window_seconds)
            for record in self.records
        }

    def _spans(self, store: SleepStore, record: str) -> list[tuple[int, int]]:
        """The whole record: crops run across gaps."""
        count = len(store.start_times(record))
        return [(0, count)] if count else []

    def record_time(self, record: str) -> Tensor:
        """[N, 2] time of night of every window of ``record`` (:func:`time_of_night`)."""
        return self._time[record]

    def __getitem__(self, index: int) -> NightItem:  # type: ignore[override]
        position = item_position(index, len(self))
        x, labels, valid = super().__getitem__(position)
        record, first, length = self.locate(position)
        time = torch.zeros((self.context, 2), dtype=torch.float32)
        time[:length] = self._time[record][first : first + length]
        return x, labels, valid, time
