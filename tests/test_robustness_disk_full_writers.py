"""A full disk while ``metrics.jsonl``/``metrics.csv``, TensorBoard's event file or a zarr store
is written (issue 43 #12): the error names the file and says nothing half-written was kept, and
indeed no half-written line, event, record or store is left looking complete. Simulated: a write
that takes part of its data, then fails with ``OSError(ENOSPC)``."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import partnd.cli as cli
from partnd._disk import DiskFullError
from partnd.datasets.store import SleepStore, create_store, write_record
from partnd.engine import checkpoint
from partnd.engine.logging import MetricLogger
from partnd.engine.run_dir import RunDir

FULL = "; nothing half-written was kept"


class _FillingFile(io.RawIOBase):
    """A file whose disk fills after ``room`` more bytes: a write takes what fits, the next
    fails with ENOSPC (as write(2) does)."""

    def __init__(self, raw: Any, room: int) -> None:
        self._raw, self._room = raw, room

    def write(self, data: Any) -> int:
        if self._room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = self._raw.write(bytes(data)[: self._room])
        self._room -= taken
        return taken

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._raw.seek(offset, whence))

    def fileno(self) -> int:
        return int(self._raw.fileno())

    def close(self) -> None:
        self._raw.close()
        super().close()


def _fill_after(monkeypatch: pytest.MonkeyPatch, name: str, room: int) -> None:
    """Files called ``name`` opened by :func:`partnd.engine.checkpoint.append_text` fill after
    ``room`` bytes."""

    def opened(path: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        raw = open(path, mode, *args, **kwargs)  # noqa: SIM115 (closed by the wrapper)
        return _FillingFile(raw, room) if Path(path).name == name else raw

    monkeypatch.setattr(checkpoint, "open", opened, raising=False)


def test_an_appended_line_is_whole_or_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    checkpoint.append_text('{"step": 1}\n', path)
    _fill_after(monkeypatch, "metrics.jsonl", room=5)  # part of the next line fits
    with pytest.raises(DiskFullError) as raised:
        checkpoint.append_text('{"step": 2, "loss": 0.5}\n', path)
    assert str(raised.value) == f"no space left on device while writing {path}{FULL}"
    assert path.read_text() == '{"step": 1}\n'


@pytest.mark.parametrize("name", ["metrics.jsonl", "metrics.csv"])
def test_a_full_disk_while_logging_keeps_whole_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """metrics.jsonl kept half a line (which a resume could not parse) and the error named no
    file."""
    run_dir = RunDir(tmp_path / "run")
    run_dir.create(clear=False)
    logger = MetricLogger(run_dir, write=True)
    first = {"phase": "train", "step": 1, "loss": 0.5}
    logger.log(first)
    logger.log({"phase": "train", "step": 2, "loss": 0.4})
    before = {path.name: path.read_bytes() for path in (run_dir.metrics_jsonl, run_dir.metrics_csv)}
    _fill_after(monkeypatch, name, room=7)
    with pytest.raises(DiskFullError, match=f"writing {run_dir.root / name}{FULL}"):
        logger.log({"phase": "train", "step": 3, "loss": 0.3})
    assert (run_dir.root / name).read_bytes() == before[name]
    logger.close()
    assert [record["step"] for record in run_dir.history()][:2] == [1, 2]
    resumed = MetricLogger(run_dir, write=True, resume_step=2)  # the files reread whole
    assert resumed.history[0] == first and len(resumed.history) == 2
    resumed.close()


def test_a_full_disk_in_tensorboard_is_raised_by_log_and_keeps_whole_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The event writer's thread died with a traceback; the OSError, without a path, surfaced
    at some later call, and the event file ended in half an event."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.tensorflow_stub.io.gfile import GFile

    run_dir = RunDir(tmp_path / "run")
    run_dir.create(clear=False)
    logger = MetricLogger(run_dir, write=True)
    logger.log({"phase": "train", "step": 1, "loss": 0.5})
    [events] = run_dir.tb_dir.iterdir()
    size = events.stat().st_size
    write = GFile.write

    def half_then_full(self: GFile, data: bytes) -> None:
        write(self, data[: len(data) // 2])  # half an event reaches the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(GFile, "write", half_then_full)
    with pytest.raises(DiskFullError, match=f"writing {events}{FULL}"):
        logger.log({"phase": "train", "step": 2, "loss": 0.4})
    logger.close()
    assert capsys.readouterr().err == ""  # no thread's traceback
    assert events.stat().st_size == size
    monkeypatch.undo()
    steps = [
        event.step
        for event in EventFileLoader(str(events)).Load()
        if event.WhichOneof("what") == "summary"
    ]
    assert steps == [1]


def test_pretrain_on_a_disk_full_while_logging_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((8, 2, 80)).astype(np.float32))
    _fill_after(monkeypatch, "metrics.jsonl", room=10)
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(data), "--out", str(out), "--preset", "test"]
    argv += ["--epochs", "1", "--patch-size", "20", "--num-pairs", "8", "--no-progress"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"partnd pretrain: error: no space left on device while writing {out / 'metrics.jsonl'}"
        f"{FULL}\n"
    )
    assert not out.exists()  # a new run that failed before its first checkpoint is removed


def _store(path: Path) -> SleepStore:
    metadata = {"source": {"dataset": "test"}}
    return create_store(path, sfreq=10.0, channels=["C3"], window_seconds=1.0, metadata=metadata)


def _write(path: Path, record_id: str) -> None:
    signal = np.ones((3, 1, 10), dtype=np.float32)
    attrs = {"subject_id": record_id, "split": "train"}
    write_record(path, record_id, signal, np.zeros(3, int), np.arange(3.0), attrs=attrs)


def test_a_record_on_a_full_disk_leaves_no_record_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw OSError named a chunk inside the deleted staging directory, and no one said that
    nothing was kept."""
    path = tmp_path / "s.zarr"
    _store(path)
    _write(path, "a")
    to_zarr = xr.Dataset.to_zarr

    def chunks_then_full(self: xr.Dataset, store: Any, *args: Any, **kwargs: Any) -> None:
        to_zarr(self, store, *args, **kwargs)  # the whole record reached its staging directory
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(store) / "signal/c/0"))

    monkeypatch.setattr(xr.Dataset, "to_zarr", chunks_then_full)
    with pytest.raises(DiskFullError) as raised:
        _write(path, "b")
    assert str(raised.value) == (
        f"no space left on device while writing {path / 'records' / 'b'}{FULL}"
    )
    assert sorted(p.name for p in (path / "records").iterdir()) == ["a", "zarr.json"]
    assert SleepStore(path).record_ids() == ["a"]


def test_a_store_on_a_full_disk_is_not_created_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_group = zarr.open_group

    def group_then_full(store: Any, *args: Any, **kwargs: Any) -> Any:
        open_group(store, *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(store) / "zarr.json"))

    monkeypatch.setattr(zarr, "open_group", group_then_full)
    with pytest.raises(DiskFullError, match=f"writing {tmp_path / 's.zarr'}{FULL}"):
        _store(tmp_path / "s.zarr")
    assert list(tmp_path.iterdir()) == []


def test_preprocessing_on_a_full_disk_stops_instead_of_failing_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record was marked failed ("unexpected error") and the run went on, so a study left
    them out with a warning."""
    from partnd.cohort.pc18_cohort import make_pc18_cohort
    from partnd.preprocessing.physionet2018 import preprocess_physionet2018

    src = make_pc18_cohort(tmp_path / "src", n_records=2, hours=0.25, seed=0, progress=False)

    def full(self: xr.Dataset, store: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(store))

    monkeypatch.setattr(xr.Dataset, "to_zarr", full)
    out = tmp_path / "store.zarr"
    with pytest.raises(DiskFullError, match=f"writing {out / 'records'}/"):
        preprocess_physionet2018(src.root, out, n_jobs=1, progress=False)
    assert not out.exists()  # the store it created holds no record: removed
    assert json.loads((src.root / "cohort.json").read_text())  # the source is untouched


def test_a_full_disk_reaches_the_parent_of_a_worker_process() -> None:
    """DiskFullError could not be unpickled (its __init__ takes the path only), so a full disk
    in a joblib worker (study cells with --jobs 2, preprocessing) became a pickling error."""
    import pickle

    error = pickle.loads(pickle.dumps(DiskFullError("/data/store.zarr/records/a")))
    assert isinstance(error, DiskFullError) and error.errno == errno.ENOSPC
    assert str(error) == f"no space left on device while writing /data/store.zarr/records/a{FULL}"


def test_a_full_disk_at_tensorboard_s_first_event_is_one_error_and_leaves_no_event_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The writer's thread wrote the file's first event when the disk was full: it printed its
    traceback, and the run failed later with an OSError naming no file."""
    from tensorboard.compat.tensorflow_stub.io.gfile import GFile

    run_dir = RunDir(tmp_path / "run")
    run_dir.create(clear=False)

    def full(self: GFile, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(GFile, "write", full)
    with pytest.raises(DiskFullError, match=f"writing {run_dir.tb_dir}"):  # or its event file
        MetricLogger(run_dir, write=True)
    assert capsys.readouterr().err == ""  # no thread's traceback
    assert list(run_dir.tb_dir.iterdir()) == []


def test_a_full_disk_while_logging_a_study_task_keeps_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study's ``tasks.jsonl`` (one line per finished task) goes through ``append_text``."""
    from partnd.recipes.study_tasks import TASK_LOG, TaskTime, _log_task

    _log_task(tmp_path, TaskTime("pretrain part", 2.0, 3.0), jobs=2)
    _fill_after(monkeypatch, TASK_LOG, room=9)
    with pytest.raises(DiskFullError, match=FULL):
        _log_task(tmp_path, TaskTime("supervised:window:1:0", 1.0, 1.0), jobs=2)
    (line,) = (tmp_path / TASK_LOG).read_text().splitlines()
    assert json.loads(line)["name"] == "pretrain part"
