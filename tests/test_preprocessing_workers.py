"""Parallel preprocessing workers end when the process that started them dies."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partnd.cohort.pc18_cohort import make_pc18_cohort

psutil = pytest.importorskip("psutil")

_PARTND = "import sys; from partnd.cli import main; sys.exit(main(sys.argv[1:]))"
_LOKY_WORKER = "popen_loky_posix"


def _running(processes: list) -> list:
    """The processes among ``processes`` that still run (a zombie has ended)."""
    alive = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_until_gone(processes: list, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while _running(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _running(processes)


def _kill(processes: list) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


@pytest.mark.slow
@pytest.mark.parametrize("parent_signal", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
def test_loky_workers_end_when_partnd_preprocess_is_killed(tmp_path: Path, parent_signal) -> None:
    cohort = make_pc18_cohort(
        tmp_path / "cohort", n_records=4, hours=0.25, test_fraction=0.0, progress=False
    )
    command = [sys.executable, "-c", _PARTND, "preprocess", "--src", str(cohort.root)]
    command += ["--out", str(tmp_path / "pc18.zarr"), "--n-jobs", "2", "--no-progress"]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    descendants: list = []
    workers: list = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None:
            descendants = psutil.Process(parent.pid).children(recursive=True)
            workers = [p for p in descendants if _LOKY_WORKER in " ".join(_cmdline(p))]
            if len(workers) == 2:
                break
            time.sleep(0.02)
        assert parent.poll() is None, "the run ended before its two workers were seen"
        assert len(workers) == 2
        parent.send_signal(parent_signal)
        parent.wait(timeout=30)
        left = _wait_until_gone(descendants, 10.0)
        assert not left, f"alive 10 s after the parent died: {[_cmdline(p) for p in left]}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        _kill(_running(descendants))


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def _start_chain(tmp_path: Path, setup: list[str]) -> tuple[subprocess.Popen, int]:
    """Start a parent process that starts a worker running ``setup``; the parent and worker PID."""
    ready = tmp_path / "worker.pid"
    worker = [
        "import os, pathlib, time",
        "from partnd.preprocessing import parallel",
        *setup,
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid()))",
        "time.sleep(120)",
    ]
    parent_code = [
        "import subprocess, sys, time",
        f"subprocess.Popen([sys.executable, '-c', {chr(10).join(worker)!r}])",
        "time.sleep(120)",
    ]
    parent = subprocess.Popen([sys.executable, "-c", "\n".join(parent_code)])
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not ready.exists():
        parent.kill()
        pytest.fail("the worker did not start")
    time.sleep(0.1)
    return parent, int(ready.read_text())


@pytest.mark.parametrize("mechanism", ["prctl", "polling thread"])
def test_end_with_parent_ends_the_worker_when_its_parent_dies(tmp_path: Path, mechanism) -> None:
    setup = ["parallel.end_with_parent(os.getppid(), poll_seconds=0.1)"]
    if mechanism == "polling thread":
        setup.insert(0, "parallel._set_parent_death_signal = lambda: False")
    elif not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    parent, worker_pid = _start_chain(tmp_path, setup)
    worker = psutil.Process(worker_pid)
    try:
        assert _running([worker]), "the worker ended while its parent was alive"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not _wait_until_gone([worker], 10.0)
    finally:
        _kill(_running([worker]))


def test_end_with_parent_exits_at_once_when_the_parent_is_already_gone() -> None:
    code = (
        "from partnd.preprocessing import parallel; parallel.end_with_parent(-1); print('ran on')"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.returncode == 1 and "ran on" not in completed.stdout
