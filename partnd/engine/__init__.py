"""The training engine shared by pretraining, fine-tuning and the baselines.

Modules: :mod:`~partnd.engine.config` (typed configs and presets), :mod:`~partnd.engine.optim`
(parameter groups, warm-up + cosine schedule, EMA), :mod:`~partnd.engine.checkpoint` (atomic
checkpoints with retention), :mod:`~partnd.engine.run_dir` (run directory layout and metadata),
:mod:`~partnd.engine.logging` (TensorBoard + JSONL + CSV), :mod:`~partnd.engine.distributed`
(torchrun/DDP), :mod:`~partnd.engine.sampler` (resumable data order),
:mod:`~partnd.engine.session` (config resolution and run set-up) and
:mod:`~partnd.engine.trainer` (the loop). See ``docs/engine.md``.
"""

from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig
from partnd.engine.trainer import NonFiniteLossError, Trainer, TrainState, TrainTask

__all__ = [
    "FinetuneConfig",
    "NonFiniteLossError",
    "PretrainConfig",
    "TrainConfig",
    "TrainState",
    "TrainTask",
    "Trainer",
]
