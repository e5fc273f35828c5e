"""The transfer study's report: the self-supervised row chosen on validation subjects."""

from __future__ import annotations

import numpy as np

from partnd.evaluation.metrics import classification_metrics
from partnd.recipes.study_cell_store import CellResult
from partnd.recipes.transfer_report import CHOSEN_ROW, chosen_on_validation, kappa_rows

LABELS = np.array([0, 1, 2, 3, 4] * 4)
SUBJECTS = np.repeat(np.array(["a", "b", "c", "d"]), 5)


def cell(
    method: str, pool: str | None, seed: int, val_kappa: float | None, correct: int
) -> CellResult:
    """A night cell on budget ``1n`` whose first ``correct`` test windows are right."""
    predictions = LABELS.copy()
    predictions[correct:] = (predictions[correct:] + 1) % 5
    settings = {} if val_kappa is None else {"val_kappa": val_kappa}
    return CellResult(
        method=method,
        arm="night",
        budget="1n",
        seed=seed,
        subjects=(f"s{seed}",),
        report=classification_metrics(LABELS, predictions, 5),
        predictions=predictions,
        history=[],
        settings=settings,
        pool=pool,
        draw={"nights": [f"n{seed}"]},
    )


def test_each_draw_takes_the_self_supervised_row_best_on_validation() -> None:
    cells = [
        cell("supervised", None, 0, 0.99, 20),  # scratch: never a candidate
        cell("part_windows", "mixed", 0, 0.60, 8),
        cell("mae", "mixed", 0, 0.70, 12),
        cell("mae", "target", 0, 0.65, 20),  # best on test, not on validation
        cell("supervised", None, 1, 0.10, 20),
        cell("part_windows", "mixed", 1, 0.80, 16),
        cell("mae", "mixed", 1, 0.80, 4),  # a tie: the first in order wins
        cell("mae", "target", 1, None, 20),  # selected no checkpoint: not a candidate
    ]
    chosen = chosen_on_validation(cells)
    assert [(c.label, c.seed, c.settings["chosen"]) for c in chosen] == [
        (CHOSEN_ROW, 0, "mae+night @mixed"),
        (CHOSEN_ROW, 1, "part_windows+night @mixed"),
    ]
    assert np.array_equal(chosen[0].predictions, cells[2].predictions)
    assert chosen[0].report.cohen_kappa == cells[2].report.cohen_kappa
    assert chosen[1].draw == {"nights": ["n1"]} and chosen[1].settings["val_kappa"] == 0.80
    (row,) = [
        r
        for r in kappa_rows([*cells, *chosen], LABELS, SUBJECTS, 5, 2, 50)
        if r["row"] == CHOSEN_ROW
    ]
    expected = [cells[2].report.cohen_kappa, cells[5].report.cohen_kappa]
    assert row["draws"] == " ".join(f"{k:.3f}" for k in expected)
    assert row["val_kappa"].startswith("0.750 ± ")


def test_nothing_to_choose_with_one_self_supervised_row() -> None:
    cells = [
        cell("supervised", None, 0, 0.5, 20),
        cell("part_windows", "mixed", 0, 0.6, 8),
        cell("part_windows", "mixed", 1, 0.7, 8),
        cell("mae", "target", 0, None, 8),
    ]
    assert chosen_on_validation(cells) == []
