"""Live progress of a study's tasks: the file a task writes, the line it becomes, and the
printer that reads the files of tasks running in another process."""

from __future__ import annotations

import io
import json
import multiprocessing
import time
from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.recipes.study_progress import (
    ProgressPrinter,
    TaskReporter,
    TaskStatus,
    format_status,
    progress_path,
    read_status,
    training_steps,
)


def _write_run(run_dir: Path, total: int, steps: list[int], partial: str = "") -> None:
    """A training run's files as the trainer writes them: ``meta.json`` with the resolved total
    and one ``metrics.jsonl`` line per logged step (``partial``: a line still being written)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "meta.json").write_text(json.dumps({"resolved": {"total_steps": total}}))
    lines = [json.dumps({"phase": "train", "step": step, "loss": 1.0}) for step in steps]
    lines.append(json.dumps({"phase": "epoch", "epoch": 0, "loss": 1.0}))  # no step: skipped
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n" + partial)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_last_logged_step_and_the_total_skipping_a_line_being_written(tmp_path: Path) -> None:
    _write_run(tmp_path / "run", 800, [20, 40, 60], partial='{"phase": "train", "st')
    assert training_steps(tmp_path / "run") == (60, 800)
    assert training_steps(tmp_path / "missing") == (None, None)
    assert training_steps(None) == (None, None)


def test_a_task_reports_its_stage_step_and_an_eta_from_the_rate_since_the_stage_began(
    tmp_path: Path,
) -> None:
    clock, cpu = _Clock(), _Clock()
    path = progress_path(tmp_path, 2)
    stages = ["pretrain part_windows", "part_windows:probe:2:0", "part_windows:night:2:0"]
    reporter = TaskReporter(path, 2, "the task", stages, clock=clock, cpu_clock=cpu)
    run_dir = tmp_path / "night"
    clock.now = 60.0
    reporter.stage(stages[2], run_dir)  # nothing logged yet
    status = read_status(path)
    assert status is not None and status.step is None and status.eta_s is None
    _write_run(run_dir, 100, [10])
    clock.now, cpu.now = 70.0, 130.0
    first = reporter.write()  # the first step seen: no rate yet
    assert (first.step, first.total, first.eta_s) == (10, 100, None)
    _write_run(run_dir, 100, [10, 20, 30])
    clock.now = 80.0  # 20 steps in 10 s: 70 left take 35 s
    status = reporter.write()
    assert status == read_status(path)
    assert status == TaskStatus(
        index=2,
        name="the task",
        stage=stages[2],
        stage_index=3,
        stages=3,
        step=30,
        total=100,
        eta_s=pytest.approx(35.0),
        wall_s=80.0,
        cpu_s=130.0,
        done=False,
    )
    assert format_status(status) == (
        "task 3 [3/3 part_windows:night:2:0] step 30/100, ETA 0.6 min, 1.3 min in"
    )
    # a new stage starts its own rate
    reporter.stage(stages[1])
    probe = read_status(path)
    assert probe is not None and (probe.stage_index, probe.step, probe.eta_s) == (2, None, None)
    assert format_status(probe) == (
        "task 3 [2/3 part_windows:probe:2:0] running (+1 stage), 1.3 min in"
    )
    with pytest.raises(InputError, match="name"):
        reporter.stage("not a stage")


def test_the_file_says_done_only_when_the_task_ends_without_an_error(tmp_path: Path) -> None:
    with TaskReporter(progress_path(tmp_path, 0), 0, "ok", ["a", "b"], interval=0.01) as rep:
        rep.stage("a")
        rep.stage("b")
    status = read_status(progress_path(tmp_path, 0))
    assert status is not None and status.done and status.stage == "b"
    assert format_status(status).startswith("task 1 done in 0.0 min (CPU ")
    failing = TaskReporter(progress_path(tmp_path, 1), 1, "fails", ["a"], interval=0.01)
    with pytest.raises(RuntimeError), failing:
        raise RuntimeError("boom")
    failed = read_status(progress_path(tmp_path, 1))
    assert failed is not None and not failed.done
    assert read_status(progress_path(tmp_path, 5)) is None
    with pytest.raises(InputError, match="stages"):
        TaskReporter(progress_path(tmp_path, 2), 2, "none", [])


def test_the_printer_shows_running_tasks_and_counts_finished_and_waiting(tmp_path: Path) -> None:
    def status(index: int, done: bool, step: int | None) -> TaskStatus:
        return TaskStatus(index, f"t{index}", "cell", 1, 2, step, 800, 90.0, 300.0, 500.0, done)

    for index, done, step in ((0, True, 800), (1, False, 400), (3, False, None)):
        path = progress_path(tmp_path, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(status(index, done, step).__dict__))
    clock = _Clock()
    printer = ProgressPrinter(tmp_path, 5, stream=io.StringIO(), clock=clock)
    clock.now = 150.0
    assert printer.lines() == [
        "  task 2 [1/2 cell] step 400/800, ETA 1.5 min (+1 stage), 5.0 min in",
        "  task 4 [1/2 cell] running (+1 stage), 5.0 min in",
        "  [2.5 min] 1 of 5 tasks done, 2 waiting",
    ]
    with pytest.raises(InputError, match="interval"):
        ProgressPrinter(tmp_path, 1, interval=0)


def _fake_task(out: Path, index: int, steps: int) -> None:
    """A task in another process: a training stage that logs a step every 20 ms."""
    run_dir = out / f"run{index}"
    with TaskReporter(progress_path(out, index), index, f"fake {index}", ["train"], 0.02) as rep:
        rep.stage("train", run_dir)
        for step in range(1, steps + 1):
            _write_run(run_dir, steps, list(range(1, step + 1)))
            time.sleep(0.02)


def test_the_printer_refreshes_while_tasks_run_in_other_processes(tmp_path: Path) -> None:
    stream = io.StringIO()
    context = multiprocessing.get_context("fork")  # no imports to repeat: starts in ms
    tasks = [context.Process(target=_fake_task, args=(tmp_path, i, 40)) for i in range(2)]
    with ProgressPrinter(tmp_path, 2, interval=0.1, stream=stream):
        for task in tasks:
            task.start()
        for task in tasks:
            task.join(timeout=60)
            assert task.exitcode == 0
        time.sleep(0.3)  # a refresh after both finished
    printed = stream.getvalue()
    assert "/40, ETA " in printed  # a running task's step out of its total, with an ETA
    assert printed.rstrip().endswith("2 of 2 tasks done, 0 waiting")
    for index in range(2):
        status = read_status(progress_path(tmp_path, index))
        assert status is not None and status.done and status.step == 40
