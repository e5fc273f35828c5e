"""Helpers of the fine-tuning tests: the tiny training settings of the study tests, a tiny night
classifier's config (linear probe then fine-tune, pretrained levels) and the parameters a run's
optimiser holds state for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from partnd.engine.config import FinetuneConfig

__all__ = ["TINY", "optimiser_state_names", "tiny_night_config"]

#: Study tests' pretraining and fine-tuning settings: the test encoder, batches of 4, fp32, a
#: 1-step warm-up and a metrics line every step.
TINY = {
    "encoder": "vit_test",
    "encoder_overrides": {},
    "batch_size": 4,
    "lr": 2e-3,
    "lr_reference_batch": None,
    "warmup_epochs": 0.0,
    "warmup_steps": 1,
    "precision": "fp32",
    "log_every_steps": 1,
}


def tiny_night_config(**overrides: Any) -> FinetuneConfig:
    """The ``test`` preset as a night classifier: 10-sample tiles, crops of 4 windows, the test
    temporal encoder, batches of 2, weight decay 0.05 (so a held parameter that decayed would
    show); ``overrides`` last."""
    values = {
        "patch_size": 10,
        "context": "night",
        "night_crop": 4,
        "temporal_encoder": "temporal_test",
        "batch_size": 2,
        "weight_decay": 0.05,
    }
    return FinetuneConfig.preset("test", **{**values, **overrides})


def optimiser_state_names(run: Path) -> set[str]:
    """Names of the parameters the run's last checkpoint holds AdamW state for."""
    checkpoint = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    optimizer = checkpoint["optimizer"]
    names = {
        index: name
        for group in optimizer["param_groups"]
        for index, name in zip(group["params"], group["param_names"], strict=True)
    }
    return {names[index] for index in optimizer["state"]}
