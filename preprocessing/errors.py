"""The error a record-level preprocessing step raises, with a short machine-readable reason.

Batch preprocessing catches :class:`RecordError`, writes ``reason`` and ``detail`` to the store's
manifest and goes on with the other records. The reasons are the constants below.
"""

from __future__ import annotations

__all__ = [
    "ALL_UNDEFINED",
    "FLAT_CHANNEL",
    "LABEL_LENGTH_MISMATCH",
    "MISSING_CHANNEL",
    "MISSING_FILE",
    "NON_FINITE",
    "NO_WINDOWS",
    "OUT_OF_RANGE",
    "TOO_SHORT",
    "UNEXPECTED_ERROR",
    "UNREADABLE_HEADER",
    "UNREADABLE_LABELS",
    "UNREADABLE_SIGNAL",
    "RecordError",
]

MISSING_FILE = "missing_file"
UNREADABLE_HEADER = "unreadable_header"
UNREADABLE_SIGNAL = "unreadable_signal"
UNREADABLE_LABELS = "unreadable_labels"
MISSING_CHANNEL = "missing_channel"
LABEL_LENGTH_MISMATCH = "label_length_mismatch"
NON_FINITE = "nan"
FLAT_CHANNEL = "flat_channel"
ALL_UNDEFINED = "all_undefined"
NO_WINDOWS = "no_windows"
TOO_SHORT = "too_short"
OUT_OF_RANGE = "out_of_range"
UNEXPECTED_ERROR = "error"


class RecordError(Exception):
    """A record cannot be preprocessed.

    Args:
        reason: One of this module's reason constants (e.g. ``"missing_channel"``).
        detail: Human-readable explanation naming the file, channel or count involved.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
