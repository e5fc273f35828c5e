"""Run one function over many tasks in parallel and stream the results back as they finish.

``backend="loky"`` uses joblib's process pool; ``backend="dask"`` runs the same joblib call on a
``dask.distributed`` cluster (the optional ``dask`` extra): a local cluster of ``n_jobs``
single-threaded worker processes, or an existing scheduler given by ``scheduler_address``.
``n_jobs`` follows MNE / joblib: ``-1`` means all cores, ``-2`` all but one, and so on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import joblib
from tqdm.auto import tqdm

from partnd._validation import check

__all__ = ["BACKENDS", "parallel_map_unordered", "resolve_n_jobs"]

BACKENDS: tuple[str, ...] = ("loky", "dask")

Task = TypeVar("Task")
Result = TypeVar("Result")


def resolve_n_jobs(n_jobs: int | None) -> int:
    """Number of workers for ``n_jobs`` (None -> 1, -1 -> all cores, -k -> cores + 1 - k, >= 1)."""
    if n_jobs is None:
        return 1
    check(n_jobs != 0, "n_jobs", "a non-zero integer (-1 = all cores)", n_jobs)
    cores = os.cpu_count() or 1
    return n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)


@contextlib.contextmanager
def _dask_client(n_workers: int, scheduler_address: str | None) -> Iterator[Any]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as error:
        raise ImportError(
            "backend='dask' needs dask.distributed: pip install 'partnd[dask]'"
        ) from error
    if scheduler_address is not None:
        with Client(scheduler_address) as client:
            yield client
        return
    # ":0" puts the dashboard on a free port, so a local cluster never clashes with another one.
    with (
        LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def parallel_map_unordered(
    function: Callable[[Task], Result],
    tasks: Sequence[Task],
    *,
    n_jobs: int | None = 1,
    backend: str = "loky",
    progress: bool = True,
    description: str = "",
    scheduler_address: str | None = None,
) -> Iterator[Result]:
    """Yield ``function(task)`` for every task, in completion order.

    Args:
        function: A picklable module-level function of one task.
        tasks: The tasks.
        n_jobs: Number of parallel workers (MNE semantics; 1 runs in this process).
        backend: ``"loky"`` or ``"dask"``.
        progress: Show a tqdm progress bar.
        description: Label of the progress bar.
        scheduler_address: With ``backend="dask"``, address of a running scheduler to use instead of
            starting a local cluster.

    Yields:
        The results, each as soon as its task finishes.
    """
    check(backend in BACKENDS, "backend", f"one of {BACKENDS}", repr(backend))
    n_workers = min(resolve_n_jobs(n_jobs), max(1, len(tasks)))
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=len(tasks), desc=description, disable=not progress))
        if backend == "dask":
            stack.enter_context(_dask_client(n_workers, scheduler_address))
            stack.enter_context(joblib.parallel_config(backend="dask"))
            runner = joblib.Parallel(return_as="generator_unordered")
        else:
            runner = joblib.Parallel(
                n_jobs=n_workers, backend="loky", return_as="generator_unordered"
            )
        for result in runner(joblib.delayed(function)(task) for task in tasks):
            bar.update(1)
            yield result
