"""Sleep-staging recipe: the paper's PhysioNet 2018 table, every method on the same split, beside
the classical reference rows a sleep researcher would trust.

Protocol (DESIGN.md §4-§5b): preprocess the recordings into a zarr store (6 EEG channels, 0.1-30 Hz,
100 Hz, 30 s windows); split by subject (held-out test subjects; a pretraining pool of every other
record, the unlabelled ``test/`` partition included; nested fine-tuning subsets); pretrain every
self-supervised method on the pool with the same budget; train every row on the same few labelled
subjects with the same protocol (step budget, EEG augmentations, checkpoint chosen on validation
subjects from the fine-tuning pool); test on the held-out subjects. A row is a method and an arm:
``window`` (a single-window classifier, the paper's), ``sequence`` (a sequence classifier over
``context`` consecutive windows), ``night`` (a night classifier: the whole record with the time
of night) or ``probe`` (logistic regression on frozen features); the
classical rows are YASA's features + LightGBM without (``classical``) and with context
(``classical+seq``), and YASA's pretrained classifier (``yasa_pretrained+seq``, no labels).

One command per stage, and one for the whole chain (each skips what is finished)::

    python -m partnd.recipes.sleep_staging prepare  --out runs/sleep       # cohort, store, split
    python -m partnd.recipes.sleep_staging pretrain --out runs/sleep --methods part_windows mae
    python -m partnd.recipes.sleep_staging finetune --out runs/sleep --methods part_windows supervised
    python -m partnd.recipes.sleep_staging report   --out runs/sleep
    python -m partnd.recipes.sleep_staging all      --out runs/sleep       # the chain
    python -m partnd.recipes.sleep_staging all --src /data/pc18 --scale paper --out runs/pc18

Without ``--src`` the built-in PC18-format sample cohort (generated EEG) is used at a CPU-sized
``demo`` scale: the data are synthetic and the models small, so the numbers say whether the code
works and how the rows compare on this data, not which method is better on real sleep. The report
``results.md`` has the columns a reader compares: the labels used, kappa with a 95% interval by
bootstrap over test subjects, the paired difference to the reference row (the classical row with
context), macro-F1 and N1's F1; ``results.{csv,json}`` add the settings each row used, accuracy
and every stage's F1. Figures: ``pretext.png``, ``finetune_validation.png``,
``confusion_matrices.png`` (a grid, one panel per row) and ``hypnogram_<record>.png``.
"""  # noqa: E501

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import check
from partnd.cli.errors import OptionNames
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.objectives import list_objectives
from partnd.recipes.report_files import write_table
from partnd.recipes.set_options import add_set_arguments, assigned_fields, assigned_grid
from partnd.recipes.sleep_report import (
    default_reference,
    plot_confusion_matrices,
    plot_finetune_validation,
    plot_hypnogram,
    plot_pretrain_loss,
    staging_table,
    summary_table,
)
from partnd.recipes.sleep_study import (
    ARMS,
    SCALES,
    STUDY_FRONTENDS,
    CellResult,
    SleepStudy,
    StudyConfig,
    available_methods,
    method_arms,
)
from partnd.recipes.study_directory import (
    RECIPE_OPTIONS,
    add_run_arguments,
    check_table_rows,
    record_table_rows,
    released_on_failure,
    run_recipe,
)
from partnd.recipes.study_tasks import (
    StudyTask,
    add_worker_arguments,
    check_worker_options,
    check_workers,
    row_tasks,
    run_tasks,
)

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_ROWS",
    "PROG",
    "SLEEP_OPTIONS",
    "STAGES",
    "add_study_arguments",
    "build_parser",
    "command",
    "demo",
    "main",
    "report",
    "rows_of",
    "run",
    "selected_rows",
    "study_from_args",
]

#: The rows ``all`` runs without ``--rows``, ``--methods`` or ``--arms`` (the demo): the classical
#: rows, supervised training from scratch (window, the night classifier, and the random encoder's
#: probe) and PART across windows (its frozen features and its night classifier). The 21-window
#: sequence rows left the demo for the night rows, to keep it within 15 minutes on two cores;
#: they run with ``--rows supervised:sequence part_windows:sequence``.
DEFAULT_ROWS = (
    ("classical", "window"),
    ("classical", "sequence"),
    ("yasa_pretrained", "sequence"),
    ("supervised", "window"),
    ("supervised", "night"),
    ("supervised", "probe"),
    ("part_windows", "probe"),
    ("part_windows", "night"),
)
#: The methods of ``--arms`` without ``--methods``.
DEFAULT_METHODS = tuple(dict.fromkeys(method for method, _ in DEFAULT_ROWS))
STAGES = ("prepare", "pretrain", "finetune", "report", "all")
#: The options of both sleep recipes, for the arguments and configuration fields their
#: messages name.
SLEEP_OPTIONS = OptionNames(
    {
        **RECIPE_OPTIONS.options,
        "seed": "--seed",
        "channels": "--channels",
        "jobs": "--jobs",
        "backend": "--backend",
        "scheduler_address": "--scheduler",
        "normalize": "--normalize",
        "frontend": "--frontend",
        "method": "--rows/--methods",
        "arm": "--rows/--arms",
        "FinetuneConfig.context": "--context",
        "FinetuneConfig.min_steps": "--finetune-steps",
        "night_overrides": "--night-set",
        "night_grid": "--night-grid",
        "pretrain_overrides": "--pretrain-set",
        "FinetuneConfig.device": "--device",
        "PretrainConfig.epochs": "--pretrain-epochs",
        "PretrainConfig.min_steps": "--pretrain-steps",
        "PretrainConfig.device": "--device",
    }
)


def _budget(study: SleepStudy) -> int | str:
    """The table's label budget: the scarcest of the study (10 subjects in the paper)."""
    return study.budgets[0].to_json()


def _pretraining_methods(methods: Sequence[str]) -> list[str]:
    return [method for method in methods if method in list_objectives()]


def rows_of(methods: Sequence[str], arms: Sequence[str]) -> list[tuple[str, str]]:
    """Every (method, arm) row of ``methods`` among ``arms`` (each method keeps its own arms)."""
    unknown = sorted(set(methods) - set(available_methods()))
    check(not unknown, "--methods", f"names from {available_methods()}", ", ".join(unknown))
    bad = sorted(set(arms) - set(ARMS))
    check(not bad, "--arms", f"names from {list(ARMS)}", ", ".join(bad))
    return [(method, arm) for method in methods for arm in method_arms(method) if arm in arms]


def selected_rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The rows a command line asks for: ``--rows``, else ``--methods`` x ``--arms`` (each
    defaulting to the demo's), else :data:`DEFAULT_ROWS`."""
    if args.rows:
        for option, value in (("--methods", args.methods), ("--arms", args.arms)):
            check(
                value is None,
                option,
                "none beside --rows (--rows names the rows: METHOD:ARM)",
                " ".join(value or ()),
            )
        rows = []
        for text in args.rows:
            method, sep, arm = text.partition(":")
            check(bool(sep), "--rows", "METHOD:ARM items, e.g. supervised:sequence", repr(text))
            rows.append((method, arm))
        for method, arm in rows:
            check(
                method in available_methods(),
                "--rows",
                f"METHOD:ARM items with a method from {available_methods()}",
                repr(f"{method}:{arm}"),
            )
            check(
                arm in method_arms(method),
                "--rows",
                f"an arm of {method} ({', '.join(method_arms(method))})",
                repr(f"{method}:{arm}"),
            )
        return rows
    if args.methods is None and args.arms is None:
        return list(DEFAULT_ROWS)
    return rows_of(args.methods or DEFAULT_METHODS, args.arms or ARMS)


def report(study: SleepStudy, rows: Sequence[tuple[str, str]]) -> list[dict]:
    """Write the table and figures from the finished cells of ``rows`` (method, arm).

    Returns:
        The table rows.
    """
    budget, seed = _budget(study), study.config.seed
    missing = [f"{m}:{a}" for m, a in rows if not study.cell_done(m, a, budget, seed)]
    check(
        not missing,
        "--out",
        "a study whose rows have finished their cells (run the finetune stage first)",
        f"unfinished rows {', '.join(missing)}",
    )
    row_names = [f"{method}:{arm}" for method, arm in rows]
    check_table_rows(study.out, "results", row_names)
    cells: list[CellResult] = [study.load_cell(m, a, budget, seed) for m, a in rows]
    truth = study.test_set.labels.astype(np.int64)
    pretrain_steps = {}
    histories = {}
    for method in _pretraining_methods([method for method, _ in rows]):
        run = RunDir(study.pretrain_dir(method))
        pretrain_steps[method] = int(run.resolved()["total_steps"])
        histories[method] = run.history()
    names = study.class_names
    reference = default_reference(cells)
    table = staging_table(
        cells, truth, study.test_subjects, names, pretrain_steps, reference=reference
    )
    write_table(table, study.out, "results", markdown=summary_table(table, reference))
    record_table_rows(study.out, "results", row_names)
    if histories:
        plot_pretrain_loss(histories, study.out / "pretext.png")
    plot_finetune_validation(cells, study.out / "finetune_validation.png")
    plot_confusion_matrices(cells, names, study.out / "confusion_matrices.png")
    record = study.split.test_records[0]
    in_record = np.array([study.test_set.record_of(i) == record for i in range(len(truth))])
    plot_hypnogram(
        truth[in_record],
        {cell.label: cell.predictions[in_record] for cell in cells},
        names,
        study.out / f"hypnogram_{record}.png",
        title=f"Test record {record}",
    )
    return table


def run(
    study: SleepStudy,
    stage: str,
    rows: Sequence[tuple[str, str]],
    jobs: int = 1,
    backend: str = "loky",
    scheduler_address: str | None = None,
) -> None:
    """Run one stage (or ``all``) of the recipe for ``rows`` (method, arm), its pretrainings and
    cells on ``jobs`` processes (:mod:`partnd.recipes.study_tasks`: in ``all``, a pretrained
    method's rows follow its pretraining in one process while the other rows train beside it),
    local ones or, with ``backend="dask"``, a dask cluster's (at ``scheduler_address``, else a
    local one).
    """
    check(stage in STAGES, "stage", f"one of {STAGES}", stage)
    check_workers(jobs, backend, scheduler_address)
    methods = list(dict.fromkeys(method for method, _ in rows))
    if stage in ("prepare", "all"):
        print(f"{len(study.store.record_ids())} records; {len(study.split.test)} test subjects")
    budget, seed = _budget(study), study.config.seed
    if stage == "pretrain":
        pretrainings = [StudyTask((), (method, None)) for method in _pretraining_methods(methods)]
        run_tasks(study, pretrainings, jobs, backend=backend, scheduler_address=scheduler_address)
    if stage in ("finetune", "all"):
        tasks = row_tasks(rows, budget, seed, pretrain=stage == "all")
        run_tasks(study, tasks, jobs, backend=backend, scheduler_address=scheduler_address)
    if stage in ("report", "all"):
        report(study, rows)
        print((study.out / "results.md").read_text())
        if study.config.src is None:
            print(
                "Note: generated sample cohort and a small model (demo scale): these numbers "
                "check the pipeline and compare the rows on this data; they do not rank the "
                "methods on real sleep EEG."
            )


def add_study_arguments(
    parser: argparse.ArgumentParser, default_out: Path, default_methods: Sequence[str]
) -> None:
    """The options that describe a study (shared with ``partnd.recipes.sample_efficiency``)."""
    parser.add_argument("--out", type=Path, default=default_out, help="study directory")
    parser.add_argument(
        "--src", type=Path, default=None, help="local PhysioNet 2018 root (default: sample cohort)"
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="zarr store to use or create (a store of 'partnd ingest', e.g. Sleep-EDF nights, is "
        "read as it is)",
    )
    parser.add_argument(
        "--channels",
        type=lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
        default=None,
        metavar="A,B",
        help="the store channels to read, e.g. Fpz-Cz,Pz-Oz (default: all of them)",
    )
    parser.add_argument("--cohort-dir", type=Path, default=None, help="sample cohort cache")
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo", help="protocol size")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help=f"methods to compare (default {' '.join(default_methods)}; "
        f"any of {' '.join(available_methods())})",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=None,
        choices=ARMS,
        help="how labelled subjects are used: window (single-window classifier), sequence "
        "(classifier over --context windows), night (classifier reading the whole night with "
        "its time), probe (logistic regression on frozen features); default all four",
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        default=None,
        metavar="METHOD:ARM",
        help="the rows to run, instead of --methods x --arms (default without either: "
        + " ".join(f"{m}:{a}" for m, a in DEFAULT_ROWS)
        + ")",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=None,
        help="windows per sequence of the sequence arm (default: the scale's, 21)",
    )
    parser.add_argument(
        "--normalize",
        choices=("window", "record", "none"),
        default=None,
        help="how windows are normalised: each on its own (window, the paper's) or by its "
        "night's channel scales (record); default: the scale's",
    )
    parser.add_argument(
        "--frontend",
        choices=sorted(STUDY_FRONTENDS),
        default=None,
        help="how the window encoder of every learned method turns a 1 s patch into a token: "
        "its samples (linear), their log-power spectrum (spectral; spectral_std: each "
        "log-power centred and scaled by running estimates; spectral_std_raw: plus the "
        "samples' projection) or a convolutional stem (conv); default: the scale's",
    )
    parser.add_argument(
        "--budgets",
        nargs="+",
        metavar="BUDGET",
        help="label budgets: numbers of labelled subjects (2: every labelled window of 2 "
        "subjects) and of labelled windows per stage (w20: 20 windows of each stage drawn from "
        "the fine-tuning subjects); default: the scale's",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="cell seeds (default: the scale's)")
    parser.add_argument("--n-jobs", type=int, default=1, help="preprocessing workers")
    parser.add_argument(
        "--loader-workers",
        type=int,
        default=0,
        help="data loader processes of every pretraining (0: load in the training process); "
        "a run setting like --device, not saved with the study (each pretraining's config.json "
        "records it): the same items every epoch, in a batch order that follows the workers",
    )
    parser.add_argument("--seed", type=int, default=0, help="split and training seed")
    parser.add_argument("--pretrain-epochs", type=int, default=None, help="override PT epochs")
    parser.add_argument(
        "--pretrain-steps",
        type=int,
        default=None,
        help="pretrain every method for at least this many optimiser steps (a step budget; "
        "overrides the epochs; rounded up to whole epochs of the pool)",
    )
    parser.add_argument(
        "--finetune-steps",
        type=int,
        default=None,
        help="fine-tune every cell for at least this many optimiser steps (rounded up to whole "
        "epochs of its training subjects' windows: 2 steps on 300 windows at batch 64 run 5; "
        "each cell records the steps it ran)",
    )
    add_set_arguments(parser)
    add_run_arguments(parser)


PROG = "python -m partnd.recipes.sleep_staging"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line of the recipe, as ``prog`` (``partnd demo`` runs it too)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Sleep staging on PhysioNet 2018 (or the sample cohort): every method on the "
        "same split, kappa with bootstrap intervals over test subjects.",
    )
    parser.add_argument("stage", nargs="?", default="all", choices=STAGES, help="stage to run")
    add_study_arguments(parser, Path("runs/demo"), DEFAULT_METHODS)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes the pretrainings and rows run on (-1: every core); a pretrained "
        "method's rows follow its pretraining in one process while the others train beside it",
    )
    add_worker_arguments(parser)
    return parser


def _pretrain_budget(args: argparse.Namespace) -> dict[str, int]:
    """The pretraining overrides of ``--pretrain-epochs`` and ``--pretrain-steps``."""
    budget: dict[str, int] = {}
    if args.pretrain_epochs is not None:
        budget["epochs"] = args.pretrain_epochs
    if args.pretrain_steps is not None:
        budget.update(epochs=1, min_steps=args.pretrain_steps)
    return budget


def study_from_args(
    args: argparse.Namespace, rows: Sequence[tuple[str, str]] = (), **settings: Any
) -> SleepStudy:
    """The study a parsed command line describes; its settings (and those of the methods of
    ``rows``) are checked before its directory is claimed (``settings``: further
    :class:`StudyConfig` fields, e.g. the pools of ``partnd.recipes.sample_efficiency``)."""
    config = StudyConfig(
        out=args.out,
        src=args.src,
        store=args.store,
        cohort_dir=args.cohort_dir,
        scale=args.scale,
        n_jobs=args.n_jobs,
        loader_workers=args.loader_workers,
        seed=args.seed,
        device=args.device,
        progress=args.progress,
        pretrain_overrides={
            **_pretrain_budget(args),
            **assigned_fields(args.pretrain_set, PretrainConfig, "--pretrain-set"),
        },
        finetune_overrides={}
        if args.finetune_steps is None
        else {"min_steps": args.finetune_steps},
        sequence_overrides={} if args.context is None else {"context": args.context},
        night_overrides=assigned_fields(args.night_set, FinetuneConfig, "--night-set"),
        night_grid=assigned_grid(args.night_grid, FinetuneConfig, "--night-grid"),
        normalize=args.normalize,
        frontend=args.frontend,
        budgets=None if args.budgets is None else tuple(args.budgets),
        seeds=None if args.seeds is None else tuple(args.seeds),
        channels=args.channels,
        **settings,
    )
    config.check_settings([method for method, _ in rows], rows)
    return SleepStudy(config, overwrite=args.overwrite)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the recipe from the command line; returns the exit status (errors raise: see
    :func:`command`). The rows are checked before ``--out`` is claimed, and a new ``--out``
    is removed again when the command fails before writing anything into it."""
    args = build_parser(prog).parse_args(argv)
    rows = selected_rows(args)
    check(  # the table compares the rows at one budget and --seed: more would be ignored
        args.budgets is None or len(args.budgets) == 1,
        "--budgets",
        "one label budget (this recipe compares its rows at one budget; "
        "partnd.recipes.sample_efficiency runs several)",
        " ".join(args.budgets or ()),
    )
    check(
        args.seeds is None,
        "--seeds",
        "none (this recipe's cells use --seed; partnd.recipes.sample_efficiency runs several "
        "seeds)",
        " ".join(str(seed) for seed in args.seeds or ()),
    )
    check_worker_options(args)
    with released_on_failure(args.out):
        run(study_from_args(args, rows), args.stage, rows, args.jobs, args.backend, args.scheduler)
    return 0


def command(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """:func:`main` as the command ``prog``: bad input, a non-finite loss or Ctrl-C end with one
    line naming the options and an exit status, not a traceback."""
    return run_recipe(prog, lambda: main(argv, prog), SLEEP_OPTIONS)


def demo(argv: Sequence[str]) -> int:
    """``partnd demo``: :func:`command`, its usage and messages under that name."""
    return command(argv, "partnd demo")


if __name__ == "__main__":
    sys.exit(command())
