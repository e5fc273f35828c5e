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
    from partnd.data import SignalSpec
    from partnd.engine.config import PretrainConfig
    from partnd.objectives.base import Objective

__all__ = [
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
    """

    name: str
    build: ObjectiveBuilder
    summary: str


_REGISTRY: dict[str, ObjectiveSpec] = {}


def register_objective(name: str, build: ObjectiveBuilder, summary: str) -> None:
    """Add (or replace) an objective under ``name``."""
    _REGISTRY[name] = ObjectiveSpec(name=name, build=build, summary=summary)


def registered(name: str) -> ObjectiveSpec | None:
    """The objective registered under ``name``, or ``None``."""
    return _REGISTRY.get(name)


def list_objectives() -> list[str]:
    """Names accepted by ``pretrain(method=...)``, sorted."""
    return sorted(_REGISTRY)
