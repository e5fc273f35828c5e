"""Benchmark: the channel-set encoder against the fixed-channel one, on the demo's classifiers.

Two measurements:

* ``step``: one full optimiser step (forward, backward, AdamW) of the demo's single-window
  classifier (the 128-wide, 4-block ViT, ``spectral_std`` tokens of 1 s patches of 6 x 3000
  windows), fixed-channel (``channel_mode="fixed"``, today's), channel-set
  (``channel_mode="set"``) and all channels' tokens in one sequence (``sequence``: the layout of
  BIOT and LaBraM, one token per channel and patch, so the transformer reads C x N tokens),
  timed in turns; prints windows/s and each one's ratio to fixed. ``sequence`` is timed as its
  cheapest form: the same tokenizer on one channel at a time and the same transformer on the
  channels' patches laid end to end, without the channel embedding it would add.
* ``kappa``: on the demo study's store (the generated PC18-like cohort), for each draw of
  ``--subjects`` labelled subjects, the demo's window arm (``--arm window``) or night classifier
  (``--arm night``) from scratch, trained once per mode (``--modes``) with the same budget, seed
  and data: ``fixed`` (today's encoder) and the channel-set variants ``set`` (subset sampling),
  ``set-dropout`` (channel dropout only), ``set-plain`` (neither) and ``set-attention``
  (``set`` pooling its channels by attention, ``channel_pool="attention"``), to choose one on
  validation. Reports each run's validation kappa (the selected checkpoint's) and test kappa,
  the set models' validation and test kappas given only ``--subset`` channels (the fixed model
  refuses them; the validation one chooses among options meant for fewer channels),
  the means over the draws and each set variant's paired differences to ``fixed``
  (``OUT/kappa.json``, ``OUT/kappa.md``); with ``--vote-subsets N`` also the set models' kappas
  voting over at most N channel subsets (``evaluate(..., vote="subsets")``). A finished run
  (``OUT/draw<S>-<mode>.json``) is reused by a later command with the same settings.

Usage::

    python benchmarks/bench_channel_sets.py step --batch-size 64 --steps 5 --threads 2
    python benchmarks/bench_channel_sets.py kappa --store /tmp/store.zarr --out /tmp/cs \\
        --draws 0 --steps 800 --batch-size 64
    python benchmarks/bench_channel_sets.py kappa --arm night --store /tmp/store.zarr \\
        --out /tmp/cs-night --draws 0 1 2 --modes fixed set set-dropout set-plain
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_objective_step import training_step

from partnd.datasets import InMemoryWindows, SleepNightDataset
from partnd.datasets.label_budget import LabelDraw
from partnd.engine.checkpoint import atomic_write_json, atomic_write_text
from partnd.engine.config import FinetuneConfig
from partnd.engine.precision import PRECISIONS, resolve_precision
from partnd.finetuning.sequence import EVALUATION_CROP
from partnd.finetuning.training import evaluate, finetune
from partnd.models import PatchClassifier, create_encoder
from partnd.models.montage import channel_set_overrides
from partnd.models.serialization import load_classifier
from partnd.recipes.bench_support import interleaved_times
from partnd.recipes.sleep_study import (
    DEMO_ENCODER_OVERRIDES,
    STUDY_FRONTENDS,
    SleepStudy,
    StudyConfig,
)

CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
SAMPLES, CLASSES = 3000, 5


def step_layouts(
    x: torch.Tensor, subset_sampling: bool = True
) -> dict[str, tuple[PatchClassifier, torch.Tensor]]:
    """The demo's window classifier in each layout the ``step`` command times.

    Args:
        x: [B, C, T] windows of the ``CHANNELS``.
        subset_sampling: The channel-set encoder's training-time subset sampling.

    Returns:
        ``{"fixed" | "set" | "sequence": (classifier, its input)}``: the fixed-channel and
        channel-set classifiers read ``x`` (N patches per window); ``sequence`` reads the
        channels laid end to end, ``[B, 1, C * T]``, so its transformer reads C x N tokens.
    """
    frontend = STUDY_FRONTENDS["spectral_std"]
    fixed_overrides = {**DEMO_ENCODER_OVERRIDES, **frontend}
    set_overrides = channel_set_overrides(
        fixed_overrides, CHANNELS, {"subset_sampling": subset_sampling}
    )
    layouts = {
        "fixed": (fixed_overrides, x),
        "set": (set_overrides, x),
        "sequence": (fixed_overrides, x.reshape(x.shape[0], 1, -1)),
    }
    classifiers = {}
    for name, (overrides, inputs) in layouts.items():
        torch.manual_seed(0)
        encoder = create_encoder(
            "vit_eeg_12m", in_chans=inputs.shape[1], patch_size=100, ndim=1, **overrides
        )
        classifier = PatchClassifier(encoder, CLASSES, spatial_shape=tuple(inputs.shape[2:]))
        classifiers[name] = (classifier.train(), inputs)
    return classifiers


def step_benchmark(args: argparse.Namespace) -> None:
    """Time the window classifier's training step, fixed, set and one sequence, in turns."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    precision = resolve_precision(args.precision, device)
    x = torch.randn(args.batch_size, len(CHANNELS), SAMPLES)
    labels = torch.randint(0, CLASSES, (args.batch_size,))
    steps = {}
    for name, (classifier, inputs) in step_layouts(x, args.subset_sampling).items():

        def loss(
            classifier: PatchClassifier = classifier, inputs: torch.Tensor = inputs
        ) -> torch.Tensor:
            return F.cross_entropy(classifier(inputs).float(), labels)

        steps[name] = training_step(classifier, loss, device, precision)
    seconds = interleaved_times(steps, args.steps, args.warmup, device)
    print(
        f"CPU, {torch.get_num_threads()} threads, {precision}, batch {args.batch_size}, "
        f"{args.steps} timed + {args.warmup} warm-up steps each, interleaved"
    )
    for name in steps:
        print(f"{name:>8}: {args.batch_size / seconds[name]:8.1f} windows/s")
    for name in ("set", "sequence"):
        print(f"{name} / fixed: x{seconds['fixed'] / seconds[name]:.2f}")


#: The channel-set variants ``kappa`` can train besides ``fixed``: only the options of the
#: channel-set front-end differ (``set``'s come from ``--subset-sampling`` and
#: ``--channel-dropout``, ``set-dropout``'s rate from ``--dropout-rate``; ``set-attention`` is
#: ``set`` with attention pooling over the channels).
SET_MODES = ("set", "set-dropout", "set-plain", "set-attention")
MODES = ("fixed", *SET_MODES)


def mode_configs(fixed: FinetuneConfig, args: argparse.Namespace) -> dict[str, FinetuneConfig]:
    """The configuration of every mode: ``fixed`` (today's encoder), and the channel-set
    encoder with subset sampling (``set``), with channel dropout only (``set-dropout``) or with
    neither (``set-plain``), and ``set`` pooling its channels by attention (``set-attention``);
    everything else is ``fixed``'s."""
    options: dict[str, dict[str, Any]] = {
        "set": {"subset_sampling": args.subset_sampling},
        "set-dropout": {"channel_dropout": args.dropout_rate},
        "set-plain": {},
    }
    if args.channel_dropout > 0:
        options["set"]["channel_dropout"] = args.channel_dropout
    options["set-attention"] = {**options["set"], "channel_pool": "attention"}
    configs = {"fixed": fixed}
    for mode, channel_options in options.items():
        configs[mode] = fixed.replace(channel_mode="set", channel_options=channel_options)
    return configs


def held_out_data(
    study: SleepStudy,
    arm: str,
    channels: list[str] | None,
    subjects: list[str] | None = None,
) -> Any:
    """The data of ``arm`` (labelled windows, or whole nights for the night arm) of
    ``subjects`` (default: the test subjects), with only ``channels`` when given."""
    if channels is None and subjects is None:
        return (
            study.test_set
            if arm == "window"
            else study.sequences(study.split.test, EVALUATION_CROP, night=True)
        )
    reading = {
        "records": study.split.records_of(study.split.test if subjects is None else subjects),
        "normalize": study.config.normalization,
        "channels": channels,
        "progress": False,
    }
    if arm == "window":
        return InMemoryWindows(study.store, labelled_only=True, **reading)
    return SleepNightDataset(study.store, context=EVALUATION_CROP, **reading)


def validation_subset_kappa(
    study: SleepStudy, args: argparse.Namespace, draw: LabelDraw, run_dir: Path
) -> float:
    """The kappa of a finished channel-set run's selected classifier (``run_dir``'s
    ``classifier.pt``) on the draw's validation subjects given only ``args.subset``: what
    chooses a channel option meant for fewer channels, on validation subjects."""
    data = held_out_data(study, args.arm, args.subset, list(draw.validation))
    return evaluate(load_classifier(run_dir), data, device=args.device).cohen_kappa


def train_mode(
    study: SleepStudy,
    args: argparse.Namespace,
    config: FinetuneConfig,
    draw: LabelDraw,
    run_dir: Path,
    tests: dict[str, Any],
) -> dict[str, Any]:
    """Train ``args.arm``'s classifier from scratch on ``draw`` with ``config`` and return its
    validation kappa (the selected checkpoint's) and its kappas on ``tests`` (name -> data)."""
    train = study.arm_data(args.arm, draw.subjects, config, draw.labelled_windows)
    val = study.arm_data(args.arm, draw.validation, config, evaluation=True)
    started = time.perf_counter()
    result = finetune(
        None,
        train,
        num_classes=len(study.class_names),
        val_dataset=val,
        out_dir=run_dir,
        config=config,
        class_names=study.class_names,
        overwrite=True,
    )
    kappas = {"val_kappa": result.best_metrics.get("cohen_kappa")}
    kappas["train_seconds"] = round(time.perf_counter() - started, 1)
    for name, data in tests.items():
        kappas[name] = evaluate(result.model, data, device=args.device).cohen_kappa
        if args.vote_subsets > 0 and config.channel_mode == "set":
            vote = {"vote": "subsets", "max_subsets": args.vote_subsets}
            voted = evaluate(result.model, data, device=args.device, **vote)
            kappas[name.removesuffix("kappa") + "vote_kappa"] = voted.cohen_kappa
    return kappas


def kappa_benchmark(args: argparse.Namespace) -> None:
    """Train the arm in every mode on each draw; save and print the validation and test kappas.

    Each finished run is saved as ``OUT/draw<S>-<mode>.json`` and reused by a later command
    with the same settings (``--overwrite`` starts over); ``OUT/kappa.json`` and
    ``OUT/kappa.md`` are rewritten after every run.
    """
    overrides: dict[str, Any] = {**args.overrides}
    for field, value in (
        ("min_steps", args.steps),
        ("batch_size", args.batch_size),
        ("eval_every_steps", args.eval_every),
    ):
        if value is not None:
            overrides[field] = value
    arm_overrides = "night_overrides" if args.arm == "night" else "finetune_overrides"
    out = Path(args.out)
    study = SleepStudy(
        StudyConfig(
            out=out,
            src=None if args.src is None else Path(args.src),
            store=Path(args.store),
            scale="demo",
            device=args.device,
            progress=False,
            **{arm_overrides: overrides},
        ),
        overwrite=args.overwrite,
    )
    tests = {"kappa": held_out_data(study, args.arm, None)}
    if any(mode in SET_MODES for mode in args.modes):
        tests["subset_kappa"] = held_out_data(study, args.arm, args.subset)
    rows = []
    for seed in args.draws:
        draw = study.draw(args.subjects, seed)
        fixed = study.config.finetune_config("supervised", seed, args.arm, draw.budget)
        configs = mode_configs(fixed, args)
        row: dict[str, Any] = {
            "draw": seed,
            "subjects": list(draw.subjects),
            "validation": list(draw.validation),
        }
        for mode in args.modes:
            config = configs[mode]
            key = {
                "config": config.to_dict(),
                "tests": sorted(tests if mode in SET_MODES else ["kappa"]),
                "subset": args.subset,
                "vote_subsets": args.vote_subsets,
            }
            key = json.loads(json.dumps(key, default=str))
            saved = out / f"draw{seed}-{mode}.json"
            stored = json.loads(saved.read_text()) if saved.is_file() else {}
            if stored.get("key") != key:
                mode_tests = tests if mode in SET_MODES else {"kappa": tests["kappa"]}
                kappas = train_mode(
                    study, args, config, draw, out / f"draw{seed}-{mode}", mode_tests
                )
                stored = {"key": key, "kappas": kappas}
                atomic_write_json(stored, saved)
            if mode in SET_MODES and "val_subset_kappa" not in stored["kappas"]:
                run_dir = out / f"draw{seed}-{mode}"
                stored["kappas"]["val_subset_kappa"] = validation_subset_kappa(
                    study, args, draw, run_dir
                )
                atomic_write_json(stored, saved)
            row.update({f"{mode}_{name}": value for name, value in stored["kappas"].items()})
            print(json.dumps(row), flush=True)
        rows.append(row)
        report = kappa_report(rows, args.modes)
        report["settings"] = {
            "arm": args.arm,
            "subjects": args.subjects,
            "draws": args.draws,
            "subset": args.subset,
            "overrides": overrides,
            "channel_options": {m: configs[m].channel_options for m in args.modes if m != "fixed"},
            "steps": fixed.min_steps,
            "batch_size": fixed.batch_size,
            "eval_every_steps": fixed.eval_every_steps,
        }
        atomic_write_json(report, out / "kappa.json")
        atomic_write_text(kappa_markdown(report), out / "kappa.md")


#: The kappas of a run, in the tables' order: validation and test, all channels and the subset.
KAPPA_COLUMNS = ("val_kappa", "val_subset_kappa", "kappa", "subset_kappa")


def kappa_report(rows: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    """The rows, each mode's means over the draws, and every channel-set mode's paired
    differences to ``fixed`` per draw (validation and test kappa) with their means."""
    means: dict[str, dict[str, float]] = {}
    for mode in modes:
        columns = {}
        for name in KAPPA_COLUMNS:
            values = [row[f"{mode}_{name}"] for row in rows if f"{mode}_{name}" in row]
            if values:
                columns[name] = float(np.mean(values))
        means[mode] = columns
    differences: dict[str, dict[str, Any]] = {}
    if "fixed" in modes:
        for mode in (m for m in modes if m in SET_MODES):
            per_draw = [
                {
                    "draw": row["draw"],
                    "val_kappa": row[f"{mode}_val_kappa"] - row["fixed_val_kappa"],
                    "kappa": row[f"{mode}_kappa"] - row["fixed_kappa"],
                }
                for row in rows
            ]
            differences[mode] = {
                "per_draw": per_draw,
                "mean_val_kappa": float(np.mean([d["val_kappa"] for d in per_draw])),
                "mean_kappa": float(np.mean([d["kappa"] for d in per_draw])),
            }
    return {"rows": rows, "means": means, "differences": differences}


def kappa_markdown(report: dict[str, Any]) -> str:
    """Markdown tables of a :func:`kappa_report`: per draw and mode, the means, and the paired
    differences to ``fixed``."""
    settings = report["settings"]
    subset = " + ".join(settings["subset"])

    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    lines = [
        f"{settings['arm']} arm from scratch, labelled subjects per draw: {settings['subjects']}, "
        f"{settings['steps']} steps at batch {settings['batch_size']}, validation every "
        f"{settings['eval_every_steps']} steps",
        "",
        f"| draw | labelled subjects | mode | val κ | val κ on {subset} | test κ | "
        f"test κ on {subset} |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        for mode in report["means"]:
            values = (row.get(f"{mode}_{name}") for name in KAPPA_COLUMNS)
            lines.append(
                f"| {row['draw']} | {', '.join(row['subjects'])} | {mode} | "
                + " | ".join(cell(value) for value in values)
                + " |"
            )
    lines += [
        "",
        f"| mode | mean val κ | mean val κ on {subset} | mean test κ | mean test κ on {subset} |",
        "|---|---|---|---|---|",
    ]
    for mode, means in report["means"].items():
        values = (means.get(name) for name in KAPPA_COLUMNS)
        lines.append(f"| {mode} | " + " | ".join(cell(value) for value in values) + " |")
    if report["differences"]:
        lines += ["", "| mode − fixed | draw | Δ val κ | Δ test κ |", "|---|---|---|---|"]
        for mode, difference in report["differences"].items():
            for draw in difference["per_draw"]:
                lines.append(
                    f"| {mode} | {draw['draw']} | {draw['val_kappa']:+.3f} | {draw['kappa']:+.3f} |"
                )
            lines.append(
                f"| {mode} | mean | {difference['mean_val_kappa']:+.3f} | "
                f"{difference['mean_kappa']:+.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Parse the command and run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    step = commands.add_parser(
        "step", help="training step windows/s, fixed against set and one sequence"
    )
    step.add_argument("--batch-size", type=int, default=64)
    step.add_argument("--steps", type=int, default=5, help="timed steps of each (median)")
    step.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    step.add_argument("--threads", type=int, default=None, help="torch threads")
    step.add_argument("--precision", choices=PRECISIONS, default="fp32")
    step.add_argument("--subset-sampling", action=argparse.BooleanOptionalAction, default=True)
    kappa = commands.add_parser(
        "kappa", help="validation and test kappa of the window or night arm, fixed and set"
    )
    kappa.add_argument("--store", required=True, help="the demo study's store (sample cohort)")
    kappa.add_argument("--out", required=True, help="directory of the runs")
    kappa.add_argument(
        "--src",
        default=None,
        help="PC18-format root the store is made from when missing (default: the sample cohort)",
    )
    kappa.add_argument("--arm", choices=["window", "night"], default="window")
    kappa.add_argument("--draws", type=int, nargs="+", default=[0])
    kappa.add_argument("--subjects", type=int, default=2, help="labelled subjects per draw")
    kappa.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps of each run (min_steps; default: the demo's for the arm and budget)",
    )
    kappa.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="windows (window arm) or night crops (night arm) per step (default: the demo's)",
    )
    kappa.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="steps between validations (default: the demo's for the arm)",
    )
    kappa.add_argument(
        "--overrides",
        type=json.loads,
        default={},
        help="JSON object of further FinetuneConfig fields of the arm, applied last",
    )
    kappa.add_argument("--subset", nargs="+", default=["C4-M1", "O2-M1"])
    kappa.add_argument("--subset-sampling", action=argparse.BooleanOptionalAction, default=True)
    kappa.add_argument("--channel-dropout", type=float, default=0.0, help="set's, besides")
    kappa.add_argument("--dropout-rate", type=float, default=0.5, help="set-dropout's")
    kappa.add_argument("--device", default="cpu")
    kappa.add_argument(
        "--vote-subsets",
        type=int,
        default=0,
        help="also evaluate the set models voting over at most this many channel subsets",
    )
    kappa.add_argument("--modes", nargs="+", choices=MODES, default=["fixed", "set"], help="runs")
    kappa.add_argument("--overwrite", action="store_true", help="start --out over")
    args = parser.parse_args(argv)
    if args.command == "kappa":
        args.modes = list(dict.fromkeys(args.modes))  # each mode trains once
    if args.command == "step":
        step_benchmark(args)
    else:
        kappa_benchmark(args)


if __name__ == "__main__":
    main()
