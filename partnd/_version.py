"""The package version: one definition, read by ``pyproject.toml`` and by run metadata."""

__all__ = ["__version__"]

__version__ = "0.1.0"
