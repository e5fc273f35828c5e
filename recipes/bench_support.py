"""Helpers shared by the benchmarks (``benchmarks/bench_*.py``) and pinned by their tests.

One module, so that no benchmark imports another and no test loads a benchmark file:

* **timing**: :data:`CLOCKS`, :func:`interleaved_samples` / :func:`interleaved_times` (step
  functions timed in turns, robust to load drift), :func:`ratio_spread` and
  :func:`mean_std` for tables (the optimiser step they time, ``training_step``, stays in
  ``benchmarks/bench_objective_step.py``: no module of ``partnd.recipes`` runs its own
  optimiser step);
* **data**: :func:`build_synthetic_store`, a store of band-limited noise with EEG-like decode
  cost;
* **window front-ends**: :data:`FRONTEND_CANDIDATES` and the :func:`patch_spectra` reference;
* **feature content**: what frozen features hold of the stage and of the time of night
  (:func:`leave_one_night_out`, :func:`hour_r2`, :func:`effective_dimensions`,
  :func:`night_share`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import signal as scipy_signal
from sklearn.linear_model import RidgeCV
from sklearn.metrics import r2_score
from sklearn.preprocessing import StandardScaler
from tqdm.auto import tqdm

from partnd.datasets.store import STAGE_NAMES, SleepStore, create_store, write_record
from partnd.engine.compilation import COMPILE_MODES
from partnd.evaluation.probes import logistic_regression_probe
from partnd.recipes.sleep_study import STUDY_FRONTENDS

__all__ = [
    "CLOCKS",
    "FIXED_COMPILE_MODES",
    "FRONTEND_CANDIDATES",
    "PROBE_CS",
    "RIDGE_ALPHAS",
    "SYNTHETIC_CHANNELS",
    "SYNTHETIC_SFREQ",
    "SYNTHETIC_WINDOW_SECONDS",
    "add_compile_option",
    "build_synthetic_store",
    "device_description",
    "effective_dimensions",
    "hour_r2",
    "interleaved_samples",
    "interleaved_times",
    "leave_one_night_out",
    "mean_std",
    "night_share",
    "patch_spectra",
    "ratio_spread",
    "synchronize",
]

# --- timing ---------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a GPU's kernels); nothing on a CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


FIXED_COMPILE_MODES: tuple[str, ...] = tuple(mode for mode in COMPILE_MODES if mode != "auto")
"""The compile modes a benchmark times: ``TrainConfig.compile``'s less ``auto`` (a benchmark
names the mode it measures)."""


def add_compile_option(
    parser: argparse.ArgumentParser,
    help: str,
    default: str = "off",
    modes: Sequence[str] = FIXED_COMPILE_MODES,
) -> None:
    """Add ``--compile``, one of ``modes`` (default :data:`FIXED_COMPILE_MODES`; a benchmark
    that times what a run would pick passes every mode, ``auto`` included), to ``parser``."""
    parser.add_argument("--compile", choices=list(modes), default=default, help=help)


def device_description(device: torch.device) -> str:
    """What a benchmark ran on, for its report: the GPU's name, or the CPU's threads and cores."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} threads, {os.cpu_count()} cores"


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""``wall``: elapsed time; ``cpu``: this process's CPU time (all its threads), which other jobs on
a shared machine barely change: use it with one thread (``--threads 1``) when the machine is
loaded (with several threads, threads that spin while they wait would count)."""


def interleaved_samples(
    steps: dict[str, Callable[[], Any]],
    repeats: int,
    warmup: int,
    device: torch.device,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Seconds of every call of every step function, timed in turns (robust to load drift)."""
    now = CLOCKS[clock]
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            synchronize(device)
            start = now()
            step()
            synchronize(device)
            times[name].append(now() - start)
    return times


def interleaved_times(
    steps: dict[str, Callable[[], Any]],
    repeats: int,
    warmup: int,
    device: torch.device,
    clock: str = "wall",
) -> dict[str, float]:
    """Median seconds per call of every step function, timed in turns (robust to load drift)."""
    samples = interleaved_samples(steps, repeats, warmup, device, clock)
    return {name: statistics.median(values) for name, values in samples.items()}


def ratio_spread(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    """Lowest and highest ratio of the calls timed in the same turn."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return min(ratios), max(ratios)


def mean_std(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> str:
    """``"mean ± sd"`` of ``values`` times ``scale`` (sample standard deviation, 0 for one
    value; ``"—"`` for none), with ``digits`` decimals."""
    if not values:
        return "—"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.fmean(values):.{digits}f} ± {scale * spread:.{digits}f}"


# --- data -----------------------------------------------------------------------------------


#: The synthetic store's EEG channels, sampling rate and window length.
SYNTHETIC_CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
SYNTHETIC_SFREQ = 100.0
SYNTHETIC_WINDOW_SECONDS = 30.0


def build_synthetic_store(
    path: Path, n_records: int, n_windows: int, *, seed: int = 0, progress: bool = True
) -> SleepStore:
    """Write a store of EEG-like signals: white noise band-passed 0.3–30 Hz, about 20 µV RMS.

    Band-limited noise compresses like filtered EEG does (much worse than zeros, a little better
    than white noise), so decode times are representative.
    """
    create_store(
        path,
        sfreq=SYNTHETIC_SFREQ,
        channels=SYNTHETIC_CHANNELS,
        window_seconds=SYNTHETIC_WINDOW_SECONDS,
        stage_names=STAGE_NAMES,
        metadata={"filter": "synthetic band-passed noise", "source": "bench_loader"},
    )
    n_times = int(SYNTHETIC_SFREQ * SYNTHETIC_WINDOW_SECONDS)
    sos = scipy_signal.butter(4, [0.3, 30.0], btype="bandpass", fs=SYNTHETIC_SFREQ, output="sos")
    rng = np.random.default_rng(seed)
    for record in tqdm(range(n_records), desc="synthetic store", disable=not progress):
        night = rng.normal(size=(len(SYNTHETIC_CHANNELS), n_windows * n_times))
        night = scipy_signal.sosfilt(sos, night, axis=-1)
        night *= 20.0 / night.std()
        windows = night.reshape(len(SYNTHETIC_CHANNELS), n_windows, n_times).transpose(1, 0, 2)
        write_record(
            path,
            f"rec{record:04d}",
            windows.astype(np.float32),
            rng.integers(0, len(STAGE_NAMES), size=n_windows),
            np.arange(n_windows) * SYNTHETIC_WINDOW_SECONDS,
            attrs={"subject_id": f"subj{record:04d}", "split": "training"},
        )
    return SleepStore(path)


# --- window front-ends ----------------------------------------------------------------------

_SPECTRAL = STUDY_FRONTENDS["spectral"]


def _spectral_with(**options: Any) -> dict[str, Any]:
    """The study's spectral front-end with further ``frontend_options``."""
    return {**_SPECTRAL, "frontend_options": {**_SPECTRAL["frontend_options"], **options}}


#: The window front-ends bench_window_frontend and bench_frontend_step compare: name ->
#: ``encoder`` (encoder overrides on top of the demo's 128-wide ViT) and other FinetuneConfig
#: fields of the demo's window arm. The spectral front-ends keep 0-30 Hz (the store's band-pass:
#: 31 bins of 1 s patches).
FRONTEND_CANDIDATES: dict[str, dict[str, Any]] = {
    "linear": {},
    "spectral": {"encoder": _SPECTRAL},
    "spectral_all": {"encoder": {"frontend": "spectral"}},
    "spectral_raw": {"encoder": _spectral_with(raw=True)},
    "spectral_mlp": {"encoder": _spectral_with(hidden=256)},
    "spectral_std": {"encoder": STUDY_FRONTENDS["spectral_std"]},
    "spectral_std_raw": {"encoder": STUDY_FRONTENDS["spectral_std_raw"]},
    "spectral_avg": {"encoder": _SPECTRAL, "global_pool": "avg"},
    "spectral_2s": {"encoder": _SPECTRAL, "patch_size": 200},
    "conv": {"encoder": STUDY_FRONTENDS["conv"]},
    "linear_2s": {"patch_size": 200},
}


def patch_spectra(windows: torch.Tensor, patch_size: int = 100, bins: int = 31) -> np.ndarray:
    """Per-window summary of the log-power spectra of its patches.

    Args:
        windows: ``[N, C, T]`` windows (``T`` a multiple of ``patch_size``).
        patch_size: Samples per patch (1 s at 100 Hz).
        bins: Lowest rFFT bins kept (31: 0-30 Hz of 1 s patches).

    Returns:
        ``[N, 2 * C * bins]``: the mean over the window's patches of every channel's log-power
        bin, then their standard deviation.
    """
    n, channels, length = windows.shape
    patches = windows.float().reshape(n, channels, length // patch_size, patch_size)
    log_power = torch.log(torch.fft.rfft(patches, dim=-1).abs().pow(2)[..., :bins] + 1e-6)
    summary = torch.cat([log_power.mean(2), log_power.std(2)], dim=1)
    return summary.reshape(n, -1).numpy()


# --- feature content ------------------------------------------------------------------------

RIDGE_ALPHAS = np.logspace(-2, 4, 13)
PROBE_CS = (1e-3, 1e-2, 1e-1, 1.0)
"""The probe's candidate C: the study's without 10 and 100 (thousands of windows fit slowly)."""


def hour_r2(design: np.ndarray, hours: np.ndarray, nights: np.ndarray) -> float:
    """R² of the hour of the night predicted from ``design: [N, F]`` by a ridge regression on
    its standardised columns (alpha chosen by cross-validation), each night's windows predicted
    by the regression fitted on the other nights, over the pooled predictions.

    Args:
        design: [N, F] features (or the stage one-hot: what the stage alone tells of the hour).
        hours: [N] hour of the night of each window (its start).
        nights: [N] night id of each window; at least two distinct.
    """
    predicted = np.zeros_like(hours)
    for night in np.unique(nights):
        test, train = nights == night, nights != night
        scaler = StandardScaler().fit(design[train])
        ridge = RidgeCV(alphas=RIDGE_ALPHAS).fit(scaler.transform(design[train]), hours[train])
        predicted[test] = ridge.predict(scaler.transform(design[test]))
    return float(r2_score(hours, predicted))


def leave_one_night_out(
    features: np.ndarray,
    stages: np.ndarray,
    hours: np.ndarray,
    nights: np.ndarray,
    seed: int,
    per_stage: int = 20,
    draws: int = 5,
) -> dict[str, float]:
    """Stage κ and hour R² of ``features: [N, F]``, each night predicted by models fitted on the
    others; and the stage κ of a probe fitted on only ``per_stage`` windows of each stage of the
    other nights (the study's ``w20`` budget).

    Args:
        features: [N, F] frozen features of the windows.
        stages: [N] stage codes in ``[0, 5)``.
        hours: [N] hour of the night of each window (its start).
        nights: [N] night id of each window; at least two distinct.
        seed: Seed of the probe's cross-validation split and of the drawn windows.
        per_stage: Labelled windows per stage of the scarce probe (all of a rarer stage).
        draws: Draws of those windows per held-out night.

    Returns:
        ``stage_kappa`` and ``stage_kappa_scarce`` (means over folds and draws) and ``hour_r2``
        (:func:`hour_r2`).
    """
    kappas: list[float] = []
    scarce_kappas: list[float] = []
    for night in np.unique(nights):
        test, train = nights == night, nights != night

        def kappa_of_probe(fitted: np.ndarray, test: np.ndarray = test) -> float:
            """κ on ``test`` of the probe fitted on the windows ``fitted`` (mask or indices)."""
            probe = logistic_regression_probe(
                features[fitted],
                stages[fitted],
                features[test],
                stages[test],
                num_classes=5,
                inverse_regularisations=PROBE_CS,
                seed=seed,
            )
            return probe.report.cohen_kappa

        kappas.append(kappa_of_probe(train))
        rng = np.random.default_rng(seed)
        for _ in range(draws):
            chosen = [
                rng.permutation(np.flatnonzero(train & (stages == stage)))[:per_stage]
                for stage in range(5)
            ]
            scarce_kappas.append(kappa_of_probe(np.concatenate(chosen)))
    return {
        "stage_kappa": float(np.mean(kappas)),
        "stage_kappa_scarce": float(np.mean(scarce_kappas)),
        "hour_r2": hour_r2(features, hours, nights),
    }


def effective_dimensions(features: np.ndarray) -> float:
    """Participation ratio ``(Σλ)² / Σλ²`` of the eigenvalues λ of the standardised features'
    covariance: about F for F independent features, 1 when one direction holds all variance.

    Args:
        features: [N, F] features.
    """
    standardised = StandardScaler().fit_transform(features)
    eigenvalues = np.clip(np.linalg.eigvalsh(np.cov(standardised, rowvar=False)), 0.0, None)
    return float(eigenvalues.sum() ** 2 / (eigenvalues**2).sum())


def night_share(features: np.ndarray, stages: np.ndarray, nights: np.ndarray) -> float:
    """Share of the standardised features' within-stage variance that is between nights: 0 when
    every night's windows of a stage look alike on average, 1 when a stage's windows differ only
    by their night (what a probe trained on a few nights' windows cannot generalise over).

    Args:
        features: [N, F] features.
        stages: [N] stage codes.
        nights: [N] night ids.
    """
    residual = StandardScaler().fit_transform(features)
    between = np.zeros(residual.shape[1])
    for stage in np.unique(stages):
        mine = stages == stage
        residual[mine] -= residual[mine].mean(axis=0)
        for night in np.unique(nights[mine]):
            cell = mine & (nights == night)
            between += cell.sum() * residual[cell].mean(axis=0) ** 2
    return float(between.sum() / (residual**2).sum())
