"""A study's cell storage: where a cell lives, when it counts as finished, and a round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.evaluation.metrics import classification_metrics
from partnd.recipes.study_cell_store import CellStore


def test_cell_directories_name_budget_seed_and_pool(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    assert store.cell_dir("part", "window", 2, 0) == tmp_path / "finetune/part/window/b2_s0"
    assert store.cell_dir("part", "sequence", "w20", 3, "24h") == (
        tmp_path / "finetune/part/sequence/bw20_s3_p24h"
    )
    with pytest.raises(InputError, match="budgets"):
        store.cell_dir("part", "window", "x2", 0)


def test_a_written_cell_reads_back_and_only_a_complete_one_is_finished(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    cell = store.cell_dir("supervised", "window", "w20", 1)
    cell.mkdir(parents=True)
    labels = np.array([0, 1, 2, 2, 1, 0])
    predictions = np.array([0, 1, 2, 1, 1, 0])
    report = classification_metrics(labels, predictions, 3, ["W", "N", "R"])
    store.write_cell(cell, predictions, {"subjects": ["s1"], "report": {}, "settings": {}})
    (cell / "result.json").unlink()  # an interrupted write: predictions but no result
    assert not store.cell_done("supervised", "window", "w20", 1)

    result = {
        "method": "supervised",
        "arm": "window",
        "budget": "w20",
        "seed": 1,
        "pool": None,
        "subjects": ["s1", "s2"],
        "draw": {"subjects": ["s1", "s2"]},
        "report": report.to_dict(),
        "settings": {"steps": 10},
    }
    store.write_cell(cell, predictions, result)
    assert store.cell_done("supervised", "window", "w20", 1)
    loaded = store.load_cell("supervised", "window", "w20", 1)
    assert np.load(cell / "predictions.npy").dtype == np.int8
    np.testing.assert_array_equal(loaded.predictions, predictions)
    np.testing.assert_array_equal(loaded.report.confusion_matrix, report.confusion_matrix)
    assert loaded.report.cohen_kappa == pytest.approx(report.cohen_kappa)
    assert (loaded.subjects, loaded.settings, loaded.history) == (("s1", "s2"), {"steps": 10}, [])
    assert (loaded.budget, loaded.pool, loaded.row, loaded.label) == (
        "w20",
        None,
        "supervised",
        "supervised",
    )
    assert sorted(p.name for p in cell.iterdir()) == ["predictions.npy", "result.json"]
