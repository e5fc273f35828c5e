"""The registry of pretraining objectives: ``method`` name -> builder.

A leaf module (it imports nothing of partnd at run time), so that
:class:`~partnd.engine.config.PretrainConfig` can check its ``method`` against the registered
names without an import circle. Importing it runs ``partnd.objectives``, which registers the
built-in objectives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partnd.engine.config import PretrainConfig
    from partnd.objectives.base import Objective
    from partnd.signal_info import SignalSpec

__all__ = [
    "DATA_KINDS",
    "ObjectiveBuilder",
    "ObjectiveSpec",
    "list_objectives",
    "register_objective",
    "registered",
]

ObjectiveBuilder = Callable[["PretrainConfig", "SignalSpec"], "Objective"]


@dataclass(frozen=True)
class ObjectiveSpec:
    """A registered objective.

    Attributes:
        name: The ``method`` name.
        build: ``build(config, spec) -> Objective``.
        summary: One line on what it learns.
        data: What it trains on: ``"items"`` (any N-D items: EEG windows, images, volumes) or
            ``"segments"`` (segments of consecutive windows of one night, from a sleep store).
    """

    name: str
    build: ObjectiveBuilder
    summary: str
    data: str = "items"


_REGISTRY: dict[str, ObjectiveSpec] = {}


DATA_KINDS = ("items", "segments")


def register_objective(
    name: str, build: ObjectiveBuilder, summary: str, data: str = "items"
) -> None:
    """Add (or replace) an objective under ``name`` (``data``: see :class:`ObjectiveSpec`)."""
    if data not in DATA_KINDS:
        raise ValueError(f"data: expected one of {DATA_KINDS}, got {data!r}")
    _REGISTRY[name] = ObjectiveSpec(name=name, build=build, summary=summary, data=data)


def registered(name: str) -> ObjectiveSpec | None:
    """The objective registered under ``name``, or ``None``."""
    return _REGISTRY.get(name)


def list_objectives(data: str | None = None) -> list[str]:
    """Names accepted by ``pretrain(method=...)``, sorted; only those that train on ``data``
    (``"items"`` or ``"segments"``) when given."""
    return sorted(name for name, spec in _REGISTRY.items() if data in (None, spec.data))
