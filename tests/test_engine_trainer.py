"""Tests of the generic training loop with a small regression task."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from partnd._validation import InputError
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import TrainConfig
from partnd.engine.distributed import DistributedContext
from partnd.engine.run_dir import RunDir
from partnd.engine.sampler import ResumableBatchSampler, epoch_order
from partnd.engine.trainer import (
    START_EPOCH,
    LearningRate,
    NonFiniteLossError,
    Trainer,
    TrainingInterrupted,
    derive_seed,
    move_to,
)

WEIGHTS = torch.tensor([[1.0, -2.0, 0.5]])


def regression_data(n: int = 32) -> TensorDataset:
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, x @ WEIGHTS.T)


class RegressionTask:
    """Mean squared error of a linear model; optionally returns NaN at call ``nan_at``."""

    def __init__(self, nan_at: int | None = None) -> None:
        self.calls = 0
        self.nan_at = nan_at
        self.output_dtypes: list[torch.dtype] = []

    def compute_loss(
        self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, y = batch
        prediction = model(x)
        self.output_dtypes.append(prediction.dtype)
        self.calls += 1
        loss = (prediction.float() - y).pow(2).mean()
        metrics = {"abs_error": (prediction.float() - y).abs().mean().detach()}
        return (loss * float("nan") if self.calls == self.nan_at else loss), metrics


def make_trainer(
    tmp_path: Path | None,
    task: RegressionTask,
    learning_rate: LearningRate | None = None,
    **overrides: object,
) -> Trainer:
    settings = {
        "epochs": 3,
        "batch_size": 8,
        "lr": 0.05,
        "min_lr": 0.0,
        "weight_decay": 0.0,
        "grad_clip": None,
        "device": "cpu",
        "progress": False,
        "log_every_steps": 1,
        **overrides,
    }
    run_dir = None
    if tmp_path is not None:
        run_dir = RunDir(tmp_path)
        run_dir.create(clear=False)
    torch.manual_seed(0)
    return Trainer(
        nn.Linear(3, 1),
        task,
        regression_data(),
        TrainConfig(**settings),  # type: ignore[arg-type]
        context=DistributedContext(),
        run_dir=run_dir,
        learning_rate=learning_rate,
    )


def test_generic_task_learns_and_logs() -> None:
    trainer = make_trainer(None, RegressionTask(), epochs=20, lr=0.2)
    history = trainer.fit()
    losses = [r["loss"] for r in history if r["phase"] == "epoch"]
    assert len(losses) == 20 and trainer.state.step == 80
    assert losses[-1] < 0.01 * losses[0]
    assert torch.allclose(trainer.model.weight.detach(), WEIGHTS, atol=0.05)
    train = [r for r in history if r["phase"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 81))
    assert train[0]["lr"] == pytest.approx(trainer.scheduler.lr_at(0))


def test_diagnostics_are_averaged_per_interval_and_epoch(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, RegressionTask(), epochs=2, log_every_steps=2)
    history = trainer.fit()
    train = [r for r in history if r["phase"] == "train"]
    epochs = [r for r in history if r["phase"] == "epoch"]
    assert [r["step"] for r in train] == [2, 4, 6, 8]
    assert all("abs_error" in r for r in train + epochs)
    # an epoch's value is the mean of its two intervals' means
    assert epochs[0]["abs_error"] == pytest.approx(
        (train[0]["abs_error"] + train[1]["abs_error"]) / 2, rel=1e-6
    )
    logged = (tmp_path / "metrics.csv").read_text().splitlines()[0]
    assert "abs_error" in logged


def test_one_host_synchronisation_per_step(host_syncs) -> None:
    """Only the rank-averaged loss is read back each step; diagnostics wait for the record."""
    trainer = make_trainer(None, RegressionTask(), epochs=1, log_every_steps=100)
    batch = next(iter(trainer.loader))
    with host_syncs:
        for index in range(3):
            trainer._train_step(batch, 0, index)
    assert host_syncs.calls == ["tolist"] * 3


def test_min_steps_lengthens_a_short_run_and_a_long_warmup_warns() -> None:
    trainer = make_trainer(None, RegressionTask(), epochs=2, min_steps=21)
    assert trainer.num_epochs == 6 and trainer.total_steps == 24  # 4 steps an epoch
    trainer.fit()
    assert trainer.state.step == 24
    assert make_trainer(None, RegressionTask(), epochs=7, min_steps=4).num_epochs == 7
    with pytest.warns(UserWarning, match="warm-up"):
        make_trainer(None, RegressionTask(), epochs=2, warmup_epochs=3.0)


def test_resolved_quantities_and_lr_scaling() -> None:
    trainer = make_trainer(None, RegressionTask(), lr_reference_batch=16, warmup_epochs=0.5)
    assert trainer.resolved["steps_per_epoch"] == 4
    assert trainer.resolved["total_steps"] == 12
    assert trainer.resolved["warmup_steps"] == 2
    assert trainer.peak_lr == pytest.approx(0.05 * 8 / 16)


def test_non_finite_loss_stops_before_the_step_and_keeps_the_last_checkpoint(
    tmp_path: Path,
) -> None:
    trainer = make_trainer(tmp_path, RegressionTask(nan_at=3), checkpoint_every_steps=1)
    with pytest.raises(NonFiniteLossError) as raised:
        trainer.fit()
    message = str(raised.value)
    assert "step 3 (epoch 0, batch 2)" in message
    assert f"learning rate {trainer.scheduler.lr_at(2):.4g}" in message
    assert str(tmp_path / "checkpoints" / "last.pt") in message
    saved = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert saved["trainer"]["step"] == 2
    assert torch.equal(
        saved["model"]["weight"], trainer.model.weight.detach()
    )  # step 3 not applied
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.pt"]


def test_max_steps_at_an_epoch_without_checkpoint_still_saves_a_resumable_state(
    tmp_path: Path,
) -> None:
    settings = {"checkpoint_every_epochs": 2, "epochs": 3}
    full = make_trainer(tmp_path / "full", RegressionTask(), **settings)
    full.fit()
    cut = make_trainer(tmp_path / "cut", RegressionTask(), max_steps=4, **settings)
    cut.fit()
    assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()) == ["last.pt"]
    assert load_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")["trainer"]["step"] == 4
    resumed = make_trainer(tmp_path / "cut", RegressionTask(), **settings)
    resumed.fit(resume_from=tmp_path / "cut" / "checkpoints" / "last.pt")
    assert torch.equal(resumed.model.weight, full.model.weight)
    assert resumed.state.step == full.state.step == 12


def step_decay(step: int, steps_per_epoch: int) -> float:
    """0.1, divided by 10 after each of the first two epochs."""
    return 0.1 * 0.1 ** min(step // steps_per_epoch, 2)


def test_a_learning_rate_function_sets_every_step_and_resumes(tmp_path: Path) -> None:
    full = make_trainer(tmp_path / "full", RegressionTask(), step_decay, epochs=3)
    history = full.fit()
    rates = [r["lr"] for r in history if r["phase"] == "train"]
    assert rates == pytest.approx([0.1] * 4 + [0.01] * 4 + [0.001] * 4)  # 32 items, batch 8
    cut = make_trainer(tmp_path / "cut", RegressionTask(), step_decay, epochs=3, max_steps=6)
    cut.fit()
    assert [group["lr"] for group in cut.optimizer.param_groups] == pytest.approx([0.01, 0.01])
    resumed = make_trainer(tmp_path / "cut", RegressionTask(), step_decay, epochs=3)
    resumed.fit(resume_from=tmp_path / "cut" / "checkpoints" / "last.pt")
    assert torch.equal(resumed.model.weight, full.model.weight)
    assert resumed.scheduler.current_lr == pytest.approx(0.001)


class SignalledTask(RegressionTask):
    """Sends this process ``number`` during call ``at`` (as Ctrl-C or ``kill`` would)."""

    def __init__(self, at: int, number: int) -> None:
        super().__init__()
        self.at, self.number = at, number

    def compute_loss(
        self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        output = super().compute_loss(model, batch, generator)
        if self.calls == self.at:
            os.kill(os.getpid(), self.number)
        return output


@pytest.mark.parametrize(
    ("number", "at"), [(signal.SIGINT, 6), (signal.SIGTERM, 6), (signal.SIGINT, 4)]
)
def test_a_signal_finishes_the_step_saves_last_pt_and_resumes_bit_identically(
    tmp_path: Path, number: int, at: int
) -> None:
    full = make_trainer(tmp_path / "full", RegressionTask())
    full.fit()
    before = signal.getsignal(number)
    cut = make_trainer(tmp_path / "cut", SignalledTask(at, number))  # 4 steps an epoch
    with pytest.raises(TrainingInterrupted) as raised:
        cut.fit()
    assert isinstance(raised.value, KeyboardInterrupt)
    assert (raised.value.signal_number, raised.value.step) == (number, at)
    last = tmp_path / "cut" / "checkpoints" / "last.pt"
    assert raised.value.checkpoint == last
    assert f"after step {at}; resumable checkpoint {last}" in str(raised.value)
    assert signal.getsignal(number) == before  # the handlers are put back
    assert load_checkpoint(last)["trainer"]["step"] == at
    resumed = make_trainer(tmp_path / "cut", RegressionTask())
    resumed.fit(resume_from=last)
    assert torch.equal(resumed.model.weight, full.model.weight)
    assert resumed.state.step == full.state.step == 12


def test_bf16_autocast_on_cpu_and_fp16_refused() -> None:
    task = RegressionTask()
    make_trainer(None, task, precision="bf16", epochs=1).fit()
    assert set(task.output_dtypes) == {torch.bfloat16}
    fp32 = RegressionTask()
    make_trainer(None, fp32, epochs=1).fit()
    assert set(fp32.output_dtypes) == {torch.float32}
    with pytest.raises(InputError, match="fp16 needs a CUDA"):
        make_trainer(None, RegressionTask(), precision="fp16")


def test_gradients_are_clipped() -> None:
    trainer = make_trainer(None, RegressionTask(), grad_clip=1e-3, epochs=1)
    trainer.fit()
    norm = torch.cat([p.grad.flatten() for p in trainer.model.parameters()]).norm()
    assert norm <= 1e-3 * (1 + 1e-5)


def test_best_epoch_selection_writes_best_checkpoint(tmp_path: Path) -> None:
    scores = iter([0.1, 0.7, 0.3])
    weights_per_epoch: list[torch.Tensor] = []

    def evaluate(model: nn.Module, epoch: int) -> dict[str, float]:
        weights_per_epoch.append(model.weight.detach().clone())
        return {"cohen_kappa": next(scores)}

    trainer = make_trainer(tmp_path, RegressionTask())
    trainer.evaluate, trainer.select_metric = evaluate, "cohen_kappa"
    history = trainer.fit()
    assert trainer.state.best_epoch == 1 and trainer.state.best_value == 0.7
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert best["epoch"] == 1 and best["metrics"] == {"cohen_kappa": 0.7}
    assert torch.equal(best["model"]["weight"], weights_per_epoch[1])
    assert [r["cohen_kappa"] for r in history if r["phase"] == "val"] == [0.1, 0.7, 0.3]


def test_eval_every_steps_spaces_the_evaluations_and_always_runs_the_last(tmp_path: Path) -> None:
    evaluated: list[tuple[int, int]] = []

    def evaluate(model: nn.Module, epoch: int) -> dict[str, float]:
        evaluated.append((epoch, trainer.state.step))
        return {"cohen_kappa": float(epoch)}

    # 32 items at batch 8: 4 steps an epoch, 7 epochs; an evaluation at least 10 steps apart
    trainer = make_trainer(tmp_path, RegressionTask(), epochs=7, eval_every_steps=10)
    trainer.evaluate, trainer.select_metric = evaluate, "cohen_kappa"
    trainer.fit()
    assert evaluated == [(0, 4), (3, 16), (6, 28)]
    assert trainer.state.best_epoch == 6 and trainer.state.evaluated_step == 28


def test_evaluate_start_offers_the_starting_weights_and_keeps_them_when_no_step_beats_them(
    tmp_path: Path,
) -> None:
    evaluated: list[tuple[int, int]] = []

    def evaluate(model: nn.Module, epoch: int) -> dict[str, float]:
        evaluated.append((epoch, trainer.state.step))
        return {"cohen_kappa": 0.9 if epoch == START_EPOCH else 0.5 + 0.1 * epoch}

    trainer = make_trainer(tmp_path, RegressionTask(), epochs=3, evaluate_start=True)
    start = trainer.model.weight.detach().clone()
    trainer.evaluate, trainer.select_metric = evaluate, "cohen_kappa"
    history = trainer.fit()
    assert evaluated == [(START_EPOCH, 0), (0, 4), (1, 8), (2, 12)]
    assert trainer.state.best_epoch == START_EPOCH and trainer.state.best_step == 0
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert torch.equal(best["model"]["weight"], start)  # the starting weights, not the trained
    assert not torch.equal(trainer.model.weight.detach(), start)
    first = next(r for r in history if r["phase"] == "val")
    assert first == {"phase": "val", "epoch": START_EPOCH, "step": 0, "cohen_kappa": 0.9}


def test_evaluate_start_is_off_by_default_and_a_later_step_that_does_better_wins(
    tmp_path: Path,
) -> None:
    evaluated: list[int] = []

    def evaluate(model: nn.Module, epoch: int) -> dict[str, float]:
        evaluated.append(epoch)
        return {"cohen_kappa": 0.1 if epoch == START_EPOCH else 0.5 + 0.1 * epoch}

    plain = make_trainer(tmp_path / "plain", RegressionTask(), epochs=2)
    plain.evaluate, plain.select_metric = evaluate, "cohen_kappa"
    plain.fit()
    assert evaluated == [0, 1]
    evaluated.clear()
    trainer = make_trainer(tmp_path / "start", RegressionTask(), epochs=2, evaluate_start=True)
    trainer.evaluate, trainer.select_metric = evaluate, "cohen_kappa"
    trainer.fit()
    assert evaluated == [START_EPOCH, 0, 1] and trainer.state.best_epoch == 1
    # the start evaluation counts towards eval_every_steps' spacing
    evaluated.clear()
    spaced = make_trainer(
        tmp_path / "spaced", RegressionTask(), epochs=4, evaluate_start=True, eval_every_steps=8
    )
    spaced.evaluate, spaced.select_metric = evaluate, "cohen_kappa"
    spaced.fit()
    assert evaluated == [START_EPOCH, 1, 3]


def test_a_resumed_run_does_not_evaluate_its_start_again(tmp_path: Path) -> None:
    evaluated: list[int] = []

    def evaluate(model: nn.Module, epoch: int) -> dict[str, float]:
        evaluated.append(epoch)
        return {"cohen_kappa": 0.9 if epoch == START_EPOCH else 0.1}

    first = make_trainer(tmp_path, RegressionTask(), epochs=3, max_steps=4, evaluate_start=True)
    first.evaluate, first.select_metric = evaluate, "cohen_kappa"
    first.fit()
    assert evaluated == [START_EPOCH, 0]
    evaluated.clear()
    resumed = make_trainer(tmp_path, RegressionTask(), epochs=3, evaluate_start=True)
    resumed.evaluate, resumed.select_metric = evaluate, "cohen_kappa"
    resumed.fit(resume_from=tmp_path / "checkpoints" / "last.pt")
    assert evaluated == [1, 2]
    assert resumed.state.best_epoch == START_EPOCH and resumed.state.best_step == 0


def batches(data: Any, rank: int, world_size: int = 2, seed: int = 5) -> ResumableBatchSampler:
    order = epoch_order(
        data, seed=seed, rank=rank, world_size=world_size, batch_size=3, num_workers=0
    )
    return ResumableBatchSampler(order, 3, world_size)


def test_batch_sampler_shards_skips_and_is_a_function_of_seed_and_epoch() -> None:
    data = list(range(22))
    ranks = [batches(data, rank) for rank in range(2)]
    assert ranks[0].batches_per_epoch == 3  # 11 items per rank, whole batches of 3
    epoch = [[i for batch in rank.epoch_batches(4) for i in batch] for rank in ranks]
    assert not set(epoch[0]) & set(epoch[1])
    assert len(epoch[0]) == len(epoch[1]) == 9
    again = batches(data, 0)
    assert again.epoch_batches(4) == ranks[0].epoch_batches(4)
    assert again.epoch_batches(5) != again.epoch_batches(4)
    assert batches(data, 0, seed=6).epoch_batches(4) != again.epoch_batches(4)
    again.set_epoch(4, skip=2)
    assert list(again) == ranks[0].epoch_batches(4)[2:] and len(again) == 1
    with pytest.raises(InputError, match="at least batch_size x world_size = 6 items"):
        batches(list(range(5)), 0)


class Chunked(list):
    """A list with a ``chunk_ids`` array: eight storage chunks of 8 items."""

    chunk_ids = np.repeat(np.arange(8), 8)


def test_datasets_with_chunk_ids_get_a_chunk_aware_order() -> None:
    data = Chunked(range(64))
    sampler = batches(data, rank=0, world_size=1)
    assert type(sampler.order).__name__ == "ChunkShuffleSampler"
    for epoch in range(3):
        order = [i for batch in sampler.epoch_batches(epoch) for i in batch]
        assert len(order) == 63 and len(set(order)) == 63  # 21 whole batches of 3
        # windows are shuffled inside buffers of k = 4 chunks: the first 32 come from 4 chunks
        assert len({int(Chunked.chunk_ids[i]) for i in order[:32]}) == 4
    assert sampler.epoch_batches(1) == batches(data, rank=0, world_size=1).epoch_batches(1)
    assert sampler.epoch_batches(1) != sampler.epoch_batches(2)


def test_seed_derivation_and_move_to() -> None:
    seeds = {derive_seed(0, rank, 3) for rank in range(8)}
    assert len(seeds) == 8 and all(0 <= seed < 2**63 for seed in seeds)
    assert derive_seed(1, 0) == derive_seed(1, 0) != derive_seed(2, 0)
    batch = move_to({"x": (torch.zeros(1), [torch.ones(1)]), "n": 3}, torch.device("cpu"))
    assert batch["n"] == 3 and torch.equal(batch["x"][1][0], torch.ones(1))
