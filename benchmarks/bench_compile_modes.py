"""Benchmark: the engine's whole PART step under each compile mode, and a compiled run resumed.

What ``TrainConfig.compile="auto"`` should pick on CUDA (:data:`partnd.engine.compilation.
AUTO_ON_CUDA`) is decided by two measurements on the device, both made here in one process:

1. **speed through the engine**: samples/s of ``Trainer._train_step`` (forward under autocast,
   backward, clipping, fused AdamW, schedule, EMA) at the ``eeg_sleep`` preset in bf16, for
   each of ``--modes`` (``bench_cost_model.measure_step``), side by side;
2. **exact resumption**: for each mode, ``partnd.pretrain`` on random windows run
   uninterrupted for ``2 x --resume-steps`` steps, and cut after ``--resume-steps + 1`` steps
   then resumed; it prints whether the two final checkpoints (model, EMA, optimiser state) and
   loss histories are bitwise equal, and the largest absolute difference of any tensor, next to
   the same figures for a second uninterrupted run (the floor: the backward of PART's
   interpolated position embedding accumulates in a thread-dependent order, on a CPU as on CUDA,
   so two identical runs may differ by float rounding).

Usage::

    python benchmarks/bench_compile_modes.py --device cuda
    python benchmarks/bench_compile_modes.py --device cpu --batch-size 4 --steps 1 --modes off \
        --resume-modes off
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from bench_cost_model import measure_step

from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.pretraining import pretrain
from partnd.recipes.bench_support import FIXED_COMPILE_MODES
from partnd.signal_info import SignalSpec

#: The preset whose step is measured and its item shape.
PRESET, CHANNELS, SAMPLES = "eeg_sleep", 6, 3000


def largest_difference(left: Any, right: Any) -> tuple[bool, float]:
    """(bitwise equal, largest absolute difference) of two nests of tensors and plain values.

    Args:
        left: A checkpoint's (nested dict/list of tensors and plain values) part.
        right: The same part of another checkpoint.

    Returns:
        Whether every tensor is ``torch.equal`` and every other value ``==``, and the largest
        absolute elementwise difference over the floating tensors (0.0 when there are none).
    """
    if isinstance(left, torch.Tensor):
        equal = torch.equal(left, right)
        if left.is_floating_point() and not equal:
            return False, (left.double() - right.double()).abs().max().item()
        return equal, 0.0
    if isinstance(left, dict):
        if left.keys() != right.keys():
            return False, float("inf")
        pairs = [largest_difference(left[key], right[key]) for key in left]
    elif isinstance(left, list | tuple):
        if len(left) != len(right):
            return False, float("inf")
        pairs = [largest_difference(a, b) for a, b in zip(left, right, strict=True)]
    else:
        return left == right, 0.0
    return all(equal for equal, _ in pairs), max((diff for _, diff in pairs), default=0.0)


def resume_check(
    mode: str, batch_size: int, steps_per_epoch: int, device: torch.device
) -> dict[str, Any]:
    """An uninterrupted two-epoch ``pretrain`` against one cut one step into its second epoch
    and resumed, both compiled with ``mode`` on ``device``.

    Args:
        mode: ``TrainConfig.compile``.
        batch_size: Windows per step.
        steps_per_epoch: Steps of each of the two epochs.
        device: Where both runs train.

    Returns:
        ``{"mode", "equal", "max_abs_diff", "losses_equal"}`` for the resumed run against the
        uninterrupted one, and ``"repeat_equal"``, ``"repeat_max_abs_diff"`` for a second
        uninterrupted run against the first.
    """
    generator = torch.Generator().manual_seed(0)
    windows = torch.randn(batch_size * steps_per_epoch, CHANNELS, SAMPLES, generator=generator)
    config = PretrainConfig.preset(
        PRESET,
        precision="bf16",
        compile=mode,
        batch_size=batch_size,
        epochs=2,
        warmup_epochs=1.0,
        device=str(device),
        progress=False,
    )
    with tempfile.TemporaryDirectory(prefix="compile_resume_") as folder, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="the warm-up")
        root = Path(folder)
        full = pretrain(windows, out_dir=root / "full", config=config)
        pretrain(windows, out_dir=root / "repeat", config=config)
        pretrain(windows, out_dir=root / "cut", config=config, max_steps=steps_per_epoch + 1)
        resumed = pretrain(windows, out_dir=root / "cut", config=config, resume=True)
        states = {
            run: load_checkpoint(root / run / "checkpoints" / "last.pt")
            for run in ("full", "repeat", "cut")
        }
        parts = ("model", "ema", "optimizer", "trainer")
        left = {name: states["full"][name] for name in parts}
        equal, difference = largest_difference(left, {name: states["cut"][name] for name in parts})
        repeat_equal, repeat_difference = largest_difference(
            left, {name: states["repeat"][name] for name in parts}
        )

    def losses(history: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["phase"], r["epoch"], r["step"], r["loss"]) for r in history]

    return {
        "mode": mode,
        "equal": equal,
        "max_abs_diff": difference,
        "losses_equal": losses(full.history) == losses(resumed.history),
        "repeat_equal": repeat_equal,
        "repeat_max_abs_diff": repeat_difference,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure and print both; returns ``{"rates": {mode: samples/s}, "resume": [...]}``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each mode")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after compiling")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=FIXED_COMPILE_MODES,
        default=["off", "default", "reduce-overhead"],
    )
    parser.add_argument(
        "--resume-modes",
        nargs="+",
        choices=FIXED_COMPILE_MODES,
        default=["default", "reduce-overhead"],
        help="the modes whose resumption is checked",
    )
    parser.add_argument(
        "--resume-steps", type=int, default=3, help="steps of each epoch of the resume check"
    )
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    spec = SignalSpec(CHANNELS, (SAMPLES,))
    rates: dict[str, float] = {}
    print(f"1. The engine's {PRESET} PART step, bf16, batch {args.batch_size}, on {device}")
    for mode in args.modes:
        config = PretrainConfig.preset(
            PRESET, precision="bf16", compile=mode, batch_size=args.batch_size
        )
        rate = measure_step(config, spec, device, args.steps, args.warmup)
        rates[mode] = rate.samples_per_s
        print(
            f"  compile {mode:>15}: {rate.samples_per_s:9.1f} samples/s "
            f"({rate.spread[0] * 1e3:.1f}-{rate.spread[1] * 1e3:.1f} ms a step)"
        )
    print(f"2. Resumption: 2 epochs of {args.resume_steps} steps, cut after one more step")
    checks = []
    for mode in args.resume_modes:
        check = resume_check(mode, args.batch_size, args.resume_steps, device)
        checks.append(check)
        print(
            f"  compile {mode:>15}: checkpoints bitwise equal {check['equal']}, largest "
            f"difference {check['max_abs_diff']:.3g}, losses equal {check['losses_equal']}; "
            f"a repeated run: equal {check['repeat_equal']}, largest difference "
            f"{check['repeat_max_abs_diff']:.3g}"
        )
    return {"rates": rates, "resume": checks}


if __name__ == "__main__":
    main()
