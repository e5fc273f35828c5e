"""Local reader of PhysioNet/CinC Challenge 2018 ("PC18") records (wfdb signals, h5py labels).

A record ``DIR/{training,test}/<id>/`` holds ``<id>.hea`` (WFDB header), ``<id>.mat`` (MATLAB v4
``val`` int16 ``[13, n]``, read by wfdb as format 16 at byte offset 24) and, for training records,
``<id>-arousal.mat`` (MATLAB v7.3 / HDF5 with one-hot ``data/sleep_stages/*`` vectors per sample).
Channels are picked by name; only the requested channels are converted to µV (float32).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np
import wfdb

from partnd._validation import check

from .errors import (
    LABEL_LENGTH_MISMATCH,
    MISSING_CHANNEL,
    MISSING_FILE,
    UNREADABLE_HEADER,
    UNREADABLE_LABELS,
    UNREADABLE_SIGNAL,
    RecordError,
)
from .windowing import CONFLICTING_SAMPLE, UNDEFINED_SAMPLE

__all__ = [
    "PC18_EEG_CHANNELS",
    "PC18_SPLITS",
    "PC18_STAGE_KEYS",
    "EEGRecording",
    "PC18Record",
    "find_records",
    "read_eeg",
    "read_sample_stages",
]

PC18_EEG_CHANNELS: tuple[str, ...] = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1")
PC18_SPLITS: tuple[str, ...] = ("training", "test")
PC18_STAGE_KEYS: tuple[str, ...] = ("wake", "nonrem1", "nonrem2", "nonrem3", "rem")
"""``data/sleep_stages`` vectors of stage codes 0..4 (``undefined`` is the sixth vector)."""

_UNDEFINED_KEY = "undefined"
_RECORD_NAME = re.compile(r"^(tr|te)\d\d-\d{4}$")
_MICROVOLTS_PER_UNIT = {"uV": 1.0, "µV": 1.0, "mV": 1e3, "V": 1e6, "nV": 1e-3}
_WFDB_INVALID_16 = -32768
_HASH_BLOCK = 1 << 22
_READ_BLOCK_SAMPLES = 200 * 7200


@dataclass(frozen=True)
class PC18Record:
    """Location of one PC18 record.

    Attributes:
        record_id: Record name, e.g. ``"tr03-0005"``.
        split: ``"training"`` or ``"test"``.
        directory: The record's directory.
    """

    record_id: str
    split: str
    directory: Path

    @property
    def header_path(self) -> Path:
        """The WFDB header ``<id>.hea``."""
        return self.directory / f"{self.record_id}.hea"

    @property
    def arousal_path(self) -> Path:
        """The label file ``<id>-arousal.mat`` (training records only)."""
        return self.directory / f"{self.record_id}-arousal.mat"

    @property
    def labelled(self) -> bool:
        """Whether the record has sleep-stage labels (training split)."""
        return self.split == "training"

    def source_files(self) -> list[Path]:
        """Files the preprocessed record derives from: ``.hea``, ``.mat`` and ``-arousal.mat``."""
        files = [self.header_path, self.directory / f"{self.record_id}.mat"]
        if self.labelled:
            files.append(self.arousal_path)
        return files

    def checksum(self) -> str:
        """SHA-256 over the names and contents of :meth:`source_files`, as hex.

        Raises:
            RecordError: ``"missing_file"`` when a source file does not exist.
        """
        return self.checksums()[0]

    def checksums(self) -> tuple[str, dict[str, str]]:
        """:meth:`checksum` and the SHA-256 of each source file, from one read of the files.

        Returns:
            ``(record checksum, {file name: file SHA-256 as hex})``.

        Raises:
            RecordError: ``"missing_file"`` when a source file does not exist.
        """
        digest = hashlib.sha256()
        per_file = {}
        for path in self.source_files():
            _require_file(path)
            digest.update(path.name.encode() + b"\0")
            file_digest = hashlib.sha256()
            with open(path, "rb") as handle:
                while block := handle.read(_HASH_BLOCK):
                    digest.update(block)
                    file_digest.update(block)
            per_file[path.name] = file_digest.hexdigest()
        return digest.hexdigest(), per_file

    def file_stats(self) -> dict[str, list[int]]:
        """``{file name: [size in bytes, mtime in ns]}`` of the existing source files."""
        return {
            path.name: [path.stat().st_size, path.stat().st_mtime_ns]
            for path in self.source_files()
            if path.is_file()
        }


@dataclass
class EEGRecording:
    """Continuous signals of one record.

    Attributes:
        data: ``[C, N]`` float32 in µV (invalid samples are NaN).
        sfreq: Sampling frequency in Hz.
        channels: Channel names, in ``data`` order.
        start: Start date and time from the header (WFDB base date and time, read as UTC), or
            ``None`` when the header has none (the challenge's headers have none).
    """

    data: np.ndarray
    sfreq: float
    channels: list[str]
    start: datetime | None = None


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise RecordError(MISSING_FILE, f"{path} does not exist")


def find_records(src: str | Path, splits: Sequence[str] = PC18_SPLITS) -> list[PC18Record]:
    """List the records under ``src/<split>/`` (directories named ``trNN-NNNN`` / ``teNN-NNNN``).

    Args:
        src: Root of the challenge data (holding ``training/`` and/or ``test/``).
        splits: Sub-directories to scan.

    Returns:
        Records sorted by split (in ``splits`` order), then by id.

    Raises:
        FileNotFoundError: ``src`` is not a directory or holds none of ``splits``.
    """
    root = Path(src)
    if not root.is_dir():
        raise FileNotFoundError(
            f"src: expected a directory holding {list(splits)}, got {str(root)!r}"
        )
    present = [split for split in splits if (root / split).is_dir()]
    if not present:
        raise FileNotFoundError(
            f"src: expected a directory holding at least one of {list(splits)}, got {str(root)!r}"
        )
    records: list[PC18Record] = []
    for split in present:
        names = sorted(
            entry.name
            for entry in (root / split).iterdir()
            if entry.is_dir() and _RECORD_NAME.match(entry.name)
        )
        records.extend(PC18Record(name, split, root / split / name) for name in names)
    return records


def read_eeg(record: PC18Record, channels: Sequence[str] = PC18_EEG_CHANNELS) -> EEGRecording:
    """Read the named channels of a record in µV.

    wfdb reads the signal file in blocks of 2 h (at 200 Hz: 37 MB of 13 int16 channels) to bound
    memory; each block re-parses the header, so shorter blocks cost time. Only the requested
    channels are converted (``(digital - baseline) / gain`` scaled to µV from the
    header's units); WFDB's invalid-sample value -32768 becomes NaN.

    Args:
        record: The record.
        channels: Channel names to read, in output order.

    Returns:
        The channels as float32 ``[C, N]`` µV.

    Raises:
        RecordError: ``"missing_file"``, ``"unreadable_header"``, ``"missing_channel"`` or
            ``"unreadable_signal"`` (also for a signal file shorter than its header says).
    """
    _require_file(record.header_path)
    record_path = str(record.directory / record.record_id)
    try:
        header = wfdb.rdheader(record_path)
    except Exception as error:
        raise RecordError(UNREADABLE_HEADER, f"{record.header_path}: {error}") from error
    names = list(header.sig_name or [])
    missing = [name for name in channels if name not in names]
    if missing:
        raise RecordError(
            MISSING_CHANNEL, f"{record.header_path} has no signal {missing} (signals: {names})"
        )
    indices = [names.index(name) for name in channels]
    _check_signal_files(record, header, indices)
    scales = []
    for index in indices:
        unit = header.units[index]
        if unit not in _MICROVOLTS_PER_UNIT:
            raise RecordError(
                UNREADABLE_HEADER, f"{record.header_path}: signal {names[index]} has unit {unit!r}"
            )
        scales.append(_MICROVOLTS_PER_UNIT[unit] / float(header.adc_gain[index]))
    n_samples = int(header.sig_len)
    data = np.empty((len(indices), n_samples), dtype=np.float32)
    for block_start in range(0, n_samples, _READ_BLOCK_SAMPLES):
        block_stop = min(block_start + _READ_BLOCK_SAMPLES, n_samples)
        try:
            digital = wfdb.rdrecord(
                record_path,
                sampfrom=block_start,
                sampto=block_stop,
                channels=indices,
                physical=False,
                return_res=16,
            ).d_signal
        except Exception as error:
            raise RecordError(UNREADABLE_SIGNAL, f"{record_path}: {error}") from error
        if digital is None or digital.shape != (block_stop - block_start, len(indices)):
            raise RecordError(
                UNREADABLE_SIGNAL,
                f"{record_path}: samples {block_start}..{block_stop} read as "
                f"{None if digital is None else digital.shape}",
            )
        for row, index in enumerate(indices):
            column = digital[:, row]
            block = data[row, block_start:block_stop]
            np.subtract(column, header.baseline[index], out=block, dtype=np.float32)
            block *= np.float32(scales[row])
            block[column == _WFDB_INVALID_16] = np.nan
    start = header.base_datetime if header.base_date is not None else None
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    return EEGRecording(data, float(header.fs), list(channels), start)


def _check_signal_files(record: PC18Record, header: wfdb.Record, indices: list[int]) -> None:
    for index in indices:
        path = record.directory / header.file_name[index]
        _require_file(path)
        if header.fmt[index] != "16":
            raise RecordError(
                UNREADABLE_HEADER, f"{record.header_path}: format {header.fmt[index]}, expected 16"
            )
        n_file_signals = header.file_name.count(header.file_name[index])
        offset = int(header.byte_offset[index] or 0)
        expected = offset + 2 * n_file_signals * int(header.sig_len)
        size = path.stat().st_size
        if size < expected:
            raise RecordError(
                UNREADABLE_SIGNAL,
                f"{path} has {size} bytes, the header implies {expected} (truncated file)",
            )


def read_sample_stages(path: str | Path, n_samples: int) -> np.ndarray:
    """Per-sample stage codes from a PC18 ``-arousal.mat`` file.

    Args:
        path: The MATLAB v7.3 label file.
        n_samples: Length of the signals; every label vector must have this many samples.

    Returns:
        ``[n_samples]`` int8: 0..4 for W, N1, N2, N3, REM; -1 where ``undefined`` or no stage is
        set; -2 where several vectors are set at once.

    Raises:
        RecordError: ``"missing_file"``, ``"unreadable_labels"`` or ``"label_length_mismatch"``.
    """
    path = Path(path)
    check(n_samples > 0, "n_samples", "a positive number of samples", n_samples)
    _require_file(path)
    codes = np.full(n_samples, UNDEFINED_SAMPLE, dtype=np.int8)
    n_set = np.zeros(n_samples, dtype=np.uint8)
    try:
        with h5py.File(path, "r") as handle:
            group = handle["data/sleep_stages"]
            for code, key in enumerate((*PC18_STAGE_KEYS, _UNDEFINED_KEY)):
                dataset = group[key]
                if dataset.size != n_samples:
                    raise RecordError(
                        LABEL_LENGTH_MISMATCH,
                        f"{path}: data/sleep_stages/{key} has {dataset.size} samples, "
                        f"the signals have {n_samples}",
                    )
                flags = np.asarray(dataset).reshape(-1) != 0
                n_set += flags
                if key != _UNDEFINED_KEY:
                    codes[flags] = code
    except RecordError:
        raise
    except Exception as error:
        raise RecordError(UNREADABLE_LABELS, f"{path}: {error}") from error
    codes[n_set > 1] = CONFLICTING_SAMPLE
    return codes
