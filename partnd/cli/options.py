"""How ``partnd`` commands declare an on/off option: ``--name`` with its ``--no-name`` form."""

from __future__ import annotations

import argparse

__all__ = ["add_switch"]


def add_switch(parser: argparse.ArgumentParser, option: str, *, default: bool, help: str) -> None:
    """Add ``option`` (``"--progress"``) and ``--no-<name>`` to ``parser``.

    Args:
        parser: The command's parser.
        option: The option, with its leading ``--``.
        default: Its value when neither form is given.
        help: The help text shown by ``--help``.
    """
    parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help)
