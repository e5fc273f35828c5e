"""How real the generated cohort is: YASA's pretrained stager, hypnogram norms and stage spectra.

``python -m partnd.cohort.realism --out DIR`` generates full-length nights (default 6 × 8 h),
preprocesses them as shipped (:func:`partnd.preprocessing.physionet2018.preprocess_physionet2018`:
0.1–30 Hz, 100 Hz, 30 s windows), stages C4-M1 of every labelled record with YASA's pretrained
classifier (zero labels; Vallat & Walker 2021, eLife 10:e70092: median accuracy 87.5 % on 585 real
testing nights) and prints

- Cohen's kappa, accuracy and per-stage F1 of YASA against the generator's hypnograms;
- hypnogram statistics of the generated nights and of many more planned ones (hypnograms only,
  cheap): stage fractions of the sleep period with their between-subject SD, mean bout length per
  stage, REM latency and sleep-period length, next to published norms (:data:`NORMS`);
- per-stage spectra of C4-M1 (standard deviation in µV and relative power in YASA's bands,
  :func:`stage_spectra`) next to the ranges the generator is built to (:data:`SPECTRAL_RANGES`),
  and the medians per stage of YASA's own features (what its classifier sees);
- the seconds it took to generate one 8-h night.

``--cohort DIR`` reports on an existing generated cohort instead (e.g. the demo's 2-h sample
cohort); ``--real-hypnograms FILE`` adds the statistics of YASA's ``sample_data_sri.csv.xz`` (real
hypnograms of 14 adults, Menghini et al. 2021; its stages are W, N1+N2, N3, REM), read at run time.
Needs the ``sleep`` extra (yasa, lightgbm).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import scipy.signal

from partnd._validation import check
from partnd.cli.errors import OptionNames, run_command
from partnd.cli.options import add_switch
from partnd.cohort.hypnogram import STAGE_LABELS, SleepStage, hypnogram_from_string
from partnd.cohort.pc18_cohort import (
    COHORT_FILE,
    MAX_RECORDS,
    check_plan,
    make_pc18_cohort,
    plan_cohort,
    plan_record,
)
from partnd.engine.checkpoint import atomic_write_json

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from partnd.datasets.store import SleepStore

__all__ = [
    "BANDS",
    "NORMS",
    "REPORT_OPTIONS",
    "SPECTRAL_RANGES",
    "HypnogramStatistics",
    "Norm",
    "RealismReport",
    "add_report_options",
    "build_parser",
    "format_report",
    "hypnogram_statistics",
    "main",
    "read_sri_hypnograms",
    "realism_report",
    "run_report",
    "stage_spectra",
]

ReportT = TypeVar("ReportT", bound="DataclassInstance")

BANDS: dict[str, tuple[float, float]] = {
    "sdelta": (0.4, 1.0),
    "fdelta": (1.0, 4.0),
    "theta": (4.0, 8.0),
    "alpha": (8.0, 12.0),
    "sigma": (12.0, 16.0),
    "beta": (16.0, 30.0),
}
"""YASA's bands (Hz); relative power is a band's share of the 0.4–30 Hz power."""


@dataclass(frozen=True)
class Norm:
    """A published range for one statistic.

    Attributes:
        low: Lower end of the range.
        high: Upper end.
        source: Where it comes from.
    """

    low: float
    high: float
    source: str

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies in ``[low, high]``."""
        return bool(self.low <= value <= self.high)


_SLEEP_EDF = "Sleep-EDF cassette, 20 nights (DESIGN.md §5b)"
_SRI = "Menghini et al. 2021, 14 adults (YASA sample_data_sri)"
_CD = "Carskadon & Dement, Principles and Practice of Sleep Medicine"
_OHAYON = "Ohayon et al. 2004, Sleep 27:1255"

NORMS: dict[str, Norm] = {
    "fraction_W": Norm(0.04, 0.20, f"wake after sleep onset: {_SLEEP_EDF} 0.07; {_SRI} 0.10"),
    "fraction_N1": Norm(0.02, 0.12, f"{_CD} 2–5 %; rises 0.5 %/decade (Boulos et al. 2019)"),
    "fraction_N2": Norm(0.42, 0.60, f"{_CD} 45–55 %; {_SLEEP_EDF} 0.47"),
    "fraction_N3": Norm(0.05, 0.25, f"{_CD} 13–23 % young adults, less with age ({_OHAYON})"),
    "fraction_R": Norm(0.14, 0.26, f"{_CD} 20–25 %; {_SLEEP_EDF} 0.19; {_SRI} 0.15"),
    "fraction_sd": Norm(
        0.02, 0.10, f"between-subject SD: {_SLEEP_EDF} 0.05–0.10; {_SRI} 0.05–0.08"
    ),
    "bout_W": Norm(2.5, 8.0, f"mean bout (epochs): {_SLEEP_EDF} 6.7; {_SRI} 4.3"),
    "bout_N1": Norm(1.5, 4.0, f"{_SLEEP_EDF} 3.0"),
    "bout_N2": Norm(7.0, 16.0, f"{_SLEEP_EDF} 10.8; {_SRI} N1+N2 11.7"),
    "bout_N3": Norm(6.0, 16.0, f"{_SLEEP_EDF} 9.2; {_SRI} 12.4"),
    "bout_R": Norm(12.0, 25.0, f"{_SLEEP_EDF} 19.1; {_SRI} 20.2"),
    "rem_latency_mean": Norm(70.0, 110.0, f"minutes: {_SLEEP_EDF} 93; {_SRI} 98; {_CD} 70–100"),
    "rem_latency_sd": Norm(20.0, 60.0, f"minutes: {_SLEEP_EDF} 45; {_SRI} 45"),
}
"""Published ranges for the hypnogram statistics of adult nights (sleep period only)."""

SPECTRAL_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "W": {"std": (8.0, 45.0), "alpha": (0.10, 0.40), "beta": (0.03, 0.20), "sdelta": (0.05, 0.30)},
    "N1": {
        "std": (8.0, 35.0),
        "theta": (0.12, 0.35),
        "alpha": (0.02, 0.15),
        "sdelta": (0.05, 0.30),
    },
    "N2": {
        "std": (10.0, 40.0),
        "sigma": (0.015, 0.08),
        "theta": (0.08, 0.25),
        "beta": (0.01, 0.08),
    },
    "N3": {"std": (20.0, 70.0), "sdelta": (0.35, 0.75), "alpha": (0.0, 0.04), "beta": (0.0, 0.03)},
    "R": {"std": (6.0, 30.0), "theta": (0.12, 0.35), "alpha": (0.04, 0.15), "sdelta": (0.05, 0.30)},
}
"""Ranges of the per-stage medians on C4-M1 (std in µV, relative powers of :data:`BANDS`).

From the AASM scoring manual's stage definitions (W: posterior alpha on eye closure, reaching the
central derivations; N1: alpha replaced by low-amplitude mixed 4–7 Hz activity; N2: spindles
11–16 Hz; N3: ≥ 20 % of 0.5–2 Hz waves above 75 µV peak to peak; REM: low-amplitude mixed
frequency with sawtooth waves and alpha 1–2 Hz slower than in wake) and the real recordings that
install offline: PhysioNet EEGMMIDB S001R02 (eyes-closed wake, C4: alpha 0.23, beta 0.09,
slow delta 0.18 of 0.4–30 Hz power) and openspindlenet's sleep EEG sample (30 s with spindles:
sigma 0.06, theta 0.21, fast delta 0.53, slow delta 0.12, 15 µV standard deviation)."""

_EPOCH_SECONDS = 30


@dataclass(frozen=True)
class HypnogramStatistics:
    """Architecture statistics of a set of nights, over each night's sleep period.

    The sleep period runs from the first to the last epoch that is not wake; fractions and bouts are
    counted inside it, REM latency from its first epoch to the first REM epoch.

    Attributes:
        n_nights: Number of nights (those without sleep are left out).
        fraction_mean: Mean stage fraction of the sleep period, by stage label.
        fraction_sd: Between-night SD of the stage fractions.
        mean_bout: Mean bout length in epochs (all bouts of all nights pooled), by stage label.
        rem_latency_mean: Mean REM latency in minutes (nights with REM).
        rem_latency_sd: Its between-night SD.
        sleep_period_mean: Mean sleep-period length in hours.
        sleep_period_sd: Its SD.
    """

    n_nights: int
    fraction_mean: dict[str, float]
    fraction_sd: dict[str, float]
    mean_bout: dict[str, float]
    rem_latency_mean: float
    rem_latency_sd: float
    sleep_period_mean: float
    sleep_period_sd: float

    def violations(self) -> list[str]:
        """The statistics outside their :data:`NORMS` range, described (empty when all hold)."""
        found = []
        for label in STAGE_LABELS:
            checks = (
                (f"fraction_{label}", self.fraction_mean[label]),
                ("fraction_sd", self.fraction_sd[label]),
                (f"bout_{label}", self.mean_bout[label]),
            )
            for key, value in checks:
                if not NORMS[key].holds(value):
                    found.append(
                        f"{key} {label} {value:.3f} outside {NORMS[key].low}–{NORMS[key].high}"
                    )
        for key in ("rem_latency_mean", "rem_latency_sd"):
            value = getattr(self, key)
            if not NORMS[key].holds(value):
                found.append(f"{key} {value:.1f} outside {NORMS[key].low}–{NORMS[key].high}")
        return found


def _bouts(stages: np.ndarray) -> list[tuple[int, int]]:
    """``(stage, length)`` of every run of equal stages."""
    edges = np.flatnonzero(np.diff(stages)) + 1
    starts = np.concatenate([[0], edges])
    stops = np.concatenate([edges, [len(stages)]])
    return [(int(stages[a]), int(b - a)) for a, b in zip(starts, stops, strict=True)]


def hypnogram_statistics(hypnograms: Sequence[np.ndarray]) -> HypnogramStatistics:
    """Stage fractions, bouts, REM latency and sleep-period length of a set of nights.

    Args:
        hypnograms: ``[n_epochs]`` :class:`SleepStage` codes per night (30-s epochs).

    Returns:
        The :class:`HypnogramStatistics` (NaN where no night has the quantity).
    """
    fractions, latencies, periods = [], [], []
    bouts: dict[int, list[int]] = {int(stage): [] for stage in SleepStage}
    for night in hypnograms:
        stages = np.asarray(night)
        asleep = np.flatnonzero(np.isin(stages, list(SleepStage)) & (stages != SleepStage.WAKE))
        if len(asleep) == 0:
            continue
        period = stages[asleep[0] : asleep[-1] + 1]
        fractions.append([float(np.mean(period == stage)) for stage in SleepStage])
        periods.append(len(period) * _EPOCH_SECONDS / 3600.0)
        rem = np.flatnonzero(period == SleepStage.REM)
        if len(rem):
            latencies.append(rem[0] * _EPOCH_SECONDS / 60.0)
        for stage, length in _bouts(period):
            if stage in bouts:
                bouts[stage].append(length)
    check(len(fractions) > 0, "hypnograms", "at least one night with sleep", "none")
    table = np.array(fractions)
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return HypnogramStatistics(
        n_nights=len(fractions),
        fraction_mean=dict(zip(STAGE_LABELS, table.mean(axis=0).tolist(), strict=True)),
        fraction_sd=dict(zip(STAGE_LABELS, table.std(axis=0).tolist(), strict=True)),
        mean_bout={
            label: float(np.mean(bouts[stage])) if bouts[stage] else float("nan")
            for stage, label in enumerate(STAGE_LABELS)
        },
        rem_latency_mean=float(np.mean(lat)),
        rem_latency_sd=float(np.std(lat)),
        sleep_period_mean=float(np.mean(periods)),
        sleep_period_sd=float(np.std(periods)),
    )


def read_sri_hypnograms(path: str | Path) -> list[np.ndarray]:
    """Read the real hypnograms of YASA's ``tests/data/sample_data_sri.csv.xz`` (its sdist).

    The file (Menghini et al. 2021) has columns ``subject, epoch, reference, device`` with stages
    0 W, 1 N1+N2, 2 N3, 3 REM; the ``reference`` (polysomnography) column is read, light sleep
    coded as N2 (so N1 statistics are those of N1+N2 together and N1 itself reads 0).

    Args:
        path: The ``.csv`` or ``.csv.xz`` file.

    Returns:
        One ``int8`` :class:`SleepStage` array per subject, in subject order.
    """
    import pandas as pd

    table = pd.read_csv(path)
    missing = {"subject", "epoch", "reference"} - set(table.columns)
    check(not missing, "real_hypnograms", "columns subject, epoch, reference", sorted(missing))
    codes = np.array([SleepStage.WAKE, SleepStage.N2, SleepStage.N3, SleepStage.REM], np.int8)
    return [
        codes[group.sort_values("epoch")["reference"].to_numpy(dtype=np.int64)]
        for _, group in table.groupby("subject", sort=True)
    ]


def stage_spectra(
    signal: np.ndarray, stages: np.ndarray, sfreq: float
) -> dict[str, dict[str, float]]:
    """Per-stage medians of the epochs' standard deviation and relative band powers.

    Welch's method per 30-s epoch (4-s Hann segments, half overlap) after removing the epoch's mean;
    relative power is a band's share of the 0.4–30 Hz power (:data:`BANDS`).

    Args:
        signal: ``[n_epochs * 30 * sfreq]`` one EEG channel in µV, epochs back to back.
        stages: ``[n_epochs]`` stage codes (negative: not scored, left out).
        sfreq: Sampling frequency in Hz (at least 60).

    Returns:
        ``{stage label: {"std": µV, "n": epochs, band: relative power}}`` for stages present.
    """
    check(sfreq >= 60.0, "sfreq", "at least 60 Hz (bands reach 30 Hz)", sfreq)
    size = round(_EPOCH_SECONDS * sfreq)
    stages = np.asarray(stages)
    check(
        signal.ndim == 1 and len(signal) == len(stages) * size,
        "signal",
        f"{len(stages)} epochs of {size} samples back to back",
        signal.shape,
    )
    epochs = signal.reshape(len(stages), size).astype(np.float64)
    epochs = epochs - epochs.mean(axis=1, keepdims=True)
    freqs, power = scipy.signal.welch(epochs, fs=sfreq, nperseg=int(4 * sfreq), axis=-1)
    total = power[:, (freqs >= 0.4) & (freqs < 30.0)].sum(axis=1)
    summary: dict[str, dict[str, float]] = {}
    for stage, label in enumerate(STAGE_LABELS):
        rows = stages == stage
        if not rows.any():
            continue
        values = {"n": float(rows.sum()), "std": float(np.median(epochs[rows].std(axis=1)))}
        for band, (low, high) in BANDS.items():
            share = power[rows][:, (freqs >= low) & (freqs < high)].sum(axis=1) / total[rows]
            values[band] = float(np.median(share))
        summary[label] = values
    return summary


@dataclass
class RealismReport:
    """What :func:`realism_report` measured.

    Attributes:
        cohort: The cohort directory.
        n_records: Labelled records staged.
        hours: Record length in hours.
        generation_seconds_per_night: Wall-clock seconds to generate one 8-h night (None when an
            existing cohort was used or reused).
        n_jobs: Worker processes used for generation and preprocessing.
        kappa: YASA's Cohen's kappa against the generator's hypnograms.
        accuracy: YASA's accuracy.
        per_stage_f1: YASA's F1 by stage label.
        confusion: ``[5, 5]`` confusion matrix (rows true, columns YASA).
        per_record_kappa: Kappa of each record.
        generated: Hypnogram statistics of the staged records.
        planned: Hypnogram statistics of many planned records of the same length (hypnograms
            only), or None (``n_planned=0``).
        real: Statistics of the real hypnograms given, or None.
        spectra: :func:`stage_spectra` of C4-M1 of the staged records.
        yasa_features: Median per stage of some of YASA's C4-M1 features.
    """

    cohort: str
    n_records: int
    hours: float
    generation_seconds_per_night: float | None
    n_jobs: int
    kappa: float
    accuracy: float
    per_stage_f1: dict[str, float]
    confusion: list[list[int]]
    per_record_kappa: dict[str, float]
    generated: HypnogramStatistics
    planned: HypnogramStatistics | None
    real: HypnogramStatistics | None
    spectra: dict[str, dict[str, float]]
    yasa_features: dict[str, dict[str, float]]


_FEATURES = ("std", "sdelta", "fdelta", "theta", "alpha", "sigma", "beta", "hmob", "nzc", "perm")


def _yasa_feature_medians(store: SleepStore, records: Sequence[str]) -> dict[str, dict[str, float]]:
    from partnd.evaluation.classical import sleep_features

    table = sleep_features(store, records, context=False, channels=["C4-M1"])
    columns = [f"C4-M1_eeg_{name}" for name in _FEATURES]
    index = [table.columns.index(name) for name in columns]
    return {
        label: {
            name: float(np.nanmedian(table.features[table.labels == stage][:, col]))
            for name, col in zip(_FEATURES, index, strict=True)
        }
        for stage, label in enumerate(STAGE_LABELS)
        if np.any(table.labels == stage)
    }


def realism_report(
    out_dir: str | Path,
    *,
    n_records: int | None = None,
    hours: float | None = None,
    seed: int = 0,
    n_jobs: int = 1,
    cohort_dir: str | Path | None = None,
    n_planned: int = 200,
    real_hypnograms: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> RealismReport:
    """Generate nights, preprocess them as shipped, stage them with YASA and measure them.

    Args:
        out_dir: Working directory: ``cohort/`` (unless ``cohort_dir``) and ``store/`` go there.
        n_records: Records (subjects, all labelled) to generate (default 6; ``None`` with
            ``cohort_dir``, whose records are reported).
        hours: Length of each record (default 8; ``None`` with ``cohort_dir``).
        seed: Cohort seed (the planned hypnograms are drawn with ``seed + 1``).
        n_jobs: Worker processes for generation and preprocessing.
        cohort_dir: An existing generated cohort to report on instead of generating one.
        n_planned: Further records whose hypnograms alone are drawn for the hypnogram statistics
            (0: none, and the generated nights are the ones held against the norms).
        real_hypnograms: YASA's ``sample_data_sri.csv.xz`` to report beside the norms, or None.
        overwrite: Replace what an earlier call left in ``out_dir``.
        progress: Show progress bars.

    Returns:
        The :class:`RealismReport`.
    """
    from partnd.datasets.store import SleepStore
    from partnd.evaluation.classical import yasa_pretrained_stages
    from partnd.evaluation.metrics import classification_metrics
    from partnd.preprocessing.physionet2018 import preprocess_physionet2018

    check(
        isinstance(n_planned, int) and 0 <= n_planned <= MAX_RECORDS,
        "n_planned",
        f"a count in [0, {MAX_RECORDS}]",
        n_planned,
    )
    check(isinstance(seed, int) and seed >= 0, "seed", "an int >= 0", seed)
    if cohort_dir is not None:  # the cohort's own records and length are reported
        for name, value in (("n_records", n_records), ("hours", hours)):
            check(value is None, name, "None with cohort_dir (its records are reported)", value)
    else:
        n_records = 6 if n_records is None else n_records
        hours = 8.0 if hours is None else hours
        check_plan(n_records, hours, seed)
    real = None  # read first: a wrong path must not wait for the staging
    if real_hypnograms is not None:
        check(
            Path(real_hypnograms).is_file(),
            "real_hypnograms",
            "a file (YASA's sample_data_sri.csv.xz)",
            str(real_hypnograms),
        )
        real = hypnogram_statistics(read_sri_hypnograms(real_hypnograms))
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    seconds_per_night: float | None = None
    if cohort_dir is None:
        assert n_records is not None and hours is not None
        manifest_path = out / "cohort" / COHORT_FILE
        before = manifest_path.stat().st_mtime_ns if manifest_path.is_file() else None
        start = time.perf_counter()
        cohort = make_pc18_cohort(
            out / "cohort",
            n_records=n_records,
            hours=hours,
            seed=seed,
            test_fraction=0.0,
            n_jobs=n_jobs,
            progress=progress,
            overwrite=overwrite,
        )
        if manifest_path.stat().st_mtime_ns != before:  # generated now, not reused
            seconds_per_night = (time.perf_counter() - start) * 8.0 / (n_records * hours)
        root = cohort.root
    else:
        root = Path(cohort_dir).expanduser()
        check(
            (root / COHORT_FILE).is_file(),
            "cohort_dir",
            f"a generated cohort ({COHORT_FILE})",
            root,
        )
    manifest = json.loads((root / COHORT_FILE).read_text())
    parameters = manifest["parameters"]
    preprocess_physionet2018(
        root, out / "store", n_jobs=n_jobs, progress=progress, overwrite=overwrite
    )
    store = SleepStore(out / "store")
    truth = manifest["records"]
    records = [name for name in store.record_ids(labelled_only=True) if name in truth]
    check(len(records) > 0, "cohort", "labelled records that preprocess", "none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        staged = yasa_pretrained_stages(store, records)
        features = _yasa_feature_medians(store, records)
    metrics = classification_metrics(staged.labels, staged.predictions, 5, list(STAGE_LABELS))
    per_record = {
        name: classification_metrics(
            staged.labels[staged.records == name], staged.predictions[staged.records == name], 5
        ).cohen_kappa
        for name in records
    }
    channel = store.channels.index("C4-M1")
    signals, stages = [], []
    for name in records:
        windows = store.read_windows(name, 0, store.n_windows(name))[:, channel]
        signals.append(windows.reshape(-1))
        stages.append(store.stages(name))
    spectra = stage_spectra(np.concatenate(signals), np.concatenate(stages), store.sfreq)
    generated = hypnogram_statistics([hypnogram_from_string(truth[r]["hypnogram"]) for r in truth])
    planned = None
    if n_planned > 0:
        specs = plan_cohort(n_planned, float(parameters["hours"]), seed + 1, 0.0)
        planned = hypnogram_statistics([plan_record(spec).scored for spec in specs])
    return RealismReport(
        cohort=str(root),
        n_records=len(records),
        hours=float(parameters["hours"]),
        generation_seconds_per_night=seconds_per_night,
        n_jobs=n_jobs,
        kappa=metrics.cohen_kappa,
        accuracy=metrics.accuracy,
        per_stage_f1=dict(metrics.per_class_f1),
        confusion=metrics.confusion_matrix.tolist(),
        per_record_kappa=per_record,
        generated=generated,
        planned=planned,
        real=real,
        spectra=spectra,
        yasa_features=features,
    )


def _statistics_rows(name: str, stats: HypnogramStatistics) -> list[str]:
    fractions = " ".join(
        f"{stats.fraction_mean[s]:.3f}±{stats.fraction_sd[s]:.3f}" for s in STAGE_LABELS
    )
    bouts = " ".join(f"{stats.mean_bout[s]:.1f}" for s in STAGE_LABELS)
    return [
        f"| {name} ({stats.n_nights} nights) | {fractions} | {bouts} | "
        f"{stats.rem_latency_mean:.0f} ± {stats.rem_latency_sd:.0f} | "
        f"{stats.sleep_period_mean:.2f} ± {stats.sleep_period_sd:.2f} |"
    ]


def format_report(report: RealismReport) -> str:
    """The report as Markdown tables (what ``python -m partnd.cohort.realism`` prints)."""
    lines = [f"cohort {report.cohort}: {report.n_records} labelled records of {report.hours} h"]
    if report.generation_seconds_per_night is not None:
        lines.append(
            f"generation: {report.generation_seconds_per_night:.1f} s per 8-h night "
            f"(wall clock, n_jobs={report.n_jobs})"
        )
    f1 = " ".join(f"{s} {report.per_stage_f1[s]:.2f}" for s in STAGE_LABELS)
    lines += [
        "",
        f"YASA pretrained (C4-M1, zero labels): kappa {report.kappa:.3f}, accuracy "
        f"{report.accuracy:.3f}; F1 {f1}",
        "per-record kappa: "
        + " ".join(f"{name} {value:.2f}" for name, value in report.per_record_kappa.items()),
        "confusion (rows true W N1 N2 N3 R, columns YASA): "
        + "; ".join(" ".join(str(v) for v in row) for row in report.confusion),
        "",
        "| hypnograms (sleep period) | fraction W N1 N2 N3 R (mean±SD) | mean bout W N1 N2 N3 R "
        "(epochs) | REM latency (min) | sleep period (h) |",
        "|---|---|---|---|---|",
    ]
    lines += _statistics_rows("generated", report.generated)
    if report.planned is not None:
        lines += _statistics_rows("planned, same length", report.planned)
    if report.real is not None:
        lines += _statistics_rows("real: Menghini 2021 (N2 = N1+N2)", report.real)
    lines += ["", "| norm | range | source |", "|---|---|---|"]
    lines += [f"| {key} | {n.low}–{n.high} | {n.source} |" for key, n in NORMS.items()]
    held, which = (report.generated, "generated")
    if report.planned is not None:
        held, which = (report.planned, "planned")
    violations = held.violations()
    lines.append("")
    lines.append(
        f"{which} hypnograms outside the norms: "
        + ("; ".join(violations) if violations else "none")
    )
    lines += [
        "",
        "| C4-M1 stage | epochs | std µV | " + " | ".join(BANDS) + " |",
        "|---|---|---|" + "---|" * len(BANDS),
    ]
    for label, values in report.spectra.items():
        cells = " | ".join(_with_range(label, band, values[band]) for band in BANDS)
        lines.append(
            f"| {label} | {values['n']:.0f} | {_with_range(label, 'std', values['std'], 1)} | "
            f"{cells} |"
        )
    lines += [
        "",
        "YASA's C4-M1 features, median per stage:",
        "| stage | " + " | ".join(_FEATURES) + " |",
        "|---|" + "---|" * len(_FEATURES),
    ]
    for label, values in report.yasa_features.items():
        lines.append(f"| {label} | " + " | ".join(f"{values[n]:.3g}" for n in _FEATURES) + " |")
    return "\n".join(lines)


def _with_range(stage: str, name: str, value: float, digits: int = 3) -> str:
    bounds = SPECTRAL_RANGES.get(stage, {}).get(name)
    if bounds is None:
        return f"{value:.{digits}f}"
    flag = "" if bounds[0] <= value <= bounds[1] else " (out)"
    return f"{value:.{digits}f} [{bounds[0]:g}–{bounds[1]:g}]{flag}"


def build_parser() -> argparse.ArgumentParser:
    """Command-line parser of ``python -m partnd.cohort.realism``."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.cohort.realism",
        description="Generate full-length nights, preprocess them as shipped, stage C4-M1 with "
        "YASA's pretrained classifier (zero labels) and print kappa, per-stage F1, hypnogram "
        "statistics beside published norms and per-stage spectra.",
    )
    parser.add_argument("--out", type=Path, required=True, help="working directory")
    parser.add_argument(
        "--records", type=int, default=None, help="records (nights) to generate (default 6)"
    )
    parser.add_argument(
        "--hours", type=float, default=None, help="length of each record (default 8)"
    )
    parser.add_argument("--seed", type=int, default=0, help="cohort seed")
    parser.add_argument("--n-jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--cohort", type=Path, default=None, help="report on this generated cohort instead"
    )
    parser.add_argument(
        "--planned", type=int, default=200, help="further hypnograms drawn for the statistics"
    )
    parser.add_argument(
        "--real-hypnograms",
        type=Path,
        default=None,
        help="YASA's sample_data_sri.csv.xz (from its sdist) to report beside the norms",
    )
    add_report_options(
        parser,
        overwrite_help="replace what an earlier run left in --out (and an existing --json file)",
    )
    return parser


def add_report_options(parser: argparse.ArgumentParser, *, overwrite_help: str) -> None:
    """Add a realism report's ``--json`` and ``--overwrite`` (``overwrite_help``: its help) to
    ``parser``; :func:`run_report` reads them."""
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the report as JSON to this new file (an existing one needs --overwrite)",
    )
    add_switch(parser, "--overwrite", default=False, help=overwrite_help)


def run_report(
    args: argparse.Namespace,
    report: Callable[..., ReportT],
    format_report: Callable[[ReportT], str],
    **arguments: Any,
) -> int:
    """Make ``report`` from the options both reports give (:data:`REPORT_OPTIONS`), print it as
    ``format_report`` writes it, and write it as JSON to ``args.json`` when given (atomically).

    An existing ``args.json`` without ``args.overwrite`` is refused before the report is made
    (hours of work), not replaced after it.

    Args:
        args: The parsed options (:func:`add_report_options` and those of :data:`REPORT_OPTIONS`).
        report: Called as ``report(args.out, n_records=args.records, hours=args.hours,
            seed=args.seed, n_jobs=args.n_jobs, n_planned=args.planned,
            overwrite=args.overwrite, **arguments)``.
        format_report: The report as text.
        arguments: The report's own further arguments.

    Returns:
        0.
    """
    if args.json is not None:
        check(
            args.overwrite or not args.json.exists(),
            "json",
            "a new file (pass overwrite=True to replace it)",
            f"the existing {args.json}",
        )
    made = report(
        args.out,
        n_records=args.records,
        hours=args.hours,
        seed=args.seed,
        n_jobs=args.n_jobs,
        n_planned=args.planned,
        overwrite=args.overwrite,
        **arguments,
    )
    print(format_report(made))
    if args.json is not None:
        atomic_write_json(asdict(made), args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the realism report; 0 when it ran, 2 for unusable arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command(parser.prog, _OPTIONS, lambda: _run(args))


REPORT_OPTIONS = {
    "out_dir": "--out",
    "n_records": "--records",
    "hours": "--hours",
    "seed": "--seed",
    "n_jobs": "--n-jobs",
    "n_planned": "--planned",
    "json": "--json",
    "overwrite": "--overwrite",
}
"""The options both realism reports give their arguments (for :class:`OptionNames`)."""

_OPTIONS = OptionNames(
    {**REPORT_OPTIONS, "cohort_dir": "--cohort", "real_hypnograms": "--real-hypnograms"}
)


def _run(args: argparse.Namespace) -> int:
    return run_report(
        args,
        realism_report,
        format_report,
        cohort_dir=args.cohort,
        real_hypnograms=args.real_hypnograms,
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
