"""What the demo shows a reader: ``results.md`` with the columns a reader compares (the full
table stays in CSV and JSON), and the confusion matrices as a grid readable at 100 % zoom."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from partnd._validation import InputError
from partnd.evaluation.metrics import classification_metrics
from partnd.recipes.report_files import write_table
from partnd.recipes.sleep_report import (
    confusion_figure,
    plot_confusion_matrices,
    staging_table,
    summary_table,
)
from partnd.recipes.sleep_staging import DEFAULT_ROWS
from partnd.recipes.sleep_study import CellResult

STAGES = ["W", "N1", "N2", "N3", "REM"]
ROWS = list(DEFAULT_ROWS)  # the demo's rows


def _cells(truth: np.ndarray, rows: list[tuple[str, str]]) -> list[CellResult]:
    """One cell per row, each right on a different share of the windows."""
    rng = np.random.default_rng(0)
    cells = []
    for index, (method, arm) in enumerate(rows):
        right = rng.random(len(truth)) < 0.4 + 0.07 * index
        predictions = np.where(right, truth, rng.integers(0, 5, len(truth)))
        cells.append(
            CellResult(
                method=method,
                arm=arm,
                budget=2,
                seed=0,
                subjects=("s0", "s1"),
                report=classification_metrics(truth, predictions, 5, STAGES),
                predictions=predictions,
                history=[],
                settings={},
            )
        )
    return cells


@pytest.fixture(scope="module")
def table_and_cells() -> tuple[list[dict], list[CellResult]]:
    truth = np.random.default_rng(1).integers(0, 5, 400)
    subjects = np.repeat([f"t{i}" for i in range(8)], 50)
    cells = _cells(truth, ROWS)
    table = staging_table(cells, truth, subjects, STAGES, {"part_windows": 200}, n_boot=50)
    return table, cells


def test_results_md_holds_the_compared_columns_and_the_csv_the_full_table(
    table_and_cells: tuple[list[dict], list[CellResult]], tmp_path: Path
) -> None:
    table, _ = table_and_cells
    write_table(table, tmp_path, "results", markdown=summary_table(table, "classical+seq"))
    lines = (tmp_path / "results.md").read_text().splitlines()
    assert lines[0] == (
        "| row | labels | kappa [95% CI] | difference to classical+seq [95% CI] | macro-F1 "
        "| N1 F1 |"
    )
    assert len(lines) == 2 + len(ROWS)
    by_row = {row["row"]: row for row in table}
    cells = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert list(cells) == [row["row"] for row in table]
    supervised = by_row["supervised"]
    assert cells["supervised"] == (
        f"| supervised | 2 | {supervised['kappa']:.3f} [{supervised['kappa_low']:.3f}, "
        f"{supervised['kappa_high']:.3f}] | {supervised['delta_kappa']:+.3f} "
        f"[{supervised['delta_low']:+.3f}, {supervised['delta_high']:+.3f}] | "
        f"{supervised['macro_f1']:.3f} | {supervised['f1_N1']:.3f} |"
    )
    assert " | — | " in cells["classical+seq"]  # the reference row has no difference
    assert cells["yasa_pretrained+seq"].startswith("| yasa_pretrained+seq | 0 | ")
    # the full table stays in the CSV and JSON
    with open(tmp_path / "results.csv") as handle:
        header = next(csv.reader(handle))
    assert {"kappa_low", "delta_high", "accuracy", "f1_W", "f1_REM", "pt_steps"} <= set(header)
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(table))


def test_the_confusion_matrices_are_a_grid_of_titled_panels(
    table_and_cells: tuple[list[dict], list[CellResult]], tmp_path: Path
) -> None:
    _, cells = table_and_cells
    figure = confusion_figure(cells, STAGES)
    shown = [ax for ax in figure.axes if ax.get_visible()]
    assert len(shown) == 8
    positions = [ax.get_subplotspec() for ax in shown]
    assert [(p.rowspan.start, p.colspan.start) for p in positions] == [
        (row, column) for row in range(2) for column in range(4)
    ]
    for ax, cell in zip(shown, cells, strict=True):
        assert ax.get_title() == f"{cell.label}\nκ = {cell.report.cohen_kappa:.3f}"
        rates = ax.images[0].get_array()
        assert np.allclose(np.asarray(rates).sum(axis=1), 1.0)  # each true stage's row
    # five panels: two rows of four, the last three panels hidden; three: one row
    five, three = confusion_figure(cells[:5], STAGES), confusion_figure(cells[:3], STAGES)
    assert sum(ax.get_visible() for ax in five.axes) == 5 and len(five.axes) == 8
    assert len(three.axes) == 3
    for opened in (figure, five, three):
        plt.close(opened)
    with pytest.raises(InputError, match="results"):
        confusion_figure([], STAGES)
    # at 120 dpi the 8-panel grid is at most about 1,650 pixels wide: readable at 100 %
    plot_confusion_matrices(cells, STAGES, tmp_path / "confusion_matrices.png")
    height, width, _ = matplotlib.image.imread(tmp_path / "confusion_matrices.png").shape
    assert 1400 <= width <= 1700 and 600 <= height <= 900
