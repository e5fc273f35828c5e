"""Tests of the recipes' shared report files (tables and figures)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.pyplot as plt

from partnd.recipes.report_files import save_figure, write_table


def test_write_table_keeps_every_column_in_order_and_leaves_missing_cells_empty(
    tmp_path: Path,
) -> None:
    rows = [{"row": "part", "kappa": 0.61}, {"row": "mae", "f1": 0.5, "kappa": 0.6}]
    write_table(rows, tmp_path, "results")
    with (tmp_path / "results.csv").open() as handle:
        read = list(csv.DictReader(handle))
    assert list(read[0]) == ["row", "kappa", "f1"]
    assert read == [
        {"row": "part", "kappa": "0.61", "f1": ""},
        {"row": "mae", "kappa": "0.6", "f1": "0.5"},
    ]
    assert (tmp_path / "results.md").read_text().splitlines() == [
        "| row | kappa | f1 |",
        "|---|---|---|",
        "| part | 0.61 |  |",
        "| mae | 0.6 | 0.5 |",
    ]
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "results.csv",
        "results.json",
        "results.md",
    ]


def test_save_figure_writes_a_png_and_closes_the_figure(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    save_figure(fig, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").read_bytes().startswith(b"\x89PNG")
    assert not plt.fignum_exists(fig.number)
