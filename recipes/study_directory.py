"""The directory of a study: claimed once, its settings fixed, cleared only on request.

Every recipe (sleep staging, sample efficiency, images) keeps its results under one ``--out``
directory marked by ``study.json``, the settings that produced them. A later run with the same
settings goes on where the earlier stopped; different settings are refused, naming what changed;
``--overwrite`` clears only a directory that holds the marker, never another folder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import shutil
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from partnd._validation import InputError, check
from partnd.cli.errors import OptionNames, run_command
from partnd.engine.checkpoint import atomic_write_json

__all__ = [
    "RECIPE_OPTIONS",
    "STUDY_MARKER",
    "TABLE_ROWS",
    "add_run_arguments",
    "check_table_rows",
    "claim_study_directory",
    "exclusive",
    "record_table_rows",
    "released_on_failure",
    "run_recipe",
]

STUDY_MARKER = "study.json"
TABLE_ROWS = "table_rows.json"
"""The rows (``METHOD:ARM``) each table of a study was last written from."""

RECIPE_OPTIONS = OptionNames(
    {
        "overwrite": "--overwrite",
        "device": "--device",
        "src": "--src",
        "store": "--store",
        "cohort_dir": "--cohort-dir",
        "scale": "--scale",
        "methods": "--methods",
        "budgets": "--budgets",
        "seeds": "--seeds",
        "n_jobs": "--n-jobs",
        "loader_workers": "--loader-workers",
        "pools": "--pools",
        "pool_src": "--pool-src",
        "pool_store": "--pool-store",
        "held_out_subjects": "--held-out-subjects",
        "signal_dtype": "--dtype",
    }
)
"""The API arguments a recipe's messages may name (its study's settings), as its options."""


_RERUN = "run the same command again to continue"
"""How a recipe continues after an interruption: every stage resumes where it stopped."""


def run_recipe(
    prog: str, body: Callable[[], int | None], options: OptionNames = RECIPE_OPTIONS
) -> int:
    """Run a recipe's command ``body``: bad input, a non-finite loss or Ctrl-C end with one line
    naming its ``options`` and an exit status (2, 1, 130), not a traceback (see
    :func:`partnd.cli.errors.run_command`); after Ctrl-C the line says to re-run the command
    (its stages resume)."""
    from partnd.engine.trainer import TrainingInterrupted

    def resumable() -> int | None:
        try:
            return body()
        except TrainingInterrupted as stopped:
            number, checkpoint, step = stopped.signal_number, stopped.checkpoint, stopped.step
            raise TrainingInterrupted(number, checkpoint, step, _RERUN) from None
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted; {_RERUN}") from None

    return run_command(prog, options, resumable)


_ABSENT = object()


def _setting(settings: dict[str, Any], key: str) -> str:
    """A setting as the refusal of another study shows it (a setting one side lacks: its
    default, not recorded)."""
    return repr(settings[key]) if key in settings else "(not recorded: the default)"


def claim_study_directory(
    out: Path,
    settings: dict[str, Any],
    overwrite: bool,
    revisable: Collection[str] = (),
) -> None:
    """Make ``out`` the directory of a study with ``settings``, or check that it already is.

    Args:
        out: The study directory (``--out``).
        settings: JSON-serialisable settings of the study, stored as ``out/study.json``.
        overwrite: Clear ``out`` first; refused unless it is a study directory.
        revisable: Settings nothing was made from yet: another value replaces the stored one
            (e.g. pool sizes refused before their pools were drawn, corrected by the user).

    Raises:
        InputError: ``--out`` is a non-empty directory of something else, or a study made with
            other settings (the message lists each changed setting).
    """
    check(
        not out.exists() or out.is_dir(),
        "--out",
        "a directory for the study (new, empty, or an earlier study of this recipe)",
        f"the file {out}",
    )
    marker = out / STUDY_MARKER
    if overwrite and out.is_dir() and any(out.iterdir()):
        check(
            marker.is_file(),
            "--out",
            f"a study directory to overwrite (holding {STUDY_MARKER}); --overwrite never "
            "deletes other folders",
            f"the non-empty directory {out}",
        )
        shutil.rmtree(out)
    if marker.is_file():
        stored = json.loads(marker.read_text())
        fixed = [key for key in dict.fromkeys([*stored, *settings]) if key not in revisable]
        if stored != settings and all(
            stored.get(key, _ABSENT) == settings.get(key, _ABSENT) for key in fixed
        ):
            atomic_write_json(settings, marker)  # only settings nothing was made from changed
            return
        check(
            stored == settings,
            "--out",
            f"a study made with the same settings (stored in {marker}; use --overwrite to "
            "start over)",
            ", ".join(
                f"{key}: {_setting(stored, key)} stored -> {_setting(settings, key)} given"
                for key in dict.fromkeys([*stored, *settings])
                if stored.get(key, _ABSENT) != settings.get(key, _ABSENT)
            ),
        )
        return
    check(
        not out.exists() or not any(out.iterdir()),
        "--out",
        "a new or empty directory, or an earlier study of this recipe",
        f"the non-empty directory {out}",
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(settings, marker)


@contextlib.contextmanager
def released_on_failure(out: Path) -> Iterator[None]:
    """Remove the study directory ``out`` again when the block fails before making anything in
    it but :data:`STUDY_MARKER` (a command refused after claiming a new directory leaves no folder
    behind). A directory that existed before, or that holds any result, is kept.

    Args:
        out: The study directory (``--out``).
    """
    existed = out.exists()
    try:
        yield
    except BaseException:
        if not existed and out.is_dir() and {p.name for p in out.iterdir()} <= {STUDY_MARKER}:
            shutil.rmtree(out, ignore_errors=True)
        raise


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options every study recipe shares: ``--device``, ``--overwrite``, ``--progress``."""
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--overwrite",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="clear --out first (only ever a study directory)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="progress bars; with --jobs above 1, a line per running task (its step, total and "
        "ETA) every 20 s",
    )


def check_table_rows(out: Path, table: str, rows: Sequence[str]) -> None:
    """Refuse to replace ``out/<table>.md`` (and its siblings), written from other rows, by a
    table of fewer rows: ``--rows`` naming a subset would silently drop the others' results.

    Args:
        out: The study directory.
        table: The table's name (``"results"``, ``"kappa_by_budget"``).
        rows: The rows (``METHOD:ARM``) the table would now be written from.

    Raises:
        InputError: Naming ``--rows`` and the rows the table would lose.
    """
    path = out / TABLE_ROWS
    if not path.is_file() or not (out / f"{table}.md").is_file():
        return
    recorded = json.loads(path.read_text()).get(table, [])
    dropped = [row for row in recorded if row not in rows]
    check(
        not dropped,
        "--rows",
        f"every row of the study's {table}.md ({' '.join(recorded)}) or more: fewer would "
        f"replace it (delete {table}.md to write it from fewer rows)",
        f"{' '.join(rows)}, without {' '.join(dropped)}",
    )


def record_table_rows(out: Path, table: str, rows: Sequence[str]) -> None:
    """Record that ``out/<table>.md`` was written from ``rows`` (see :func:`check_table_rows`)."""
    path = out / TABLE_ROWS
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    atomic_write_json({**recorded, table: list(rows)}, path)


@contextlib.contextmanager
def exclusive(lock: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` while writing ``what``; the system releases
    it when the process ends, however it ends.

    Raises:
        InputError: Another process holds it (``--out`` named: e.g. a worker of a killed
            command still finishing ``what``).
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(
                f"--out: expected no other process writing {what}, got one holding {lock} (a "
                "worker of an interrupted command finishes its task first; run the command "
                "again once it has)"
            ) from None
        yield
