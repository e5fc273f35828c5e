"""Benchmark: window-ViT front-ends compared on validation subjects (the study's window arm).

For every candidate front-end (how a 1 s patch becomes a token, :mod:`partnd.models.frontends`),
labelled-subject budget, step budget and seed, this trains the supervised single-window
classifier exactly as the sleep study's ``window`` arm does (the demo scale's fine-tuning
protocol and 128-wide ViT, the study's subject split, training subjects and validation subjects)
and scores it on the **validation subjects only**; the test subjects are never read. Per cell:

* ``val_kappa``: the selected checkpoint's validation kappa (the best evaluation: optimistic);
* ``val_last3``: the mean of the last three evaluations (what the recipe's settings were chosen
  by: less selection noise);
* ``train_acc``: accuracy of the returned model on its own training windows (eval mode, no
  augmentation): how well the budget fits the labels;
* seconds per optimiser step.

The ``classical`` row is the reference the window arm should reach: YASA's single-window
features and LightGBM (:mod:`partnd.evaluation.classical`, the study's ``classical`` window row)
trained on
the same subjects and scored on the same validation subjects (``val_last3`` is its one score).
The ``spectra`` row (window arm) asks how much of it is in what the spectral front-ends read:
the same LightGBM on each window's 0-30 Hz log-power spectrum of its 1 s patches (31 bins per
channel, their mean and standard deviation over the window's patches: ``2 x 31 x C`` columns),
from the study's normalised windows.
``--arm sequence`` compares the front-ends inside the study's sequence classifier instead (21
windows), ``--arm night`` inside its night classifier (trained on crops of whole records with the
time of night, validated on whole nights); the classical row then has YASA's context. They check
that the window arm's choice does not cost the arms that see context.

The table gives mean +- std over seeds per candidate, budget and step budget. Cells are
resumable (a finished cell's ``result.json`` is read back), so the same command prints the table
again, and two processes with different ``--candidates`` can share one ``--out``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_window_frontend.py --out runs/frontend
    OMP_NUM_THREADS=1 python benchmarks/bench_window_frontend.py --out runs/frontend \\
        --candidates linear spectral --budgets 8 --steps 800 2400 --seeds 0 1
    OMP_NUM_THREADS=1 python benchmarks/bench_window_frontend.py --out runs/frontend \
        --arm sequence --candidates linear spectral --budgets 2 --seeds 0
    OMP_NUM_THREADS=1 python benchmarks/bench_window_frontend.py --out runs/frontend \
        --arm night --candidates classical linear spectral conv --budgets 2 --seeds 0 1 2
    python benchmarks/bench_window_frontend.py --out runs/frontend --src /data/cohort  # another
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from partnd.engine.checkpoint import atomic_write_json
from partnd.evaluation.metrics import classification_metrics
from partnd.finetuning.training import evaluate, finetune
from partnd.recipes.bench_support import FRONTEND_CANDIDATES, mean_std, patch_spectra
from partnd.recipes.sleep_study import SleepStudy, StudyConfig

#: Rows without a trained encoder (no step budget): LightGBM on YASA's features, and on the
#: patches' log-power spectra (window arm).
REFERENCES = ("classical", "spectra")


def candidate_config(
    study: SleepStudy, name: str, seed: int, steps: int, arm: str, budget: int
) -> Any:
    """The study's configuration of the supervised row's ``arm`` at ``budget`` with candidate
    ``name`` (``steps`` replaces the budget's step count)."""
    settings = dict(FRONTEND_CANDIDATES[name])
    encoder = settings.pop("encoder", {})
    base = study.config.finetune_config("supervised", seed, arm, budget)
    return base.replace(
        encoder_overrides={**base.encoder_overrides, **encoder}, min_steps=steps, **settings
    )


def lightgbm_row(
    train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray], seed: int
) -> dict[str, Any]:
    """A reference row: the classical stager's LightGBM fitted on ``train`` (``[N, F]``
    features, ``[N]`` stages) and scored on ``val``, in the cells' format."""
    from partnd.evaluation.classical import NUM_STAGES, fit_classical_stager, predict_stages

    start = time.perf_counter()
    model = fit_classical_stager(train[0], train[1], seed=seed)
    kappa = classification_metrics(val[1], predict_stages(model, val[0]), NUM_STAGES)
    fit = classification_metrics(train[1], predict_stages(model, train[0]), NUM_STAGES)
    return {
        "val_kappa": kappa.cohen_kappa,
        "val_last3": kappa.cohen_kappa,
        "val_curve": [],
        "train_acc": fit.accuracy,
        "train_kappa": fit.cohen_kappa,
        "seconds_per_step": time.perf_counter() - start,
        "parameters": 0,
        "encoder_overrides": {},
        "patch_size": None,
    }


def classical_cell(
    study: SleepStudy, subjects: tuple[str, ...], val_subjects: list[str], seed: int, arm: str
) -> dict[str, Any]:
    """The classical row of ``arm`` (``window``: single-window features, ``sequence`` and
    ``night``: with YASA's context) on the cell's subjects, scored on its validation subjects."""
    table = study.classical_features
    if arm == "window":
        table = table.single_window()
    train = table.select(study.split.records_of(subjects))
    val = table.select(study.split.records_of(val_subjects))
    return lightgbm_row((train.features, train.labels), (val.features, val.labels), seed)


def spectra_cell(
    study: SleepStudy, subjects: tuple[str, ...], val_subjects: list[str], seed: int
) -> dict[str, Any]:
    """The ``spectra`` row: LightGBM on :func:`patch_spectra` of the study's normalised windows
    of ``subjects``, scored on ``val_subjects``."""
    train, val = study.windows(subjects), study.windows(val_subjects)
    return lightgbm_row(
        (patch_spectra(train.windows), train.labels.astype(np.int64)),
        (patch_spectra(val.windows), val.labels.astype(np.int64)),
        seed,
    )


def cell_dir(out: Path, arm: str, name: str, budget: int, seed: int, steps: int) -> Path:
    """Where one cell lives (the window arm's cells directly under the candidate)."""
    prefix = "" if arm == "window" else f"{arm}_"
    return out / name / f"{prefix}b{budget}_s{seed}_n{steps}"


def run_cell(
    study: SleepStudy, out: Path, arm: str, name: str, budget: int, seed: int, steps: int
) -> dict:
    """Train one cell (unless finished) and return its validation numbers."""
    cell = cell_dir(out, arm, name, budget, seed, steps)
    done = cell / "result.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    draw = study.draw(budget, seed)  # the study's own labelled and validation subjects
    subjects, val_subjects = draw.subjects, list(draw.validation)
    if name in REFERENCES:
        row = {"candidate": name, "arm": arm, "budget": budget, "seed": seed, "steps": steps}
        if name == "classical":
            row.update(classical_cell(study, subjects, val_subjects, seed, arm))
        else:
            row.update(spectra_cell(study, subjects, val_subjects, seed))
        row["validation_subjects"] = val_subjects
        atomic_write_json(row, done)
        return row
    config = candidate_config(study, name, seed, steps, arm, budget)
    train = study.arm_data(arm, subjects, config)
    val = study.arm_data(arm, val_subjects, config, evaluation=True)
    start = time.perf_counter()
    result = finetune(
        None,
        train,
        num_classes=len(study.class_names),
        val_dataset=val,
        out_dir=cell / "run",
        config=config,
        class_names=study.class_names,
        overwrite=True,
    )
    seconds = time.perf_counter() - start
    val_kappas = [r["cohen_kappa"] for r in result.history if r.get("phase") == "val"]
    fit = evaluate(result.model, train, class_names=study.class_names, device=config.device)
    row = {
        "candidate": name,
        "arm": arm,
        "budget": budget,
        "seed": seed,
        "steps": steps,
        "val_kappa": float(result.best_metrics["cohen_kappa"]),
        "val_last3": float(np.mean(val_kappas[-3:])),
        "val_curve": [round(float(k), 4) for k in val_kappas],
        "train_acc": float(fit.accuracy),
        "train_kappa": float(fit.cohen_kappa),
        "seconds_per_step": seconds / steps,
        "parameters": sum(p.numel() for p in result.model.parameters()),
        "encoder_overrides": config.encoder_overrides,
        "patch_size": config.patch_size,
        "validation_subjects": val_subjects,
    }
    atomic_write_json(row, done)
    return row


def print_table(rows: list[dict]) -> None:
    """Mean +- std over seeds per candidate, budget and step budget."""
    groups: dict[tuple[str, int, int], list[dict]] = {}
    for row in rows:
        suffix = {"sequence": "+seq", "night": "+night"}.get(row.get("arm", "window"), "")
        label = row["candidate"] + suffix
        groups.setdefault((label, row["budget"], row["steps"]), []).append(row)
    header = (
        f"| {'candidate':<13} | subjects | steps | seeds | {'val κ (selected)':<16} "
        f"| {'val κ (last 3)':<14} | {'train acc':<13} | s/step | params M |"
    )
    print(header)
    print("|" + "|".join("-" * (len(part) + 0) for part in header.split("|")[1:-1]) + "|")
    for (name, budget, steps), group in sorted(groups.items(), key=lambda item: item[0][1:]):
        print(
            f"| {name:<13} | {budget:>8} | {steps:>5} | {len(group):>5} "
            f"| {mean_std([r['val_kappa'] for r in group]):<16} "
            f"| {mean_std([r['val_last3'] for r in group]):<14} "
            f"| {mean_std([r['train_acc'] for r in group]):<13} "
            f"| {statistics.mean(r['seconds_per_step'] for r in group):6.3f} "
            f"| {group[0]['parameters'] / 1e6:8.2f} |"
        )


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the missing cells and print the validation table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory of the cells")
    parser.add_argument(
        "--study", type=Path, default=None, help="study directory (default OUT/study)"
    )
    parser.add_argument("--src", type=Path, default=None, help="cohort root (default: sample)")
    parser.add_argument(
        "--store", type=Path, default=None, help="existing preprocessed store of that cohort"
    )
    parser.add_argument("--cohort-dir", type=Path, default=None, help="sample cohort cache")
    parser.add_argument(
        "--candidates",
        nargs="+",
        choices=sorted([*FRONTEND_CANDIDATES, *REFERENCES]),
        default=["classical", *FRONTEND_CANDIDATES],
    )
    parser.add_argument(
        "--arm",
        choices=("window", "sequence", "night"),
        default="window",
        help="the study's arm (sequence: the demo's 21-window sequence classifier, night: its "
        "night classifier)",
    )
    parser.add_argument("--budgets", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, nargs="+", default=[800], help="step budgets")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    parser.add_argument(
        "--report-only", action="store_true", help="print the table of finished cells only"
    )
    args = parser.parse_args(argv)
    study = SleepStudy(
        StudyConfig(
            out=args.study or args.out / "study",
            src=args.src,
            store=args.store,
            cohort_dir=args.cohort_dir,
            scale="demo",
            frontend="linear",  # every candidate's tokenizer is its own encoder override
            device=args.device,
            progress=False,
        )
    )
    if args.arm != "window" and "spectra" in args.candidates:
        parser.error("--candidates spectra: the window arm only (a window's own spectra)")
    cells = dict.fromkeys(  # the reference rows have no step budget: one cell per seed
        (name, budget, seed, 0 if name in REFERENCES else steps)
        for budget, steps, name, seed in itertools.product(
            args.budgets, args.steps, args.candidates, args.seeds
        )
    )
    rows = []
    for name, budget, seed, steps in cells:
        done = cell_dir(args.out, args.arm, name, budget, seed, steps) / "result.json"
        if args.report_only and not done.is_file():
            continue
        row = run_cell(study, args.out, args.arm, name, budget, seed, steps)
        print(
            f"{name} b{budget} s{seed} n{steps}: val κ {row['val_kappa']:.3f} "
            f"(last 3 {row['val_last3']:.3f}), train acc {row['train_acc']:.3f}",
            flush=True,
        )
        rows.append(row)
    print(
        f"\n{args.arm.capitalize()} arm, supervised, demo scale, validation subjects only "
        f"(split seed {study.config.seed}, {study.scale.val_subjects} validation subjects "
        "per cell)"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
