"""Writing and reading the PhysioNet/CinC Challenge 2018 ("PC18") record layout.

One record ``trNN-NNNN`` (training) or ``teNN-NNNN`` (test) is a directory holding

- ``RECORD.hea`` — WFDB header: ``RECORD 13 200 NSAMP`` then one line per signal, e.g.
  ``tr03-0005.mat 16+24 1/uV 16 0 -30 28024 0 F3-M2`` (file, format 16 at byte offset 24, gain and
  units, ADC resolution, ADC zero, initial value, checksum, block size, description);
- ``RECORD.mat`` — MATLAB v4 file with one ``int16`` variable ``val`` ``[13, n_samples]``; its
  column-major data after the 24-byte header is exactly the interleaved format-16 stream;
- training only: ``RECORD-arousal.mat`` — MATLAB v7.3 (HDF5 with a 512-byte MATLAB userblock):
  ``data/arousals`` (float64, HDF5 shape ``[n, 1]``, values -1/0/+1) and
  ``data/sleep_stages/{wake,nonrem1,nonrem2,nonrem3,rem,undefined}`` (uint8 one-hot, HDF5 shape
  ``[1, n]``), plus MATLAB's ``#refs#`` group — the shapes, dtypes and keys of the released files;
- training only: ``RECORD.arousal`` — WFDB annotations with ``aux_note`` labels ``W N1 N2 N3 R`` at
  stage changes and ``(arousal_rera`` / ``arousal_rera)`` style event brackets.

Gains and units follow the released headers: ``1/uV`` for the EEG, EOG, EMG and the respiratory
effort and airflow channels, ``655.35(-32768)/%`` for SaO2 and ``1000/mV`` for the ECG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import scipy.io
import wfdb

from partnd._validation import check
from partnd.cohort.hypnogram import STAGE_LABELS, SleepStage

__all__ = [
    "AROUSAL",
    "AROUSAL_SCORED",
    "AROUSAL_UNSCORED",
    "CHANNELS",
    "CHANNEL_NAMES",
    "EEG_CHANNEL_NAMES",
    "FS",
    "MAT_BYTE_OFFSET",
    "N_CHANNELS",
    "STAGE_KEYS",
    "UNDEFINED_STAGE",
    "AnnotatedEvent",
    "ChannelSpec",
    "digital_to_physical",
    "physical_to_digital",
    "read_arousal_mat",
    "read_signals",
    "wfdb_checksums",
    "write_arousal_annotations",
    "write_arousal_mat",
    "write_header",
    "write_signal_mat",
]

FS = 200
"""Sampling frequency of every PC18 signal (Hz)."""

MAT_BYTE_OFFSET = 24
"""Bytes before the samples in ``RECORD.mat``: 20-byte MATLAB v4 header and the name ``val\\0``."""

UNDEFINED_STAGE = -1
"""Per-sample stage code of unscored samples (the ``undefined`` one-hot vector)."""

AROUSAL = 1
"""``data/arousals`` value of samples inside an arousal."""

AROUSAL_SCORED = 0
"""``data/arousals`` value of scored samples without an arousal."""

AROUSAL_UNSCORED = -1
"""``data/arousals`` value of samples not scored (respiratory events, unscored prefix/suffix)."""

STAGE_KEYS: tuple[str, ...] = ("wake", "nonrem1", "nonrem2", "nonrem3", "rem", "undefined")
"""``data/sleep_stages`` dataset names, indexed by :class:`SleepStage` with ``undefined`` last."""


@dataclass(frozen=True)
class ChannelSpec:
    """One signal of the challenge's channel table.

    Attributes:
        name: Signal description in the header (e.g. ``"F3-M2"``).
        units: Physical units (``"uV"``, ``"%"`` or ``"mV"``).
        gain: ADC units per physical unit.
        baseline: Digital value of physical zero.
        header_gain: The gain field exactly as the challenge headers spell it.
    """

    name: str
    units: str
    gain: float
    baseline: int
    header_gain: str


def _microvolt(name: str) -> ChannelSpec:
    return ChannelSpec(name, "uV", 1.0, 0, "1/uV")


CHANNELS: tuple[ChannelSpec, ...] = (
    *(_microvolt(name) for name in ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1")),
    *(_microvolt(name) for name in ("E1-M2", "Chin1-Chin2", "ABD", "CHEST", "AIRFLOW")),
    ChannelSpec("SaO2", "%", 655.35, -32768, "655.35(-32768)/%"),
    ChannelSpec("ECG", "mV", 1000.0, 0, "1000/mV"),
)
"""The 13 PC18 signals in file order."""

CHANNEL_NAMES: tuple[str, ...] = tuple(spec.name for spec in CHANNELS)
EEG_CHANNEL_NAMES: tuple[str, ...] = CHANNEL_NAMES[:6]
N_CHANNELS = len(CHANNELS)

_GAINS = np.array([spec.gain for spec in CHANNELS], dtype=np.float64)[:, None]
_BASELINES = np.array([spec.baseline for spec in CHANNELS], dtype=np.float64)[:, None]
#: Valid digital range of WFDB format 16: -32768 is WFDB's "invalid sample" marker (read as NaN),
#: so a saturated channel clips at -32767, as a real amplifier's recording would read.
_DIGITAL_MIN = int(np.iinfo(np.int16).min) + 1
_DIGITAL_MAX = int(np.iinfo(np.int16).max)
_MATLAB_HEADER_TEXT = (
    "MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2018 "
    "HDF5 schema 1.00 ."
)


@dataclass(frozen=True)
class AnnotatedEvent:
    """A bracketed event of the ``.arousal`` file, e.g. ``(arousal_rera`` ... ``arousal_rera)``.

    Attributes:
        label: Event label without brackets (``"arousal_rera"``, ``"resp_hypopnea"``, ...).
        start: First sample of the event.
        stop: Sample one past the event's end.
    """

    label: str
    start: int
    stop: int


def _check_signal_block(array: np.ndarray, argument: str) -> None:
    check(
        array.ndim == 2 and array.shape[0] == N_CHANNELS and array.shape[1] > 0,
        argument,
        f"an array [{N_CHANNELS}, n_samples] with n_samples > 0",
        array,
    )


def physical_to_digital(physical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantise physical signals to the challenge's int16 ADC units.

    ``digital = round(physical * gain + baseline)``, clipped to ``[-32767, 32767]`` (WFDB format 16
    reserves -32768 for missing samples).

    Args:
        physical: ``[13, n]`` signals in each channel's units (µV, %, mV).

    Returns:
        ``(digital, n_clipped)``: ``int16 [13, n]`` and ``int64 [13]`` counts of samples that
        saturated at the digital limits.
    """
    _check_signal_block(physical, "physical")
    scaled = np.multiply(physical, _GAINS, dtype=np.float64)
    scaled += _BASELINES
    np.rint(scaled, out=scaled)
    n_clipped = np.count_nonzero(scaled < _DIGITAL_MIN, axis=1)
    n_clipped += np.count_nonzero(scaled > _DIGITAL_MAX, axis=1)
    np.clip(scaled, _DIGITAL_MIN, _DIGITAL_MAX, out=scaled)
    return scaled.astype(np.int16), n_clipped


def digital_to_physical(digital: np.ndarray) -> np.ndarray:
    """Convert int16 ADC units ``[13, n]`` back to physical units (``float64 [13, n]``)."""
    _check_signal_block(digital, "digital")
    return (digital.astype(np.float64) - _BASELINES) / _GAINS


def wfdb_checksums(digital: np.ndarray) -> list[int]:
    """WFDB header checksums: per-signal sample sums as signed 16-bit integers.

    Args:
        digital: ``int16 [n_signals, n]``.

    Returns:
        One checksum per signal.
    """
    sums = digital.astype(np.int64).sum(axis=1) & 0xFFFF
    return [int(value - 0x10000 if value >= 0x8000 else value) for value in sums]


def write_signal_mat(path: str | Path, digital: np.ndarray) -> None:
    """Write the challenge's ``RECORD.mat``: MATLAB v4 with one int16 variable ``val`` ``[13, n]``.

    Args:
        path: Destination file.
        digital: ``int16 [13, n]``.
    """
    _check_signal_block(digital, "digital")
    check(digital.dtype == np.int16, "digital", "dtype int16", digital)
    scipy.io.savemat(str(path), {"val": digital}, format="4")


def write_header(record_dir: str | Path, record_name: str, digital: np.ndarray) -> Path:
    """Write ``RECORD.hea`` describing ``RECORD.mat`` (format ``16+24``, challenge gains).

    The header is produced by :class:`wfdb.Record` (which validates every field); the gain fields
    are then spelled as in the released headers (``1/uV`` rather than wfdb's ``1.0(0)/uV``).

    Args:
        record_dir: Directory of the record.
        record_name: Record name, e.g. ``"tr03-0005"``.
        digital: ``int16 [13, n]``, the samples written to ``RECORD.mat``.

    Returns:
        Path of the header file.
    """
    _check_signal_block(digital, "digital")
    record_dir = Path(record_dir)
    n_samples = digital.shape[1]
    record = wfdb.Record(
        record_name=record_name,
        n_sig=N_CHANNELS,
        fs=FS,
        sig_len=n_samples,
        file_name=[f"{record_name}.mat"] * N_CHANNELS,
        fmt=["16"] * N_CHANNELS,
        byte_offset=[MAT_BYTE_OFFSET] * N_CHANNELS,
        adc_gain=[spec.gain for spec in CHANNELS],
        baseline=[spec.baseline for spec in CHANNELS],
        units=[spec.units for spec in CHANNELS],
        adc_res=[16] * N_CHANNELS,
        adc_zero=[0] * N_CHANNELS,
        init_value=[int(value) for value in digital[:, 0]],
        checksum=wfdb_checksums(digital),
        block_size=[0] * N_CHANNELS,
        sig_name=list(CHANNEL_NAMES),
    )
    record.wrheader(write_dir=str(record_dir))
    path = record_dir / f"{record_name}.hea"
    lines = path.read_text().splitlines()
    for index, spec in enumerate(CHANNELS, start=1):
        fields = lines[index].split(" ")
        fields[2] = spec.header_gain
        lines[index] = " ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return path


def _stages_per_sample_check(stages: np.ndarray, argument: str) -> None:
    valid = np.isin(stages, [*list(SleepStage), UNDEFINED_STAGE])
    check(
        stages.ndim == 1 and bool(valid.all()),
        argument,
        "a 1-D array of stage codes 0..4 or -1 (undefined)",
        stages,
    )


def write_arousal_mat(path: str | Path, stages: np.ndarray, arousals: np.ndarray) -> None:
    """Write ``RECORD-arousal.mat`` the way the challenge's MATLAB v7.3 files are laid out.

    Args:
        path: Destination file.
        stages: ``[n]`` per-sample :class:`SleepStage` codes, ``-1`` for undefined samples.
        arousals: ``[n]`` per-sample arousal labels (+1 arousal, 0 none, -1 not scored).
    """
    stages = np.asarray(stages)
    arousals = np.asarray(arousals)
    _stages_per_sample_check(stages, "stages")
    check(
        arousals.shape == stages.shape and bool(np.isin(arousals, (-1, 0, 1)).all()),
        "arousals",
        f"an array of shape {stages.shape} with values -1, 0, 1",
        arousals,
    )
    n_samples = stages.shape[0]
    chunk = min(n_samples, 1 << 16)
    with h5py.File(path, "w", userblock_size=512) as handle:
        refs = handle.create_group("#refs#")
        empty = refs.create_dataset("a", data=np.zeros(2, dtype=np.uint64))
        empty.attrs["MATLAB_class"] = np.bytes_("canonical empty")
        empty.attrs["MATLAB_empty"] = np.uint8(1)
        data = handle.create_group("data")
        data.attrs["MATLAB_class"] = np.bytes_("struct")
        arousal_set = data.create_dataset(
            "arousals",
            data=arousals.astype(np.float64)[:, None],
            chunks=(chunk, 1),
            compression="gzip",
            compression_opts=4,
        )
        arousal_set.attrs["MATLAB_class"] = np.bytes_("double")
        stage_group = data.create_group("sleep_stages")
        stage_group.attrs["MATLAB_class"] = np.bytes_("struct")
        codes = [*list(SleepStage), UNDEFINED_STAGE]
        for key, code in zip(STAGE_KEYS, codes, strict=True):
            one_hot = (stages == code).astype(np.uint8)[None, :]
            stage_set = stage_group.create_dataset(
                key, data=one_hot, chunks=(1, chunk), compression="gzip", compression_opts=4
            )
            stage_set.attrs["MATLAB_class"] = np.bytes_("uint8")
    header = _MATLAB_HEADER_TEXT.encode("ascii").ljust(116, b" ")
    header += b"\x00" * 8 + b"\x00\x02" + b"IM"
    with open(path, "r+b") as raw:
        raw.write(header)


def read_arousal_mat(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read ``RECORD-arousal.mat`` back into per-sample vectors.

    Args:
        path: The ``-arousal.mat`` file.

    Returns:
        ``(stages, arousals)``: ``int8 [n]`` stage codes (``-1`` undefined) and ``int8 [n]`` arousal
        labels.

    Raises:
        InputError: If a sample is not one-hot across the six stage vectors.
    """
    with h5py.File(path, "r") as handle:
        arousals = np.asarray(handle["data/arousals"]).squeeze().astype(np.int8)
        group = handle["data/sleep_stages"]
        one_hot = np.stack([np.asarray(group[key]).squeeze() for key in STAGE_KEYS])
    totals = one_hot.sum(axis=0)
    check(bool((totals == 1).all()), "path", "one stage per sample", f"{path} violates it")
    codes = np.array([*list(SleepStage), UNDEFINED_STAGE], dtype=np.int8)
    return codes[np.argmax(one_hot, axis=0)], arousals


def write_arousal_annotations(
    record_dir: str | Path,
    record_name: str,
    stages: np.ndarray,
    events: Sequence[AnnotatedEvent],
) -> Path:
    """Write ``RECORD.arousal``: stage labels at every stage change plus bracketed events.

    Args:
        record_dir: Directory of the record.
        record_name: Record name.
        stages: ``[n]`` per-sample stage codes (``-1`` undefined, which gets no label).
        events: Arousal and respiratory events, written as ``(label`` at ``start`` and ``label)``
            at ``stop - 1``.

    Returns:
        Path of the annotation file.
    """
    stages = np.asarray(stages)
    _stages_per_sample_check(stages, "stages")
    changes = np.flatnonzero(np.diff(stages, prepend=UNDEFINED_STAGE))
    changes = changes[stages[changes] != UNDEFINED_STAGE]
    samples = [int(sample) for sample in changes]
    notes = [STAGE_LABELS[int(stages[sample])] for sample in changes]
    for event in events:
        check(
            0 <= event.start < event.stop <= len(stages),
            "events",
            f"start < stop within [0, {len(stages)}]",
            repr(event),
        )
        samples += [event.start, event.stop - 1]
        notes += [f"({event.label}", f"{event.label})"]
    order = np.argsort(samples, kind="stable")
    wfdb.wrann(
        record_name,
        "arousal",
        np.asarray(samples, dtype=np.int64)[order],
        symbol=['"'] * len(samples),
        aux_note=[notes[index] for index in order],
        write_dir=str(record_dir),
    )
    return Path(record_dir) / f"{record_name}.arousal"


def read_signals(record_dir: str | Path) -> tuple[np.ndarray, tuple[str, ...], int]:
    """Read a record's signals with wfdb.

    Args:
        record_dir: A ``trNN-NNNN`` / ``teNN-NNNN`` directory.

    Returns:
        ``(physical, names, fs)``: ``float64 [13, n]`` in each channel's units, signal names and
        sampling frequency.
    """
    record_dir = Path(record_dir)
    record = wfdb.rdrecord(str(record_dir / record_dir.name))
    return record.p_signal.T, tuple(record.sig_name), int(record.fs)
