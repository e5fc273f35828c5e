"""Benchmark: the channel-set encoder against the fixed-channel one, on the demo's window arm.

Two measurements:

* ``step``: one full optimiser step (forward, backward, AdamW) of the demo's single-window
  classifier (the 128-wide, 4-block ViT, ``spectral_std`` tokens of 1 s patches of 6 x 3000
  windows), fixed-channel (``channel_mode="fixed"``, today's) and channel-set
  (``channel_mode="set"``), timed in turns; prints windows/s and the set/fixed ratio.
* ``kappa``: on the demo study's store (the generated PC18-like cohort), for each draw of
  ``--subjects`` labelled subjects, the demo's window arm from scratch trained twice with the same
  budget, seed and data, fixed and set; prints the test subjects' Cohen's kappa of both, and of
  the set model given only ``--subset`` channels (the fixed model refuses them); with
  ``--vote-subsets N`` also both kappas of the set model voting over at most N channel subsets
  (``evaluate(..., vote="subsets")``).

Usage::

    python benchmarks/bench_channel_sets.py step --batch-size 64 --steps 5 --threads 2
    python benchmarks/bench_channel_sets.py kappa --store /tmp/store.zarr --out /tmp/cs \\
        --draws 0 --steps 800 --batch-size 64
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from bench_objective_step import training_step

from partnd.datasets import InMemoryWindows
from partnd.engine.config import FinetuneConfig
from partnd.engine.precision import PRECISIONS, resolve_precision
from partnd.finetuning.training import evaluate, finetune
from partnd.models import PatchClassifier, create_encoder
from partnd.models.montage import channel_set_overrides
from partnd.recipes.bench_support import interleaved_times
from partnd.recipes.sleep_study import (
    DEMO_ENCODER_OVERRIDES,
    STUDY_FRONTENDS,
    SleepStudy,
    StudyConfig,
)

CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
SAMPLES, CLASSES = 3000, 5


def step_benchmark(args: argparse.Namespace) -> None:
    """Time the window classifier's training step, fixed and set, in turns."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    precision = resolve_precision(args.precision, device)
    frontend = STUDY_FRONTENDS["spectral_std"]
    fixed_overrides = {**DEMO_ENCODER_OVERRIDES, **frontend}
    set_overrides = channel_set_overrides(
        fixed_overrides, CHANNELS, {"subset_sampling": args.subset_sampling}
    )
    x = torch.randn(args.batch_size, len(CHANNELS), SAMPLES)
    labels = torch.randint(0, CLASSES, (args.batch_size,))
    steps = {}
    for name, overrides in (("fixed", fixed_overrides), ("set", set_overrides)):
        torch.manual_seed(0)
        encoder = create_encoder(
            "vit_eeg_12m", in_chans=len(CHANNELS), patch_size=100, ndim=1, **overrides
        )
        classifier = PatchClassifier(encoder, CLASSES, spatial_shape=(SAMPLES,)).train()

        def loss(classifier: PatchClassifier = classifier) -> torch.Tensor:
            return F.cross_entropy(classifier(x).float(), labels)

        steps[name] = training_step(classifier, loss, device, precision)
    seconds = interleaved_times(steps, args.steps, args.warmup, device)
    print(
        f"CPU, {torch.get_num_threads()} threads, {precision}, batch {args.batch_size}, "
        f"{args.steps} timed + {args.warmup} warm-up steps each, interleaved"
    )
    for name in steps:
        print(f"{name:>6}: {args.batch_size / seconds[name]:8.1f} windows/s")
    print(f"set / fixed: x{seconds['fixed'] / seconds['set']:.2f}")


def kappa_benchmark(args: argparse.Namespace) -> None:
    """Train the window arm fixed and set on each draw; print and save the test kappas."""
    study = SleepStudy(
        StudyConfig(
            out=Path(args.out),
            store=Path(args.store),
            scale="demo",
            device=args.device,
            progress=False,
            finetune_overrides={"min_steps": args.steps, "batch_size": args.batch_size},
        ),
        overwrite=True,
    )
    channel_options: dict[str, Any] = {"subset_sampling": args.subset_sampling}
    if args.channel_dropout > 0:
        channel_options["channel_dropout"] = args.channel_dropout
    test_records = study.split.records_of(study.split.test)
    normalize = study.config.normalization
    subset = InMemoryWindows(
        study.store,
        records=test_records,
        labelled_only=True,
        normalize=normalize,
        channels=args.subset,
        progress=False,
    )
    rows = []
    for seed in args.draws:
        draw = study.draw(args.subjects, seed)
        fixed = study.config.finetune_config("supervised", seed, "window", draw.budget)
        modes: dict[str, FinetuneConfig] = {
            "fixed": fixed,
            "set": dataclasses.replace(fixed, channel_mode="set", channel_options=channel_options),
        }
        row: dict[str, Any] = {"draw": seed, "subjects": list(draw.subjects)}
        for mode in args.modes:
            config = modes[mode]
            train = study.arm_data("window", draw.subjects, config, draw.labelled_windows)
            val = study.arm_data("window", draw.validation, config, evaluation=True)
            result = finetune(
                None,
                train,
                num_classes=len(study.class_names),
                val_dataset=val,
                out_dir=Path(args.out) / f"draw{seed}-{mode}",
                config=config,
                class_names=study.class_names,
                overwrite=True,
            )
            row[f"{mode}_val_kappa"] = result.best_metrics.get("cohen_kappa")
            row[f"{mode}_kappa"] = evaluate(result.model, study.test_set).cohen_kappa
            if mode == "set":
                row["set_subset_kappa"] = evaluate(result.model, subset).cohen_kappa
            if mode == "set" and args.vote_subsets > 0:
                vote = {"vote": "subsets", "max_subsets": args.vote_subsets}
                row["set_vote_kappa"] = evaluate(result.model, study.test_set, **vote).cohen_kappa
                row["set_subset_vote_kappa"] = evaluate(result.model, subset, **vote).cohen_kappa
            print(json.dumps(row), flush=True)
        rows.append(row)
    Path(args.out, "kappa.json").write_text(json.dumps(rows, indent=1))


def main(argv: list[str] | None = None) -> None:
    """Parse the command and run it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    step = commands.add_parser("step", help="training step windows/s, fixed against set")
    step.add_argument("--batch-size", type=int, default=64)
    step.add_argument("--steps", type=int, default=5, help="timed steps of each (median)")
    step.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    step.add_argument("--threads", type=int, default=None, help="torch threads")
    step.add_argument("--precision", choices=PRECISIONS, default="fp32")
    step.add_argument("--subset-sampling", action=argparse.BooleanOptionalAction, default=True)
    kappa = commands.add_parser("kappa", help="test kappa of the window arm, fixed and set")
    kappa.add_argument("--store", required=True, help="the demo study's store (sample cohort)")
    kappa.add_argument("--out", required=True, help="directory of the runs")
    kappa.add_argument("--draws", type=int, nargs="+", default=[0])
    kappa.add_argument("--subjects", type=int, default=2, help="labelled subjects per draw")
    kappa.add_argument("--steps", type=int, default=800, help="training steps of each run")
    kappa.add_argument("--batch-size", type=int, default=64, help="windows per step")
    kappa.add_argument("--subset", nargs="+", default=["C4-M1", "O2-M1"])
    kappa.add_argument("--subset-sampling", action=argparse.BooleanOptionalAction, default=True)
    kappa.add_argument("--channel-dropout", type=float, default=0.0)
    kappa.add_argument("--device", default="cpu")
    kappa.add_argument(
        "--vote-subsets",
        type=int,
        default=0,
        help="also evaluate the set model voting over at most this many channel subsets",
    )
    kappa.add_argument(
        "--modes", nargs="+", choices=["fixed", "set"], default=["fixed", "set"], help="runs"
    )
    args = parser.parse_args(argv)
    if args.command == "step":
        step_benchmark(args)
    else:
        kappa_benchmark(args)


if __name__ == "__main__":
    main()
