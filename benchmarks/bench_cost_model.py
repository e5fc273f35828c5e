"""Cost model of pretraining: measured step and loader rates, and the wall time of the paper's runs.

Measures, on the machine it runs on (one process, one device):

1. **step**: samples/s of every objective's training step at a setting's preset, through the
   engine's own step (``Trainer._train_step``: forward under autocast, the loss read back,
   backward, gradient clipping, fused AdamW, schedule, EMA) on a batch moved from (pinned) host
   memory, and the step's FLOPs per sample (``torch.utils.flop_counter``: matrix products and
   attention, forward and backward);
2. **loader**: windows/s of the engine's ``DataLoader`` over a zarr sleep store (the chunk-aware
   order, batched reads, window normalisation, pinned memory on a GPU) with 0, 1, 2, 4, ... worker
   processes, next to what the step consumes;
3. **prediction**: ``epochs x (steps_per_epoch x max(step, batch / loader) + checkpoint)`` (with
   no workers the loader runs in the training process: ``step + batch / loader``), for

   * **PhysioNet 2018** (``eeg_sleep``): the paper pretrains on all 994 + 989 nights; at about
     8 h a night and 30 s windows that is 1983 x 960 = 1,903,680 windows an epoch, 1000 epochs;
   * **ImageNet-1k** (``images_imagenet``, ViT-B/16): 1,281,167 images, the preset's 200 epochs
     (the image loader, JPEG decoding and augmentation, is not measured here: its rate must be
     read from the machine that will run it);

   and, as long as no GPU measurement replaces it, the step rate an H100 would reach at a stated
   share of its dense bf16 peak (989 TFLOP/s) from the measured FLOPs per sample, with the loader
   workers that rate needs (goal: a 16-core node's workers deliver >= 2x);
4. **validation** (``--validate``): predicts a short ``partnd.pretrain`` run on a small synthetic
   store from the same measurements (plus its fixed cost: a one-step run of the same command,
   start-up, first-step warm-up and final save), then runs it and prints the error (goal: within
   15 %).

Usage::

    python benchmarks/bench_cost_model.py                       # EEG + ImageNet, this machine
    python benchmarks/bench_cost_model.py --settings eeg --batch-size 32 --workers 0 1
    python benchmarks/bench_cost_model.py --device cuda --workers 1 2 4 8 16 --validate
    python benchmarks/bench_cost_model.py --settings eeg --methods part --validate --steps 3
    python benchmarks/bench_cost_model.py --settings eeg --batch-size 32 --workers 0 --validate \
        --threads 1 --clock cpu       # a CPU that other jobs share: CPU time instead of wall time

On a CPU the steps are timed at ``--batch-size`` (samples/s hardly depend on the batch there);
on a GPU leave it out to time the preset's batch. ``--compile`` sets ``TrainConfig.compile`` of
every timed step and of the validation run (``auto``: compiled on CUDA, as a run would be); the
FLOPs are counted on an eager step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from partnd.datasets.adapters import as_signal_dataset
from partnd.engine.checkpoint import CheckpointManager
from partnd.engine.compilation import COMPILE_MODES, resolve_compile
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import DistributedContext, resolve_device
from partnd.engine.precision import LOADER_DTYPES, resolve_loader_dtype, resolve_precision
from partnd.engine.trainer import Trainer, move_to
from partnd.objectives import build_objective, list_objectives
from partnd.pretraining import ObjectiveTask, pretrain
from partnd.recipes.bench_support import (
    CLOCKS,
    add_compile_option,
    build_synthetic_store,
    device_description,
    synchronize,
)
from partnd.signal_info import SignalSpec

H100_BF16_PEAK = 989e12
"""Dense bf16 tensor-core FLOP/s of an H100 SXM (vendor datasheet)."""

PC18_NIGHTS = 994 + 989
"""PhysioNet 2018 training (labelled) and test (unlabelled) nights, all usable for pretraining."""


@dataclass(frozen=True)
class Setting:
    """A pretraining run of the paper to predict.

    Attributes:
        name: Row label.
        preset: :class:`PretrainConfig` preset.
        spec: Item shape.
        items: Items per epoch.
        note: How ``items`` was counted.
    """

    name: str
    preset: str
    spec: SignalSpec
    items: int
    note: str


def settings(night_hours: float) -> dict[str, Setting]:
    """The paper's PhysioNet 2018 and ImageNet pretraining runs."""
    windows = round(night_hours * 3600 / 30)
    return {
        "eeg": Setting(
            "PhysioNet 2018",
            "eeg_sleep",
            SignalSpec(6, (3000,)),
            PC18_NIGHTS * windows,
            f"{PC18_NIGHTS} nights x {windows} windows of 30 s ({night_hours:g} h)",
        ),
        "imagenet": Setting(
            "ImageNet-1k",
            "images_imagenet",
            SignalSpec(3, (224, 224)),
            1_281_167,
            "1,281,167 training images",
        ),
    }


def make_trainer(config: PretrainConfig, data: Any, device: torch.device) -> Trainer:
    """The engine's trainer for ``config`` on ``data`` (no run directory), as ``pretrain`` builds
    it."""
    train_set, spec = as_signal_dataset(data)
    torch.manual_seed(config.seed)
    model = build_objective(config, spec)
    context = DistributedContext(device=device)
    with warnings.catch_warnings():  # a few items: the paper's warm-up outlasts the "run"
        warnings.filterwarnings("ignore", message="the warm-up")
        return Trainer(model, ObjectiveTask(), train_set, config, context=context, run_dir=None)


@dataclass(frozen=True)
class StepRate:
    """Measured training step.

    Attributes:
        seconds: Median seconds per step.
        spread: (lowest, highest) seconds per step.
        samples_per_s: ``batch / seconds``.
        flops_per_sample: FLOPs of forward + backward per sample.
        checkpoint_s: Seconds to write one epoch checkpoint (model, optimiser, EMA).
    """

    seconds: float
    spread: tuple[float, float]
    samples_per_s: float
    flops_per_sample: float
    checkpoint_s: float


def measure_step(
    config: PretrainConfig,
    spec: SignalSpec,
    device: torch.device,
    steps: int,
    warmup: int,
    clock: str = "wall",
) -> StepRate:
    """Time the engine's step of ``config`` (its batch) on random items of shape ``spec``."""
    now = CLOCKS[clock]
    batch = config.batch_size
    items = torch.zeros(batch, *spec.item_shape)
    host = torch.randn(batch, *spec.item_shape)
    if device.type == "cuda":
        host = host.pin_memory()
    counted = make_trainer(config.replace(compile="off"), items, device)  # FLOPs of eager ops
    with FlopCounterMode(display=False) as counter:
        counted._train_step(move_to(host, device), 0, 0)
    del counted
    trainer = make_trainer(config, items, device)

    def step(index: int) -> None:
        trainer._train_step(move_to(host, device), 0, index)

    for index in range(1 + warmup + (2 if trainer.compile_mode != "off" else 0)):
        step(index)  # with compile: the compilation and CUDA-graph recording
    times = []
    for index in range(steps):
        synchronize(device)
        start = now()
        step(3 + warmup + index)
        synchronize(device)
        times.append(now() - start)
    with tempfile.TemporaryDirectory(prefix="cost_model_") as folder:
        manager = CheckpointManager(folder, keep=2)
        start = now()
        manager.save_epoch(trainer._checkpoint_state(), 0)
        checkpoint_s = now() - start
    seconds = statistics.median(times)
    return StepRate(
        seconds=seconds,
        spread=(min(times), max(times)),
        samples_per_s=batch / seconds,
        flops_per_sample=counter.get_total_flops() / batch,
        checkpoint_s=checkpoint_s,
    )


@dataclass(frozen=True)
class LoaderRate:
    """Measured loader.

    Attributes:
        windows_per_s: Windows delivered per second.
        main_ms_per_batch: CPU milliseconds the training process (its threads: receiving each
            batch from a worker, pinning it) spends per batch.
        megabytes_per_batch: Size of one batch as the loader delivers it.
    """

    windows_per_s: float
    main_ms_per_batch: float
    megabytes_per_batch: float


def measure_loader(
    config: PretrainConfig,
    store: Path,
    device: torch.device,
    workers: int,
    batches: int,
    clock: str = "wall",
) -> LoaderRate:
    """The engine's loader over ``store`` with ``workers`` worker processes (in
    ``config.loader_dtype``), timed over ``batches`` batches after the first ``2 x workers + 1``
    (worker start-up and the filling of the prefetch queue are a fixed cost)."""
    trainer = make_trainer(config.replace(num_workers=workers), store, device)
    trainer.batch_sampler.set_epoch(0)
    skip = 2 * workers + 1
    needed = skip + batches
    if trainer.steps_per_epoch < needed:
        raise SystemExit(
            f"the store has {trainer.steps_per_epoch} batches of {config.batch_size}: "
            f"{needed} are needed to time {batches} after {skip} (use more records/windows)"
        )
    now = CLOCKS[clock]
    iterator = iter(trainer.loader)
    for _ in range(skip):
        batch = next(iterator)
    start, main_start = now(), time.process_time()
    count = 0
    for _ in range(batches):
        batch = next(iterator)
        count += len(batch)
    elapsed, main_s = now() - start, time.process_time() - main_start
    del iterator
    return LoaderRate(
        windows_per_s=count / elapsed,
        main_ms_per_batch=1e3 * main_s / batches,
        megabytes_per_batch=batch.numel() * batch.element_size() / 1e6,
    )


def seconds_per_step(step_s: float, batch: int, loader_per_s: float, workers: int) -> float:
    """A step fed by the loader: workers load while the step runs; without workers, in turn."""
    load_s = batch / loader_per_s
    return max(step_s, load_s) if workers > 0 else step_s + load_s


def predict_run(
    items: int, epochs: int, batch: int, step_s: float, checkpoint_s: float, fixed_s: float = 0.0
) -> float:
    """Wall seconds of ``epochs`` epochs of ``items // batch`` steps of ``step_s`` each, one
    checkpoint an epoch, plus a fixed cost."""
    return fixed_s + epochs * ((items // batch) * step_s + checkpoint_s)


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.0f} s"


def build_store(folder: Path, records: int, windows: int) -> Path:
    """A synthetic sleep store (band-passed noise, see ``bench_loader.py``) in ``folder``."""
    path = folder / "store.zarr"
    build_synthetic_store(path, records, windows, progress=False)
    return path


def validate(
    args: argparse.Namespace, device: torch.device, precision: str, folder: Path
) -> dict[str, float]:
    """Predict a short ``pretrain`` run from measurements, then run it and compare."""
    store = build_store(folder, args.validate_records, args.validate_windows)
    config = PretrainConfig.preset(
        "eeg_sleep",
        batch_size=args.validate_batch,
        epochs=args.validate_epochs,
        warmup_epochs=0.0,  # the paper's 20 would outlast the short run (no effect on its cost)
        num_workers=args.validate_workers,
        device=str(device),
        precision=precision,
        compile=args.compile,
        progress=False,
    )
    items = args.validate_records * args.validate_windows
    now = CLOCKS[args.clock]
    spec = SignalSpec(6, (3000,))
    step = measure_step(config, spec, device, args.steps, args.warmup, args.clock)
    loader = measure_loader(
        config, store, device, args.validate_workers, args.validate_loader_batches, args.clock
    ).windows_per_s
    start = now()
    pretrain(store, out_dir=folder / "one_step", config=config, max_steps=1)
    one_step_s = now() - start
    effective = seconds_per_step(step.seconds, config.batch_size, loader, args.validate_workers)
    total_steps = (items // config.batch_size) * config.epochs
    fixed = one_step_s - effective
    predicted = (
        predict_run(items, config.epochs, config.batch_size, effective, step.checkpoint_s, fixed)
        - step.checkpoint_s
    )  # the one-step run already wrote one checkpoint
    start = now()
    pretrain(store, out_dir=folder / "run", config=config)
    measured = now() - start
    return {
        "steps": float(total_steps),
        "step_s": step.seconds,
        "loader_per_s": loader,
        "checkpoint_s": step.checkpoint_s,
        "fixed_s": fixed,
        "predicted_s": predicted,
        "measured_s": measured,
        "error": predicted / measured - 1.0,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--settings", nargs="+", choices=["eeg", "imagenet"], default=["eeg", "imagenet"]
    )
    parser.add_argument("--methods", nargs="+", default=list_objectives(data="items"))
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument("--precision", default="auto", help="auto, fp32, bf16 or fp16")
    add_compile_option(
        parser,
        "TrainConfig.compile of every timed step and of the validation run",
        default="auto",
        modes=COMPILE_MODES,
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="timed batch (default: the preset's)"
    )
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall, or cpu: this process's CPU time, for a CPU shared with other jobs, with "
        "--threads 1 and no loader workers (a GPU's or a worker's time is not counted)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps after the first")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument(
        "--loader-dtypes",
        nargs="+",
        choices=LOADER_DTYPES,
        default=["auto"],
        help="TrainConfig.loader_dtype settings of the loader table (each with every --workers)",
    )
    parser.add_argument(
        "--store",
        type=Path,
        help="zarr sleep store for the loader (default: "
        "a synthetic one of --store-records x --store-windows)",
    )
    parser.add_argument("--store-records", type=int, default=16)
    parser.add_argument("--store-windows", type=int, default=960)
    parser.add_argument("--loader-batches", type=int, default=20, help="timed batches")
    parser.add_argument("--night-hours", type=float, default=8.0)
    parser.add_argument(
        "--utilisation",
        type=float,
        default=0.4,
        help="share of the H100's dense bf16 peak assumed for the estimate",
    )
    parser.add_argument("--validate", action="store_true", help="predict and run a short run")
    parser.add_argument("--validate-batch", type=int, default=32)
    parser.add_argument("--validate-epochs", type=int, default=2)
    parser.add_argument("--validate-records", type=int, default=8)
    parser.add_argument("--validate-windows", type=int, default=64)
    parser.add_argument("--validate-workers", type=int, default=0)
    parser.add_argument("--validate-loader-batches", type=int, default=4)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure, predict and print (see the module docstring); returns the validation's figures
    (``predicted_s``, ``measured_s``, ``error``...) with ``--validate``, else nothing."""
    args = _parse(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.clock == "cpu" and (device.type != "cpu" or any(args.workers)):
        raise SystemExit("--clock cpu times the CPU of this process: use it on a CPU, workers 0")
    precision = resolve_precision(args.precision, device)
    where = device_description(device)
    print(
        f"device {device} ({where}); precision {args.precision} -> {precision}; compile "
        f"{args.compile} -> {resolve_compile(args.compile, device)}; {args.clock} "
        f"clock; load average {os.getloadavg()[0]:.1f}"
    )
    runs = settings(args.night_hours)
    consumed: dict[str, float] = {}
    h100_estimates: dict[str, float] = {}
    checkpoints: dict[str, float] = {}
    for key in args.settings:
        setting = runs[key]
        base = PretrainConfig.preset(setting.preset)
        batch = args.batch_size or base.batch_size
        print(
            f"\n{setting.name} ({setting.preset}, {setting.note}), {base.epochs} epochs, "
            f"paper batch {base.batch_size}, timed at batch {batch}"
        )
        print(
            f"{'method':>10} {'step s':>8} {'spread':>15} {'samples/s':>10} {'GFLOP/sample':>13} "
            f"{'ckpt s':>7} {'predicted':>10} {'H100 est/s':>11}"
        )
        for method in args.methods:
            config = base.replace(
                method=method,
                batch_size=batch,
                device=str(device),
                precision=precision,
                compile=args.compile,
                progress=False,
            )
            rate = measure_step(config, setting.spec, device, args.steps, args.warmup, args.clock)
            paper_step = base.batch_size / rate.samples_per_s
            predicted = predict_run(
                setting.items, base.epochs, base.batch_size, paper_step, rate.checkpoint_s
            )
            h100 = args.utilisation * H100_BF16_PEAK / rate.flops_per_sample
            consumed[f"{key}:{method}"] = rate.samples_per_s
            h100_estimates[f"{key}:{method}"] = h100
            if key == "eeg":
                checkpoints[method] = rate.checkpoint_s
            print(
                f"{method:>10} {rate.seconds:8.3f} {rate.spread[0]:7.3f}-{rate.spread[1]:<7.3f} "
                f"{rate.samples_per_s:10.1f} {rate.flops_per_sample / 1e9:13.2f} "
                f"{rate.checkpoint_s:7.2f} {_duration(predicted):>10} {h100:11.0f}"
            )
        print(
            "  predicted = wall time of the whole run on one such device at the measured "
            "samples/s, if the loader keeps up (below)"
        )
    if "eeg" in args.settings:
        setting = runs["eeg"]
        base = PretrainConfig.preset(setting.preset)
        with tempfile.TemporaryDirectory(prefix="cost_model_store_") as folder:
            store = args.store or build_store(Path(folder), args.store_records, args.store_windows)
            config = PretrainConfig.preset("eeg_sleep", device=str(device), progress=False)
            eeg = {k.split(":")[1]: v for k, v in consumed.items() if k.startswith("eeg:")}
            part = eeg.get("part", max(eeg.values()))
            h100 = h100_estimates.get("eeg:part")
            print(
                f"\nLoader (the engine's DataLoader, batch {config.batch_size}, {store}): "
                "windows/s "
                f"against what PART's step consumes here ({part:.0f}/s)"
                + (
                    f" and on an H100 at {args.utilisation:.0%} of peak ({h100:.0f}/s)"
                    if h100
                    else ""
                )
            )
            print(
                f"{'dtype':>9} {'workers':>8} {'windows/s':>10} {'MB/batch':>9} "
                f"{'main ms/batch':>14} {'/ PART here':>12} {'/ PART H100':>12}"
            )
            rates: dict[tuple[str, int], float] = {}
            for dtype in args.loader_dtypes:
                for workers in args.workers:
                    setting_dtype = config.replace(loader_dtype=dtype)
                    rate = measure_loader(
                        setting_dtype, store, device, workers, args.loader_batches, args.clock
                    )
                    shipped = resolve_loader_dtype(dtype, precision, device, workers)
                    name = str(shipped).removeprefix("torch.")
                    rates[(name, workers)] = rate.windows_per_s
                    per_s = rate.windows_per_s
                    versus = f"{per_s / h100:12.2f}" if h100 else f"{'':>12}"
                    print(
                        f"{name:>9} {workers:>8} {per_s:10.0f} {rate.megabytes_per_batch:9.1f} "
                        f"{rate.main_ms_per_batch:14.2f} {per_s / part:12.2f} {versus}"
                    )
            print(
                "  main ms/batch: CPU time of the training process per batch (receiving it from "
                "a worker, pinning it)"
            )
        (best_dtype, best), best_rate = max(rates.items(), key=lambda item: item[1])
        print(
            f"  with {best} workers shipping {best_dtype} ({best_rate:.0f} windows/s), "
            f"{setting.name} would take:"
        )
        for method, rate in eeg.items():
            step = seconds_per_step(base.batch_size / rate, base.batch_size, best_rate, best)
            total = predict_run(
                setting.items, base.epochs, base.batch_size, step, checkpoints[method]
            )
            bound = "loader" if base.batch_size / best_rate > base.batch_size / rate else "step"
            print(f"{method:>12}: {_duration(total)} ({bound}-bound)")
    if args.validate:
        with tempfile.TemporaryDirectory(prefix="cost_model_validate_") as folder:
            result = validate(args, device, precision, Path(folder))
        print(
            f"\nValidation: pretrain eeg_sleep (part), batch {args.validate_batch}, "
            f"{args.validate_epochs} epochs of {args.validate_records} x {args.validate_windows} "
            f"windows, {args.validate_workers} workers = {result['steps']:.0f} steps"
        )
        print(
            f"  step {result['step_s']:.3f} s, loader {result['loader_per_s']:.0f} windows/s, "
            f"checkpoint {result['checkpoint_s']:.2f} s, fixed (one-step run less its step) "
            f"{result['fixed_s']:.1f} s"
        )
        print(
            f"  predicted {result['predicted_s']:.1f} s, measured {result['measured_s']:.1f} s, "
            f"error {100 * result['error']:+.1f}% (goal within 15%)"
        )
        return result
    return {}


if __name__ == "__main__":
    main()
