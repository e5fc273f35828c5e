"""Input validation helpers shared by every public entry point.

Errors name the argument, say what was expected and what was received, so that a user who passes a
wrongly shaped batch or an unknown option can fix the call without reading the source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported lazily: preprocessing workers never need it
    import torch

__all__ = ["InputError", "check", "check_finite", "describe"]


class InputError(ValueError):
    """Raised when an argument does not meet the documented contract.

    Subclasses :class:`ValueError` so callers that already catch ``ValueError`` keep working.
    """


def describe(value: Any) -> str:
    """Return a short human description of ``value`` for error messages.

    Tensors and arrays are described by shape and dtype, not by their (possibly huge) contents.
    """
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check(condition: bool, argument: str, expected: str, got: Any) -> None:
    """Raise :class:`InputError` unless ``condition`` holds.

    Args:
        condition: The property the argument must satisfy.
        argument: Name of the offending argument as the user wrote it (e.g. ``"x"``).
        expected: What a valid value looks like (e.g. ``"a tensor [B, C, T] with T >= 100"``).
        got: The value actually received; described with :func:`describe` unless already a string.
    """
    if not condition:
        got_text = got if isinstance(got, str) else describe(got)
        raise InputError(f"{argument}: expected {expected}, got {got_text}")


def check_finite(tensor: torch.Tensor, argument: str) -> None:
    """Raise :class:`InputError` if ``tensor`` holds NaN or Inf values.

    Args:
        tensor: Any floating point tensor.
        argument: Name of the argument for the error message.
    """
    import torch

    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        n_bad = int((~torch.isfinite(tensor)).sum())
        raise InputError(
            f"{argument}: expected only finite values, got {n_bad} NaN/Inf value(s) "
            f"in a tensor of shape {tuple(tensor.shape)}"
        )
