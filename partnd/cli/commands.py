"""The ``partnd`` command line: ``partnd <subcommand> [options]``.

Built-in subcommands are ``pretrain`` and ``finetune``; their options are generated from the
fields of :class:`~partnd.engine.config.PretrainConfig` / :class:`FinetuneConfig` (``--batch-size
128``, ``--no-progress``), and ``--set key=value`` sets any field too. Precedence: ``--preset``,
then ``--config file.json``, then field options and ``--set`` (last wins).

Other subcommands live in their own modules and are registered by import path in
:data:`SUBCOMMANDS` (``"module:function"``, called with the remaining arguments); they are imported
only when invoked, so a missing optional module only breaks its own subcommand. Add one with
:func:`register_subcommand`.

Failures end with one line and an exit status (:func:`partnd.cli.errors.run_command`): the
library's messages name the Python arguments, and each subcommand's :class:`OptionNames` maps
them to its options (``out_dir`` -> ``--out``, ``overwrite=True`` -> ``--overwrite``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partnd._validation import check, renamed_arguments
from partnd.cli.errors import OptionNames, run_command
from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig

__all__ = ["SUBCOMMANDS", "Subcommand", "main", "register_subcommand"]

SubcommandMain = Callable[[list[str]], "int | None"]


@dataclass(frozen=True)
class Subcommand:
    """A ``partnd`` subcommand.

    Attributes:
        help: One-line description shown by ``partnd --help``.
        target: ``main(argv)`` itself, or its import path ``"package.module:function"``.
        options: How the API arguments it passes on read as its options, for error messages
            (a lazily imported ``main`` reports its own errors).
    """

    help: str
    target: str | SubcommandMain
    options: OptionNames = field(default_factory=OptionNames)

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


def register_subcommand(
    name: str, target: str | SubcommandMain, help: str, options: OptionNames | None = None
) -> None:
    """Add (or replace) a subcommand.

    Args:
        name: The word after ``partnd``.
        target: ``main(argv)`` or its lazy import path ``"package.module:function"``.
        help: One-line description.
        options: API argument name -> option, for its error messages.
    """
    SUBCOMMANDS[name] = Subcommand(help=help, target=target, options=options or OptionNames())


def _options(config_cls: type[TrainConfig] | None, **names: str) -> OptionNames:
    """A subcommand's option names: the shared ones, ``names``, and (with ``config_cls``) every
    config field's generated option."""
    common = {
        "out_dir": "--out",
        "resume": "--resume",
        "overwrite": "--overwrite",
        "records": "--records",
        "subjects": "--subjects",
        "selection": "--records/--subjects",
        "batch_size": "--batch-size",
        "device": "--device",
        "config": "--config",
        "overrides": "--set",
    }
    fields = {} if config_cls is None else {n: _option(n) for n in config_cls.field_names()}
    return OptionNames({**fields, **common, **names}, config_fields=config_cls is not None)


def _positive_seconds(text: str) -> float:
    """``argparse`` type of a duration in seconds: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a duration > 0 seconds, got {text!r}")
    return value


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _bool_flag(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    parser.add_argument(
        _option(name), action=argparse.BooleanOptionalAction, default=False, help=help
    )


def _preset_defaults(config_cls: type[TrainConfig], argv: Sequence[str]) -> dict[str, Any]:
    """Field values the help should show: the ``--preset``'s when one is given."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--preset", choices=config_cls.list_presets())
    known, _ = probe.parse_known_args(list(argv))
    base = config_cls.preset(known.preset) if known.preset else config_cls()
    return base.to_dict()


def _add_config_arguments(
    parser: argparse.ArgumentParser, config_cls: type[TrainConfig], argv: Sequence[str]
) -> None:
    parser.add_argument(
        "--preset",
        choices=config_cls.list_presets(),
        help="start from a named preset (the field defaults below show its values)",
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
    _bool_flag(parser, "resume", "continue the interrupted run in --out")
    _bool_flag(parser, "overwrite", "clear --out first (only ever a run directory)")
    defaults = _preset_defaults(config_cls, argv)
    fields = parser.add_argument_group(
        f"{config_cls.__name__} fields", "each sets one field (see docs/engine.md)"
    )
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


def _names(text: str | None) -> list[str] | None:
    """A comma-separated list (the one list syntax of every subcommand)."""
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


def _add_data_arguments(
    parser: argparse.ArgumentParser,
    prefix: str = "",
    what: str = "",
    labels: bool = True,
    several: str | None = None,
) -> None:
    """``several``: the help's words for several stores (``None``: one path)."""
    flag = f"--{prefix}data"
    parser.add_argument(
        flag,
        type=Path,
        required=not prefix,
        nargs="+" if several else None,
        help=f"{what}PATH.npy [N, C, *spatial] or a sleep store directory" + (several or ""),
    )
    if labels:
        parser.add_argument(
            f"--{prefix}labels", type=Path, help=f"{what}labels PATH.npy [N] (for .npy data)"
        )
    parser.add_argument(f"--{prefix}subjects", help=f"{what}comma-separated subjects (store data)")
    parser.add_argument(f"--{prefix}records", help=f"{what}comma-separated records (store data)")


def _add_normalize_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--normalize",
        choices=("window", "record", "none"),
        help="how windows of a sleep store are normalised: each window on its own (window, the "
        "paper's; the default), by its night's channel scales (record), or not at all (none); "
        "refused for .npy data, which are used as given",
    )


def _check_normalize(normalize: str | None, data: Path, option: str = "--normalize") -> None:
    """Refuse a normalisation given for ``.npy`` data, which are used as given."""
    check(
        normalize is None or data.is_dir(),
        option,
        "no normalisation for .npy data (arrays are used as given; it says how a sleep store's "
        "windows are normalised)",
        f"{normalize} for the array file {data}",
    )


_SEVERAL_STORES = (
    "; or several sleep stores, read as one dataset on the union of their channels (stores of "
    "different montages need --channel-mode set)"
)
_SEVERAL_STORES_READ = (
    "; or several sleep stores (of different montages for a classifier trained with "
    "--channel-mode set)"
)


def _store_selection(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The records or subjects of the store ``--{prefix}data`` that ``--{prefix}records``,
    ``--{prefix}subjects`` (or ``--split``) select; refused for ``.npy`` data."""
    selection: dict[str, Any] = {}
    subjects = _names(getattr(args, f"{prefix}subjects"))
    records = _names(getattr(args, f"{prefix}records"))
    dash = "--" + prefix.replace("_", "-")
    given = [f"{dash}{name}" for name in ("records", "subjects") if getattr(args, prefix + name)]
    given += ["--split"] if getattr(args, "split", None) is not None else []
    data: Path | list[Path] | None = getattr(args, f"{prefix}data")
    if isinstance(data, list):
        check(
            not given or len(data) == 1,
            "/".join(given),
            f"one sleep store as {dash}data (they select the records of one store)",
            f"{len(data)} stores",
        )
        data = data[0]
    if given:
        check(
            data is not None and data.is_dir(),
            "/".join(given),
            f"a sleep store as {dash}data (they select a store's records)",
            f"no {dash}data" if data is None else f"the array file {data}",
        )
    if subjects is not None:
        selection["subjects"] = subjects
    if records is not None:
        selection["records"] = records
    split = getattr(args, "split", None)
    if split is not None:
        from partnd.datasets.splits import SubjectSplit

        check(not selection, "--split", "no --subjects/--records as well", str(split))
        with renamed_arguments({"path": "--split"}):
            selection["records"] = list(SubjectSplit.load(split).pretrain)
    return selection


def _open(
    path: Path,
    flag: str,
    labelled: bool,
    selection: dict[str, Any],
    normalize: str | None = None,
) -> Any:
    """The data of ``flag`` (``--data``, ``--val-data``); selection errors name its options.
    ``normalize`` applies to a store (its windows' normalisation)."""
    from partnd.datasets.adapters import load_signals

    options = dict(selection)
    if labelled and path.is_dir():
        options["labelled_only"] = True
    if normalize is not None and path.is_dir():
        options["normalize"] = normalize
    prefix = flag[: -len("data")]  # "--" or "--val-"
    names = {"records": f"{prefix}records", "subjects": f"{prefix}subjects"}
    names["selection"] = f"{names['records']}/{names['subjects']}"
    with renamed_arguments(names):
        return load_signals(path, flag, **options)


def _open_all(
    paths: list[Path],
    flag: str,
    labelled: bool,
    selection: dict[str, Any],
    normalize: str | None = None,
) -> Any:
    """The data of one path (:func:`_open`), or of several sleep stores as a list, which the
    training functions read as one :class:`~partnd.datasets.MontageUnion`."""
    if len(paths) == 1:
        return _open(paths[0], flag, labelled, selection, normalize)
    arrays = [str(path) for path in paths if not path.is_dir()]
    check(
        not arrays,
        flag,
        "sleep store directories when several are given (read as one dataset on the union of "
        "their channels)",
        ", ".join(arrays),
    )
    return [_open(path, flag, labelled, {}, normalize) for path in paths]


def _stage_names(data: Any) -> list[str] | None:
    """The stage names of a store's windows, or those every store of a list shares."""
    parts = data if isinstance(data, list) else [data]
    names = {tuple(getattr(part, "stage_names", None) or ()) for part in parts}
    return list(names.pop()) if len(names) == 1 and () not in names else None


def _labels(path: Path | None, flag: str, data: Path | None) -> list[int] | None:
    """Integer labels ``[N]`` from a ``.npy`` file, refused as the API refuses them, and
    refused for a store ``data`` (its stages are the labels)."""
    if path is None:
        return None
    from partnd.datasets.adapters import integer_labels, load_npy

    data_flag = flag.replace("labels", "data")
    check(
        data is not None and not data.is_dir(),
        flag,
        f"labels of .npy data given as {data_flag} (a sleep store's stages are its labels)",
        f"no {data_flag}" if data is None else f"{path} for the store {data}",
    )
    check(path.suffix == ".npy", flag, "a .npy file of labels [N]", str(path))
    return integer_labels(load_npy(path, flag), flag)


def _pretrain_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd pretrain",
        description="Self-supervised pretraining (PART by default, --method for the baselines); "
        "writes a run directory with encoder.pt.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        nargs="+",
        required=True,
        help="PATH.npy [N, C, *spatial] or a sleep store" + _SEVERAL_STORES,
    )
    parser.add_argument("--subjects", help="comma-separated subjects to pretrain on (store data)")
    parser.add_argument("--records", help="comma-separated records to pretrain on (store data)")
    parser.add_argument(
        "--split",
        type=Path,
        help="a split.json (partnd.datasets.make_subject_split): pretrain on its pretraining "
        "records only, so held-out test subjects cannot leak in",
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument(
        "--init-weights", type=Path, help="start the encoder from these weights (run dir, .pt)"
    )
    _add_config_arguments(parser, PretrainConfig, argv)
    args = parser.parse_args(argv)
    config, overrides = _config_from_args(args, PretrainConfig)
    from partnd.pretraining import pretrain

    selection = _store_selection(args, "")
    method = overrides.get("method", (config or PretrainConfig()).method)
    from partnd.objectives.registry import registered

    entry = registered(method)
    if entry is None or entry.data != "segments":  # segments come normalised as they say
        for path in args.data:
            _check_normalize(overrides.get("normalize"), path)
    normalize = overrides.get("normalize", (config or PretrainConfig()).normalize)
    data = _open_all(args.data, "--data", False, selection, normalize)
    result = pretrain(
        data,
        out_dir=args.out,
        config=config,
        resume=args.resume,
        overwrite=args.overwrite,
        init_weights=args.init_weights,
        **overrides,
    )
    epochs = [record for record in result.history if record.get("phase") == "epoch"]
    final = ""
    if epochs:
        final = f", final epoch loss {epochs[-1]['loss']:.4g}"
        if "nmse" in epochs[-1]:
            final += f" (nmse {epochs[-1]['nmse']:.3g}: 1 = no better than ignoring the content)"
    print(f"partnd pretrain: done{final}; encoder saved to {result.run_dir / 'encoder.pt'}")
    return 0


def _finetune_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd finetune",
        description="Fine-tune a pretrained encoder (or train from scratch) as a classifier; "
        "writes a run directory with classifier.pt.",
    )
    _add_data_arguments(parser, "", "training ", several=_SEVERAL_STORES)
    _add_data_arguments(parser, "val-", "validation ", several=_SEVERAL_STORES)
    _add_normalize_argument(parser)
    parser.add_argument(
        "--num-classes",
        type=int,
        help="number of classes K (default: the store's stage count)",
    )
    parser.add_argument(
        "--class-names", help="comma-separated class names (default: the store's stage names)"
    )
    parser.add_argument(
        "--init-weights",
        type=Path,
        help="start the encoder from these weights: a pretrain run directory, encoder.pt or "
        "checkpoint; or a sequence or night classifier's run directory, to train it further "
        "whole (with --evaluate-start validation may keep it as it is); omit to train from "
        "scratch",
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    _add_config_arguments(parser, FinetuneConfig, argv)
    args = parser.parse_args(argv)
    config, overrides = _config_from_args(args, FinetuneConfig)
    from partnd.finetuning.training import finetune

    for path in args.data:
        _check_normalize(args.normalize, path)
    normalize = args.normalize or "window"
    train = _open_all(args.data, "--data", True, _store_selection(args, ""), normalize)
    val = None
    val_selection = _store_selection(args, "val_")
    if args.val_data is not None:
        val = _open_all(args.val_data, "--val-data", True, val_selection, normalize)
    class_names = _names(args.class_names) or _stage_names(train)
    num_classes = args.num_classes
    if num_classes is None:
        check(
            class_names is not None,
            "--num-classes",
            "a number of classes (or --class-names, or a store whose stage names give it)",
            "None",
        )
        assert class_names is not None
        num_classes = len(class_names)
    if class_names is not None and args.class_names is None:  # the store's stage names
        check(
            len(class_names) == num_classes,
            "--num-classes",
            f"{len(class_names)}, the store's stages {', '.join(class_names)} (or --class-names "
            "naming as many classes)",
            str(num_classes),
        )
    result = finetune(
        args.init_weights,
        train,
        num_classes=num_classes,
        val_dataset=val,
        out_dir=args.out,
        config=config,
        class_names=class_names,
        resume=args.resume,
        overwrite=args.overwrite,
        train_labels=_labels(args.labels, "--labels", args.data[0]),
        val_labels=_labels(
            args.val_labels, "--val-labels", None if args.val_data is None else args.val_data[0]
        ),
        **overrides,
    )
    print(f"partnd finetune: done; best metrics {result.best_metrics} in {result.run_dir}")
    return 0


def _model_arguments(parser: argparse.ArgumentParser, labels: bool = True) -> None:
    parser.add_argument(
        "--model", type=Path, required=True, help="a finetune run directory or its classifier.pt"
    )
    _add_data_arguments(parser, labels=labels, several=_SEVERAL_STORES_READ)
    parser.add_argument("--batch-size", type=int, default=256, help="inference batch size")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument(
        "--vote",
        choices=("none", "subsets"),
        default="none",
        help="subsets: a channel-set model (--channel-mode set) reads every item once per subset "
        "of its present channels and averages the class probabilities (U-Sleep's vote over "
        "channel combinations); none (default): once with every channel",
    )
    parser.add_argument(
        "--max-subsets",
        type=int,
        default=16,
        help="with --vote subsets: the most subsets per item (all non-empty subsets when there "
        "are at most this many, else the full set and a seeded sample; default 16)",
    )


def _vote_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``vote`` and ``max_subsets`` of ``--vote`` and ``--max-subsets``."""
    return {"vote": None if args.vote == "none" else args.vote, "max_subsets": args.max_subsets}


def _evaluate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd evaluate",
        description="Accuracy, Cohen's kappa, F1 and the confusion matrix of a fine-tuned "
        "classifier on labelled data (checked against the channels, rate and window length the "
        "classifier was trained on).",
    )
    _model_arguments(parser)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    _bool_flag(parser, "overwrite", "replace an existing report at --out")
    args = parser.parse_args(argv)
    from partnd.engine.checkpoint import atomic_write_json
    from partnd.finetuning.training import evaluate
    from partnd.models.serialization import load_classifier

    check(
        args.out is None or not args.out.is_dir(),
        "--out",
        "a path for the JSON report (not a directory)",
        f"the directory {args.out}",
    )
    check(
        args.out is None or args.overwrite or not args.out.exists(),
        "--out",
        "a new path for the JSON report (or --overwrite)",
        f"the existing file {args.out}",
    )
    model = load_classifier(args.model)
    data = _open_all(
        args.data,
        "--data",
        True,
        _store_selection(args, ""),
        model.signal_info.normalization,
    )
    report = evaluate(
        model,
        data,
        labels=_labels(args.labels, "--labels", args.data[0]),
        batch_size=args.batch_size,
        device=args.device,
        **_vote_arguments(args),
    )
    print(json.dumps(report.to_dict(), indent=2))
    if args.out is not None:
        atomic_write_json(report.to_dict(), args.out)
    return 0


def _predict_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd predict",
        description="Per-window stages with probabilities from a fine-tuned classifier, written "
        "as a hypnogram CSV (MNE's annotation CSV, plus EDF+ annotations with --edf); for a "
        "store, one hypnogram per record with the store's window onsets and the recording's "
        "start date; for a recording file MNE reads (EDF, BDF, FIF, ...), the file is "
        "preprocessed exactly as partnd ingest would (nothing kept unless --keep-store) and "
        "its hypnogram written beside it as STEM-stages.csv (or in --out); for several stores "
        "(of different montages for a channel-set classifier), one folder per store in --out "
        "(pc18.zarr: --out/pc18/RECORD.csv), record ids may repeat across stores.",
    )
    _model_arguments(parser, labels=False)
    parser.add_argument(
        "--out",
        type=Path,
        help="output directory (required for a store or .npy; default for a recording file: "
        "its folder)",
    )
    _bool_flag(parser, "edf", "also write EDF+ annotation files (readable by MNE)")
    _bool_flag(parser, "overwrite", "replace existing output files")
    parser.add_argument(
        "--epoch-seconds",
        type=_positive_seconds,
        help="window duration (> 0) for .npy data (default: the model's recorded window "
        "length, else 30)",
    )
    parser.add_argument(
        "--hypnogram",
        type=Path,
        help="with a recording file: its own hypnogram (any format partnd ingest reads); the "
        "windows it scores are predicted and Cohen's kappa printed",
    )
    parser.add_argument(
        "--channels",
        metavar="MAP",
        help="with a recording file: channel map as in partnd ingest (default: the model's "
        "channels when the file holds them, else the EEG channels with 10-20 names)",
    )
    parser.add_argument(
        "--keep-store",
        type=Path,
        help="with a recording file: keep the preprocessed recording as this store",
    )
    args = parser.parse_args(argv)
    from partnd.inference import Prediction, predict, predict_recording, predict_records
    from partnd.models.night import NightClassifier
    from partnd.models.sequence import SequenceClassifier
    from partnd.models.serialization import load_classifier

    paths: list[Path] = args.data
    data_path = paths[0]
    if len(paths) > 1:
        _check_several_stores(paths)
    recording = data_path.is_file() and data_path.suffix.lower() != ".npy"
    file_options = [
        option
        for option, value in (
            ("--hypnogram", args.hypnogram),
            ("--channels", args.channels),
            ("--keep-store", args.keep_store),
        )
        if value is not None
    ]
    check(
        recording or not file_options,
        file_options[0] if file_options else "--data",
        "a recording file as --data (EDF, BDF, FIF, ...)",
        f"--data {data_path}",
    )
    check(
        recording or args.out is not None,
        "--out",
        "an output directory for a store or .npy --data",
        "none",
    )
    out: Path = args.out if args.out is not None else data_path.parent
    model = load_classifier(args.model)
    check(not out.is_file(), "--out", "a directory", f"the file {out}")
    predictions: dict[str, Prediction]
    selection = _store_selection(args, "")
    if recording:
        check(
            args.epoch_seconds is None,
            "--epoch-seconds",
            "no --epoch-seconds with a recording (its windows are the store's 30 s windows)",
            f"{args.epoch_seconds} for {data_path}",
        )
        name = f"{data_path.stem}-stages"
        _check_new(out, [name], args.edf, args.overwrite)
        staged = predict_recording(
            model,
            data_path,
            hypnogram=args.hypnogram,
            channels=args.channels,
            keep_store=args.keep_store,
            batch_size=args.batch_size,
            device=args.device,
            **_vote_arguments(args),
        )
        predictions = {name: staged.prediction}
        if staged.kappa is not None:
            print(
                f"partnd predict: kappa {staged.kappa:.3f} against {args.hypnogram} over "
                f"{staged.n_scored} scored windows"
            )
        if staged.store is not None:
            print(f"partnd predict: preprocessed recording kept in {staged.store}")
    elif len(paths) > 1:
        check(
            args.epoch_seconds is None,
            "--epoch-seconds",
            "no --epoch-seconds with sleep stores as --data (their windows' onsets and length "
            "are the stores')",
            f"{args.epoch_seconds} for {len(paths)} stores",
        )
        folders = {str(path): _store_folder(path) for path in paths}
        names = [
            f"{folders[str(path)]}/{record}"
            for path in paths
            for record in _open(path, "--data", False, {}).records
        ]
        _check_new(out, names, args.edf, args.overwrite)
        by_store = predict_records(
            model,
            [str(path) for path in paths],
            batch_size=args.batch_size,
            device=args.device,
            **_vote_arguments(args),
        )
        predictions = {
            f"{folders[store]}/{record}": prediction
            for store, by_record in by_store.items()
            for record, prediction in by_record.items()
        }
    elif data_path.is_dir():
        check(
            args.epoch_seconds is None,
            "--epoch-seconds",
            "no --epoch-seconds with a sleep store as --data (its windows' onsets and length "
            "are the store's)",
            f"{args.epoch_seconds} for the store {data_path}",
        )
        selected = _open(data_path, "--data", False, selection)
        records = list(selected.records)
        _check_new(out, records, args.edf, args.overwrite)
        predictions = predict_records(
            model,
            data_path,
            records,
            batch_size=args.batch_size,
            device=args.device,
            **_vote_arguments(args),
        )
    else:
        _check_new(out, ["predictions"], args.edf, args.overwrite)
        data = _open(data_path, "--data", False, {})
        if isinstance(model, SequenceClassifier | NightClassifier):
            kind = "sequence" if isinstance(model, SequenceClassifier) else "night"
            print(
                f"partnd predict: the {kind} classifier reads the {len(data)} windows of "
                f"{data_path} as one night's consecutive windows, in array order (a sleep store "
                "gives each record's runs of windows with their onsets)"
            )
        predictions = {
            "predictions": predict(
                model,
                data,
                epoch_seconds=args.epoch_seconds,
                batch_size=args.batch_size,
                device=args.device,
                **_vote_arguments(args),
            )
        }
    for name, prediction in predictions.items():
        csv_path = out / f"{name}.csv"
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        prediction.write_csv(csv_path)
        if args.edf:
            prediction.write_edf(out / f"{name}.edf")
        print(f"partnd predict: {len(prediction.labels)} windows -> {csv_path}")
    return 0


def _field_assignments(
    items: list[str], config_cls: type[TrainConfig], option: str
) -> dict[str, Any]:
    """``{field: value}`` of repeated ``FIELD=VALUE`` options (values parsed as ``--set``'s)."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        check(bool(sep) and bool(key.strip()), option, "FIELD=VALUE", repr(item))
        with renamed_arguments({"--set": option}):
            values[key.strip()] = config_cls.parse_value(key.strip(), text)
    return values


def _transfer_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="partnd transfer",
        description="Pretrain anywhere, fine-tune on your montage: pretrain a channel-set "
        "encoder on a mixed pool of sleep stores (any montages), fine-tune it on a few labelled "
        "subjects of a target store, test it on the target's test subjects (Cohen's kappa with "
        "a subject-bootstrap interval) and write a hypnogram of every other target record. "
        "With --method supervised the pool's labels train a classifier that the target's "
        "labels then fine-tune. Finished stages are kept: --resume continues an interrupted "
        "run.",
    )
    parser.add_argument("--pool", required=True, help="comma-separated sleep stores to pretrain on")
    parser.add_argument(
        "--target", type=Path, required=True, help="the sleep store to fine-tune and predict on"
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument(
        "--labels",
        help="label budget, drawn as the studies draw theirs: a number of target subjects "
        "(their labelled nights; default 1), Kn (K labelled nights, e.g. 1n) or wK (K windows "
        "of each stage, e.g. w20)",
    )
    parser.add_argument(
        "--labelled-subjects", help="comma-separated target subjects to label (instead of --labels)"
    )
    parser.add_argument(
        "--test-subjects",
        help="comma-separated target subjects to test on (default: half of its labelled "
        "subjects not in --labelled-subjects, drawn with --seed)",
    )
    parser.add_argument(
        "--validation-subjects",
        type=int,
        default=1,
        help="further target subjects that select the checkpoint (default 1; 0: none)",
    )
    parser.add_argument(
        "--method",
        default="part_windows",
        help="pretraining objective (default part_windows), or supervised: train a classifier "
        "on the pool's labelled nights instead, then fine-tune it whole on the target",
    )
    parser.add_argument(
        "--preset",
        default="eeg_sleep",
        choices=sorted(set(PretrainConfig.list_presets()) & set(FinetuneConfig.list_presets())),
        help="preset of both configurations (default eeg_sleep)",
    )
    parser.add_argument(
        "--pretrain-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a pretraining config field (repeatable; values are JSON)",
    )
    parser.add_argument(
        "--finetune-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a fine-tuning config field (repeatable; e.g. context=21 for a sequence classifier)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws and trainings")
    parser.add_argument(
        "--vote",
        choices=("none", "subsets"),
        default="none",
        help="subsets: the predictions vote over channel subsets",
    )
    _bool_flag(parser, "edf", "also write the hypnograms as EDF+ annotation files")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print each stage and show progress bars (default on)",
    )
    _bool_flag(parser, "resume", "continue the run in --out (finished stages are kept)")
    _bool_flag(parser, "overwrite", "clear --out first (only ever a run directory)")
    args = parser.parse_args(argv)
    from partnd.recipes.transfer import transfer

    result = transfer(
        [Path(path) for path in _names(args.pool) or []],
        args.target,
        out_dir=args.out,
        labels=args.labels,
        labelled_subjects=_names(args.labelled_subjects),
        test_subjects=_names(args.test_subjects),
        validation_subjects=args.validation_subjects,
        method=args.method,
        preset=args.preset,
        pretrain_overrides=_field_assignments(args.pretrain_set, PretrainConfig, "--pretrain-set"),
        finetune_overrides=_field_assignments(args.finetune_set, FinetuneConfig, "--finetune-set"),
        seed=args.seed,
        vote=None if args.vote == "none" else args.vote,
        edf=args.edf,
        device=args.device,
        progress=args.progress,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    interval = (
        ""
        if result.kappa_interval is None
        else f" (95% interval {result.kappa_interval[0]:.3f} to {result.kappa_interval[1]:.3f})"
    )
    print(
        f"partnd transfer: test kappa {result.kappa:.3f}{interval} on {result.n_test_windows} "
        f"windows of {len(result.test_subjects)} test subject(s); {len(result.predictions)} "
        f"hypnogram(s) in {result.run_dir / 'predictions'}; classifier in {result.finetune_dir}"
    )
    return 0


def _store_folder(store: Path) -> str:
    """The folder of ``--out`` that holds a store's hypnograms when several are predicted: the
    store's directory name without its suffix (``pc18.zarr``: ``pc18``)."""
    return store.resolve().stem


def _check_several_stores(paths: list[Path]) -> None:
    """Refuse several ``--data`` that are not sleep stores of distinct names (each store's
    hypnograms go to a folder of ``--out`` named after it)."""
    others = [str(path) for path in paths if not path.is_dir()]
    check(
        not others,
        "--data",
        "sleep store directories when several are given (one hypnogram per record of each)",
        ", ".join(others),
    )
    folders = [_store_folder(path) for path in paths]
    repeated = sorted({folder for folder in folders if folders.count(folder) > 1})
    check(
        not repeated,
        "--data",
        "stores of distinct names when several are given (each store's hypnograms go to "
        "--out/<store name>/, e.g. pc18.zarr to pc18/)",
        f"{', '.join(repeated)} more than once",
    )


def _check_new(out: Path, names: list[str], edf: bool, overwrite: bool) -> None:
    """Refuse existing hypnograms ``out/<name>.csv`` (and ``.edf`` with ``--edf``) unless
    ``--overwrite``."""
    suffixes = (".csv", ".edf") if edf else (".csv",)
    paths = [out / f"{name}{suffix}" for name in names for suffix in suffixes]
    existing = [str(path) for path in paths if path.exists()]
    check(
        overwrite or not existing,
        "--out",
        "a directory without earlier predictions (or --overwrite)",
        ", ".join(existing),
    )


_DATA_OPTIONS = {
    "dataset": "--data",
    "data": "--data",
    "x": "--data",
    "store": "--data",
    "labels": "--labels",
}

register_subcommand(
    "pretrain",
    _pretrain_main,
    "PART self-supervised pretraining",
    _options(PretrainConfig, **_DATA_OPTIONS, init_weights="--init-weights", split="--split"),
)
register_subcommand(
    "finetune",
    _finetune_main,
    "fine-tune an encoder as a classifier",
    _options(
        FinetuneConfig,
        train_dataset="--data",
        dataset="--data",
        data="--data",
        store="--data",
        x="--data",
        train_labels="--labels",
        val_dataset="--val-data",
        val_labels="--val-labels",
        num_classes="--num-classes",
        class_names="--class-names",
        encoder="--init-weights",
        init_weights="--init-weights",
        path="--init-weights",
    ),
)
register_subcommand(
    "evaluate",
    _evaluate_main,
    "evaluate a fine-tuned classifier",
    _options(
        None,
        **_DATA_OPTIONS,
        path="--model",
        model="--model",
        out="--out",
        vote="--vote",
        max_subsets="--max-subsets",
    ),
)
register_subcommand(
    "predict",
    _predict_main,
    "predict stages and write hypnograms",
    _options(
        None,
        **_DATA_OPTIONS,
        path="--model",
        model="--model",
        epoch_seconds="--epoch-seconds",
        recording="--data",
        hypnogram="--hypnogram",
        channels="--channels",
        keep_store="--keep-store",
        store_path="--keep-store",
        vote="--vote",
        max_subsets="--max-subsets",
    ),
)
register_subcommand(
    "transfer",
    _transfer_main,
    "pretrain on a mixed pool of stores, fine-tune and predict on another montage",
    _options(
        None,
        pool="--pool",
        target="--target",
        labels="--labels",
        labelled_subjects="--labelled-subjects",
        test_subjects="--test-subjects",
        validation_subjects="--validation-subjects",
        method="--method",
        preset="--preset",
        pretrain_overrides="--pretrain-set",
        finetune_overrides="--finetune-set",
        seed="--seed",
        vote="--vote",
        edf="--edf",
        progress="--progress",
    ),
)
register_subcommand(
    "preprocess",
    "partnd.preprocessing.physionet2018:main",
    "preprocess PhysioNet 2018 recordings into a zarr sleep store",
)
register_subcommand(
    "ingest",
    "partnd.preprocessing.ingest_command:main",
    "preprocess one EDF/BDF/FIF/... recording and its hypnogram into a zarr sleep store",
)
register_subcommand(
    "cohort",
    "partnd.cohort.command:main",
    "generate the synthetic sample cohort (PC18 format, or --profile sleep_edf / nsrr)",
)
register_subcommand(
    "demo", "partnd.recipes.sleep_staging:demo", "run the sleep-staging demo recipe"
)


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
        or a run stopped by a non-finite loss (the message says where and why; no traceback),
        130 after Ctrl-C and 143 after SIGTERM (a training run saves a resumable checkpoint
        first: continue it with ``--resume``).
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
    return run_command(f"partnd {name}", SUBCOMMANDS[name].options, lambda: function(rest))
