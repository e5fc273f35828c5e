"""The ``partnd ingest`` command: one recording file, or a whole dataset directory.

``partnd ingest RECORDING [HYPNOGRAM] --out STORE`` runs
:func:`partnd.preprocessing.ingest.ingest_file`; ``partnd ingest DIR --out STORE`` runs
:func:`partnd.preprocessing.dataset_ingest.ingest_dataset`. Also ``python -m
partnd.preprocessing.ingest_command`` with the same arguments.
"""

from __future__ import annotations

import argparse
import errno
import sys
import warnings
from pathlib import Path

from partnd._validation import check
from partnd.cli.errors import OptionNames, run_command
from partnd.cli.options import add_switch
from partnd.datasets.store import SIGNAL_DTYPES

from .dataset_ingest import ingest_dataset
from .errors import RecordError
from .ingest import SourceWarning, ingest_file

__all__ = ["OPTION_NAMES", "build_parser", "main"]


OPTION_NAMES = OptionNames(
    {
        "path": "RECORDING",
        "hypnogram": "HYPNOGRAM",
        "store_path": "--out",
        "record_id": "--record-id",
        "subject_id": "--subject-id",
        "split": "--split",
        "eeg_channels": "--eeg-channels",
        "channels": "--channels",
        "pattern": "--pattern",
        "n_jobs": "--n-jobs",
        "root": "RECORDING",
        "out": "--out",
        "dtype": "--dtype",
        "strict": "--strict",
        "overwrite": "--overwrite",
    }
)
"""How :func:`ingest_file`'s arguments read as ``partnd ingest`` options."""


def _parse_channels(text: str | None) -> list[str] | dict[str, str] | None:
    """``"A,B"`` -> ``["A", "B"]``; ``"A=a,B"`` -> ``{"A": "a", "B": "B"}``."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not any("=" in item for item in items):
        return items
    pairs = [item.partition("=") for item in items]
    return {name.strip(): (stored.strip() or name.strip()) for name, _, stored in pairs}


def build_parser() -> argparse.ArgumentParser:
    """Command-line parser of ``partnd ingest``."""
    parser = argparse.ArgumentParser(
        prog="partnd ingest",
        description="Preprocess one recording MNE reads (EDF, BDF, FIF, BrainVision, ...) with its "
        "hypnogram into a partnd-sleep zarr store (0.1-30 Hz zero-phase FIR over the whole night, "
        "100 Hz, 30 s windows aligned to the first scored sample), or every recording of a "
        "dataset directory paired with its hypnogram by the dataset's naming (Sleep-EDF, NSRR, "
        "MASS, BIDS, or --pattern). The store accumulates records.",
    )
    parser.add_argument(
        "recording",
        type=Path,
        metavar="RECORDING",
        help="the recording file, or a dataset directory (Sleep-EDF, NSRR, MASS or BIDS naming, "
        "or --pattern): every recording in it is paired with its hypnogram and ingested",
    )
    parser.add_argument(
        "hypnogram",
        type=Path,
        nargs="?",
        metavar="HYPNOGRAM",
        help="the sleep stages: NSRR or Compumedics Profusion XML, BIDS events.tsv, or any "
        "annotation file mne.read_annotations reads (a Sleep-EDF/MASS EDF+ hypnogram, the CSV "
        "partnd predict writes; the recording itself if it carries them); omit for an "
        "unlabelled recording",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="store to create or add to, e.g. sleep_edf.zarr"
    )
    parser.add_argument("--record-id", help="record identifier (default: the file name's stem)")
    parser.add_argument("--subject-id", help="subject identifier (default: the record id)")
    parser.add_argument(
        "--split", help="split attribute (default: training when labelled, test otherwise)"
    )
    parser.add_argument(
        "--eeg-channels",
        metavar="NAMES",
        help="comma-separated channels to keep, each optionally renamed for the store "
        "('EEG Fpz-Cz=Fpz-Cz,EEG Pz-Oz=Pz-Oz'); default: the EEG channels with 10-20 names",
    )
    parser.add_argument(
        "--channels",
        metavar="MAP",
        help="channel map: a built-in map (sleep-edf, shhs, mass, pc18) or STORED=SOURCE pairs "
        "('C4-A1=EEG,C3-A2=EEG(sec)|EEG2'; a SOURCE 'C4 - M1' derives C4 minus M1); default for "
        "a directory: its dataset family's map",
    )
    parser.add_argument(
        "--pattern",
        metavar="REC=HYP",
        help="with a directory: pair by these path templates instead of the dataset naming "
        "rules, e.g. 'psg/{id}.edf=scores/{id}.xml' ({subject} and {session} optional)",
    )
    parser.add_argument(
        "--n-jobs", type=int, default=1, help="with a directory: parallel workers (-1: all cores)"
    )
    add_switch(parser, "--progress", default=True, help="with a directory: show a progress bar")
    parser.add_argument(
        "--dtype", choices=SIGNAL_DTYPES, default="float32", help="on-disk signal dtype"
    )
    add_switch(
        parser,
        "--overwrite",
        default=False,
        help="replace a record with the same id already in --out (other records are kept)",
    )
    add_switch(
        parser,
        "--strict",
        default=False,
        help="refuse files MNE warns about while reading them (e.g. an EDF whose header does not "
        "match its size: a truncated file); default: ingest them and print the warnings",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``partnd ingest``.

    Returns:
        0 when the record was stored (MNE's warnings about the files, if any, are printed on
        stderr and kept in the record's ``source_warnings``), 1 when it could not be preprocessed
        (the reason is printed, and written to the manifest of a store that existed) or the disk
        is full (one line; temporary files are removed, a store this call created too), 2 for
        unusable arguments or, with ``--strict``, files MNE warns about (message on stderr).
    """
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        try:
            return _run(parser.prog, args)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            where = error.filename if error.filename is not None else args.out
            print(
                f"{parser.prog}: no space left on device while writing {where}; nothing "
                "half-written was kept",
                file=sys.stderr,
            )
            return 1

    return run_command(parser.prog, OPTION_NAMES, body)


def _run_directory(prog: str, args: argparse.Namespace) -> int:
    """``partnd ingest DIR``: pair and ingest a dataset directory."""

    given = [
        option
        for option, value in (
            ("HYPNOGRAM", args.hypnogram),
            ("--record-id", args.record_id),
            ("--subject-id", args.subject_id),
            ("--split", args.split),
            ("--eeg-channels", args.eeg_channels),
            ("--overwrite", args.overwrite or None),
            ("--strict", args.strict or None),
        )
        if value is not None
    ]
    check(
        not given,
        "RECORDING",
        "a recording file when " + ", ".join(given) + " is given (a directory pairs each "
        "recording with its hypnogram and names records, subjects and channels by its dataset's "
        "rules)",
        f"the directory {args.recording}",
    )
    report = ingest_dataset(
        args.recording,
        args.out,
        pattern=args.pattern,
        channels=args.channels,
        n_jobs=args.n_jobs,
        dtype=args.dtype,
        progress=args.progress,
    )
    print(report.summary(args.recording))
    nights = sum(1 for outcome in report.outcomes.values() if outcome == "done")
    print(
        f"{prog}: {nights} recordings ingested in {report.seconds:.1f} s "
        f"({60 * nights / max(report.seconds, 1e-9):.1f} nights/min) -> {args.out}"
    )
    return 1 if report.failed else 0


def _run(prog: str, args: argparse.Namespace) -> int:
    if args.recording.is_dir():
        return _run_directory(prog, args)
    check(
        args.pattern is None and args.n_jobs == 1,
        "--pattern",
        "--pattern and --n-jobs only with a dataset directory as RECORDING",
        f"the file {args.recording}",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SourceWarning)
        try:
            attrs = ingest_file(
                args.recording,
                args.hypnogram,
                args.out,
                args.record_id,
                strict=args.strict,
                subject_id=args.subject_id,
                split=args.split,
                eeg_channels=_parse_channels(args.eeg_channels),
                channels=args.channels,
                dtype=args.dtype,
                overwrite=args.overwrite,
            )
        except RecordError as error:
            print(f"{prog}: {args.recording} failed: {error.reason}: {error.detail}")
            return 1
    for warning in caught:
        if issubclass(warning.category, SourceWarning):
            print(f"{prog}: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    labelled = "unlabelled" if args.hypnogram is None else f"{attrs['n_labelled']} labelled"
    how = (
        " (picked by their 10-20 names; choose with --channels or --eeg-channels)"
        if not args.eeg_channels and not args.channels
        else ""
    )
    mapped = f" stored as {attrs['channel_derivations']}" if args.channels else ""
    problems = len(attrs["source_warnings"])
    flagged = f"; {problems} MNE warning(s) about the files, see above" if problems else ""
    print(
        f"{prog}: {attrs['record_id']}: {attrs['n_windows']} windows ({labelled}, "
        f"dropped {attrs['dropped']}) from channels {attrs['source_channels']}{how}{mapped}"
        f"{flagged} "
        f"-> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
