"""``partnd cohort``: the PC18 sample cohort, or a dataset profile's files (``--profile``).

The command's options are those of :func:`partnd.cohort.pc18_cohort.build_parser` plus
``--profile pc18|sleep_edf|nsrr|headband``; ``pc18`` (the default) runs
:func:`~partnd.cohort.pc18_cohort.make_pc18_cohort` as before, the others
:func:`~partnd.cohort.profiles.make_profile_cohort` (``--test-fraction`` and ``--progress`` do
not apply to them).
"""

from __future__ import annotations

import argparse

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import COHORT_FILE, command_error, run_pc18_command
from partnd.cohort.pc18_cohort import build_parser as build_pc18_parser
from partnd.cohort.profiles import PROFILES, make_profile_cohort

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Command-line parser of ``partnd cohort``."""
    parser = build_pc18_parser()
    parser.description = (
        "Generate a synthetic sample cohort: by default in the PhysioNet/CinC 2018 file layout "
        "(training/ and test/ records plus cohort.json with the ground truth and the injected "
        "faults; the defaults give the built-in sample cohort), or with --profile as Sleep-EDF-"
        "like, NSRR-like (SHHS) or frontal-headband (BIDS) files. Not real data: see "
        "docs/sample_cohort.md."
    )
    parser.add_argument(
        "--profile",
        choices=("pc18", *PROFILES),
        default="pc18",
        help="dataset profile: pc18 (WFDB, six derivations at 200 Hz; the default), sleep_edf "
        "(SC4ssNE0-PSG.edf with Fpz-Cz, Pz-Oz, horizontal EOG at 100 Hz + R&K Hypnogram.edf) or "
        "nsrr (shhs1-NNNNNN.edf with C4-A1/C3-A2 at 125 Hz + NSRR XML) or headband (BIDS "
        "sub-SS/ses-NN/eeg/*_eeg.edf with one AF7-Fpz channel at 256 Hz + *_events.tsv)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``partnd cohort``.

    Returns:
        0 when the cohort exists (written now or already there), 2 for unusable arguments, with
        the error on stderr.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.profile == "pc18":
        return run_pc18_command(parser.prog, args)
    try:
        root = make_profile_cohort(
            args.profile,
            args.out,
            n_records=args.records,
            hours=args.hours,
            seed=args.seed,
            n_jobs=args.n_jobs,
            overwrite=args.overwrite,
        )
    except InputError as error:
        return command_error(parser.prog, error)
    print(
        f"{parser.prog}: {args.records} {args.profile} nights of {args.hours} h, seed "
        f"{args.seed}, in {root} (ground truth in {COHORT_FILE})"
    )
    print(f"next: partnd ingest {root} --out STORE.zarr  (pairs every night with its hypnogram)")
    return 0
