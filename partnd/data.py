"""Dataset adapters: accept what users have, hand the engine float tensors of one checked shape.

:func:`as_signal_dataset` (pretraining) and :func:`as_labelled_dataset` (fine-tuning, evaluation)
accept a torch ``Dataset`` whose items are a tensor/array ``[C, *spatial]`` or a tuple whose first
element is one (and whose second is the label), or a whole array/tensor ``[N, C, *spatial]``
(numpy arrays may be memory-mapped: items are copied one at a time). Every item is checked against
the first one (shape, and finite values), so a ragged or corrupt dataset fails naming the
offending index when the item is read; training loops need no further checks on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from partnd._validation import InputError, check, check_finite, describe

__all__ = [
    "ArrayDataset",
    "LabelledDataset",
    "SignalDataset",
    "SignalSpec",
    "as_labelled_dataset",
    "as_signal_dataset",
    "load_signals",
]


@dataclass(frozen=True)
class SignalSpec:
    """Shape of every item of a dataset.

    Attributes:
        in_chans: Channels C.
        spatial_shape: Spatial extent, e.g. ``(3000,)`` for a 30 s EEG window at 100 Hz.
    """

    in_chans: int
    spatial_shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions."""
        return len(self.spatial_shape)

    @property
    def item_shape(self) -> tuple[int, ...]:
        """``(C, *spatial)``."""
        return (self.in_chans, *self.spatial_shape)


def _to_tensor(value: Any, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    elif isinstance(value, np.ndarray):
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
        data: numpy array (memory-mapped works), or tensor, of shape ``[N, C, *spatial]``.
        labels: Optional integer labels ``[N]``.
    """

    def __init__(self, data: np.ndarray | torch.Tensor, labels: Sequence[int] | None = None):
        check(
            isinstance(data, np.ndarray | torch.Tensor) and data.ndim >= 3,
            "dataset",
            "an array or tensor [N, C, *spatial] with at least one spatial dimension",
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
        check(len(item) >= 1, where, "a non-empty tuple (signal, ...)", repr(item))
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
    array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    return array


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
        return ArrayDataset(data, labels)
    check(
        labels is None, labels_argument, "None when the dataset already yields (x, label)", labels
    )
    check(
        hasattr(data, "__getitem__") and hasattr(data, "__len__"),
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


class SignalDataset(Dataset[torch.Tensor]):
    """Signals only (labels dropped), as float32 tensors of the checked shape.

    Args:
        dataset: Source dataset (items: signal, or tuple whose first element is the signal).
        spec: Expected item shape.
        argument: Name used in error messages.
    """

    def __init__(self, dataset: Dataset[Any], spec: SignalSpec, argument: str = "dataset"):
        self.dataset = dataset
        self.spec = spec
        self.argument = argument

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    @property
    def chunk_ids(self) -> np.ndarray | None:
        """The source's storage chunk of every item (for chunk-aware shuffling), if it has one."""
        return getattr(self.dataset, "chunk_ids", None)

    def convert(self, item: Any, index: int) -> torch.Tensor:
        """Check and convert a source item (read at ``index``) to its float32 signal."""
        where = f"{self.argument}[{index}]"
        signal = _to_tensor(_first_signal(item, where), where)
        check(
            tuple(signal.shape) == self.spec.item_shape,
            where,
            f"a signal of shape {self.spec.item_shape} like {self.argument}[0]",
            signal,
        )
        check_finite(signal, where)
        return signal

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.convert(self.dataset[index], index)

    def __getitems__(self, indices: Sequence[int]) -> list[torch.Tensor]:
        """A batch of signals, read with the source's ``__getitems__`` when available."""
        items = _fetch(self.dataset, indices)
        return [self.convert(item, index) for item, index in zip(items, indices, strict=True)]


class LabelledDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(signal, label)`` pairs as ``(float32 [C, *spatial], int64 scalar)`` tensors.

    Args:
        dataset: Source dataset whose items are ``(signal, label, ...)`` tuples.
        spec: Expected signal shape.
        argument: Name used in error messages.
        labels_argument: Name of the caller's label argument when the labels came separately
            (``train_labels``...); default ``<argument>.labels``.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        spec: SignalSpec,
        argument: str = "dataset",
        labels_argument: str | None = None,
    ):
        self.signals = SignalDataset(dataset, spec, argument)
        self.dataset = dataset
        self.argument = argument
        self.labels_argument = labels_argument or f"{argument}.labels"

    def __len__(self) -> int:
        return len(self.signals)

    def label(self, index: int) -> int:
        """Label of item ``index`` (reads the item unless the source exposes ``labels``)."""
        labels = getattr(self.dataset, "labels", None)
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


def as_signal_dataset(
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path, argument: str = "dataset"
) -> tuple[SignalDataset, SignalSpec]:
    """Adapt ``data`` for pretraining (labels, if any, are ignored).

    Args:
        data: Dataset of ``[C, *spatial]`` items (or tuples starting with one), an array/tensor
            ``[N, C, *spatial]``, or a path (see :func:`load_signals`).
        argument: Name used in error messages.

    Returns:
        The adapted dataset and the item shape inferred from item 0.
    """
    dataset = _wrap(data, None, argument)
    spec = _inspect(dataset, argument)
    return SignalDataset(dataset, spec, argument), spec


def as_labelled_dataset(
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path,
    labels: Sequence[int] | None = None,
    argument: str = "dataset",
    labels_argument: str = "labels",
) -> tuple[LabelledDataset, SignalSpec]:
    """Adapt ``data`` for supervised training or evaluation.

    Args:
        data: Dataset of ``(signal [C, *spatial], label)`` items, an array/tensor
            ``[N, C, *spatial]`` together with ``labels``, or a path (see :func:`load_signals`;
            a store's labelled windows).
        labels: Labels ``[N]`` when ``data`` is an array.
        argument: Name used in error messages.
        labels_argument: The caller's name for ``labels`` in error messages.

    Returns:
        The adapted dataset and the item shape inferred from item 0.
    """
    if isinstance(data, str | Path):
        data = load_signals(
            data, argument, **({} if labels is not None else {"labelled_only": True})
        )
    if isinstance(data, np.ndarray | torch.Tensor):
        check(labels is not None, labels_argument, f"labels [N] for the array {argument}", "None")
    dataset = _wrap(data, labels, argument, labels_argument)
    spec = _inspect(dataset, argument)
    named = labels_argument if labels is not None else None
    return LabelledDataset(dataset, spec, argument, named), spec
