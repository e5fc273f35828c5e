"""Tables and figure of the transfer study (:mod:`partnd.recipes.transfer_study`).

Written into the study directory from its finished cells:

* ``transfer_kappa.{csv,md,json}``: per row and target budget, kappa on the target's test
  subjects as mean ± std over draws, its 95 % cluster-bootstrap interval over test subjects (the
  mean over draws recomputed on each resample of subjects, :mod:`partnd.evaluation.bootstrap`),
  every draw's kappa, how many draws are missing, and the validation kappa of the checkpoints
  selected (mean ± std over draws; blank for a row that selects none): the column to choose a
  row or a pool by, since the test kappa must not choose;
* ``transfer_differences.{csv,md,json}``: per budget and draw, every row minus scratch
  (``supervised+night``) and minus classical+seq on the same draw, what the draw labelled and
  the selected checkpoint's validation kappa;
* ``transfer_difference_summary.{csv,md,json}``: those differences as mean ± std over draws, how
  many draws are positive and how many distinct sets of labelled nights the draws hold;
* ``transfer.png``: kappa against the target's labels, one line per row (mean over draws, min-max
  band, every draw a dot);
* in every table and the figure, when the study holds two or more self-supervised rows, the row
  ``self-supervised by validation`` (:data:`CHOSEN_ROW`): on each draw, the self-supervised row
  (a method on a pool) whose selected checkpoint has the highest validation kappa, which is
  what a user choosing the method and the pool on validation subjects would get;
* ``config.json``: the study's resolved settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from partnd.datasets.label_budget import LabelBudget
from partnd.engine.checkpoint import atomic_write_json
from partnd.evaluation.bootstrap import bootstrap_metric
from partnd.evaluation.metrics import classification_metrics
from partnd.recipes.report_files import save_figure, write_table
from partnd.recipes.sleep_report import budget_order, plot_spread, summary
from partnd.recipes.study_cell_store import CellResult
from partnd.recipes.study_tasks import Cell

if TYPE_CHECKING:
    from partnd.recipes.transfer_study import Row, TransferStudy

__all__ = [
    "CHOSEN_ROW",
    "REFERENCES",
    "chosen_on_validation",
    "difference_rows",
    "kappa_rows",
    "plot_transfer",
    "write_report",
]

#: The rows every other row is paired with on each draw: scratch and classical+seq.
REFERENCES = ("supervised+night", "classical+seq")


_CHOSEN_METHOD, _CHOSEN_ARM = "self-supervised", "by validation"
#: The label of the self-supervised row chosen on validation (:func:`chosen_on_validation`).
CHOSEN_ROW = f"{_CHOSEN_METHOD} {_CHOSEN_ARM}"

#: Line style by pretraining pool: the mixed pool dashed, the target's nights dotted.
_POOL_STYLES = {"mixed": "--", "target": ":"}


def _kappa(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> float:
    return float(classification_metrics(labels, predictions, num_classes).cohen_kappa)


def _val_kappa(cell: CellResult) -> float | None:
    """The validation kappa of the checkpoint ``cell`` selected (``None``: it selected none)."""
    value = cell.settings.get("val_kappa")
    return None if value is None else float(value)


def chosen_on_validation(cells: Sequence[CellResult]) -> list[CellResult]:
    """Per budget and draw, the self-supervised cell (one pretrained on a pool) whose selected
    checkpoint has the highest validation kappa (the first in ``cells``' order on a tie), as a
    cell of the row :data:`CHOSEN_ROW` whose ``settings["chosen"]`` names the row it took.

    Only the target's validation subjects choose; the test kappa never does. Empty unless two
    or more self-supervised rows have a validation kappa (with one there is nothing to choose).

    Args:
        cells: Finished cells of the study.
    """
    scored = [(k, c) for c in cells if c.pool is not None and (k := _val_kappa(c)) is not None]
    if len({c.label for _, c in scored}) < 2:
        return []
    chosen = []
    for key in dict.fromkeys((c.budget, c.seed) for _, c in scored):
        _, best = max(((k, c) for k, c in scored if (c.budget, c.seed) == key), key=itemgetter(0))
        settings = {**best.settings, "chosen": best.label}
        chosen.append(
            replace(best, method=_CHOSEN_METHOD, arm=_CHOSEN_ARM, pool=None, settings=settings)
        )
    return chosen


def kappa_rows(
    cells: Sequence[CellResult],
    labels: np.ndarray,
    subjects: np.ndarray,
    num_classes: int,
    expected_draws: int,
    n_boot: int = 1000,
) -> list[dict[str, Any]]:
    """One row per (row, budget): kappa mean ± std over draws, the 95 % bootstrap interval of
    that mean over test subjects, every draw's kappa, the number of missing draws and
    ``val_kappa``, the selected checkpoints' validation kappa as mean ± std over the draws that
    selected one (blank when none did).

    Args:
        cells: Finished cells.
        labels: [n_test] stages of the test windows.
        subjects: [n_test] subject of every test window.
        num_classes: Stages.
        expected_draws: Draws every (row, budget) should have.
        n_boot: Bootstrap replicates (the same subject resamples for every row: seed 0).
    """
    table = []
    for budget in budget_order(cell.budget for cell in cells):
        for label in dict.fromkeys(cell.label for cell in cells):
            mine = sorted(
                (c for c in cells if c.label == label and c.budget == budget), key=lambda c: c.seed
            )
            if not mine:
                continue
            predictions = np.stack([cell.predictions for cell in mine])
            index = np.arange(len(labels))

            def mean_kappa(
                _: np.ndarray, picked: np.ndarray, runs: np.ndarray = predictions
            ) -> float:
                return float(
                    np.mean([_kappa(labels[picked], run[picked], num_classes) for run in runs])
                )

            interval = bootstrap_metric(index, index, subjects, mean_kappa, n_boot=n_boot)
            kappas = [cell.report.cohen_kappa for cell in mine]
            validation = [k for k in map(_val_kappa, mine) if k is not None]
            table.append(
                {
                    "budget": budget,
                    "row": label,
                    "kappa": summary(kappas),
                    "ci95": f"[{interval.low:.3f}, {interval.high:.3f}]",
                    "draws": " ".join(f"{k:.3f}" for k in kappas),
                    "missing": max(0, expected_draws - len(mine)),
                    "val_kappa": summary(validation),
                }
            )
    return table


def difference_rows(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """Per budget and draw, every row's kappa minus each of :data:`REFERENCES` on that draw,
    and ``val_kappa``, the validation kappa of the checkpoint it selected (blank: none)."""
    by_key = {(c.label, c.budget, c.seed): c for c in cells}
    rows = []
    for budget in budget_order(cell.budget for cell in cells):
        for cell in sorted((c for c in cells if c.budget == budget), key=lambda c: c.seed):
            line: dict[str, Any] = {"budget": budget, "seed": cell.seed, "row": cell.label}
            line["kappa"] = round(cell.report.cohen_kappa, 4)
            line["labelled"] = ",".join(cell.draw.get("nights") or cell.draw.get("subjects") or [])
            for reference in REFERENCES:
                base = by_key.get((reference, budget, cell.seed))
                line[f"minus {reference}"] = (
                    ""
                    if base is None or base is cell
                    else round(cell.report.cohen_kappa - base.report.cohen_kappa, 4)
                )
            validation = _val_kappa(cell)
            line["val_kappa"] = "" if validation is None else round(validation, 4)
            rows.append(line)
    return rows


def difference_summary(differences: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`difference_rows` per budget and row: mean ± std over draws and positive draws,
    and ``labelled_sets``, how many distinct sets of labelled nights (or subjects) its draws hold
    (independent draws from a small pool repeat some; a draw of windows per stage is its own)."""
    table = []
    for budget in budget_order(row["budget"] for row in differences):
        for label in dict.fromkeys(row["row"] for row in differences if row["budget"] == budget):
            mine = [r for r in differences if r["budget"] == budget and r["row"] == label]
            by_windows = LabelBudget.parse(budget).windows_per_stage is not None
            labelled = {r["seed"] if by_windows else r["labelled"] for r in mine if r["labelled"]}
            line: dict[str, Any] = {"budget": budget, "row": label, "labelled_sets": len(labelled)}
            for reference in REFERENCES:
                values = [
                    r[f"minus {reference}"]
                    for r in differences
                    if r["budget"] == budget and r["row"] == label and r[f"minus {reference}"] != ""
                ]
                positive = sum(value > 0 for value in values)
                line[f"minus {reference}"] = (
                    f"{summary(values)}, {positive}/{len(values)} > 0" if values else ""
                )
            table.append(line)
    return table


def plot_transfer(cells: Sequence[CellResult], path: Any, title: str) -> None:
    """Kappa against the target's label budget (scarcest first, evenly spaced), one line per
    row: mean over draws, min-max band and every draw as a dot."""
    budgets = budget_order(cell.budget for cell in cells)
    labels = list(dict.fromkeys(cell.label for cell in cells))
    palette = plt.get_cmap("tab20" if len(labels) > 10 else "tab10")
    pools = {cell.label: cell.pool for cell in cells}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, label in enumerate(labels):
        present = [b for b in budgets if any(c.label == label and c.budget == b for c in cells)]
        xs = [float(budgets.index(b)) for b in present]
        values = [
            [c.report.cohen_kappa for c in cells if c.label == label and c.budget == b]
            for b in present
        ]
        linestyle = _POOL_STYLES.get(pools[label], "-")
        plot_spread(ax, xs, values, palette(index % palette.N), linestyle, label)
    ax.set_xticks(range(len(budgets)), [str(b) for b in budgets])
    ax.set_xlabel("target labels (wK: windows per stage, Nn: nights, N: subjects)")
    ax.set_ylabel("Cohen's kappa on target test subjects")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def write_report(study: TransferStudy, rows: Sequence[Row], cells: Sequence[Cell]) -> None:
    """Write the tables, the figure and ``config.json`` from the finished ``cells`` of
    ``rows`` (a partial study gives partial tables: column ``missing``)."""
    finished = [study.load_cell(*cell) for cell in cells if study.cell_done(*cell)]
    finished += chosen_on_validation(finished)
    config = study.config
    atomic_write_json(
        {**config.settings, "rows": [list(r) for r in rows]}, study.out / "config.json"
    )
    if not finished:
        print(f"no finished cell of {len(cells)} yet in {study.out}")
        return
    labels = study.test_set.labels.astype(np.int64)
    table = kappa_rows(
        finished, labels, study.test_subjects, len(study.class_names), len(study.scale.seeds)
    )
    write_table(table, study.out, "transfer_kappa")
    differences = difference_rows(finished)
    write_table(differences, study.out, "transfer_differences")
    write_table(difference_summary(differences), study.out, "transfer_difference_summary")
    title = f"{config.target} from {' + '.join(config.sources)}: kappa by target labels"
    plot_transfer(finished, study.out / "transfer.png", title)
    for name in ("transfer_kappa", "transfer_difference_summary"):
        print((study.out / f"{name}.md").read_text())
    if len(finished) < len(cells):
        print(f"partial: {len(cells) - len(finished)} of {len(cells)} cells unfinished")
