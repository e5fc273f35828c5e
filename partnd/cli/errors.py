"""How every ``partnd`` command reports a failure: one line naming its options, no traceback.

The library's errors name the Python arguments (``out_dir: expected ... (pass overwrite=True to
clear it)``); a command line has options (``--out``, ``--overwrite``). Each command declares the
mapping once (:class:`OptionNames`) and runs its body through :func:`run_command`, which turns

* :class:`~partnd._validation.InputError` (and ``FileNotFoundError``/``FileExistsError`` raised
  for its paths) into ``<prog>: error: <message with options>`` and exit status 2;
* :class:`~partnd.engine.trainer.NonFiniteLossError` into the same line and status 1;
* a full disk (:class:`~partnd._disk.DiskFullError`, ``OSError`` ``ENOSPC``, ``torch.save``'s
  failed write) into ``no space left on device while writing PATH ...`` and status 1;
* Ctrl-C / SIGTERM (``KeyboardInterrupt``, or the engine's
  :class:`~partnd.engine.trainer.TrainingInterrupted` after it saved a resumable checkpoint) into
  ``<prog>: interrupted ...`` and status ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM);
* a closed standard output (``partnd evaluate ... | head``) into a quiet end with status 141, as
  other commands end on SIGPIPE.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from partnd._disk import DiskFullError, is_disk_full
from partnd._validation import InputError, rename_arguments

__all__ = ["OptionNames", "run_command"]

_CONFIG_FIELD = re.compile(r"\b([A-Z]\w*Config)\.([a-z_]\w*)")


@dataclass(frozen=True)
class OptionNames:
    """The options a command gives for the arguments of the functions it calls.

    Attributes:
        options: API argument name -> option (``{"out_dir": "--out", "path": "RECORDING"}``).
        config_fields: Also name ``PretrainConfig.<field>`` / ``FinetuneConfig.<field>`` by their
            generated options (``--<field-name>``), as ``partnd pretrain``/``finetune`` do.
        config_assignments: Configuration class -> the options that assign its fields as
            ``FIELD=VALUE`` (``{"PretrainConfig": "--set/--pretrain-set"}`` names
            ``PretrainConfig.lr`` as ``--set/--pretrain-set lr``), as the image recipe does.
    """

    options: Mapping[str, str] = field(default_factory=dict)
    config_fields: bool = False
    config_assignments: Mapping[str, str] = field(default_factory=dict)

    def _config_field(self, match: re.Match[str]) -> str:
        config, name = match.group(1), match.group(2)
        if config in self.config_assignments:
            return f"{self.config_assignments[config]} {name}"
        return "--" + name.replace("_", "-") if self.config_fields else match.group(0)

    def translate(self, message: str) -> str:
        """``message`` with every API argument it names replaced by its option (see
        :func:`~partnd._validation.rename_arguments`)."""
        if self.config_fields or self.config_assignments:
            message = _CONFIG_FIELD.sub(self._config_field, message)
        return rename_arguments(message, self.options)


def run_command(prog: str, names: OptionNames, body: Callable[[], int | None]) -> int:
    """Run a command's ``body`` and turn its failures into one line (on stderr) and a status.

    Args:
        prog: The command as shown in messages (``"partnd pretrain"``).
        names: The command's option names.
        body: Does the work; returns the exit status (``None`` for 0).

    Returns:
        ``body``'s status, 2 for bad input, 1 for a non-finite loss, ``128 + signal`` when
        interrupted, 141 when standard output was closed.
    """

    def say(prefix: str, message: str) -> None:  # one line, whatever the message embeds
        print(f"{prog}: {prefix}{' '.join(names.translate(message).split())}", file=sys.stderr)

    try:
        status = int(body() or 0)
        sys.stdout.flush()  # a closed stdout fails here, not in Python's flush at exit
        return status
    except (InputError, FileNotFoundError, FileExistsError) as error:
        say("error: ", str(error))
        return 2
    except FloatingPointError as error:
        from partnd.engine.trainer import NonFiniteLossError

        if not isinstance(error, NonFiniteLossError):
            raise
        say("error: ", str(error))
        return 1
    except KeyboardInterrupt as error:
        say("", str(error) or "interrupted")
        return 128 + int(getattr(error, "signal_number", signal.SIGINT))
    except BrokenPipeError:  # the reader of stdout is gone: nothing more can be shown
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        os.close(devnull)
        return 141  # 128 + SIGPIPE
    except (OSError, RuntimeError) as error:
        if not is_disk_full(error):
            raise
        message = str(error)
        if not isinstance(error, DiskFullError):  # a writer without a temporary file
            written = getattr(error, "filename", None) or "a file"
            message = f"no space left on device while writing {written}"
        say("error: ", message)
        return 1
