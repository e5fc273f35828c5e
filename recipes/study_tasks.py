"""A study's rows as tasks that run side by side in processes (``--jobs``).

A *task* is what must run in one process, in order: a pretrained method's pretraining followed
by its rows (the rows read its encoder), the classical rows together (YASA's features,
``features.npz``, are computed once), and every other row on its own. Tasks start longest first
by a rough cost (pretraining chains, night and sequence rows, the classical rows, window rows,
probes) on ``jobs`` joblib processes, each with ``cpu_count // jobs`` threads; every task reopens
the study from its configuration, so a task writes only its own cells and pretraining,
atomically, and an interrupted run resumes from what finished.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from partnd._validation import check
from partnd.objectives import list_objectives
from partnd.recipes.sleep_study import CLASSICAL_METHODS, SleepStudy, StudyConfig

__all__ = ["StudyTask", "row_tasks", "run_tasks"]

#: Relative cost of a row by arm, and of a pretraining, for the longest-first order (the demo's
#: wall times on 2 cores: a night cell about 7 minutes, a window cell 2, a probe seconds; a
#: pretraining 2.5 minutes).
_ARM_COST = {"night": 7.0, "sequence": 5.0, "window": 2.0, "probe": 0.1}
_PRETRAIN_COST = 2.5
_CLASSICAL_COST = 2.5


@dataclass(frozen=True)
class StudyTask:
    """Work that runs in one process, in order.

    Attributes:
        rows: The (method, arm) rows whose cells the task runs.
        pretrain: The method pretrained before the rows (``None``: none).
    """

    rows: tuple[tuple[str, str], ...]
    pretrain: str | None = None

    @property
    def cost(self) -> float:
        """The task's relative wall time (for the longest-first order)."""
        if self.rows and self.rows[0][0] in CLASSICAL_METHODS:
            return _CLASSICAL_COST
        pretraining = _PRETRAIN_COST if self.pretrain is not None else 0.0
        return pretraining + sum(_ARM_COST[arm] for _, arm in self.rows)

    @property
    def name(self) -> str:
        """``"pretrain part_windows, part_windows:probe part_windows:night"``."""
        parts = [] if self.pretrain is None else [f"pretrain {self.pretrain}"]
        if self.rows:
            parts.append(" ".join(f"{method}:{arm}" for method, arm in self.rows))
        return ", ".join(parts)


def row_tasks(rows: Sequence[tuple[str, str]], pretrain: bool = True) -> list[StudyTask]:
    """Group ``rows`` into tasks, longest first.

    Args:
        rows: (method, arm) rows, as the recipe orders them.
        pretrain: Whether each pretrained method's task starts with its pretraining (``False``:
            the pretraining must have finished).

    Returns:
        One task per pretrained method (its pretraining, then its rows), one for the classical
        rows and one per other row, sorted by decreasing :attr:`StudyTask.cost` (ties keep the
        rows' order).
    """
    pretrained = [m for m in dict.fromkeys(m for m, _ in rows) if m in list_objectives()]
    tasks = [
        StudyTask(tuple(row for row in rows if row[0] == m), m if pretrain else None)
        for m in pretrained
    ]
    classical = tuple(row for row in rows if row[0] in CLASSICAL_METHODS)
    if classical:
        tasks.append(StudyTask(classical))
    tasks.extend(
        StudyTask((row,))
        for row in rows
        if row[0] not in CLASSICAL_METHODS and row[0] not in pretrained
    )
    return sorted(tasks, key=lambda task: -task.cost)


def _run_task(
    study: SleepStudy, task: StudyTask, budget: int | str, seed: int
) -> tuple[str, float]:
    """Run ``task`` on ``study`` in this process; returns the task's name and wall time in
    seconds."""
    start = time.perf_counter()
    if task.pretrain is not None:
        study.run_pretraining(task.pretrain)
    for method, arm in task.rows:
        study.run_cell(method, arm, budget, seed)
    return task.name, time.perf_counter() - start


def _run_reopened(
    config: StudyConfig, task: StudyTask, budget: int | str, seed: int
) -> tuple[str, float]:
    """:func:`_run_task` in a joblib process, on the study reopened from ``config``."""
    return _run_task(SleepStudy(config), task, budget, seed)


def run_tasks(
    study: SleepStudy, tasks: Iterable[StudyTask], budget: int | str, seed: int, jobs: int
) -> None:
    """Run ``tasks`` (the cells of ``budget`` and ``seed``) on ``jobs`` processes, printing a
    line as each finishes.

    With ``jobs == 1`` they run in this process on ``study`` (its loaded data reused); otherwise
    each joblib process reopens the study and trains without progress bars (they would
    overwrite each other), and the line per task is the progress.

    Raises:
        InputError: ``jobs`` of 0 or below -1.
    """
    check(jobs >= 1 or jobs == -1, "jobs", "a number of processes (>= 1; -1: every core)", jobs)
    todo = list(tasks)
    if jobs != 1 and todo:
        print(f"{len(todo)} tasks on {jobs} processes: " + "; ".join(t.name for t in todo))
    if jobs == 1:
        finished: Iterable[tuple[str, float]] = (
            _run_task(study, task, budget, seed) for task in todo
        )
    else:
        from joblib import Parallel, delayed

        config = dataclasses.replace(study.config, progress=False)
        finished = Parallel(n_jobs=jobs, batch_size=1, return_as="generator_unordered")(
            delayed(_run_reopened)(config, task, budget, seed) for task in todo
        )
    for name, elapsed in finished:
        print(f"finished {name} in {elapsed / 60:.1f} min", flush=True)
