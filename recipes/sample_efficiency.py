"""Sample-efficiency study: kappa by number of fine-tuning subjects x seeds x methods.

The paper's appendix: fine-tune on 10 / 50 / 100 / 657 subjects (nested subsets, one chain per
seed from the saved split), 5 seeds, every method and arm (``window``, ``sequence``, ``probe``,
beside the classical rows); test on the same held-out subjects. Each (method, arm, budget, seed)
*cell* is its own resumable run under ``OUT/finetune/<method>/<arm>/b<B>_s<S>`` and is never
recomputed once finished; the pretrained encoders (``OUT/pretrain/<method>``) are shared by all
cells of a method (and with ``partnd.recipes.sleep_staging`` on the same ``--out``).

Commands (each skips what is finished)::

    python -m partnd.recipes.sample_efficiency pretrain  --out runs/se --methods part mae
    python -m partnd.recipes.sample_efficiency cells     --out runs/se --methods part mae supervised
    python -m partnd.recipes.sample_efficiency run-cell  --out runs/se --cell part:sequence:10:3
    python -m partnd.recipes.sample_efficiency run-cell  --out runs/se \
        --cell-index $SLURM_ARRAY_TASK_ID
    python -m partnd.recipes.sample_efficiency run       --out runs/se --jobs 2  # pretrain, cells
    python -m partnd.recipes.sample_efficiency aggregate --out runs/se

``cells`` prints one cell per line (``method:arm:budget:seed``), in a fixed order, so a cluster job
array can run cell ``--cell-index i`` per task after one ``pretrain`` job; ``run-cell`` runs only
cells of that list (the study's rows, budgets and seeds: others would never be aggregated).
``run --jobs N`` runs cells in N parallel processes with joblib. ``aggregate`` refuses a study
with unfinished cells, naming them (``--allow-partial`` writes the tables from the finished cells,
with a ``missing`` column); it writes ``kappa_by_budget.{csv,md,json}``
(mean ± std over seeds, the appendix layout with the paper's values), ``difference_to_reference.*``
(the per-seed paired difference to the reference row, the classical row with context when run)
and ``sample_efficiency.png``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partnd._validation import check
from partnd.objectives import list_objectives
from partnd.recipes.sleep_report import (
    plot_sample_efficiency,
    sample_efficiency_tables,
    write_table,
)
from partnd.recipes.sleep_staging import (
    DEFAULT_METHODS,
    SLEEP_OPTIONS,
    add_study_arguments,
    selected_rows,
    study_from_args,
)
from partnd.recipes.sleep_study import CellResult, SleepStudy
from partnd.recipes.study_directory import released_on_failure, run_recipe

__all__ = ["COMMANDS", "aggregate", "cell_list", "main", "parse_cell", "run_cells"]

COMMANDS = ("pretrain", "cells", "run-cell", "run", "aggregate")


Cell = tuple[str, str, int, int]


def cell_list(study: SleepStudy, rows: Sequence[tuple[str, str]]) -> list[Cell]:
    """Every (method, arm, budget, seed) of ``rows``, in a fixed order."""
    return [
        (method, arm, int(budget), int(seed))
        for method, arm in rows
        for budget in study.scale["budgets"]
        for seed in study.scale["seeds"]
    ]


def parse_cell(text: str) -> Cell:
    """``"part:sequence:10:3"`` -> ``("part", "sequence", 10, 3)``."""
    parts = text.split(":")
    check(
        len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit(),
        "--cell",
        "METHOD:ARM:BUDGET:SEED, e.g. part:sequence:10:3",
        repr(text),
    )
    return parts[0], parts[1], int(parts[2]), int(parts[3])


def _run_one(args: argparse.Namespace, cell: Cell) -> None:
    """One cell in its own process (joblib worker): reopen the study, run, discard the result."""
    study = study_from_args(argparse.Namespace(**{**vars(args), "overwrite": False}))
    study.run_cell(*cell)


def run_cells(
    study: SleepStudy, cells: Sequence[Cell], jobs: int, args: argparse.Namespace
) -> None:
    """Pretrain what the cells need, then run the unfinished cells (``jobs`` in parallel)."""
    for method in dict.fromkeys(method for method, _, _, _ in cells):
        if method in list_objectives():
            study.run_pretraining(method)
    todo = [cell for cell in cells if not study.cell_done(*cell)]
    print(f"{len(cells) - len(todo)} of {len(cells)} cells already finished")
    if jobs == 1:
        for cell in todo:
            study.run_cell(*cell)
        return
    from joblib import Parallel, delayed

    Parallel(n_jobs=jobs)(delayed(_run_one)(args, cell) for cell in todo)


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
    every = cell_list(study, rows)
    missing = [cell for cell in every if not study.cell_done(*cell)]
    named = ", ".join(":".join(map(str, cell)) for cell in missing[:10])
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
        kappa_rows = _with_missing(kappa_rows, study.scale["budgets"], missing)
        difference_rows = _with_missing(difference_rows, study.scale["budgets"], missing)
    write_table(kappa_rows, study.out, "kappa_by_budget")
    write_table(difference_rows, study.out, "difference_to_reference")
    plot_sample_efficiency(cells, study.out / "sample_efficiency.png", note=note)
    print((study.out / "kappa_by_budget.md").read_text())
    print((study.out / "difference_to_reference.md").read_text())
    if note:
        print(f"{note} (column 'missing' of kappa_by_budget): {named}")


def _with_missing(
    table: list[dict[str, Any]], budgets: Sequence[int], missing: Sequence[Cell]
) -> list[dict[str, Any]]:
    """``table`` (one row per budget) with a row for every budget and a ``missing`` column
    listing the unfinished cells of each."""
    by_budget = {row["subjects"]: row for row in table}
    for budget in budgets:
        row = by_budget.setdefault(budget, {**dict.fromkeys(table[0], ""), "subjects": budget})
        row["missing"] = " ".join(":".join(map(str, c)) for c in missing if c[2] == budget)
    return [by_budget[budget] for budget in sorted(by_budget)]


def build_parser() -> argparse.ArgumentParser:
    """The command line of the recipe (the study options are those of ``sleep_staging``)."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.recipes.sample_efficiency",
        description="Kappa by number of fine-tuning subjects, seeds and methods; every cell "
        "resumable and never recomputed.",
    )
    parser.add_argument("stage", choices=COMMANDS, help="what to do")
    add_study_arguments(parser, Path("runs/sample_efficiency"), DEFAULT_METHODS)
    parser.add_argument("--cell", help="run-cell: METHOD:ARM:BUDGET:SEED")
    parser.add_argument("--cell-index", type=int, help="run-cell: index into the `cells` list")
    parser.add_argument("--jobs", type=int, default=1, help="run: cells in parallel processes")
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
    "--cell": ("cell", None, ("run-cell",)),
    "--cell-index": ("cell_index", None, ("run-cell",)),
    "--jobs": ("jobs", 1, ("run",)),
    "--allow-partial": ("allow_partial", False, ("run", "aggregate")),
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


def _run_stage(args: argparse.Namespace, rows: list[tuple[str, str]]) -> None:
    """The stage ``args.stage`` of the study ``args`` describe, for ``rows``."""
    study = study_from_args(args, rows)
    args.overwrite = False  # parallel workers reopen the study as it now is
    cells = cell_list(study, rows)
    if args.stage == "pretrain":
        for method in dict.fromkeys(method for method, _ in rows):
            if method in list_objectives():
                study.run_pretraining(method)
    elif args.stage == "cells":
        for cell in cells:
            done = " (done)" if study.cell_done(*cell) else ""
            print(f"{':'.join(map(str, cell))}{done}")
    elif args.stage == "run-cell":
        check(
            (args.cell is None) != (args.cell_index is None),
            "--cell",
            "exactly one of --cell and --cell-index",
            f"--cell {args.cell!r}, --cell-index {args.cell_index!r}",
        )
        if args.cell is not None:
            cell = parse_cell(args.cell)
            check(
                cell in cells,
                "--cell",
                "a cell of this study (one line of the cells command: its rows, budgets "
                f"{list(study.scale['budgets'])} and seeds {list(study.scale['seeds'])}; a cell "
                "outside them would never be aggregated)",
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
        print(f"{':'.join(map(str, cell))}: kappa {result.report.cohen_kappa:.3f}")
    elif args.stage == "run":
        run_cells(study, cells, args.jobs, args)
        aggregate(study, rows, args.allow_partial)
    else:
        aggregate(study, rows, args.allow_partial)


if __name__ == "__main__":  # one line and an exit status instead of a traceback
    sys.exit(run_recipe("python -m partnd.recipes.sample_efficiency", main, SLEEP_OPTIONS))
