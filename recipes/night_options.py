"""The ``--night-set FIELD=VALUE`` option of the sleep recipes: fields of the night arm's
fine-tuning config, applied after every other setting and saved with the study."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from partnd._validation import check
from partnd.engine.config import FinetuneConfig

__all__ = ["add_night_set_argument", "night_overrides"]


def add_night_set_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--night-set`` (repeatable, ``args.night_set``: the ``FIELD=VALUE`` texts)."""
    parser.add_argument(
        "--night-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a fine-tuning config field of the night arm (repeatable; values are JSON), "
        "applied last: e.g. min_steps=150 trains every night classifier for 150 steps, "
        "probe_steps=100 holds a pretrained encoder for the first 100 steps (linear probe, then "
        "fine-tune; a no-op for the rows trained from scratch), pretrained_levels=temporal "
        "starts a part_windows night classifier from its pretrained temporal level only (and "
        "a fresh window encoder). Saved with the study: a study "
        "directory keeps the values it was made with",
    )


def night_overrides(assignments: Sequence[str]) -> dict[str, Any]:
    """The night arm's :class:`FinetuneConfig` fields of ``--night-set FIELD=VALUE`` options.

    Args:
        assignments: The ``FIELD=VALUE`` texts; values are read as the field's type
            (:meth:`FinetuneConfig.parse_value`), a later assignment of a field wins.

    Returns:
        Field name -> value.

    Raises:
        InputError: An item without ``=`` or an unknown field, naming ``--night-set``.
    """
    values: dict[str, Any] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        check(bool(sep) and bool(key), "--night-set", "FIELD=VALUE", repr(item))
        FinetuneConfig.check_field_names([key], "--night-set")
        values[key] = FinetuneConfig.parse_value(key, text)
    return values
