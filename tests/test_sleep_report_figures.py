"""The sample-efficiency figure: rows told apart by colour (method) and line style (arm)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np

from partnd.metrics import classification_metrics
from partnd.recipes.sleep_report import (
    ARM_LINESTYLES,
    plot_sample_efficiency,
    sample_efficiency_styles,
)
from partnd.recipes.sleep_study import ARMS, CellResult

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


def test_the_figure_is_written_with_the_legend_beside_the_axes(tmp_path: Path) -> None:
    path = tmp_path / "sample_efficiency.png"
    plot_sample_efficiency(all_cells(), path)
    image = matplotlib.image.imread(path)
    assert image.shape[1] / image.shape[0] > 1.6  # 8 x 4.5 in: room for the legend beside
    assert not list(tmp_path.glob("*.tmp*"))
