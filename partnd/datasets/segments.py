"""Segments of consecutive 30 s windows of one record, for pretraining across windows.

PART across windows (:mod:`partnd.objectives.part_windows`) draws windows at off-grid starts inside
a *segment*: ``S`` consecutive stored windows of one record concatenated in time, ``x: [C, S*T]``.

* **Raw values.** A segment holds the stored values, never instance-normalised per stored window:
  per-window normalisation would leave a step at every stored-window boundary, and a window drawn
  across one would tell its offset modulo 30 s (the fractional part of the answer). The objective
  normalises every *drawn* window instead, exactly as fine-tuning windows are.
* **Contiguous.** Segments never cross records nor gaps: each record is split into runs of
  windows that start ``window_seconds`` apart (:meth:`~partnd.datasets.store.SleepStore.
  contiguous_runs`; dropped windows split runs), and segments are cut inside runs. Runs shorter
  than ``S`` windows give none. Unlabelled windows and records are used like labelled ones.
* **Stride.** Segments start every ``stride`` windows of a run (default ``S // 4``: consecutive
  segments overlap by three quarters), plus one that ends at the run's end when the strided ones
  miss its tail, so every window of a run of at least ``S`` windows is in some segment. Overlap
  is not duplication: the objective draws fresh windows and anchors in every segment at every
  step, and a stretch of sleep is seen at several places of a segment (its slot is no constant
  of its content). An epoch then reads each window about ``S / stride`` times.

Reads go through a :class:`~partnd.datasets.sleep_windows.SleepWindowDataset` (stored values,
chunk cache per process, one block read per contiguous chunk run of a batch), so a batch of
overlapping segments decodes each storage chunk once, and a segment is assembled from its
chunks' blocks in one copy (not from ``S`` window tensors). ``chunk_ids`` (the storage chunk of a
segment's first window) lets the training loop order segments chunk-locally.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from partnd._validation import InputError, check
from partnd.datasets.montage_union import MontageUnion, is_dataset_list, union_of
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset, item_position
from partnd.datasets.store import SleepStore
from partnd.engine.normalization import NORMALIZE_EPS

__all__ = ["SleepSegmentDataset", "as_segment_dataset"]


class SleepSegmentDataset(Dataset[Tensor]):
    """Map-style dataset of segments of ``S`` consecutive windows of one record.

    Each item is ``x: [C, S*T]`` (``dtype``), the stored values of windows ``w .. w + S - 1`` of
    one record in time order (window ``k`` of the segment is ``x[:, k*T:(k+1)*T]``). The store is
    opened lazily in every process, so the dataset pickles and works with
    ``DataLoader(num_workers > 0)``.

    Args:
        store: Path of a ``.zarr`` sleep store or an open :class:`SleepStore`.
        records: Record ids to use (order kept); ``None`` for all.
        subjects: Subject ids whose records to use; ``None`` for all.
        split: ``"training"`` or ``"test"`` (the store's partition); ``None`` for both.
        segment_windows: Windows per segment ``S`` (60: 30 min at 30 s windows), at least 2.
        stride: Windows between the starts of consecutive segments of a run; ``None`` for
            ``max(1, S // 4)``.
        channels: Channel names to return, in this order; ``None`` for all store channels.
        dtype: Floating point dtype of ``x``.
        cache_bytes: Bound of the decoded-chunk cache per process (see
            :class:`SleepWindowDataset`).
        normalize: ``"none"`` (stored values) or ``"record"``: every segment divided by its
            record's channel scales (:meth:`SleepStore.channel_scale`), one constant per record
            and channel, so no step appears at window boundaries; the objective then removes
            each drawn window's mean (record normalisation of the drawn windows).

    Attributes:
        segments: ``[M, 2]`` int64, the record position (in ``records``) and first window of
            every segment.
        chunk_ids: ``[M]`` storage chunk of every segment's first window (chunk-aware order).

    Raises:
        InputError: Unknown records, subjects, channels or split, a bad ``segment_windows`` or
            ``stride``, or no run of at least ``segment_windows`` windows.
    """

    def __init__(
        self,
        store: str | Path | SleepStore,
        *,
        records: Sequence[str] | None = None,
        subjects: Sequence[str] | None = None,
        split: str | None = None,
        segment_windows: int = 60,
        stride: int | None = None,
        channels: Sequence[str] | None = None,
        dtype: torch.dtype = torch.float32,
        cache_bytes: int = 64 * 2**20,
        normalize: str = "none",
    ) -> None:
        check(
            normalize in ("none", "record"),
            "normalize",
            "'none' or 'record' (segments are never normalised per window)",
            repr(normalize),
        )
        check(
            isinstance(segment_windows, int)
            and not isinstance(segment_windows, bool)
            and segment_windows >= 2,
            "segment_windows",
            "an int >= 2 (windows per segment)",
            repr(segment_windows),
        )
        if stride is None:
            stride = max(1, segment_windows // 4)
        check(
            isinstance(stride, int) and not isinstance(stride, bool) and stride >= 1,
            "stride",
            "None or an int >= 1 (windows between segment starts)",
            repr(stride),
        )
        self.windows = SleepWindowDataset(
            store,
            records=records,
            subjects=subjects,
            split=split,
            labelled_only=False,
            normalize=False,
            channels=channels,
            dtype=dtype,
            cache_bytes=cache_bytes,
        )
        self.segment_windows = segment_windows
        self.stride = stride
        self.normalize = normalize
        opened = store if isinstance(store, SleepStore) else SleepStore(self.windows.store_path)
        self._scales: Tensor | None = None
        if normalize == "record":
            picks = [opened.channels.index(name) for name in self.windows.ch_names]
            scales = np.stack([opened.channel_scale(r)[picks] for r in self.records])
            self._scales = torch.from_numpy(scales.astype(np.float32))
        #: Position in the window dataset of every record's first window.
        self._record_offsets = np.searchsorted(
            self.windows.record_index, np.arange(len(self.records))
        )
        self.segments = self._cut(opened)
        first = self._record_offsets[self.segments[:, 0]] + self.segments[:, 1]
        self.chunk_ids = self.windows.chunk_ids[first]
        for array in (self.segments, self.chunk_ids):
            array.flags.writeable = False

    def _cut(self, store: SleepStore) -> np.ndarray:
        """``[M, 2]`` (record position, first window) of every segment, record by record."""
        size, stride = self.segment_windows, self.stride
        rows: list[tuple[int, int]] = []
        longest = 0
        for position, record_id in enumerate(self.records):
            for start, stop in store.contiguous_runs(record_id):
                longest = max(longest, stop - start)
                if stop - start < size:
                    continue
                firsts = list(range(start, stop - size + 1, stride))
                if firsts[-1] + size < stop:
                    firsts.append(stop - size)
                rows.extend((position, first) for first in firsts)
        if not rows:
            raise InputError(
                f"segment_windows: expected at most the longest contiguous run of the selected "
                f"records ({longest} windows in {len(self.records)} record(s)), got "
                f"{self.segment_windows}"
            )
        return np.array(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.segments)

    @property
    def records(self) -> tuple[str, ...]:
        """The selected record ids."""
        return self.windows.records

    @property
    def record_subjects(self) -> tuple[str, ...]:
        """Subject id of every selected record."""
        return self.windows.record_subjects

    @property
    def subjects(self) -> list[str]:
        """Sorted subject ids of the selected records."""
        return self.windows.subjects

    @property
    def store_path(self) -> Path:
        """Path of the store."""
        return self.windows.store_path

    @property
    def sfreq(self) -> float:
        """Sampling frequency in Hz."""
        return self.windows.sfreq

    @property
    def n_chans(self) -> int:
        """Number of channels ``C`` of every segment."""
        return self.windows.n_chans

    @property
    def ch_names(self) -> list[str]:
        """Names of the returned channels, in order."""
        return self.windows.ch_names

    @property
    def window_samples(self) -> int:
        """Samples ``T`` of one stored window."""
        return self.windows.n_times

    @property
    def n_times(self) -> int:
        """Samples ``S * T`` of one segment."""
        return self.segment_windows * self.window_samples

    def _check_index(self, index: int) -> int:
        return item_position(index, len(self))

    def locate(self, index: int) -> tuple[str, int]:
        """``(record_id, first window index inside that record)`` of segment ``index``."""
        record, first = self.segments[self._check_index(index)]
        return self.records[int(record)], int(first)

    def __getitem__(self, index: int) -> Tensor:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Tensor]:
        """Fetch a batch of segments with one read of their windows (each chunk decoded once).

        Each segment is one channel-major block of stored windows ``[C, S, T]``, filled from
        the decoded chunks in one copy (:meth:`SleepWindowDataset.read_spans`) and viewed as
        ``[C, S*T]``; record scaling divides it in place (in float32, before the cast to
        ``dtype``).

        Args:
            indices: Dataset indices, any order, repeats allowed.

        Returns:
            One ``[C, S*T]`` segment per index.
        """
        positions = [self._check_index(index) for index in indices]
        spans = [
            (int(self.segments[p, 0]), int(self.segments[p, 1]), self.segment_windows)
            for p in positions
        ]
        segments = []
        for (record, _, _), block in zip(spans, self.windows.read_spans(spans), strict=True):
            segment = torch.from_numpy(block.reshape(self.n_chans, -1))
            if self._scales is not None:
                segment.div_(self._scales[record][:, None] + NORMALIZE_EPS)
            segments.append(segment.to(self.windows.dtype))
        return segments

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} segments of {self.segment_windows} windows, "
            f"stride {self.stride}, {len(self.records)} records, {self.n_chans} channels at "
            f"{self.sfreq:g} Hz)"
        )


def as_segment_dataset(
    data: Any, segment_windows: int, window_samples: int, normalize: str = "window"
) -> Any:
    """Segments of ``segment_windows`` windows over the records ``data`` reads from.

    A store path, a :class:`SleepWindowDataset` or an :class:`InMemoryWindows` becomes a
    :class:`SleepSegmentDataset` over the same store, records and channels (all windows of those
    records, labelled or not, stored values). A :class:`SleepSegmentDataset` is checked against
    the requested sizes. A list of those, or a :class:`~partnd.datasets.MontageUnion` of them,
    becomes the ``MontageUnion`` of their segments (on the union's channels). Anything else (an
    array ``[N, C, S*T]`` of segments, another dataset) is returned unchanged.

    Args:
        data: The pretraining data.
        segment_windows: Windows per segment ``S``.
        window_samples: Samples ``T`` of one window (must match the store's windows).
        normalize: How the objective normalises drawn windows (``"window"`` or ``"record"``,
            ``PretrainConfig.normalize``): ``"record"`` scales the segments by their night's
            channel scales. A window dataset normalised otherwise is refused.

    Raises:
        InputError: A segment dataset or store whose ``S`` or ``T`` differ from the requested.
    """

    def segments_of(part: Any, name: str = "dataset") -> Any:
        return as_segment_dataset(part, segment_windows, window_samples, normalize)

    if is_dataset_list(data):
        return union_of([segments_of(part) for part in data], "dataset", segments_of)
    if isinstance(data, MontageUnion):
        parts = [segments_of(part) for part in data.datasets]
        return MontageUnion(parts, channels=data.ch_names)
    scaled = "record" if normalize == "record" else "none"
    if isinstance(data, str | Path) and (Path(data) / "zarr.json").is_file():
        data = SleepSegmentDataset(data, segment_windows=segment_windows, normalize=scaled)
    elif isinstance(data, SleepWindowDataset | InMemoryWindows):
        check(
            data.normalize in ("none", normalize),
            "PretrainConfig.normalize",
            f"the normalisation of the windows given ({data.normalize!r})",
            repr(normalize),
        )
        data = SleepSegmentDataset(
            data.store_path,
            records=data.records,
            channels=data.ch_names,
            segment_windows=segment_windows,
            dtype=data.dtype,
            normalize=scaled,
        )
    if isinstance(data, SleepSegmentDataset):
        check(
            data.segment_windows == segment_windows,
            "dataset",
            f"segments of segment_windows={segment_windows} windows (the configuration's)",
            f"segments of {data.segment_windows}",
        )
        check(
            data.normalize == scaled,
            "dataset",
            f"segments with normalize={scaled!r} (PretrainConfig.normalize={normalize!r})",
            f"normalize={data.normalize!r}",
        )
        check(
            data.window_samples == window_samples,
            "dataset",
            f"windows of window_samples={window_samples} samples (the configuration's)",
            f"a store with windows of {data.window_samples} samples",
        )
    return data
