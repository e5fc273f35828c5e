"""Worker for ``tests/test_distributed.py``: one rank of a torchrun ``partnd.pretraining`` run.

Usage::

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed_worker.py OUT RESULTS [nan | heads | compiled | probe]

Every rank trains on the same generated data and writes its final weights to
``RESULTS/rank{RANK}.pt``, so the test can check that the ranks ended identical. With ``nan``, one
item holds a NaN: every rank must stop with an ``InputError`` (none may hang in a collective), and
writes the message to ``RESULTS/rank{RANK}.error``. With ``heads``, the worker joins the process
group itself (``pretrain`` reuses it) and pretrains once per ablation head (with scale targets) and
once per other method (PART across windows reads each item as a segment of 4 windows of 20
samples); it writes ``RESULTS/{name}_rank{RANK}.pt``. With ``compiled``, it pretrains PART once
eager and once compiled (``compile="default"``, the ``aot_eager`` backend: the engine's tracing
without code generation) and writes ``RESULTS/{eager,compiled}_rank{RANK}.pt``. With ``probe``,
it fine-tunes an encoder with a linear-probe phase (``probe_steps``) and writes
``RESULTS/probe_rank{RANK}.pt``.
"""

import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from partnd._validation import InputError
from partnd.engine import compilation
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.finetuning.training import finetune
from partnd.models import create_encoder
from partnd.pretraining import pretrain

ABLATION_HEADS = ("pairwise_mlp", "mlp")
METHODS = ("part_grid", "mae", "mp3", "droppos", "part_windows", "rp", "ts")


def run_heads(data: np.ndarray, out_dir: Path, results: Path, rank: int) -> None:
    """Pretrain with every ablation head and every other method in one process group (DDP
    without unused parameters: a parameter without a gradient in a step would abort the run)."""
    dist.init_process_group(backend="gloo")
    try:
        runs = {
            head: {"head": head, "scale_range": (0.5, 2.0), "scale_targets": True}
            for head in ABLATION_HEADS
        }
        runs.update({method: {"method": method} for method in METHODS})
        runs["droppos"]["mask_ratio"] = 0.5  # 4 tiles of 80 samples: keep 2
        runs["part_windows"].update(  # anchored: 2 of 3 windows per segment hidden
            window_samples=20,
            segment_windows=4,
            num_windows=3,
            patch_size=10,
            temporal_encoder="temporal_test",
            pos_embed=True,
            pos_mask_ratio=0.5,
        )
        for method, (tau_pos, tau_neg) in {"rp": (1, 2), "ts": (2, 1)}.items():
            runs[method].update(  # segments of 4 windows of 20 samples
                window_samples=20,
                segment_windows=4,
                num_windows=6,
                patch_size=10,
                tau_pos_windows=tau_pos,
                tau_neg_windows=tau_neg,
            )
        for name, settings in runs.items():
            config = PretrainConfig.preset(
                "test", patch_size=20, num_patches=3, num_pairs=6, epochs=1, batch_size=4
            ).replace(**settings)
            result = pretrain(data, out_dir=out_dir / name, config=config)
            torch.save(
                {"model": result.model.state_dict(), "history": result.history},
                results / f"{name}_rank{rank}.pt",
            )
    finally:
        dist.destroy_process_group()


def run_compiled(data: np.ndarray, out_dir: Path, results: Path, rank: int) -> None:
    """Pretrain PART eager, then compiled, in one process group (DDP over a compiled model)."""
    compilation.BACKEND = "aot_eager"
    dist.init_process_group(backend="gloo")
    try:
        config = PretrainConfig.preset(
            "test", patch_size=20, num_patches=6, num_pairs=12, epochs=1, batch_size=4
        )
        for name, mode in (("eager", "off"), ("compiled", "default")):
            result = pretrain(data, out_dir=out_dir / name, config=config.replace(compile=mode))
            torch.save(
                {"model": result.model.state_dict(), "history": result.history},
                results / f"{name}_rank{rank}.pt",
            )
    finally:
        dist.destroy_process_group()


def run_probe(data: np.ndarray, out_dir: Path, results: Path, rank: int) -> None:
    """Fine-tune a (seeded, untrained) encoder with 2 probe steps, stopped inside the probe phase
    and run through it, in one process group (DDP built again when the encoder is released)."""
    dist.init_process_group(backend="gloo")
    try:
        torch.manual_seed(5)
        encoder = create_encoder("vit_test", in_chans=2, patch_size=20, ndim=1)
        labels = [index % 3 for index in range(len(data))]
        config = FinetuneConfig.preset(
            "test", patch_size=20, epochs=2, batch_size=4, probe_steps=2, progress=False
        )
        runs = {"probe": {"max_steps": 2}, "full": {}}
        saved: dict[str, object] = {"encoder": encoder.state_dict()}
        for name, overrides in runs.items():
            result = finetune(
                encoder,
                data,
                train_labels=labels,
                num_classes=3,
                out_dir=out_dir / name,
                config=config.replace(**overrides),
            )
            saved[name] = result.model.state_dict()
        torch.save(saved, results / f"probe_rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def main() -> None:
    out_dir, results = Path(sys.argv[1]), Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    data = np.random.default_rng(0).standard_normal((32, 2, 80)).astype(np.float32)
    results.mkdir(parents=True, exist_ok=True)
    if sys.argv[3:] == ["heads"]:
        run_heads(data, out_dir, results, rank)
        return
    if sys.argv[3:] == ["compiled"]:
        run_compiled(data, out_dir, results, rank)
        return
    if sys.argv[3:] == ["probe"]:
        run_probe(data, out_dir, results, rank)
        return
    if sys.argv[3:] == ["nan"]:
        data[7, 0, 3] = np.nan
    config = PretrainConfig.preset(
        "test",
        patch_size=20,
        num_patches=6,
        num_pairs=12,
        epochs=2,
        batch_size=4,
        ema_decay=0.9,
        checkpoint_every_steps=3,
        log_every_steps=2,
        progress=True,
    )
    try:
        result = pretrain(data, out_dir=out_dir, config=config)
    except InputError as error:
        (results / f"rank{rank}.error").write_text(str(error))
        return
    torch.save(
        {"model": result.model.state_dict(), "history": result.history},
        results / f"rank{rank}.pt",
    )


if __name__ == "__main__":
    main()
