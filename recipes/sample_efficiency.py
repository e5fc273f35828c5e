"""Sample-efficiency study: kappa by label budget x pretraining pool x seeds x methods.

The paper's appendix: fine-tune on 10 / 50 / 100 / 657 subjects (nested subsets, one chain per
seed from the saved split), 5 seeds, every method and arm (``window``, ``sequence``, ``probe``,
beside the classical rows); test on the same held-out subjects. Two axes extend it:

* **labels** (``--budgets 1 2 4 8 w20``): budgets of labelled subjects and of labelled windows
  per stage (``w20``: 20 windows of each stage from the fine-tuning subjects, their unlabelled
  neighbours kept as context). Each seed is a *draw*: its labelled and validation subjects come
  from the fine-tuning pool (the test subjects never change), the same draw for every row.
* **unlabelled nights** (``--pools 24 80 240``, hours; ``--pool-src`` the nights): each
  pretrained method is pretrained once per pool, to a budget chosen on held-out nights
  (:mod:`partnd.recipes.study_pools`), and its cells run once per pool. The row
  ``supervised_pool`` is the pool axis's oracle ceiling: an encoder pretrained on each pool's own
  stage labels (:mod:`partnd.recipes.study_ceiling`), a reference row marked ``(oracle)``, and
  ``ceiling_minus_scratch.*`` the room it leaves for pretraining at each budget, ``room_taken.*``
  the share of it each pretrained row takes.

Each (method, arm, budget, seed[, pool]) *cell* is its own resumable run under
``OUT/finetune/<method>/<arm>/b<B>_s<S>[_p<pool>]`` and is never recomputed once finished; the
pretrained encoders (``OUT/pretrain/<method>``, ``OUT/pretrain_pools/<pool>/<method>``) are shared
by the cells of a method (and with ``partnd.recipes.sleep_staging`` on the same ``--out``).

Commands (each skips what is finished)::

    python -m partnd.recipes.sample_efficiency pretrain  --out runs/se --methods part mae
    python -m partnd.recipes.sample_efficiency cells     --out runs/se --methods part mae supervised
    python -m partnd.recipes.sample_efficiency run-cell  --out runs/se --cell part:sequence:10:3
    python -m partnd.recipes.sample_efficiency run-cell  --out runs/se \
        --cell-index $SLURM_ARRAY_TASK_ID
    python -m partnd.recipes.sample_efficiency run       --out runs/se --jobs 2  # pretrain, cells
    python -m partnd.recipes.sample_efficiency aggregate --out runs/se

``cells`` prints one cell per line (``method:arm:budget:seed``, ``:pool`` added for a pool's
encoder), in a fixed order, so a cluster job array can run cell ``--cell-index i`` per task after
one ``pretrain`` job; ``run-cell`` runs only cells of that list (the study's rows, budgets, seeds
and pools: others would never be aggregated). ``run --jobs N`` runs on N joblib processes: first
every unfinished pretraining (each pool's its own task, so pools pretrain side by side) beside the
cells that need none, then the cells of the pretrained encoders
(:func:`partnd.recipes.study_tasks.cell_tasks`), a line printed as each task finishes. ``aggregate``
refuses a study with unfinished cells, naming them (``--allow-partial`` writes the tables from the
finished cells, with a ``missing`` column); it writes ``kappa_by_budget.{csv,md,json}`` (mean ± std
over draws, the appendix layout with the paper's values), ``difference_to_reference.*`` (the
per-draw paired difference to the reference row, the classical row with context when run),
``sample_efficiency.png`` and, for the new axes, the tables and figures of
:mod:`partnd.recipes.sample_efficiency_report`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partnd._validation import check
from partnd.cli.errors import OptionNames
from partnd.datasets.label_budget import LabelBudget
from partnd.datasets.store import SIGNAL_DTYPES
from partnd.recipes.report_files import write_table
from partnd.recipes.sample_efficiency_report import mark_references, write_axes_report
from partnd.recipes.sleep_report import (
    budget_order,
    plot_sample_efficiency,
    sample_efficiency_tables,
)
from partnd.recipes.sleep_staging import (
    DEFAULT_METHODS,
    SLEEP_OPTIONS,
    add_study_arguments,
    selected_rows,
    study_from_args,
)
from partnd.recipes.sleep_study import CellResult, SleepStudy, pretrained_methods
from partnd.recipes.study_config import POOL_CEILING
from partnd.recipes.study_directory import (
    check_table_rows,
    record_table_rows,
    released_on_failure,
    run_recipe,
)
from partnd.recipes.study_tasks import (
    Cell,
    add_worker_arguments,
    cell_tasks,
    check_worker_options,
    format_cell,
    run_tasks,
)

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "add_pool_arguments",
    "aggregate",
    "cell_list",
    "format_cell",
    "main",
    "parse_cell",
    "pool_settings",
    "run_cells",
]

COMMANDS = ("pretrain", "cells", "run-cell", "run", "aggregate")


#: The options of this recipe for the arguments its messages name: the sleep recipes', and the
#: pools' options (a pool pretraining's ``segment_windows``, ``patience``, ``eval_every_steps``).
OPTIONS = OptionNames(
    {
        **SLEEP_OPTIONS.options,
        "segment_windows": "--pool-segment-windows",
        "PretrainConfig.segment_windows": "--pool-segment-windows",
        "PretrainConfig.patience": "--pool-patience",
        "PretrainConfig.eval_every_steps": "--pool-eval-steps",
        "pool_overrides": "--pool-patience/--pool-eval-steps/--pool-segment-windows",
    }
)


def cell_list(study: SleepStudy, rows: Sequence[tuple[str, str]]) -> list[Cell]:
    """Every (method, arm, budget, seed, pool) of ``rows`` in a fixed order: budgets scarcest
    first; a pretrained method gets one cell per pool of the study."""
    return [
        (method, arm, budget.to_json(), int(seed), pool)
        for method, arm in rows
        for budget in study.budgets
        for seed in study.scale.seeds
        for pool in (study.pool_names if method in pretrained_methods() else ()) or (None,)
    ]


def parse_cell(text: str) -> Cell:
    """``"part:sequence:10:3"`` -> ``("part", "sequence", 10, 3, None)``;
    ``"part:probe:w20:0:24h"`` -> ``("part", "probe", "w20", 0, "24h")``."""
    parts = text.split(":")
    check(
        len(parts) in (4, 5) and parts[3].isdigit() and all(parts),
        "--cell",
        "METHOD:ARM:BUDGET:SEED[:POOL], e.g. part:sequence:10:3 or part:probe:w20:0:24h",
        repr(text),
    )
    budget = LabelBudget.parse(parts[2], "--cell").to_json()
    return parts[0], parts[1], budget, int(parts[3]), parts[4] if len(parts) == 5 else None


def run_cells(
    study: SleepStudy,
    cells: Sequence[Cell],
    jobs: int,
    backend: str = "loky",
    scheduler_address: str | None = None,
) -> None:
    """Run the unfinished ``cells`` and the pretrainings they need on ``jobs`` processes
    (:func:`partnd.recipes.study_tasks.cell_tasks`: the pretrainings side by side with the cells
    that need none, then the cells of the pretrained encoders), local ones or, with
    ``backend="dask"``, a dask cluster's (at ``scheduler_address``, else a local one)."""
    todo = [cell for cell in cells if not study.cell_done(*cell)]
    for budget, seed in dict.fromkeys((cell[2], cell[3]) for cell in todo):
        study.draw(budget, seed)  # a budget the pool cannot hold is refused before any cell runs
    print(f"{len(cells) - len(todo)} of {len(cells)} cells already finished")
    for tasks in cell_tasks(todo, study.pretrained):
        run_tasks(study, tasks, jobs, backend=backend, scheduler_address=scheduler_address)


def aggregate(
    study: SleepStudy, rows: Sequence[tuple[str, str]], allow_partial: bool = False
) -> None:
    """Write the tables and the figure from the cells of ``rows``.

    Args:
        study: The study.
        rows: Its (method, arm) rows.
        allow_partial: Write them from the finished cells when some have not finished; the
            tables then list the missing cells of each budget (column ``missing``) and the
            figure says how many are missing. Without it, unfinished cells are refused.

    Raises:
        InputError: Unfinished cells (without ``allow_partial``), or none finished.
    """
    names = [f"{method}:{arm}" for method, arm in rows]
    check_table_rows(study.out, "kappa_by_budget", names)
    every = cell_list(study, rows)
    missing = [cell for cell in every if not study.cell_done(*cell)]
    named = ", ".join(format_cell(cell) for cell in missing[:10])
    named += ", ..." if len(missing) > 10 else ""
    check(
        allow_partial or not missing,
        "--out",
        "a study whose cells all finished (run them first, or pass --allow-partial to write "
        "tables marked partial from the finished ones)",
        f"{len(missing)} of {len(every)} cells unfinished: {named}",
    )
    cells: list[CellResult] = [study.load_cell(*cell) for cell in every if cell not in missing]
    check(
        bool(cells), "--out", "a study with finished cells", f"none of {len(every)} in {study.out}"
    )
    kappa_rows, difference_rows = sample_efficiency_tables(cells)
    note = ""
    if missing:
        note = f"partial: {len(missing)} of {len(every)} cells missing"
        budgets = [budget.to_json() for budget in study.budgets]
        kappa_rows = _with_missing(kappa_rows, budgets, missing)
        difference_rows = _with_missing(difference_rows, budgets, missing)
    write_table(kappa_rows, study.out, "kappa_by_budget", markdown=mark_references(kappa_rows))
    record_table_rows(study.out, "kappa_by_budget", names)
    write_table(
        difference_rows,
        study.out,
        "difference_to_reference",
        markdown=mark_references(difference_rows),
    )
    plot_sample_efficiency(cells, study.out / "sample_efficiency.png", note=note)
    draw_notes = write_axes_report(study, cells)
    for name in ("kappa_by_budget", "difference_to_reference", "difference_to_scratch"):
        if (study.out / f"{name}.md").is_file():
            print((study.out / f"{name}.md").read_text())
    if any(cell.method == POOL_CEILING for cell in cells):
        room = study.out / "ceiling_minus_scratch.md"
        print(
            f"The room for pretraining: ceiling - scratch ({POOL_CEILING}, a reference (oracle) "
            "row: its encoder was pretrained on the pool's own stage labels, which no user has; "
            "per draw, paired with scratch on the same labels)"
            + ("" if room.is_file() else ": none, no supervised row of the ceiling's arms")
        )
        if room.is_file():
            print(room.read_text())
        taken = study.out / "room_taken.md"
        if taken.is_file():
            print("The share of that room each pretrained row takes (its gain / the ceiling's)")
            print(taken.read_text())
    for line in draw_notes:
        print(f"repeated draws, {line}: those draws differ only in validation subjects and seed")
    if note:
        print(f"{note} (column 'missing' of kappa_by_budget): {named}")


def _with_missing(
    table: list[dict[str, Any]], budgets: Sequence[int | str], missing: Sequence[Cell]
) -> list[dict[str, Any]]:
    """``table`` (one row per budget, scarcest first) with a row for every budget and a
    ``missing`` column listing the unfinished cells of each."""
    by_budget = {row["budget"]: row for row in table}
    for budget in budgets:
        row = by_budget.setdefault(budget, {**dict.fromkeys(table[0], ""), "budget": budget})
        row["missing"] = " ".join(format_cell(c) for c in missing if c[2] == budget)
    return [by_budget[budget] for budget in budget_order(by_budget)]


def build_parser() -> argparse.ArgumentParser:
    """The command line of the recipe (the study options are those of ``sleep_staging``)."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.recipes.sample_efficiency",
        description="Kappa by number of fine-tuning subjects, seeds and methods; every cell "
        "resumable and never recomputed.",
    )
    parser.add_argument("stage", choices=COMMANDS, help="what to do")
    add_study_arguments(parser, Path("runs/sample_efficiency"), DEFAULT_METHODS)
    add_pool_arguments(parser)
    parser.add_argument(
        "--pool",
        help="pretrain: only this pool's pretrainings (e.g. 320h), so that pools pretrain in "
        "separate processes side by side; default: every pool, one after another",
    )
    parser.add_argument("--cell", help="run-cell: METHOD:ARM:BUDGET:SEED[:POOL]")
    parser.add_argument("--cell-index", type=int, help="run-cell: index into the `cells` list")
    parser.add_argument(
        "--jobs", type=int, default=1, help="run: pretrainings and cells in parallel processes"
    )
    add_worker_arguments(parser)
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="aggregate: write the tables from the finished cells when some have not finished "
        "(they list the missing cells); default: refuse",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recipe from the command line; returns the exit status. The rows are checked
    before ``--out`` is claimed, and a new ``--out`` is removed again when the command fails
    before writing anything into it."""
    args = build_parser().parse_args(argv)
    rows = selected_rows(args)
    _check_stage_options(args)
    with released_on_failure(args.out):
        _run_stage(args, rows)
    return 0


#: The options only some commands read: option -> (its attribute, its default, the commands).
_STAGE_OPTIONS = {
    "--pool": ("pool", None, ("pretrain",)),
    "--cell": ("cell", None, ("run-cell",)),
    "--cell-index": ("cell_index", None, ("run-cell",)),
    "--jobs": ("jobs", 1, ("run",)),
    "--backend": ("backend", "loky", ("run",)),
    "--scheduler": ("scheduler", None, ("run",)),
    "--allow-partial": ("allow_partial", False, ("run", "aggregate")),
    "--loader-workers": ("loader_workers", 0, ("pretrain", "run-cell", "run")),
    "--device": ("device", "auto", ("pretrain", "run-cell", "run")),
}


def _check_stage_options(args: argparse.Namespace) -> None:
    """Refuse options the command would ignore, and a number of parallel jobs of 0."""
    for option, (name, default, stages) in _STAGE_OPTIONS.items():
        check(
            args.stage in stages or getattr(args, name) == default,
            option,
            f"no {option} with the {args.stage} command (only {' and '.join(stages)} read it)",
            repr(getattr(args, name)),
        )
    check(args.jobs != 0, "--jobs", "a number of processes (>= 1; -1: every core)", "0")
    check_worker_options(args)


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the unlabelled axis: pretraining pools and their nights."""
    parser.add_argument(
        "--pools",
        type=float,
        nargs="+",
        metavar="HOURS",
        help="pretraining pool sizes in hours (nested pools of unlabelled nights, each "
        "pretrained to a budget chosen on held-out nights); default: one pretraining on the "
        "split's pretraining records",
    )
    parser.add_argument(
        "--pool-src",
        type=Path,
        default=None,
        help="PC18-format root of the unlabelled nights of the pools (e.g. a cohort written by "
        "partnd cohort --hours 8); default: the study's own unlabelled nights",
    )
    parser.add_argument(
        "--pool-store", type=Path, default=None, help="store of --pool-src (default: in --out)"
    )
    parser.add_argument(
        "--held-out-subjects",
        type=int,
        default=None,
        help="subjects held out of every pool to choose its pretraining budget on (default: "
        "the scale's)",
    )
    parser.add_argument(
        "--pool-patience",
        type=int,
        default=None,
        help="stop a pool's pretraining after this many held-out evaluations without a lower "
        "pretext error (default: the scale's)",
    )
    parser.add_argument(
        "--pool-eval-steps",
        type=int,
        default=None,
        help="steps between held-out evaluations of a pool's pretraining (default: the scale's)",
    )
    parser.add_argument(
        "--pool-segment-windows",
        type=int,
        default=None,
        help="PART across windows: windows per segment of a pool's pretraining (default: the "
        "scale's, 120 = 1 h at 30 s windows; on full-length nights 480 = 4 h, whose windows "
        "carry an order that 1-h segments of the middle of a night lack, docs/results/part.md); "
        "at most the length of the pool's and the held-out nights",
    )
    parser.add_argument(
        "--dtype",
        choices=SIGNAL_DTYPES,
        default="float32",
        help="on-disk signal dtype of the stores the study creates (float16: half the disk)",
    )


def pool_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`StudyConfig` fields of :func:`add_pool_arguments`' options (a segment
    length under 2 windows refused)."""
    windows = args.pool_segment_windows
    check(windows is None or windows >= 2, "--pool-segment-windows", "an int >= 2", repr(windows))
    overrides = {
        field: value
        for field, value in (
            ("patience", args.pool_patience),
            ("eval_every_steps", args.pool_eval_steps),
            ("segment_windows", args.pool_segment_windows),
        )
        if value is not None
    }
    return {
        "pools": None if args.pools is None else tuple(args.pools),
        "pool_src": args.pool_src,
        "pool_store": args.pool_store,
        "held_out_subjects": args.held_out_subjects,
        "pool_overrides": overrides,
        "signal_dtype": args.dtype,
    }


def _run_stage(args: argparse.Namespace, rows: list[tuple[str, str]]) -> None:
    """The stage ``args.stage`` of the study ``args`` describe, for ``rows``."""
    study = study_from_args(args, rows, **pool_settings(args))
    cells = cell_list(study, rows)
    if args.stage == "pretrain":
        check(
            args.pool is None or args.pool in study.pool_names,
            "--pool",
            f"one of the study's pools {list(study.pool_names)}",
            repr(args.pool),
        )
        for method, pool in dict.fromkeys((cell[0], cell[4]) for cell in cells):
            if method in pretrained_methods() and args.pool in (None, pool):
                study.run_pretraining(method, pool)
    elif args.stage == "cells":
        for cell in cells:
            done = " (done)" if study.cell_done(*cell) else ""
            print(f"{format_cell(cell)}{done}")
    elif args.stage == "run-cell":
        check(
            (args.cell is None) != (args.cell_index is None),
            "--cell",
            "exactly one of --cell and --cell-index",
            f"--cell {args.cell!r}, --cell-index {args.cell_index!r}",
        )
        if args.cell is not None:
            cell = parse_cell(args.cell)
            pools = f", pools {list(study.pool_names)}" if study.pool_names else ""
            check(
                cell in cells,
                "--cell",
                "a cell of this study (one line of the cells command: its rows, budgets "
                f"{[b.to_json() for b in study.budgets]}{pools} and seeds "
                f"{list(study.scale.seeds)}; a cell outside them would never be aggregated)",
                repr(args.cell),
            )
        else:
            check(
                0 <= args.cell_index < len(cells),
                "--cell-index",
                f"an index in [0, {len(cells)})",
                repr(args.cell_index),
            )
            cell = cells[args.cell_index]
        result = study.run_cell(*cell)
        print(f"{format_cell(cell)}: kappa {result.report.cohen_kappa:.3f}")
    elif args.stage == "run":
        run_cells(study, cells, args.jobs, args.backend, args.scheduler)
        aggregate(study, rows, args.allow_partial)
    else:
        aggregate(study, rows, args.allow_partial)


if __name__ == "__main__":  # one line and an exit status instead of a traceback
    sys.exit(run_recipe("python -m partnd.recipes.sample_efficiency", main, OPTIONS))
