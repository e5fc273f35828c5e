"""Every goal of issue 44 (PART's GPU step at the bare encoder's speed) in one run on one device.

Prints, measured side by side in one process on the same device:

1. **EEG preset** (``eeg_sleep``, ``vit_eeg_12m`` on 6 x 3000, batch 256, bf16, compiled):
   PART's and MAE's steps against the bare encoder step (``bench_objective_step.run``), with each
   step's model FLOPs utilisation; goal PART / bare >= 0.90;
2. **CIFAR preset** (``images_cifar``, ViT-S/4 on 3 x 32 x 32): PART / bare, goal >= 0.95;
3. **PART across windows** (``eeg_sleep_windows``): its compiled step against the bare
   hierarchical encoder, segments/s and utilisation (``bench_part_windows_step.run``);
4. **the segment loader** (``bench_pool_pretraining.loader_rate``: the engine's batched reads of
   :class:`~partnd.datasets.segments.SleepSegmentDataset` from a synthetic store) with each of
   ``--workers`` and both batch dtypes, over what the compiled step of 3 consumes; goal >= 2x
   with the worker count ``docs/results/cost.md`` recommends (``--docs-workers``, 12) in bf16;
5. **the cost model** against a short measured ``pretrain`` run (``bench_cost_model
   --validate``, which prints ``error``); goal within 15 %;
6. **the compile modes through the engine** (``bench_compile_modes``): the engine's whole PART
   step eager, ``"default"`` and ``"reduce-overhead"``, and a compiled run cut and resumed
   against a repeated uninterrupted run: what ``compile="auto"`` should pick on CUDA.

and a summary of the goals last. ``--smoke`` runs everything with tiny settings (a few samples,
one step, the demo's window encoder on short segments, a tiny store, the loader in-process and
with 2 workers), on the CPU in a minute or two: it checks that the script runs, not the figures.

Usage::

    python benchmarks/gpu_goals.py --device cuda                    # on an H100 or H200
    python benchmarks/gpu_goals.py --device cuda --compile reduce-overhead
    python benchmarks/gpu_goals.py --smoke                          # any machine
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import bench_compile_modes
import bench_cost_model
import torch
from bench_loader import build_synthetic_store
from bench_objective_step import peak_tflops
from bench_objective_step import run as objective_steps
from bench_part_windows_step import run as part_windows_step
from bench_pool_pretraining import LOADER_DTYPES, loader_rate

from partnd.datasets.segments import SleepSegmentDataset
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.recipes.bench_support import add_compile_option
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES

#: (goal, threshold): a figure at least the threshold meets it (the cost model's: at most).
GOALS = {
    "eeg_part_over_bare": 0.90,
    "cifar_part_over_bare": 0.95,
    "loader_over_step": 2.0,
    "cost_model_abs_error": 0.15,
}


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """Sizes of the run: the issue's on a GPU, tiny ones with ``--smoke``."""
    if args.smoke:
        return {
            "batch": 4,
            "steps": 1,
            "warmup": 1,
            "segments": 2,
            "segment_windows": 8,
            "num_windows": 4,
            "store": (2, 64),
            "loader_batches": 2,
            "workers": [0, 2],
            "docs_workers": 2,
            "cost_workers": 0,
            "cost_store_records": 2,
            "cost_store_windows": 256,  # the loader table times batches of the preset's 256
            "cost_loader_batches": 1,
            "validate": [
                "--validate-batch",
                "4",
                "--validate-records",
                "2",
                "--validate-windows",
                "8",
                "--validate-epochs",
                "1",
                "--validate-loader-batches",
                "2",
            ],
        }
    return {
        "batch": args.batch_size,
        "steps": args.steps,
        "warmup": 1 + (2 if args.compile != "off" else 0),
        "segments": args.segments,
        "segment_windows": None,
        "num_windows": None,
        "store": (12, 960),
        "loader_batches": 20,
        "workers": args.workers,
        "docs_workers": args.docs_workers,
        "cost_workers": args.docs_workers,
        "cost_store_records": 12,  # 2 x 12 + 1 + 4 batches of 256 with 12 workers
        "cost_store_windows": 960,
        "cost_loader_batches": 4,
        "validate": "--validate-batch 256 --validate-records 12 --validate-windows 960 "
        f"--validate-workers {args.docs_workers}".split(),
    }


def windows_config(sizes: dict[str, Any], smoke: bool) -> PretrainConfig:
    """The ``eeg_sleep_windows`` preset in bf16 (with ``--smoke`` the demo's window encoder on
    segments of 8 windows)."""
    config = PretrainConfig.preset("eeg_sleep_windows", precision="bf16", normalize="record")
    if smoke:
        config = config.replace(
            encoder_overrides=DEMO_ENCODER_OVERRIDES,
            segment_windows=sizes["segment_windows"],
            num_windows=sizes["num_windows"],
        )
    return config


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure and print every goal; returns the summary figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument("--smoke", action="store_true", help="tiny settings (any machine)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--segments", type=int, default=32, help="segments per step (the preset's batch)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each kind")
    add_compile_option(
        parser, "how every timed step is compiled (TrainConfig.compile)", default="default"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 12])
    parser.add_argument(
        "--docs-workers",
        type=int,
        default=12,
        help="the worker count docs/results/cost.md recommends",
    )
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    sizes = settings(args)
    compile_mode = "off" if args.smoke else args.compile
    peak, source = peak_tflops(device, args.peak_tflops)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"issue 44 goals on {name} ({device}), bf16, compile {compile_mode}, batch "
        f"{sizes['batch']}, {sizes['steps']} timed steps; bf16 peak {peak:.3g} TFLOP/s ({source})"
        + (" [smoke: tiny settings, the figures mean nothing]" if args.smoke else "")
    )
    summary: dict[str, float] = {}

    def step_rows(preset: str, methods: list[str]) -> list[dict[str, Any]]:
        rows = objective_steps(
            preset,
            methods,
            sizes["batch"],
            sizes["steps"],
            sizes["warmup"],
            device,
            "bf16",
            "wall",
            compile_mode,
            peak,
        )
        for row in rows:
            print(
                f"  {preset} {row['method']}: {row['samples_per_s']:.1f} samples/s (MFU "
                f"{row['mfu']:.1%}), bare {row['bare_samples_per_s']:.1f} (MFU "
                f"{row['bare_mfu']:.1%}), ratio {row['ratio']:.2f} "
                f"({row['ratio_spread'][0]:.2f}-{row['ratio_spread'][1]:.2f})"
            )
        return rows

    print("1. EEG preset, PART and MAE against the bare encoder")
    eeg = {row["method"]: row for row in step_rows("eeg_sleep", ["part", "mae"])}
    summary["eeg_part_over_bare"] = eeg["part"]["ratio"]
    summary["eeg_part_mfu"] = eeg["part"]["mfu"]
    summary["eeg_bare_mfu"] = eeg["part"]["bare_mfu"]
    summary["eeg_mae_mfu"] = eeg["mae"]["mfu"]
    print("2. CIFAR preset, PART against the bare encoder")
    summary["cifar_part_over_bare"] = step_rows("images_cifar", ["part"])[0]["ratio"]

    print("3. PART across windows")
    config = windows_config(sizes, args.smoke)
    windows = part_windows_step(
        config, sizes["segments"], sizes["steps"], sizes["warmup"], device, compile_mode, peak
    )
    consumed = windows["segments_per_s"]
    print(
        f"  {consumed:.2f} segments/s of {config.segment_windows} windows ({sizes['segments']} a "
        f"step), MFU {windows['part_windows_mfu']:.1%}, bare MFU {windows['bare_mfu']:.1%}, "
        f"ratio {windows['ratio']:.2f}"
    )
    summary["part_windows_segments_per_s"] = consumed
    summary["part_windows_mfu"] = windows["part_windows_mfu"]

    print("4. The segment loader against the compiled step's consumption")
    with tempfile.TemporaryDirectory(prefix="gpu_goals_") as folder:
        records, per_record = sizes["store"]
        store = build_synthetic_store(
            Path(folder) / "store.zarr", records, per_record, progress=False
        )
        dataset = SleepSegmentDataset(
            store, segment_windows=config.segment_windows, normalize="record"
        )
        for workers in sizes["workers"]:
            for dtype_name, dtype in LOADER_DTYPES.items():
                rate = loader_rate(
                    dataset, sizes["segments"], workers, sizes["loader_batches"], dtype
                )
                print(
                    f"  {workers:2d} workers, {dtype_name:>8}: {rate:.2f} segments/s = "
                    f"{rate / consumed:.2f}x the step"
                )
                if workers == sizes["docs_workers"] and dtype_name == "bfloat16":
                    summary["loader_over_step"] = rate / consumed

        print("5. The cost model against a short measured run (bench_cost_model --validate)")
        validation = bench_cost_model.main(
            f"--device {device} --settings eeg --methods part --precision bf16 --compile "
            f"{compile_mode} --workers {sizes['cost_workers']} --store-records "
            f"{sizes['cost_store_records']} --store-windows "
            f"{sizes['cost_store_windows']} --loader-batches {sizes['cost_loader_batches']} "
            f"--steps {sizes['steps']} "
            f"--batch-size {sizes['batch']} --validate".split()
            + sizes["validate"]
        )
    summary["cost_model_abs_error"] = abs(validation["error"])

    print("6. The compile modes through the engine (bench_compile_modes)")
    modes = ["off"] if args.smoke else ["off", "default", "reduce-overhead"]
    compiled = bench_compile_modes.main(
        [
            "--device",
            str(device),
            "--batch-size",
            str(sizes["batch"]),
            "--steps",
            str(sizes["steps"]),
            "--resume-steps",
            "2" if args.smoke else "3",
            "--modes",
            *modes,
            "--resume-modes",
            *(modes if args.smoke else modes[1:]),
        ]
    )
    for mode, rate in compiled["rates"].items():
        summary[f"engine_{mode.replace('-', '_')}_samples_per_s"] = rate

    print("Summary (goal: at least the threshold; the cost model's error at most)")
    for goal, threshold in GOALS.items():
        value = summary[goal]
        met = value <= threshold if goal == "cost_model_abs_error" else value >= threshold
        verdict = "n/a (smoke)" if args.smoke else ("met" if met else "NOT met")
        print(f"  {goal:>24}: {value:.3f} (goal {threshold}) {verdict}")
    if args.json is not None:
        args.json.write_text(json.dumps({"device": name, "smoke": args.smoke, **summary}))
    return summary


if __name__ == "__main__":
    main()
