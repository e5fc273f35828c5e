"""The training engine shared by pretraining, fine-tuning and the baselines.

Modules: :mod:`~partnd.engine.config` (typed configs and presets), :mod:`~partnd.engine.optim`
(parameter groups, warm-up + cosine schedule, EMA), :mod:`~partnd.engine.checkpoint` (atomic
checkpoints with retention), :mod:`~partnd.engine.run_dir` (run directory layout and metadata),
:mod:`~partnd.engine.logging` (TensorBoard + JSONL + CSV), :mod:`~partnd.engine.distributed`
(torchrun/DDP), :mod:`~partnd.engine.sampler` (resumable data order),
:mod:`~partnd.engine.session` (config resolution and run set-up) and
:mod:`~partnd.engine.trainer` (the loop). See ``docs/engine.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partnd._lazy import lazy_exports

if TYPE_CHECKING:
    from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig
    from partnd.engine.trainer import NonFiniteLossError, Trainer, TrainState, TrainTask

# Names are imported on first use: the command line reads the configs without torch, so that
# Ctrl-C while torch loads ends inside the command's guard (one line) instead of a traceback.
_EXPORTS: dict[str, str] = {
    "FinetuneConfig": ".config",
    "NonFiniteLossError": ".trainer",
    "PretrainConfig": ".config",
    "TrainConfig": ".config",
    "TrainState": ".trainer",
    "TrainTask": ".trainer",
    "Trainer": ".trainer",
}

__all__ = [
    "FinetuneConfig",
    "NonFiniteLossError",
    "PretrainConfig",
    "TrainConfig",
    "TrainState",
    "TrainTask",
    "Trainer",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
