"""Public names of a package face imported on first use (PEP 562 ``__getattr__`` and ``__dir__``).

A package face lists its names and the modules that define them; light users (the sleep store,
preprocessing workers) then do not pay for torch when they import the package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package face.

    Args:
        package: The package's name (``__name__`` of its ``__init__``).
        exports: Public name -> the module defining it, absolute (``"partnd.patches.sampling"``) or
            relative to ``package`` (``".store"``).

    Returns:
        ``(__getattr__, __dir__)``: the first imports a listed name's module on first use and
        raises ``AttributeError`` for any other name; the second lists the module's globals and
        the exported names.
    """

    def module_getattr(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    def module_dir() -> list[str]:
        return sorted([*vars(importlib.import_module(package)), *exports])

    return module_getattr, module_dir
