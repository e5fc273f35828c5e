"""The ``partnd`` command line (:mod:`partnd.cli.commands`) and how its failures are reported
(:mod:`partnd.cli.errors`). ``python -m partnd.cli`` runs it too (``torchrun ... -m
partnd.cli``)."""

from partnd.cli.commands import SUBCOMMANDS, Subcommand, main, register_subcommand

__all__ = ["SUBCOMMANDS", "Subcommand", "main", "register_subcommand"]
