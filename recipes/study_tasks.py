"""A study's cells as tasks that run side by side in processes (``--jobs``).

A *task* is what must run in one process, in order: a pretrained method's pretraining followed
by its cells (they read its encoder), the classical cells together (YASA's features,
``features.npz``, are computed once), and every other cell on its own. Tasks start longest first
by a rough cost (pretraining chains, night and sequence cells, the classical cells, window cells,
probes) on ``jobs`` joblib processes, each with ``cpu_count // jobs`` threads; every task reopens
the study from its configuration, so a task writes only its own cells and pretraining,
atomically, and an interrupted run resumes from what finished.

Two recipes build them: ``sleep_staging`` (:func:`row_tasks`: one budget and seed, a pretraining
followed by its rows) and ``sample_efficiency`` (:func:`cell_tasks`: many budgets, seeds and
pools, in two rounds: first every unfinished pretraining beside the cells that need none, then
the cells of the pretrained encoders).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from partnd._validation import check
from partnd.objectives import list_objectives
from partnd.recipes.sleep_study import CLASSICAL_METHODS, SleepStudy, StudyConfig

__all__ = ["Cell", "StudyTask", "cell_tasks", "format_cell", "row_tasks", "run_tasks"]

#: Relative cost of a row by arm, and of a pretraining, for the longest-first order (the demo's
#: wall times on 2 cores: a night cell about 7 minutes, a window cell 2, a probe seconds; a
#: pretraining 2.5 minutes).
_ARM_COST = {"night": 7.0, "sequence": 5.0, "window": 2.0, "probe": 0.1}
_PRETRAIN_COST = 2.5
_CLASSICAL_COST = 2.5


#: A cell: method, arm, budget as written (``2``, ``"w20"``), seed, and the pretraining pool of a
#: pretrained method's encoder (``None``: the split's pretraining records, or no pretraining).
Cell = tuple[str, str, int | str, int, str | None]

#: A pretraining: the method and its pool (``None``: the split's pretraining records).
Pretraining = tuple[str, str | None]


def format_cell(cell: Cell) -> str:
    """``("part", "sequence", "w20", 3, "24h")`` -> ``"part:sequence:w20:3:24h"`` (no pool part
    without a pool)."""
    return ":".join(str(part) for part in cell if part is not None)


@dataclass(frozen=True)
class StudyTask:
    """Work that runs in one process, in order.

    Attributes:
        cells: The cells the task runs, in order.
        pretrain: The pretraining run before the cells (``None``: none).
    """

    cells: tuple[Cell, ...]
    pretrain: Pretraining | None = None

    @property
    def cost(self) -> float:
        """The task's relative wall time (for the longest-first order)."""
        pretraining = _PRETRAIN_COST if self.pretrain is not None else 0.0
        if self.cells and all(cell[0] in CLASSICAL_METHODS for cell in self.cells):
            return pretraining + _CLASSICAL_COST
        return pretraining + sum(_ARM_COST[cell[1]] for cell in self.cells)

    @property
    def name(self) -> str:
        """``"pretrain part_windows, part_windows:probe:2:0 part_windows:night:2:0"`` (a pool's
        pretraining: ``"pretrain part_windows on 16h"``)."""
        parts = []
        if self.pretrain is not None:
            method, pool = self.pretrain
            parts.append(f"pretrain {method}" + ("" if pool is None else f" on {pool}"))
        if self.cells:
            parts.append(" ".join(format_cell(cell) for cell in self.cells))
        return ", ".join(parts)


def row_tasks(
    rows: Sequence[tuple[str, str]], budget: int | str, seed: int, pretrain: bool = True
) -> list[StudyTask]:
    """Group the cells of ``rows`` at one ``budget`` and ``seed`` into tasks, longest first.

    Args:
        rows: (method, arm) rows, as the recipe orders them.
        budget: The label budget of every cell.
        seed: The seed (draw) of every cell.
        pretrain: Whether each pretrained method's task starts with its pretraining (``False``:
            the pretraining must have finished).

    Returns:
        One task per pretrained method (its pretraining, then its rows' cells), one for the
        classical rows and one per other row, sorted by decreasing :attr:`StudyTask.cost` (ties
        keep the rows' order).
    """
    pretrained = [m for m in dict.fromkeys(m for m, _ in rows) if m in list_objectives()]

    def cells(selected: Iterable[tuple[str, str]]) -> tuple[Cell, ...]:
        return tuple((method, arm, budget, seed, None) for method, arm in selected)

    tasks = [
        StudyTask(cells(row for row in rows if row[0] == m), (m, None) if pretrain else None)
        for m in pretrained
    ]
    classical = [row for row in rows if row[0] in CLASSICAL_METHODS]
    if classical:
        tasks.append(StudyTask(cells(classical)))
    tasks.extend(
        StudyTask(cells([row]))
        for row in rows
        if row[0] not in CLASSICAL_METHODS and row[0] not in pretrained
    )
    return sorted(tasks, key=lambda task: -task.cost)


def cell_tasks(
    cells: Sequence[Cell], pretrained: Callable[[str, str | None], bool]
) -> tuple[list[StudyTask], list[StudyTask]]:
    """The unfinished ``cells`` of a study as two rounds of tasks, so that pretrainings run side
    by side with the cells that need none, and no cell waits in a queue behind another's
    pretraining.

    Args:
        cells: The cells to run (method, arm, budget, seed, pool).
        pretrained: Whether a (method, pool) pretraining has finished
            (:meth:`SleepStudy.pretrained`).

    Returns:
        ``(first, then)``. ``first``: every unfinished pretraining of a pretrained method's cells,
        alone and before everything else, then the classical cells in one task and every other
        cell that needs no unfinished pretraining alone, longest first. ``then``: the cells of
        the pretrainings of ``first``, one task each, longest first.
    """
    objectives = list_objectives()
    needed = dict.fromkeys((c[0], c[4]) for c in cells if c[0] in objectives)
    pending = [pretraining for pretraining in needed if not pretrained(*pretraining)]
    waiting = [c for c in cells if (c[0], c[4]) in pending]
    ready = [c for c in cells if (c[0], c[4]) not in pending]
    classical = tuple(c for c in ready if c[0] in CLASSICAL_METHODS)
    first = [StudyTask((), pretraining) for pretraining in pending]
    alone = [StudyTask((c,)) for c in ready if c[0] not in CLASSICAL_METHODS]
    alone += [StudyTask(classical)] if classical else []
    then = [StudyTask((c,)) for c in waiting]

    def longest_first(tasks: list[StudyTask]) -> list[StudyTask]:
        return sorted(tasks, key=lambda task: -task.cost)

    return first + longest_first(alone), longest_first(then)


def _run_task(study: SleepStudy, task: StudyTask) -> tuple[str, float]:
    """Run ``task`` on ``study`` in this process; returns the task's name and wall time in
    seconds."""
    start = time.perf_counter()
    if task.pretrain is not None:
        study.run_pretraining(*task.pretrain)
    for cell in task.cells:
        study.run_cell(*cell)
    return task.name, time.perf_counter() - start


def _run_reopened(config: StudyConfig, task: StudyTask) -> tuple[str, float]:
    """:func:`_run_task` in a joblib process, on the study reopened from ``config``."""
    return _run_task(SleepStudy(config), task)


def _make_shared_data(study: SleepStudy, tasks: Sequence[StudyTask]) -> None:
    """Build what the processes of ``tasks`` share (the store, the split and, when a task
    pretrains on a pool, the pool store and ``pools.json``) here, once, so that no two processes
    build the same store at the same time."""
    _ = study.store, study.split
    if any(task.pretrain is not None and task.pretrain[1] is not None for task in tasks):
        _ = study.pools.store, study.pools.plan


def run_tasks(study: SleepStudy, tasks: Iterable[StudyTask], jobs: int) -> None:
    """Run ``tasks`` on ``jobs`` processes, printing a line as each finishes.

    With ``jobs == 1`` they run in this process on ``study`` (its loaded data reused); otherwise
    the data the processes share is built first, then each joblib process reopens the study and
    trains without progress bars (they would overwrite each other), and the line per task is
    the progress.

    Raises:
        InputError: ``jobs`` of 0 or below -1.
    """
    check(jobs >= 1 or jobs == -1, "jobs", "a number of processes (>= 1; -1: every core)", jobs)
    todo = list(tasks)
    if jobs != 1 and todo:
        _make_shared_data(study, todo)
        print(f"{len(todo)} tasks on {jobs} processes: " + "; ".join(t.name for t in todo))
    if jobs == 1:
        finished: Iterable[tuple[str, float]] = (_run_task(study, task) for task in todo)
    else:
        from joblib import Parallel, delayed

        config = dataclasses.replace(study.config, progress=False)
        finished = Parallel(n_jobs=jobs, batch_size=1, return_as="generator_unordered")(
            delayed(_run_reopened)(config, task) for task in todo
        )
    for name, elapsed in finished:
        print(f"finished {name} in {elapsed / 60:.1f} min", flush=True)
