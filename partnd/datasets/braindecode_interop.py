"""Conversion between partnd sleep stores and braindecode windows datasets, both ways.

* :func:`to_braindecode` turns store records into a
  :class:`braindecode.datasets.BaseConcatDataset` of :class:`~braindecode.datasets.WindowsDataset`
  (one per record, on an in-memory :class:`mne.EpochsArray`), so braindecode models and training
  utilities run on our data. Item ``i`` of a record's dataset is
  ``(x [C, T] float32, stage, [i_window_in_trial, i_start, i_stop])``; the windows' metadata also
  carries the exact ``start_time`` in seconds (see :data:`START_TIME_COLUMN`).
* :func:`from_braindecode` writes a braindecode windows dataset (e.g. the output of
  ``create_windows_from_events`` on Sleep-EDF-like recordings) into a store with
  :func:`~partnd.datasets.store.create_store` / :func:`~partnd.datasets.store.write_record`.

Units: the store holds µV and MNE objects hold volts (MNE's unit for EEG), so
:func:`to_braindecode` divides by 1e6 (``epochs.get_data(units="uV")`` gives the stored values
back) and :func:`from_braindecode` multiplies by 1e6; store -> braindecode -> store is exact up to
float rounding. Many braindecode pipelines scale their data to µV themselves (its sleep examples
multiply by 1e6): :func:`from_braindecode` refuses data whose amplitude is impossible for EEG in
volts (median absolute value above :data:`MAX_MEDIAN_VOLTS`) and says to pass ``scale=1.0``.
Instance-normalised windows (``normalize=True``) are unitless z-scores and are not rescaled.

No resampling or re-windowing happens here: :func:`from_braindecode` requires the dataset's sampling
rate and window length to match ``sfreq`` / ``window_seconds`` (100 Hz and 30 s by default, the
partnd PhysioNet format), and raises otherwise. Resample in braindecode before windowing, e.g.
``preprocess(ds, [Preprocessor("resample", sfreq=100)])``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import mne
import numpy as np
import pandas as pd
import torch
from braindecode.datasets import BaseConcatDataset, EEGWindowsDataset, WindowsDataset
from tqdm.auto import tqdm

from partnd._validation import InputError, check
from partnd.datasets.store import STAGE_NAMES, UNLABELLED, SleepStore, create_store, write_record
from partnd.engine.normalization import instance_normalize

__all__ = [
    "MAX_MEDIAN_VOLTS",
    "MIN_MEDIAN_UV",
    "START_TIME_COLUMN",
    "UV_PER_VOLT",
    "from_braindecode",
    "to_braindecode",
]

UV_PER_VOLT = 1e6
"""Store values (µV) per MNE value (V)."""

MAX_MEDIAN_VOLTS = 0.5
"""Largest plausible median absolute amplitude of EEG in volts. Half a volt is beyond every EEG
amplifier's input range (BioSemi's DC-coupled ±262 mV is among the widest); data above it are µV
(median tens) or z-scores (median about 0.67) already."""

MIN_MEDIAN_UV = 1e-3
"""Smallest plausible median absolute amplitude of non-zero EEG in µV (1 nV): below it the values
are volts that were not converted."""

START_TIME_COLUMN = "start_time"
"""Window metadata column with the exact window start in seconds from the recording start.

``i_start_in_trial`` is a whole sample, but a PC18 window starts half a 100 Hz sample off the grid
when its first scored sample is odd; this column keeps the store's ``start_time`` exactly, and
:func:`from_braindecode` prefers it to ``i_start_in_trial / sfreq``.
"""


def _record_windows(
    store: SleepStore, record_id: str, *, labelled_only: bool, normalize: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(signal [W, C, T] float32, stage [W], start time [W] in s, window index [W])``."""
    stages = store.stages(record_id)
    signal = store.read_windows(record_id, 0, len(stages))
    start_times = store.start_times(record_id)
    windows = np.flatnonzero(stages >= 0) if labelled_only else np.arange(len(stages))
    signal = signal[windows]
    if normalize:
        signal = instance_normalize(torch.from_numpy(signal)).numpy()
    return signal, stages[windows], start_times[windows], windows


def to_braindecode(
    store: str | Path | SleepStore,
    records: Sequence[str] | None = None,
    *,
    normalize: bool = False,
    labelled_only: bool = False,
    progress: bool = True,
) -> BaseConcatDataset:
    """Expose store records as a braindecode dataset (loads the selected records into memory).

    Args:
        store: Path of a sleep store or an open :class:`SleepStore`.
        records: Record ids to convert (order kept); ``None`` for all. Each record costs
            ``n_windows × C × T × 8`` bytes (float64, as mne keeps it): about 140 MB for a night.
        normalize: Instance-normalise each window (as :class:`SleepWindowDataset` does); the
            values are then unitless z-scores, passed to mne unscaled.
        labelled_only: Keep only windows whose stage is not ``-1``.
        progress: Show a progress bar over records.

    Returns:
        A ``BaseConcatDataset`` of one ``WindowsDataset`` per record, in volts as MNE expects (the
        store's µV / 1e6; ``windows.get_data(units="uV")`` gives the stored values), whose
        ``description`` holds ``subject``, ``record_id`` and ``split`` and whose epochs'
        ``metadata`` has ``i_window_in_trial`` (window index in the record), ``i_start_in_trial``
        / ``i_stop_in_trial`` (samples from the recording start, rounded), ``target`` (stage
        code) and ``start_time`` (the store's exact window start in seconds).

    Raises:
        InputError: Unknown record ids, or a selected record left without windows.
    """
    opened = store if isinstance(store, SleepStore) else SleepStore(store)
    available = opened.record_ids()
    if records is None:
        selected = available
    else:
        check(not isinstance(records, str), "records", "a sequence of record ids", records)
        unknown = sorted(set(records) - set(available))
        check(not unknown, "records", "record ids present in the store", unknown)
        selected = list(dict.fromkeys(records))
    check(len(selected) > 0, "records", "at least one record", selected)
    info = mne.create_info(list(opened.channels), opened.sfreq, ch_types="eeg")
    datasets = []
    for record_id in tqdm(selected, desc="to braindecode", unit="record", disable=not progress):
        signal, stages, start_times, windows = _record_windows(
            opened, record_id, labelled_only=labelled_only, normalize=normalize
        )
        check(len(stages) > 0, "records", "records with labelled windows", record_id)
        starts = np.round(start_times * opened.sfreq).astype(np.int64)
        metadata = pd.DataFrame(
            {
                "i_window_in_trial": windows,
                "i_start_in_trial": starts,
                "i_stop_in_trial": starts + opened.n_times,
                "target": stages.astype(np.int64),
                START_TIME_COLUMN: start_times,
            }
        )
        events = np.column_stack([starts, np.zeros_like(starts), np.ones_like(starts)])
        values = signal.astype(np.float64)
        if not normalize:
            values /= UV_PER_VOLT
        epochs = mne.EpochsArray(
            values,
            info,
            events=events,
            event_id={"window": 1},
            metadata=metadata,
            verbose="error",
        )
        attrs = opened.record_attrs(record_id)
        description = {
            "subject": str(attrs["subject_id"]),
            "record_id": record_id,
            "split": str(attrs["split"]),
        }
        datasets.append(WindowsDataset(epochs, description=description))
    return BaseConcatDataset(datasets)


def _windows_of(
    dataset: Any, channels: Sequence[str] | None
) -> tuple[np.ndarray, float, list[str]]:
    """Return ``(windows [W, C, T] float64, sfreq, channel names)`` of one braindecode dataset."""
    if isinstance(dataset, EEGWindowsDataset):
        raw = dataset.raw
        picks = list(channels) if channels is not None else list(raw.ch_names)
        data = raw.get_data(picks=picks)
        crops = np.asarray(dataset.crop_inds)
        lengths = np.unique(crops[:, 2] - crops[:, 1])
        check(len(lengths) == 1, "windows_dataset", "windows of one length", lengths.tolist())
        windows = np.stack([data[:, start:stop] for _, start, stop in crops])
        return windows, float(raw.info["sfreq"]), picks
    if isinstance(dataset, WindowsDataset):
        epochs = dataset.windows
        picks = list(channels) if channels is not None else list(epochs.ch_names)
        return epochs.get_data(picks=picks), float(epochs.info["sfreq"]), picks
    raise InputError(
        "windows_dataset: expected a BaseConcatDataset of WindowsDataset or EEGWindowsDataset, "
        f"got one holding {type(dataset).__name__}"
    )


def _stage_codes(
    targets: Sequence[Any],
    stage_mapping: Mapping[Hashable, int | str] | None,
    stage_names: Sequence[str],
) -> np.ndarray:
    """Map braindecode targets to stage codes ``-1..len(stage_names)-1``."""
    codes = []
    unmapped = set()
    for target in targets:
        key = target.item() if isinstance(target, np.generic) else target
        value = key if stage_mapping is None else stage_mapping.get(key, None)
        if isinstance(value, str) and value in stage_names:
            value = list(stage_names).index(value)
        if (
            isinstance(value, int | np.integer)
            and not isinstance(value, bool)
            and UNLABELLED <= value < len(stage_names)
        ):
            codes.append(int(value))
        else:
            unmapped.add(repr(key))
    check(
        not unmapped,
        "stage_mapping",
        f"a mapping of every target to a stage code in [-1, {len(stage_names) - 1}] or a name "
        f"in {list(stage_names)} (None: targets already are such codes)",
        f"no valid stage for targets {sorted(unmapped)}",
    )
    return np.asarray(codes, dtype=np.int8)


def from_braindecode(
    windows_dataset: BaseConcatDataset,
    store_path: str | Path,
    *,
    subject_key: str = "subject",
    record_key: str = "record_id",
    split_key: str = "split",
    stage_mapping: Mapping[Hashable, int | str] | None = None,
    stage_names: Sequence[str] = STAGE_NAMES,
    sfreq: float | None = 100.0,
    window_seconds: float | None = 30.0,
    channels: Sequence[str] | None = None,
    scale: float | None = None,
    dtype: str = "float32",
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> SleepStore:
    """Write a braindecode windows dataset into a partnd sleep store (one record per sub-dataset).

    The windows are taken to be in volts, as MNE holds EEG, and stored in µV (``scale=None``:
    times 1e6); a dataset already scaled to µV (or normalised) is refused with a message, pass
    ``scale=1.0`` for it. Targets must come from the windows' metadata
    (``targets_from="metadata"``). Window starts are taken from a ``start_time`` metadata column
    (seconds) when present, as :func:`to_braindecode` writes it, else from
    ``i_start_in_trial / sfreq``. The conversion resumes: when ``store_path`` already holds a
    store of the same configuration, records already written are skipped.

    Args:
        windows_dataset: ``BaseConcatDataset`` of ``WindowsDataset`` / ``EEGWindowsDataset``.
        store_path: Store directory to create.
        subject_key: Description column with the subject id (required).
        record_key: Description column with the record id; when absent, records are named
            ``"<subject>-<position>"``.
        split_key: Description column with ``"training"`` / ``"test"``; when absent, records with a
            labelled window are ``"training"`` and the others ``"test"``.
        stage_mapping: ``{target: stage code or stage name}``; ``None`` when targets already are
            codes ``-1..len(stage_names)-1`` (e.g. braindecode's sleep mapping W=0 … REM=4).
        stage_names: Names of stage codes ``0..``.
        sfreq: Required sampling rate in Hz (``None``: take the dataset's).
        window_seconds: Required window duration in s (``None``: take the dataset's).
        channels: Channels to write, in order (``None``: all channels of the first dataset).
        scale: Factor turning the dataset's values into µV. ``None`` (default): the values are
            volts (MNE's unit), scaled by 1e6, and a record whose median absolute value exceeds
            :data:`MAX_MEDIAN_VOLTS` is refused as not volts. ``1.0`` for data already in µV
            (e.g. multiplied by 1e6 in a braindecode ``Preprocessor``); any other factor as given.
            With any scale, non-zero data whose median absolute value ends below
            :data:`MIN_MEDIAN_UV` µV are refused as unconverted volts.
        dtype: On-disk signal dtype, ``"float32"`` or ``"float16"``.
        metadata: Extra store attributes (default records the braindecode source).
        overwrite: Replace an existing store at ``store_path``.
        progress: Show a progress bar over records.

    Returns:
        The written :class:`SleepStore`.

    Raises:
        InputError: Mismatched sampling rate, window length or channels, unmapped targets, missing
            description keys, duplicate record ids, or amplitudes implausible for the units
            (``scale``).
    """
    check(
        isinstance(windows_dataset, BaseConcatDataset) and len(windows_dataset.datasets) > 0,
        "windows_dataset",
        "a non-empty braindecode BaseConcatDataset",
        windows_dataset,
    )
    check(
        scale is None or (scale > 0 and bool(np.isfinite(scale))),
        "scale",
        "None (volts) or a positive finite factor",
        scale,
    )
    store: SleepStore | None = None
    existing: set[str] = set()
    record_ids: set[str] = set()
    store_channels: list[str] | None = None
    for position, dataset in enumerate(
        tqdm(windows_dataset.datasets, desc="from braindecode", unit="record", disable=not progress)
    ):
        check(
            getattr(dataset, "targets_from", "metadata") == "metadata",
            "windows_dataset",
            "datasets whose targets come from metadata",
            getattr(dataset, "targets_from", None),
        )
        description = dataset.description
        check(
            description is not None and subject_key in description,
            "subject_key",
            "a column of every dataset description",
            f"{subject_key!r} not in {list(description.index) if description is not None else []}",
        )
        subject_id = str(description[subject_key])
        record_id = (
            str(description[record_key])
            if record_key in description
            else f"{subject_id}-{position}"
        )
        check(record_id not in record_ids, "record_key", "unique record ids", record_id)
        record_ids.add(record_id)
        if record_id in existing:
            continue
        windows, data_sfreq, names = _windows_of(dataset, channels)
        n_times = windows.shape[-1]
        _check_timing(data_sfreq, n_times, sfreq, window_seconds)
        if store is None:
            store_metadata = {"source": "braindecode", "filter": None, "resample": None}
            store_metadata.update(metadata or {})
            store = create_store(
                store_path,
                sfreq=data_sfreq,
                channels=names,
                window_seconds=n_times / data_sfreq,
                stage_names=stage_names,
                metadata=store_metadata,
                overwrite=overwrite,
            )
            store_channels = list(store.channels)
            existing = set(store.record_ids())
            if record_id in existing:
                continue
        check(
            names == store_channels,
            "windows_dataset",
            f"the same channels in every dataset ({store_channels})",
            names,
        )
        check(
            bool(np.isclose(data_sfreq, store.sfreq)) and n_times == store.n_times,
            "windows_dataset",
            f"every dataset at {store.sfreq} Hz with {store.n_times}-sample windows",
            f"a dataset at {data_sfreq} Hz with {n_times}-sample windows",
        )
        stages = _stage_codes(dataset.metadata["target"].to_list(), stage_mapping, stage_names)
        if split_key in description:
            split = str(description[split_key])
        else:
            split = "training" if bool(np.any(stages >= 0)) else "test"
        if START_TIME_COLUMN in dataset.metadata:
            start_times = dataset.metadata[START_TIME_COLUMN].to_numpy(dtype=np.float64)
        else:
            start_times = dataset.metadata["i_start_in_trial"].to_numpy(dtype=np.float64)
            start_times = start_times / data_sfreq
        _check_amplitude(windows, scale, record_id)
        write_record(
            store.path,
            record_id,
            (windows * (UV_PER_VOLT if scale is None else scale)).astype(np.float32),
            stages,
            start_times,
            attrs={"subject_id": subject_id, "split": split, "source": "braindecode"},
            dtype=dtype,
        )
    return SleepStore(store_path)


def _check_amplitude(windows: np.ndarray, scale: float | None, record_id: str) -> None:
    """Refuse amplitudes that cannot be EEG in the units ``scale`` assumes (see its doc)."""
    step = max(1, windows.shape[-1] // 500)  # a strided sample is enough for a median
    median = float(np.median(np.abs(windows[..., ::step])))
    if median == 0.0:
        return
    if scale is None:
        check(
            median <= MAX_MEDIAN_VOLTS,
            "scale",
            "scale=1.0 for a dataset already in µV or normalised (the default reads the values "
            "as volts, as MNE holds EEG, and multiplies them by 1e6)",
            f"a median absolute amplitude of {median:.3g} 'V' in record {record_id!r}, above "
            f"{MAX_MEDIAN_VOLTS} V: no EEG in volts is that large, so these look like µV (or "
            "normalised values) already",
        )
        median_uv = median * UV_PER_VOLT
    else:
        median_uv = median * scale
    check(
        median_uv >= MIN_MEDIAN_UV,
        "scale",
        "a factor giving µV (scale=None for a dataset in volts, as MNE holds EEG)",
        f"scale={scale} giving a median absolute amplitude of {median_uv:.3g} µV in record "
        f"{record_id!r}: these look like volts stored as µV",
    )


def _check_timing(
    data_sfreq: float, n_times: int, sfreq: float | None, window_seconds: float | None
) -> None:
    """Raise unless the dataset's sampling rate and window length are the required ones."""
    if sfreq is not None:
        check(
            bool(np.isclose(data_sfreq, sfreq)),
            "sfreq",
            f"the dataset's sampling rate (resample in braindecode first to get {sfreq} Hz)",
            f"dataset at {data_sfreq} Hz",
        )
    if window_seconds is not None:
        expected = round(window_seconds * data_sfreq)
        check(
            n_times == expected,
            "window_seconds",
            f"windows of {expected} samples ({window_seconds} s at {data_sfreq} Hz)",
            f"windows of {n_times} samples",
        )
