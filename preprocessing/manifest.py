"""The store's ``manifest.json``: one processing report per record, rewritten atomically.

Only the process that drives a preprocessing run writes the manifest (workers return their entries
to it). Each write goes to a temporary file in the store directory that then replaces
``manifest.json`` (:func:`os.replace`), so a reader or a killed run never sees a partial file.

An entry looks like ``{"status": "done" | "failed", "reason": None | "<reason>", "detail": ...,
"split": ..., "n_kept": ..., "n_dropped_by_reason": {...}, "source_checksum": ..., "source_sha256":
{name: sha256}, "source_files": {name: [size, mtime_ns]}, "duration_s": ..., "seconds": ...}``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from partnd.datasets.store import MANIFEST_FILENAME, read_manifest_file

__all__ = ["STATUS_DONE", "STATUS_FAILED", "Manifest", "read_manifest", "write_manifest"]

STATUS_DONE = "done"
STATUS_FAILED = "failed"


def read_manifest(
    store_path: str | Path, argument: str = "store_path"
) -> dict[str, dict[str, Any]]:
    """Entries of ``STORE/manifest.json`` by record id (``{}`` when there is none yet).

    Raises:
        InputError: A manifest that is not a JSON object, naming ``argument`` (the store).
    """
    return read_manifest_file(store_path, argument)


def write_manifest(store_path: str | Path, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Atomically replace ``STORE/manifest.json`` with ``entries`` (keys sorted)."""
    store_path = Path(store_path)
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{MANIFEST_FILENAME}.", suffix=".tmp", dir=store_path
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(dict(sorted(entries.items())), handle, indent=1, allow_nan=False)
            handle.write("\n")
        os.replace(temporary, store_path / MANIFEST_FILENAME)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


class Manifest:
    """In-memory manifest of a store that is written back on every update.

    Args:
        store_path: The store; its existing manifest is loaded.
        argument: Name of the store in the caller's signature, for error messages.
    """

    def __init__(self, store_path: str | Path, argument: str = "store_path") -> None:
        self.store_path = Path(store_path)
        self.entries: dict[str, dict[str, Any]] = read_manifest(self.store_path, argument)

    def update(self, record_id: str, entry: Mapping[str, Any]) -> None:
        """Set the entry of ``record_id`` and rewrite ``manifest.json``."""
        self.entries[record_id] = dict(entry)
        write_manifest(self.store_path, self.entries)
