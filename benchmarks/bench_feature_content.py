"""What frozen window features encode: the sleep stage, or the time of night.

A pretext that orders the windows of a night can be solved from anything that changes across the
night, and not all of that is the stage: the sample cohort's slow waves decay from the first
cycle to the last (homeostatic decay), and so do real ones. This script asks how much of each
frozen window encoder's features is stage and how much is the clock.

For the encoders of a sample-efficiency study (``--methods``: a scratch method gives a random
encoder of the study's shape, seeded; a pretrained method gives its encoder on every pool of the
study, or its single pretraining when it has no pools), it encodes the labelled windows of full
nights that no encoder saw (``--store``, e.g. a cohort generated with another seed, all its
records or ``--records``; default the pools' held-out nights, whose PC18 test records carry no
labels) with the study's normalisation, and reports leave-one-night-out:

- **stage κ**: a logistic regression on the standardised features (``[CLS]`` and mean patch
  token, as the study's probe; C chosen by cross-validation on the training nights);
- **hour R²**: a ridge regression of the window's hour of the night on the same features
  (alpha chosen by cross-validation on the training nights), pooled over the held-out folds;
- **hour R² of the stage alone** (printed once): the same regression on the stage one-hot, the
  part of the clock a perfect stager would know. Features whose hour R² is far above it encode
  time of night beyond the stage;
- **stage κ with 20 windows per stage** (``--per-stage``): the probe fitted on that many
  windows of each stage of the training nights (5 draws), the study's scarcest label budget;
- **effective dimensions**: the participation ratio of the standardised features' covariance
  spectrum, how many directions share their variance;
- **night share**: how much of the features' within-stage variance is between nights.

Usage (the options after ``--`` are the study's, as given to ``sample_efficiency``)::

    partnd cohort --out runs/fresh8 --records 6 --hours 8 --seed 5
    partnd preprocess --src runs/fresh8 --out runs/fresh8.zarr
    python benchmarks/bench_feature_content.py --store runs/fresh8.zarr -- \\
        --out runs/axes_std --pool-src runs/pool_nights --pool-store runs/pool_store.zarr \\
        --pool-segment-windows 480 --pools 16 48 320 --held-out-subjects 2 --budgets 1 \\
        --seeds 0 1 2 3 4 5 6 7 8 --pretrain-steps 800 --frontend spectral_std
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.evaluation.probes import extract_features
from partnd.recipes.bench_support import (
    effective_dimensions,
    hour_r2,
    leave_one_night_out,
    night_share,
)
from partnd.recipes.sample_efficiency import build_parser, pool_settings
from partnd.recipes.sleep_staging import study_from_args
from partnd.recipes.sleep_study import SCRATCH_METHODS, SleepStudy


def held_out_windows(
    study: SleepStudy, store: Path | None, records: Sequence[str] | None
) -> InMemoryWindows:
    """The labelled windows of ``records`` of ``store`` (default: every record of it), or of the
    nights every pool of the study holds out, normalised as the study normalises."""
    if store is None:
        store, records = study.pools.store.path, records or list(study.pools.plan.held_out)
    return InMemoryWindows(
        store, records=records, labelled_only=True, normalize=study.config.normalization
    )


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["supervised", "part_windows", "mae"])
    parser.add_argument(
        "--store", type=Path, help="a store of nights no encoder saw (default: the pool store)"
    )
    parser.add_argument("--records", nargs="+", help="its records (default: all; pools' held out)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="random encoders")
    parser.add_argument("--per-stage", type=int, default=20, help="windows per stage, scarce probe")
    args = parser.parse_args(argv[:split])
    study_args = build_parser().parse_args(["cells", *argv[split + 1 :]])
    study = study_from_args(study_args, **pool_settings(study_args))
    windows = held_out_windows(study, args.store, args.records)
    stages = np.asarray(windows.labels, dtype=np.int64)
    seconds = windows.n_times / windows.sfreq
    hours = windows.window_index.astype(np.float64) * seconds / 3600.0
    nights = np.asarray(windows.record_index)
    named = [windows.records[night] for night in np.unique(nights)]
    print(
        f"{len(windows)} labelled windows of {len(named)} nights no encoder saw "
        f"({', '.join(named)}), {hours.max():.1f} h long; hour R² of the stage alone "
        f"{hour_r2(np.eye(5)[stages], hours, nights):.3f}"
    )
    print(
        f"| encoder | stage κ | stage κ, {args.per_stage} windows per stage "
        "| hour R² | effective dimensions | night share |"
    )
    print("|---|---|---|---|---|---|")
    for method in args.methods:
        if method in SCRATCH_METHODS:
            encoders = {
                f"{method} (random, seed {seed})": study.window_encoder(method, seed, None)
                for seed in args.seeds
            }
        else:
            pools: list[str | None] = list(study.pool_names) or [None]  # a study without pools
            encoders = {
                method + (f" @{pool}" if pool else ""): study.window_encoder(method, 0, pool)
                for pool in pools
            }
        for name, encoder in encoders.items():
            features, _ = extract_features(encoder, windows)
            scores = leave_one_night_out(
                features, stages, hours, nights, seed=0, per_stage=args.per_stage
            )
            print(
                f"| {name} | {scores['stage_kappa']:.3f} | {scores['stage_kappa_scarce']:.3f} "
                f"| {scores['hour_r2']:.3f} | {effective_dimensions(features):.1f} "
                f"| {night_share(features, stages, nights):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
