"""The sample-efficiency figures and tables: rows told apart by colour (method, lighter for a
smaller pool) and line style (arm), budgets scarcest first, paired differences per draw."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from partnd.evaluation.metrics import classification_metrics
from partnd.recipes.report_files import write_table
from partnd.recipes.sample_efficiency_report import (
    draw_rows,
    paired_differences,
    plot_kappa_by_pool,
    plot_pool_pretext,
    repeated_draws,
    scratch_summary,
)
from partnd.recipes.sleep_report import (
    ARM_LINESTYLES,
    REFERENCE_METHODS,
    budget_order,
    plot_sample_efficiency,
    sample_efficiency_styles,
    sample_efficiency_tables,
)
from partnd.recipes.sleep_study import ARMS, CLASSICAL_METHODS, CellResult

METHODS = ("classical", "yasa_pretrained", "supervised", "part_windows", "mae", "part", "mp3")


def make_cell(method: str, arm: str, budget: int, seed: int) -> CellResult:
    """A finished cell whose kappa grows with the budget and differs by row."""
    rng = np.random.default_rng(seed + 10 * budget + 100 * METHODS.index(method))
    labels = rng.integers(0, 5, 200)
    predictions = np.where(rng.random(200) < 0.3 + 0.05 * budget, labels, rng.integers(0, 5, 200))
    return CellResult(
        method=method,
        arm=arm,
        budget=budget,
        seed=seed,
        subjects=tuple(f"s{i}" for i in range(budget)),
        report=classification_metrics(labels, predictions, num_classes=5),
        predictions=predictions,
        history=[],
        settings={},
    )


def all_cells() -> list[CellResult]:
    return [
        make_cell(method, arm, budget, seed)
        for method in METHODS
        for arm in ARMS
        for budget in (2, 4, 8)
        for seed in (0, 1)
    ]


def test_every_method_has_its_own_colour_and_every_arm_its_line_style() -> None:
    cells = all_cells()  # 7 methods x 3 arms = 21 rows: more than the 10-colour default cycle
    styles = sample_efficiency_styles(cells)
    assert set(styles) == {cell.label for cell in cells}
    colour_of = {cell.method: styles[cell.label][0] for cell in cells}
    assert len({tuple(colour) for colour in colour_of.values()}) == len(METHODS)
    for cell in cells:
        colour, linestyle = styles[cell.label]
        assert tuple(colour) == tuple(colour_of[cell.method])
        assert linestyle == ARM_LINESTYLES[cell.arm]
    assert len({styles[label] for label in styles}) == len(styles)  # no two rows look alike
    assert set(ARM_LINESTYLES) == set(ARMS)  # every arm a study runs has its line style
    assert set(REFERENCE_METHODS) == set(CLASSICAL_METHODS)  # drawn beside every panel


def test_the_figure_is_written_with_the_legend_beside_the_axes(tmp_path: Path) -> None:
    path = tmp_path / "sample_efficiency.png"
    plot_sample_efficiency(all_cells(), path)
    image = matplotlib.image.imread(path)
    assert image.shape[1] / image.shape[0] > 1.6  # 8 x 4.5 in: room for the legend beside
    assert not list(tmp_path.glob("*.tmp*"))


def pooled_cell(
    method: str, arm: str, budget: int | str, seed: int, pool: str | None, kappa: float
) -> CellResult:
    """A finished cell of known kappa (predictions agree with the truth on a share of windows)."""
    labels = np.arange(200) % 5
    predictions = labels.copy()
    wrong = np.random.default_rng(seed).permutation(200)[: round(200 * (1 - kappa) * 0.8)]
    predictions[wrong] = (labels[wrong] + 1) % 5
    draw = {"subjects": [f"s{seed}"], "validation": [f"v{seed}"]}
    if str(budget).startswith("w"):
        draw["windows"] = {"counts": {"W": 3, "N1": 2, "N2": 3, "N3": 3, "REM": 3}}
    return CellResult(
        method=method,
        arm=arm,
        budget=budget,
        seed=seed,
        subjects=(f"s{seed}",),
        report=classification_metrics(labels, predictions, num_classes=5),
        predictions=predictions,
        history=[],
        settings={},
        pool=pool,
        draw=draw,
    )


def axes_cells() -> list[CellResult]:
    """Three budgets x three draws, two pools; a draw's kappas skewed (mean != median)."""
    cells = []
    for budget in (2, "w20", 1):
        for seed in (0, 1, 2):
            skew = 0.03 * seed**2
            for pool, gain in (("8h", 0.05), ("80h", 0.1)):
                part = 0.55 + gain + skew
                cells.append(pooled_cell("part_windows", "sequence", budget, seed, pool, part))
                cells.append(pooled_cell("mae", "probe", budget, seed, pool, 0.4 + gain + skew))
            cells.append(pooled_cell("supervised", "sequence", budget, seed, None, 0.6 - skew))
            cells.append(pooled_cell("supervised", "probe", budget, seed, None, 0.3 + skew))
            cells.append(pooled_cell("classical", "sequence", budget, seed, None, 0.8 - skew))
    return cells


def test_pools_get_lighter_shades_of_their_methods_colour_and_budgets_sort_scarcest_first(
    tmp_path: Path,
) -> None:
    cells = axes_cells()
    styles = sample_efficiency_styles(cells)
    small, large = styles["part_windows+seq @8h"][0], styles["part_windows+seq @80h"][0]
    assert small != large and min(small[:3]) > min(large[:3])  # the smaller pool is lighter
    assert styles["supervised+seq"][1] == styles["part_windows+seq @8h"][1] == "--"
    assert len(set(styles.values())) == len(styles)
    assert budget_order([2, "w20", 1, "w5", 8]) == ["w5", "w20", 1, 2, 8]
    kappa_rows, _ = sample_efficiency_tables(cells)
    assert [row["budget"] for row in kappa_rows] == ["w20", 1, 2]
    assert kappa_rows[0]["paper_part"] == "" and kappa_rows[1]["part_windows+seq @80h"].endswith(
        "(n=3)"
    )
    plot_sample_efficiency(cells, tmp_path / "se.png")
    plot_kappa_by_pool(cells, {"8h": 8.1, "80h": 80.4}, "w20", tmp_path / "pool.png")
    curves = {
        ("part_windows", "8h"): {
            "train": [(10, 1.0), (20, 0.8)],
            "heldout": [(10, 0.9), (20, 0.85)],
        },
        ("part_windows", "80h"): {"train": [(10, 1.0), (20, 0.7)], "heldout": [(10, 0.8)]},
    }
    selected = {("part_windows", "8h"): 20, ("part_windows", "80h"): 10}
    plot_pool_pretext(curves, selected, tmp_path / "pretext.png")
    for name in ("se.png", "pool.png", "pretext.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_paired_differences_per_draw_against_the_same_arm_from_scratch() -> None:
    cells = axes_cells()
    rows = paired_differences(cells)
    by_row = {(r["budget"], r["seed"], r["row"]): r for r in rows}
    kappa = {(c.label, c.budget, c.seed): c.report.cohen_kappa for c in cells}
    first = by_row[("w20", 1, "part_windows+seq @80h")]
    assert first["baseline"] == "supervised+seq"
    assert first["kappa"] == round(kappa[("part_windows+seq @80h", "w20", 1)], 4)
    assert first["difference"] == pytest.approx(
        kappa[("part_windows+seq @80h", "w20", 1)] - kappa[("supervised+seq", "w20", 1)], abs=1e-4
    )
    assert first["labelled"] == "14 windows (3/2/3/3/3 per stage) of s1"
    assert by_row[(2, 0, "mae probe @8h")]["baseline"] == "supervised probe"
    assert [r["budget"] for r in rows][:4] == ["w20"] * 4  # scarcest first
    assert len(rows) == 3 * 3 * 4  # budgets x seeds x pooled rows; classical has no baseline
    summary_rows = scratch_summary(rows)
    line = summary_rows[0]["part_windows+seq @80h - supervised+seq"]
    values = [
        r["difference"]
        for r in rows
        if r["budget"] == "w20" and r["row"] == "part_windows+seq @80h"
    ]
    assert line.startswith(f"{np.mean(values):.3f} ± ") and line.endswith(
        f", {sum(v > 0 for v in values)}/3 > 0"
    )
    draws = draw_rows(cells)
    assert [(r["budget"], r["seed"]) for r in draws][:3] == [("w20", 0), ("w20", 1), ("w20", 2)]
    assert draws[0]["labelled_windows"] == 14 and draws[0]["per_stage"] == "3/2/3/3/3"
    assert draws[3]["labelled_windows"] == "all" and draws[3]["validation_subjects"] == "v0"


def test_a_partial_study_writes_rows_with_different_columns(tmp_path: Path) -> None:
    """A pool's cells finished at one budget only (``aggregate --allow-partial``): the summary's
    rows hold different columns, and every table file gets their union, the missing cells empty
    (the CSV writer used to refuse the second budget's extra column)."""
    cells = [
        pooled_cell(method, "night", budget, seed, pool, 0.5 + 0.1 * (method == "mae"))
        for budget in ("w20", 1)
        for seed in (0, 1)
        for method, pool in (("supervised", None), ("mae", "320h"))
    ]
    cells += [pooled_cell("mae", "night", 1, seed, "16h", 0.7) for seed in (0, 1)]
    summary_rows = scratch_summary(paired_differences(cells))
    extra = "mae+night @16h - supervised+night"
    assert [extra in row for row in summary_rows] == [False, True]
    write_table(summary_rows, tmp_path, "summary")
    with (tmp_path / "summary.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert list(written[0]) == [
        "budget",
        "labelled_sets",
        "mae+night @320h - supervised+night",
        extra,
    ]
    assert written[0][extra] == "" and written[1][extra] == summary_rows[1][extra]
    markdown = (tmp_path / "summary.md").read_text().splitlines()
    assert markdown[0].endswith(f"| {extra} |") and markdown[2].endswith("|  |")
    assert json.loads((tmp_path / "summary.json").read_text()) == summary_rows


def test_draws_that_label_the_same_subjects_are_counted_and_named() -> None:
    """Independent one-subject draws from a small pool repeat subjects: the summary counts the
    distinct sets of labels, and a note names the repeated ones (window budgets, whose draws
    differ by their windows, are never reported)."""
    cells = []
    for seed, subject in enumerate(["a", "a", "b", "a", "b"]):
        for method in ("part_windows", "supervised"):
            cell = pooled_cell(
                method, "night", 1, seed, None, 0.6 + 0.05 * (method != "supervised")
            )
            cell.draw["subjects"] = [subject]
            cells.append(cell)
        for method in ("part_windows", "supervised"):
            cell = pooled_cell(method, "night", "w20", seed, None, 0.5)
            cell.draw["subjects"] = ["a"]
            cells.append(cell)
    summary_rows = scratch_summary(paired_differences(cells))
    assert [(r["budget"], r["labelled_sets"]) for r in summary_rows] == [("w20", 5), (1, 2)]
    assert repeated_draws(draw_rows(cells)) == [
        "budget 1: 5 draws label 2 distinct sets of subjects (a x3, b x2)"
    ]
    distinct = [c for c in cells if c.budget == 1 and c.seed in (0, 2)]
    assert repeated_draws(draw_rows(distinct)) == []


def test_both_axes_figures_plot_the_aggregated_means_and_every_draw(
    tmp_path: Path, drawn_figures: dict
) -> None:
    """The budget figure plots, per panel and row (one line per pool), the mean over draws that
    the kappa table reports at every budget and every draw as a dot; the pool figure plots the
    mean over draws at each pool's hours at the scarcest budget and the rows without a pool as
    horizontal lines at their mean."""
    cells = axes_cells()
    kappa = {}
    for cell in cells:
        kappa.setdefault((cell.label, cell.budget), []).append(cell.report.cohen_kappa)
    table = {row["budget"]: row for row in sample_efficiency_tables(cells)[0]}
    plot_sample_efficiency(cells, tmp_path / "se.png")
    budgets = ["w20", 1, 2]
    panels = drawn_figures["se.png"]
    assert set(panels) == {"sequence arm", "probe arm"}
    for title, panel in panels.items():
        arm = title.split()[0]
        drawn = [c for c in cells if c.arm == arm or c.method in CLASSICAL_METHODS]
        assert set(panel["lines"]) == {c.label for c in drawn}  # one line per row and pool
        for label, (xs, ys) in panel["lines"].items():
            assert xs == [0, 1, 2]  # every budget, scarcest first
            means = [np.mean(kappa[(label, budget)]) for budget in budgets]
            np.testing.assert_allclose(ys, means, atol=1e-12)
            for budget, y in zip(budgets, ys, strict=True):
                assert table[budget][label].startswith(f"{y:.3f} ± ")  # the table's mean
        assert sorted(panel["dots"]) == pytest.approx(
            sorted(c.report.cohen_kappa for c in drawn)
        )  # every draw of every row drawn in the panel
    assert kappa[("part_windows+seq @80h", 1)] != kappa[("part_windows+seq @8h", 1)]

    hours = {"8h": 8.1, "80h": 80.4}
    plot_kappa_by_pool(cells, hours, "w20", tmp_path / "pool.png")
    (panel,) = drawn_figures["pool.png"].values()
    assert set(panel["lines"]) == {
        "part_windows+seq", "mae probe", "supervised+seq (no pool)",
        "supervised probe (no pool)", "classical+seq (no pool)",
    }  # fmt: skip
    for row in ("part_windows+seq", "mae probe"):
        xs, ys = panel["lines"][row]
        assert xs == [8.1, 80.4]
        means = [np.mean(kappa[(f"{row} @{pool}", "w20")]) for pool in ("8h", "80h")]
        np.testing.assert_allclose(ys, means, atol=1e-12)
    _, ys = panel["lines"]["supervised+seq (no pool)"]
    assert ys == pytest.approx([np.mean(kappa[("supervised+seq", "w20")])] * 2)
    pooled = [c.report.cohen_kappa for c in cells if c.budget == "w20" and c.pool is not None]
    assert sorted(panel["dots"]) == pytest.approx(sorted(pooled))  # every pooled draw at w20
    for name in ("se.png", "pool.png"):
        assert (tmp_path / name).stat().st_size > 1000
