"""Datasets of different montages read as one, laid out on the union of their derivations.

A channel-set encoder (``channel_mode="set"``, :mod:`partnd.models.channel_set`) reads items laid
out on a named channel layout in which a channel an item lacks is NaN. :class:`MontageUnion`
gives several datasets that layout: stores of different montages (Sleep-EDF's Fpz-Cz and Pz-Oz,
SHHS's C4-A1, PC18's six derivations...) become one dataset over the union of their channel names,
each part's channels placed by name and the channels it lacks NaN. It is a view: items are read
from the parts when asked for (a batch with one ``__getitems__`` call per part), nothing is copied
up front, and it pickles for ``DataLoader`` workers as its parts do.

Sequence and night datasets (:class:`~partnd.datasets.SleepSequenceDataset`,
:class:`~partnd.datasets.SleepNightDataset`) are parts too: their items ``(x: [L, C_k, T], labels,
valid[, time])`` are laid out window by window, and :meth:`MontageUnion.nights` yields every
part's nights (whole records or runs) laid out alike, each carrying its store.

Example:
    >>> from partnd.datasets import MontageUnion, SleepWindowDataset
    >>> union = MontageUnion([SleepWindowDataset("pc18.zarr"), SleepWindowDataset("edf.zarr")])
    >>> union.ch_names  # ['F3-M2', ..., 'O2-M1', 'Fpz-Cz', 'Pz-Oz']
    >>> x, stage = union[0]  # x: [8, 3000], NaN in Fpz-Cz and Pz-Oz (a PC18 window)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset

from partnd._validation import InputError, check, describe, renamed_arguments
from partnd.datasets.adapters import (
    exposed_labels,
    find_source,
    load_signals,
    source_attribute,
)
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.sequences import Night, SleepSequenceDataset
from partnd.datasets.sleep_windows import item_position
from partnd.signal_info import SignalInfo

__all__ = ["MontageUnion", "as_union", "check_one_montage", "is_dataset_list", "union_of"]


def _shared(values: Sequence[Any]) -> Any:
    """The value every part gives (``None`` when they differ or one gives none)."""
    first = values[0]
    return first if all(value == first for value in values[1:]) else None


#: What a part is, by the items it gives (one kind per union).
_KINDS = {
    "window": "window datasets",
    "segment": "segment datasets (SleepSegmentDataset)",
    "sequence": "sequence datasets (SleepSequenceDataset)",
    "night": "night datasets (SleepNightDataset)",
}


def _part_kind(part: Any, position: int) -> str:
    """The kind of a part (a key of :data:`_KINDS`); a wrapped sequence dataset is refused."""
    if isinstance(part, SleepNightDataset):
        return "night"
    if isinstance(part, SleepSequenceDataset):
        return "sequence"
    check(
        find_source(part, SleepSequenceDataset) is None,
        f"datasets[{position}]",
        "a SleepSequenceDataset (SleepNightDataset) itself, not wrapped (its records' windows "
        "are read whole, as nights)",
        type(part).__name__,
    )
    return "segment" if source_attribute(part, "segment_windows") is not None else "window"


def _exposed_chunk_ids(dataset: Any) -> np.ndarray | None:
    """The storage chunk of every item of ``dataset`` (its ``chunk_ids``, seen through
    ``Subset`` s), or ``None`` when it exposes none."""
    if isinstance(dataset, Subset):
        ids = _exposed_chunk_ids(dataset.dataset)
        if ids is None:
            return None
        return np.asarray(ids)[np.asarray(dataset.indices, dtype=np.int64).reshape(-1)]
    ids = getattr(dataset, "chunk_ids", None)
    return None if ids is None else np.asarray(ids)


class MontageUnion(Dataset[Any]):
    """Items of several datasets laid out on one named channel layout, absent channels NaN.

    Item ``i`` of part ``k`` (items ``offsets[k] .. offsets[k + 1] - 1``) is that part's item with
    its signal ``[C_k, *spatial]`` laid out on :attr:`ch_names`: each channel of the part at the
    position of its name, every other channel NaN (channels of the part outside ``channels`` are
    left out). The rest of an item (a window's stage) is the part's. Window parts
    (:class:`~partnd.datasets.SleepWindowDataset`, ``InMemoryWindows``, ``Subset`` s of them, any
    dataset exposing ``ch_names`` and ``sfreq``) give ``(x, stage)``; segment parts
    (:class:`~partnd.datasets.segments.SleepSegmentDataset`, any dataset exposing
    ``segment_windows``) give ``x``. Sequence parts (:class:`~partnd.datasets.SleepSequenceDataset`)
    give ``(x: [L, C, T], labels: [L], valid: [L])`` and night parts
    (:class:`~partnd.datasets.SleepNightDataset`) ``(x, labels, valid, time: [L, 2])``: every
    window of ``x`` laid out, padding included; such a union also reads whole nights
    (:meth:`nights`) and every window's stage (:meth:`window_labels`) as its parts do.

    Args:
        datasets: The parts (at least one): all window, all segment, all sequence or all night
            datasets, of one sampling rate and one item length (windows per sequence too), each
            with named channels (``ch_names``).
        channels: The layout, in order; default the union of the parts' channel names in
            first-seen order. Every part must hold at least one of them.

    Attributes:
        datasets: The parts.
        kind: ``"window"``, ``"segment"``, ``"sequence"`` or ``"night"``: what the parts are.
        offsets: ``[K + 1]`` int64, the first item of every part and the total count.
        chunk_ids: ``[N]`` int64 storage chunk of every item (the parts' ``chunk_ids``, offset so
            that two parts never share one; an item of a part without them is its own chunk),
            for chunk-aware shuffling (:class:`~partnd.engine.sampler.ChunkShuffleSampler`).

    Raises:
        InputError: An empty list, unnamed or repeated channels, parts of different sampling
            rates or item lengths, parts of different kinds mixed, parts normalised differently,
            a part returning its own indices, or a part with no channel of ``channels``.
    """

    def __init__(
        self, datasets: Sequence[Dataset[Any]], channels: Sequence[str] | None = None
    ) -> None:
        check(
            isinstance(datasets, Sequence) and not isinstance(datasets, str) and len(datasets) > 0,
            "datasets",
            "a non-empty list of datasets",
            datasets if not isinstance(datasets, Sequence) else f"{len(datasets)} datasets",
        )
        self.datasets = list(datasets)
        names = [self._part_channels(part, k) for k, part in enumerate(self.datasets)]
        self._part_names = names
        self._check_kinds()
        self.sfreq = self._common_float("sfreq", "sampling rate (Hz)")
        self.n_times = self._common_length()
        self._layout = self._resolve_layout(names, channels)
        self._placements = [self._placement(part_names, k) for k, part_names in enumerate(names)]
        sizes = [len(part) for part in self.datasets]  # type: ignore[arg-type]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.normalize = self._common_normalization()
        self.chunk_ids = self._chunk_ids()
        self.offsets.flags.writeable = False
        self.chunk_ids.flags.writeable = False

    @staticmethod
    def _part_channels(part: Any, position: int) -> list[str]:
        names = source_attribute(part, "ch_names")
        check(
            names is not None
            and not isinstance(names, str)
            and len(names) > 0
            and all(isinstance(name, str) and name for name in names),
            f"datasets[{position}]",
            "a dataset with named channels (a non-empty ch_names of strings, as the sleep "
            "store's datasets have)",
            f"{type(part).__name__} with ch_names={names!r}",
        )
        names = list(names)
        check(
            len(set(names)) == len(names),
            f"datasets[{position}]",
            "distinct channel names",
            names,
        )
        return names

    def _check_kinds(self) -> None:
        kinds = [_part_kind(part, k) for k, part in enumerate(self.datasets)]
        check(
            len(set(kinds)) == 1,
            "datasets",
            "all " + " or all ".join(_KINDS.values()),
            " and ".join(
                f"{_KINDS[kind]} at {[k for k, given in enumerate(kinds) if given == kind]}"
                for kind in dict.fromkeys(kinds)
            ),
        )
        self.kind = kinds[0]
        self.on_segments = self.kind == "segment"
        for position, part in enumerate(self.datasets):
            check(
                not getattr(part, "return_index", False),
                f"datasets[{position}]",
                "a dataset with return_index=False (an item's index is the union's, not the "
                "part's)",
                "return_index=True",
            )
        if self.on_segments:
            self.segment_windows = self._common_length_of("segment_windows", "segment windows")
            self.window_samples = self._common_length_of("window_samples", "window samples")
        if self.on_sequences:
            self.context = self._common_length_of("context", "windows per sequence (context)")
            self.window_seconds = self._common_float("window_seconds", "window duration (s)")

    @property
    def on_sequences(self) -> bool:
        """Whether the parts are sequence (or night) datasets: items ``(x: [L, C, T], ...)``."""
        return self.kind in ("sequence", "night")

    def _common_float(self, name: str, what: str) -> float:
        values = [source_attribute(part, name) for part in self.datasets]
        for position, value in enumerate(values):
            check(
                isinstance(value, int | float) and value > 0,
                f"datasets[{position}]",
                f"a dataset exposing its {what} as {name}",
                f"{type(self.datasets[position]).__name__} with {name}={value!r}",
            )
        check(
            all(float(value) == float(values[0]) for value in values),
            "datasets",
            f"datasets of one {what} (resample the stores to one rate first)",
            f"{name}={[float(value) for value in values]}",
        )
        return float(values[0])

    def _common_length_of(self, name: str, what: str) -> int:
        values = [int(source_attribute(part, name)) for part in self.datasets]
        check(
            all(value == values[0] for value in values),
            "datasets",
            f"datasets of one number of {what}",
            f"{name}={values}",
        )
        return values[0]

    def _common_length(self) -> int:
        lengths = []
        for position, part in enumerate(self.datasets):
            value = source_attribute(part, "n_times")
            if not isinstance(value, int | np.integer):
                value = self._first_signal(part, position).shape[-1]
            lengths.append(int(value))
        check(
            all(length == lengths[0] for length in lengths),
            "datasets",
            "datasets of one item length in samples (windows or segments of one duration)",
            f"n_times={lengths}",
        )
        return lengths[0]

    @staticmethod
    def _first_signal(part: Any, position: int) -> Tensor:
        check(len(part) > 0, f"datasets[{position}]", "a non-empty dataset", "0 items")
        item = part[0]
        signal = item[0] if isinstance(item, tuple | list) else item
        check(
            hasattr(signal, "shape") and len(signal.shape) == 2,
            f"datasets[{position}][0]",
            "a signal [C, T]",
            describe(signal),
        )
        return torch.as_tensor(signal)

    def _resolve_layout(self, names: list[list[str]], channels: Sequence[str] | None) -> list[str]:
        if channels is None:
            return list(dict.fromkeys(name for part_names in names for name in part_names))
        check(
            not isinstance(channels, str)
            and len(channels) > 0
            and all(isinstance(name, str) and name for name in channels),
            "channels",
            "None or a non-empty sequence of channel names",
            channels,
        )
        check(len(set(channels)) == len(channels), "channels", "distinct names", list(channels))
        return list(channels)

    def _placement(self, part_names: list[str], position: int) -> tuple[Tensor, Tensor] | None:
        """``(source channels, layout positions)`` of a part, ``None`` when it is the layout."""
        if part_names == self._layout:
            return None
        source = [k for k, name in enumerate(part_names) if name in self._layout]
        check(
            len(source) > 0,
            "channels",
            f"a layout holding at least one channel of datasets[{position}] ({part_names})",
            self._layout,
        )
        target = [self._layout.index(part_names[k]) for k in source]
        return torch.tensor(source, dtype=torch.long), torch.tensor(target, dtype=torch.long)

    def _common_normalization(self) -> str | None:
        values = [source_attribute(part, "normalize") for part in self.datasets]
        named = [value for value in values if isinstance(value, str)]
        check(
            len(set(named)) <= 1,
            "datasets",
            "datasets normalised alike (one normalize setting)",
            f"normalize={values}",
        )
        return named[0] if named and len(named) == len(values) else None

    def _chunk_ids(self) -> np.ndarray:
        parts, offset = [], 0
        for part in self.datasets:
            ids = _exposed_chunk_ids(part)
            if ids is None:
                ids = np.arange(len(part), dtype=np.int64)  # type: ignore[arg-type]
            ids = np.asarray(ids, dtype=np.int64)
            if len(ids):
                ids = ids - ids.min() + offset
                offset = int(ids.max()) + 1
            parts.append(ids)
        return np.concatenate(parts)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def ch_names(self) -> list[str]:
        """Names of the layout's channels, in order."""
        return list(self._layout)

    @property
    def n_chans(self) -> int:
        """Number of channels ``C`` of the layout."""
        return len(self._layout)

    @property
    def dtype(self) -> torch.dtype | None:
        """The parts' floating dtype when they share one."""
        return _shared([source_attribute(part, "dtype") for part in self.datasets])

    @property
    def stage_names(self) -> tuple[str, ...] | None:
        """The parts' stage names when they share them."""
        values = [source_attribute(part, "stage_names") for part in self.datasets]
        shared = _shared([None if value is None else tuple(value) for value in values])
        return None if shared is None else tuple(shared)

    @property
    def labels(self) -> np.ndarray | None:
        """``[N]`` int64 label of every item (the parts' exposed ``labels``, concatenated), or
        ``None`` unless every part exposes them."""
        parts = [exposed_labels(part) for part in self.datasets]
        if any(labels is None for labels in parts):
            return None
        return np.concatenate([np.asarray(labels, dtype=np.int64) for labels in parts])

    @property
    def records(self) -> tuple[str, ...] | None:
        """The parts' record ids, part after part (``None`` unless every part has them)."""
        parts = [source_attribute(part, "records") for part in self.datasets]
        if any(records is None for records in parts):
            return None
        return tuple(str(record) for records in parts for record in records)

    @property
    def record_subjects(self) -> tuple[str, ...] | None:
        """Subject of every record of :attr:`records` (``None`` unless every part has them)."""
        parts = [source_attribute(part, "record_subjects") for part in self.datasets]
        if any(subjects is None for subjects in parts):
            return None
        return tuple(str(subject) for subjects in parts for subject in subjects)

    @property
    def subjects(self) -> list[str] | None:
        """Sorted subject ids of every part (``None`` unless every part has them)."""
        parts = [source_attribute(part, "subjects") for part in self.datasets]
        if any(subjects is None for subjects in parts):
            return None
        return sorted({str(subject) for subjects in parts for subject in subjects})

    def missing(self, channels: Sequence[str] | None = None) -> list[list[str]]:
        """The channels of the layout (or of ``channels``) every part lacks, part by part."""
        wanted = self._layout if channels is None else list(channels)
        return [[name for name in wanted if name not in names] for names in self._part_names]

    def part_name(self, part: int, argument: str = "datasets") -> str:
        """``datasets[k]``, with the part's store when it has one (for messages)."""
        store = source_attribute(self.datasets[part], "store_path")
        return f"{argument}[{part}]" + ("" if store is None else f" ({Path(store).name})")

    def part_of(self, index: int) -> tuple[int, int]:
        """``(part, index inside that part)`` of item ``index``."""
        position = item_position(index, len(self))
        part = int(np.searchsorted(self.offsets, position, side="right")) - 1
        return part, position - int(self.offsets[part])

    def locate(self, index: int) -> tuple[str, int]:
        """``(record id, window index)`` of item ``index`` as its part locates it (a sequence's
        first window; record ids are the part's store's: use :meth:`part_of` to tell stores
        apart)."""
        part, inner = self.part_of(index)
        locate: Any = getattr(self.datasets[part], "locate", None)
        check(
            callable(locate),
            "index",
            "an item of a part that locates its items (a sleep store dataset)",
            f"an item of datasets[{part}] ({type(self.datasets[part]).__name__})",
        )
        record, window, *_ = locate(inner)
        return str(record), int(window)

    def record_of(self, index: int) -> str:
        """The record id holding item ``index`` (see :meth:`locate`)."""
        return self.locate(index)[0]

    def _place(self, signals: Tensor, part: int) -> Tensor:
        """``[n, C_k, *spatial]`` signals (windows) of part ``part`` laid out
        ``[n, C, *spatial]``."""
        placement = self._placements[part]
        if placement is None:
            return signals
        source, target = placement
        out = signals.new_full((len(signals), len(self._layout), *signals.shape[2:]), np.nan)
        out[:, target] = signals[:, source]
        return out

    def _place_items(self, signals: Tensor, part: int) -> Tensor:
        """``[n, C_k, *spatial]`` item signals (``[n, L, C_k, T]`` sequences, laid out window by
        window) of part ``part`` laid out on the layout."""
        if not self.on_sequences:
            return self._place(signals, part)
        return self._place(signals.flatten(0, 1), part).unflatten(0, signals.shape[:2])

    def _laid_out(self, items: list[Any], part: int) -> list[Any]:
        if not items or self._placements[part] is None:
            return items
        paired = isinstance(items[0], tuple | list)
        signals = [torch.as_tensor(item[0] if paired else item) for item in items]
        placed = self._place_items(torch.stack(signals), part)
        if not paired:
            return list(placed)
        return [(x, *item[1:]) for x, item in zip(placed, items, strict=True)]

    def __getitem__(self, index: int) -> Any:
        part, inner = self.part_of(index)
        return self._laid_out([self.datasets[part][inner]], part)[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """A batch: each part's items are read with one call of its ``__getitems__`` (when it
        has one; each storage chunk decoded once) and laid out together.

        Args:
            indices: Item indices, any order, repeats allowed.

        Returns:
            One item per index, as :meth:`__getitem__` returns them.
        """
        located = [self.part_of(index) for index in indices]
        out: list[Any] = [None] * len(located)
        for part in sorted({k for k, _ in located}):
            rows = [row for row, (k, _) in enumerate(located) if k == part]
            inner = [located[row][1] for row in rows]
            dataset = self.datasets[part]
            fetch_many = getattr(dataset, "__getitems__", None)
            items = (
                list(fetch_many(inner))
                if callable(fetch_many)
                else [dataset[position] for position in inner]
            )
            for row, item in zip(rows, self._laid_out(items, part), strict=True):
                out[row] = item
        return out

    def _sequence_parts(self, what: str) -> list[SleepSequenceDataset]:
        check(
            self.on_sequences,
            "datasets",
            f"sequence or night datasets ({what} reads consecutive windows of records)",
            _KINDS[self.kind],
        )
        return cast(list[SleepSequenceDataset], self.datasets)

    @property
    def num_sequences(self) -> int:
        """Number of sequences (items) of sequence or night parts."""
        return len(self)

    @property
    def stride(self) -> list[int]:
        """The sequence parts' strides (windows between sequence starts), part by part."""
        return [part.stride for part in self._sequence_parts("stride")]

    def window_labels(self) -> np.ndarray:
        """[W] int64 stages of every window of the sequence parts' records (``-1`` unscored),
        part after part; reads no signal."""
        parts = self._sequence_parts("window_labels")
        return np.concatenate([part.window_labels() for part in parts])

    def nights(self) -> Iterator[Night]:
        """Every night of every sequence or night part, in order (see
        :meth:`SleepSequenceDataset.nights`), its windows ``[N, C, T]`` laid out on
        :attr:`ch_names`; its ``store`` tells the parts' records apart (record ids may repeat
        across stores)."""
        for position, part in enumerate(self._sequence_parts("nights")):
            for night in part.nights():
                yield dataclasses.replace(night, windows=self._place(night.windows, position))

    def __repr__(self) -> str:
        kind = self.kind
        return (
            f"{type(self).__name__}({len(self)} items of {len(self.datasets)} {kind} datasets "
            f"on {self.n_chans} channels {self._layout} at {self.sfreq:g} Hz)"
        )


def is_dataset_list(data: Any) -> bool:
    """Whether ``data`` is a list (or tuple) of store paths or datasets, read as one
    :class:`MontageUnion` (not a list of items, such as tensors ``[C, *spatial]``)."""
    return (
        isinstance(data, list | tuple)
        and len(data) > 0
        and all(isinstance(part, str | Path | Dataset) for part in data)
    )


def union_of(
    data: Sequence[str | Path | Dataset[Any]],
    argument: str,
    open_path: Callable[[Path, str], Any],
    *,
    channels: Sequence[str] | None = None,
    one_montage: str | None = None,
) -> MontageUnion:
    """The :class:`MontageUnion` of a list of store paths and datasets (as the training functions
    accept them).

    Args:
        data: Store paths (each opened with ``open_path``) and datasets (used as they are).
        argument: The caller's name of ``data`` in error messages (``dataset[1]: ...``).
        open_path: Opens one path, given the path and its name in messages (``dataset[0]``).
        channels: The layout (default the union of the parts' channels).
        one_montage: What reads the data when it cannot read absent channels (``"a model of
            fixed channels"``): every part must then hold every channel of the layout
            (:func:`check_one_montage`).

    Raises:
        InputError: As :class:`MontageUnion`, naming ``argument``; with ``one_montage``, parts
            lacking channels of the layout.
    """
    with renamed_arguments({"datasets": argument}):
        parts = [
            open_path(Path(part), f"{argument}[{k}]") if isinstance(part, str | Path) else part
            for k, part in enumerate(data)
        ]
        union = MontageUnion(parts, channels)
    if one_montage is not None:
        check_one_montage(union, argument, one_montage)
    return union


def check_one_montage(
    union: MontageUnion, argument: str, reader: str, channels: Sequence[str] | None = None
) -> None:
    """Refuse a union whose parts lack channels, for a reader of fixed channels.

    Args:
        union: The union.
        argument: Its name in error messages.
        reader: What reads it (``"a model of fixed channels"``).
        channels: The channels every part must hold (default: the union's layout).

    Raises:
        InputError: A part lacks one of ``channels``; the message names every such part with
            the channels it lacks, and suggests ``channel_mode='set'``.
    """
    wanted = union.ch_names if channels is None else list(channels)
    lacking = [
        f"{union.part_name(k, argument)} lacking {names}"
        for k, names in enumerate(union.missing(wanted))
        if names
    ]
    if lacking:
        raise InputError(
            f"{argument}: expected datasets holding every channel of {wanted} for {reader}, got "
            f"{'; '.join(lacking)} (channel_mode='set' reads datasets of different montages, "
            "their absent channels NaN)"
        )


def as_union(
    data: Any,
    argument: str,
    *,
    expected: SignalInfo | None = None,
    absent_channels: bool = False,
    labelled: bool = False,
) -> Any:
    """Data as the training functions read them: a list of store paths and datasets becomes one
    :class:`MontageUnion`, and a union is checked against its reader. Other data are returned
    unchanged (the adapters of :mod:`partnd.datasets.adapters` take them from there).

    Args:
        data: The data given (a list of store paths and datasets, a union, anything else).
        argument: Its name in error messages.
        expected: The signal of the model that reads the data: stores are read with its
            normalisation, and a fixed-channel model's named channels are the layout.
        absent_channels: The reader reads absent channels (a channel-set model); otherwise
            every part must hold every channel of the layout (:func:`check_one_montage`).
        labelled: Open stores' labelled windows only (fine-tuning, evaluation).

    Returns:
        The union, or ``data`` unchanged.
    """
    fixed = expected is not None and expected.channel_mode != "set"
    channels = expected.ch_names if fixed and expected is not None else None
    if is_dataset_list(data):
        options: dict[str, Any] = {"labelled_only": True} if labelled else {}
        if expected is not None and expected.normalization is not None:
            options["normalize"] = expected.normalization  # stores read as the model read them
        data = union_of(
            data,
            argument,
            lambda path, name: load_signals(path, name, **options),
            channels=channels,
        )
    if isinstance(data, MontageUnion) and not absent_channels:
        check_one_montage(data, argument, "a model of fixed channels", channels)
    return data
