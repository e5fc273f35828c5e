"""Hypnogram files as sleep researchers hold them, read into one form: stages per scoring epoch.

Every reader returns a :class:`ScoredHypnogram` (stage codes ``0..4`` W, N1, N2, N3, REM and
``-1`` unscored, one per epoch, the epoch length, where the first epoch starts, the file's own
start date if it has one, and its other scored events). :func:`read_hypnogram` recognises the
format from the file (:func:`detect_format`):

``nsrr-xml``
    NSRR XML (SHHS, MESA, CFS, MrOS, CHAT ``*-nsrr.xml``): root ``PSGAnnotation``,
    ``EpochLength``, then ``ScoredEvents/ScoredEvent``. A stage event has ``EventType``
    ``Stages|Stages``, ``EventConcept`` ``Wake|0`` (W), ``Stage 1 sleep|1`` (N1),
    ``Stage 2 sleep|2`` (N2), ``Stage 3 sleep|3`` and ``Stage 4 sleep|4`` (N3, Rechtschaffen &
    Kales 3 and 4 merged), ``REM sleep|5`` (REM); ``Movement|6`` and ``Unscored|9`` are unscored.
    ``Start`` and ``Duration`` are seconds from the recording start; one event spans a run of
    epochs. The ``ClockTime`` of the ``Recording Start Time`` event is kept as
    :attr:`ScoredHypnogram.clock_time`. Every other scored event (arousals, apneas,
    desaturations) is kept in :attr:`ScoredHypnogram.events` with its ``SignalLocation``.
``profusion-xml``
    Compumedics Profusion XML (NSRR's other format): root ``CMPStudyConfig``, ``EpochLength``
    and ``SleepStages`` with one integer ``SleepStage`` per epoch from the recording start:
    0 W, 1 N1, 2 N2, 3 and 4 N3, 5 REM; any other value unscored. (YASA 0.8.1's
    ``Hypnogram.from_profusion`` maps the same way except that it reads 9 as wake:
    ``_PROFUSION_TO_YASA = {4: 3, 5: 4, 9: 0}`` in ``yasa/hypno.py``; 9 is not a scored stage
    in the format, so it stays unscored here. Pass ``stage_mapping={..., "9": 0}`` for YASA's
    reading.)
``annotations``
    Anything :func:`mne.read_annotations` reads: EDF+ hypnograms (Sleep-EDF ``*-Hypnogram.edf``,
    MASS ``* Base.edf``: ``Sleep stage W/1/2/3/4/R``, 3 and 4 merged into N3, ``Sleep stage ?``
    and ``Movement time`` unscored), the CSV (and EDF+) hypnograms ``partnd predict`` writes, FIF
    annotations. An EDF+ recording whose header MNE's annotation reader cannot decode (an EDF+
    exported by :func:`mne.export.export_raw`) is read through :func:`mne.io.read_raw_edf`
    instead. Onsets count from the annotations' ``orig_time`` (their start date).
``bids-events``
    BIDS ``*_events.tsv``: ``onset`` and ``duration`` in seconds from the recording start
    (required), the stage in ``trial_type`` (else ``value``), read with the same descriptions as
    annotations.

**Epochs other than 30 s.** The store's windows are 30 s long. An epoch length is accepted when
it divides 60 s (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60 s, and fractions of a second that
divide 60 s), so the epoch grid meets the window grid at least every 60 s; any other length is
refused. Windows are laid from the first epoch's start, and each takes the stage that covers most
of it (the seconds of every epoch of that stage inside the window summed); a window stays
unscored when two stages cover it equally or when unscored epochs cover most of it
(:meth:`ScoredHypnogram.window_stages`). With 20 s epochs (MASS) window ``[0, 30)`` takes the
stage of epoch ``[0, 20)``, window ``[30, 60)`` that of epoch ``[40, 60)``; with 10 s epochs a
window scored ``N1, N2, N1`` is N1 and one scored ``N1, N2, ?`` is unscored (a tie).

**Refused, naming the file:** overlapping stage events, an epoch length that does not divide
60 s, stage events off the epoch grid, an XML without stage events, an unknown format.
"""

from __future__ import annotations

import csv
import math
import warnings
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.stages import STAGE_ALIASES, stage_description

__all__ = [
    "EDF_UNKNOWN_START",
    "FORMATS",
    "NSRR_STAGE_MAPPING",
    "PROFUSION_STAGE_MAPPING",
    "UNSCORED",
    "ScoredEvent",
    "ScoredHypnogram",
    "detect_format",
    "edf_header_start",
    "read_hypnogram",
]

EDF_UNKNOWN_START = datetime(1985, 1, 1, tzinfo=timezone.utc)
"""Start date written in an EDF+ header when the recording's is unknown (EDF has no "unknown"
date; 1985 is its clipping year); a hypnogram with it has no date to compare."""

UNSCORED = -1
"""Stage code of an unscored epoch or window."""

FORMATS: tuple[str, ...] = ("nsrr-xml", "profusion-xml", "annotations", "bids-events")
"""The formats :func:`read_hypnogram` reads."""

NSRR_STAGE_MAPPING: dict[str, int] = {
    "Wake|0": 0,
    "Stage 1 sleep|1": 1,
    "Stage 2 sleep|2": 2,
    "Stage 3 sleep|3": 3,
    "Stage 4 sleep|4": 3,
    "REM sleep|5": 4,
}
"""NSRR ``EventConcept`` -> stage code; ``Movement|6``, ``Unscored|9`` and anything else are
unscored."""

PROFUSION_STAGE_MAPPING: dict[str, int] = {"0": 0, "1": 1, "2": 2, "3": 3, "4": 3, "5": 4}
"""Profusion ``SleepStage`` integer (as text) -> stage code; other values are unscored."""

_NSRR_STAGE_TYPE = "Stages|Stages"
_NSRR_START_CONCEPT = "Recording Start Time"
_MS = 1000  # epoch arithmetic is exact in milliseconds
_LARGEST_EPOCH_MS = 60 * _MS


@dataclass(frozen=True)
class ScoredEvent:
    """A scored event that is not a stage (arousal, apnea, desaturation, ...).

    Attributes:
        onset: Start in seconds (on the hypnogram's clock, see :class:`ScoredHypnogram`).
        duration: Duration in seconds.
        description: What was scored (NSRR ``EventConcept``, an annotation's description).
        location: The signal it was scored on (NSRR ``SignalLocation``), if given.
    """

    onset: float
    duration: float
    description: str
    location: str | None = None


@dataclass(frozen=True)
class ScoredHypnogram:
    """Stages per scoring epoch of one recording, as a file holds them.

    Attributes:
        stages: ``[E]`` int8 stage codes (0 W, 1 N1, 2 N2, 3 N3, 4 REM, -1 unscored), one per
            epoch, back to back.
        epoch_seconds: Epoch length in seconds.
        onset: Start of the first epoch in seconds: from :attr:`start` when it is set, else from
            the recording's first sample.
        start: The start date the file gives its onsets from (EDF+ header, CSV dates), or None
            (XML and BIDS files count from the recording start).
        path: The file read.
        format: One of :data:`FORMATS`.
        events: Other scored events, kept.
        clock_time: NSRR ``Recording Start Time`` ``ClockTime`` text, if any.
        file_start: The start date and time in an EDF/BDF file's header (UTC; years 85-99 read
            as 19xx, 00-84 as 20xx, as the EDF specification clips them), if the file has one;
            onsets do not count from it unless it is also :attr:`start`.
    """

    stages: np.ndarray
    epoch_seconds: float
    onset: float
    start: datetime | None
    path: str
    format: str
    events: tuple[ScoredEvent, ...] = ()
    clock_time: str | None = None
    file_start: datetime | None = None

    @property
    def end(self) -> float:
        """End of the last epoch in seconds (same clock as :attr:`onset`)."""
        return self.onset + len(self.stages) * self.epoch_seconds

    def window_stages(self, window_seconds: float = 30.0) -> np.ndarray:
        """Stage of each ``window_seconds`` window laid from :attr:`onset` (module rule).

        Args:
            window_seconds: Window length in seconds (the store's, 30).

        Returns:
            ``[ceil(E * epoch / window)]`` int8 stage codes; the last window may extend past the
            last epoch (the missing part counts as unscored).
        """
        epoch_ms = round(self.epoch_seconds * _MS)
        window_ms = round(window_seconds * _MS)
        if epoch_ms == window_ms:
            return self.stages.astype(np.int8)
        n_windows = math.ceil(len(self.stages) * epoch_ms / window_ms)
        result = np.full(n_windows, UNSCORED, dtype=np.int8)
        for window in range(n_windows):
            start, stop = window * window_ms, (window + 1) * window_ms
            cover: dict[int, int] = {}
            first = start // epoch_ms
            last = min(len(self.stages), -(-stop // epoch_ms))
            for epoch in range(first, last):
                seconds = min(stop, (epoch + 1) * epoch_ms) - max(start, epoch * epoch_ms)
                code = int(self.stages[epoch])
                cover[code] = cover.get(code, 0) + seconds
            cover[UNSCORED] = cover.get(UNSCORED, 0) + window_ms - sum(cover.values())
            best = max(cover.values())
            leaders = [code for code, seconds in cover.items() if seconds == best]
            if len(leaders) == 1 and leaders[0] != UNSCORED:
                result[window] = leaders[0]
        return result

    def to_annotations(self, window_seconds: float = 30.0) -> Any:
        """The scored windows as ``mne.Annotations`` (one per scored window, ``"Sleep stage
        N2"``...), on the file's clock (``orig_time`` = :attr:`start`)."""
        import mne

        from partnd.datasets.stages import STAGE_NAMES

        stages = self.window_stages(window_seconds)
        scored = np.flatnonzero(stages >= 0)
        return mne.Annotations(
            onset=self.onset + scored * window_seconds,
            duration=np.full(len(scored), window_seconds),
            description=[stage_description(STAGE_NAMES[stages[index]]) for index in scored],
            orig_time=self.start,
        )


def _refuse(path: Path, what: str, got: str) -> InputError:
    return InputError(f"hypnogram: expected {what}, got {str(path)!r} with {got}")


def detect_format(path: str | Path) -> str:
    """The format of a hypnogram file (one of :data:`FORMATS`), from its name and content.

    ``.xml``: ``nsrr-xml`` for a ``PSGAnnotation`` root, ``profusion-xml`` for
    ``CMPStudyConfig``; ``.tsv``: ``bids-events``; anything else: ``annotations``.

    Raises:
        InputError: An XML file with another root, or one that does not parse.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return "bids-events"
    if suffix != ".xml":
        return "annotations"
    try:
        root = ElementTree.parse(path).getroot().tag
    except ElementTree.ParseError as error:
        raise _refuse(path, "an XML hypnogram", f"a file that does not parse ({error})") from None
    formats = {"PSGAnnotation": "nsrr-xml", "CMPStudyConfig": "profusion-xml"}
    if root not in formats:
        raise _refuse(
            path,
            "an NSRR (root PSGAnnotation) or Compumedics Profusion (root CMPStudyConfig) XML",
            f"root element {root!r}",
        )
    return formats[root]


def read_hypnogram(
    path: str | Path,
    *,
    format: str | None = None,
    stage_mapping: Mapping[str, int] | None = None,
) -> ScoredHypnogram:
    """Read a hypnogram file in any of :data:`FORMATS`.

    Args:
        path: The file.
        format: One of :data:`FORMATS` (default: :func:`detect_format`).
        stage_mapping: Label -> stage code (0..4), replacing the format's own mapping
            (NSRR ``EventConcept``, Profusion integers as text, annotation / ``trial_type``
            descriptions); labels it does not name are unscored.

    Returns:
        The stages per epoch, on the file's clock.

    Raises:
        InputError: A file that does not exist or is not in the format (naming the file and
            what was wrong), overlapping stage events, an epoch length that does not divide
            60 s, no stage event at all.
    """
    path = Path(path)
    check(path.is_file(), "hypnogram", "an existing hypnogram file", str(path))
    format = format if format is not None else detect_format(path)
    check(format in FORMATS, "format", f"one of {FORMATS}", repr(format))
    if stage_mapping is not None:
        bad = {key: code for key, code in stage_mapping.items() if code not in range(-1, 5)}
        check(not bad, "stage_mapping", "stage codes in [-1, 4]", bad)
    readers = {
        "nsrr-xml": _read_nsrr,
        "profusion-xml": _read_profusion,
        "annotations": _read_annotations,
        "bids-events": _read_bids_events,
    }
    return readers[format](path, stage_mapping)


def _text(element: ElementTree.Element, tag: str) -> str | None:
    child = element.find(tag)
    return None if child is None or child.text is None else child.text.strip()


def _number(path: Path, text: str | None, what: str) -> float:
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise _refuse(path, f"{what} as a non-negative number of seconds", repr(text))
    return value


def _check_epoch(path: Path, epoch_seconds: float) -> int:
    """The epoch length in ms, refused unless it divides 60 s."""
    epoch_ms = round(epoch_seconds * _MS)
    if epoch_ms <= 0 or abs(epoch_ms - epoch_seconds * _MS) > 1e-6 or _LARGEST_EPOCH_MS % epoch_ms:
        raise _refuse(
            path,
            "an epoch length that divides 60 s (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60 s), so "
            "that epochs map onto the store's 30 s windows",
            f"{epoch_seconds:g} s",
        )
    return epoch_ms


def _epochs_from_spans(
    path: Path,
    spans: list[tuple[float, float, int]],
    epoch_seconds: float | None,
    origin: float | None = None,
) -> tuple[np.ndarray, float, float]:
    """``(stages per epoch, epoch length, onset)`` from stage spans ``(onset, duration, code)``.

    The epoch length is ``epoch_seconds`` or, when None, the largest that every span's onset
    (from the first) and duration are whole multiples of. Spans must lie on the epoch grid laid
    from ``origin`` (default: the first span's onset) and must not overlap; gaps are unscored.
    """
    if not spans:
        raise _refuse(path, "stage events", "none")
    spans = sorted(spans)
    first = spans[0][0] if origin is None else origin
    starts = [round((onset - first) * _MS) for onset, _, _ in spans]
    lengths = [round(duration * _MS) for _, duration, _ in spans]
    if epoch_seconds is None:
        common = 0
        for value in (*starts, *lengths):
            common = math.gcd(common, value)
        epoch_seconds = common / _MS if common else 30.0
        if common and _LARGEST_EPOCH_MS % common:  # e.g. spans of 90 s: use a divisor of 60 s
            epoch_seconds = math.gcd(common, _LARGEST_EPOCH_MS) / _MS
    epoch_ms = _check_epoch(path, epoch_seconds)
    off_grid = [
        (onset, duration)
        for (onset, duration, _), start, length in zip(spans, starts, lengths, strict=True)
        if start % epoch_ms or length % epoch_ms or length <= 0 or start < 0
    ]
    if off_grid:
        raise _refuse(
            path,
            f"stage events on the {epoch_seconds:g} s epoch grid from {first:g} s",
            f"events (onset, duration) {off_grid[:3]}",
        )
    n_epochs = max(
        (start + length) // epoch_ms for start, length in zip(starts, lengths, strict=True)
    )
    stages = np.full(n_epochs, UNSCORED, dtype=np.int8)
    covered = np.zeros(n_epochs, dtype=bool)
    for (onset, _, code), start, length in zip(spans, starts, lengths, strict=True):
        epochs = slice(start // epoch_ms, (start + length) // epoch_ms)
        if covered[epochs].any():
            raise _refuse(path, "stage events that do not overlap", f"an overlap at {onset:g} s")
        covered[epochs] = True
        stages[epochs] = code
    return stages, epoch_seconds, first


def _read_nsrr(path: Path, stage_mapping: Mapping[str, int] | None) -> ScoredHypnogram:
    mapping = NSRR_STAGE_MAPPING if stage_mapping is None else stage_mapping
    root = ElementTree.parse(path).getroot()
    epoch_seconds = _number(path, _text(root, "EpochLength"), "EpochLength")
    events = root.find("ScoredEvents")
    spans: list[tuple[float, float, int]] = []
    kept: list[ScoredEvent] = []
    clock_time = None
    for event in [] if events is None else events.findall("ScoredEvent"):
        concept = _text(event, "EventConcept") or ""
        if concept == _NSRR_START_CONCEPT:
            clock_time = _text(event, "ClockTime")
            continue
        onset = _number(path, _text(event, "Start"), f"Start of {concept!r}")
        duration = _number(path, _text(event, "Duration"), f"Duration of {concept!r}")
        if _text(event, "EventType") == _NSRR_STAGE_TYPE:
            spans.append((onset, duration, int(mapping.get(concept, UNSCORED))))
        else:
            kept.append(ScoredEvent(onset, duration, concept, _text(event, "SignalLocation")))
    if not spans:
        raise _refuse(path, "ScoredEvent elements with EventType 'Stages|Stages'", "none")
    stages, epoch, onset = _epochs_from_spans(path, spans, epoch_seconds, origin=0.0)
    return ScoredHypnogram(
        stages, epoch, onset, None, str(path), "nsrr-xml", tuple(kept), clock_time
    )


def _read_profusion(path: Path, stage_mapping: Mapping[str, int] | None) -> ScoredHypnogram:
    mapping = PROFUSION_STAGE_MAPPING if stage_mapping is None else stage_mapping
    root = ElementTree.parse(path).getroot()
    epoch_seconds = _number(path, _text(root, "EpochLength"), "EpochLength")
    _check_epoch(path, epoch_seconds)
    container = root.find("SleepStages")
    values = [] if container is None else [_text(item, ".") for item in container]
    if not values:
        raise _refuse(path, "a SleepStages list of SleepStage integers", "none")
    stages = np.array([mapping.get(value or "", UNSCORED) for value in values], dtype=np.int8)
    return ScoredHypnogram(stages, epoch_seconds, 0.0, None, str(path), "profusion-xml")


def _read_mne_annotations(path: Path) -> Any:
    """:func:`mne.read_annotations`, or the annotations :func:`mne.io.read_raw_edf` reads from
    an EDF+ recording whose header the annotation reader cannot decode."""
    import mne

    try:
        return mne.read_annotations(path)
    except Exception as error:  # readers fail in many ways on a file they cannot read
        if path.suffix.lower() in (".edf", ".bdf"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    return mne.io.read_raw_edf(path, preload=False, verbose="error").annotations
            except Exception:  # the first error is the one to report
                pass
        raise InputError(
            "hypnogram: expected an annotation file mne.read_annotations reads (EDF+, FIF, "
            f"CSV/TXT with onset, duration, description, ...), got {str(path)!r} "
            f"({type(error).__name__}: {error})"
        ) from None


def _spans_of_descriptions(
    onsets: Any, durations: Any, descriptions: Any, mapping: Mapping[str, int]
) -> tuple[list[tuple[float, float, int]], list[ScoredEvent]]:
    spans, kept = [], []
    for onset, duration, description in zip(onsets, durations, descriptions, strict=True):
        text = str(description)
        if text in mapping:
            spans.append((float(onset), float(duration), int(mapping[text])))
        else:
            kept.append(ScoredEvent(float(onset), float(duration), text))
    return spans, kept


def _read_annotations(path: Path, stage_mapping: Mapping[str, int] | None) -> ScoredHypnogram:
    mapping = STAGE_ALIASES if stage_mapping is None else stage_mapping
    annotations = _read_mne_annotations(path)
    spans, kept = _spans_of_descriptions(
        annotations.onset, annotations.duration, annotations.description, mapping
    )
    if not spans:
        raise _refuse(
            path,
            "stage annotations ('Sleep stage W', 'Sleep stage 2', 'N3', ...)",
            f"descriptions {sorted(set(map(str, annotations.description)))[:8]}",
        )
    stages, epoch, onset = _epochs_from_spans(path, spans, None)
    return ScoredHypnogram(
        stages,
        epoch,
        onset,
        annotations.orig_time,
        str(path),
        "annotations",
        tuple(kept),
        file_start=edf_header_start(path),
    )


def edf_header_start(path: str | Path) -> datetime | None:
    """The start date and time in an EDF/BDF header (bytes 168-183, ``dd.mm.yyhh.mm.ss``), in
    UTC, or None for another file or an unreadable date."""
    path = Path(path)
    if path.suffix.lower() not in (".edf", ".bdf"):
        return None
    with path.open("rb") as handle:
        header = handle.read(184)
    try:
        day, month, year = (int(part) for part in header[168:176].decode("ascii").split("."))
        hour, minute, second = (int(part) for part in header[176:184].decode("ascii").split("."))
        year += 1900 if year >= 85 else 2000
        return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
    except (ValueError, UnicodeDecodeError):
        return None


def _read_bids_events(path: Path, stage_mapping: Mapping[str, int] | None) -> ScoredHypnogram:
    mapping = STAGE_ALIASES if stage_mapping is None else stage_mapping
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    columns = set(rows[0]) if rows else set()
    if not {"onset", "duration"} <= columns:
        raise _refuse(path, "BIDS events with columns onset and duration", str(sorted(columns)))
    label = "trial_type" if "trial_type" in columns else "value" if "value" in columns else None
    if label is None:
        raise _refuse(path, "a trial_type or value column with the stages", str(sorted(columns)))
    onsets = [_number(path, row["onset"], "onset") for row in rows]
    durations = [_number(path, row["duration"], "duration") for row in rows]
    spans, kept = _spans_of_descriptions(onsets, durations, [row[label] for row in rows], mapping)
    if not spans:
        raise _refuse(path, f"stage events in {label}", "none")
    stages, epoch, onset = _epochs_from_spans(path, spans, None)
    return ScoredHypnogram(stages, epoch, onset, None, str(path), "bids-events", tuple(kept))
