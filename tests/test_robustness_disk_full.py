"""A full disk ends a command with one line naming the file, and leaves nothing half-written
(issue 43 #12). Simulated: torch.save's failed write, OSError(ENOSPC) from a writer."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import partnd.cli as cli
from partnd._disk import DiskFullError
from partnd.cli.errors import OptionNames, run_command
from partnd.engine.checkpoint import atomic_save, atomic_write_text

TORCH_FULL = (
    "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
    "data/0: file write failed"
)


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".") and p.name.endswith(".tmp")]


def test_pretrain_on_a_full_disk_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """torch.save's RuntimeError reached the user as a traceback."""
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).standard_normal((8, 2, 80)).astype(np.float32))

    def full(obj: object, handle: object, *args: object, **kwargs: object) -> None:
        handle.write(b"partial")  # type: ignore[attr-defined]
        raise RuntimeError(TORCH_FULL)

    monkeypatch.setattr(torch, "save", full)
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(data), "--out", str(out), "--preset", "test"]
    argv += ["--epochs", "1", "--patch-size", "20", "--num-pairs", "8", "--no-progress"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"partnd pretrain: error: no space left on device while writing {out}")
    assert err.rstrip().endswith("; nothing half-written was kept")
    assert not _leftovers(out)


def test_an_atomic_write_on_a_full_disk_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "result.json"
    path.write_text("old")

    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFullError) as raised:
        atomic_write_text("new", path)
    assert str(raised.value) == (
        f"no space left on device while writing {path}; nothing half-written was kept"
    )
    assert raised.value.errno == errno.ENOSPC and path.read_text() == "old"
    assert not _leftovers(tmp_path)
    monkeypatch.undo()

    def numpy_full(handle: object, array: np.ndarray) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", numpy_full)  # a study cell's predictions.npy
    from partnd.recipes.study_cell_store import save_npy

    with pytest.raises(DiskFullError):
        atomic_save(np.zeros(3), tmp_path / "predictions.npy", save=save_npy)
    assert not (tmp_path / "predictions.npy").exists() and not _leftovers(tmp_path)


def test_any_full_disk_ends_a_command_with_one_line(capsys: pytest.CaptureFixture) -> None:
    def body() -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/store.zarr/c/0")

    assert run_command("partnd preprocess", OptionNames(), body) == 1
    assert capsys.readouterr().err == (
        "partnd preprocess: error: no space left on device while writing /data/store.zarr/c/0\n"
    )

    def other() -> int:
        raise OSError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):
        run_command("partnd preprocess", OptionNames(), other)


def test_a_hypnogram_edf_on_a_full_disk_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """partnd predict --out night.edf kept '.night.edf.partial' after a failed write."""
    import pyedflib

    from partnd.inference import Prediction

    prediction = Prediction(
        labels=np.array([0, 1]),
        probabilities=np.eye(2, dtype=np.float32),
        class_names=["W", "N1"],
        epoch_seconds=30.0,
    )

    def full(self: object, *args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pyedflib.EdfWriter, "writeAnnotation", full)
    with pytest.raises(DiskFullError, match=r"night\.edf; nothing half-written was kept"):
        prediction.write_edf(tmp_path / "night.edf")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
