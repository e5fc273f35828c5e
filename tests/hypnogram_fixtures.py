"""Hypnogram files written from each format's specification, for the reader tests.

Each writer takes Rechtschaffen & Kales labels per epoch (``W 1 2 3 4 R``, ``M`` movement,
``?`` unscored) and writes them as the format lays them out; :data:`EXPECTED_CODE` is what the
specification says each label is in the store's stages (3 and 4 -> N3, movement and ``?``
unscored).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

EXPECTED_CODE = {"W": 0, "1": 1, "2": 2, "3": 3, "4": 3, "R": 4, "M": -1, "?": -1}

NSRR_CONCEPT = {
    "W": "Wake|0",
    "1": "Stage 1 sleep|1",
    "2": "Stage 2 sleep|2",
    "3": "Stage 3 sleep|3",
    "4": "Stage 4 sleep|4",
    "R": "REM sleep|5",
    "M": "Movement|6",
    "?": "Unscored|9",
}
PROFUSION_CODE = {"W": 0, "1": 1, "2": 2, "3": 3, "4": 4, "R": 5, "M": 6, "?": 9}
EDF_DESCRIPTION = {
    "W": "Sleep stage W",
    "1": "Sleep stage 1",
    "2": "Sleep stage 2",
    "3": "Sleep stage 3",
    "4": "Sleep stage 4",
    "R": "Sleep stage R",
    "M": "Movement time",
    "?": "Sleep stage ?",
}


def runs(labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """``(first epoch, number of epochs, label)`` of each run of equal labels."""
    result, index = [], 0
    for label, group in itertools.groupby(labels):
        count = len(list(group))
        result.append((index, count, label))
        index += count
    return result


def expected_codes(labels: Sequence[str]) -> np.ndarray:
    return np.array([EXPECTED_CODE[label] for label in labels], dtype=np.int8)


def write_nsrr_xml(
    path: Path,
    labels: Sequence[str],
    *,
    epoch_seconds: float = 30.0,
    clock_time: str = "00.00.00 22.00.00",
    other_events: Sequence[tuple[str, str, float, float, str]] = (),
) -> Path:
    """An NSRR XML: one ``Stages|Stages`` event per run of equal labels, plus ``other_events``
    ``(EventType, EventConcept, Start, Duration, SignalLocation)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    events = [
        "<ScoredEvent><EventType/><EventConcept>Recording Start Time</EventConcept>"
        f"<Start>0</Start><Duration>{len(labels) * epoch_seconds:g}</Duration>"
        f"<ClockTime>{clock_time}</ClockTime></ScoredEvent>"
    ]
    for first, count, label in runs(labels):
        events.append(
            "<ScoredEvent><EventType>Stages|Stages</EventType>"
            f"<EventConcept>{NSRR_CONCEPT[label]}</EventConcept>"
            f"<Start>{first * epoch_seconds:g}</Start>"
            f"<Duration>{count * epoch_seconds:g}</Duration></ScoredEvent>"
        )
    for kind, concept, start, duration, location in other_events:
        events.append(
            f"<ScoredEvent><EventType>{escape(kind)}</EventType>"
            f"<EventConcept>{escape(concept)}</EventConcept><Start>{start:g}</Start>"
            f"<Duration>{duration:g}</Duration>"
            f"<SignalLocation>{escape(location)}</SignalLocation></ScoredEvent>"
        )
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n<PSGAnnotation>'
        "<SoftwareVersion>Compumedics</SoftwareVersion>"
        f"<EpochLength>{epoch_seconds:g}</EpochLength><ScoredEvents>"
        + "".join(events)
        + "</ScoredEvents></PSGAnnotation>\n"
    )
    return path


def write_profusion_xml(path: Path, labels: Sequence[str], *, epoch_seconds: float = 30.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    stages = "".join(f"<SleepStage>{PROFUSION_CODE[label]}</SleepStage>" for label in labels)
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<CMPStudyConfig>'
        f"<EpochLength>{epoch_seconds:g}</EpochLength><StepChannels/>"
        f"<SleepStages>{stages}</SleepStages><ScoredEvents/></CMPStudyConfig>\n"
    )
    return path


def write_bids_events(
    path: Path, labels: Sequence[str], *, epoch_seconds: float = 30.0, column: str = "trial_type"
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"onset\tduration\t{column}"]
    lines += [
        f"{index * epoch_seconds:g}\t{epoch_seconds:g}\t{EDF_DESCRIPTION[label]}"
        for index, label in enumerate(labels)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_edf_hypnogram(
    path: Path,
    labels: Sequence[str],
    *,
    epoch_seconds: float = 30.0,
    start: datetime = datetime(2021, 3, 1, 22, 0, 0),
    onset: float = 0.0,
) -> Path:
    """A Sleep-EDF/MASS style EDF+ hypnogram (annotations only, pyedflib): one annotation per
    run of equal labels."""
    import pyedflib

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = pyedflib.EdfWriter(str(path), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
    try:
        writer.setStartdatetime(start)
        for first, count, label in runs(labels):
            writer.writeAnnotation(
                onset + first * epoch_seconds, count * epoch_seconds, EDF_DESCRIPTION[label]
            )
    finally:
        writer.close()
    return path
