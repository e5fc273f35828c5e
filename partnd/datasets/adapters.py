"""Dataset adapters: accept what users have, hand the engine float tensors of one checked shape.

:func:`as_signal_dataset` (pretraining) and :func:`as_labelled_dataset` (fine-tuning, evaluation)
accept a torch ``Dataset`` whose items are a tensor/array ``[C, *spatial]`` or a tuple whose first
element is one (and whose second is the label), or a whole array/tensor ``[N, C, *spatial]``
(numpy arrays may be memory-mapped: items are copied one at a time). Every item is checked against
the first one (shape, and finite values), so a ragged or corrupt dataset fails naming the
offending index when the item is read; training loops need no further checks on the hot path.
For a channel-set model (``absent_channels=True``) a channel that is NaN throughout is a channel
the item lacks (as :class:`~partnd.datasets.MontageUnion` lays items out) and is accepted; any
other NaN or Inf value is still refused.

The adapted dataset's ``info`` (:class:`~partnd.signal_info.SignalInfo`) holds the item shape and,
when the source exposes them (a sleep store's window datasets do), the channel names and the
sampling rate. Given the ``SignalInfo`` a model was trained on (``expected=``), the adapters refuse
data that do not fit it, or pick the model's channels by name (:class:`ChannelSelection`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch.utils.data import Dataset, Subset, get_worker_info

from partnd._validation import InputError, check, check_finite, describe, renamed_arguments
from partnd.signal_info import SignalInfo, SignalSpec, channel_names, match_signal

__all__ = [
    "ArrayDataset",
    "ChannelSelection",
    "LabelledDataset",
    "SignalDataset",
    "as_labelled_dataset",
    "as_signal_dataset",
    "data_fingerprint",
    "exposed_labels",
    "find_source",
    "integer_labels",
    "load_npy",
    "load_signals",
    "source_attribute",
    "source_positions",
]

SourceT = TypeVar("SourceT")
_NPY_MAGIC = b"\x93NUMPY"


def _to_tensor(value: Any, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    elif isinstance(value, np.ndarray):
        check(value.dtype.kind in "fiu", where, "a real-valued signal", value)
        tensor = torch.from_numpy(np.array(value, dtype=np.float32, copy=True))
    else:
        raise InputError(
            f"{where}: expected a tensor or numpy array [C, *spatial] (or a tuple whose first "
            f"element is one), got {describe(value)}"
        )
    check(not tensor.is_complex(), where, "a real-valued signal", tensor)
    return tensor.to(torch.float32)


def _to_label(value: Any, where: str) -> torch.Tensor:
    if (isinstance(value, torch.Tensor) and value.numel() == 1) or (
        isinstance(value, np.ndarray | np.generic) and value.size == 1
    ):
        value = value.item()
    check(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        where,
        "an integer class label >= 0",
        repr(value),
    )
    return torch.tensor(value, dtype=torch.long)


class ArrayDataset(Dataset[Any]):
    """Items of an array or tensor ``[N, C, *spatial]``, optionally paired with labels ``[N]``.

    Args:
        data: numpy array (memory-mapped works), or tensor, of shape ``[N, C, *spatial]``, of
            real numbers.
        labels: Optional integer labels ``[N]``.
        argument: Name of ``data`` in error messages.
    """

    def __init__(
        self,
        data: np.ndarray | torch.Tensor,
        labels: Sequence[int] | None = None,
        argument: str = "dataset",
    ):
        check(
            isinstance(data, np.ndarray | torch.Tensor) and data.ndim >= 3,
            argument,
            "an array or tensor [N, C, *spatial] with at least one spatial dimension",
            data,
        )
        kind = data.dtype.kind if isinstance(data, np.ndarray) else None
        check(
            kind is None or kind in "fiu",
            argument,
            "real numbers (a float or integer dtype; the imaginary part of complex values "
            "would be dropped)",
            data,
        )
        if labels is not None:
            check(len(labels) == len(data), "labels", f"{len(data)} labels (one per item)", labels)
        self.data = data
        self.labels = labels

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        item = self.data[index]
        return item if self.labels is None else (item, self.labels[index])


def _first_signal(item: Any, where: str) -> Any:
    if isinstance(item, tuple | list):
        check(len(item) >= 1, where, "a non-empty tuple (signal, ...)", item)
        return item[0]
    return item


def _inspect(dataset: Dataset[Any], argument: str) -> SignalSpec:
    size = len(dataset)  # type: ignore[arg-type]
    check(size > 0, argument, "a non-empty dataset", "0 items")
    first = _to_tensor(_first_signal(dataset[0], f"{argument}[0]"), f"{argument}[0]")
    check(
        first.dim() >= 2,
        f"{argument}[0]",
        "a signal [C, *spatial] with at least one spatial dimension",
        first,
    )
    return SignalSpec(in_chans=first.shape[0], spatial_shape=tuple(first.shape[1:]))


def load_signals(path: str | Path, argument: str = "data", **store_options: Any) -> Any:
    """Open signals stored on disk, as the command line does.

    Args:
        path: A ``.npy`` array ``[N, C, *spatial]`` (memory-mapped) or a sleep store directory
            (any name; recognised by its ``zarr.json``), read as a
            :class:`~partnd.datasets.SleepWindowDataset`.
        argument: Name used in error messages.
        **store_options: Keywords of ``SleepWindowDataset`` (``records``, ``subjects``,
            ``labelled_only``, ``normalize``...); refused for a ``.npy`` file.

    Returns:
        The memory-mapped array or the window dataset.
    """
    path = Path(path)
    if path.is_dir() and (path / "zarr.json").is_file():
        from partnd.datasets.sleep_windows import SleepWindowDataset

        with renamed_arguments({"path": argument, "store": argument}):
            return SleepWindowDataset(path, **store_options)
    check(
        path.suffix == ".npy" and path.is_file(),
        argument,
        "an existing .npy file [N, C, *spatial] or a sleep store directory (with zarr.json)",
        str(path),
    )
    check(
        not store_options,
        argument,
        "a sleep store when records, subjects or labelled_only are given",
        f"the array {path}",
    )
    return load_npy(path, argument, mmap=True)


def load_npy(path: str | Path, argument: str, *, mmap: bool = False) -> np.ndarray:
    """Read an array written by ``numpy.save``, refusing anything else naming ``argument``.

    Args:
        path: The ``.npy`` file.
        argument: Name used in error messages.
        mmap: Memory-map the array instead of reading it.

    Raises:
        InputError: If the file is missing, is not a ``.npy`` array (a text or pickle file renamed
            ``.npy``, a truncated file) or holds objects.
    """
    path = Path(path)
    check(path.is_file(), argument, "an existing .npy file", str(path))
    with open(path, "rb") as handle:
        magic = handle.read(len(_NPY_MAGIC))
    check(
        magic == _NPY_MAGIC,
        argument,
        "a .npy array file written by numpy.save",
        f"{path}, which does not start with the .npy signature (a text, CSV or pickle file?)",
    )
    try:
        array: np.ndarray = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise InputError(
            f"{argument}: expected a readable .npy array of numbers, got {path} ({error})"
        ) from None
    return array


def integer_labels(values: Any, argument: str) -> list[int]:
    """Class labels ``[N]`` as ints, refusing what :func:`as_labelled_dataset` would refuse.

    Args:
        values: A 1-D array or sequence of integer labels (e.g. a ``.npy`` file's contents).
        argument: Name used in error messages.

    Raises:
        InputError: For a shape other than ``[N]``, non-integer values (``0.5``, ``2.0``,
            booleans, strings) or negative labels.
    """
    array = np.asarray(values)
    check(array.ndim == 1, argument, "labels [N] (one class index per item)", array)
    check(
        array.dtype.kind in "iu",
        argument,
        "integer class labels (an integer dtype; 0.5 or 2.0 are not class indices)",
        array,
    )
    low = int(array.min()) if array.size else 0
    check(low >= 0, argument, "class labels >= 0", f"labels down to {low}")
    return [int(value) for value in array]


def _wrap(
    data: Any, labels: Sequence[int] | None, argument: str, labels_argument: str = "labels"
) -> Dataset[Any]:
    if isinstance(data, str | Path):
        data = load_signals(data, argument)
    if isinstance(data, np.ndarray | torch.Tensor):
        if labels is not None:
            check(
                len(labels) == len(data),
                labels_argument,
                f"{len(data)} labels (one per item of {argument})",
                f"{len(labels)} labels",
            )
        return ArrayDataset(data, labels, argument)
    check(
        labels is None, labels_argument, "None when the dataset already yields (x, label)", labels
    )
    check(
        hasattr(data, "__getitem__") and hasattr(data, "__len__") and not isinstance(data, Mapping),
        argument,
        "a torch Dataset (with __len__) or an array [N, C, *spatial]",
        data,
    )
    dataset: Dataset[Any] = data
    return dataset


def _fetch(dataset: Dataset[Any], indices: Sequence[int]) -> list[Any]:
    """Items at ``indices``, through the source's batched ``__getitems__`` when it has one."""
    fetch_many = getattr(dataset, "__getitems__", None)
    if callable(fetch_many):
        return list(fetch_many(list(indices)))
    return [dataset[index] for index in indices]


def _check_channel_values(signals: torch.Tensor, names: Sequence[str]) -> None:
    """Refuse items other than finite values with absent channels (NaN over a whole channel).

    A channel-set model reads items whose absent channels are NaN (:class:`~partnd.datasets.
    MontageUnion`). One reduction per item and channel passes a batch of finite values; a batch
    with non-finite values takes two more reductions (the finite values of every item's channels,
    and their sums without NaN), about 1 ms for 64 windows of 8 x 3000 on one CPU thread.

    Args:
        signals: ``[B, C, *spatial]`` items.
        names: Name of every item in error messages (``dataset[7]``).

    Raises:
        InputError: An item with a NaN or Inf value in a channel that is not NaN throughout, or
            with no channel present.
    """
    flat = signals.flatten(2)
    if bool(torch.isfinite(flat.sum(dim=-1)).all()):  # [B, C]: NaN or Inf make a sum non-finite
        return
    length = flat.shape[-1]
    exact = torch.float32 if length < 2**24 else torch.float64  # counts exact in any dtype
    # per item and channel: its finite values (x * 0 + 1 is 1 for them, NaN for NaN and Inf),
    # and the sum of its values other than NaN (0 for a channel of NaN only, else Inf or NaN
    # where it holds an Inf value)
    finite = flat.mul(0).add_(1).nansum(dim=-1, dtype=exact)
    absent = (finite == 0) & (flat.nansum(dim=-1, dtype=exact) == 0)
    corrupt = (finite < length) & ~absent
    if not bool(corrupt.any() | absent.all(dim=1).any()):
        return
    for item, name in enumerate(names):  # name the first refused item
        channels = corrupt[item].nonzero().flatten().tolist()
        if channels:
            values = flat[item, channels]
            raise InputError(
                f"{name}: expected finite values, or NaN throughout a channel the item lacks "
                f"(an absent channel), got {int((~torch.isfinite(values)).sum())} NaN/Inf "
                f"value(s) in channel(s) {channels} of an item of shape "
                f"{tuple(signals.shape[1:])}"
            )
        check(
            not bool(absent[item].all()),
            name,
            "at least one present channel (one not NaN throughout)",
            f"all {signals.shape[1]} channels absent",
        )


class SignalDataset(Dataset[torch.Tensor]):
    """Signals only (labels dropped), as float32 tensors of the checked shape.

    Args:
        dataset: Source dataset (items: signal, or tuple whose first element is the signal).
        spec: Expected item shape.
        argument: Name used in error messages.
        absent_channels: Accept channels that are NaN throughout (channels an item lacks, which a
            channel-set model reads); other NaN or Inf values are refused either way.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        spec: SignalSpec,
        argument: str = "dataset",
        absent_channels: bool = False,
    ):
        self.dataset = dataset
        self.spec = spec
        self.argument = argument
        self.absent_channels = bool(absent_channels)
        #: The items' shape, and channel names and rate when the source exposes them.
        self.info = _signal_info(dataset, spec)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    @property
    def chunk_ids(self) -> np.ndarray | None:
        """The source's storage chunk of every item (for chunk-aware shuffling), if it has one."""
        return getattr(self.dataset, "chunk_ids", None)

    def _shaped(self, item: Any, index: int) -> torch.Tensor:
        """A source item's float32 signal, its shape checked (not its values)."""
        where = f"{self.argument}[{index}]"
        signal = _to_tensor(_first_signal(item, where), where)
        check(
            tuple(signal.shape) == self.spec.item_shape,
            where,
            f"a signal of shape {self.spec.item_shape} like {self.argument}[0]",
            signal,
        )
        return signal

    def convert(self, item: Any, index: int) -> torch.Tensor:
        """Check and convert a source item (read at ``index``) to its float32 signal."""
        signal = self._shaped(item, index)
        if self.absent_channels:
            _check_channel_values(signal[None], [f"{self.argument}[{index}]"])
        else:
            check_finite(signal, f"{self.argument}[{index}]")
        return signal

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.convert(self.dataset[index], index)

    def __getitems__(self, indices: Sequence[int]) -> list[torch.Tensor]:
        """A batch of signals, read with the source's ``__getitems__`` when available."""
        items = _fetch(self.dataset, indices)
        return [self.convert(item, index) for item, index in zip(items, indices, strict=True)]

    def batch(self, indices: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The items at ``indices`` as one checked batch ``[B, C, *spatial]`` of ``dtype``.

        What the engine's loader ships to the training process (:class:`~partnd.engine.Trainer`):
        the items are read with the source's ``__getitems__``, stacked once (into shared memory
        inside a ``DataLoader`` worker, the buffer the training process then maps) and cast on
        the way; one reduction over the batch checks the values, and a non-finite batch is
        searched for its first bad item, which the error names as :meth:`convert` would.

        Args:
            indices: Dataset indices.
            dtype: Floating dtype of the batch (``torch.bfloat16`` halves the bytes that the
                training process receives and pins; the values are the float32 items rounded).

        Returns:
            ``[len(indices), C, *spatial]`` tensor.
        """
        items = _fetch(self.dataset, indices)
        signals = [self._shaped(item, index) for item, index in zip(items, indices, strict=True)]
        out = _batch_buffer((len(signals), *self.spec.item_shape), dtype)
        torch.stack(signals, out=out)
        if self.absent_channels:
            _check_channel_values(out, [f"{self.argument}[{index}]" for index in indices])
        elif not bool(torch.isfinite(out.sum())):  # one reduction; NaN or Inf make it non-finite
            for signal, index in zip(signals, indices, strict=True):
                check_finite(signal, f"{self.argument}[{index}]")
        return out


def _batch_buffer(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor, in shared memory inside a ``DataLoader`` worker (as the default
    collation allocates it), so that sending it to the training process copies nothing."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(math.prod(shape))
    return torch.empty(0, dtype=dtype).new(storage).view(shape)


def exposed_labels(dataset: Any) -> Any:
    """The labels a source exposes without reading (or transforming) its items: its ``labels``,
    or torchvision's ``targets`` when no ``target_transform`` changes them, seen through
    ``Subset`` s; ``None`` when it exposes none."""
    if isinstance(dataset, Subset):
        labels = exposed_labels(dataset.dataset)
        if labels is None:
            return None
        return np.asarray(labels)[np.asarray(dataset.indices, dtype=np.int64).reshape(-1)]
    labels = getattr(dataset, "labels", None)
    if labels is None and getattr(dataset, "target_transform", None) is None:
        labels = getattr(dataset, "targets", None)
    return labels


class LabelledDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(signal, label)`` pairs as ``(float32 [C, *spatial], int64 scalar)`` tensors.

    Args:
        dataset: Source dataset whose items are ``(signal, label, ...)`` tuples.
        spec: Expected signal shape.
        argument: Name used in error messages.
        labels_argument: Name of the caller's label argument when the labels came separately
            (``train_labels``...); default ``<argument>.labels``.
        absent_channels: As :class:`SignalDataset`'s.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        spec: SignalSpec,
        argument: str = "dataset",
        labels_argument: str | None = None,
        absent_channels: bool = False,
    ):
        self.signals = SignalDataset(dataset, spec, argument, absent_channels)
        self.dataset = dataset
        self.argument = argument
        self.labels_argument = labels_argument or f"{argument}.labels"
        #: The items' shape, and channel names and rate when the source exposes them.
        self.info = self.signals.info

    def __len__(self) -> int:
        return len(self.signals)

    @cached_property
    def _exposed_labels(self) -> Any:
        return exposed_labels(self.dataset)

    def label(self, index: int) -> int:
        """Label of item ``index`` (reads the item unless the source exposes its labels,
        :func:`exposed_labels`)."""
        labels = self._exposed_labels
        if labels is not None:
            return int(_to_label(labels[index], f"{self.labels_argument}[{index}]"))
        return int(self[index][1])

    @property
    def chunk_ids(self) -> np.ndarray | None:
        """The source's storage chunk of every item (for chunk-aware shuffling), if it has one."""
        return self.signals.chunk_ids

    def convert(self, item: Any, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Check and convert a source item (read at ``index``) to ``(signal, label)``."""
        where = f"{self.argument}[{index}]"
        check(
            isinstance(item, tuple | list) and len(item) >= 2,
            where,
            "a (signal, label) tuple",
            describe(item) if not isinstance(item, tuple | list) else f"a {len(item)}-tuple",
        )
        return self.signals.convert(item, index), _to_label(item[1], f"{where} label")

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.convert(self.dataset[index], index)

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A batch of pairs, read with the source's ``__getitems__`` when available."""
        items = _fetch(self.dataset, indices)
        return [self.convert(item, index) for item, index in zip(items, indices, strict=True)]


def find_source(dataset: Any, kind: type[SourceT]) -> SourceT | None:
    """The first dataset of type ``kind`` in the chain ``dataset``, ``dataset.dataset``, ...

    Adapters and wrappers (:class:`SignalDataset`, :class:`ChannelSelection`...) keep their
    source as ``.dataset``.
    """
    seen = 0
    while dataset is not None and seen < 16:
        if isinstance(dataset, kind):
            return dataset
        dataset, seen = getattr(dataset, "dataset", None), seen + 1
    return None


def _holds(dataset: Any, kind: type | tuple[type, ...], depth: int = 0) -> bool:
    """Whether a dataset of type ``kind`` lies anywhere under ``dataset`` (through ``.dataset``
    and ``.datasets``, e.g. a ``ConcatDataset``'s parts)."""
    if isinstance(dataset, kind):
        return True
    if dataset is None or depth >= 16:
        return False
    parts = [getattr(dataset, "dataset", None), *(getattr(dataset, "datasets", None) or ())]
    return any(_holds(part, kind, depth + 1) for part in parts)


def _trace(dataset: Any) -> tuple[Any, np.ndarray | None]:
    """The dataset under ``dataset``'s ``Subset`` s and partnd adapters, and which of its items
    each item of ``dataset`` reads (``None``: item ``i`` is its item ``i``)."""
    positions: np.ndarray | None = None
    current = dataset
    for _ in range(16):
        if isinstance(current, Subset):
            indices = np.asarray(current.indices, dtype=np.int64).reshape(-1)
            positions = indices if positions is None else indices[positions]
        elif not isinstance(current, SignalDataset | LabelledDataset | ChannelSelection):
            break
        current = current.dataset
    return current, positions


def source_positions(
    dataset: Any, kind: type[SourceT] | tuple[type[SourceT], ...], argument: str = "data"
) -> tuple[SourceT, np.ndarray] | None:
    """The dataset of type ``kind`` under ``dataset``, and which of its items each item reads.

    ``torch.utils.data.Subset`` s are followed (nested, in any index order: their indices are
    composed) and so are partnd's adapters (:class:`SignalDataset`, :class:`LabelledDataset`,
    :class:`ChannelSelection`: item ``i`` is their source's item ``i``).

    Args:
        dataset: The dataset whose items are traced.
        kind: The source type(s) to find (e.g. a sleep store's window datasets).
        argument: Name used in error messages.

    Returns:
        ``(source, positions)``: ``positions[i]`` is the index in ``source`` of ``dataset``'s
        item ``i`` (``[N]`` int64, in ``[0, len(source))``); ``None`` when no ``kind`` is under
        ``dataset``.

    Raises:
        InputError: A ``kind`` lies under another wrapper (a ``ConcatDataset``, a dataset of
            one's own keeping its source as ``.dataset``): which of its items each item reads is
            unknown, so their place in the recording would be guessed.
    """
    current, positions = _trace(dataset)
    if isinstance(current, kind):
        size = len(current)  # type: ignore[arg-type]
        if positions is None:
            return current, np.arange(size, dtype=np.int64)
        positions = np.where(positions < 0, positions + size, positions)
        check(
            bool(np.all((positions >= 0) & (positions < size))),
            argument,
            f"Subset indices within the {size} items of its dataset",
            f"indices {positions.min()}..{positions.max()}",
        )
        return current, positions
    names = kind if isinstance(kind, tuple) else (kind,)
    wanted = " or ".join(k.__name__ for k in names)
    check(
        not _holds(current, kind),
        argument,
        f"a {wanted} itself or a torch Subset of one (nested, any index order), so that each "
        "item's window is known",
        f"a {type(current).__name__} holding a {wanted}",
    )
    return None


def source_attribute(dataset: Any, name: str) -> Any:
    """The first non-``None`` attribute ``name`` along the ``.dataset`` chain (or ``None``)."""
    seen = 0
    while dataset is not None and seen < 16:
        value = getattr(dataset, name, None)
        if value is not None and not callable(value):
            return value
        dataset, seen = getattr(dataset, "dataset", None), seen + 1
    return None


def _signal_info(dataset: Any, spec: SignalSpec) -> SignalInfo:
    sfreq = source_attribute(dataset, "sfreq")
    normalization = source_attribute(dataset, "normalize")
    return SignalInfo(
        in_chans=spec.in_chans,
        spatial_shape=spec.spatial_shape,
        ch_names=channel_names(source_attribute(dataset, "ch_names"), spec.in_chans),
        sfreq=float(sfreq) if isinstance(sfreq, int | float) and sfreq > 0 else None,
        normalization=normalization if isinstance(normalization, str) else None,
    )


class ChannelSelection(Dataset[Any]):
    """The items of ``dataset`` with only some channels, in a given order.

    Items are a signal ``[C, *spatial]`` or a tuple starting with one (the rest is kept); other
    attributes (``labels``, ``chunk_ids``, ``sfreq``, ``records``...) are the source's.

    Args:
        dataset: Source dataset.
        picks: Channel indices to keep, in output order.
        ch_names: Names of the kept channels (default: picked from the source's ``ch_names``).
    """

    def __init__(
        self, dataset: Dataset[Any], picks: Sequence[int], ch_names: Sequence[str] | None = None
    ) -> None:
        self.dataset = dataset
        self.picks = [int(index) for index in picks]
        names = ch_names
        if names is None:
            source = source_attribute(dataset, "ch_names")
            names = None if source is None else [list(source)[index] for index in self.picks]
        self.ch_names = None if names is None else list(names)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "picks", "ch_names") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def _pick(self, item: Any) -> Any:
        if isinstance(item, tuple | list):
            return (self._pick(item[0]), *item[1:])
        return item[self.picks]

    def __getitem__(self, index: int) -> Any:
        return self._pick(self.dataset[index])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """A batch, read with the source's ``__getitems__`` when it has one."""
        return [self._pick(item) for item in _fetch(self.dataset, indices)]


def _fit(
    dataset: Dataset[Any],
    spec: SignalSpec,
    expected: SignalInfo | None,
    argument: str,
    same_shape: bool,
    reference: str,
) -> tuple[Dataset[Any], SignalSpec]:
    """``(dataset, spec)`` checked against ``expected``, with its channels picked if needed."""
    if expected is None:
        return dataset, spec
    info = _signal_info(dataset, spec)
    picks = match_signal(expected, info, argument, same_shape=same_shape, reference=reference)
    if picks is None:
        return dataset, spec
    picked = ChannelSelection(dataset, picks)
    return picked, SignalSpec(in_chans=len(picks), spatial_shape=spec.spatial_shape)


def as_signal_dataset(
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path,
    argument: str = "dataset",
    *,
    expected: SignalInfo | None = None,
    same_shape: bool = True,
    reference: str = "the model was trained on",
    absent_channels: bool = False,
) -> tuple[SignalDataset, SignalSpec]:
    """Adapt ``data`` for pretraining or inference (labels, if any, are ignored).

    Args:
        data: Dataset of ``[C, *spatial]`` items (or tuples starting with one), an array/tensor
            ``[N, C, *spatial]``, or a path (see :func:`load_signals`; a store is read with
            ``expected``'s normalisation when it records one).
        argument: Name used in error messages.
        expected: The signal a model was trained on: data that do not fit it are refused, and
            its channels are picked by name when the data hold them (see
            :func:`~partnd.signal_info.match_signal`).
        same_shape: With ``expected``, also require its item shape.
        reference: Where ``expected`` comes from, for error messages.
        absent_channels: Accept absent channels (NaN throughout a channel), for a channel-set
            model (``channel_mode="set"``); implied by a channel-set ``expected``. Otherwise any
            NaN or Inf value is refused.

    Returns:
        The adapted dataset and the item shape inferred from item 0.
    """
    if isinstance(data, str | Path) and Path(data).is_dir():
        normalization = None if expected is None else expected.normalization
        options = {} if normalization is None else {"normalize": normalization}
        data = load_signals(data, argument, **options)  # a store, read as the model was
    dataset = _wrap(data, None, argument)
    spec = _inspect(dataset, argument)
    dataset, spec = _fit(dataset, spec, expected, argument, same_shape, reference)
    absent = absent_channels or _reads_channel_sets(expected)
    return SignalDataset(dataset, spec, argument, absent), spec


def as_labelled_dataset(
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path,
    labels: Sequence[int] | None = None,
    argument: str = "dataset",
    labels_argument: str = "labels",
    *,
    expected: SignalInfo | None = None,
    same_shape: bool = True,
    reference: str = "the model was trained on",
    absent_channels: bool = False,
) -> tuple[LabelledDataset, SignalSpec]:
    """Adapt ``data`` for supervised training or evaluation.

    Args:
        data: Dataset of ``(signal [C, *spatial], label)`` items, an array/tensor
            ``[N, C, *spatial]`` together with ``labels``, or a path (see :func:`load_signals`;
            a store's labelled windows).
        labels: Labels ``[N]`` when ``data`` is an array.
        argument: Name used in error messages.
        labels_argument: The caller's name for ``labels`` in error messages.
        expected: As :func:`as_signal_dataset`'s.
        same_shape: As :func:`as_signal_dataset`'s.
        reference: As :func:`as_signal_dataset`'s.
        absent_channels: As :func:`as_signal_dataset`'s.

    Returns:
        The adapted dataset and the item shape inferred from item 0.
    """
    if isinstance(data, str | Path):
        options: dict[str, Any] = {} if labels is not None else {"labelled_only": True}
        if expected is not None and expected.normalization is not None and labels is None:
            options["normalize"] = expected.normalization  # a store, read as the model was
        data = load_signals(data, argument, **options)
    if isinstance(data, np.ndarray | torch.Tensor):
        check(labels is not None, labels_argument, f"labels [N] for the array {argument}", "None")
    dataset = _wrap(data, labels, argument, labels_argument)
    spec = _inspect(dataset, argument)
    dataset, spec = _fit(dataset, spec, expected, argument, same_shape, reference)
    named = labels_argument if labels is not None else None
    absent = absent_channels or _reads_channel_sets(expected)
    return LabelledDataset(dataset, spec, argument, named, absent), spec


def _reads_channel_sets(expected: SignalInfo | None) -> bool:
    """Whether the model of ``expected`` reads channel sets (and so absent channels)."""
    return expected is not None and expected.channel_mode == "set"


def data_fingerprint(dataset: SignalDataset | LabelledDataset) -> dict[str, Any]:
    """What identifies the data of a run, to refuse resuming it on other data.

    Holds the item count and shape, the channel names when known, how a store's windows are
    normalised (``"window"``, ``"record"``...; the same records read another way are other data),
    the source's record ids when it has ``records`` (a sleep store's window datasets), the SHA-256
    of the items a ``Subset`` picks from its source (so another selection of the same size is
    told apart) and, for an array or tensor, the SHA-256 of its first, middle and last items (so
    another array of the same shape is told apart too; other datasets may draw random
    augmentations per read, so their values are not hashed).

    Args:
        dataset: An adapted dataset (:func:`as_signal_dataset`, :func:`as_labelled_dataset`).

    Returns:
        A JSON-serialisable dict; two runs saw the same data when their fingerprints are equal.
    """
    signals = dataset.signals if isinstance(dataset, LabelledDataset) else dataset
    records = source_attribute(dataset, "records")
    array = find_source(dataset, ArrayDataset)
    digest = None
    if array is not None:
        hashed = hashlib.sha256()
        for index in sorted({0, len(array) // 2, len(array) - 1}):
            item = array.data[index]
            values = item.detach().cpu().numpy() if isinstance(item, torch.Tensor) else item
            hashed.update(np.ascontiguousarray(values).tobytes())
        digest = hashed.hexdigest()
    _, positions = _trace(dataset)
    picked = None if positions is None else hashlib.sha256(positions.tobytes()).hexdigest()
    return {
        "num_items": len(signals),
        "subset_sha256": picked,
        "item_shape": list(signals.spec.item_shape),
        "ch_names": None if signals.info.ch_names is None else list(signals.info.ch_names),
        "records": [str(r) for r in records] if isinstance(records, tuple | list) else None,
        "items_sha256": digest,
        "normalization": signals.info.normalization,
    }
