"""Tests of atomic checkpoint writes, retention, the run directory rules and the metric logger."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import IO, Any

import pytest
import torch

from partnd._validation import InputError
from partnd.engine.checkpoint import (
    CheckpointManager,
    atomic_save,
    atomic_write_json,
    load_checkpoint,
)
from partnd.engine.logging import MetricLogger
from partnd.engine.run_dir import RunDir, git_revision, run_metadata


def test_atomic_save_round_trip(tmp_path: Path) -> None:
    atomic_save({"w": torch.arange(3)}, tmp_path / "sub" / "a.pt")
    assert torch.equal(load_checkpoint(tmp_path / "sub" / "a.pt")["w"], torch.arange(3))
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["a.pt"]


def test_interrupted_save_leaves_the_previous_file_and_no_partial_file(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    manager.save_last({"step": 1})

    def crash_mid_write(obj: Any, handle: IO[bytes]) -> None:
        handle.write(b"partial bytes")
        raise KeyboardInterrupt("killed while writing")

    with pytest.raises(KeyboardInterrupt):
        atomic_save({"step": 2}, manager.last_path, save=crash_mid_write)
    assert load_checkpoint(manager.last_path) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_keep_k_most_recent_epoch_checkpoints(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "ckpt", keep=2)
    for epoch in range(5):
        manager.save_epoch({"epoch": epoch}, epoch)
    assert sorted(p.name for p in manager.directory.iterdir()) == [
        "epoch_0003.pt",
        "epoch_0004.pt",
        "last.pt",
    ]
    assert load_checkpoint(manager.last_path) == {"epoch": 4}
    manager.save_last({"epoch": 4, "step": 99})
    assert load_checkpoint(manager.epoch_path(4)) == {"epoch": 4}  # not overwritten via a link
    assert [p.name for p in manager.epoch_checkpoints()] == ["epoch_0003.pt", "epoch_0004.pt"]


def test_load_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="path: expected an existing partnd file"):
        load_checkpoint(tmp_path / "missing.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(InputError, match="dict saved by partnd"):
        load_checkpoint(tmp_path / "list.pt")


def test_run_dir_rules(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert RunDir.check(root, resume=False, overwrite=False).root == root  # new: fine
    root.mkdir()
    RunDir.check(root, resume=False, overwrite=False)  # empty: fine
    (root / "file.txt").write_text("x")
    with pytest.raises(InputError, match="non-empty directory"):
        RunDir.check(root, resume=False, overwrite=False)
    with pytest.raises(InputError, match=r"holding config\.json \(a run that started\)"):
        RunDir.check(root, resume=True, overwrite=False)
    with pytest.raises(InputError, match="at most one of"):
        RunDir.check(root, resume=True, overwrite=True)
    with pytest.raises(InputError, match="a directory path"):
        RunDir.check(root / "file.txt", resume=False, overwrite=False)
    with pytest.raises(InputError, match="never deletes other folders"):
        RunDir.check(root, resume=False, overwrite=True)  # not a run: overwrite refuses
    assert (root / "file.txt").is_file()
    (root / "config.json").write_text("{}")
    run_dir = RunDir.check(root, resume=False, overwrite=True)
    (root / "nested").mkdir()
    run_dir.create(clear=True)
    assert sorted(p.name for p in root.iterdir()) == ["checkpoints", "tb"]
    (root / "config.json").write_text("{}")
    assert not run_dir.resumable  # stopped before its first checkpoint: resume restarts it
    assert RunDir.check(root, resume=True, overwrite=False) == run_dir
    (run_dir.checkpoints_dir / "last.pt").write_bytes(b"")
    assert RunDir.check(root, resume=True, overwrite=False) == run_dir and run_dir.resumable


def test_meta_records_versions_and_appends_resumes(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    meta = run_metadata(world_size=2, extra={"resolved": {"peak_lr": 0.1}})
    assert meta["world_size"] == 2 and meta["resolved"] == {"peak_lr": 0.1}
    assert meta["torch_version"] == torch.__version__
    assert {"partnd_version", "git_revision", "command_line", "started_at"} <= set(meta)
    run_dir.write_meta(meta, resumed=False)
    run_dir.write_meta({"world_size": 1}, resumed=True)
    stored = json.loads(run_dir.meta_path.read_text())
    assert stored["world_size"] == 2 and stored["resumes"] == [{"world_size": 1}]
    assert git_revision(tmp_path) is None  # not a git checkout


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_metric_logger_writes_jsonl_csv_and_tensorboard(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.create(clear=False)
    logger = MetricLogger(run_dir, write=True)
    logger.log({"phase": "train", "epoch": 0, "step": 1, "loss": 2.0, "lr": 0.1})
    logger.log({"phase": "train", "epoch": 0, "step": 2, "loss": 1.5, "lr": 0.2})
    logger.log({"phase": "val", "epoch": 0, "step": 2, "cohen_kappa": 0.5})
    logger.close()
    lines = [json.loads(line) for line in run_dir.metrics_jsonl.read_text().splitlines()]
    assert lines == logger.history and len(lines) == 3
    rows = read_csv(run_dir.metrics_csv)
    assert list(rows[0]) == ["phase", "epoch", "step", "loss", "lr", "cohen_kappa"]
    assert [row["loss"] for row in rows] == ["2.0", "1.5", ""]
    assert rows[2]["cohen_kappa"] == "0.5"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir.tb_dir))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["train/loss", "train/lr", "val/cohen_kappa"]
    assert [e.value for e in events.Scalars("train/loss")] == [2.0, 1.5]


def test_metric_logger_resume_drops_records_after_the_checkpoint(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.create(clear=False)
    logger = MetricLogger(run_dir, write=True)
    for step in range(1, 6):
        logger.log({"phase": "train", "epoch": 0, "step": step, "loss": float(step)})
    logger.close()
    resumed = MetricLogger(run_dir, write=True, resume_step=3)
    assert [r["step"] for r in resumed.history] == [1, 2, 3]
    resumed.log({"phase": "train", "epoch": 0, "step": 4, "loss": 40.0})
    resumed.close()
    steps = [json.loads(line)["step"] for line in run_dir.metrics_jsonl.read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert [row["loss"] for row in read_csv(run_dir.metrics_csv)] == ["1.0", "2.0", "3.0", "40.0"]


def test_non_writing_rank_keeps_history_only(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    logger = MetricLogger(run_dir, write=False)
    logger.log({"phase": "train", "step": 1, "loss": float("nan")})
    assert logger.history == [{"phase": "train", "step": 1, "loss": "nan"}]
    assert not run_dir.root.exists()
    atomic_write_json({"a": 1}, tmp_path / "x.json")
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}
