"""Input validation helpers shared by every public entry point.

Errors name the argument, say what was expected and what was received, so that a user who passes a
wrongly shaped batch or an unknown option can fix the call without reading the source.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported lazily: preprocessing workers never need it
    import torch

__all__ = [
    "InputError",
    "check",
    "check_batch_size",
    "check_finite",
    "check_in_range",
    "describe",
    "rename_arguments",
    "renamed_arguments",
]

_NOT_AFTER = r"(?<![\w/.\-])"  # not inside a word, a path or a file name
_BARE_AFTER = r"(?<![\w/.\-\"'])"  # nor quoted (a state dict key, a value)
_BARE_BEFORE = r"(?![\w/.\-\"'])"


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


def check_batch_size(batch_size: Any, argument: str = "batch_size") -> None:
    """Refuse a batch size that is not an int >= 1 (0 or a negative one reached ``torch.split``
    and failed there, naming no argument)."""
    check(
        isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1,
        argument,
        "an int >= 1",
        repr(batch_size),
    )


def check_in_range(low: int, high: int, upper: int, argument: str, what: str) -> None:
    """Refuse integer values whose smallest is ``low`` and largest ``high`` unless all lie in
    ``[0, upper)``.

    Args:
        low: The smallest value.
        high: The largest value.
        upper: The exclusive upper bound.
        argument: Name of the argument for the message.
        what: What the values are, for the message (``"labels"``, ``"patch indices"``).
    """
    check(
        low >= 0 and high < upper,
        argument,
        f"{what} in [0, {upper})",
        f"{what} in [{low}, {high}]",
    )


def check_finite(tensor: torch.Tensor, argument: str) -> None:
    """Raise :class:`InputError` if ``tensor`` holds NaN or Inf values.

    Args:
        tensor: Any floating point tensor.
        argument: Name of the argument for the error message.
    """
    import torch

    if not tensor.is_floating_point() or bool(torch.isfinite(tensor.sum())):
        return  # one reduction: a NaN or Inf anywhere makes the sum NaN or Inf
    if not bool(torch.isfinite(tensor).all()):  # else the sum overflowed: look at every value
        n_bad = int((~torch.isfinite(tensor)).sum())
        raise InputError(
            f"{argument}: expected only finite values, got {n_bad} NaN/Inf value(s) "
            f"in a tensor of shape {tuple(tensor.shape)}"
        )


def rename_arguments(message: str, names: Mapping[str, str]) -> str:
    """``message`` with the arguments it names called by ``names`` (e.g. command-line options).

    Renamed: the argument before the first ``:`` (``train_dataset[3]: ...``, ``a/b: ...``),
    keyword settings (``overwrite=True`` -> ``--overwrite``, ``resume=False`` -> ``--no-resume``,
    ``num_classes=5`` -> ``--num-classes=5``; for names mapped to options) and bare names with an
    underscore (``num_classes``). Words inside paths, file names and quotes are left alone.

    Args:
        message: An error message of this library.
        names: Argument name -> the name to use instead.
    """
    head, sep, rest = message.partition(":")
    if sep and head and " " not in head.split("[")[0]:
        base, bracket, index = head.partition("[")
        renamed = "/".join(names.get(part, part) for part in base.split("/"))
        message = renamed + bracket + index + sep + rest
    for name in sorted(names, key=len, reverse=True):
        new = names[name]
        word = _NOT_AFTER + re.escape(name)
        if new.startswith("--"):
            message = re.sub(word + r"=True\b", new, message)
            message = re.sub(word + r"=False\b", "--no-" + new[2:], message)
            message = re.sub(word + "=", new + "=", message)
        if "_" in name:
            message = re.sub(_BARE_AFTER + re.escape(name) + _BARE_BEFORE, new, message)
    return message


@contextlib.contextmanager
def renamed_arguments(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise an :class:`InputError` of the block with its arguments renamed
    (:func:`rename_arguments`), e.g. a reader's ``path`` as the caller's ``init_weights``."""
    try:
        yield
    except InputError as error:
        raise InputError(rename_arguments(str(error), names)) from None
