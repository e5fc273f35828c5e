"""Ingest any recording MNE can read (EDF first) with its hypnogram into a ``partnd-sleep`` store.

The recording goes through the same pipeline as the PC18 command
(:func:`preprocessing.pipeline.preprocess_continuous`: whole-night 0.1-30 Hz FIR, polyphase
resampling to 100 Hz, 30 s windows aligned to the first scored sample). The hypnogram is either

- :class:`mne.Annotations` whose descriptions are mapped to stage codes (default mapping
  :data:`DEFAULT_STAGE_MAPPING`: Rechtschaffen & Kales ``"Sleep stage W/1/2/3/4/R"`` with 3 and 4
  merged into N3, and AASM ``"W"/"N1"/"N2"/"N3"/"R"/"REM"``); unmapped descriptions (``"Sleep
  stage ?"``, ``"Movement time"``, events) leave their samples unscored;
- an array of per-epoch labels (stage codes ``0..4`` with ``-1`` unscored, or strings mapped like
  descriptions) starting ``hypnogram_onset`` seconds after the first sample, ``epoch_seconds``
  apart;
- None: an unlabelled recording (every full window from the first sample, stage ``-1``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import mne
import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.store import RECORDS_GROUP, SIGNAL_DTYPES, SleepStore

from .errors import RecordError
from .manifest import STATUS_DONE, STATUS_FAILED, Manifest
from .pipeline import (
    PreprocessingConfig,
    open_or_create_store,
    preprocess_continuous,
    store_windowed_record,
)
from .windowing import CONFLICTING_SAMPLE, UNDEFINED_SAMPLE

__all__ = [
    "DEFAULT_STAGE_MAPPING",
    "annotations_to_sample_stages",
    "epochs_to_sample_stages",
    "ingest_file",
    "ingest_raw",
]

DEFAULT_STAGE_MAPPING: dict[str, int] = {
    "Sleep stage W": 0,
    "Sleep stage 1": 1,
    "Sleep stage 2": 2,
    "Sleep stage 3": 3,
    "Sleep stage 4": 3,
    "Sleep stage R": 4,
    "Sleep stage N1": 1,
    "Sleep stage N2": 2,
    "Sleep stage N3": 3,
    "W": 0,
    "N1": 1,
    "N2": 2,
    "N3": 3,
    "R": 4,
    "REM": 4,
}
"""Hypnogram description -> stage code (0 W, 1 N1, 2 N2, 3 N3, 4 REM)."""

Hypnogram: TypeAlias = mne.Annotations | np.ndarray | Sequence[int] | Sequence[str] | None


def _mark(codes: np.ndarray, start: int, stop: int, code: int) -> None:
    """Assign ``code`` to ``codes[start:stop]``; samples already holding another stage conflict."""
    region = codes[start:stop]
    conflict = (region == CONFLICTING_SAMPLE) | ((region >= 0) & (region != code))
    region[:] = np.where(conflict, CONFLICTING_SAMPLE, code)


def _annotation_offset_seconds(raw: mne.io.BaseRaw, annotations: mne.Annotations) -> float:
    """Seconds to add to ``annotations.onset`` to get seconds from the first sample of ``raw``."""
    if annotations.orig_time is None:
        return 0.0
    meas_date = raw.info["meas_date"]
    if meas_date is None:
        raise InputError(
            "hypnogram: expected annotations without orig_time for a recording without "
            f"meas_date, got orig_time={annotations.orig_time}"
        )
    return (annotations.orig_time - meas_date).total_seconds() - raw.first_time


def annotations_to_sample_stages(
    raw: mne.io.BaseRaw,
    annotations: mne.Annotations,
    stage_mapping: Mapping[str, int] = DEFAULT_STAGE_MAPPING,
) -> np.ndarray:
    """Per-sample stage codes of ``raw`` from stage annotations.

    Onsets follow MNE's convention: relative to ``orig_time`` when the annotations have one (as
    after :func:`mne.read_annotations` of an EDF+ hypnogram), else to the first sample of ``raw``.

    Args:
        raw: The recording (only its timing is used).
        annotations: Stage annotations.
        stage_mapping: Description -> stage code; other descriptions are ignored.

    Returns:
        ``[n_times]`` int8: stage codes, -1 unscored, -2 where two different stages overlap.
    """
    sfreq = raw.info["sfreq"]
    codes = np.full(raw.n_times, UNDEFINED_SAMPLE, dtype=np.int8)
    offset = _annotation_offset_seconds(raw, annotations)
    for onset, duration, description in zip(
        annotations.onset, annotations.duration, annotations.description, strict=True
    ):
        if description not in stage_mapping:
            continue
        start = max(0, round((onset + offset) * sfreq))
        stop = min(raw.n_times, round((onset + offset + duration) * sfreq))
        if stop > start:
            _mark(codes, start, stop, int(stage_mapping[description]))
    return codes


def epochs_to_sample_stages(
    labels: np.ndarray | Sequence[int] | Sequence[str],
    n_samples: int,
    sfreq: float,
    *,
    onset: float = 0.0,
    epoch_seconds: float = 30.0,
    stage_mapping: Mapping[str, int] = DEFAULT_STAGE_MAPPING,
) -> np.ndarray:
    """Per-sample stage codes from one label per scoring epoch.

    Args:
        labels: ``[E]`` stage codes (0..4, -1 unscored) or descriptions mapped by ``stage_mapping``
            (unmapped descriptions are unscored).
        n_samples: Length of the recording in samples; epochs past the end are cut off.
        sfreq: Sampling frequency in Hz.
        onset: Start of the first epoch in seconds from the first sample.
        epoch_seconds: Epoch length in seconds.
        stage_mapping: Used for string labels.

    Returns:
        ``[n_samples]`` int8 stage codes.
    """
    array = np.asarray(labels)
    check(array.ndim == 1 and array.size > 0, "hypnogram", "a non-empty 1-D array of labels", array)
    check(onset >= 0, "hypnogram_onset", "a non-negative time in seconds", onset)
    check(epoch_seconds > 0, "epoch_seconds", "a positive duration in seconds", epoch_seconds)
    if array.dtype.kind in "US":
        codes_per_epoch = np.array(
            [stage_mapping.get(str(label), UNDEFINED_SAMPLE) for label in array], dtype=np.int64
        )
    else:
        check(array.dtype.kind in "iu", "hypnogram", "integer stage codes or strings", array)
        codes_per_epoch = array.astype(np.int64)
    check(
        bool(np.all((codes_per_epoch >= UNDEFINED_SAMPLE) & (codes_per_epoch <= 4))),
        "hypnogram",
        "stage codes in [-1, 4]",
        f"values {np.unique(codes_per_epoch).tolist()}",
    )
    codes = np.full(n_samples, UNDEFINED_SAMPLE, dtype=np.int8)
    bounds = np.round((onset + epoch_seconds * np.arange(len(array) + 1)) * sfreq).astype(np.int64)
    for code, start, stop in zip(codes_per_epoch, bounds[:-1], bounds[1:], strict=True):
        if start < n_samples:
            codes[start : min(stop, n_samples)] = code
    return codes


def _channel_names(
    raw: mne.io.BaseRaw, eeg_channels: Sequence[str] | Mapping[str, str] | None
) -> tuple[list[str], list[str]]:
    """``(names in raw, names stored)``."""
    if eeg_channels is None:
        picks = mne.pick_types(raw.info, eeg=True, exclude=())
        source = [raw.ch_names[index] for index in picks]
        check(
            bool(source), "eeg_channels", "channel names (the recording has no EEG channel)", None
        )
        return source, source
    if isinstance(eeg_channels, Mapping):
        source, stored = list(eeg_channels), [str(name) for name in eeg_channels.values()]
    else:
        source = stored = [str(name) for name in eeg_channels]
    missing = [name for name in source if name not in raw.ch_names]
    check(not missing, "eeg_channels", f"names among {raw.ch_names}", missing)
    check(len(set(stored)) == len(stored), "eeg_channels", "distinct stored names", stored)
    return source, stored


def ingest_raw(
    raw: mne.io.BaseRaw,
    hypnogram: Hypnogram,
    store_path: str | Path,
    record_id: str,
    *,
    subject_id: str | None = None,
    split: str | None = None,
    eeg_channels: Sequence[str] | Mapping[str, str] | None = None,
    stage_mapping: Mapping[str, int] = DEFAULT_STAGE_MAPPING,
    hypnogram_onset: float = 0.0,
    epoch_seconds: float = 30.0,
    config: PreprocessingConfig | None = None,
    dtype: str = "float32",
    source_name: str = "mne",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Preprocess one MNE recording and store it as ``record_id``.

    The store is created on first use (channels = the stored channel names) and reopened afterwards;
    every record of a store must use the same channel names and configuration.

    Args:
        raw: The recording; its data are read in µV (preloading is not required).
        hypnogram: Stage annotations, per-epoch labels, or None (unlabelled); see the module doc.
        store_path: Target store.
        record_id: Identifier of the new record.
        subject_id: Subject of the recording (default: ``record_id``).
        split: Split attribute (default ``"training"`` when labelled, ``"test"`` otherwise).
        eeg_channels: Channels to keep: names, or a mapping ``{name in raw: stored name}``
            (default: every EEG channel).
        stage_mapping: Description -> stage code for annotation or string labels.
        hypnogram_onset: For per-epoch labels, start of the first epoch in seconds from the first
            sample.
        epoch_seconds: For per-epoch labels, epoch length in seconds.
        config: Preprocessing configuration (default :class:`PreprocessingConfig`).
        dtype: On-disk signal dtype.
        source_name: ``source.dataset`` attribute of a newly created store.
        overwrite: Replace an existing record ``record_id``.

    Returns:
        The record attributes written.

    Raises:
        RecordError: The recording cannot be preprocessed (non-finite data, no scored sample, flat
            channel, no window left, ...); the store's manifest records the failure (status
            ``"failed"``, reason, detail) before the error propagates.
        InputError: Bad arguments, or a store with other channels or configuration.
    """
    check(isinstance(raw, mne.io.BaseRaw), "raw", "an mne.io.BaseRaw", type(raw).__name__)
    check(dtype in SIGNAL_DTYPES, "dtype", f"one of {SIGNAL_DTYPES}", repr(dtype))
    config = config if config is not None else PreprocessingConfig()
    source_names, stored_names = _channel_names(raw, eeg_channels)
    sfreq = float(raw.info["sfreq"])
    data = raw.get_data(picks=source_names, units="uV")
    if hypnogram is None:
        sample_stages = None
    elif isinstance(hypnogram, mne.Annotations):
        sample_stages = annotations_to_sample_stages(raw, hypnogram, stage_mapping)
    else:
        sample_stages = epochs_to_sample_stages(
            hypnogram,
            raw.n_times,
            sfreq,
            onset=hypnogram_onset,
            epoch_seconds=epoch_seconds,
            stage_mapping=stage_mapping,
        )
    digest = hashlib.sha256(np.ascontiguousarray(data).tobytes())
    if sample_stages is not None:
        digest.update(sample_stages.tobytes())
    metadata = {
        **config.store_metadata({"dataset": source_name}, source_sfreq=None),
        "signal_dtype": dtype,
    }
    store = open_or_create_store(store_path, config, stored_names, metadata)
    check(
        not (store.path / RECORDS_GROUP / record_id).exists() or overwrite,
        "record_id",
        f"an id not yet in {str(store.path)!r} (or overwrite=True)",
        repr(record_id),
    )
    labelled = sample_stages is not None
    record_split = split if split is not None else ("training" if labelled else "test")
    try:
        windowed = preprocess_continuous(data, sfreq, sample_stages, config, channels=stored_names)
        del data
        attrs = store_windowed_record(
            store.path,
            record_id,
            windowed,
            config,
            {
                "subject_id": subject_id if subject_id is not None else record_id,
                "split": record_split,
                "source_checksum": digest.hexdigest(),
                "source_channels": source_names,
            },
            dtype=dtype,
            overwrite=overwrite,
        )
    except RecordError as error:
        Manifest(store.path).update(
            record_id,
            {
                "status": STATUS_FAILED,
                "reason": error.reason,
                "detail": error.detail,
                "split": record_split,
                "source_checksum": digest.hexdigest(),
            },
        )
        raise
    Manifest(store.path).update(
        record_id,
        {
            "status": STATUS_DONE,
            "reason": None,
            "detail": None,
            "split": attrs["split"],
            "n_kept": len(windowed.stage),
            "n_dropped": sum(windowed.dropped.values()),
            "n_dropped_by_reason": windowed.dropped,
            "source_checksum": attrs["source_checksum"],
            "duration_s": attrs["duration_s"],
            "first_window_sample": windowed.first_window_sample,
        },
    )
    return SleepStore(store.path).record_attrs(record_id)


def ingest_file(
    path: str | Path,
    hypnogram: str | Path | Hypnogram,
    store_path: str | Path,
    record_id: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Ingest a file MNE reads (:func:`mne.io.read_raw`: EDF, BDF, FIF, BrainVision, ...).

    Args:
        path: The recording file.
        hypnogram: A hypnogram file read with :func:`mne.read_annotations` (e.g. an EDF+
            ``*-Hypnogram.edf``), or anything :func:`ingest_raw` accepts.
        store_path: Target store.
        record_id: Identifier of the record (default: the file name without extension).
        **kwargs: Passed on to :func:`ingest_raw`.

    Returns:
        The record attributes written.
    """
    path = Path(path)
    check(path.is_file(), "path", "an existing recording file", str(path))
    raw = mne.io.read_raw(path, preload=False, verbose="error")
    if isinstance(hypnogram, (str, Path)):
        check(Path(hypnogram).is_file(), "hypnogram", "an existing annotation file", str(hypnogram))
        hypnogram = mne.read_annotations(hypnogram)
    return ingest_raw(
        raw,
        hypnogram,
        store_path,
        record_id if record_id is not None else path.stem,
        **kwargs,
    )
