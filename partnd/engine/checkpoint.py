"""Atomic checkpoint files with retention (``last.pt`` plus the K most recent ``epoch_XXXX.pt``).

Every file is written to a temporary file in the destination directory, flushed, fsync'ed and
moved into place with :func:`os.replace`, so an interrupted save never leaves a partial file under
a checkpoint's name (the timm ``CheckpointSaver`` pattern).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch

from partnd._disk import DiskFullError, is_disk_full
from partnd._validation import InputError

__all__ = [
    "CheckpointManager",
    "append_text",
    "atomic_save",
    "atomic_write_json",
    "atomic_write_text",
    "load_checkpoint",
]

_EPOCH_FILE = re.compile(r"^epoch_(\d{4,})\.pt$")


@contextlib.contextmanager
def _atomic_file(path: Path, mode: str) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on success fsync it and ``os.replace`` it onto ``path``.
    On any failure the temp file is removed; a full disk is raised as :class:`DiskFullError`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        if is_disk_full(error) and not isinstance(error, DiskFullError):
            raise DiskFullError(path) from error
        raise
    with contextlib.suppress(OSError):
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def atomic_save(
    obj: Any, path: str | Path, save: Callable[[Any, IO[bytes]], None] | None = None
) -> None:
    """Serialise ``obj`` to ``path`` atomically (temp file, fsync, ``os.replace``).

    Args:
        obj: Anything ``save`` can write (by default a ``torch.save``-able object).
        path: Destination file.
        save: Writer called as ``save(obj, binary_handle)``; ``None``: ``torch.save``.

    Raises:
        DiskFullError: When the disk is full; the temporary file is removed and ``path`` keeps
            its previous content.
    """
    with _atomic_file(Path(path), "wb") as handle:
        (torch.save if save is None else save)(obj, handle)


def atomic_write_text(text: str, path: str | Path) -> None:
    """Write ``text`` to ``path`` atomically."""
    with _atomic_file(Path(path), "w") as handle:
        handle.write(text)


def append_text(text: str, path: str | Path) -> None:
    """Append ``text`` to ``path`` (created if missing) whole or not at all.

    For files that grow a line at a time (``metrics.jsonl``): a failed write, a full disk above
    all, cuts the file back to its previous length, so no line is left half-written.

    Raises:
        DiskFullError: When the disk is full; ``path`` keeps its previous content.
    """
    path = Path(path)
    data = text.encode()
    with open(path, "ab", buffering=0) as handle:
        size = handle.seek(0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):  # a raw write may take only part of it
                written += handle.write(data[written:]) or 0
        except BaseException as error:
            os.ftruncate(handle.fileno(), size)
            if is_disk_full(error):
                raise DiskFullError(path) from error
            raise


def atomic_write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    atomic_write_text(json.dumps(data, indent=2, default=str) + "\n", path)


def load_checkpoint(path: str | Path, argument: str = "path") -> dict[str, Any]:
    """Load a file written by partnd (checkpoint, ``encoder.pt``, ``classifier.pt``) onto the CPU.

    Args:
        path: The file.
        argument: The caller's name for it in error messages.

    Raises:
        InputError: If the file is missing, unreadable (e.g. truncated) or not a dict.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{argument}: expected an existing partnd file, got {path} (missing)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises several types for truncated or foreign files
        raise InputError(
            f"{argument}: expected a file saved by partnd (torch.save), got {path} that cannot be "
            f"read ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(state, dict):
        raise InputError(
            f"{argument}: expected a dict saved by partnd, got {type(state).__name__} in {path}"
        )
    return state


class CheckpointManager:
    """Writes ``last.pt`` and keeps the ``keep`` most recent ``epoch_XXXX.pt`` in ``directory``.

    Args:
        directory: Checkpoint folder (created on first save).
        keep: Number of epoch checkpoints retained (older ones are deleted after a save).
    """

    LAST = "last.pt"
    BEST = "best.pt"

    def __init__(self, directory: str | Path, keep: int) -> None:
        self.directory = Path(directory)
        self.keep = keep

    @property
    def last_path(self) -> Path:
        """Path of the most recent checkpoint."""
        return self.directory / self.LAST

    @property
    def best_path(self) -> Path:
        """Path of the best-model weights (fine-tuning with validation)."""
        return self.directory / self.BEST

    def epoch_path(self, epoch: int) -> Path:
        """Path of the checkpoint written after 0-based ``epoch``."""
        return self.directory / f"epoch_{epoch:04d}.pt"

    def epoch_checkpoints(self) -> list[Path]:
        """Existing epoch checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [
            (int(match.group(1)), path)
            for path in self.directory.iterdir()
            if (match := _EPOCH_FILE.match(path.name))
        ]
        return [path for _, path in sorted(found)]

    def save_last(self, state: dict[str, Any]) -> Path:
        """Atomically replace ``last.pt`` with ``state``."""
        atomic_save(state, self.last_path)
        return self.last_path

    def save_epoch(self, state: dict[str, Any], epoch: int) -> Path:
        """Write ``epoch_XXXX.pt`` and ``last.pt``, then delete epoch files beyond ``keep``.

        ``last.pt`` becomes a hard link to the epoch file (written once), or a second copy where
        the file system has no hard links.
        """
        path = self.epoch_path(epoch)
        atomic_save(state, path)
        temp_link = self.directory / f".{self.LAST}.{os.getpid()}.link"
        try:
            with contextlib.suppress(FileNotFoundError):
                temp_link.unlink()
            os.link(path, temp_link)
            os.replace(temp_link, self.last_path)
        except OSError:
            self.save_last(state)
        for old in self.epoch_checkpoints()[: -self.keep]:
            old.unlink()
        return path

    def save_best(self, state: dict[str, Any]) -> Path:
        """Atomically replace ``best.pt`` with ``state``."""
        atomic_save(state, self.best_path)
        return self.best_path
