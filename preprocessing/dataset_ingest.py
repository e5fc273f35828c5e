"""Ingest a whole dataset directory: pair each recording with its hypnogram, then ingest the pairs
in parallel, resumably (``partnd ingest DIR --out STORE``).

**Pairing rules** (:func:`pair_recordings`), tried on every file under the directory:

- **sleep-edf**: ``SC4001E0-PSG.edf`` (or ``ST7011J0-PSG.edf``) with the one
  ``*-Hypnogram.edf`` beside it whose first 6 characters match (``SC4001EC-Hypnogram.edf``);
- **nsrr**: ``shhs1-200001.edf`` with ``shhs1-200001-nsrr.xml`` (else ``-profusion.xml``) beside
  it or, in NSRR's layout, at the same place under ``annotations-events-nsrr/``
  (``annotations-events-profusion/``) instead of ``edfs/``;
- **mass**: ``01-01-0001 PSG.edf`` with ``01-01-0001 Base.edf`` beside it;
- **bids**: ``sub-*/[ses-*/]eeg/*_eeg.{edf,bdf,vhdr,set,fif}`` with the ``*_events.tsv`` of the
  same entities beside it;
- **pattern** (``--pattern 'REC=HYP'``, instead of the rules above): ``REC`` a path under the
  directory with ``{id}`` (optionally ``{subject}``, ``{session}``; ``*`` matches within a
  folder), ``HYP`` the hypnogram's path with the same placeholders, e.g.
  ``'psg/{id}.edf=scores/{id}.xml'``.

Identifiers kept for subject-wise splits: Sleep-EDF subject ``SC4ss`` (the first 5 characters:
study, age group and subject number; the 6th is the night), session the night digit; NSRR subject
the number after the cohort-visit prefix (``200001``), session the visit (``shhs1``); MASS
subject the record id; BIDS subject ``sub-*`` and session ``ses-*``. Each record stores them as
``subject_id`` and ``session_id``.

A recording without a hypnogram, a hypnogram without a recording and a file no rule recognises
are reported with the reason (:class:`PairingReport`); only pairs are ingested.

**Run.** Pairs run in parallel (joblib through
:func:`~partnd.preprocessing.parallel.parallel_map_unordered`) through the single-file code
path (:func:`~partnd.preprocessing.ingest.ingest_file`); workers write their record atomically
and the driving process writes ``manifest.json``. Re-running the same command resumes: temporary
directories of killed writers are deleted, a record already stored is skipped when its source
files' sizes and modification times are unchanged (or, with no manifest entry because the run was
killed right after writing it, always), a changed one is ingested again, failed ones are retried.
"""

from __future__ import annotations

import errno
import re
import shutil
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partnd._validation import check
from partnd.datasets.store import SIGNAL_DTYPES, SleepStore, remove_incomplete_records

from .channel_maps import BUILTIN_CHANNEL_MAPS, ChannelMap, channel_map
from .errors import UNEXPECTED_ERROR, RecordError
from .manifest import STATUS_DONE, STATUS_FAILED, Manifest
from .parallel import parallel_map_unordered, resolve_n_jobs

__all__ = [
    "DEFAULT_CHANNEL_MAPS",
    "FAMILIES",
    "DatasetReport",
    "IngestTask",
    "Pair",
    "PairingReport",
    "ingest_dataset",
    "ingest_pair",
    "pair_recordings",
]

FAMILIES: tuple[str, ...] = ("sleep-edf", "nsrr", "mass", "bids", "pattern")
"""The pairing rules, by dataset family."""

DEFAULT_CHANNEL_MAPS: dict[str, str | None] = {
    "sleep-edf": "sleep-edf",
    "nsrr": "shhs",
    "mass": "mass",
    "bids": None,
    "pattern": None,
}
"""The channel map a family's records are ingested with unless ``channels`` is given (None: the
EEG channels with 10-20 names)."""

_SIGNAL_SUFFIXES = (".edf", ".bdf", ".vhdr", ".set", ".fif")
_SLEEP_EDF = re.compile(
    r"^(?P<id>(?P<subject>S[CT]\d{3})(?P<night>\d)[A-Z0-9]{2})-PSG\.edf$", re.IGNORECASE
)
_SLEEP_EDF_HYPNOGRAM = re.compile(r"^(S[CT]\d{4})[A-Z0-9]{2}-Hypnogram\.edf$", re.I)
_MASS = re.compile(r"^(?P<id>\d\d-\d\d-\d{4}) PSG\.edf$", re.I)
_MASS_HYPNOGRAM = re.compile(r"^\d\d-\d\d-\d{4} Base\.edf$", re.I)
_NSRR_HYPNOGRAM = re.compile(r"^(?P<id>.+)-(nsrr|profusion)\.xml$", re.I)
_NSRR_ID = re.compile(r"^(?P<session>[a-z][a-z-]*?\d*)-(?P<subject>\d+)$", re.I)
_BIDS = re.compile(
    r"^(?P<id>(?P<subject>sub-[A-Za-z0-9]+)(?:_(?P<session>ses-[A-Za-z0-9]+))?(?:_[a-z]+-[A-Za-z0-9]+)*)_eeg$"
)


@dataclass(frozen=True)
class Pair:
    """A recording and its hypnogram.

    Attributes:
        recording: The signal file.
        hypnogram: The hypnogram file.
        record_id: The record's id in the store.
        subject_id: The subject (for subject-wise splits).
        session_id: The session, visit or night, if the naming gives one.
        family: The rule that paired them (one of :data:`FAMILIES`).
    """

    recording: Path
    hypnogram: Path
    record_id: str
    subject_id: str
    session_id: str | None
    family: str


@dataclass
class PairingReport:
    """What :func:`pair_recordings` found.

    Attributes:
        pairs: The pairs, sorted by record id.
        unpaired: File -> why it was not paired.
    """

    pairs: list[Pair] = field(default_factory=list)
    unpaired: dict[Path, str] = field(default_factory=dict)

    def summary(self, root: Path | None = None) -> str:
        """One line per family with its pair count, then one line per unpaired file."""
        counts = Counter(pair.family for pair in self.pairs)
        lines = [f"paired {len(self.pairs)}: " + ", ".join(f"{k} {v}" for k, v in counts.items())]
        for path, why in sorted(self.unpaired.items()):
            shown = path.relative_to(root) if root is not None else path
            lines.append(f"not paired: {shown}: {why}")
        return "\n".join(lines)


def _nsrr_hypnogram(recording: Path, stem: str) -> Path | None:
    """The NSRR annotation file of ``recording``: beside it, or under ``annotations-events-*``
    where the recording sits under ``edfs``."""
    folders = [recording.parent]
    parts = recording.parent.parts
    if "edfs" in parts:
        index = len(parts) - 1 - parts[::-1].index("edfs")
        for kind in ("annotations-events-nsrr", "annotations-events-profusion"):
            folders.append(Path(*parts[:index], kind, *parts[index + 1 :]))
    for folder in folders:
        for suffix in ("-nsrr.xml", "-profusion.xml"):
            candidate = folder / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    return None


def _pattern_regex(template: str) -> re.Pattern[str]:
    placeholders = {"id": r"(?P<id>[^/]+?)", "subject": r"(?P<subject>[^/]+?)"}
    placeholders["session"] = r"(?P<session>[^/]+?)"
    pieces = re.split(r"(\{id\}|\{subject\}|\{session\})", template)
    regex = "".join(
        placeholders[p[1:-1]]
        if p in ("{id}", "{subject}", "{session}")
        else re.escape(p).replace(r"\*", "[^/]*")
        for p in pieces
    )
    return re.compile(f"^{regex}$")


def pair_recordings(root: str | Path, *, pattern: str | None = None) -> PairingReport:
    """Pair the recordings under ``root`` with their hypnograms (module table).

    Args:
        root: The dataset directory.
        pattern: ``"REC=HYP"`` templates for another layout (paths relative to ``root`` with
            ``{id}``, optionally ``{subject}``, ``{session}``; ``*`` matches within a folder);
            used instead of the built-in rules.

    Returns:
        The pairs and the files that could not be paired, with why.

    Raises:
        InputError: ``root`` is not a directory, or a pattern without ``=`` or ``{id}``.
    """
    root = Path(root)
    check(root.is_dir(), "root", "a dataset directory", str(root))
    files = sorted(path for path in root.rglob("*") if path.is_file())
    report = PairingReport()
    claimed: set[Path] = set()
    if pattern is not None:
        recording_template, equals, hypnogram_template = pattern.partition("=")
        check(
            bool(equals) and "{id}" in recording_template and "{id}" in hypnogram_template,
            "pattern",
            "'RECORDING=HYPNOGRAM' templates with {id} in both (e.g. "
            "'psg/{id}.edf=scores/{id}.xml')",
            repr(pattern),
        )
        regex = _pattern_regex(recording_template.strip())
        for path in files:
            match = regex.match(path.relative_to(root).as_posix())
            if match is None:
                continue
            fields = match.groupdict()
            hypnogram = root / hypnogram_template.strip().format(
                **{key: value for key, value in fields.items() if value is not None}
            )
            claimed.add(path)
            if hypnogram.is_file():
                claimed.add(hypnogram)
                report.pairs.append(
                    Pair(
                        path,
                        hypnogram,
                        fields["id"],
                        fields.get("subject") or fields["id"],
                        fields.get("session"),
                        "pattern",
                    )
                )
            else:
                report.unpaired[path] = f"no hypnogram {hypnogram.relative_to(root)}"
        _report_unclaimed(report, files, claimed, "no recording matches --pattern")
        return report
    for path in files:
        name = path.name
        if match := _SLEEP_EDF.match(name):
            prefix = name[:6].upper()
            found = [
                other
                for other in path.parent.iterdir()
                if _SLEEP_EDF_HYPNOGRAM.match(other.name) and other.name[:6].upper() == prefix
            ]
            claimed.add(path)
            if len(found) == 1:
                claimed.add(found[0])
                report.pairs.append(
                    Pair(
                        path,
                        found[0],
                        match["id"],
                        match["subject"],
                        match["night"],
                        "sleep-edf",
                    )
                )
            else:
                why = "no" if not found else f"{len(found)} ({sorted(p.name for p in found)})"
                report.unpaired[path] = f"{why} {prefix}??-Hypnogram.edf beside it"
        elif match := _MASS.match(name):
            hypnogram = path.with_name(f"{match['id']} Base.edf")
            claimed.add(path)
            if hypnogram.is_file():
                claimed.add(hypnogram)
                report.pairs.append(Pair(path, hypnogram, match["id"], match["id"], None, "mass"))
            else:
                report.unpaired[path] = f"no {hypnogram.name} beside it"
        elif (
            (match := _BIDS.match(path.stem)) and path.suffix.lower() in _SIGNAL_SUFFIXES
        ) and path.parent.name == "eeg":
            hypnogram = path.with_name(f"{match['id']}_events.tsv")
            claimed.add(path)
            if hypnogram.is_file():
                claimed.add(hypnogram)
                report.pairs.append(
                    Pair(path, hypnogram, match["id"], match["subject"], match["session"], "bids")
                )
            else:
                report.unpaired[path] = f"no {hypnogram.name} beside it"
        elif path.suffix.lower() == ".edf" and (hypnogram_path := _nsrr_hypnogram(path, path.stem)):
            claimed.update((path, hypnogram_path))
            nsrr = _NSRR_ID.match(path.stem)
            subject = nsrr["subject"] if nsrr else path.stem
            session = nsrr["session"] if nsrr else None
            report.pairs.append(Pair(path, hypnogram_path, path.stem, subject, session, "nsrr"))
    _report_unclaimed(report, files, claimed, "")
    report.pairs.sort(key=lambda pair: pair.record_id)
    ids = Counter(pair.record_id for pair in report.pairs)
    for pair in [pair for pair in report.pairs if ids[pair.record_id] > 1]:
        report.pairs.remove(pair)
        report.unpaired[pair.recording] = f"record id {pair.record_id!r} found more than once"
    return report


def _report_unclaimed(
    report: PairingReport, files: Sequence[Path], claimed: set[Path], default: str
) -> None:
    for path in files:
        if path in claimed:
            continue
        name = path.name
        if _SLEEP_EDF_HYPNOGRAM.match(name):
            report.unpaired[path] = "no *-PSG.edf with the same first 6 characters beside it"
        elif _MASS_HYPNOGRAM.match(name):
            report.unpaired[path] = f"no {name.replace(' Base.edf', ' PSG.edf')} beside it"
        elif _NSRR_HYPNOGRAM.match(name):
            report.unpaired[path] = "no recording with its stem (.edf beside it or under edfs/)"
        elif name.endswith("_events.tsv"):
            report.unpaired[path] = "no *_eeg recording with the same entities beside it"
        elif path.suffix.lower() in _SIGNAL_SUFFIXES:
            report.unpaired[path] = default or (
                "no hypnogram by any naming rule (Sleep-EDF, NSRR, MASS, BIDS); use --pattern"
            )


@dataclass(frozen=True)
class IngestTask:
    """One pair for a worker: ingest it into ``store_path``."""

    pair: Pair
    store_path: Path
    channels: ChannelMap | None
    dtype: str
    overwrite: bool


@dataclass
class DatasetReport:
    """What :func:`ingest_dataset` did.

    Attributes:
        pairing: The pairing.
        outcomes: Record id -> ``"done"``, ``"skipped"`` (already stored) or ``"failed"``.
        manifest: The store's manifest after the run.
        seconds: Wall time of the run.
    """

    pairing: PairingReport
    outcomes: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        """Record ids that failed."""
        return sorted(rid for rid, outcome in self.outcomes.items() if outcome == "failed")

    def summary(self, root: Path | None = None) -> str:
        """Pairing, counts per outcome, failures with their reasons, and the warnings about the
        files of the records ingested now (e.g. a hypnogram much shorter than its signal)."""
        counts = Counter(self.outcomes.values())
        lines = [self.pairing.summary(root)]
        lines.append(", ".join(f"{k} {counts.get(k, 0)}" for k in ("done", "skipped", "failed")))
        for record_id in self.failed:
            entry = self.manifest.get(record_id, {})
            lines.append(f"failed {record_id}: {entry.get('reason')}: {entry.get('detail')}")
        for record_id, outcome in sorted(self.outcomes.items()):
            if outcome == "done":
                for warning in self.manifest.get(record_id, {}).get("source_warnings", []):
                    lines.append(f"warning {record_id}: {warning}")
        return "\n".join(lines)


def _file_stats(pair: Pair) -> dict[str, list[int]]:
    return {
        str(path): [path.stat().st_size, path.stat().st_mtime_ns]
        for path in (pair.recording, pair.hypnogram)
    }


def _done_entry(pair: Pair, attrs: dict[str, Any]) -> dict[str, Any]:
    """The manifest entry of a stored record: its attributes (``attrs``) and source files."""
    return {
        "status": STATUS_DONE,
        "reason": None,
        "detail": None,
        "split": attrs["split"],
        "n_kept": attrs["n_windows"],
        "n_dropped_by_reason": attrs["dropped"],
        "source_checksum": attrs["source_checksum"],
        "source_files": _file_stats(pair),
        "duration_s": attrs["duration_s"],
        "source_warnings": attrs["source_warnings"],
    }


def ingest_pair(task: IngestTask) -> tuple[str, str, dict[str, Any]]:
    """Ingest one pair (worker function; never raises for a bad record).

    Returns:
        ``(record_id, "done" | "failed", manifest entry)``.
    """
    from .ingest import SourceWarning, ingest_file

    pair = task.pair
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SourceWarning)  # kept in source_warnings
            attrs = ingest_file(
                pair.recording,
                pair.hypnogram,
                task.store_path,
                pair.record_id,
                subject_id=pair.subject_id,
                channels=task.channels,
                dtype=task.dtype,
                overwrite=task.overwrite,
                session_id=pair.session_id,
                update_manifest=False,
            )
        entry = {
            **_done_entry(pair, attrs),
            "seconds": round(time.perf_counter() - started, 3),
        }
        return pair.record_id, "done", entry
    except RecordError as error:
        reason, detail, trace = error.reason, error.detail, None
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise  # a full disk ends the run: every other record would fail the same way
        reason, detail = UNEXPECTED_ERROR, f"{type(error).__name__}: {error}"
        trace = traceback.format_exc(limit=5)
    except Exception as error:  # a worker reports every failure instead of ending the run
        reason, detail = UNEXPECTED_ERROR, f"{type(error).__name__}: {error}"
        trace = traceback.format_exc(limit=5)
    return (
        pair.record_id,
        "failed",
        {
            "status": STATUS_FAILED,
            "reason": reason,
            "detail": detail,
            "traceback": trace,
            "source_files": _file_stats(pair),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )


def _store_channels(pairs: Sequence[Pair], channels: ChannelMap | None) -> list[str]:
    """The stored channel names: the map's, or those the first recording's 10-20 names give."""
    if channels is not None:
        return channels.stored
    import mne

    from .ingest import _channel_names

    raw = mne.io.read_raw(pairs[0].recording, preload=False, verbose="error")
    return _channel_names(raw, None)[1]


def ingest_dataset(
    root: str | Path,
    out: str | Path,
    *,
    pattern: str | None = None,
    channels: ChannelMap | str | Mapping[str, str | Sequence[str]] | None = None,
    n_jobs: int | None = 1,
    dtype: str = "float32",
    progress: bool = True,
) -> DatasetReport:
    """Pair the recordings under ``root`` and ingest every pair into the store ``out``.

    Args:
        root: The dataset directory (module table for the layouts).
        out: The store (created, or reopened to resume).
        pattern: ``"REC=HYP"`` templates instead of the built-in naming rules.
        channels: The channel map for every record (default: the family's,
            :data:`DEFAULT_CHANNEL_MAPS`).
        n_jobs: Parallel workers (MNE semantics, -1 = all cores).
        dtype: On-disk signal dtype.
        progress: Show a progress bar.

    Returns:
        The pairing and each record's outcome.

    Raises:
        InputError: Nothing to pair, pairs of several families without ``channels``, an
            existing store with another configuration.
    """
    from .pipeline import PreprocessingConfig, open_or_create_store

    started = time.perf_counter()
    check(dtype in SIGNAL_DTYPES, "dtype", f"one of {SIGNAL_DTYPES}", repr(dtype))
    resolve_n_jobs(n_jobs)
    root = Path(root)
    pairing = pair_recordings(root, pattern=pattern)
    check(
        bool(pairing.pairs),
        "root",
        "a directory with recordings and hypnograms named by a dataset's rule (Sleep-EDF, NSRR, "
        "MASS, BIDS) or by --pattern",
        f"{str(root)!r} where nothing paired:\n{pairing.summary(root)}",
    )
    families = sorted({pair.family for pair in pairing.pairs})
    if channels is None:
        check(
            len(families) == 1,
            "channels",
            "a channel map for recordings of several dataset families",
            f"none for families {families}",
        )
        default = DEFAULT_CHANNEL_MAPS[families[0]]
        channels = None if default is None else BUILTIN_CHANNEL_MAPS[default]
    used = None if channels is None else channel_map(channels)
    config = PreprocessingConfig()
    source: dict[str, Any] = {"dataset": "mne"}
    if used is not None:
        source["channel_map"] = used.describe()
    metadata = {**config.store_metadata(source, source_sfreq=None), "signal_dtype": dtype}
    out = Path(out)
    created = not out.exists()
    store = open_or_create_store(
        out,
        config,
        _store_channels(pairing.pairs, used),
        metadata,
        argument="out",
        replaceable=False,
    )
    try:
        report = _ingest_pairs(store, pairing, used, dtype, n_jobs, progress)
    except BaseException:
        if created and not SleepStore(store.path).record_ids():
            shutil.rmtree(store.path, ignore_errors=True)
        raise
    report.seconds = time.perf_counter() - started
    return report


def _ingest_pairs(
    store: SleepStore,
    pairing: PairingReport,
    channels: ChannelMap | None,
    dtype: str,
    n_jobs: int | None,
    progress: bool,
) -> DatasetReport:
    remove_incomplete_records(store.path)
    manifest = Manifest(store.path, argument="out")
    complete = set(store.record_ids())
    report = DatasetReport(pairing)
    tasks = []
    for pair in pairing.pairs:
        entry = manifest.entries.get(pair.record_id)
        if pair.record_id not in complete:
            tasks.append(IngestTask(pair, store.path, channels, dtype, overwrite=False))
        elif entry is None or (
            entry.get("status") == STATUS_DONE and entry.get("source_files") == _file_stats(pair)
        ):
            if entry is None:  # killed after the record was written, before the manifest
                attrs = store.record_attrs(pair.record_id)
                manifest.update(pair.record_id, _done_entry(pair, attrs))
            report.outcomes[pair.record_id] = "skipped"
        else:
            tasks.append(IngestTask(pair, store.path, channels, dtype, overwrite=True))
    try:
        for record_id, outcome, entry in parallel_map_unordered(
            ingest_pair, tasks, n_jobs=n_jobs, progress=progress, description="recordings"
        ):
            manifest.update(record_id, entry)
            report.outcomes[record_id] = outcome
    except BaseException:  # workers are gone: remove what they left half-written
        remove_incomplete_records(store.path)
        raise
    report.manifest = dict(manifest.entries)
    return report
