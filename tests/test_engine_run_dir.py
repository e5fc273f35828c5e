"""Tests of the questions a recipe asks a run directory: resumable? trained? finished?"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig
from partnd.engine.run_dir import RESULT_FILE, RunDir
from partnd.finetuning.training import finetune


def _signals(n: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 1, 200)).astype(np.float32), rng.integers(0, 3, n).tolist()


def test_a_run_is_resumable_then_trained_then_finished(tmp_path: Path) -> None:
    signals, labels = _signals(16)
    config = FinetuneConfig.preset("test", patch_size=20, epochs=2, batch_size=4, progress=False)
    run = RunDir(tmp_path / "run")
    assert not run.resumable and not run.trained() and not run.finished()
    assert run.history() == []
    with pytest.raises(InputError, match="out_dir: expected a started engine run"):
        run.resolved()

    # interrupted after 3 of 8 steps: it can continue, it has not trained to its end
    finetune(None, signals, train_labels=labels, num_classes=3, out_dir=run.root,
             config=config, max_steps=3)  # fmt: skip
    assert run.resumable and not run.trained() and not run.finished()
    assert run.resolved()["total_steps"] == 8 and run.resolved()["epochs"] == 2

    # resumed to its end with a longer schedule: the latest launch's settings count
    finetune(None, signals, train_labels=labels, num_classes=3, out_dir=run.root,
             resume=True, max_steps=None, epochs=3)  # fmt: skip
    assert run.resolved()["epochs"] == 3 and run.trained()
    assert [r["epoch"] for r in run.history() if r["phase"] == "epoch"] == [0, 1, 2]
    assert not run.finished()  # trained, but the recipe has not written its result

    # a result being written (only its temporary file) does not finish the run
    (run.root / f".{RESULT_FILE}.tmp").write_text('{"kap')
    assert not run.finished()
    with pytest.raises(InputError, match=r"out_dir: expected a finished run \(its result.json\)"):
        run.read_result()
    run.write_result({"kappa": 0.5})
    assert run.finished() and run.read_result() == {"kappa": 0.5}
    assert not run.finished("selection.json")
    run.write_result({"step": 4}, "selection.json")
    assert run.finished("selection.json") and run.read_result("selection.json") == {"step": 4}


def _engine_run(root: Path, epochs: int, records: list[str]) -> RunDir:
    run = RunDir(root)
    root.mkdir()
    run.meta_path.write_text(json.dumps({"resolved": {"epochs": epochs}}))
    run.metrics_jsonl.write_text("".join(line + "\n" for line in records))
    return run


def test_trained_reads_epoch_records_and_early_stops(tmp_path: Path) -> None:
    epoch = '{"phase": "epoch", "epoch": %d, "step": %d}'
    half = _engine_run(tmp_path / "half", 3, [epoch % (0, 2), epoch % (1, 4)])
    assert not half.trained()
    # a phase string inside another record does not count as an epoch record
    other = _engine_run(
        tmp_path / "other", 1, ['{"phase": "val", "note": "\\"phase\\": \\"epoch\\""}']
    )
    assert not other.trained()
    stopped = _engine_run(
        tmp_path / "stopped", 5, [epoch % (0, 2), '{"phase": "early_stop", "epoch": 0}']
    )
    assert stopped.trained()
    done = _engine_run(tmp_path / "done", 2, [epoch % (0, 2), epoch % (1, 4)])
    assert done.trained()


def test_history_leaves_out_a_last_line_cut_short_only(tmp_path: Path) -> None:
    epoch = '{"phase": "epoch", "epoch": %d, "step": %d}'
    cut = _engine_run(tmp_path / "cut", 2, [epoch % (0, 2), '{"phase": "epo'])
    assert cut.history() == [{"phase": "epoch", "epoch": 0, "step": 2}] and not cut.trained()
    broken = _engine_run(tmp_path / "broken", 2, ['{"phase": "epo', epoch % (0, 2)])
    with pytest.raises(json.JSONDecodeError):
        broken.history()
