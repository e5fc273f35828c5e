"""The ``partnd`` command line: ``partnd <subcommand> [options]``.

Built-in subcommands are ``pretrain`` and ``finetune``; their options are generated from the
fields of :class:`~partnd.engine.config.PretrainConfig` / :class:`FinetuneConfig` (``--batch-size
128``, ``--no-progress``), and ``--set key=value`` sets any field too. Precedence: ``--preset``,
then ``--config file.json``, then field options and ``--set`` (last wins).

Other subcommands live in their own modules and are registered by import path in
:data:`SUBCOMMANDS` (``"module:function"``, called with the remaining arguments); they are imported
only when invoked, so a missing optional module only breaks its own subcommand. Add one with
:func:`register_subcommand`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig

__all__ = ["SUBCOMMANDS", "Subcommand", "main", "register_subcommand"]

SubcommandMain = Callable[[list[str]], "int | None"]


@dataclass(frozen=True)
class Subcommand:
    """A ``partnd`` subcommand.

    Attributes:
        help: One-line description shown by ``partnd --help``.
        target: ``main(argv)`` itself, or its import path ``"package.module:function"``.
    """

    help: str
    target: str | SubcommandMain

    def resolve(self, name: str) -> SubcommandMain:
        """Import (if needed) and return the subcommand's ``main(argv)``."""
        if callable(self.target):
            return self.target
        module_name, _, function_name = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ImportError(
                f"partnd {name}: this subcommand needs the module {module_name!r}, which could not "
                f"be imported ({error}). Is partnd installed with its recipes and preprocessing "
                "packages?"
            ) from error
        function = getattr(module, function_name, None)
        if not callable(function):
            raise ImportError(f"partnd {name}: {module_name} has no function {function_name!r}")
        return function


SUBCOMMANDS: dict[str, Subcommand] = {}


def register_subcommand(name: str, target: str | SubcommandMain, help: str) -> None:
    """Add (or replace) a subcommand.

    Args:
        name: The word after ``partnd``.
        target: ``main(argv)`` or its lazy import path ``"package.module:function"``.
        help: One-line description.
    """
    SUBCOMMANDS[name] = Subcommand(help=help, target=target)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_config_arguments(parser: argparse.ArgumentParser, config_cls: type[TrainConfig]) -> None:
    parser.add_argument(
        "--preset", choices=config_cls.list_presets(), help="start from a named preset"
    )
    parser.add_argument(
        "--config", type=Path, metavar="JSON", help="a config.json (e.g. of an earlier run)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any config field (repeatable; values are JSON, e.g. scale_range=[0.5,2])",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--overwrite", action="store_true", help="clear --out first")
    fields = parser.add_argument_group(
        f"{config_cls.__name__} fields", "each sets one field (see docs/engine.md)"
    )
    defaults = config_cls().to_dict()
    types = config_cls.field_types()
    for name, doc in config_cls.field_docs().items():
        text = f"{doc} [{types[name]}; default {defaults[name]!r}]".replace("%", "%%")
        if types[name] == "bool":
            fields.add_argument(
                _option(name),
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
        else:
            fields.add_argument(
                _option(name), dest=name, default=argparse.SUPPRESS, metavar="VALUE", help=text
            )


def _config_from_args(
    args: argparse.Namespace, config_cls: type[TrainConfig]
) -> tuple[Any, dict[str, Any]]:
    """``(config or None, overrides)`` from the parsed options (see the module docstring)."""
    config: TrainConfig | None = config_cls.preset(args.preset) if args.preset else None
    if args.config is not None:
        base = config.to_dict() if config is not None else {}
        config = config_cls.from_dict({**base, **config_cls.read_json(args.config)})
    overrides: dict[str, Any] = {}
    for name in config_cls.field_names():
        if name in vars(args):
            value = getattr(args, name)
            overrides[name] = (
                value if isinstance(value, bool) else config_cls.parse_value(name, value)
            )
    for item in args.set:
        key, sep, text = item.partition("=")
        check(bool(sep) and bool(key), "--set", "KEY=VALUE", repr(item))
        overrides[key.strip()] = config_cls.parse_value(key.strip(), text)
    return config, overrides


def _load_array(path: Path, argument: str) -> np.ndarray:
    check(path.exists(), argument, "an existing .npy file", str(path))
    array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    return array


def _load_signals(path: Path, argument: str, **zarr_options: Any) -> Any:
    """A ``.npy`` array ``[N, C, *spatial]`` (memory-mapped) or a ``.zarr`` sleep store dataset."""
    if path.suffix == ".npy":
        return _load_array(path, argument)
    if path.suffix == ".zarr":
        check(path.exists(), argument, "an existing .zarr store", str(path))
        from partnd.datasets import SleepWindowDataset

        return SleepWindowDataset(path, **zarr_options)
    raise InputError(f"{argument}: expected a .npy file or a .zarr store, got {path}")


def _subjects(text: str | None) -> list[str] | None:
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


def _pretrain_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd pretrain",
        description="PART self-supervised pretraining; writes a run directory with encoder.pt.",
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="PATH.npy [N, C, *spatial] or .zarr"
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument("--init-weights", type=Path, help="start from encoder weights")
    _add_config_arguments(parser, PretrainConfig)
    args = parser.parse_args(argv)
    config, overrides = _config_from_args(args, PretrainConfig)
    from partnd.pretraining import pretrain

    result = pretrain(
        _load_signals(args.data, "--data"),
        out_dir=args.out,
        config=config,
        resume=args.resume,
        overwrite=args.overwrite,
        init_weights=args.init_weights,
        **overrides,
    )
    epochs = [record for record in result.history if record.get("phase") == "epoch"]
    final = f", final epoch loss {epochs[-1]['loss']:.4g}" if epochs else ""
    print(f"partnd pretrain: done{final}; encoder saved to {result.run_dir / 'encoder.pt'}")
    return 0


def _finetune_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd finetune",
        description="Fine-tune a pretrained encoder (or train from scratch) as a classifier.",
    )
    parser.add_argument("--data", type=Path, required=True, help="training PATH.npy or .zarr")
    parser.add_argument("--labels", type=Path, help="training labels PATH.npy (for .npy data)")
    parser.add_argument("--val-data", type=Path, help="validation PATH.npy or .zarr")
    parser.add_argument("--val-labels", type=Path, help="validation labels PATH.npy")
    parser.add_argument("--subjects", help="comma-separated training subjects (.zarr data)")
    parser.add_argument("--val-subjects", help="comma-separated validation subjects (.zarr)")
    parser.add_argument("--num-classes", type=int, required=True, help="number of classes K")
    parser.add_argument("--class-names", help="comma-separated class names")
    parser.add_argument(
        "--pretrained",
        type=Path,
        help="pretrain run directory or encoder.pt (omit to train from scratch)",
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    _add_config_arguments(parser, FinetuneConfig)
    args = parser.parse_args(argv)
    config, overrides = _config_from_args(args, FinetuneConfig)
    from partnd.finetuning import finetune

    train = _load_signals(
        args.data, "--data", subjects=_subjects(args.subjects), labelled_only=True
    )
    labels = _load_array(args.labels, "--labels") if args.labels else None
    val, val_labels = None, None
    if args.val_data is not None:
        val = _load_signals(
            args.val_data, "--val-data", subjects=_subjects(args.val_subjects), labelled_only=True
        )
        val_labels = _load_array(args.val_labels, "--val-labels") if args.val_labels else None
    result = finetune(
        args.pretrained,
        train,
        num_classes=args.num_classes,
        val_dataset=val,
        out_dir=args.out,
        config=config,
        class_names=_subjects(args.class_names),
        resume=args.resume,
        overwrite=args.overwrite,
        train_labels=None if labels is None else [int(v) for v in labels],
        val_labels=None if val_labels is None else [int(v) for v in val_labels],
        **overrides,
    )
    print(f"partnd finetune: done; best metrics {result.best_metrics} in {result.run_dir}")
    return 0


register_subcommand("pretrain", _pretrain_main, "PART self-supervised pretraining")
register_subcommand("finetune", _finetune_main, "fine-tune an encoder as a classifier")
register_subcommand(
    "preprocess",
    "preprocessing.physionet2018:main",
    "preprocess PhysioNet 2018 recordings into a zarr sleep store",
)
register_subcommand("demo", "recipes.sleep_staging:main", "run the sleep-staging demo recipe")


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [f"  {name.ljust(width)}  {sub.help}" for name, sub in SUBCOMMANDS.items()]
    return (
        "usage: partnd <subcommand> [options]\n\nsubcommands:\n"
        + "\n".join(lines)
        + "\n\nRun 'partnd <subcommand> --help' for a subcommand's options."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``partnd`` command.

    Args:
        argv: Arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 for bad input or usage, 1 for an unavailable subcommand
        or a run stopped by a non-finite loss (the message says where and why; no traceback).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] in ("-h", "--help"):
        print(_usage())
        return 0 if arguments else 2
    name, rest = arguments[0], arguments[1:]
    if name not in SUBCOMMANDS:
        print(f"partnd: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        function = SUBCOMMANDS[name].resolve(name)
    except ImportError as error:
        print(str(error), file=sys.stderr)
        return 1
    try:
        status = function(rest)
    except InputError as error:
        print(f"partnd {name}: error: {error}", file=sys.stderr)
        return 2
    except FloatingPointError as error:
        from partnd.engine.trainer import NonFiniteLossError

        if not isinstance(error, NonFiniteLossError):
            raise
        print(f"partnd {name}: error: {error}", file=sys.stderr)
        return 1
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
