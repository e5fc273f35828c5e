"""How real each dataset profile is: YASA's zero-label kappa on the channel YASA would use.

``python -m partnd.cohort.profile_realism --profile sleep_edf|nsrr|headband --out DIR`` (the PC18
profile's report is ``python -m partnd.cohort.realism``) writes a profile's files
(:func:`partnd.cohort.profiles.make_profile_cohort`), ingests the directory as a user would with
``partnd ingest DIR`` (:func:`partnd.preprocessing.dataset_ingest.ingest_dataset`: each recording
paired with its hypnogram by the dataset's naming, the hypnograms read from the files, R&K EDF+,
NSRR XML or BIDS ``events.tsv``, the family's channel map; 0.1-30 Hz, 100 Hz, 30 s windows),
refuses to go on unless every night paired and ingested, stages the profile's YASA channel
(Fpz-Cz for Sleep-EDF, C4-A1 for SHHS, AF7-Fpz for the headband) with YASA's pretrained
classifier and reports kappa, per-stage F1, the hypnograms beside the norms of
:mod:`partnd.cohort.realism`, the per-stage spectra of that channel, and the profile's own
differences (R&K stage 3/4 and movement-time epochs, the arousal and hypopnea index by age).
"""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import check
from partnd.cli.errors import OptionNames, run_command
from partnd.cohort.hypnogram import STAGE_LABELS, STAGE_LETTERS
from partnd.cohort.pc18_cohort import COHORT_FILE, plan_record
from partnd.cohort.profiles import PROFILES, make_profile_cohort, plan_profile_cohort
from partnd.cohort.realism import (
    REPORT_OPTIONS,
    HypnogramStatistics,
    add_report_options,
    hypnogram_statistics,
    run_report,
    stage_spectra,
)

__all__ = ["ProfileRealism", "build_parser", "format_profile_realism", "main", "profile_realism"]

_STAGE_CODES = {letter: code for code, letter in enumerate(STAGE_LETTERS)}


@dataclass(frozen=True)
class ProfileRealism:
    """The realism report of one dataset profile.

    Attributes:
        profile: Profile name.
        channel: The store channel YASA staged.
        n_records: Nights staged.
        hours: Length of each night.
        kappa: Cohen's kappa of YASA against the generated hypnograms (scored epochs).
        accuracy: Its accuracy.
        per_stage_f1: F1 by stage label.
        per_record_kappa: Kappa of each night.
        confusion: Rows true W N1 N2 N3 R, columns YASA.
        hypnograms: Statistics of the generated hypnograms (store stages).
        planned: Statistics of many more nights of the profile's population, planned only
            (hypnograms, cheap; :func:`~partnd.cohort.pc18_cohort.plan_record`).
        label_counts: Hypnogram-file label counts over all nights (R&K stages 3/4, movement).
        ages: Age of every night's subject.
        arousals_per_hour: Scored arousals per hour of sleep, per night (SHHS profile).
        spectra: Per-stage spectra of the YASA channel (:func:`stage_spectra`).
    """

    profile: str
    channel: str
    n_records: int
    hours: float
    kappa: float
    accuracy: float
    per_stage_f1: dict[str, float]
    per_record_kappa: dict[str, float]
    confusion: list[list[int]]
    hypnograms: HypnogramStatistics
    planned: HypnogramStatistics
    label_counts: dict[str, int]
    ages: dict[str, int]
    arousals_per_hour: dict[str, float]
    spectra: dict[str, dict[str, float]]


def _stages(text: str) -> np.ndarray:
    return np.array([_STAGE_CODES.get(char, -1) for char in text], dtype=np.int64)


def profile_realism(
    profile_name: str,
    out_dir: str | Path,
    *,
    n_records: int = 3,
    hours: float = 8.0,
    seed: int = 0,
    n_jobs: int = 1,
    n_planned: int = 200,
    overwrite: bool = False,
) -> ProfileRealism:
    """Write, ingest and stage a profile's nights with YASA; see the module doc.

    Args:
        profile_name: ``"sleep_edf"``, ``"nsrr"`` or ``"headband"``.
        out_dir: Working directory (``cohort/`` and ``store.zarr`` go there; reused on reruns).
        n_records: Nights.
        hours: Length of each night.
        seed: Cohort seed.
        n_jobs: Worker processes for writing and ingesting the files.
        n_planned: Further nights of the profile's population whose hypnograms alone are drawn.
        overwrite: Replace a cohort written with other parameters.

    Raises:
        InputError: An unknown profile, bad counts, or a night that did not pair or ingest.
    """
    from partnd.datasets.store import SleepStore
    from partnd.evaluation.classical import yasa_pretrained_stages
    from partnd.evaluation.metrics import classification_metrics
    from partnd.preprocessing.dataset_ingest import ingest_dataset

    check(n_planned >= 1, "n_planned", "a count >= 1", n_planned)
    check(profile_name in PROFILES, "profile", f"one of {sorted(PROFILES)}", profile_name)
    profile = PROFILES[profile_name]
    out = Path(out_dir).expanduser()
    root = make_profile_cohort(
        profile,
        out / "cohort",
        n_records=n_records,
        hours=hours,
        seed=seed,
        n_jobs=n_jobs,
        overwrite=overwrite,
    )
    truth: dict[str, dict[str, Any]] = json.loads((root / COHORT_FILE).read_text())["records"]
    store_path = out / "store.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ingested = ingest_dataset(root, store_path, n_jobs=n_jobs, progress=False)
    paired = {pair.record_id for pair in ingested.pairing.pairs}
    check(
        paired == set(truth) and not ingested.pairing.unpaired and not ingested.failed,
        "profile",
        f"a cohort whose {len(truth)} nights all pair and ingest with partnd ingest DIR",
        ingested.summary(root),
    )
    store = SleepStore(store_path)
    records = list(truth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        staged = yasa_pretrained_stages(store, records, eeg_channel=profile.yasa_channel)
    metrics = classification_metrics(staged.labels, staged.predictions, 5, list(STAGE_LABELS))
    per_record = {
        name: classification_metrics(
            staged.labels[staged.records == name], staged.predictions[staged.records == name], 5
        ).cohen_kappa
        for name in records
    }
    channel = store.channels.index(profile.yasa_channel)
    signals, stages = [], []
    for name in records:
        windows = store.read_windows(name, 0, store.n_windows(name))[:, channel]
        signals.append(windows.reshape(-1))
        stages.append(store.stages(name))
    label_counts: dict[str, int] = {}
    for entry in truth.values():
        for label, count in entry["label_counts"].items():
            label_counts[label] = label_counts.get(label, 0) + count
    arousals = {}
    for name, entry in truth.items():
        asleep = sum(entry["stage_counts"][label] for label in STAGE_LABELS[1:])
        arousals[name] = entry["arousals"] / max(asleep * 30 / 3600, 1e-9)
    return ProfileRealism(
        profile=profile.name,
        channel=profile.yasa_channel,
        n_records=len(records),
        hours=float(hours),
        kappa=metrics.cohen_kappa,
        accuracy=metrics.accuracy,
        per_stage_f1=dict(metrics.per_class_f1),
        per_record_kappa=per_record,
        confusion=metrics.confusion_matrix.tolist(),
        hypnograms=hypnogram_statistics(
            [stages[stages >= 0] for stages in (_stages(e["stages"]) for e in truth.values())]
        ),
        planned=hypnogram_statistics(
            [
                plan_record(record.spec).scored
                for record in plan_profile_cohort(profile, n_planned, hours, seed + 1)
            ]
        ),
        label_counts=label_counts,
        ages={name: int(entry["age"]) for name, entry in truth.items()},
        arousals_per_hour=arousals,
        spectra=stage_spectra(np.concatenate(signals), np.concatenate(stages), store.sfreq),
    )


def format_profile_realism(report: ProfileRealism) -> str:
    """The report as text (markdown tables)."""
    f1 = " ".join(f"{label} {report.per_stage_f1[label]:.2f}" for label in STAGE_LABELS)
    per_record = " ".join(
        f"{name} (age {report.ages[name]}) {kappa:.2f}"
        for name, kappa in report.per_record_kappa.items()
    )
    stats = report.hypnograms
    lines = [
        f"profile {report.profile}: {report.n_records} nights of {report.hours} h",
        f"YASA pretrained ({report.channel}, zero labels): kappa {report.kappa:.3f}, accuracy "
        f"{report.accuracy:.3f}; F1 {f1}",
        f"per-record kappa: {per_record}",
        "confusion (rows true W N1 N2 N3 R, columns YASA): "
        + "; ".join(" ".join(str(v) for v in row) for row in report.confusion),
        "hypnogram labels: " + ", ".join(f"{k} {v}" for k, v in report.label_counts.items()),
        "stage fractions of the sleep period W N1 N2 N3 R: "
        + " ".join(f"{stats.fraction_mean[s]:.3f}±{stats.fraction_sd[s]:.3f}" for s in STAGE_LABELS)
        + f"; REM latency {stats.rem_latency_mean:.0f} ± {stats.rem_latency_sd:.0f} min",
        "outside the norms: " + ("; ".join(stats.violations()) or "none"),
    ]
    planned = report.planned
    lines += [
        f"planned nights ({planned.n_nights}) W N1 N2 N3 R: "
        + " ".join(
            f"{planned.fraction_mean[s]:.3f}±{planned.fraction_sd[s]:.3f}" for s in STAGE_LABELS
        )
        + f"; REM latency {planned.rem_latency_mean:.0f} ± {planned.rem_latency_sd:.0f} min",
        "planned nights outside the norms: " + ("; ".join(planned.violations()) or "none"),
    ]
    if any(report.arousals_per_hour.values()):
        lines.append(
            "arousals per hour of sleep: "
            + " ".join(
                f"{name} (age {report.ages[name]}) {value:.1f}"
                for name, value in report.arousals_per_hour.items()
            )
        )
    lines.append(
        f"| {report.channel} stage | " + " | ".join(next(iter(report.spectra.values()))) + " |"
    )
    for stage, values in report.spectra.items():
        lines.append(
            f"| {stage} | " + " | ".join(f"{value:.3g}" for value in values.values()) + " |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """Command-line parser of ``python -m partnd.cohort.profile_realism``."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.cohort.profile_realism",
        description="Write a dataset profile's nights, ingest them, stage the channel YASA would "
        "use with YASA's pretrained classifier (zero labels) and print kappa, per-stage F1, the "
        "hypnograms beside the norms and the per-stage spectra.",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), required=True, help="profile")
    parser.add_argument("--out", type=Path, required=True, help="working directory")
    parser.add_argument("--records", type=int, default=3, help="nights to generate")
    parser.add_argument("--hours", type=float, default=8.0, help="length of each night")
    parser.add_argument("--seed", type=int, default=0, help="cohort seed")
    parser.add_argument("--n-jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--planned", type=int, default=200, help="further hypnograms drawn for the statistics"
    )
    add_report_options(
        parser,
        overwrite_help="replace a cohort written in --out with other parameters (and an existing "
        "--json)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the report; 0 when it ran, 2 for unusable arguments (one line naming the option)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command(parser.prog, _OPTIONS, lambda: _run(args))


_OPTIONS = OptionNames({"profile_name": "--profile", **REPORT_OPTIONS})


def _run(args: argparse.Namespace) -> int:
    return run_report(args, partial(profile_realism, args.profile), format_profile_realism)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
