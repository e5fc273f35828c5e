"""The ``--pretrain-set`` and ``--night-set FIELD=VALUE`` options of the sleep recipes: fields of
every pretraining's config and of the night arm's fine-tuning config, applied after every other
setting and saved with the study; and ``--night-grid FIELD=[V1,V2]``, the night arm's values
each cell tries and chooses among on its validation subjects."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from partnd._validation import check
from partnd.engine.config import PretrainConfig, TrainConfig

__all__ = [
    "add_set_arguments",
    "assigned_fields",
    "assigned_grid",
    "is_grid_values",
    "pretrain_fields_for",
]


def add_set_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--pretrain-set``, ``--night-set`` and ``--night-grid`` (repeatable;
    ``args.pretrain_set``, ``args.night_set`` and ``args.night_grid``: the ``FIELD=VALUE``
    texts)."""
    parser.add_argument(
        "--pretrain-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a pretraining config field of every self-supervised method (repeatable; values "
        "are JSON), applied last: e.g. variance_weight=1000 and covariance_weight=40 add "
        "VICReg's anti-collapse terms to PART's loss, in its units (ignored by the methods "
        "without them); trained_levels=temporal holds part_windows' window encoder at its "
        "random initialisation and trains its temporal level only (the other methods keep "
        "'all'). Saved with the study: a study directory keeps the values it was made with",
    )
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
        "a fresh window encoder), decay_random_window=true gives every random window encoder "
        "the layer-wise decay, those of the rows trained from scratch included. Saved with the "
        "study: a study directory keeps the values it was made with",
    )
    parser.add_argument(
        "--night-grid",
        action="append",
        default=[],
        metavar="FIELD=[V1,V2]",
        help="values of a fine-tuning config field of the night arm (repeatable; a JSON list "
        "of two or more distinct values, e.g. 'layer_decay=[1.0,0.3]'): every night cell "
        "trains once per combination and keeps the one whose selected checkpoint scores the "
        "best kappa on the draw's validation subjects (the first on a tie); combinations a "
        "row ignores train once. Saved with the study",
    )


def assigned_fields(
    assignments: Sequence[str], config_cls: type[TrainConfig], option: str
) -> dict[str, Any]:
    """The ``config_cls`` fields of ``FIELD=VALUE`` options (``--pretrain-set`` with
    :class:`PretrainConfig`, ``--night-set`` with :class:`FinetuneConfig`).

    Args:
        assignments: The ``FIELD=VALUE`` texts; values are read as the field's type
            (``config_cls.parse_value``), a later assignment of a field wins.
        config_cls: The configuration class whose fields they set.
        option: The option the texts came from, named by errors.

    Returns:
        Field name -> value.

    Raises:
        InputError: An item without ``=`` or an unknown field, naming ``option``.
    """
    values: dict[str, Any] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        check(bool(sep) and bool(key), option, "FIELD=VALUE", repr(item))
        config_cls.check_field_names([key], option)
        values[key] = config_cls.parse_value(key, text)
    return values


def assigned_grid(
    assignments: Sequence[str], config_cls: type[TrainConfig], option: str
) -> dict[str, list[Any]]:
    """The ``config_cls`` fields of ``FIELD=[V1,V2,...]`` options (``--night-grid`` with
    :class:`FinetuneConfig`), each with the values a grid tries.

    Args:
        assignments: The ``FIELD=[V1,V2,...]`` texts: a JSON list of two or more distinct
            values per field; a later assignment of a field wins.
        config_cls: The configuration class whose fields they set.
        option: The option the texts came from, named by errors.

    Returns:
        Field name -> its values, in the order given.

    Raises:
        InputError: An item without ``=``, an unknown field, or values that are not a JSON list
            of two or more distinct values, naming ``option``.
    """
    grid: dict[str, list[Any]] = {}
    for key, values in assigned_fields(assignments, config_cls, option).items():
        check(
            is_grid_values(values),
            option,
            f"{key}=[V1,V2,...]: a JSON list of two or more distinct values",
            repr(values),
        )
        grid[key] = list(values)
    return grid


def is_grid_values(values: Any) -> bool:
    """Whether ``values`` can be a grid's values of one field: a list of two or more distinct
    JSON values."""
    if not isinstance(values, list | tuple) or len(values) < 2:
        return False
    texts = [json.dumps(value, sort_keys=True) for value in values]
    return len(set(texts)) == len(texts)


def pretrain_fields_for(method: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--pretrain-set`` fields that apply to ``method``'s pretraining.

    Every field applies, except ``trained_levels`` for a method without a window encoder under
    a temporal level to hold (not in :attr:`PretrainConfig.HELD_LEVEL_METHODS`): that method
    keeps its default, as the methods without VICReg's terms ignore their weights.

    Args:
        method: The pretraining objective.
        fields: Field name -> value, from :func:`assigned_fields`.

    Returns:
        The fields for ``method``'s :class:`PretrainConfig`.
    """
    if method in PretrainConfig.HELD_LEVEL_METHODS:
        return dict(fields)
    return {key: value for key, value in fields.items() if key != "trained_levels"}
