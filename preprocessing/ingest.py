"""Ingest any recording MNE can read (EDF first) with its hypnogram into a ``partnd-sleep`` store.

The recording goes through the same pipeline as the PC18 command
(:func:`partnd.preprocessing.pipeline.preprocess_continuous`: whole-night 0.1-30 Hz FIR, polyphase
resampling to 100 Hz, 30 s windows aligned to the first scored sample). The hypnogram is either

- :class:`mne.Annotations` whose descriptions are mapped to stage codes (default mapping
  :data:`DEFAULT_STAGE_MAPPING`, the shared table of :mod:`partnd.datasets.stages`:
  Rechtschaffen & Kales ``"Sleep stage W/1/2/3/4/R"`` with 3 and 4 merged into N3, AASM
  ``"Sleep stage N1/N2/N3"``, ``"Sleep stage REM"`` and the bare ``"W"/"N1"/"N2"/"N3"/"R"/"REM"``,
  so the hypnograms ``partnd predict`` writes read back); unmapped descriptions (``"Sleep
  stage ?"``, ``"Movement time"``, events) leave their samples unscored; onsets are placed on the
  data exactly as :func:`mne.events_from_annotations` places them
  (:func:`annotation_sample_indices`);
- an array of per-epoch labels (stage codes ``0..4`` with ``-1`` unscored, or strings mapped like
  descriptions) starting ``hypnogram_onset`` seconds after the first sample, ``epoch_seconds``
  apart;
- None: an unlabelled recording (every full window from the first sample, stage ``-1``).

Channels: those named in ``eeg_channels``, or by default the EEG-typed channels whose names read as
10-20 electrodes or derivations (:func:`is_ten_twenty_name`). The recording's ``meas_date`` is
stored as the record's ``start_datetime`` (predicted hypnograms take it as their start date).
Warnings MNE gives while reading the files (a header that does not match the file size of a
truncated EDF, annotations outside the data, ...) are re-issued as :class:`SourceWarning` and kept
in the record's ``source_warnings``, or refused with ``strict=True``. A store this call created is
removed again when the call fails. Command line: ``partnd ingest RECORDING [HYPNOGRAM] --out
STORE`` (:mod:`partnd.preprocessing.ingest_command`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import shutil
import warnings
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeAlias

import mne
import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.stages import STAGE_ALIASES
from partnd.datasets.store import RECORDS_GROUP, SIGNAL_DTYPES, SleepStore, check_record_id

from .channel_maps import ChannelMap, ResolvedChannels, channel_map
from .errors import RecordError
from .manifest import STATUS_DONE, STATUS_FAILED, Manifest, read_manifest
from .pipeline import (
    PreprocessingConfig,
    open_or_create_store,
    preprocess_continuous,
    store_windowed_record,
)
from .windowing import CONFLICTING_SAMPLE, UNDEFINED_SAMPLE

__all__ = [
    "DEFAULT_STAGE_MAPPING",
    "REFERENCE_NAMES",
    "UNSCORED_TAIL_WINDOWS",
    "SourceWarning",
    "annotation_sample_indices",
    "annotations_to_sample_stages",
    "epochs_to_sample_stages",
    "ingest_file",
    "ingest_raw",
    "is_ten_twenty_name",
    "read_hypnogram_file",
]

logger = logging.getLogger(__name__)

_EPOCH = date(1970, 1, 1)
"""The day MNE counts the onsets of annotations without a start date from."""

DEFAULT_STAGE_MAPPING: dict[str, int] = STAGE_ALIASES
"""Hypnogram description -> stage code (0 W, 1 N1, 2 N2, 3 N3, 4 REM): the shared table of
:mod:`partnd.datasets.stages`, which the hypnogram writers use too."""


class SourceWarning(UserWarning):
    """MNE reported a problem while reading a source file (e.g. a truncated EDF)."""


Hypnogram: TypeAlias = mne.Annotations | np.ndarray | Sequence[int] | Sequence[str] | None


def _mark(codes: np.ndarray, start: int, stop: int, code: int) -> None:
    """Assign ``code`` to ``codes[start:stop]``; samples already holding another stage conflict."""
    region = codes[start:stop]
    conflict = (region == CONFLICTING_SAMPLE) | ((region >= 0) & (region != code))
    region[:] = np.where(conflict, CONFLICTING_SAMPLE, code)


def annotation_sample_indices(
    raw: mne.io.BaseRaw, annotations: mne.Annotations, times: np.ndarray
) -> np.ndarray:
    """Indices into ``raw``'s data (0 = its first sample) of times given on ``annotations``' clock.

    The arithmetic is that of :func:`mne.events_from_annotations`: with ``orig_time`` set,
    :meth:`raw.time_as_index(times, use_rounding=True, origin=orig_time)
    <mne.io.Raw.time_as_index>`; without it, times count from sample 0 of the acquisition, so a
    cropped recording's ``raw.first_samp`` is subtracted (this is how ``raw.annotations`` of a
    recording without ``meas_date`` are kept, and how they stay attached through ``crop``).
    For a recording without ``meas_date``, an ``orig_time`` on 1970-01-01 is how MNE writes
    annotations without a start date (from the epoch; its CSV reader returns the first row's
    time as ``orig_time``): times then count from the recording's start plus that offset, so the
    CSV hypnograms ``partnd predict`` writes for such recordings read back in place.

    Args:
        raw: The recording (only its timing is used).
        annotations: Annotations whose clock ``times`` are on (only ``orig_time`` is used).
        times: Times in seconds, e.g. ``annotations.onset``.

    Returns:
        ``[len(times)]`` int64 sample indices (negative or ``>= raw.n_times`` outside the data).

    Raises:
        InputError: ``annotations`` have an ``orig_time`` but ``raw`` has no ``meas_date``.
    """
    times = np.asarray(times, dtype=np.float64)
    orig_time = annotations.orig_time
    if orig_time is not None and raw.info["meas_date"] is None and orig_time.date() == _EPOCH:
        # MNE writes annotations without a start date from 1970-01-01 (its CSV reader takes the
        # first row as orig_time): their seconds since then count from the recording's start
        times = times + (orig_time - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()
        orig_time = None
    if orig_time is None:
        absolute = raw.time_as_index(times, use_rounding=True)  # first_samp-based, as events
        return absolute.astype(np.int64) - raw.first_samp
    check(
        raw.info["meas_date"] is not None,
        "hypnogram",
        "annotations without orig_time for a recording without meas_date (MNE refuses to "
        "align them too)",
        f"orig_time={annotations.orig_time}",
    )
    indices = raw.time_as_index(times, use_rounding=True, origin=orig_time)
    return indices.astype(np.int64)


def annotations_to_sample_stages(
    raw: mne.io.BaseRaw,
    annotations: mne.Annotations,
    stage_mapping: Mapping[str, int] = DEFAULT_STAGE_MAPPING,
) -> np.ndarray:
    """Per-sample stage codes of ``raw`` from stage annotations.

    Onsets are placed exactly as :func:`mne.events_from_annotations` places them (see
    :func:`annotation_sample_indices`): relative to ``orig_time`` when the annotations have one
    (as ``raw.annotations`` of a recording with ``meas_date``, or :func:`mne.read_annotations` of
    an EDF+ hypnogram), else from sample 0 of the acquisition, i.e. ``raw.first_time`` seconds
    before the first sample of a cropped recording (as ``raw.annotations`` of a recording without
    ``meas_date``). For an uncropped recording both mean "from its first sample". An annotation
    covers ``[onset, onset + duration)``.

    Args:
        raw: The recording (only its timing is used).
        annotations: Stage annotations.
        stage_mapping: Description -> stage code; other descriptions are ignored.

    Returns:
        ``[n_times]`` int8: stage codes, -1 unscored, -2 where two different stages overlap.
    """
    codes = np.full(raw.n_times, UNDEFINED_SAMPLE, dtype=np.int8)
    selected = np.array(
        [description in stage_mapping for description in annotations.description], dtype=bool
    )
    onsets = annotations.onset[selected]
    starts = annotation_sample_indices(raw, annotations, onsets)
    stops = annotation_sample_indices(raw, annotations, onsets + annotations.duration[selected])
    for start, stop, description in zip(
        starts, stops, annotations.description[selected], strict=True
    ):
        start, stop = max(0, int(start)), min(raw.n_times, int(stop))
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


REFERENCE_NAMES: frozenset[str] = frozenset({"REF", "AVG", "AVE", "AR", "CAR", "LE", "CLE", "LER"})
"""Reference words accepted after the ``-`` of a derivation name (``Fp1-REF``, ``C3-LE``), upper
case; any 10-20 electrode (``M2``, ``A1``, ``Cz``, ...) is accepted there too."""

_EAR_AND_MASTOID = frozenset({"A1", "A2", "M1", "M2"})


@functools.cache
def _ten_twenty_electrodes() -> frozenset[str]:
    """Upper-case electrode names of MNE's 10-20 montage (incl. T3-T6, A1/A2, M1/M2)."""
    name = "colin27_1020"  # MNE >= 1.13; "standard_1020" is its deprecated alias
    if name not in mne.channels.get_builtin_montages():
        name = "standard_1020"
    return frozenset(ch.upper() for ch in mne.channels.make_standard_montage(name).ch_names)


def is_ten_twenty_name(name: str) -> bool:
    """Whether a channel name reads as a 10-20 EEG electrode or derivation.

    Accepted: an optional ``EEG`` prefix word, a 10-20 scalp electrode of MNE's standard montage
    (case-insensitive; the ear and mastoid references ``A1 A2 M1 M2`` do not count on their own),
    optionally ``-`` and a second 10-20 electrode or a reference word (:data:`REFERENCE_NAMES`):
    ``EEG Fpz-Cz``, ``C3-M2``, ``F4-A1``, ``FP1-A2``, ``Oz``, ``Fp1-REF``. Not accepted: ``E1-M2``
    (EOG), ``Chin1-Chin2``, ``EEG(sec)``, ``squarewave``.

    Args:
        name: A channel name.

    Returns:
        True for a 10-20 EEG channel name.
    """
    text = name.strip()
    if text[:4].upper() == "EEG " or text[:4].upper() == "EEG:":
        text = text[4:].strip()
    parts = [part.strip().upper() for part in text.split("-")]
    electrodes = _ten_twenty_electrodes()
    if not 1 <= len(parts) <= 2 or parts[0] not in electrodes - _EAR_AND_MASTOID:
        return False
    return len(parts) == 1 or parts[1] in electrodes or parts[1] in REFERENCE_NAMES


def _channel_names(
    raw: mne.io.BaseRaw, eeg_channels: Sequence[str] | Mapping[str, str] | None
) -> tuple[list[str], list[str]]:
    """``(names in raw, names stored)``; see :func:`ingest_raw`'s ``eeg_channels``."""
    if eeg_channels is None:
        picks = mne.pick_types(raw.info, eeg=True, exclude=())
        typed_eeg = [raw.ch_names[index] for index in picks]
        source = [name for name in typed_eeg if is_ten_twenty_name(name)]
        check(
            bool(source),
            "eeg_channels",
            "the names of the EEG channels to ingest, since no channel of type EEG has a 10-20 "
            "name such as 'C3-M2' or 'EEG Fpz-Cz'",
            f"None for a recording with channels {raw.ch_names}",
        )
        left_out = [name for name in raw.ch_names if name not in source]
        logger.info("eeg_channels: picked %s by their 10-20 names; left out %s", source, left_out)
        return source, source
    if isinstance(eeg_channels, Mapping):
        source, stored = list(eeg_channels), [str(name) for name in eeg_channels.values()]
    else:
        check(not isinstance(eeg_channels, str), "eeg_channels", "a list of names", eeg_channels)
        source = stored = [str(name) for name in eeg_channels]
    check(bool(source), "eeg_channels", "at least one channel name", source)
    missing = [name for name in source if name not in raw.ch_names]
    check(not missing, "eeg_channels", f"names among {raw.ch_names}", missing)
    check(len(set(source)) == len(source), "eeg_channels", "distinct channel names", source)
    check(len(set(stored)) == len(stored), "eeg_channels", "distinct stored names", stored)
    return source, stored


def _resolve_channels(
    raw: mne.io.BaseRaw,
    eeg_channels: Sequence[str] | Mapping[str, str] | None,
    channels: ChannelMap | str | Mapping[str, str | Sequence[str]] | None,
    record_id: str,
) -> tuple[ResolvedChannels, ChannelMap | None]:
    """Where each stored channel comes from, and the channel map used (None for
    ``eeg_channels``)."""
    if channels is not None:
        check(
            eeg_channels is None,
            "channels",
            "either channels (a channel map) or eeg_channels (names), not both",
            f"channels={channels!r} with eeg_channels={eeg_channels!r}",
        )
        used = channel_map(channels)
        return used.resolve(raw.ch_names, record_id), used
    source, stored = _channel_names(raw, eeg_channels)
    return ResolvedChannels(stored, [(name, None) for name in source]), None


def ingest_raw(
    raw: mne.io.BaseRaw,
    hypnogram: Hypnogram,
    store_path: str | Path,
    record_id: str,
    *,
    subject_id: str | None = None,
    session_id: str | None = None,
    split: str | None = None,
    eeg_channels: Sequence[str] | Mapping[str, str] | None = None,
    channels: ChannelMap | str | Mapping[str, str | Sequence[str]] | None = None,
    stage_mapping: Mapping[str, int] = DEFAULT_STAGE_MAPPING,
    hypnogram_onset: float = 0.0,
    epoch_seconds: float = 30.0,
    config: PreprocessingConfig | None = None,
    dtype: str = "float32",
    source_name: str = "mne",
    source_warnings: Sequence[str] = (),
    overwrite: bool = False,
    update_manifest: bool = True,
) -> dict[str, Any]:
    """Preprocess one MNE recording and store it as ``record_id``.

    The store is created on first use (channels = the stored channel names) and reopened afterwards;
    every record of a store must use the same channel names and configuration. Arguments are
    checked before anything is written, and a store this call created is removed again if the
    record cannot be stored.

    Args:
        raw: The recording; its data are read in µV (preloading is not required). Its
            ``meas_date`` becomes the record's ``start_datetime``.
        hypnogram: Stage annotations, per-epoch labels, or None (unlabelled); see the module doc.
        store_path: Target store.
        record_id: Identifier of the new record.
        subject_id: Subject of the recording (default: ``record_id``).
        session_id: Session, visit or night of the subject (BIDS ``ses-``), if known.
        split: Split attribute (default ``"training"`` when labelled, ``"test"`` otherwise).
        eeg_channels: Channels to keep: names, or a mapping ``{name in raw: stored name}``.
            Default: the channels of type EEG whose names read as 10-20 electrodes or derivations
            (:func:`is_ten_twenty_name`: ``EEG Fpz-Cz``, ``C3-M2``, ``F4-A1``, ...), logged at
            INFO level and returned as ``source_channels``; an error when there is none (MNE types
            every EDF channel as EEG, so EDF test signals or EOG/EMG channels are not taken).
        channels: Instead of ``eeg_channels``, a channel map that names, renames and derives the
            stored channels (:mod:`partnd.preprocessing.channel_maps`): a
            :class:`~partnd.preprocessing.channel_maps.ChannelMap`, a built-in map name
            (``"sleep-edf"``, ``"shhs"``, ``"mass"``, ``"pc18"``), ``"C4-A1=EEG,C3-A2=EEG(sec)"``
            or ``{"C4-M1": "C4 - M1"}``. The record keeps each channel's source as
            ``channel_derivations``; a recording without a source of some channel fails with
            ``missing_channel``, naming the record and its channels.
        stage_mapping: Description -> stage code for annotation or string labels.
        hypnogram_onset: For per-epoch labels, start of the first epoch in seconds from the first
            sample.
        epoch_seconds: For per-epoch labels, epoch length in seconds.
        config: Preprocessing configuration (default :class:`PreprocessingConfig`).
        dtype: On-disk signal dtype.
        source_name: ``source.dataset`` attribute of a newly created store.
        source_warnings: Problems reported while reading the source files, kept in the record's
            ``source_warnings`` attribute (see :func:`ingest_file`).
        overwrite: Replace an existing record ``record_id``.
        update_manifest: Write the record's entry into the store's manifest; a parallel run
            passes False and lets its driving process write the entries (only one process may
            write a manifest).

    Returns:
        The record attributes written (``source_channels``: the channels taken from ``raw``).

    Raises:
        RecordError: The recording cannot be preprocessed (non-finite data, no scored sample, flat
            channel, no window left, ...); an existing store's manifest records the failure
            (status ``"failed"``, reason, detail) before the error propagates.
        InputError: Bad arguments, or a store with other channels or configuration.
    """
    check(isinstance(raw, mne.io.BaseRaw), "raw", "an mne.io.BaseRaw", type(raw).__name__)
    check(dtype in SIGNAL_DTYPES, "dtype", f"one of {SIGNAL_DTYPES}", repr(dtype))
    check_record_id(record_id)
    config = config if config is not None else PreprocessingConfig()
    resolved, used_map = _resolve_channels(raw, eeg_channels, channels, record_id)
    source_names, stored_names = resolved.sources, resolved.stored
    source = {"dataset": source_name}
    if used_map is not None:
        source["channel_map"] = used_map.describe()
    metadata = {
        **config.store_metadata(source, source_sfreq=None),
        "signal_dtype": dtype,
    }
    store_path = Path(store_path)
    existed = store_path.exists()
    if existed:  # refuse another configuration or a taken id before any work
        store = open_or_create_store(
            store_path, config, stored_names, metadata, argument="store_path", replaceable=False
        )
        check(
            not (store.path / RECORDS_GROUP / record_id).exists() or overwrite,
            "record_id",
            f"an id not yet in {str(store.path)!r} (or overwrite=True)",
            repr(record_id),
        )
        read_manifest(store.path)  # a corrupt manifest is refused before the record is written
    try:
        return _ingest(
            raw,
            hypnogram,
            store_path,
            record_id,
            resolved=resolved,
            metadata=metadata,
            attrs={
                "subject_id": subject_id if subject_id is not None else record_id,
                "session_id": session_id,
                "split": split,
                "start_datetime": _start_datetime(raw),
                "source_channels": source_names,
                "channel_derivations": resolved.descriptions,
                "source_warnings": list(source_warnings),
            },
            existed=existed,
            update_manifest=update_manifest,
            stage_mapping=stage_mapping,
            hypnogram_onset=hypnogram_onset,
            epoch_seconds=epoch_seconds,
            config=config,
            dtype=dtype,
            overwrite=overwrite,
        )
    except BaseException:
        if not existed and store_path.exists():
            shutil.rmtree(store_path)
        raise


def _start_datetime(raw: mne.io.BaseRaw) -> str | None:
    """The recording's ``meas_date`` as ISO 8601 (UTC), or ``None``."""
    start = raw.info["meas_date"]
    return None if start is None else start.isoformat()


def _ingest(
    raw: mne.io.BaseRaw,
    hypnogram: Hypnogram,
    store_path: Path,
    record_id: str,
    *,
    resolved: ResolvedChannels,
    metadata: dict[str, Any],
    attrs: dict[str, Any],
    existed: bool,
    update_manifest: bool,
    stage_mapping: Mapping[str, int],
    hypnogram_onset: float,
    epoch_seconds: float,
    config: PreprocessingConfig,
    dtype: str,
    overwrite: bool,
) -> dict[str, Any]:
    """:func:`ingest_raw` once its arguments are checked."""
    sfreq = float(raw.info["sfreq"])
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
    stored_names = resolved.stored
    data = resolved.data(raw)
    digest = hashlib.sha256(np.ascontiguousarray(data).tobytes())
    if sample_stages is not None:
        digest.update(sample_stages.tobytes())
    if attrs["split"] is None:
        attrs["split"] = "training" if sample_stages is not None else "test"
    attrs["source_checksum"] = digest.hexdigest()
    try:
        windowed = preprocess_continuous(data, sfreq, sample_stages, config, channels=stored_names)
        del data
        store = open_or_create_store(
            store_path, config, stored_names, metadata, argument="store_path", replaceable=False
        )
        written = store_windowed_record(
            store.path, record_id, windowed, config, attrs, dtype=dtype, overwrite=overwrite
        )
    except RecordError as error:
        if existed and update_manifest:  # a store this call created is removed by the caller
            Manifest(store_path).update(
                record_id,
                {
                    "status": STATUS_FAILED,
                    "reason": error.reason,
                    "detail": error.detail,
                    "split": attrs["split"],
                    "source_checksum": attrs["source_checksum"],
                },
            )
        raise
    if not update_manifest:
        return SleepStore(store.path).record_attrs(record_id)
    Manifest(store.path).update(
        record_id,
        {
            "status": STATUS_DONE,
            "reason": None,
            "detail": None,
            "split": written["split"],
            "n_kept": len(windowed.stage),
            "n_dropped": sum(windowed.dropped.values()),
            "n_dropped_by_reason": windowed.dropped,
            "source_checksum": written["source_checksum"],
            "duration_s": written["duration_s"],
            "first_window_sample": windowed.first_window_sample,
            "source_warnings": written["source_warnings"],
        },
    )
    return SleepStore(store.path).record_attrs(record_id)


class _Collect(logging.Handler):
    """Keeps the messages of the log records it handles."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _read_warned(read: Any, *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """``read(*args, **kwargs)`` with MNE's warnings about the file caught and returned: those
    raised as Python warnings and those MNE only logs (e.g. that a CSV's float onsets were read
    as milliseconds). When ``read`` refuses the file (:class:`InputError`), the warnings are
    added to its message."""
    collect = _Collect()
    mne_logger = logging.getLogger("mne")
    mne_logger.addHandler(collect)
    try:
        with warnings.catch_warnings(record=True) as caught, mne.use_log_level("warning"):
            warnings.simplefilter("always")
            try:
                result = read(*args, **kwargs)
            except InputError as error:
                problems = [str(warning.message) for warning in caught] + collect.messages
                if not problems:
                    raise
                said = "; ".join(dict.fromkeys(problems))
                raise InputError(f"{error} (MNE warned while reading: {said})") from None
    finally:
        mne_logger.removeHandler(collect)
    problems = [str(warning.message) for warning in caught] + collect.messages
    return result, list(dict.fromkeys(problems))


UNSCORED_TAIL_WINDOWS = 10
"""A recording that runs more windows than this past its hypnogram's last scored window is
ingested with a :class:`SourceWarning`."""


def read_hypnogram_file(
    raw: mne.io.BaseRaw,
    recording: str | Path,
    hypnogram: str | Path,
    *,
    stage_mapping: Mapping[str, int] | None = None,
    window_seconds: float = 30.0,
) -> mne.Annotations:
    """A hypnogram file in any format :mod:`partnd.datasets.hypnogram_formats` reads, checked
    against the recording and laid out as one annotation per scored window.

    Epochs other than ``window_seconds`` map onto windows by that module's rule (the stage
    covering most of each window). Checks against ``raw``:

    - **another recording's hypnogram is refused**: when both the hypnogram (its start date, or
      the start in its EDF header) and the recording (``meas_date``) have a date, the scored
      epochs must overlap the recording in time;
    - **longer than the signal: refused** when scored windows start before the first sample or
      end after the last by more than one window (those stages would be lost: a hypnogram of
      another or a longer recording, or a truncated recording);
    - **shorter than the signal: warned** (:class:`SourceWarning`) when the signal runs more
      than :data:`UNSCORED_TAIL_WINDOWS` windows (5 min) past the last scored window (those
      windows stay unscored and are dropped).

    Args:
        raw: The recording (only its timing is used).
        recording: The recording file, for messages.
        hypnogram: The hypnogram file.
        stage_mapping: Label -> stage code, replacing the format's own mapping; the default
            shared table :data:`DEFAULT_STAGE_MAPPING` is the annotation formats' own, so it
            leaves the XML formats' mappings in place.
        window_seconds: The store's window length.

    Returns:
        The scored windows as annotations on the hypnogram file's clock.

    Raises:
        InputError: A file that does not exist, is unreadable or refused (see above).
    """
    from partnd.datasets.hypnogram_formats import EDF_UNKNOWN_START, read_hypnogram

    hypnogram = Path(hypnogram)
    check(hypnogram.is_file(), "hypnogram", "an existing hypnogram file", str(hypnogram))
    mapping = None if stage_mapping is DEFAULT_STAGE_MAPPING else stage_mapping
    scored = read_hypnogram(hypnogram, stage_mapping=mapping)
    annotations = scored.to_annotations(window_seconds)
    check(
        len(annotations) > 0,
        "hypnogram",
        f"at least one scored {window_seconds:g} s window",
        f"{str(hypnogram)!r} with none (every window unscored or tied)",
    )
    recording_start = raw.info["meas_date"]
    hypnogram_date = scored.start
    if hypnogram_date is not None and hypnogram_date.date() == _EPOCH:
        hypnogram_date = None  # MNE's "no start date": counted from the recording's start
    if hypnogram_date is None and scored.file_start not in (None, EDF_UNKNOWN_START):
        hypnogram_date = scored.file_start
    if recording_start is not None and hypnogram_date is not None:
        first = hypnogram_date + timedelta(seconds=float(annotations.onset[0]))
        last = hypnogram_date + timedelta(
            seconds=float(annotations.onset[-1] + annotations.duration[-1])
        )
        end = recording_start + timedelta(seconds=raw.n_times / raw.info["sfreq"])
        check(
            first < end and last > recording_start,
            "hypnogram",
            f"the hypnogram of {Path(recording).name} (recorded {recording_start:%Y-%m-%d %H:%M:%S}"
            f" to {end:%Y-%m-%d %H:%M:%S} UTC)",
            f"{str(hypnogram)!r}, which scores {first:%Y-%m-%d %H:%M:%S} to "
            f"{last:%Y-%m-%d %H:%M:%S} UTC (another recording's hypnogram?)",
        )
    starts = annotation_sample_indices(raw, annotations, annotations.onset)
    stops = annotation_sample_indices(raw, annotations, annotations.onset + annotations.duration)
    sfreq = float(raw.info["sfreq"])
    window = round(window_seconds * sfreq)
    before, after = -int(starts.min()), int(stops.max()) - raw.n_times
    check(
        before <= window and after <= window,
        "hypnogram",
        f"scored epochs within {Path(recording).name} ({raw.n_times / sfreq / 60:.1f} min; one "
        "window of slack at either end)",
        f"{str(hypnogram)!r}, which scores "
        + (
            f"{before / sfreq / 60:.1f} min before its first sample"
            if before > window
            else f"{after / sfreq / 60:.1f} min past its end"
        )
        + " (a hypnogram of another or a longer recording, or a truncated recording)",
    )
    unscored_tail = raw.n_times - int(stops.max())
    if unscored_tail > UNSCORED_TAIL_WINDOWS * window:
        warnings.warn(
            f"the hypnogram ends {unscored_tail / sfreq / 60:.1f} min before the end of "
            f"{Path(recording).name}; those windows are unscored and dropped",
            SourceWarning,
            stacklevel=2,
        )
    return annotations


def ingest_file(
    path: str | Path,
    hypnogram: str | Path | Hypnogram,
    store_path: str | Path,
    record_id: str | None = None,
    *,
    strict: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Ingest a file MNE reads (:func:`mne.io.read_raw`: EDF, BDF, FIF, BrainVision, ...).

    Args:
        path: The recording file.
        hypnogram: A hypnogram file read with :func:`mne.read_annotations` (e.g. an EDF+
            ``*-Hypnogram.edf``, a CSV written by ``partnd predict``, or the recording itself when
            it carries the stage annotations), or anything :func:`ingest_raw` accepts.
        store_path: Target store.
        record_id: Identifier of the record (default: the file name without extension).
        strict: Refuse files MNE warns about while reading them (e.g. an EDF whose header does
            not match its size: a truncated file); by default the warnings are re-issued as
            :class:`SourceWarning` and kept in the record's ``source_warnings``.
        **kwargs: Passed on to :func:`ingest_raw` (``eeg_channels``, ``subject_id``, ...).

    Returns:
        The record attributes written (``source_warnings``: what MNE reported).

    Raises:
        InputError: A file that does not exist, that MNE cannot read or (``strict``) warns about,
            or any error of :func:`ingest_raw`.
        RecordError: As :func:`ingest_raw`.
    """
    path = Path(path)
    check(path.is_file(), "path", "an existing recording file", str(path))
    try:
        raw, problems = _read_warned(mne.io.read_raw, path, preload=False)
    except Exception as error:  # readers fail in many ways on a file they cannot read
        raise InputError(
            f"path: expected a recording mne.io.read_raw reads (EDF, BDF, FIF, BrainVision, ...), "
            f"got {str(path)!r} ({type(error).__name__}: {error})"
        ) from None
    reports = [f"{path.name}: {problem}" for problem in problems]
    if isinstance(hypnogram, (str, Path)):
        hypnogram_file = Path(hypnogram)
        hypnogram, problems = _read_warned(
            read_hypnogram_file,
            raw,
            path,
            hypnogram_file,
            stage_mapping=kwargs.get("stage_mapping", DEFAULT_STAGE_MAPPING),
            window_seconds=(kwargs.get("config") or PreprocessingConfig()).window_seconds,
        )
        reports += [f"{hypnogram_file.name}: {problem}" for problem in problems]
    check(
        not (strict and reports),
        "path",
        "files MNE reads without warnings when strict=True",
        "; ".join(reports),
    )
    for report in reports:
        warnings.warn(report, SourceWarning, stacklevel=2)
    return ingest_raw(
        raw,
        hypnogram,
        store_path,
        record_id if record_id is not None else path.stem,
        source_warnings=reports,
        **kwargs,
    )
