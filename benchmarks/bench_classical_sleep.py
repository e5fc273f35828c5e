"""Benchmark: the classical sleep-staging reference rows on a sleep study's split.

Rows (see :mod:`partnd.evaluation.classical`), Cohen's kappa on the split's test subjects (labelled
windows):

* **single-window**: YASA's per-epoch features of every EEG channel + LightGBM (YASA's settings);
* **context**: YASA's full feature set (7.5 min centred and 2 min past rolling means, per-night
  robust z-scores, time of night) + LightGBM;
* **YASA pretrained**: YASA's shipped EEG-only classifier on C4-M1 (C3-M2 if absent), no labels
  (out of domain on the generated cohort).

LightGBM rows train on ``split.finetune_subsets(seed)[budget]`` for every budget and seed of the
split; printed per seed and as mean ± std over seeds. Features are computed once for every record of
the store (timed) and reused by every cell. ``--ablations`` adds the rows that explain them:
relative band powers with a logistic regression (the simple reference of issue 15) and with
LightGBM, the single-window features with a logistic regression, context without the time-of-night
columns, and time of night alone.

Measured on the demo split of version 3 of the sample cohort (2 cores, 3 seeds; ~2.5 min, ~8 min
with ``--ablations``): single-window 0.763 / 0.802 / 0.826, context 0.845 / 0.889 / 0.913 at 2 / 4 /
8 subjects, YASA pretrained 0.532. On version 4 (the same split and seeds; 35 min on a machine
loaded 10-fold by other jobs): single-window 0.706 / 0.772 / 0.813, context 0.809 / 0.874 / 0.908,
YASA pretrained 0.706. On version 5 (the same split and seeds; 49 s on 2 idle cores): single-window
0.794 / 0.845 / 0.881, context 0.844 / 0.901 / 0.920, YASA pretrained 0.774.

Usage::

    python -m partnd.recipes.sleep_staging prepare --out /tmp/demo_study   # once
    python benchmarks/bench_classical_sleep.py --study /tmp/demo_study
    python benchmarks/bench_classical_sleep.py --store S.zarr --split split.json --budgets 2 4 8
    python benchmarks/bench_classical_sleep.py --study /tmp/demo_study --ablations   # ~8 min
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from partnd.datasets.splits import SubjectSplit
from partnd.datasets.store import SleepStore
from partnd.evaluation.classical import (
    TIME_COLUMNS,
    FeatureTable,
    fit_classical_stager,
    predict_stages,
    sleep_features,
    yasa_pretrained_stages,
)
from partnd.evaluation.metrics import classification_metrics


def kappa(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Cohen's kappa over the five stages."""
    return classification_metrics(labels, predictions, 5).cohen_kappa


def columns(table: FeatureTable, keep: Callable[[str], bool]) -> FeatureTable:
    """``table`` restricted to the columns ``keep`` accepts."""
    index = [i for i, name in enumerate(table.columns) if keep(name)]
    return replace(
        table,
        features=np.ascontiguousarray(table.features[:, index]),
        columns=tuple(table.columns[i] for i in index),
    )


def fit_predict(
    classifier: str, train: FeatureTable, test: FeatureTable, seed: int, n_jobs: int
) -> np.ndarray:
    """Train ``classifier`` (``"lightgbm"`` as YASA, or ``"logistic"``: the lead's reference, a
    balanced logistic regression on standardised features, logged where all positive) on
    ``train``; predict ``test``."""
    if classifier == "lightgbm":
        model = fit_classical_stager(train.features, train.labels, seed=seed, n_jobs=n_jobs)
        return predict_stages(model, test.features)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    positive = np.nanmin(train.features, axis=0) > 0  # powers, ratios, spreads: log them

    def prepare(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        x[:, positive] = np.log(np.clip(x[:, positive], 1e-12, None))
        return np.nan_to_num(x, posinf=0.0, neginf=0.0)

    logistic = make_pipeline(
        StandardScaler(), LogisticRegression(max_iter=2000, class_weight="balanced")
    )
    logistic.fit(prepare(train.features), train.labels)
    return np.asarray(logistic.predict(prepare(test.features)), dtype=np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, help="study directory (store.zarr, split.json)")
    parser.add_argument("--store", type=Path, help="store (default STUDY/store.zarr)")
    parser.add_argument("--split", type=Path, help="split JSON (default STUDY/split.json)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-jobs", type=int, default=2, help="feature processes, LightGBM threads")
    parser.add_argument(
        "--ablations", action="store_true", help="also the rows that explain the main ones"
    )
    args = parser.parse_args()
    if (args.store is None or args.split is None) and args.study is None:
        parser.error("give --study, or both --store and --split")
    store = SleepStore(args.store or args.study / "store.zarr")
    split = SubjectSplit.load(args.split or args.study / "split.json")
    test_records = split.records_of(split.test)

    start = time.perf_counter()
    every = sleep_features(
        store, store.record_ids(), context=True, labelled_only=False, n_jobs=args.n_jobs
    )
    seconds = time.perf_counter() - start
    print(
        f"features: {len(store.record_ids())} records, {len(every)} windows, "
        f"{len(store.channels)} channels, {every.features.shape[1]} columns: {seconds:.1f} s "
        f"(n_jobs={args.n_jobs}, numba compilation included)"
    )
    scored = FeatureTable(
        features=every.features[every.labels >= 0],
        labels=every.labels[every.labels >= 0],
        records=every.records[every.labels >= 0],
        windows=every.windows[every.labels >= 0],
        columns=every.columns,
    )
    rows: dict[str, tuple[FeatureTable, str]] = {
        "single-window + LightGBM": (scored.single_window(), "lightgbm"),
        "context + LightGBM": (scored, "lightgbm"),
    }
    if args.ablations:
        relative = re.compile(r"_eeg_(sdelta|fdelta|theta|alpha|sigma|beta)$")
        rows.update(
            {
                "ablation: relative band powers + logistic regression": (
                    columns(scored, lambda c: bool(relative.search(c))),
                    "logistic",
                ),
                "ablation: relative band powers + LightGBM": (
                    columns(scored, lambda c: bool(relative.search(c))),
                    "lightgbm",
                ),
                "ablation: single-window + logistic regression": (
                    scored.single_window(),
                    "logistic",
                ),
                "ablation: context without time columns + LightGBM": (
                    columns(scored, lambda c: c not in TIME_COLUMNS),
                    "lightgbm",
                ),
                "ablation: time of night only + LightGBM": (
                    columns(scored, lambda c: c in TIME_COLUMNS),
                    "lightgbm",
                ),
            }
        )
    test_rows = scored.select(test_records)
    print(f"test: {len(split.test)} subjects, {len(test_rows)} windows")

    results: dict[str, dict[int, list[float]]] = {name: {} for name in rows}
    for name, (table, classifier) in rows.items():
        test = table.select(test_records)
        for budget in args.budgets:
            for seed in args.seeds:
                train = table.select(split.records_of(split.finetune_subsets(seed)[budget]))
                began = time.perf_counter()
                predictions = fit_predict(classifier, train, test, seed, args.n_jobs)
                value = kappa(test.labels, predictions)
                results[name].setdefault(budget, []).append(value)
                print(
                    f"  {name} | budget {budget} seed {seed}: kappa {value:.3f} "
                    f"({len(train)} training windows, fit {time.perf_counter() - began:.1f} s)",
                    flush=True,
                )

    start = time.perf_counter()
    pretrained = yasa_pretrained_stages(store, test_records)
    pretrained_kappa = kappa(pretrained.labels, pretrained.predictions)
    pretrained_seconds = time.perf_counter() - start

    print()
    print("| row | " + " | ".join(f"{b} subjects" for b in args.budgets) + " |")
    print("|---|" + "---|" * len(args.budgets))
    for name, by_budget in results.items():
        cells = [
            f"{np.mean(v):.3f} ± {np.std(v):.3f} ({', '.join(f'{x:.3f}' for x in v)})"
            for v in (by_budget[b] for b in args.budgets)
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        f"| YASA pretrained (no labels, out of domain) | {pretrained_kappa:.3f} "
        f"({pretrained_seconds:.1f} s) |"
    )
    print(f"(mean ± population std over seeds {args.seeds}; per-seed values in brackets)")


if __name__ == "__main__":
    main()
