"""A study's cells as tasks that run side by side in processes (``--jobs``), on this machine or
on a dask cluster (``--backend dask``, ``--scheduler ADDRESS``).

A *task* is what must run in one process, in order: a pretrained method's pretraining followed
by its cells (they read its encoder), the classical cells together (YASA's features,
``features.npz``, are computed once), and every other cell on its own. Tasks start longest first
by a rough cost (pretraining chains, night and sequence cells, the classical cells, window cells,
probes) on ``jobs`` joblib processes, each with ``cpu_count // jobs`` threads; every task reopens
the study from its configuration, so a task writes only its own cells and pretraining,
atomically, and an interrupted run resumes from what finished.

The processes are joblib's (:func:`partnd.preprocessing.parallel.parallel_map_unordered`, the
call preprocessing runs on): ``backend="loky"`` starts ``jobs`` local processes; ``backend="dask"``
runs the same tasks on a ``dask.distributed`` cluster, a local one of ``jobs`` single-threaded
workers or the running scheduler at ``scheduler_address``. On a cluster of several machines the
study directory must be on a file system every worker sees: each task reopens the study there,
and writes its cells, pretraining and progress file there.

Two recipes build them: ``sleep_staging`` (:func:`row_tasks`: one budget and seed, a pretraining
followed by its rows) and ``sample_efficiency`` (:func:`cell_tasks`: many budgets, seeds and
pools, in two rounds: first every unfinished pretraining beside the cells that need none, then
the cells of the pretrained encoders).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from partnd._validation import check
from partnd.engine.checkpoint import append_text
from partnd.preprocessing.parallel import BACKENDS, parallel_map_unordered
from partnd.recipes.sleep_study import CLASSICAL_METHODS, SleepStudy, StudyConfig
from partnd.recipes.sleep_study import pretrained_methods as study_pretrained_methods
from partnd.recipes.study_progress import PROGRESS_DIR, ProgressPrinter, TaskReporter, progress_path

__all__ = [
    "TASK_LOG",
    "Cell",
    "StudyTask",
    "TaskTime",
    "add_worker_arguments",
    "cell_tasks",
    "check_worker_options",
    "check_workers",
    "format_cell",
    "importable_class",
    "row_tasks",
    "run_tasks",
]

#: Relative cost of a row by arm, and of a pretraining, for the longest-first order (the demo's
#: wall times on 2 cores: a night cell about 7 minutes, a window cell 2, a probe seconds; a
#: pretraining 2.5 minutes; the transfer study's zero-shot arm only predicts).
_ARM_COST = {"night": 7.0, "sequence": 5.0, "window": 2.0, "probe": 0.1, "zeroshot": 0.1}
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
    pretrained = [m for m in dict.fromkeys(m for m, _ in rows) if m in study_pretrained_methods()]

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
    cells: Sequence[Cell],
    pretrained: Callable[[str, str | None], bool],
    pretrained_methods: Collection[str] | None = None,
) -> tuple[list[StudyTask], list[StudyTask]]:
    """The unfinished ``cells`` of a study as two rounds of tasks, so that pretrainings run side
    by side with the cells that need none, and no cell waits in a queue behind another's
    pretraining.

    Args:
        cells: The cells to run (method, arm, budget, seed, pool).
        pretrained: Whether a (method, pool) pretraining has finished
            (:meth:`SleepStudy.pretrained`).
        pretrained_methods: The methods whose cells need a pretraining first (default: the
            registered objectives and the pool axis's oracle ceiling).

    Returns:
        ``(first, then)``. ``first``: every unfinished pretraining of a pretrained method's cells,
        alone and before everything else, then the classical cells in one task and every other
        cell that needs no unfinished pretraining alone, longest first. ``then``: the cells of
        the pretrainings of ``first``, one task each, longest first.
    """
    objectives = study_pretrained_methods() if pretrained_methods is None else pretrained_methods
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


def _stages(
    study: SleepStudy, task: StudyTask
) -> list[tuple[str, Path | None, Callable[[], object]]]:
    """The stages of ``task`` in order: each one's name, the training run whose steps measure it
    (``None``: the classical rows and probes have no training loop) and the call that runs it."""
    stages: list[tuple[str, Path | None, Callable[[], object]]] = []
    if task.pretrain is not None:
        method, pool = task.pretrain
        name = f"pretrain {method}" + ("" if pool is None else f" on {pool}")
        run = functools.partial(study.run_pretraining, method, pool)
        stages.append((name, study.pretrain_dir(method, pool), run))
    for cell in task.cells:
        method, arm, budget, seed, pool = cell
        trains = method not in CLASSICAL_METHODS and arm != "probe"
        run_dir = study.cell_dir(method, arm, budget, seed, pool) if trains else None
        stages.append((format_cell(cell), run_dir, functools.partial(study.run_cell, *cell)))
    return stages


def _run_task(study: SleepStudy, task: StudyTask, index: int | None = None) -> TaskTime:
    """Run ``task`` on ``study`` in this process, writing its progress file when ``index`` (its
    place in the run's list) is given; returns its name, wall and CPU time in seconds."""
    stages = _stages(study, task)
    reporter = None
    if index is not None:
        path = progress_path(study.out, index)
        reporter = TaskReporter(path, index, task.name, [name for name, _, _ in stages])
    start, cpu_start = time.perf_counter(), time.process_time()
    with reporter or contextlib.nullcontext():
        for name, run_dir, run in stages:
            if reporter is not None:
                reporter.stage(name, run_dir)
            run()
    return TaskTime(task.name, time.perf_counter() - start, time.process_time() - cpu_start)


def _run_reopened(
    kind: type[SleepStudy], config: StudyConfig, numbered: tuple[int, StudyTask]
) -> TaskTime:
    """:func:`_run_task` in a worker process, on the study of ``kind`` reopened from ``config``,
    for the task numbered ``(its place in the run's list, task)``."""
    index, task = numbered
    return _run_task(kind(config), task, index)


def importable_class(kind: type) -> type:
    """``kind``, or the same class from its module's importable name when ``kind`` was defined in
    a module run as ``python -m package.module`` (``__main__``).

    Worker processes receive the study's class by pickling; pickle sends a ``__main__`` class by
    value, with everything it holds (a ``cached_property``'s lock cannot be pickled), while the
    class of an importable module is sent by name and imported in the worker.
    """
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if kind.__module__ != "__main__" or main_spec is None:
        return kind
    module = importlib.import_module(main_spec.name)
    resolved: type = getattr(module, kind.__qualname__)
    return resolved


def _make_shared_data(study: SleepStudy, tasks: Sequence[StudyTask]) -> None:
    """Build what the processes of ``tasks`` share (:meth:`SleepStudy.build_shared_data`)."""
    study.build_shared_data(
        any(task.pretrain is not None and task.pretrain[1] is not None for task in tasks)
    )


@dataclass(frozen=True)
class TaskTime:
    """How long a task took.

    Attributes:
        name: The task's name (:attr:`StudyTask.name`).
        wall_s: Wall seconds.
        cpu_s: CPU seconds of its process (every thread).
    """

    name: str
    wall_s: float
    cpu_s: float


#: The file of a study that logs every finished task's wall and CPU time, one JSON line each.
TASK_LOG = "tasks.jsonl"


def check_workers(jobs: int, backend: str = "loky", scheduler_address: str | None = None) -> None:
    """Check where tasks are to run (:func:`run_tasks`'s ``jobs``, ``backend`` and
    ``scheduler_address``), before anything runs.

    Raises:
        InputError: ``jobs`` of 0 or below -1, an unknown ``backend``, or a
            ``scheduler_address`` without ``backend="dask"``.
    """
    check(jobs >= 1 or jobs == -1, "jobs", "a number of processes (>= 1; -1: every core)", jobs)
    check(backend in BACKENDS, "backend", f"one of {BACKENDS}", repr(backend))
    check(
        scheduler_address is None or backend == "dask",
        "scheduler_address",
        "no scheduler address without the dask backend",
        repr(scheduler_address),
    )


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of where a study's tasks run besides ``--jobs``: ``--backend`` and
    ``--scheduler`` (shared by the sleep recipes)."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="loky",
        help="where --jobs runs: local processes (loky) or a dask.distributed cluster (dask; "
        "the study directory must be on a file system every worker sees)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="with --backend dask: the address of a running scheduler (default: a local "
        "cluster of --jobs workers)",
    )


def check_worker_options(args: argparse.Namespace) -> None:
    """Refuse ``--scheduler`` without ``--backend dask`` (the options of
    :func:`add_worker_arguments`), before the command claims its output directory."""
    check(
        args.scheduler is None or args.backend == "dask",
        "--scheduler",
        "no --scheduler without --backend dask",
        args.scheduler,
    )


def _log_task(out: Path, finished: TaskTime, jobs: int) -> None:
    """Append ``finished`` to the study's :data:`TASK_LOG`, one whole line or none (a full disk
    cuts the file back: :func:`~partnd.engine.checkpoint.append_text`)."""
    record = {**dataclasses.asdict(finished), "jobs": jobs, "finished_at": time.time()}
    append_text(json.dumps(record) + "\n", out / TASK_LOG)


def run_tasks(
    study: SleepStudy,
    tasks: Iterable[StudyTask],
    jobs: int,
    progress_every: float = 20.0,
    backend: str = "loky",
    scheduler_address: str | None = None,
) -> list[TaskTime]:
    """Run ``tasks`` on ``jobs`` processes, printing a line as each finishes.

    With ``jobs == 1`` (and the ``"loky"`` backend) they run in this process on ``study`` (its
    loaded data reused, with its progress bars); otherwise the data the processes share is built
    first, then each worker process reopens the study and trains without progress bars (they
    would overwrite each other). Instead each task writes its progress file
    (:mod:`partnd.recipes.study_progress`) and, unless the study's ``progress`` is off, this
    process prints a line per running task (its stage, step out of total and ETA) every
    ``progress_every`` seconds. Every finished task's wall and CPU time is appended to the
    study's ``tasks.jsonl``.

    Args:
        study: The study whose cells and pretrainings the tasks run.
        tasks: The tasks, in the order they start.
        jobs: Worker processes (``-1``: every core); with ``backend="dask"`` and a
            ``scheduler_address``, the cluster's workers are used instead.
        progress_every: Seconds between the progress lines.
        backend: ``"loky"`` (local processes) or ``"dask"`` (a ``dask.distributed`` cluster).
        scheduler_address: With ``backend="dask"``, a running scheduler (``tcp://host:8786``)
            instead of a local cluster of ``jobs`` workers.

    Returns:
        The finished tasks' times, in the order they finished.

    Raises:
        InputError: ``jobs`` of 0 or below -1, ``progress_every`` not positive, an unknown
            ``backend``, or a ``scheduler_address`` without ``backend="dask"``.
    """
    check_workers(jobs, backend, scheduler_address)
    check(progress_every > 0, "progress_every", "a positive number of seconds", progress_every)
    todo = list(tasks)
    in_process = jobs == 1 and backend == "loky"
    printer: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if not in_process and todo:
        _make_shared_data(study, todo)
        shutil.rmtree(study.out / PROGRESS_DIR, ignore_errors=True)
        where = (
            f"{jobs} processes"
            if backend == "loky"
            else f"the dask cluster at {scheduler_address}"
            if scheduler_address
            else f"a local dask cluster of {jobs} processes"
        )
        print(
            f"{len(todo)} tasks on {where}:\n"
            + "\n".join(f"  task {i + 1}: {task.name}" for i, task in enumerate(todo)),
            flush=True,
        )
        if study.config.progress:
            printer = ProgressPrinter(study.out, len(todo), interval=progress_every)
    if in_process:
        finished: Iterable[TaskTime] = (_run_task(study, task) for task in todo)
    else:
        config = dataclasses.replace(study.config, progress=False)
        finished = parallel_map_unordered(
            functools.partial(_run_reopened, importable_class(type(study)), config),
            list(enumerate(todo)),
            n_jobs=jobs,
            backend=backend,
            progress=False,
            scheduler_address=scheduler_address,
        )
    times = []
    with printer:
        for done in finished:
            _log_task(study.out, done, jobs)
            times.append(done)
            print(
                f"finished {done.name} in {done.wall_s / 60:.1f} min "
                f"(CPU {done.cpu_s / 60:.1f} min)",
                flush=True,
            )
    return times
