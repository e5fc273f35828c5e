"""A generic, resumable training loop shared by pretraining, fine-tuning and the baselines.

The loop is nanoGPT-short: for each batch, ``task.compute_loss(model, batch, generator)``, backward,
clip, AdamW step, schedule step, EMA update. Everything else is bookkeeping that makes a run
trustworthy:

* **Determinism and resume.** The data order is a function of ``(seed, epoch, rank)``
  (:mod:`partnd.engine.sampler`; chunk-aware for datasets with ``chunk_ids``); checkpoints carry
  model, optimiser, schedule, gradient scaler, EMA, every rank's RNG states (torch, CUDA, numpy,
  python and the per-rank sampling generator) and the position in the epoch. Resuming skips the
  consumed batches and continues bit-identically to an uninterrupted run on the same hardware and
  world size.
* **Failure.** The data are validated where they enter (:mod:`partnd.datasets.adapters` checks
every item); the
  loop itself synchronises with the host once per step, to read the rank-averaged loss. A
  non-finite loss stops the run before the optimiser step: with :class:`~partnd._validation.
  InputError` naming the batch and the dataset items if the batch holds NaN/Inf, else with
  :class:`NonFiniteLossError` giving the step, epoch and learning rate. Neither writes anything,
  so the checkpoints on disk stay the last good ones.
* **Diagnostics.** A task returns its loss and a dict of detached scalar diagnostics; both are
  averaged over each logging interval (and over the epoch) on the device and only moved to the
  host when a record is written.
* **Interruption.** SIGINT (Ctrl-C) or SIGTERM during :meth:`Trainer.fit` finishes the step in
  progress, writes ``checkpoints/last.pt`` and raises :class:`TrainingInterrupted` (a
  ``KeyboardInterrupt``); resuming continues bit-identically. Under DDP the request travels in the
  step's all-reduce, so every rank stops after the same step (rank 0 writes). A second signal
  stops at once without saving.
* **Distributed.** Under torchrun the model is wrapped in DDP (no ``find_unused_parameters``), each
  rank sees its shard of every epoch, and only rank 0 writes logs, checkpoints and progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from partnd._validation import InputError, check
from partnd.engine.checkpoint import CheckpointManager, load_checkpoint
from partnd.engine.compilation import compile_module, mark_step, resolve_compile
from partnd.engine.config import TrainConfig
from partnd.engine.distributed import DistributedContext
from partnd.engine.logging import MetricLogger
from partnd.engine.optim import (
    FunctionSchedule,
    ModelEMA,
    StepSchedule,
    WarmupCosineSchedule,
    build_optimizer,
)
from partnd.engine.precision import autocast, resolve_loader_dtype, resolve_precision
from partnd.engine.run_dir import RunDir
from partnd.engine.sampler import ResumableBatchSampler, epoch_order

__all__ = [
    "START_EPOCH",
    "BatchReads",
    "EpochEvaluator",
    "LearningRate",
    "NonFiniteLossError",
    "TrainState",
    "TrainTask",
    "Trainer",
    "TrainingInterrupted",
    "batch_as_read",
    "derive_seed",
    "move_to",
]

#: Called after every epoch with the evaluation model (EMA when on) and the 0-based epoch;
#: returns scalar metrics to log (and to select the best epoch on).
EpochEvaluator = Callable[[nn.Module, int], dict[str, float]]

#: ``(step, steps_per_epoch) -> rate``: the unscaled learning rate of 0-based optimiser step
#: ``step`` of a run with ``steps_per_epoch`` steps an epoch (a multi-step decay, ...).
LearningRate = Callable[[int, int], float]


class TrainTask(Protocol):
    """A training objective: how to turn a batch into a scalar loss and diagnostics."""

    def compute_loss(
        self, model: nn.Module, batch: Any, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Return the scalar loss of ``batch`` and detached scalar diagnostics (may be empty).

        Args:
            model: The (possibly DDP-wrapped) model; call it, do not call its submodules directly,
                so that DDP synchronises gradients.
            batch: The collated batch, already on the training device.
            generator: This rank's sampling generator (for patch and pair sampling).
        """
        ...


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or Inf; the run stopped before the optimiser step."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by a signal after writing a resumable checkpoint.

    Attributes:
        signal_number: The signal (``signal.SIGINT`` for Ctrl-C, ``signal.SIGTERM``); the shell's
            exit status for it is ``128 + signal_number`` (130, 143).
        checkpoint: The checkpoint written, or ``None`` when the trainer writes none.
        step: Optimiser steps done.
        how_to_resume: How the caller continues from the checkpoint (a command line re-runs
            the command, or passes ``--resume``).
    """

    def __init__(
        self,
        signal_number: int,
        checkpoint: Path | None,
        step: int,
        how_to_resume: str = "continue with resume=True",
    ) -> None:
        name = signal.Signals(signal_number).name
        where = (
            f"resumable checkpoint {checkpoint} ({how_to_resume})"
            if checkpoint is not None
            else "no checkpoint (the trainer has no run directory)"
        )
        super().__init__(f"interrupted by {name} after step {step}; {where}")
        self.signal_number = signal_number
        self.checkpoint = checkpoint
        self.step = step


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: The epoch the evaluation of the starting weights is logged and selected under
#: (``TrainConfig.evaluate_start``): before the first epoch, 0.
START_EPOCH = -1


def _ignore_interrupts(worker_id: int) -> None:
    """DataLoader worker init: leave Ctrl-C to the training process, which stops cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed derived from ``seed`` and integer ``keys`` (e.g. rank) via ``SeedSequence``."""
    state = np.random.SeedSequence([seed, *keys]).generate_state(1, dtype=np.uint64)[0]
    return int(state) >> 1


def move_to(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a (nested tuple/list/dict) batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type == "cuda")
    if isinstance(batch, tuple | list):
        return type(batch)(move_to(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: move_to(value, device) for key, value in batch.items()}
    return batch


class BatchReads(Dataset[Any]):
    """A dataset with a batched read (``batch(indices, dtype)``, e.g.
    :class:`~partnd.datasets.adapters.SignalDataset`) as the ``DataLoader`` sees it:
    ``__getitems__`` returns the whole batch tensor, which the collation
    (:func:`batch_as_read`) passes through."""

    def __init__(self, dataset: Any, dtype: torch.dtype) -> None:
        self.dataset = dataset
        self.dtype = dtype

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.dataset.batch([index], self.dtype)[0]

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return self.dataset.batch(indices, self.dtype)


def batch_as_read(batch: Any) -> Any:
    """Collation of :class:`BatchReads`: the batch is already one tensor."""
    return batch


def _read(loader: DataLoader[Any]) -> Iterator[tuple[Any, InputError | None]]:
    """``(batch, None)`` for every batch, or ``(None, error)`` for one whose items failed their
    checks (the iteration stops after it: the step raises on every rank)."""
    iterator = iter(loader)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except InputError as error:
            yield None, error
            return
        yield batch, None


def _progress_fields(record: dict[str, Any]) -> dict[str, str]:
    """Loss, a normalised diagnostic when there is one, and the learning rate, for the bar."""
    fields = {"loss": f"{record['loss']:.4g}"}
    for name in ("nmse", "accuracy", "recon_nmse"):
        if name in record:
            fields[name] = f"{record[name]:.3g}"
    fields["lr"] = f"{record['lr']:.3g}"
    return fields


@dataclass
class TrainState:
    """Position of a run, saved in every checkpoint.

    Attributes:
        epoch: Epoch in progress (0-based); equals ``epochs`` when training finished.
        batch_in_epoch: Batches of ``epoch`` already consumed.
        step: Optimiser steps done.
        epoch_loss_sum: Sum of the per-step losses of ``epoch`` so far (rank mean).
        epoch_metric_sums: Sums of the per-step diagnostics of ``epoch`` so far (this rank's).
        best_value: Best value of the selection metric so far.
        best_epoch: Epoch of ``best_value``.
        best_metrics: All evaluation metrics of the best epoch.
        evaluated_step: Step of the last evaluation (``None`` before the first).
        best_step: Optimiser step of ``best_value``.
        evaluations_since_best: Evaluations in a row without a better value (early stopping).
        stopped_early: ``patience`` evaluations in a row brought no improvement: the run counts
            as finished (it may have been at the end of its budget anyway; see
            :attr:`Trainer.stopped_before_budget`).
    """

    epoch: int = 0
    batch_in_epoch: int = 0
    step: int = 0
    epoch_loss_sum: float = 0.0
    epoch_metric_sums: dict[str, float] = field(default_factory=dict)
    best_value: float | None = None
    best_epoch: int | None = None
    best_metrics: dict[str, float] = field(default_factory=dict)
    evaluated_step: int | None = None
    best_step: int | None = None
    evaluations_since_best: int = 0
    stopped_early: bool = False


def _rng_state(generator: torch.Generator) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "sampling": generator.get_state(),
    }


def _set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    generator.set_state(state["sampling"])


class Trainer:
    """Trains ``model`` on ``dataset`` with ``task``'s loss (see the module docstring).

    Args:
        model: The module to train; moved to ``context.device``.
        task: Turns a batch into a loss (:class:`TrainTask`).
        dataset: Training set; items are collated by ``collate_fn`` (default: stacking).
        config: Optimiser, schedule, precision and I/O settings.
        context: Distributed context (rank, world size, device).
        run_dir: Run directory for logs and checkpoints (``None`` writes nothing).
        layer_decay: Layer-wise learning-rate decay of the parameter groups (``None`` for none).
        full_rate: Names of ``model``'s parameters that layer-wise decay leaves at the full rate
            whatever their depth (:func:`~partnd.engine.optim.param_groups`): a level that
            starts untrained.
        evaluate: Optional per-epoch evaluation (:data:`EpochEvaluator`).
        select_metric: Metric of ``evaluate`` to select on; its best epoch's weights go to
            ``checkpoints/best.pt``, and ``TrainConfig.patience`` stops the run once it stops
            improving.
        select_mode: ``"max"`` (a score, e.g. validation kappa) or ``"min"`` (an error, e.g. a
            held-out pretext error): which direction of ``select_metric`` is better.
        checkpoint_extra: Additional entries stored in every checkpoint (e.g. the data shape).
        collate_fn: Batch collation function.
        learning_rate: The schedule (:data:`LearningRate`; each group gets the rate times its
            ``lr_scale``); ``None``: linear warm-up to the peak rate, then cosine decay to
            ``config.min_lr`` (:class:`~partnd.engine.optim.WarmupCosineSchedule`).
        freeze: Names of ``model``'s parameters held fixed for the first ``freeze_steps``
            optimiser steps (a linear probe's pretrained encoder). They are in the optimiser
            from the start but take no gradient then (``requires_grad`` off), so AdamW skips
            them: no update, no decoupled weight decay, no moment or step count; the schedule
            runs on unchanged. A run resumed at step ``k`` holds them exactly when
            ``k < freeze_steps``.
        freeze_steps: Optimiser steps during which ``freeze`` is held (0: none).
    """

    def __init__(
        self,
        model: nn.Module,
        task: TrainTask,
        dataset: Dataset[Any],
        config: TrainConfig,
        *,
        context: DistributedContext,
        run_dir: RunDir | None,
        layer_decay: float | None = None,
        full_rate: Collection[str] = (),
        evaluate: EpochEvaluator | None = None,
        select_metric: str | None = None,
        select_mode: str = "max",
        checkpoint_extra: dict[str, Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        learning_rate: LearningRate | None = None,
        freeze: Collection[str] = (),
        freeze_steps: int = 0,
    ) -> None:
        check(
            isinstance(freeze_steps, int) and freeze_steps >= 0,
            "freeze_steps",
            "an int >= 0",
            repr(freeze_steps),
        )
        check(select_mode in ("max", "min"), "select_mode", "'max' or 'min'", repr(select_mode))
        check(
            config.patience is None or (evaluate is not None and select_metric is not None),
            "patience",
            "None unless the run evaluates and selects on a metric (a validation set or a "
            "monitor with a selection metric)",
            repr(config.patience),
        )
        check(
            select_metric is None or evaluate is not None,
            "select_metric",
            "None without a monitor (an evaluation whose metric the run selects on)",
            repr(select_metric),
        )
        self.config = config
        self.context = context
        self.device = context.device
        self.task = task
        self.run_dir = run_dir
        self.evaluate = evaluate
        self.select_metric = select_metric
        self.select_mode = select_mode
        self.checkpoint_extra = checkpoint_extra or {}
        self.precision = resolve_precision(config.precision, self.device)
        check(
            self.precision != "fp16" or self.device.type == "cuda",
            "precision",
            "'auto', 'fp32' or 'bf16' on CPU (fp16 needs a CUDA gradient scaler)",
            repr(config.precision),
        )
        self.compile_mode = resolve_compile(
            config.compile,
            self.device,
            config.auto_compile_on_cuda,
            distributed=context.is_distributed,
        )

        order = epoch_order(
            dataset,  # type: ignore[arg-type]
            seed=config.seed,
            rank=context.rank,
            world_size=context.world_size,
            batch_size=config.batch_size,
            num_workers=config.num_workers,
        )
        self.batch_sampler = ResumableBatchSampler(order, config.batch_size, context.world_size)
        self.loader_dtype = resolve_loader_dtype(
            config.loader_dtype, self.precision, self.device, config.num_workers
        )
        # a dataset read a batch at a time is stacked once, in the dtype it travels in
        self.batched = collate_fn is None and callable(getattr(dataset, "batch", None))
        self.loader = DataLoader(
            BatchReads(dataset, self.loader_dtype) if self.batched else dataset,
            batch_sampler=self.batch_sampler,
            num_workers=config.num_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=config.num_workers > 0,
            collate_fn=batch_as_read if self.batched else collate_fn,
            generator=torch.Generator().manual_seed(config.seed),
            worker_init_fn=_ignore_interrupts if config.num_workers > 0 else None,
        )
        self.steps_per_epoch = self.batch_sampler.batches_per_epoch
        self.num_epochs = config.epochs
        if config.min_steps is not None:
            self.num_epochs = max(config.epochs, math.ceil(config.min_steps / self.steps_per_epoch))
        self.total_steps = self.num_epochs * self.steps_per_epoch
        self.global_batch_size = config.batch_size * context.world_size
        self.peak_lr = config.lr
        if config.lr_reference_batch is not None:
            self.peak_lr = config.lr * self.global_batch_size / config.lr_reference_batch
        if config.warmup_steps is not None:
            self.warmup_steps = config.warmup_steps
        else:
            self.warmup_steps = round(config.warmup_epochs * self.steps_per_epoch)
        if self.warmup_steps >= self.total_steps and context.is_main:
            warnings.warn(
                f"the warm-up ({self.warmup_steps} steps) is not shorter than the whole run "
                f"({self.total_steps} steps of {self.steps_per_epoch} per epoch): the learning "
                "rate never reaches its peak and never decays; lower warmup_epochs/warmup_steps or "
                "train longer",
                stacklevel=3,
            )

        named = dict(model.named_parameters())
        for names, argument in ((freeze, "freeze"), (full_rate, "full_rate")):
            unknown = sorted(set(names) - set(named))
            check(not unknown, argument, "names of the model's parameters", f"unknown {unknown}")
        self.model = model.to(self.device)
        self.optimizer = build_optimizer(
            self.model,
            lr=self.peak_lr,
            weight_decay=config.weight_decay,
            betas=config.betas,
            layer_decay=layer_decay,
            full_rate=full_rate,
        )
        self.full_rate_parameters = len(set(full_rate))
        self.scheduler: StepSchedule
        if learning_rate is None:
            self.scheduler = WarmupCosineSchedule(
                self.optimizer,
                base_lr=self.peak_lr,
                min_lr=config.min_lr,
                warmup_steps=self.warmup_steps,
                total_steps=self.total_steps,
            )
        else:
            steps_per_epoch = self.steps_per_epoch
            self.scheduler = FunctionSchedule(
                self.optimizer, lambda step: learning_rate(step, steps_per_epoch)
            )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.ema = ModelEMA(self.model, config.ema_decay) if config.ema_decay else None
        compile_module(self.model, self.compile_mode)  # after the EMA copy, which stays eager
        named = dict(self.model.named_parameters())
        self.freeze_steps = freeze_steps
        self._freezable = [named[name] for name in sorted(freeze)]
        self._frozen = False
        self.train_model: nn.Module = self.model
        self._wrapped_frozen: bool | None = None  # the model is not wrapped for DDP yet
        self._hold_frozen(step=0)
        self.generator = torch.Generator(device=self.device)
        self.state = TrainState()
        self._epoch_metrics: dict[str, torch.Tensor] = {}
        self._saved_step: int | None = None
        self._stop_signal: int | None = None
        self.checkpoints = (
            CheckpointManager(run_dir.checkpoints_dir, config.keep_checkpoints)
            if run_dir is not None
            else None
        )
        self._seed_fresh()

    def _hold_frozen(self, step: int) -> None:
        """Hold ``freeze`` fixed before optimiser step ``step`` (0-based) when it is below
        ``freeze_steps``, release it from then on; under DDP, wrap the model again at a change
        (DDP reduces the gradients of the parameters that required one when it was built)."""
        self._set_frozen(step < self.freeze_steps and bool(self._freezable))
        if self.context.is_distributed and self._wrapped_frozen != self._frozen:
            device_ids = [self.device] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=device_ids)
            self._wrapped_frozen = self._frozen

    def _set_frozen(self, frozen: bool) -> None:
        """Turn the gradients of ``freeze`` off (``frozen``) or back on."""
        if frozen != self._frozen:
            for param in self._freezable:
                param.requires_grad_(not frozen)
            self._frozen = frozen

    @property
    def eval_model(self) -> nn.Module:
        """The weights to evaluate and return: the EMA average when EMA is on, else the model."""
        return self.ema.module if self.ema is not None else self.model

    @property
    def resolved(self) -> dict[str, Any]:
        """Derived quantities worth recording in ``meta.json``."""
        return {
            "steps_per_epoch": self.steps_per_epoch,
            "epochs": self.num_epochs,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "global_batch_size": self.global_batch_size,
            "peak_lr": self.peak_lr,
            "device": str(self.device),
            "precision": self.precision,
            "compile": self.compile_mode,
            "loader_dtype": str(self.loader_dtype).removeprefix("torch."),
            "num_parameters": sum(p.numel() for p in self.model.parameters()),
            "full_rate_parameters": self.full_rate_parameters,
        }

    def _seed_fresh(self) -> None:
        rank = self.context.rank
        torch.manual_seed(derive_seed(self.config.seed, rank, 0))
        np.random.seed(derive_seed(self.config.seed, rank, 1) % 2**32)
        random.seed(derive_seed(self.config.seed, rank, 2))
        self.generator.manual_seed(derive_seed(self.config.seed, rank, 3))

    def _checkpoint_state(self) -> dict[str, Any]:
        self.state.epoch_metric_sums = {
            name: float(value) for name, value in self._epoch_metrics.items()
        }
        rng = self.context.gather_objects(_rng_state(self.generator))
        return {
            "format": "partnd-train-v1",
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "trainer": dataclasses.asdict(self.state),
            "rng": rng,
            "world_size": self.context.world_size,
            "config": self.config.to_dict(),
            **self.checkpoint_extra,
        }

    def _save(self, *, epoch_end: bool) -> None:
        """Write ``last.pt`` (and ``epoch_XXXX.pt`` at an epoch end) on rank 0, between barriers."""
        if self.checkpoints is None:
            return
        state = self._checkpoint_state()
        self._saved_step = self.state.step
        self.context.barrier()
        if self.context.is_main:
            if epoch_end:
                self.checkpoints.save_epoch(state, self.state.epoch - 1)
            else:
                self.checkpoints.save_last(state)
        self.context.barrier()

    def load(self, path: str | Path) -> None:
        """Restore a checkpoint written by this trainer (on every rank) to continue the run."""
        checkpoint = load_checkpoint(path)
        check(
            checkpoint.get("format") == "partnd-train-v1",
            "path",
            "a partnd training checkpoint",
            f"{path} (format {checkpoint.get('format')!r})",
        )
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.scaler.load_state_dict(checkpoint["scaler"])
        if self.ema is not None:
            if checkpoint["ema"] is None:
                warnings.warn(
                    "checkpoint has no EMA; starting the average from the weights", stacklevel=2
                )
                self.ema = ModelEMA(self.model, self.ema.decay)
            else:
                self.ema.load_state_dict(checkpoint["ema"])
        self.state = TrainState(**checkpoint["trainer"])
        rng = checkpoint["rng"]
        if len(rng) == self.context.world_size:
            _set_rng_state(rng[self.context.rank], self.generator)
        else:
            warnings.warn(
                f"resuming with world size {self.context.world_size} from a checkpoint written "
                f"with {len(rng)}: random streams are re-seeded, so the run is no longer "
                "bit-identical to an uninterrupted one",
                stacklevel=2,
            )
            torch.manual_seed(derive_seed(self.config.seed, self.context.rank, self.state.step))
            self.generator.manual_seed(
                derive_seed(self.config.seed, self.context.rank, self.state.step, 3)
            )

    def _unreadable_batch(
        self, error: InputError | None, epoch: int, batch_index: int
    ) -> InputError:
        """The error every rank raises when some rank could not read its batch."""
        if error is not None:
            return error
        return InputError(
            f"dataset: expected readable, finite items, got a bad item in batch {batch_index} of "
            f"epoch {epoch} on another rank (this is rank {self.context.rank}; the other rank's "
            "error names the item)"
        )

    def _non_finite_loss(self, loss: float, epoch: int, batch_index: int) -> NonFiniteLossError:
        last = "none (no checkpoint written yet)"
        if self.checkpoints is not None and self.checkpoints.last_path.is_file():
            last = str(self.checkpoints.last_path)
        return NonFiniteLossError(
            f"training stopped: non-finite loss ({loss}) at step {self.state.step + 1} "
            f"(epoch {epoch}, batch {batch_index}) with learning rate "
            f"{self.scheduler.current_lr:.4g}; this step was not applied and nothing was saved. "
            f"Last good checkpoint: {last}. Lower lr, enable grad_clip or use precision='fp32'."
        )

    def _train_step(
        self, batch: Any, epoch: int, batch_index: int, read_error: InputError | None = None
    ) -> tuple[float, dict[str, torch.Tensor], int | None]:
        """One optimiser step; returns the loss averaged over ranks, this rank's detached
        diagnostics and the stop signal some rank received (``None`` for none).

        The rank-averaged loss, a count of ranks that could not read their batch and the stop
        signal travel in one all-reduce and are read back once: the step's only host
        synchronisation. Every rank then stops together (none is left waiting in a collective)
        when a batch was unreadable or the loss is not finite, before any gradient is applied, or
        after this step when a rank was asked to stop.
        """
        self._hold_frozen(self.state.step)
        metrics: dict[str, torch.Tensor] = {}
        set_progress = getattr(self.model, "set_training_progress", None)
        if callable(set_progress):  # e.g. DropPos decays its smoothing over the run
            set_progress(self.state.step / self.total_steps)
        if read_error is None:
            mark_step(self.compile_mode)
            with autocast(self.device, self.precision):
                loss, metrics = self.task.compute_loss(self.train_model, batch, self.generator)
            loss = loss.float()
            status = torch.stack([loss.detach(), torch.zeros_like(loss), torch.zeros_like(loss)])
        else:
            status = torch.tensor([0.0, 1.0, 0.0], device=self.device)
        status[2] = float(self._stop_signal or 0)
        loss_mean, unreadable, stop = self.context.all_reduce_mean(status).tolist()
        stop_signal = None
        if stop > 0:  # some rank was signalled; name this rank's signal, else SIGINT
            stop_signal = self._stop_signal or int(signal.SIGINT)
        if unreadable > 0:
            raise self._unreadable_batch(read_error, epoch, batch_index)
        if not math.isfinite(loss_mean):
            raise self._non_finite_loss(loss_mean, epoch, batch_index)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.config.grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(self.model)
        return loss_mean, metrics, stop_signal

    def _reduce_metrics(self, sums: dict[str, torch.Tensor], count: int) -> dict[str, float]:
        """Average diagnostic sums over ``count`` steps and over ranks, on the host."""
        if not sums or count == 0:
            return {}
        names = sorted(sums)
        stacked = torch.stack([sums[name].float() for name in names]) / count
        values = self.context.all_reduce_mean(stacked).tolist()
        return dict(zip(names, values, strict=True))

    def _end_epoch(self, epoch: int, logger: MetricLogger, seconds: float) -> None:
        record: dict[str, Any] = {
            "phase": "epoch",
            "epoch": epoch,
            "step": self.state.step,
            "loss": self.state.epoch_loss_sum / self.steps_per_epoch,
            **self._reduce_metrics(self._epoch_metrics, self.steps_per_epoch),
            "lr": self.scheduler.lr_at(self.state.step - 1),
            "seconds": seconds,
        }
        logger.log(record)
        self.state.epoch = epoch + 1
        self.state.batch_in_epoch = 0
        self.state.epoch_loss_sum = 0.0
        self.state.epoch_metric_sums = {}
        self._epoch_metrics = {}
        if self.evaluate is not None and self._evaluation_due(epoch):
            self._evaluate(epoch, logger)
        every = self.config.checkpoint_every_epochs
        if (epoch + 1) % every == 0 or epoch + 1 == self.num_epochs or self.state.stopped_early:
            self._save(epoch_end=True)

    def _evaluate(self, epoch: int, logger: MetricLogger) -> None:
        """Evaluate the current weights after ``epoch`` (:data:`START_EPOCH`: the starting
        weights), log the metrics and offer them to the checkpoint selection."""
        assert self.evaluate is not None
        self.state.evaluated_step = self.state.step
        metrics = self.evaluate(self.eval_model, epoch)
        logger.log({"phase": "val", "epoch": epoch, "step": self.state.step, **metrics})
        check(
            self.select_metric is None or self.select_metric in metrics,
            "select_metric",
            f"one of the evaluation's metrics {sorted(metrics)}",
            repr(self.select_metric),
        )
        value = metrics.get(self.select_metric) if self.select_metric else None
        if value is not None:
            self._select(float(value), metrics, epoch, logger)

    def _select(
        self, value: float, metrics: dict[str, float], epoch: int, logger: MetricLogger
    ) -> None:
        """Keep the best evaluation's weights; stop early after ``patience`` without one."""
        best = self.state.best_value
        better = best is None or (value > best if self.select_mode == "max" else value < best)
        if better:
            self.state.best_value = value
            self.state.best_epoch = epoch
            self.state.best_step = self.state.step
            self.state.best_metrics = dict(metrics)
            self.state.evaluations_since_best = 0
            if self.checkpoints is not None and self.context.is_main:
                self.checkpoints.save_best(
                    {"model": self.eval_model.state_dict(), "epoch": epoch, "metrics": metrics}
                )
            return
        start = self.config.patience_start
        assert best is not None  # the first evaluation is always better
        if start is not None and not (best < start if self.select_mode == "min" else best > start):
            return  # still on the plateau before the threshold: keep training
        self.state.evaluations_since_best += 1
        patience = self.config.patience
        if patience is not None and self.state.evaluations_since_best >= patience:
            self.state.stopped_early = True
            logger.log(
                {
                    "phase": "early_stop",
                    "epoch": epoch,
                    "step": self.state.step,
                    "best_epoch": self.state.best_epoch,
                    "best_step": self.state.best_step,
                    self.select_metric or "value": self.state.best_value,
                }
            )

    @property
    def stopped_before_budget(self) -> bool:
        """Whether early stopping left steps of the budget (``epochs``, ``max_steps``) untrained:
        out of patience at the budget's last evaluation is no early stop."""
        budget = self.total_steps
        if self.config.max_steps is not None:
            budget = min(budget, self.config.max_steps)
        return self.state.stopped_early and self.state.step < budget

    def _start_evaluation_due(self) -> bool:
        """Whether the starting weights are evaluated (``TrainConfig.evaluate_start``): on a
        fresh run with an evaluation, not on a resumed one."""
        fresh = self.state.step == 0 and self.state.evaluated_step is None
        return self.config.evaluate_start and self.evaluate is not None and fresh

    def _evaluation_due(self, epoch: int) -> bool:
        """Whether the evaluation runs after ``epoch`` (see ``TrainConfig.eval_every_steps``)."""
        every, last = self.config.eval_every_steps, self.state.evaluated_step
        if every is None or last is None or epoch + 1 == self.num_epochs:
            return True
        return self.state.step - last >= every

    def fit(self, resume_from: str | Path | None = None) -> list[dict[str, Any]]:
        """Train until ``epochs`` (or ``max_steps``, or an early stop) and return the history.

        Args:
            resume_from: Checkpoint to continue from (normally ``checkpoints/last.pt``).

        Returns:
            The records logged (``phase`` "train", "epoch" and "val"), including an interrupted
            run's records up to the resumed step.
        """
        if resume_from is not None:
            self.load(resume_from)
        config = self.config
        logger = MetricLogger(
            self.run_dir,
            write=self.context.is_main,
            resume_step=self.state.step if resume_from is not None else None,
        )
        show = config.progress and self.context.is_main
        try:
            if self._start_evaluation_due():
                self._evaluate(START_EPOCH, logger)
            with self._stop_on_signals():
                while self.state.epoch < self.num_epochs and not self.state.stopped_early:
                    if config.max_steps is not None and self.state.step >= config.max_steps:
                        break
                    if not self._run_epoch(logger, show):
                        break
                stopped = self.state.epoch < self.num_epochs and not self.state.stopped_early
                if stopped and self._saved_step != self.state.step:
                    self._save(epoch_end=False)  # stopped by max_steps: keep a resumable state
        finally:
            logger.close()
            self._set_frozen(False)  # the model leaves as it came; the next step holds it again
        return logger.history

    @contextlib.contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """Turn SIGINT/SIGTERM into a stop request for the next step (main thread only); a
        second signal raises ``KeyboardInterrupt`` at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {number: signal.getsignal(number) for number in _STOP_SIGNALS}

        def request_stop(number: int, frame: Any) -> None:
            if self._stop_signal is not None:
                raise KeyboardInterrupt(f"{signal.Signals(number).name} received twice")
            self._stop_signal = number

        self._stop_signal = None
        for number in _STOP_SIGNALS:
            signal.signal(number, request_stop)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _interrupt(self, stop_signal: int) -> TrainingInterrupted:
        """Write ``last.pt`` (every rank takes part, rank 0 writes) and describe the stop."""
        if self._saved_step != self.state.step:
            self._save(epoch_end=False)
        checkpoint = self.checkpoints.last_path if self.checkpoints is not None else None
        return TrainingInterrupted(stop_signal, checkpoint, self.state.step)

    def _run_epoch(self, logger: MetricLogger, show: bool) -> bool:
        """Train the epoch from its first unconsumed batch; False if max_steps stopped it."""
        config = self.config
        epoch, start = self.state.epoch, self.state.batch_in_epoch
        self.batch_sampler.set_epoch(epoch, skip=start)
        self.model.train()
        started = time.perf_counter()
        window_loss, window_steps, window_start = 0.0, 0, started
        window_metrics: dict[str, torch.Tensor] = {}
        self._epoch_metrics = {
            name: torch.tensor(value, device=self.device)
            for name, value in self.state.epoch_metric_sums.items()
        }
        bar = tqdm(
            total=self.steps_per_epoch,
            initial=start,
            desc=f"epoch {epoch + 1}/{self.num_epochs}",
            disable=not show,
            dynamic_ncols=True,
            leave=False,
        )
        try:
            for batch_index, (batch, read_error) in enumerate(_read(self.loader), start=start):
                if read_error is None:
                    batch = move_to(batch, self.device)
                    if self.batched:  # a batch shipped in bf16 is cast back on the device
                        batch = batch.float()
                loss, metrics, stop_signal = self._train_step(batch, epoch, batch_index, read_error)
                self.state.step += 1
                self.state.batch_in_epoch = batch_index + 1
                self.state.epoch_loss_sum += loss
                window_loss, window_steps = window_loss + loss, window_steps + 1
                for name, value in metrics.items():
                    value = value.detach().float()
                    window_metrics[name] = window_metrics.get(name, 0.0) + value
                    self._epoch_metrics[name] = self._epoch_metrics.get(name, 0.0) + value
                bar.update(1)
                if self.state.step % config.log_every_steps == 0:
                    now = time.perf_counter()
                    record = {
                        "phase": "train",
                        "epoch": epoch,
                        "step": self.state.step,
                        "loss": window_loss / window_steps,
                        **self._reduce_metrics(window_metrics, window_steps),
                        "lr": self.scheduler.lr_at(self.state.step - 1),
                        "samples_per_s": window_steps
                        * self.global_batch_size
                        / (now - window_start),
                    }
                    logger.log(record)
                    bar.set_postfix(_progress_fields(record))
                    window_loss, window_steps, window_start = 0.0, 0, now
                    window_metrics = {}
                if stop_signal is not None:
                    raise self._interrupt(stop_signal)
                if batch_index + 1 == self.steps_per_epoch:
                    break
                every = config.checkpoint_every_steps
                if every and self.state.step % every == 0:
                    self._save(epoch_end=False)
                if config.max_steps is not None and self.state.step >= config.max_steps:
                    return False
        finally:
            bar.close()
        self._end_epoch(epoch, logger, time.perf_counter() - started)
        return True
