"""A recipe's report files, written atomically: tables as CSV, Markdown and JSON, figures as PNG.

Shared by the sleep recipes (staging, sample efficiency), the image recipes and COCO detection.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from partnd.engine.checkpoint import atomic_save, atomic_write_text

__all__ = ["markdown_table", "save_figure", "write_table"]


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of ``rows`` in the order first met."""
    return list(dict.fromkeys(key for row in rows for key in row))


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` as a Markdown table: every key of ``rows`` a column, in the order first met; a
    row's missing columns are left empty."""
    columns = _columns(rows)
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


def write_table(
    rows: Sequence[Mapping[str, Any]],
    out_dir: Path,
    name: str,
    markdown: Sequence[Mapping[str, Any]] | None = None,
) -> None:
    """Write ``<name>.csv``, ``<name>.md`` and ``<name>.json`` (atomically each).

    The columns are every key of ``rows`` in the order first met, so rows may hold different
    columns (a partial study: a pool's cells finished at one budget only); a row's missing
    columns are left empty in the CSV and Markdown tables.

    Args:
        rows: The full table (CSV and JSON).
        out_dir: The folder written to.
        name: The files' stem.
        markdown: The rows of the Markdown table, when it shows fewer columns than the full
            table (default: ``rows``).
    """
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_columns(rows), restval="")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(buffer.getvalue(), out_dir / f"{name}.csv")
    atomic_write_text(
        markdown_table(rows if markdown is None else markdown), out_dir / f"{name}.md"
    )
    atomic_write_text(json.dumps(list(rows), indent=2) + "\n", out_dir / f"{name}.json")


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` as a PNG (120 dpi) atomically and close it."""
    atomic_save(
        fig, path, save=lambda figure, handle: figure.savefig(handle, format="png", dpi=120)
    )
    plt.close(fig)
