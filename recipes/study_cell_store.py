"""Where a sleep study keeps its cells, and how a cell is written and read back.

One cell, a method's arm trained on the draw of a label budget for a seed (on a pool's encoder for
a pretrained method with pools), lives in ``OUT/finetune/<method>/<arm>/b<B>_s<S>[_p<pool>]/``:
``predictions.npy`` (the predicted stage per test window, test-set order) is written first and
``result.json`` (the draw, the test metrics, the settings used) last, both atomically, so that
``result.json`` marks a finished cell (:meth:`~partnd.engine.run_dir.RunDir.finished`) and an
interrupted cell never looks finished. A fine-tuned cell's engine run is ``<cell>/run/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from partnd.datasets.label_budget import LabelBudget
from partnd.engine.checkpoint import atomic_save
from partnd.engine.run_dir import RunDir
from partnd.evaluation.metrics import ClassificationReport

__all__ = ["BudgetLike", "CellResult", "CellStore", "save_npy"]

#: A label budget as a study accepts it: parsed, a number of labelled subjects (``2``) or as
#: written (``"w20"``, windows per stage).
BudgetLike = LabelBudget | int | str


@dataclass(frozen=True)
class CellResult:
    """A finished cell: one method and arm, trained on a draw of ``budget`` labels with ``seed``.

    Attributes:
        method: Method name.
        arm: ``"window"``, ``"sequence"`` or ``"probe"``.
        budget: The label budget as written: a number of labelled subjects (``2``) or of
            windows per stage (``"w20"``).
        seed: Seed of the draw (labelled and validation subjects) and of training.
        subjects: The labelled subjects (those whose windows carry the labels; none for a row
            that uses no labels).
        report: Metrics on the test subjects.
        predictions: [n_test] predicted stage per test window.
        history: The fine-tuning run's logged records (empty without one).
        settings: What the cell used: steps, the selected step and its validation kappa,
            augmentations, context, probe regularisation, features...
        pool: The pretraining pool of a pretrained method's encoder (``None``: the split's
            pretraining records, or no pretraining).
        draw: The draw (:meth:`partnd.datasets.label_budget.LabelDraw.to_dict`: labelled and
            validation subjects, the windows per stage of a window budget); empty for a cell
            written before draws were recorded.
    """

    method: str
    arm: str
    budget: int | str
    seed: int
    subjects: tuple[str, ...]
    report: ClassificationReport
    predictions: np.ndarray
    history: list[dict[str, Any]]
    settings: dict[str, Any]
    pool: str | None = None
    draw: dict[str, Any] = field(default_factory=dict)

    @property
    def row(self) -> str:
        """``method`` for the window arm, ``method+seq`` / ``method+night`` / ``method probe`` for
        the others."""
        labels = {
            "window": self.method,
            "sequence": f"{self.method}+seq",
            "night": f"{self.method}+night",
        }
        return labels.get(self.arm, f"{self.method} {self.arm}")

    @property
    def label(self) -> str:
        """The row, and its pretraining pool when it has one (``part_windows+seq @24h``)."""
        return self.row if self.pool is None else f"{self.row} @{self.pool}"


def save_npy(array: np.ndarray, handle: IO[bytes]) -> None:
    """``np.save`` as an :func:`~partnd.engine.checkpoint.atomic_save` writer."""
    np.save(handle, array)


class CellStore:
    """The cells of the study in ``out``: their directories, whether they finished, their results.

    Args:
        out: The study directory.
    """

    def __init__(self, out: Path) -> None:
        self.out = out

    def cell_dir(
        self, method: str, arm: str, budget: BudgetLike, seed: int, pool: str | None = None
    ) -> Path:
        """Directory of one cell: ``b<budget>_s<seed>``, ``_p<pool>`` added for a pool's
        encoder."""
        name = f"b{LabelBudget.parse(budget, 'budgets')}_s{seed}"
        return self.out / "finetune" / method / arm / (name if pool is None else f"{name}_p{pool}")

    def cell_done(
        self, method: str, arm: str, budget: BudgetLike, seed: int, pool: str | None = None
    ) -> bool:
        """Whether the cell has finished."""
        return RunDir(self.cell_dir(method, arm, budget, seed, pool)).finished()

    def load_cell(
        self, method: str, arm: str, budget: BudgetLike, seed: int, pool: str | None = None
    ) -> CellResult:
        """Read a finished cell."""
        cell = self.cell_dir(method, arm, budget, seed, pool)
        data = RunDir(cell).read_result()
        report = ClassificationReport(
            **{
                **data["report"],
                "confusion_matrix": np.asarray(data["report"]["confusion_matrix"]),
            }
        )
        run = data["settings"].get("night_grid", {}).get("run", "run")  # the grid's choice
        history = RunDir(cell / run).history()
        return CellResult(
            method=method,
            arm=arm,
            budget=LabelBudget.parse(budget, "budgets").to_json(),
            seed=seed,
            subjects=tuple(data["subjects"]),
            report=report,
            predictions=np.load(cell / "predictions.npy"),
            history=history,
            settings=dict(data["settings"]),
            pool=data.get("pool"),
            draw=dict(data.get("draw", {})),
        )

    @staticmethod
    def write_cell(cell: Path, predictions: np.ndarray, result: dict[str, Any]) -> None:
        """Write a computed cell into its directory ``cell``: ``predictions.npy`` ([n_test]
        predicted stages, stored as int8), then ``result.json`` (``result``), which marks it
        finished; both atomically."""
        atomic_save(predictions.astype(np.int8), cell / "predictions.npy", save=save_npy)
        RunDir(cell).write_result(result)
