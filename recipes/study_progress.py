"""Live progress of a study's tasks while they run in other processes.

Each task (:mod:`partnd.recipes.study_tasks`) runs in a joblib process and cannot print progress
bars: two processes would overwrite each other's line. Instead each task writes a small JSON
file, ``<study>/progress/task<NN>.json``, atomically every few seconds: the stage it is in (a
pretraining or a cell), that stage's optimiser step out of its total (read from the training
run's ``meta.json`` and ``metrics.jsonl``), an estimate of the stage's remaining time, and the
task's wall and CPU time. The parent process reads these files and prints one compact line per
running task at a fixed interval (:class:`ProgressPrinter`). A finished task's file keeps its
wall and CPU time, so the run directory records where the time went.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from partnd._validation import check
from partnd.engine.checkpoint import atomic_write_text

__all__ = [
    "PROGRESS_DIR",
    "ProgressPrinter",
    "TaskReporter",
    "TaskStatus",
    "format_status",
    "progress_path",
    "read_status",
    "training_run",
    "training_steps",
]

#: The folder of a study's progress files.
PROGRESS_DIR = "progress"


def progress_path(out: Path, index: int) -> Path:
    """The progress file of task ``index`` (0-based) of the study in ``out``."""
    return Path(out) / PROGRESS_DIR / f"task{index:02d}.json"


@dataclass(frozen=True)
class TaskStatus:
    """What a progress file says about one task.

    Attributes:
        index: The task's place in the run's list (0-based).
        name: The task's name (its pretraining and cells).
        stage: The stage running (or the last one, when done).
        stage_index: The stage's place among the task's stages (1-based).
        stages: The task's number of stages.
        step: The stage's last logged optimiser step (``None``: no training loop, or none
            logged yet).
        total: The stage's total optimiser steps (``None``: unknown).
        eta_s: Seconds the stage still needs at its current rate (``None``: unknown).
        wall_s: Seconds since the task started.
        cpu_s: CPU seconds the task's process spent on it (every thread).
        done: Whether the task finished.
    """

    index: int
    name: str
    stage: str
    stage_index: int
    stages: int
    step: int | None
    total: int | None
    eta_s: float | None
    wall_s: float
    cpu_s: float
    done: bool


def training_run(path: Path) -> Path:
    """The training run of ``path``: ``path`` itself when it holds one (``meta.json``), else
    the newest of its ``run``, ``run-0``, ``run-1``... directories that does (a cell's run, or
    the one a cell of a night grid trains now); ``path`` when none has started."""
    if (path / "meta.json").is_file():
        return path
    started: list[tuple[float, Path]] = []
    for run in path.glob("run*"):
        try:
            started.append(((run / "meta.json").stat().st_mtime, run))
        except OSError:  # not started, or removed meanwhile
            continue
    return max(started)[1] if started else path


def training_steps(run_dir: Path | None) -> tuple[int | None, int | None]:
    """The last logged step and the total steps of the training run in ``run_dir``.

    Args:
        run_dir: A training run's directory, or a cell's (:func:`training_run`); ``None``:
            none.

    Returns:
        ``(step, total)``; each ``None`` when not written yet (a line being appended to
        ``metrics.jsonl`` is skipped).
    """
    if run_dir is None:
        return None, None
    run_dir = training_run(run_dir)
    total = None
    try:
        resolved = json.loads((run_dir / "meta.json").read_text()).get("resolved", {})
        total = int(resolved["total_steps"]) if "total_steps" in resolved else None
    except (OSError, ValueError):
        pass
    step = None
    try:
        with open(run_dir / "metrics.jsonl") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record.get("step"), int):
                    step = record["step"]
    except OSError:
        pass
    return step, total


class TaskReporter:
    """Writes one task's progress file from a background thread while the task runs.

    Use as a context manager around the task; call :meth:`stage` as each stage starts. The file
    is rewritten every ``interval`` seconds and at every stage change, and once more when the
    task ends (``done`` only if it ended without an error).

    Args:
        path: The progress file (:func:`progress_path`).
        index: The task's place in the run's list.
        name: The task's name.
        stages: The names of the task's stages, in order.
        interval: Seconds between writes.
        clock: Wall clock in seconds (tests pass a fake one).
        cpu_clock: This process's CPU time in seconds.
    """

    def __init__(
        self,
        path: Path,
        index: int,
        name: str,
        stages: Sequence[str],
        interval: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        check(len(stages) > 0, "stages", "at least one stage", list(stages))
        check(interval > 0, "interval", "a positive number of seconds", interval)
        self.path, self.index, self.name = Path(path), index, name
        self.stages, self.interval = tuple(stages), interval
        self._clock, self._cpu_clock = clock, cpu_clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._stage_index = 0
        self._run_dir: Path | None = None
        self._first: tuple[int, float] | None = None  # (step, time) first seen in the stage
        self._start = self._clock()
        self._cpu_start = self._cpu_clock()

    def stage(self, name: str, run_dir: Path | None = None) -> None:
        """Mark stage ``name`` as running; ``run_dir``: its training run (``None``: no
        training loop, so no steps)."""
        check(name in self.stages, "name", f"one of the stages {list(self.stages)}", repr(name))
        with self._lock:
            self._stage_index = self.stages.index(name)
            self._run_dir, self._first = run_dir, None
        self.write()

    def status(self, done: bool = False) -> TaskStatus:
        """The task's status now."""
        with self._lock:
            stage_index, run_dir = self._stage_index, self._run_dir
        step, total = training_steps(run_dir)
        now = self._clock()
        eta = None
        if step is not None:
            with self._lock:
                if self._first is None:
                    self._first = (step, now)
                first_step, first_time = self._first
            if total is not None and step > first_step:
                eta = max(total - step, 0) * (now - first_time) / (step - first_step)
        return TaskStatus(
            index=self.index,
            name=self.name,
            stage=self.stages[stage_index],
            stage_index=stage_index + 1,
            stages=len(self.stages),
            step=step,
            total=total,
            eta_s=eta,
            wall_s=now - self._start,
            cpu_s=self._cpu_clock() - self._cpu_start,
            done=done,
        )

    def write(self, done: bool = False) -> TaskStatus:
        """Write the status to the progress file atomically and return it."""
        status = self.status(done)
        atomic_write_text(json.dumps(asdict(status)) + "\n", self.path)
        return status

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            self.write()

    def __enter__(self) -> TaskReporter:
        self.write()
        self._thread = threading.Thread(target=self._loop, name="task-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        self.write(done=kind is None)


def read_status(path: Path) -> TaskStatus | None:
    """The status in a progress file (``None``: no file yet, so the task has not started)."""
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return TaskStatus(**values)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def format_status(status: TaskStatus) -> str:
    """One line for a task, e.g. ``"task 1 [2/3 part_windows:night:2:0] step 340/800, ETA 3.1
    min (+1 stage), 4.5 min in"``; a stage without a step count is ``running``."""
    head = f"task {status.index + 1} [{status.stage_index}/{status.stages} {status.stage}]"
    if status.done:
        return (
            f"task {status.index + 1} done in {_minutes(status.wall_s)} "
            f"(CPU {_minutes(status.cpu_s)})"
        )
    after = status.stages - status.stage_index
    later = f" (+{after} stage{'s' if after > 1 else ''})" if after else ""
    if status.step is None:  # no training loop, or nothing logged yet
        parts = [f"running{later}"]
    else:
        total = status.total if status.total is not None else "?"
        eta = "?" if status.eta_s is None else _minutes(status.eta_s)
        parts = [f"step {status.step}/{total}", f"ETA {eta}{later}"]
    return f"{head} " + ", ".join([*parts, f"{_minutes(status.wall_s)} in"])


class ProgressPrinter:
    """Prints the running tasks' progress lines every ``interval`` seconds from a thread.

    Use as a context manager around the parallel run. Every ``interval`` seconds it reads the
    progress files of the ``count`` tasks and writes one line per started, unfinished task, then
    one line counting finished and waiting tasks.

    Args:
        out: The study directory.
        count: The number of tasks.
        interval: Seconds between refreshes (at most 30 keeps the display live).
        stream: Where to print (default: standard output).
        clock: Wall clock in seconds.
    """

    def __init__(
        self,
        out: Path,
        count: int,
        interval: float = 20.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        check(interval > 0, "interval", "a positive number of seconds", interval)
        self.out, self.count, self.interval = Path(out), count, interval
        self.stream = stream
        self._clock = clock
        self._start = clock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def lines(self) -> list[str]:
        """The lines of one refresh."""
        statuses = [read_status(progress_path(self.out, i)) for i in range(self.count)]
        running = [s for s in statuses if s is not None and not s.done]
        finished = sum(1 for s in statuses if s is not None and s.done)
        waiting = sum(1 for s in statuses if s is None)
        elapsed = _minutes(self._clock() - self._start)
        return [
            *(f"  {format_status(status)}" for status in running),
            f"  [{elapsed}] {finished} of {self.count} tasks done, {waiting} waiting",
        ]

    def refresh(self) -> None:
        """Print the lines of one refresh."""
        print("\n".join(self.lines()), file=self.stream, flush=True)

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            self.refresh()

    def __enter__(self) -> ProgressPrinter:
        self._thread = threading.Thread(target=self._loop, name="study-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
