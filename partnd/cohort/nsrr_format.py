"""Writing NSRR XML annotations (``*-nsrr.xml``), as the National Sleep Research Resource does.

Layout (NSRR annotation exports of SHHS, MESA, CFS, MrOS, CHAT; DESIGN.md §5c): root
``PSGAnnotation`` with ``SoftwareVersion`` and ``EpochLength`` (seconds), then
``ScoredEvents/ScoredEvent``, each with ``EventType``, ``EventConcept``, ``Start`` and
``Duration`` in seconds:

- first the ``Recording Start Time`` event (empty ``EventType``, ``Start`` 0, the recording's
  ``Duration`` and its ``ClockTime`` as ``00.00.00 HH.MM.SS``);
- stage events, ``EventType`` ``Stages|Stages`` and ``EventConcept`` ``Wake|0``, ``Stage 1
  sleep|1`` ... ``Stage 4 sleep|4``, ``REM sleep|5``, ``Movement|6`` or ``Unscored|9``, one per run
  of equal epochs (its ``Duration`` a multiple of ``EpochLength``);
- other scored events, with a ``SignalLocation``: arousals (``Arousals|Arousals``, ``ASDA
  arousal|Arousal (ASDA)``, on ``C3``) and hypopneas (``Respiratory|Respiratory``,
  ``Hypopnea|Hypopnea``, on ``ABDO RES``).

Written atomically (temporary name, then rename).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time
from pathlib import Path

from partnd._validation import check
from partnd.cohort.sleep_edf_format import label_runs

__all__ = [
    "AROUSAL_CONCEPT",
    "HYPOPNEA_CONCEPT",
    "STAGE_CONCEPTS",
    "ScoredEvent",
    "write_nsrr_xml",
]

STAGE_CONCEPTS: tuple[str, ...] = (
    "Wake|0",
    "Stage 1 sleep|1",
    "Stage 2 sleep|2",
    "Stage 3 sleep|3",
    "Stage 4 sleep|4",
    "REM sleep|5",
    "Movement|6",
    "Unscored|9",
)
"""``EventConcept`` values of NSRR stage events."""

AROUSAL_CONCEPT = ("Arousals|Arousals", "ASDA arousal|Arousal (ASDA)", "C3")
"""``(EventType, EventConcept, SignalLocation)`` of an arousal."""
HYPOPNEA_CONCEPT = ("Respiratory|Respiratory", "Hypopnea|Hypopnea", "ABDO RES")
"""``(EventType, EventConcept, SignalLocation)`` of a hypopnea."""


@dataclass(frozen=True)
class ScoredEvent:
    """A non-stage scored event.

    Attributes:
        event_type: ``EventType`` (e.g. ``"Arousals|Arousals"``).
        concept: ``EventConcept``.
        start: Onset in seconds from the recording start.
        duration: Duration in seconds.
        location: ``SignalLocation``.
    """

    event_type: str
    concept: str
    start: float
    duration: float
    location: str


def _event(parent: ET.Element, fields: Sequence[tuple[str, str]]) -> None:
    node = ET.SubElement(parent, "ScoredEvent")
    for tag, text in fields:
        ET.SubElement(node, tag).text = text


def write_nsrr_xml(
    path: str | Path,
    stage_concepts: Sequence[str],
    events: Sequence[ScoredEvent],
    clock_time: time,
    epoch_seconds: int = 30,
) -> None:
    """Write a recording's stages (one concept per epoch) and events as NSRR XML.

    Args:
        path: The ``*-nsrr.xml`` file to write.
        stage_concepts: ``EventConcept`` of every epoch from the recording start
            (:data:`STAGE_CONCEPTS`).
        events: Other scored events.
        clock_time: Wall-clock time of the recording start.
        epoch_seconds: ``EpochLength``.

    Raises:
        InputError: A stage concept is not one of :data:`STAGE_CONCEPTS`.
    """
    unknown = sorted(set(stage_concepts) - set(STAGE_CONCEPTS))
    check(not unknown, "stage_concepts", f"concepts of {STAGE_CONCEPTS}", unknown)
    root = ET.Element("PSGAnnotation")
    ET.SubElement(root, "SoftwareVersion").text = "Compumedics"
    ET.SubElement(root, "EpochLength").text = str(epoch_seconds)
    scored = ET.SubElement(root, "ScoredEvents")
    _event(
        scored,
        [
            ("EventType", ""),
            ("EventConcept", "Recording Start Time"),
            ("Start", "0"),
            ("Duration", f"{len(stage_concepts) * epoch_seconds:.1f}"),
            ("ClockTime", f"00.00.00 {clock_time:%H.%M.%S}"),
        ],
    )
    for onset, duration, concept in label_runs(stage_concepts, epoch_seconds):
        _event(
            scored,
            [
                ("EventType", "Stages|Stages"),
                ("EventConcept", concept),
                ("Start", f"{onset:.1f}"),
                ("Duration", f"{duration:.1f}"),
            ],
        )
    for event in sorted(events, key=lambda item: item.start):
        _event(
            scored,
            [
                ("EventType", event.event_type),
                ("EventConcept", event.concept),
                ("Start", f"{event.start:.1f}"),
                ("Duration", f"{event.duration:.1f}"),
                ("SignalLocation", event.location),
            ],
        )
    ET.indent(root)
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    ET.ElementTree(root).write(partial, encoding="UTF-8", xml_declaration=True)
    partial.replace(path)
