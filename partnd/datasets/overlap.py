"""Windows that two store-backed datasets share: validation on training windows is a leak.

A checkpoint chosen by its kappa on windows it was trained on is chosen on what it memorised.
:func:`check_disjoint` refuses such a pair when both datasets read the same sleep store: window
datasets (:class:`~partnd.datasets.SleepWindowDataset`, ``InMemoryWindows``, and ``Subset`` s of
them, traced to their windows) are compared window by window, sequence datasets record by record,
a :class:`~partnd.datasets.MontageUnion` part by part.
Other data (arrays, datasets of one's own) carry no identity to compare and pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.data import Subset

from partnd._validation import InputError, check
from partnd.datasets.adapters import find_source, source_positions
from partnd.datasets.montage_union import MontageUnion
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset

__all__ = ["check_disjoint"]

_Item = tuple[str, str, int]


def _store_items(data: Any) -> set[_Item] | None:
    """``(store, record, window)`` of every item of a store-backed dataset (window ``-1``: every
    window of the record, for sequences), or ``None`` for other data."""
    union = find_source(data, MontageUnion)
    if union is not None:  # every part's items (a Subset of a union is not traced)
        parts = [_store_items(part) for part in union.datasets]
        if find_source(data, Subset) is not None or any(part is None for part in parts):
            return None
        return set().union(*(part for part in parts if part is not None))
    if isinstance(data, SleepSequenceDataset):
        store = str(Path(data.store_path).resolve())
        return {(store, record, -1) for record in data.records}
    try:
        located = source_positions(data, (SleepWindowDataset, InMemoryWindows))
    except InputError:  # a wrapper whose items cannot be traced: nothing to compare
        return None
    if located is None:
        return None
    source, positions = located
    store = str(Path(source.store_path).resolve())
    records = source.record_index[positions]
    windows = source.window_index[positions]
    return {(store, source.records[int(r)], int(w)) for r, w in zip(records, windows, strict=True)}


def check_disjoint(
    train: Any, val: Any, argument: str = "val_dataset", reference: str = "train_dataset"
) -> None:
    """Refuse validation data that hold windows of the training data (same store).

    Args:
        train: The training dataset (window or sequence dataset, adapted or not).
        val: The validation dataset.
        argument: Name of ``val`` in error messages.
        reference: Name of ``train`` in error messages.

    Raises:
        InputError: ``val`` shares windows (or, for sequences, records) with ``train``.
    """
    trained, validated = _store_items(train), _store_items(val)
    if trained is None or validated is None:
        return
    shared = trained & validated
    records = sorted({record for _, record, _ in shared})
    check(
        not shared,
        argument,
        f"windows other than those of {reference} (a checkpoint chosen on windows it was "
        "trained on is chosen on what it memorised)",
        f"windows of record(s) {', '.join(records[:5])}{', ...' if len(records) > 5 else ''} "
        "in both",
    )
