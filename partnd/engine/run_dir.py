"""Run directory layout, refusal/overwrite/resume rules and run metadata.

Layout of a run directory::

    out_dir/
      config.json        the resolved configuration (preset + overrides), reloadable
      meta.json          versions, git hash, world size, command line, derived quantities
      metrics.jsonl      one JSON record per logged step / epoch
      metrics.csv        the same records as a table
      tb/                TensorBoard event files
      checkpoints/       last.pt, epoch_XXXX.pt (K most recent), best.pt (fine-tuning)
      result.json        written last by a recipe that is done with the run (its result file)

Two questions every caller asks of a run directory are answered here and nowhere else:
:attr:`RunDir.resumable` (can an interrupted run continue? it has ``checkpoints/last.pt``),
:meth:`RunDir.finished` (is it done? its result file exists; written atomically and last, so a
half-written run never looks finished), and, for the engine's own part,
:meth:`RunDir.trained` (did training reach its last epoch or stop early?).
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from partnd._validation import check
from partnd._version import __version__
from partnd.engine.checkpoint import CheckpointManager, atomic_write_json

__all__ = ["RESULT_FILE", "RUN_MARKERS", "RunDir", "git_revision", "run_metadata"]


#: Entries a run directory gets first; ``overwrite`` clears only directories holding one of them.
RUN_MARKERS = ("config.json", "meta.json", "checkpoints", "tb")
#: The result file a recipe writes last into a run directory it is done with.
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory (see the module docstring for the layout)."""

    root: Path

    @property
    def config_path(self) -> Path:
        """``config.json``."""
        return self.root / "config.json"

    @property
    def meta_path(self) -> Path:
        """``meta.json``."""
        return self.root / "meta.json"

    @property
    def metrics_jsonl(self) -> Path:
        """``metrics.jsonl``."""
        return self.root / "metrics.jsonl"

    @property
    def metrics_csv(self) -> Path:
        """``metrics.csv``."""
        return self.root / "metrics.csv"

    @property
    def tb_dir(self) -> Path:
        """TensorBoard folder ``tb/``."""
        return self.root / "tb"

    @property
    def checkpoints_dir(self) -> Path:
        """``checkpoints/``."""
        return self.root / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        """``checkpoints/last.pt``."""
        return self.checkpoints_dir / CheckpointManager.LAST

    @classmethod
    def check(cls, out_dir: str | Path, *, resume: bool, overwrite: bool) -> RunDir:
        """Validate the resume/overwrite rules without touching the disk.

        Rules: ``resume`` and ``overwrite`` exclude each other; ``resume`` needs a run that
        started (``config.json``; it continues from ``checkpoints/last.pt``, or starts again from
        step 0 with the stored configuration when the run stopped before its first checkpoint);
        without either flag the directory must be new or empty; with ``overwrite`` a non-empty
        directory must hold one of :data:`RUN_MARKERS` (a folder that is not a partnd run is never
        cleared).

        Raises:
            InputError: If a rule is broken.
        """
        check(
            not (resume and overwrite),
            "resume/overwrite",
            "at most one of resume=True and overwrite=True",
            "both True",
        )
        root = Path(out_dir)
        check(not root.is_file(), "out_dir", "a directory path", f"the file {root}")
        run_dir = cls(root)
        if resume:
            check(
                run_dir.config_path.is_file(),
                "out_dir",
                "a run directory holding config.json (a run that started) when resume=True",
                f"{root} without it (start a new run without resume=True)",
            )
        elif root.is_dir() and any(root.iterdir()):
            check(
                overwrite,
                "out_dir",
                "a new or empty directory (pass overwrite=True to clear it, or resume=True to "
                "continue the run in it)",
                f"the non-empty directory {root}",
            )
            check(
                run_dir.looks_like_a_run(),
                "out_dir",
                "a partnd run directory when overwrite=True (overwrite only clears earlier runs; "
                f"it never deletes other folders: one of {list(RUN_MARKERS)} must be present)",
                f"the non-empty directory {root} without any of them",
            )
        return run_dir

    @property
    def resumable(self) -> bool:
        """Whether an interrupted run can continue: ``checkpoints/last.pt`` exists (written
        atomically, so a checkpoint being written does not count)."""
        return self.last_checkpoint.is_file()

    def finished(self, result_file: str = RESULT_FILE) -> bool:
        """Whether the run is done: its result file exists (:meth:`write_result` writes it
        atomically, after everything else, so an interrupted or half-written run is not done).

        Args:
            result_file: Name of the result file in the directory (recipes that predate the
                common name keep theirs: ``selection.json``, ``train_result.json``).
        """
        return (self.root / result_file).is_file()

    def write_result(self, result: dict[str, Any], result_file: str = RESULT_FILE) -> None:
        """Write the result file atomically; call it last: it marks the run finished."""
        atomic_write_json(result, self.root / result_file)

    def read_result(self, result_file: str = RESULT_FILE) -> dict[str, Any]:
        """Read a finished run's result file.

        Raises:
            InputError: If the run has not finished (no result file).
        """
        path = self.root / result_file
        check(
            path.is_file(), "out_dir", f"a finished run (its {result_file})", f"none in {self.root}"
        )
        values: dict[str, Any] = json.loads(path.read_text())
        return values

    def history(self) -> list[dict[str, Any]]:
        """The records of ``metrics.jsonl`` (``[]`` without one); a last line cut short by a
        crash while it was written is left out."""
        if not self.metrics_jsonl.is_file():
            return []
        lines = [line for line in self.metrics_jsonl.read_text().splitlines() if line.strip()]
        records = []
        for number, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number + 1 < len(lines):  # only the last line can be cut short
                    raise
        return records

    def resolved(self) -> dict[str, Any]:
        """What the latest launch resolved (``meta.json``'s ``resolved``, from its last resume
        when it was resumed): steps per epoch, epochs, total steps, peak lr, ...

        Raises:
            InputError: If the run has not started (no ``meta.json`` with ``resolved``).
        """
        meta = self.read_meta()
        launches = [meta, *meta.get("resumes", [])]
        resolved = [launch["resolved"] for launch in launches if "resolved" in launch]
        check(bool(resolved), "out_dir", "a started engine run (meta.json)", f"none in {self.root}")
        values: dict[str, Any] = resolved[-1]
        return values

    def trained(self) -> bool:
        """Whether the engine's training reached its end: ``metrics.jsonl`` holds an epoch record
        of the last epoch (``resolved()["epochs"]``) or an early stop. A run stopped by
        ``max_steps``, interrupted, or not started has not."""
        if not self.meta_path.is_file():
            return False
        records = self.history()
        if any(record.get("phase") == "early_stop" for record in records):
            return True
        epochs = [int(record["epoch"]) for record in records if record.get("phase") == "epoch"]
        return bool(epochs) and max(epochs) + 1 >= int(self.resolved()["epochs"])

    def looks_like_a_run(self) -> bool:
        """Whether the directory holds anything a partnd run writes (it may be incomplete)."""
        return any((self.root / name).exists() for name in RUN_MARKERS)

    def create(self, *, clear: bool) -> None:
        """Create the folders (after deleting the directory's contents when ``clear``)."""
        if clear:
            self.clear()
        for folder in (self.root, self.tb_dir, self.checkpoints_dir):
            folder.mkdir(parents=True, exist_ok=True)

    def clear(self) -> None:
        """Delete the directory's contents (the directory itself stays)."""
        if not self.root.is_dir():
            return
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def write_config(self, config: dict[str, Any]) -> None:
        """Write ``config.json`` atomically."""
        atomic_write_json(config, self.config_path)

    def read_config(self) -> dict[str, Any]:
        """Read ``config.json``."""
        check(self.config_path.is_file(), "out_dir", "a run directory with config.json", self.root)
        values: dict[str, Any] = json.loads(self.config_path.read_text())
        return values

    def read_meta(self) -> dict[str, Any]:
        """Read ``meta.json`` (``{}`` when there is none)."""
        if not self.meta_path.is_file():
            return {}
        values: dict[str, Any] = json.loads(self.meta_path.read_text())
        return values

    def write_meta(self, meta: dict[str, Any], *, resumed: bool) -> None:
        """Write ``meta.json``; on resume keep the first launch and append to ``resumes``."""
        if resumed and self.meta_path.is_file():
            previous = json.loads(self.meta_path.read_text())
            previous.setdefault("resumes", []).append(meta)
            meta = previous
        atomic_write_json(meta, self.meta_path)


def git_revision(path: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the repository holding ``path`` (partnd's source by default).

    Returns:
        The commit hash with a ``+dirty`` suffix for uncommitted changes, or ``None`` when ``path``
        is not in a git checkout or git is unavailable.
    """
    where = str(path or Path(__file__).resolve().parent)
    try:
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if status else head


def run_metadata(*, world_size: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance of a launch: versions, git hash, world size, command line, host and time.

    Args:
        world_size: Number of training processes.
        extra: Derived quantities to record (effective lr, steps per epoch, data shape, ...).
    """
    return {
        "partnd_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "git_revision": git_revision(),
        "world_size": world_size,
        "command_line": list(sys.argv),
        "hostname": platform.node(),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        **(extra or {}),
    }
