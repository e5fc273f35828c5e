"""Writing the Sleep-EDF layout: ``*-PSG.edf`` signals and R&K ``*-Hypnogram.edf`` (EDF+).

Sleep-EDF (Kemp et al. 2000, IEEE Trans Biomed Eng 47:1185; PhysioNet ``sleep-edfx``) stores one
night as two files: ``SC4ssNE0-PSG.edf`` with ``EEG Fpz-Cz``, ``EEG Pz-Oz`` and ``EOG horizontal``
at 100 Hz, and ``SC4ssNEC-Hypnogram.edf``, an annotation-only EDF+ file whose annotations are runs
of Rechtschaffen & Kales stages: ``Sleep stage W``, ``Sleep stage 1`` ... ``Sleep stage 4``,
``Sleep stage R``, ``Movement time`` and ``Sleep stage ?`` (not scored), each lasting a whole
number of 30-s epochs. Both are written with pyedflib, atomically (temporary name, then rename).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from partnd._validation import check

__all__ = [
    "RK_LABELS",
    "EdfSignal",
    "label_runs",
    "write_edf_signals",
    "write_rk_hypnogram",
]

RK_LABELS: tuple[str, ...] = (
    "Sleep stage W",
    "Sleep stage 1",
    "Sleep stage 2",
    "Sleep stage 3",
    "Sleep stage 4",
    "Sleep stage R",
    "Movement time",
    "Sleep stage ?",
)
"""The annotation texts of Sleep-EDF hypnograms."""


@dataclass(frozen=True)
class EdfSignal:
    """One signal of an EDF file.

    Attributes:
        label: Signal label as the file spells it (e.g. ``"EEG Fpz-Cz"``).
        data: ``[n_samples]`` physical values.
        sfreq: Samples per second (a whole number).
        dimension: Physical unit.
        physical_range: The symmetric physical range ``(-r, r)`` the 16-bit samples span; values
            outside it are clipped, as an amplifier's would be.
    """

    label: str
    data: np.ndarray
    sfreq: int
    dimension: str = "uV"
    physical_range: float = 500.0


def write_edf_signals(
    path: str | Path, signals: Sequence[EdfSignal], start: datetime, *, edf_plus: bool
) -> None:
    """Write ``signals`` (each a whole number of seconds long) to an EDF or EDF+ file.

    Raises:
        InputError: A signal is not a whole number of seconds or lasts another time than the rest.
    """
    import pyedflib

    durations = {len(signal.data) / signal.sfreq for signal in signals}
    check(
        len(durations) == 1 and float(next(iter(durations))).is_integer(),
        "signals",
        "signals of one common, whole number of seconds",
        sorted(durations),
    )
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    file_type = pyedflib.FILETYPE_EDFPLUS if edf_plus else pyedflib.FILETYPE_EDF
    writer = pyedflib.EdfWriter(str(partial), len(signals), file_type=file_type)
    try:
        writer.setSignalHeaders(
            [
                {
                    "label": signal.label,
                    "dimension": signal.dimension,
                    "sample_frequency": signal.sfreq,
                    "physical_max": signal.physical_range,
                    "physical_min": -signal.physical_range,
                    "digital_max": 32767,
                    "digital_min": -32768,
                    "transducer": "",
                    "prefilter": "",
                }
                for signal in signals
            ]
        )
        writer.setStartdatetime(start)
        writer.writeSamples(
            [
                np.clip(signal.data, -signal.physical_range, signal.physical_range).astype(
                    np.float64
                )
                for signal in signals
            ]
        )
    finally:
        writer.close()
    partial.replace(path)


def label_runs(labels: Sequence[str], epoch_seconds: float) -> list[tuple[float, float, str]]:
    """``(onset s, duration s, label)`` of each run of equal consecutive epoch labels."""
    runs: list[tuple[float, float, str]] = []
    start = 0
    for index in range(1, len(labels) + 1):
        if index == len(labels) or labels[index] != labels[start]:
            runs.append((start * epoch_seconds, (index - start) * epoch_seconds, labels[start]))
            start = index
    return runs


def write_rk_hypnogram(
    path: str | Path, labels: Sequence[str], start: datetime, epoch_seconds: float = 30.0
) -> None:
    """Write per-epoch R&K labels as an annotation-only EDF+ hypnogram (one annotation per run).

    Raises:
        InputError: A label is not one of :data:`RK_LABELS`.
    """
    import pyedflib

    unknown = sorted(set(labels) - set(RK_LABELS))
    check(not unknown, "labels", f"labels of {RK_LABELS}", unknown)
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    writer = pyedflib.EdfWriter(str(partial), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
    try:
        writer.setStartdatetime(start)
        for onset, duration, label in label_runs(labels, epoch_seconds):
            writer.writeAnnotation(onset, duration, label)
    finally:
        writer.close()
    partial.replace(path)
