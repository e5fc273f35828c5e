"""Preprocess the PhysioNet/CinC Challenge 2018 data into a ``partnd-sleep`` zarr store.

Usage::

    partnd preprocess --src DIR --out STORE.zarr [--n-jobs 8] [--backend loky|dask]
        [--dtype float32|float16] [--records ID,ID ...] [--no-progress] [--overwrite]
        [--verify-checksums]

(also ``python -m partnd.preprocessing.physionet2018`` with the same options).

Every record under ``DIR/training/`` and ``DIR/test/`` is read (the six EEG channels, by name),
band-passed over the whole night, resampled to 100 Hz and cut into 30 s windows (see
:mod:`partnd.preprocessing.pipeline`). Workers write their record atomically; the parent process
writes ``manifest.json`` as results arrive.

Re-running the same command resumes: temporary directories of killed writers are deleted; a record
already in the store is skipped when its manifest entry says ``done`` and the sizes and modification
times of its source files are unchanged. Otherwise (changed files, no manifest entry because the
run was killed right after the record was written, or ``--verify-checksums``) the SHA-256 of the
sources is compared with the record's ``source_checksum``: equal -> skipped, different -> processed
again and replaced. Failed records are retried.

The exit status is 0 when every record is complete, 1 when any record failed unexpectedly, and 2
for unusable arguments. Failures that ``--src`` declares as injected on purpose (a generated sample
cohort's ``cohort.json``, see :func:`partnd.cohort.pc18_cohort.injected_faults`: a record whose
declared flat channel fails it with ``flat_channel``) are reported as expected and do not count.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import shutil
import sys
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partnd._disk import is_disk_full
from partnd._validation import check
from partnd.cli.errors import OptionNames, run_command
from partnd.cli.options import add_switch
from partnd.datasets.store import SIGNAL_DTYPES, SleepStore, remove_incomplete_records

from .errors import FLAT_CHANNEL, UNEXPECTED_ERROR, RecordError
from .manifest import STATUS_DONE, STATUS_FAILED, Manifest
from .parallel import BACKENDS, parallel_map_unordered, resolve_n_jobs
from .pc18_reader import PC18_EEG_CHANNELS, PC18Record, find_records, read_eeg, read_sample_stages
from .pipeline import (
    PreprocessingConfig,
    open_or_create_store,
    preprocess_continuous,
    store_windowed_record,
)

__all__ = [
    "OUTCOME_DONE",
    "OUTCOME_FAILED",
    "OUTCOME_SKIPPED",
    "PC18_SOURCE_SFREQ",
    "RecordTask",
    "RunReport",
    "build_parser",
    "expected_failures",
    "main",
    "preprocess_physionet2018",
    "process_record",
]

PC18_SOURCE_SFREQ = 200.0
OUTCOME_DONE = "done"
OUTCOME_SKIPPED = "skipped"
OUTCOME_FAILED = "failed"

_FAILURE_OF_FAULT = {"flat_channel": FLAT_CHANNEL}
"""Declared fault kind -> the failure reason it is expected to cause."""


@dataclass(frozen=True)
class RecordTask:
    """One unit of work for a worker.

    Attributes:
        record: The source record.
        store_path: Target store.
        config: Preprocessing configuration.
        dtype: On-disk signal dtype.
        stored_checksum: ``source_checksum`` of the record already in the store (None if absent):
            the worker skips the record when the sources still hash to it, else replaces it.
    """

    record: PC18Record
    store_path: Path
    config: PreprocessingConfig
    dtype: str
    stored_checksum: str | None = None


@dataclass
class RunReport:
    """What one run did.

    Attributes:
        outcomes: Record id -> ``"done"`` (processed now), ``"skipped"`` (already complete) or
            ``"failed"``.
        manifest: The store's manifest after the run.
        expected: Failed record id -> why its failure was expected (a fault the source declares as
            injected, see :func:`expected_failures`); the others failed unexpectedly.
    """

    outcomes: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, dict[str, Any]] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Ids of the records that failed in this run (expected failures included)."""
        return sorted(rid for rid, outcome in self.outcomes.items() if outcome == OUTCOME_FAILED)

    @property
    def expected_failures(self) -> list[str]:
        """Failed records whose failure is a fault the source declares as injected."""
        return [record_id for record_id in self.failed if record_id in self.expected]

    @property
    def unexpected_failures(self) -> list[str]:
        """Failed records that the source does not declare as faulty: real problems."""
        return [record_id for record_id in self.failed if record_id not in self.expected]

    def summary(self) -> str:
        """A plain-text table: counts per outcome, failed records with reasons, expected ones."""
        counts = Counter(self.outcomes.values())
        lines = [f"{'outcome':<10} {'records':>8}"]
        lines += [
            f"{outcome:<10} {counts.get(outcome, 0):>8}"
            for outcome in (OUTCOME_DONE, OUTCOME_SKIPPED, OUTCOME_FAILED)
        ]
        if self.failed:
            lines.append("")
            lines.append(f"{'failed record':<16} {'reason':<22} detail")
            for record_id in self.failed:
                entry = self.manifest[record_id]
                note = " [expected: injected fault]" if record_id in self.expected else ""
                lines.append(f"{record_id:<16} {entry['reason']:<22} {entry['detail']}{note}")
        expected = self.expected_failures
        if expected:
            noun = "record" if len(expected) == 1 else "records"
            listed = ", ".join(f"{rid} {self.expected[rid]}" for rid in expected)
            lines.append("")
            lines.append(f"{len(expected)} {noun} failed as expected: {listed}")
        unexpected = self.unexpected_failures
        if expected and unexpected:
            noun = "record" if len(unexpected) == 1 else "records"
            lines.append(f"{len(unexpected)} {noun} failed unexpectedly: {', '.join(unexpected)}")
        return "\n".join(lines)


def expected_failures(src: str | Path, manifest: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Failed records whose failure is exactly a fault that ``src`` declares as injected.

    Only a generated sample cohort declares faults (its ``cohort.json``, read with
    :func:`partnd.cohort.pc18_cohort.injected_faults`); real data never does. A failure is
    expected when its reason is the one the declared fault causes (a flat channel ->
    ``flat_channel``) and its detail names the declared channel.

    Args:
        src: The source directory of the run.
        manifest: Manifest entries of the run's records.

    Returns:
        Record id -> description, e.g. ``{"tr11-8157": "flat_channel (injected fault)"}``.
    """
    from partnd.cohort.pc18_cohort import injected_faults

    faults = injected_faults(src)
    expected = {}
    for record_id, entry in manifest.items():
        if entry.get("status") != STATUS_FAILED or record_id not in faults:
            continue
        for kind, details in faults[record_id].items():
            channel = details.get("channel") if isinstance(details, dict) else None
            if _FAILURE_OF_FAULT.get(kind) == entry.get("reason") and (
                channel is None or f"'{channel}'" in str(entry.get("detail"))
            ):
                expected[record_id] = f"{entry['reason']} (injected fault)"
    return expected


def _entry_from_attrs(record: PC18Record, attrs: dict[str, Any]) -> dict[str, Any]:
    dropped = dict(attrs.get("dropped", {}))
    return {
        "status": STATUS_DONE,
        "reason": None,
        "detail": None,
        "split": record.split,
        "n_kept": int(attrs["n_windows"]),
        "n_dropped": int(sum(dropped.values())),
        "n_dropped_by_reason": dropped,
        "source_checksum": attrs["source_checksum"],
        "source_sha256": dict(attrs.get("source_sha256", {})),
        "source_files": record.file_stats(),
        "duration_s": attrs["duration_s"],
        "first_window_sample": attrs["first_window_sample"],
    }


def _release_freed_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``), as dask.distributed workers do.

    Without it a long-running worker keeps about 100 MB of freed per-channel buffers of the last
    record resident, which raises the peak of the next one.
    """
    library = ctypes.util.find_library("c")
    if library is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(library).malloc_trim(0)


def process_record(task: RecordTask) -> tuple[str, str, dict[str, Any]]:
    """Preprocess one record into the store (worker function; never raises for a bad record).

    Args:
        task: The record and where and how to store it.

    Returns:
        ``(record_id, outcome, manifest entry)`` with outcome ``"done"``, ``"skipped"`` or
        ``"failed"``.
    """
    try:
        return _process_record(task)
    finally:
        _release_freed_memory()


def _process_record(task: RecordTask) -> tuple[str, str, dict[str, Any]]:
    record = task.record
    started = time.perf_counter()
    checksum = None
    file_checksums: dict[str, str] = {}
    try:
        checksum, file_checksums = record.checksums()
        if task.stored_checksum is not None and checksum == task.stored_checksum:
            attrs = SleepStore(task.store_path).record_attrs(record.record_id)
            return record.record_id, OUTCOME_SKIPPED, _entry_from_attrs(record, attrs)
        eeg = read_eeg(record, PC18_EEG_CHANNELS)
        n_samples = eeg.data.shape[1]
        stages = read_sample_stages(record.arousal_path, n_samples) if record.labelled else None
        windowed = preprocess_continuous(
            eeg.data, eeg.sfreq, stages, task.config, channels=eeg.channels
        )
        start = eeg.start
        del eeg
        attrs = store_windowed_record(
            task.store_path,
            record.record_id,
            windowed,
            task.config,
            {
                "subject_id": record.record_id,
                "split": record.split,
                "start_datetime": None if start is None else start.isoformat(),
                "source_checksum": checksum,
                "source_sha256": file_checksums,
            },
            dtype=task.dtype,
            overwrite=task.stored_checksum is not None,
        )
        entry = _entry_from_attrs(record, {**attrs, "n_windows": len(windowed.stage)})
        entry["seconds"] = round(time.perf_counter() - started, 3)
        return record.record_id, OUTCOME_DONE, entry
    except RecordError as error:
        reason, detail, trace = error.reason, error.detail, None
    except Exception as error:
        if is_disk_full(error):  # ends the run: every other record would fail the same way
            raise
        reason, detail = UNEXPECTED_ERROR, f"{type(error).__name__}: {error}"
        trace = traceback.format_exc(limit=5)
    entry = {
        "status": STATUS_FAILED,
        "reason": reason,
        "detail": detail,
        "traceback": trace,
        "split": record.split,
        "source_checksum": checksum,
        "source_sha256": file_checksums,
        "source_files": record.file_stats(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    return record.record_id, OUTCOME_FAILED, entry


def _is_unchanged(record: PC18Record, entry: dict[str, Any] | None) -> bool:
    return (
        entry is not None
        and entry.get("status") == STATUS_DONE
        and entry.get("source_files") == record.file_stats()
    )


def preprocess_physionet2018(
    src: str | Path,
    out: str | Path,
    *,
    n_jobs: int | None = 1,
    backend: str = "loky",
    dtype: str = "float32",
    records: Sequence[str] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    verify_checksums: bool = False,
    config: PreprocessingConfig | None = None,
    scheduler_address: str | None = None,
) -> RunReport:
    """Preprocess (or finish preprocessing) PC18 records into the store ``out``.

    Args:
        src: Challenge root holding ``training/`` and/or ``test/``.
        out: Store directory (created, or reopened to resume when its configuration matches).
        n_jobs: Parallel workers (MNE semantics, -1 = all cores).
        backend: ``"loky"`` (joblib processes) or ``"dask"`` (joblib on dask.distributed).
        dtype: On-disk signal dtype, ``"float32"`` or ``"float16"``.
        records: Process only these record ids (default: all found).
        progress: Show a progress bar.
        overwrite: Delete an existing store at ``out`` first. A store this call creates is
            removed again when it fails (an exception, Ctrl-C) before storing any record.
        verify_checksums: Hash the sources of every stored record instead of trusting file sizes
            and modification times.
        config: Preprocessing configuration (default :class:`PreprocessingConfig`).
        scheduler_address: Dask scheduler to use with ``backend="dask"`` (default: local cluster).

    Returns:
        The outcome of every selected record and the final manifest.

    Raises:
        InputError: Unknown ``dtype``/``backend``/record ids, or an existing store with another
            configuration.
        FileNotFoundError: ``src`` holds no ``training/`` or ``test/`` directory.
    """
    check(dtype in SIGNAL_DTYPES, "dtype", f"one of {SIGNAL_DTYPES}", repr(dtype))
    check(backend in BACKENDS, "backend", f"one of {BACKENDS}", repr(backend))
    resolve_n_jobs(n_jobs)  # checked before the store is created
    config = config if config is not None else PreprocessingConfig()
    src = Path(src).resolve()
    found = find_records(src)
    if records is not None:
        by_id = {record.record_id: record for record in found}
        unknown = sorted(set(records).difference(by_id))
        check(not unknown, "records", f"record ids found under {str(src)!r}", unknown)
        found = [by_id[record_id] for record_id in sorted(set(records))]
    source = {
        "dataset": "PhysioNet/CinC Challenge 2018",
        "root": str(src),
        "channel_selection": "by name",
        "subject_id": "record id (one subject per record)",
    }
    metadata = {**config.store_metadata(source, PC18_SOURCE_SFREQ), "signal_dtype": dtype}
    created = not Path(out).exists()
    store = open_or_create_store(
        out, config, list(PC18_EEG_CHANNELS), metadata, overwrite=overwrite, argument="out"
    )
    try:
        return _preprocess_into(
            store,
            src,
            found,
            config,
            dtype,
            n_jobs=n_jobs,
            backend=backend,
            progress=progress,
            verify_checksums=verify_checksums,
            scheduler_address=scheduler_address,
        )
    except BaseException:
        if created and not SleepStore(store.path).record_ids():
            shutil.rmtree(store.path, ignore_errors=True)  # leave no empty store behind
        raise


def _preprocess_into(
    store: SleepStore,
    src: Path,
    found: Sequence[PC18Record],
    config: PreprocessingConfig,
    dtype: str,
    *,
    n_jobs: int | None,
    backend: str,
    progress: bool,
    verify_checksums: bool,
    scheduler_address: str | None,
) -> RunReport:
    """:func:`preprocess_physionet2018` once its store is open: the records of ``found`` that
    are not stored yet (or changed) are processed, and the manifest updated."""
    remove_incomplete_records(store.path)
    manifest = Manifest(store.path, argument="out")
    complete = set(store.record_ids())
    report = RunReport()
    tasks = []
    for record in found:
        entry = manifest.entries.get(record.record_id)
        if record.record_id not in complete:
            tasks.append(RecordTask(record, store.path, config, dtype))
        elif not verify_checksums and _is_unchanged(record, entry):
            report.outcomes[record.record_id] = OUTCOME_SKIPPED
        else:
            stored = store.record_attrs(record.record_id)["source_checksum"]
            tasks.append(RecordTask(record, store.path, config, dtype, stored_checksum=stored))
    results = parallel_map_unordered(
        process_record,
        tasks,
        n_jobs=n_jobs,
        backend=backend,
        progress=progress,
        description="PC18 records",
        scheduler_address=scheduler_address,
    )
    for record_id, outcome, entry in results:
        manifest.update(record_id, entry)
        report.outcomes[record_id] = outcome
    report.manifest = dict(manifest.entries)
    failed = {rid: report.manifest[rid] for rid in report.failed if rid in report.manifest}
    if failed:
        report.expected = expected_failures(src, failed)
    return report


def _record_ids(text: str) -> list[str]:
    """One ``--records`` value: an id or comma-separated ids."""
    return [item.strip() for item in text.split(",") if item.strip()]


def build_parser(prog: str = "partnd preprocess") -> argparse.ArgumentParser:
    """Command-line parser of ``partnd preprocess`` (``prog``: the name shown in usage)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Preprocess PhysioNet/CinC 2018 records into a partnd-sleep zarr store "
        "(6 EEG channels, 0.1-30 Hz zero-phase FIR over the whole night, 100 Hz, 30 s windows).",
    )
    parser.add_argument(
        "--src", required=True, type=Path, help="directory with training/ and/or test/"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="store to create or resume, e.g. pc18.zarr"
    )
    parser.add_argument("--n-jobs", type=int, default=1, help="parallel workers (-1: all cores)")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="loky",
        help="joblib processes (loky) or a dask.distributed cluster (dask)",
    )
    parser.add_argument(
        "--scheduler-address",
        default=None,
        help="dask scheduler to use with --backend dask (default: a local cluster)",
    )
    parser.add_argument(
        "--dtype", choices=SIGNAL_DTYPES, default="float32", help="on-disk signal dtype"
    )
    parser.add_argument(
        "--records",
        nargs="+",
        type=_record_ids,
        default=None,
        metavar="ID",
        help="only these record ids (comma- or space-separated)",
    )
    add_switch(parser, "--progress", default=True, help="show a progress bar")
    add_switch(
        parser,
        "--overwrite",
        default=False,
        help="delete an existing store at --out first (default: resume it)",
    )
    add_switch(
        parser,
        "--verify-checksums",
        default=False,
        help="hash the sources of stored records instead of trusting sizes and mtimes",
    )
    return parser


OPTION_NAMES = OptionNames(
    {
        "src": "--src",
        "out": "--out",
        "records": "--records",
        "n_jobs": "--n-jobs",
        "backend": "--backend",
        "dtype": "--dtype",
        "overwrite": "--overwrite",
        "scheduler_address": "--scheduler-address",
        "verify_checksums": "--verify-checksums",
    }
)
"""How :func:`preprocess_physionet2018`'s arguments read as ``partnd preprocess`` options."""


def main(argv: list[str] | None = None, *, prog: str = "partnd preprocess") -> int:
    """Run the command.

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).
        prog: Program name shown in usage and error messages.

    Returns:
        0 when every record is complete or failed exactly as the source declares (faults injected
        into a generated sample cohort, listed as expected failures), 1 when any other record
        failed, 2 for unusable arguments (no record directory under ``--src``, an ``--out`` that
        is not a compatible store, unknown ``--records``), reported on stderr without a traceback;
        130 after Ctrl-C (finished records stay in the store: the same command resumes).
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    records = None if args.records is None else [rid for ids in args.records for rid in ids]

    def run() -> int:
        report = preprocess_physionet2018(
            args.src,
            args.out,
            n_jobs=args.n_jobs,
            backend=args.backend,
            dtype=args.dtype,
            records=records,
            progress=args.progress,
            overwrite=args.overwrite,
            verify_checksums=args.verify_checksums,
            scheduler_address=args.scheduler_address,
        )
        print(report.summary())
        return 1 if report.unexpected_failures else 0

    return run_command(parser.prog, OPTION_NAMES, run)


if __name__ == "__main__":
    sys.exit(main(prog="python -m partnd.preprocessing.physionet2018"))
