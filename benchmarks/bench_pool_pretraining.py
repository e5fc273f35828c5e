"""Pretraining PART across windows on growing pools: loader throughput against step consumption.

For each pretraining pool of a study (``--study OUT``: its ``pools.json`` and pool store) or for
every record of a store (``--store``), it times, in one run:

1. **the loader**: batches of segments read from the store exactly as pretraining reads them
   (:class:`~partnd.datasets.segments.SleepSegmentDataset` over the pool's nights, the trainer's
   chunk-aware epoch order, a ``DataLoader`` with each of ``--workers`` worker counts, each batch
   read at once and shipped in each of ``--loader-dtypes``, ``float32`` or ``bfloat16``, as the
   engine's ``loader_dtype``);
2. **the step**: one PART-across-windows optimiser step (the step's draws, then the objective's
   forward under autocast, backward, AdamW) of the study's window and temporal encoders
   (``--demo``: the demo's 128-wide window ViT and its front-end) on segments of the same shape,
   on ``--device`` (a GPU: the step a pretraining there consumes at, ``--precision`` as the
   engine resolves it, ``--compile`` as ``TrainConfig.compile``);

and prints segments/s and hours of EEG/s of both (a segment of ``S`` windows covers ``S`` × 30 s;
the objective reads ``N`` of its windows), their ratio (the loader should be several times
faster), the segments of one epoch of each pool and the time an epoch takes at the step's rate,
and the same for PhysioNet 2018 (``--pc18-nights`` nights of 8 h).

Usage::

    python benchmarks/bench_pool_pretraining.py --study runs/axes --workers 0 2
    python benchmarks/bench_pool_pretraining.py --store runs/pool_store.zarr --demo --steps 5
    python benchmarks/bench_pool_pretraining.py --study runs/axes --demo --device cuda \
        --steps 20 --workers 0 2 4 8
    python benchmarks/bench_pool_pretraining.py --store runs/pool_store.zarr --demo --device cuda \
        --precision bf16 --compile default --batch-size 64 --workers 4 8 12 \
        --loader-dtypes float32 bfloat16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from bench_objective_step import training_step
from torch.utils.data import DataLoader

from partnd.datasets.adapters import as_signal_dataset
from partnd.datasets.pools import PretrainingPools
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.store import SleepStore
from partnd.engine.compilation import compile_module
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.engine.precision import PRECISIONS, resolve_precision
from partnd.engine.sampler import ResumableBatchSampler, epoch_order
from partnd.engine.trainer import BatchReads, batch_as_read
from partnd.objectives import build_objective
from partnd.recipes.bench_support import add_compile_option, interleaved_times
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES, SCALES, STUDY_FRONTENDS
from partnd.signal_info import SignalSpec

#: What ``--loader-dtypes`` accepts: the engine's ``loader_dtype`` values.
LOADER_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def loader_rate(
    dataset: SleepSegmentDataset,
    batch_size: int,
    workers: int,
    batches: int,
    dtype: torch.dtype = torch.float32,
) -> float:
    """Segments/s of the trainer's loading path (batches read at once, shipped in ``dtype``)
    over ``batches`` batches after one untimed, epoch after epoch when the pool holds fewer."""
    order = epoch_order(
        dataset, seed=0, rank=0, world_size=1, batch_size=batch_size, num_workers=workers
    )
    sampler = ResumableBatchSampler(order, batch_size)
    loader = DataLoader(
        BatchReads(as_signal_dataset(dataset)[0], dtype),
        batch_sampler=sampler,
        num_workers=workers,
        persistent_workers=workers > 0,
        collate_fn=batch_as_read,
    )
    seen, count, start, epoch = 0, 0, 0.0, 0
    while seen <= batches:
        sampler.set_epoch(epoch)
        for batch in loader:
            if seen == 0:
                start = time.perf_counter()
            else:
                count += len(batch)
            seen += 1
            if seen > batches:
                break
        epoch += 1
    return count / (time.perf_counter() - start)


def step_rate(
    config: PretrainConfig,
    channels: int,
    steps: int,
    device: torch.device,
    compile_mode: str = "off",
) -> dict[str, float]:
    """Segments/s of a PART-across-windows optimiser step on ``device`` at the config's
    precision, compiled with ``compile_mode`` (median of ``steps`` after one untimed, three when
    compiled; the device synchronised around each)."""
    spec = SignalSpec(channels, (config.segment_windows * config.window_samples,))
    torch.manual_seed(0)
    model = build_objective(config, spec).to(device).train()
    compile_module(model, compile_mode)
    segments = torch.randn(config.batch_size, *spec.item_shape, device=device)
    generator = torch.Generator(device=device).manual_seed(0)

    def loss() -> torch.Tensor:
        return model(segments, draws=model.draw(segments, generator)).loss

    step = training_step(model, loss, device, config.precision, compile_mode)
    warmup = 1 if compile_mode == "off" else 3
    seconds = interleaved_times({"step": step}, steps, warmup, device)["step"]
    return {"segments_per_s": config.batch_size / seconds, "step_s": seconds}


def pools_of(args: argparse.Namespace) -> tuple[SleepStore, dict[str, list[str]]]:
    """The store and ``{pool: records}`` to measure."""
    if args.study is not None:
        plan = PretrainingPools.load(args.study / "pools.json")
        return SleepStore(plan.store), {name: list(plan.records(name)) for name in plan.names}
    store = SleepStore(args.store)
    return store, {"all": store.record_ids()}


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--study", type=Path, help="a study directory with pretraining pools")
    source.add_argument("--store", type=Path, help="a store (all its records as one pool)")
    parser.add_argument(
        "--demo", action="store_true", help="the demo's window encoder (width, depth, front-end)"
    )
    parser.add_argument("--batch-size", type=int, default=8, help="segments per step")
    parser.add_argument("--steps", type=int, default=3, help="timed optimiser steps")
    parser.add_argument("--batches", type=int, default=20, help="timed loader batches per pool")
    parser.add_argument("--workers", type=int, nargs="+", default=[0], help="loader workers")
    parser.add_argument(
        "--segment-windows",
        type=int,
        default=None,
        help="windows per segment (default: the demo's; at most a night's windows)",
    )
    parser.add_argument("--pc18-nights", type=int, default=1000, help="PhysioNet 2018 nights")
    parser.add_argument("--device", default="cpu", help="the step's device: cpu, cuda, cuda:K")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="the step's precision (auto: bf16 where the device runs it fast, as pretraining)",
    )
    add_compile_option(parser, "compile the step as TrainConfig.compile does")
    parser.add_argument(
        "--loader-dtypes",
        nargs="+",
        choices=sorted(LOADER_DTYPES),
        default=["float32"],
        help="dtypes the loader ships batches in (the engine's loader_dtype)",
    )
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    store, pools = pools_of(args)
    scale = SCALES["demo"]
    values: dict[str, Any] = {
        **scale.pretrain,
        **scale.pretrain_methods["part_windows"],
        "batch_size": args.batch_size,
        "normalize": "record",
        "progress": False,
        "precision": precision,
    }
    if args.segment_windows is not None:
        values["segment_windows"] = args.segment_windows
    if not args.demo:
        values.pop("encoder_overrides", None)
    else:  # the demo study's window encoder: its width and depth, and its front-end
        values["encoder_overrides"] = {
            **DEMO_ENCODER_OVERRIDES,
            **STUDY_FRONTENDS[scale.frontend],
        }
    config = PretrainConfig.preset("eeg_sleep_windows", method="part_windows", **values)
    size, window_s = config.segment_windows, float(store.window_seconds)
    segment_hours = size * window_s / 3600
    drawn_hours = config.num_windows * window_s / 3600
    step = step_rate(config, len(store.channels), args.steps, device, args.compile)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"step (batch {args.batch_size}, S={size}, N={config.num_windows}, {precision}, "
        f"{where}, compile {args.compile}, {torch.get_num_threads()} threads): "
        f"{step['step_s']:.3f} s = "
        f"{step['segments_per_s']:.2f} segments/s = {step['segments_per_s'] * segment_hours:.2f} "
        f"h of EEG/s covered ({step['segments_per_s'] * drawn_hours:.2f} h drawn)"
    )
    header = f"{'pool':>8}{'hours':>8}{'segments':>10}{'workers':>8}{'dtype':>9}{'load seg/s':>12}"
    print(header + f"{'load h/s':>10}{'load/step':>11}{'epoch min':>11}")
    for name, records in pools.items():
        dataset = SleepSegmentDataset(
            store, records=records, segment_windows=size, normalize="record"
        )
        hours = sum(store.n_windows(r) for r in records) * window_s / 3600
        epoch_minutes = len(dataset) / step["segments_per_s"] / 60
        if len(dataset) < args.batch_size:  # training drops the last incomplete batch
            print(f"{name:>8}{hours:>8.1f}{len(dataset):>10}  fewer segments than a batch")
            continue
        for workers in args.workers:
            for dtype_name in args.loader_dtypes:
                dtype = LOADER_DTYPES[dtype_name]
                rate = loader_rate(dataset, args.batch_size, workers, args.batches, dtype)
                print(
                    f"{name:>8}{hours:>8.1f}{len(dataset):>10}{workers:>8}{dtype_name:>9}"
                    f"{rate:>12.2f}"
                    f"{rate * segment_hours:>10.1f}{rate / step['segments_per_s']:>11.1f}"
                    f"{epoch_minutes:>11.1f}"
                )
    pc18_segments = args.pc18_nights * 8 * 3600 / window_s / dataset.stride
    print(
        f"PhysioNet 2018 ({args.pc18_nights} nights of 8 h): about {pc18_segments:.0f} segments "
        f"an epoch (stride {dataset.stride} windows), "
        f"{pc18_segments / step['segments_per_s'] / 3600:.1f} h an epoch at this step's rate"
    )


if __name__ == "__main__":
    main()
