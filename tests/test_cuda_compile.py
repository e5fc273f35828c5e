"""``compile="auto"`` on a GPU: pretraining replays CUDA graphs, fine-tuning fuses kernels only,
and both train, resume and evaluate (run where CUDA is available; skipped elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.finetuning.training import evaluate, finetune
from partnd.pretraining import pretrain
from tests.test_finetune import tones
from tests.test_pretext_selection import ramp_1d

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def resolved_compile(run: Path) -> str:
    return json.loads((run / "meta.json").read_text())["resolved"]["compile"]


def test_pretraining_replays_cuda_graphs_and_resumes(tmp_path: Path) -> None:
    data = ramp_1d(64)
    config = PretrainConfig.preset(
        "test", device="cuda", epochs=2, batch_size=16, patch_size=20, num_patches=6
    )
    full = pretrain(data, out_dir=tmp_path / "full", config=config)
    assert resolved_compile(tmp_path / "full") == "reduce-overhead"
    pretrain(data, out_dir=tmp_path / "cut", config=config, max_steps=5)
    resumed = pretrain(data, out_dir=tmp_path / "cut", config=config, resume=True)
    losses = [r["loss"] for r in full.history if r["phase"] == "train"]
    assert all(np.isfinite(losses)) and len(resumed.history) == len(full.history)
    for name, value in full.encoder.state_dict().items():
        torch.testing.assert_close(resumed.encoder.state_dict()[name], value, rtol=0.05, atol=0.01)


def test_finetuning_fuses_kernels_and_the_model_evaluates_any_batch(tmp_path: Path) -> None:
    x, y = tones(96, seed=0)
    xv, yv = tones(40, seed=1)
    config = FinetuneConfig.preset(
        "test", device="cuda", patch_size=20, epochs=8, batch_size=16, lr=3e-3
    )
    result = finetune(
        "vit_test",
        x,
        train_labels=y.tolist(),
        num_classes=3,
        val_dataset=xv,
        val_labels=yv.tolist(),
        out_dir=tmp_path / "run",
        config=config,
    )
    assert resolved_compile(tmp_path / "run") == "default"
    assert result.best_metrics["accuracy"] > 0.8  # chance is 1/3
    report = evaluate(result.model, xv, labels=yv.tolist(), batch_size=7)
    assert report.cohen_kappa == pytest.approx(result.best_metrics["cohen_kappa"], abs=0.05)
