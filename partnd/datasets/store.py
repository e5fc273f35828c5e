"""On-disk store of windowed sleep recordings (zarr v3, written through xarray) and its reader.

Layout (see ``docs/store_format.md`` for the full description)::

    STORE.zarr/                    zarr v3 group; attrs: format, format_version, sfreq,
                                   window_seconds, n_times, channels, stage_names, filter,
                                   resample, source, ...
      records/                     zarr v3 group holding one sub-group per record
        <record_id>/               xarray Dataset; attrs: record_id, subject_id, split, sfreq,
                                   source_checksum, n_windows, n_labelled, dropped,
                                   start_datetime (ISO 8601 recording start, or absent)
          signal     (window, channel, time) float32 or float16, chunks (64, C, T)
          stage      (window,) int8, stage code 0..4, -1 for unlabelled windows
          start_time (window,) float64, seconds from the recording start
        .tmp-<record_id>-<uuid>/   a record being written (ignored by the reader)
      manifest.json                per-record processing report (written by the driving process)

A record is complete if and only if ``records/<record_id>`` exists under its final name: records are
written to a dot-prefixed temporary group and renamed into place (:func:`write_record`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr
from zarr.codecs import BloscCodec

from partnd._disk import DiskFullError, is_disk_full
from partnd._validation import InputError, check
from partnd.datasets.stages import STAGE_NAMES

__all__ = [
    "DEFAULT_CHUNK_WINDOWS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_FILENAME",
    "RECORDS_GROUP",
    "SIGNAL_DTYPES",
    "STAGE_NAMES",
    "TEMP_PREFIX",
    "UNLABELLED",
    "SleepStore",
    "check_record_id",
    "create_store",
    "read_json",
    "read_manifest_file",
    "record_channel_scale",
    "remove_incomplete_records",
    "write_record",
]

FORMAT_NAME = "partnd-sleep"
FORMAT_VERSION = 1
RECORDS_GROUP = "records"
MANIFEST_FILENAME = "manifest.json"
UNLABELLED = -1
DEFAULT_CHUNK_WINDOWS = 64
SIGNAL_DTYPES: tuple[str, ...] = ("float32", "float16")
TEMP_PREFIX = ".tmp-"
_OLD_PREFIX = ".old-"
_ZARR_JSON = "zarr.json"
_RESUME_IGNORED_KEYS = frozenset({"created", "library_versions"})


def read_json(path: Path, expected: str, argument: str = "path") -> Any:
    """The JSON content of the file ``path``.

    Args:
        path: The file.
        expected: What a valid file is, for the message (``"a readable split JSON file"``).
        argument: Name of the argument for the message.

    Raises:
        InputError: The file cannot be opened, decoded or parsed as JSON, naming the file and
            the cause.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(
            f"{argument}: expected {expected}, got {str(path)!r} that cannot be read "
            f"({type(error).__name__}: {error})"
        ) from None


def _read_group_attrs(group_dir: Path) -> dict[str, Any]:
    """Return the ``attributes`` of a zarr v3 group from its ``zarr.json`` without opening zarr.

    Raises:
        InputError: The file is not a JSON object with an ``attributes`` object (a corrupt or
            foreign store), naming the file.
    """
    path = group_dir / _ZARR_JSON
    metadata = read_json(path, f"a zarr store whose {_ZARR_JSON} is JSON")
    attributes = metadata.get("attributes", {}) if isinstance(metadata, dict) else None
    if not isinstance(attributes, dict):
        raise InputError(
            f"path: expected a zarr store whose {_ZARR_JSON} is a JSON object with an "
            f"'attributes' object, got {str(path)!r} holding {type(metadata).__name__}"
        )
    return dict(attributes)


def read_manifest_file(store_path: str | Path, argument: str = "path") -> dict[str, Any]:
    """The per-record processing report of a store (``manifest.json``), ``{}`` when it has none.

    Args:
        store_path: The store directory.
        argument: Name of ``store_path`` in the caller's signature, for error messages.

    Raises:
        InputError: The file is not a JSON object (a corrupt manifest), naming the file.
    """
    path = Path(store_path) / MANIFEST_FILENAME
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            entries = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        entries = error
    if not isinstance(entries, dict):
        detail = (
            f"{type(entries).__name__}: {entries}"
            if isinstance(entries, Exception)
            else f"holding {type(entries).__name__}"
        )
        raise InputError(
            f"{argument}: expected a store whose {MANIFEST_FILENAME} is a JSON object, got "
            f"{str(path)!r} that cannot be read ({detail})"
        )
    return dict(entries)


def _open_array(path: Path) -> zarr.Array:
    """A stored record's zarr array (read-only).

    Raises:
        InputError: Its metadata are missing or unreadable (a corrupt store), naming the array.
    """
    try:
        return zarr.open_array(path, mode="r", zarr_format=3)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"store: expected a readable zarr array, got {str(path)!r} whose metadata cannot be "
            f"read ({type(error).__name__}: {error})"
        ) from None


def _json_normalised(value: Any, argument: str) -> Any:
    """Return ``value`` as it reads back from JSON (tuples become lists), or raise naming it."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise InputError(f"{argument}: expected JSON-serialisable values, got {error}") from error


def _signal_compressors() -> tuple[BloscCodec, ...]:
    """Codec for the signal array: Blosc-LZ4 with byte shuffle (fastest decode measured)."""
    return (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),)


def _replace_directory(source: Path, destination: Path) -> None:
    """Rename ``source`` onto ``destination``, moving an existing destination aside first.

    A process killed between the two renames leaves only a dot-prefixed directory, which readers
    ignore and :func:`remove_incomplete_records` deletes.
    """
    previous = None
    if destination.exists():
        previous = destination.with_name(f"{_OLD_PREFIX}{destination.name}-{uuid.uuid4().hex}")
        os.rename(destination, previous)
    os.rename(source, destination)
    if previous is not None:
        shutil.rmtree(previous)


class SleepStore:
    """Reader of a ``partnd-sleep`` zarr store (windowed EEG with per-window sleep stages).

    Opening is cheap: per-record metadata is read lazily from each record's ``zarr.json`` the first
    time it is needed and cached. Instances pickle without their caches (safe for DataLoader
    workers).

    Args:
        path: Directory of the store (``STORE.zarr``).

    Raises:
        FileNotFoundError: ``path`` does not exist or holds no zarr group.
        InputError: ``path`` is not a ``partnd-sleep`` store or has an unsupported format version.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not (self.path / _ZARR_JSON).is_file():
            raise FileNotFoundError(
                f"path: expected a partnd-sleep zarr store directory containing {_ZARR_JSON}, "
                f"got {str(self.path)!r} "
                f"({'missing' if not self.path.exists() else 'no zarr.json'})"
            )
        self.attrs: dict[str, Any] = _read_group_attrs(self.path)
        check(
            self.attrs.get("format") == FORMAT_NAME,
            "path",
            f"a store whose attribute format is {FORMAT_NAME!r}",
            f"format={self.attrs.get('format')!r} at {str(self.path)!r}",
        )
        check(
            self.attrs.get("format_version") == FORMAT_VERSION,
            "path",
            f"a store with format_version {FORMAT_VERSION}",
            f"format_version={self.attrs.get('format_version')!r} at {str(self.path)!r}",
        )
        self.sfreq: float = float(self.attrs["sfreq"])
        self.channels: list[str] = list(self.attrs["channels"])
        self.stage_names: list[str] = list(self.attrs["stage_names"])
        self.n_times: int = int(self.attrs["n_times"])
        self.window_seconds: float = float(self.attrs["window_seconds"])
        self._records_dir = self.path / RECORDS_GROUP
        self._attrs_cache: dict[str, dict[str, Any]] = {}
        self._stages_cache: dict[str, np.ndarray] = {}
        self._array_cache: dict[str, zarr.Array] = {}
        self._scale_cache: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_attrs_cache"] = {}
        state["_stages_cache"] = {}
        state["_array_cache"] = {}
        state["_scale_cache"] = {}
        return state

    def __repr__(self) -> str:
        return (
            f"SleepStore({str(self.path)!r}, sfreq={self.sfreq}, channels={self.channels}, "
            f"n_times={self.n_times})"
        )

    @property
    def manifest(self) -> dict[str, Any]:
        """Per-record processing report (``manifest.json``), ``{}`` when the store has none."""
        return read_manifest_file(self.path)

    def _record_dir(self, record_id: str) -> Path:
        record_dir = self._records_dir / record_id
        if record_id.startswith(".") or not (record_dir / _ZARR_JSON).is_file():
            raise KeyError(
                f"record_id: expected a complete record of {str(self.path)!r}, got {record_id!r}"
            )
        return record_dir

    def record_ids(self, *, split: str | None = None, labelled_only: bool = False) -> list[str]:
        """Sorted identifiers of the complete records.

        Args:
            split: Keep only records whose ``split`` attribute equals this (e.g. ``"training"``).
            labelled_only: Keep only records with at least one labelled window.

        Returns:
            Record identifiers in lexicographic order.
        """
        if not self._records_dir.is_dir():
            return []
        with os.scandir(self._records_dir) as entries:
            ids = sorted(
                entry.name
                for entry in entries
                if entry.is_dir()
                and not entry.name.startswith(".")
                and os.path.isfile(os.path.join(entry.path, _ZARR_JSON))
            )
        if split is not None:
            ids = [record_id for record_id in ids if self.record_attrs(record_id)["split"] == split]
        if labelled_only:
            ids = [record_id for record_id in ids if self.record_attrs(record_id)["n_labelled"] > 0]
        return ids

    def record_attrs(self, record_id: str) -> dict[str, Any]:
        """Attributes of one record (record_id, subject_id, split, sfreq, n_windows, dropped, ...).

        Raises:
            KeyError: ``record_id`` is not a complete record of this store.
        """
        if record_id not in self._attrs_cache:
            self._attrs_cache[record_id] = _read_group_attrs(self._record_dir(record_id))
        return dict(self._attrs_cache[record_id])

    def n_windows(self, record_id: str) -> int:
        """Number of stored windows of ``record_id``."""
        return int(self.record_attrs(record_id)["n_windows"])

    def open_record(self, record_id: str) -> xr.Dataset:
        """Open one record lazily as an :class:`xarray.Dataset` (no dask; values load on access).

        Returns:
            Dataset with ``signal [window, channel, time]``, ``stage [window]`` and
            ``start_time [window]``, coordinates ``window`` and ``channel``.
        """
        return xr.open_zarr(
            self._record_dir(record_id), consolidated=False, chunks=None, zarr_format=3
        )

    def signal_array(self, record_id: str) -> zarr.Array:
        """The record's ``signal`` zarr array ``[window, channel, time]`` (chunk-aware reads)."""
        if record_id not in self._array_cache:
            self._array_cache[record_id] = _open_array(self._record_dir(record_id) / "signal")
        return self._array_cache[record_id]

    def chunk_windows(self, record_id: str) -> int:
        """Number of windows per stored chunk of the record's signal."""
        return int(self.signal_array(record_id).chunks[0])

    def stages(self, record_id: str) -> np.ndarray:
        """Stage code per window, ``[n_windows]`` int8 (``-1`` = unlabelled). Reads no signal."""
        if record_id not in self._stages_cache:
            stage = _open_array(self._record_dir(record_id) / "stage")
            self._stages_cache[record_id] = np.asarray(stage[:], dtype=np.int8)
        return self._stages_cache[record_id].copy()

    def record_start(self, record_id: str) -> datetime | None:
        """Start date and time of the recording (timezone-aware), ``None`` when the source did not
        record one (attribute ``start_datetime``, written at ingest from ``meas_date``)."""
        text = self.record_attrs(record_id).get("start_datetime")
        if text is None:
            return None
        value = datetime.fromisoformat(str(text))
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)

    def start_times(self, record_id: str) -> np.ndarray:
        """Start of each window in seconds from the recording start, ``[n_windows]`` float64."""
        start = _open_array(self._record_dir(record_id) / "start_time")
        return np.asarray(start[:], dtype=np.float64)

    def channel_scale(self, record_id: str) -> np.ndarray:
        """``[C]`` float64 scale of each channel of the record in µV: the median over its windows
        of their standard deviation (:func:`record_channel_scale`). Stores written before it was
        recorded get it computed from the signal once (cached)."""
        if record_id not in self._scale_cache:
            stored = self.record_attrs(record_id).get("channel_scale")
            if stored is None:
                signal = self.read_windows(record_id, 0, self.n_windows(record_id))
                stored = record_channel_scale(signal)
            self._scale_cache[record_id] = np.asarray(stored, dtype=np.float64)
        return self._scale_cache[record_id].copy()

    def contiguous_runs(self, record_id: str) -> list[tuple[int, int]]:
        """Runs of consecutive windows: ``(start, stop)`` window-index ranges within which every
        window starts ``window_seconds`` after the previous one (dropped windows split runs).

        Sequences and segments of windows never cross two runs.
        """
        starts = self.start_times(record_id)
        if len(starts) == 0:
            return []
        breaks = np.flatnonzero(~np.isclose(np.diff(starts), self.window_seconds)) + 1
        edges = [0, *breaks.tolist(), len(starts)]
        return list(itertools.pairwise(edges))

    def read_windows(self, record_id: str, start: int, stop: int) -> np.ndarray:
        """Read a contiguous block of windows.

        Args:
            record_id: Record to read.
            start: First window index (inclusive), ``0 <= start``.
            stop: Last window index (exclusive), ``start < stop <= n_windows``.

        Returns:
            ``[stop - start, C, T]`` float32 array in µV.
        """
        n_windows = self.n_windows(record_id)
        check(
            0 <= start < stop <= n_windows,
            "start, stop",
            f"0 <= start < stop <= n_windows={n_windows} for record {record_id!r}",
            f"start={start}, stop={stop}",
        )
        block = self.signal_array(record_id)[start:stop]
        return np.asarray(block, dtype=np.float32)


def _store_config(
    sfreq: float,
    channels: Sequence[str],
    window_seconds: float,
    stage_names: Sequence[str],
    metadata: Mapping[str, Any],
) -> dict[str, Any]:
    n_times_float = sfreq * window_seconds
    n_times = round(n_times_float)
    check(sfreq > 0 and math.isfinite(sfreq), "sfreq", "a positive finite frequency in Hz", sfreq)
    check(window_seconds > 0, "window_seconds", "a positive duration in seconds", window_seconds)
    check(
        abs(n_times_float - n_times) < 1e-9 and n_times > 0,
        "window_seconds",
        f"a duration giving a whole number of samples at sfreq={sfreq}",
        window_seconds,
    )
    check(
        len(channels) > 0 and len(set(channels)) == len(channels),
        "channels",
        "a non-empty list of distinct channel names",
        list(channels),
    )
    check(
        len(stage_names) > 0 and len(set(stage_names)) == len(stage_names),
        "stage_names",
        "a non-empty list of distinct stage names",
        list(stage_names),
    )
    reserved = {"format", "format_version", "sfreq", "window_seconds", "n_times", "channels"}
    clashes = sorted(reserved.union({"stage_names"}).intersection(metadata))
    check(not clashes, "metadata", "no keys that duplicate the store's own attributes", clashes)
    config = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "sfreq": float(sfreq),
        "window_seconds": float(window_seconds),
        "n_times": int(n_times),
        "channels": [str(name) for name in channels],
        "stage_names": [str(name) for name in stage_names],
    }
    config.update(_json_normalised(dict(metadata), "metadata"))
    config.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return config


def create_store(
    path: str | Path,
    *,
    sfreq: float,
    channels: Sequence[str],
    window_seconds: float,
    stage_names: Sequence[str] = STAGE_NAMES,
    metadata: Mapping[str, Any],
    overwrite: bool = False,
) -> SleepStore:
    """Create an empty store, or reopen an existing one written with the same configuration.

    The store is built in a temporary sibling directory and renamed into place. When ``path``
    already holds a store and ``overwrite`` is False, its attributes (all but ``created`` and
    ``library_versions``) must equal the requested ones; it is then returned unchanged so an
    interrupted preprocessing run can resume.

    Args:
        path: Store directory to create (conventionally ending in ``.zarr``).
        sfreq: Sampling frequency of the stored signals in Hz.
        channels: Channel names, in stored order.
        window_seconds: Window duration in seconds (``sfreq * window_seconds`` samples per window).
        stage_names: Names of stage codes ``0..len-1``.
        metadata: Further JSON-serialisable store attributes (``filter``, ``resample``, ``source``,
            ``library_versions``, ...).
        overwrite: Delete an existing store at ``path`` first.

    Returns:
        A :class:`SleepStore` on the created (or reopened) store.

    Raises:
        InputError: A configuration argument is invalid, or an existing store has another
            configuration and ``overwrite`` is False.
        FileExistsError: ``path`` exists, is not a partnd-sleep store and ``overwrite`` is False.
        DiskFullError: The disk filled up; nothing was left at or beside ``path``.
    """
    path = Path(path)
    config = _store_config(sfreq, channels, window_seconds, stage_names, metadata)
    if path.exists() and not overwrite:
        if not (path / _ZARR_JSON).is_file():
            raise FileExistsError(
                f"path: expected a new path or an existing partnd-sleep store, got {str(path)!r} "
                "which exists and is not a zarr store (pass overwrite=True to replace it)"
            )
        existing = SleepStore(path)
        differing = sorted(
            key
            for key in set(config).union(existing.attrs).difference(_RESUME_IGNORED_KEYS)
            if config.get(key) != existing.attrs.get(key)
        )
        check(
            not differing,
            "path",
            "an existing store with the same configuration (or overwrite=True)",
            f"a store at {str(path)!r} whose attributes {differing} differ",
        )
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{TEMP_PREFIX}{path.name}-{uuid.uuid4().hex}")
    try:
        root = zarr.open_group(staging, mode="w", zarr_format=3, attributes=config)
        root.create_group(RECORDS_GROUP)
        _replace_directory(staging, path)
    except OSError as error:
        if is_disk_full(error) and not isinstance(error, DiskFullError):
            raise DiskFullError(path) from error
        raise
    finally:  # a full disk or an interrupt leaves no half-built store beside path
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return SleepStore(path)


def record_channel_scale(signal: np.ndarray) -> np.ndarray:
    """The scale of each channel of a record: the median over its windows of the window's
    standard deviation (robust to a few artefact windows), for record normalisation.

    Args:
        signal: ``[W, C, T]`` the record's windows.

    Returns:
        ``[C]`` float64 scales (in the signal's unit).
    """
    return np.median(np.asarray(signal, dtype=np.float64).std(axis=-1), axis=0)


def check_record_id(record_id: str) -> None:
    """Refuse a record id that cannot name a record directory (empty, ``/``, leading ``.``,
    surrounding spaces), with :class:`InputError` naming ``record_id``."""
    check(
        isinstance(record_id, str)
        and bool(record_id)
        and not record_id.startswith(".")
        and "/" not in record_id
        and record_id == record_id.strip(),
        "record_id",
        "a non-empty name without '/', leading '.' or surrounding spaces",
        repr(record_id),
    )


def write_record(
    store_path: str | Path,
    record_id: str,
    signal: np.ndarray,
    stage: np.ndarray,
    start_time: np.ndarray,
    *,
    attrs: Mapping[str, Any],
    dtype: str = "float32",
    chunk_windows: int = DEFAULT_CHUNK_WINDOWS,
    overwrite: bool = False,
) -> None:
    """Write one record atomically: to ``records/.tmp-<record_id>-<uuid>``, then rename into place.

    Args:
        store_path: Store created by :func:`create_store`.
        record_id: Record identifier; a valid directory name not starting with ``"."``.
        signal: ``[W, C, T]`` windows in µV, ``C`` and ``T`` matching the store, ``W >= 1``.
        stage: ``[W]`` integer stage codes in ``-1..len(stage_names)-1`` (``-1`` = unlabelled).
        start_time: ``[W]`` window starts in seconds from the recording start.
        attrs: JSON-serialisable record attributes; must include ``subject_id`` and ``split``.
            ``record_id``, ``sfreq``, ``n_windows`` and ``n_labelled`` are set here; ``dropped``
            defaults to ``{}``.
        dtype: On-disk signal dtype, ``"float32"`` or ``"float16"`` (reads return float32);
            float16 holds magnitudes up to 65504 µV only.
        chunk_windows: Windows per chunk of the signal array.
        overwrite: Replace an existing record of the same id (otherwise raise ``FileExistsError``).

    Raises:
        InputError: An argument does not match the store or the contract above.
        FileExistsError: The record exists and ``overwrite`` is False.
        DiskFullError: The disk filled up; the record's temporary directory was removed.
    """
    store = SleepStore(store_path)
    check_record_id(record_id)
    check(dtype in SIGNAL_DTYPES, "dtype", f"one of {SIGNAL_DTYPES}", repr(dtype))
    check(chunk_windows >= 1, "chunk_windows", "a positive number of windows", chunk_windows)
    n_channels = len(store.channels)
    check(
        signal.ndim == 3
        and signal.shape[0] >= 1
        and signal.shape[1:] == (n_channels, store.n_times),
        "signal",
        f"an array [W >= 1, C={n_channels}, T={store.n_times}]",
        signal,
    )
    n_windows = signal.shape[0]
    check(
        stage.shape == (n_windows,) and np.issubdtype(stage.dtype, np.integer),
        "stage",
        f"an integer array [W={n_windows}]",
        stage,
    )
    n_stages = len(store.stage_names)
    check(
        bool(np.all((stage >= UNLABELLED) & (stage < n_stages))),
        "stage",
        f"codes in [{UNLABELLED}, {n_stages - 1}]",
        f"values {np.unique(stage).tolist()}",
    )
    check(
        start_time.shape == (n_windows,) and bool(np.all(np.isfinite(start_time))),
        "start_time",
        f"a finite array [W={n_windows}]",
        start_time,
    )
    check(bool(np.all(np.isfinite(signal))), "signal", "only finite values", "NaN or Inf values")
    largest = float(np.abs(signal).max())
    limit = float(np.finfo(dtype).max)
    check(
        largest <= limit,
        "signal",
        f"values within ±{limit:g} µV to be stored as {dtype}",
        f"a largest magnitude of {largest:g} µV (use dtype='float32')",
    )
    for key in ("subject_id", "split"):
        check(key in attrs, "attrs", f"a mapping with key {key!r}", sorted(attrs))
    record_dir = store.path / RECORDS_GROUP / record_id
    if record_dir.exists() and not overwrite:
        raise FileExistsError(
            f"record_id: expected a record not yet in {str(store.path)!r}, got {record_id!r} "
            "(pass overwrite=True to replace it)"
        )
    record_attrs: dict[str, Any] = {"dropped": {}}
    record_attrs.update(_json_normalised(dict(attrs), "attrs"))
    record_attrs.update(
        record_id=record_id,
        sfreq=store.sfreq,
        n_windows=int(n_windows),
        n_labelled=int(np.count_nonzero(stage >= 0)),
        channel_scale=record_channel_scale(signal).tolist(),
    )
    dataset = xr.Dataset(
        {
            "signal": (("window", "channel", "time"), signal.astype(dtype, copy=False)),
            "stage": (("window",), stage.astype(np.int8)),
            "start_time": (("window",), start_time.astype(np.float64)),
        },
        coords={
            "window": np.arange(n_windows, dtype=np.int64),
            "channel": np.array(store.channels, dtype=object),
        },
        attrs=record_attrs,
    )
    encoding = {
        "signal": {
            "chunks": (min(chunk_windows, n_windows), n_channels, store.n_times),
            "compressors": _signal_compressors(),
            "_FillValue": None,
        },
        "stage": {"_FillValue": None},
        "start_time": {"_FillValue": None},
    }
    staging = record_dir.with_name(f"{TEMP_PREFIX}{record_id}-{uuid.uuid4().hex}")
    try:
        dataset.to_zarr(staging, mode="w-", consolidated=False, zarr_format=3, encoding=encoding)
        _replace_directory(staging, record_dir)
    except OSError as error:  # the record, not a chunk of its deleted staging directory
        if is_disk_full(error) and not isinstance(error, DiskFullError):
            raise DiskFullError(record_dir) from error
        raise
    finally:  # a full disk or an interrupt leaves no half-written record
        if staging.exists():
            shutil.rmtree(staging)


def remove_incomplete_records(store_path: str | Path) -> list[str]:
    """Delete the temporary directories an interrupted writer left in ``records/``.

    Call only when no writer is running on the store.

    Returns:
        Names of the deleted directories, sorted.
    """
    records_dir = Path(store_path) / RECORDS_GROUP
    if not records_dir.is_dir():
        return []
    removed = sorted(
        entry.name
        for entry in records_dir.iterdir()
        if entry.is_dir() and entry.name.startswith((TEMP_PREFIX, _OLD_PREFIX))
    )
    for name in removed:
        shutil.rmtree(records_dir / name)
    return removed
