"""Training records to TensorBoard, JSON lines and CSV at once.

Rank 0 writes the files; every rank keeps the in-memory history.

A record is a flat dict such as ``{"phase": "train", "epoch": 0, "step": 20, "loss": 0.31,
"lr": 4e-4}``. ``metrics.jsonl`` gets one line per record (flushed immediately), ``metrics.csv`` the
same rows under the union of all columns seen, and TensorBoard a scalar ``"{phase}/{key}"`` at
``step`` for every numeric value. On resume, records logged after the resumed step by the
interrupted run are dropped, so the files describe one consistent trajectory.

A full disk ends :meth:`MetricLogger.log` with :class:`~partnd._disk.DiskFullError` naming the
file, which keeps only whole records: a line of ``metrics.jsonl`` or ``metrics.csv`` is appended
whole or not at all, and TensorBoard's event file is cut back to its last whole event (instead of
its writer thread dying with a traceback and the error surfacing, without a path, at a later
call).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from partnd._disk import DiskFullError, is_disk_full
from partnd.engine.checkpoint import append_text, atomic_write_text
from partnd.engine.run_dir import RunDir

__all__ = ["MetricLogger"]

Record = dict[str, Any]
_NOT_SCALARS = ("phase", "step", "epoch")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class _WholeEvents:
    """TensorBoard's event file as its ``RecordWriter`` writes it (one whole event per
    :meth:`write`, from TensorBoard's writer thread): a full disk cuts the file back to its last
    whole event and is kept in :attr:`error` for the training thread to raise, where the writer
    thread would die with a traceback.

    Args:
        file: The file object the ``RecordWriter`` wrote to.
        path: The event file.
    """

    def __init__(self, file: Any, path: Path) -> None:
        self._file = file
        self.path = path
        self.error: OSError | None = None

    def write(self, data: bytes) -> None:
        if self.error is not None:  # nothing more after a failed event: the file stays whole
            return
        size = self.path.stat().st_size if self.path.exists() else 0
        try:
            self._file.write(data)
        except OSError as error:
            if not is_disk_full(error):
                raise
            os.truncate(self.path, size)
            self.error = error

    def flush(self) -> None:
        if self.error is None:
            self._file.flush()

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return bool(self._file.closed)


@contextlib.contextmanager
def _writer_thread_errors_kept() -> Iterator[None]:
    """While TensorBoard's writer starts: its thread's full disk is left to the training thread,
    which :class:`MetricLogger` raises as one :class:`DiskFullError`, instead of also being printed
    as the thread's traceback (every other error of any thread is reported as before)."""
    report = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not (isinstance(args.exc_value, OSError) and is_disk_full(args.exc_value)):
            report(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = report


def _open_summary_writer(tb_dir: Path, purge_step: int | None) -> Any:
    """TensorBoard's ``SummaryWriter`` on ``tb_dir``; a full disk while it writes its first event
    removes the event file it started and raises :class:`DiskFullError` naming it."""
    from torch.utils.tensorboard import SummaryWriter

    before = set(tb_dir.glob("events.out.tfevents.*"))
    try:
        with _writer_thread_errors_kept():
            return SummaryWriter(str(tb_dir), purge_step=purge_step)
    except OSError as error:
        if not is_disk_full(error):
            raise
        started = sorted(set(tb_dir.glob("events.out.tfevents.*")) - before)
        for path in started:
            path.unlink(missing_ok=True)
        raise DiskFullError(started[0] if started else tb_dir) from error


class MetricLogger:
    """Writes records to ``metrics.jsonl``, ``metrics.csv`` and ``tb/`` of a run directory.

    Args:
        run_dir: Run directory, or ``None`` to only keep the in-memory history.
        write: Whether this process writes files (rank 0) or only keeps ``history``.
        resume_step: When resuming, the optimiser step of the checkpoint: earlier records are
            reloaded into ``history`` and later ones are discarded from the files.
    """

    def __init__(self, run_dir: RunDir | None, *, write: bool, resume_step: int | None = None):
        self.run_dir = run_dir
        self.write = write and run_dir is not None
        self.history: list[Record] = []
        self._columns: list[str] = []
        self._writer: Any = None
        self._events: _WholeEvents | None = None
        if run_dir is not None and resume_step is not None and run_dir.metrics_jsonl.is_file():
            # a last line cut short by a crash while it was written is left out
            self.history = [rec for rec in run_dir.history() if rec.get("step", 0) <= resume_step]
        for record in self.history:
            self._add_columns(record)
        if self.write and run_dir is not None:
            # purge_step drops events at steps >= it: keep the checkpoint's own step, like the
            # JSON lines above (records with step <= resume_step survive).
            purge = None if resume_step is None else resume_step + 1
            self._writer = _open_summary_writer(run_dir.tb_dir, purge)
            events = self._writer.file_writer.event_writer
            records = events._async_writer._writer  # its RecordWriter, shared with its thread
            self._events = _WholeEvents(records._writer, Path(events._file_name))
            records._writer = self._events
            if resume_step is not None:
                atomic_write_text(
                    "".join(json.dumps(rec) + "\n" for rec in self.history), run_dir.metrics_jsonl
                )
                self._rewrite_csv(run_dir)

    def _add_columns(self, record: Record) -> bool:
        new = [key for key in record if key not in self._columns]
        self._columns.extend(new)
        return bool(new)

    def _rewrite_csv(self, run_dir: RunDir) -> None:
        buffer = io.StringIO()
        table = csv.DictWriter(buffer, fieldnames=self._columns)
        table.writeheader()
        table.writerows(self.history)
        atomic_write_text(buffer.getvalue(), run_dir.metrics_csv)

    def log(self, record: Record) -> None:
        """Append ``record`` to the history and (on the writing rank) to every sink."""
        record = {key: _json_safe(value) for key, value in record.items()}
        self.history.append(record)
        new_columns = self._add_columns(record)
        if not self.write or self.run_dir is None:
            return
        append_text(json.dumps(record) + "\n", self.run_dir.metrics_jsonl)
        if new_columns or not self.run_dir.metrics_csv.is_file():
            self._rewrite_csv(self.run_dir)
        else:
            row = io.StringIO()
            csv.DictWriter(row, fieldnames=self._columns).writerow(record)
            append_text(row.getvalue(), self.run_dir.metrics_csv)
        phase = record.get("phase", "train")
        step = int(record.get("step", 0))
        for key, value in record.items():
            if key not in _NOT_SCALARS and isinstance(value, int | float):
                self._writer.add_scalar(f"{phase}/{key}", value, step)
        self._writer.flush()  # written now: a full disk is raised here, naming the file
        if self._events is not None and self._events.error is not None:
            raise DiskFullError(self._events.path) from self._events.error

    def close(self) -> None:
        """Flush and close TensorBoard (safe to call twice)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
