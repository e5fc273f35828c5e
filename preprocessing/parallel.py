"""Run one function over many tasks in parallel and stream the results back as they finish.

``backend="loky"`` uses joblib's process pool; ``backend="dask"`` runs the same joblib call on a
``dask.distributed`` cluster (the optional ``dask`` extra): a local cluster of ``n_jobs``
single-threaded worker processes, or an existing scheduler given by ``scheduler_address``.
``n_jobs`` follows MNE / joblib: ``-1`` means all cores, ``-2`` all but one, and so on.

**Workers end with their parent.** loky's workers only stop when told to, or after 300 s without a
task; a parent killed with SIGKILL (or SIGTERM, whose default action ends Python at once) tells
them nothing, so they would keep running, reparented to PID 1, and keep loky's resource trackers
alive through the pipes they hold. Each loky worker therefore runs :func:`end_with_parent` before
its first task (loky's documented ``initializer``/``initargs``, passed through
``joblib.Parallel(**backend_kwargs)``):

- on Linux it asks the kernel to send the worker SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG, SIGTERM)`` through :mod:`ctypes`). The kernel delivers it even while
  the worker is busy in C code holding the GIL, and SIGTERM keeps its default action (end the
  process) in loky workers. The "parent" is the thread that started the worker; loky starts
  workers from the thread that submits tasks or from its executor manager thread, both of which
  live as long as the pool.
- elsewhere, or if ``prctl`` fails, a daemon thread checks ``os.getppid()`` once per second and
  ends the worker with ``os._exit`` once it changes.

Either way the initializer then compares ``os.getppid()`` with the parent's PID, so a parent that
died while the worker was starting is noticed too. Once the workers are gone, loky's resource
trackers see their pipes close and exit on their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import joblib
from tqdm.auto import tqdm

from partnd._validation import check

__all__ = ["BACKENDS", "end_with_parent", "parallel_map_unordered", "resolve_n_jobs"]

BACKENDS: tuple[str, ...] = ("loky", "dask")

_PR_SET_PDEATHSIG = 1
_PARENT_POLL_SECONDS = 1.0

Task = TypeVar("Task")
Result = TypeVar("Result")


def resolve_n_jobs(n_jobs: int | None) -> int:
    """Number of workers for ``n_jobs`` (None -> 1, -1 -> all cores, -k -> cores + 1 - k, >= 1)."""
    if n_jobs is None:
        return 1
    check(n_jobs != 0, "n_jobs", "a non-zero integer (-1 = all cores)", n_jobs)
    cores = os.cpu_count() or 1
    return n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)


def _set_parent_death_signal() -> bool:
    """Ask Linux to send this process SIGTERM when its parent dies; whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval: float) -> None:
    """End this process once its parent is no longer ``parent_pid`` (it died: reparented)."""
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os._exit(1)


def end_with_parent(parent_pid: int, *, poll_seconds: float = _PARENT_POLL_SECONDS) -> None:
    """Worker initializer: end this process when its parent ``parent_pid`` dies.

    Uses ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` on Linux, else a daemon thread polling
    ``os.getppid()`` every ``poll_seconds`` (see the module docstring). Exits at once if the parent
    is already gone.

    Args:
        parent_pid: PID of the process that started this one (``os.getpid()`` in the parent).
        poll_seconds: Polling interval of the fallback thread.
    """
    if not _set_parent_death_signal():
        threading.Thread(
            target=_watch_parent,
            args=(parent_pid, poll_seconds),
            name="partnd-end-with-parent",
            daemon=True,
        ).start()
    if os.getppid() != parent_pid:
        os._exit(1)


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
            runner = joblib.Parallel(batch_size=1, return_as="generator_unordered")
        else:
            runner = joblib.Parallel(
                n_jobs=n_workers,
                backend="loky",
                batch_size=1,  # each task on its own, in the given order (long tasks first)
                return_as="generator_unordered",
                initializer=end_with_parent,
                initargs=(os.getpid(),),
            )
        for result in runner(joblib.delayed(function)(task) for task in tasks):
            bar.update(1)
            yield result
