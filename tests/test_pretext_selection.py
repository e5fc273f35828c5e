"""Choosing a pretraining budget on held-out pretext error: the monitor and early stopping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.evaluation.probes import PretextMonitor
from partnd.objectives.diagnostics import pretext_error
from partnd.pretraining import pretrain


def ramp_1d(n: int, seed: int = 0) -> np.ndarray:
    """[n, 2, 400]: a rising and a falling ramp plus noise, so content reveals the time."""
    ramp = np.linspace(-1.0, 1.0, 400)
    noise = 0.05 * np.random.default_rng(seed).standard_normal((n, 2, 400))
    return (np.stack([ramp, -ramp]) + noise).astype(np.float32)


def tiny_config(**overrides: object) -> PretrainConfig:
    base = {"patch_size": 20, "num_patches": 6, "num_pairs": 12, "epochs": 2, "batch_size": 4}
    return PretrainConfig.preset("test", **{**base, **overrides})


def scripted(values: dict[int, float]):
    """A monitor whose error after epoch e is ``values[e]`` (0.99 beyond): a known curve."""

    def monitor(model: torch.nn.Module, epoch: int) -> dict[str, float]:
        return {"heldout_error": values.get(epoch, 0.99)}

    return monitor


CURVE = {0: 1.0, 1: 0.8, 2: 0.9, 3: 0.95}


def test_pretext_error_is_each_objectives_ratio_to_its_floor() -> None:
    assert pretext_error({"nmse": 0.6, "loss": 3.0}) == 0.6
    assert pretext_error({"recon_nmse": 0.9}) == 0.9
    assert pretext_error({"accuracy": 0.6, "accuracy_chance": 0.2}) == pytest.approx(0.5)
    assert pretext_error({"loss": 1.0}) is None


def test_early_stopping_keeps_the_best_evaluation_and_a_stopped_run_stays_stopped(
    tmp_path: Path,
) -> None:
    data = ramp_1d(8)  # 2 steps an epoch at batch 4
    out = tmp_path / "run"
    config = tiny_config(epochs=10, patience=2)
    result = pretrain(
        data, out_dir=out, config=config, monitor=scripted(CURVE), select_metric="heldout_error"
    )
    # best after epoch 1 (step 4); epochs 2 and 3 did not improve: stopped after step 8 of 20
    assert result.selected == {
        "metric": "heldout_error",
        "value": 0.8,
        "step": 4,
        "epoch": 1,
        "steps": 8,
        "stopped_early": True,
    }
    stops = [r for r in result.history if r["phase"] == "early_stop"]
    assert len(stops) == 1 and stops[0]["best_step"] == 4 and stops[0]["step"] == 8
    best = load_checkpoint(out / "checkpoints/best.pt")
    assert best["epoch"] == 1
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, best["model"][name])  # the returned weights are the best
    last = load_checkpoint(out / "checkpoints/last.pt")
    assert any(not torch.equal(last["model"][k], v) for k, v in best["model"].items())
    # resuming a stopped run trains nothing more and selects the same weights
    again = pretrain(
        data, out_dir=out, resume=True, monitor=scripted(CURVE), select_metric="heldout_error"
    )
    assert again.selected == result.selected
    steps = [r["step"] for r in again.history if r["phase"] == "train"]
    assert max(steps) == 8
    # maximising picks the largest value instead
    high = pretrain(
        data,
        out_dir=tmp_path / "max",
        config=tiny_config(epochs=4),
        monitor=scripted(CURVE),
        select_metric="heldout_error",
        select_mode="max",
    )
    assert high.selected is not None and high.selected["epoch"] == 0
    assert not high.selected["stopped_early"] and high.selected["steps"] == 8


def test_an_interrupted_selection_resumes_to_the_same_choice(tmp_path: Path) -> None:
    data = ramp_1d(8)
    config = tiny_config(epochs=10, patience=2)
    whole = pretrain(
        data,
        out_dir=tmp_path / "whole",
        config=config,
        monitor=scripted(CURVE),
        select_metric="heldout_error",
    )
    pretrain(
        data,
        out_dir=tmp_path / "cut",
        config=config,
        monitor=scripted(CURVE),
        select_metric="heldout_error",
        max_steps=5,
    )
    resumed = pretrain(
        data,
        out_dir=tmp_path / "cut",
        resume=True,
        max_steps=None,
        monitor=scripted(CURVE),
        select_metric="heldout_error",
    )
    assert resumed.selected == whole.selected
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name])


def test_patience_starts_counting_once_the_error_leaves_its_floor(tmp_path: Path) -> None:
    data = ramp_1d(8)  # 2 steps an epoch at batch 4
    # at the floor for four evaluations, then learning: plain patience stops on the plateau
    plateau = {0: 1.0, 1: 1.01, 2: 1.005, 3: 1.02, 4: 0.9, 5: 0.8, 6: 0.85, 7: 0.86}
    plain = pretrain(
        data,
        out_dir=tmp_path / "plain",
        config=tiny_config(epochs=10, patience=2),
        monitor=scripted(plateau),
        select_metric="heldout_error",
    )
    assert plain.selected is not None
    assert (plain.selected["step"], plain.selected["steps"]) == (2, 6)  # epoch 0 at the floor
    waited = pretrain(
        data,
        out_dir=tmp_path / "waited",
        config=tiny_config(epochs=10, patience=2, patience_start=0.98),
        monitor=scripted(plateau),
        select_metric="heldout_error",
    )
    # the plateau is not counted; after epoch 5's 0.8, epochs 6 and 7 without a lower one stop it
    assert waited.selected is not None
    assert waited.selected["value"] == 0.8 and waited.selected["epoch"] == 5
    assert waited.selected["steps"] == 16 and waited.selected["stopped_early"]
    # a run that never leaves the floor trains its whole budget
    flat = pretrain(
        data,
        out_dir=tmp_path / "flat",
        config=tiny_config(epochs=6, patience=2, patience_start=0.98),
        monitor=scripted({e: 1.0 + 0.01 * (e % 2) for e in range(6)}),
        select_metric="heldout_error",
    )
    assert flat.selected is not None
    assert flat.selected["steps"] == 12 and not flat.selected["stopped_early"]
    with pytest.raises(InputError, match="patience_start"):
        PretrainConfig.preset("test", patience_start=0.98)


def test_patience_needs_a_selection_metric(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="patience"):
        pretrain(ramp_1d(8), out_dir=tmp_path / "run", config=tiny_config(patience=2))
    with pytest.raises(InputError, match="patience"):
        PretrainConfig.preset("test", patience=0)


def test_the_held_out_monitor_is_fixed_learns_on_content_and_leaves_training_alone(
    tmp_path: Path,
) -> None:
    held_out = ramp_1d(12, seed=5)
    monitor = PretextMonitor(held_out, max_items=8, batch_size=3, seed=1)
    assert len(monitor.indices) == 8
    short = tiny_config(epochs=2)
    plain = pretrain(ramp_1d(8), out_dir=tmp_path / "plain", config=short)
    watched = pretrain(ramp_1d(8), out_dir=tmp_path / "watched", config=short, monitor=monitor)
    train = [(r["step"], r["loss"]) for r in watched.history if r["phase"] == "train"]
    assert train == [(r["step"], r["loss"]) for r in plain.history if r["phase"] == "train"]
    config = tiny_config(epochs=12, lr=3e-3, num_pairs=30, num_patches=10, batch_size=8)
    result = pretrain(
        ramp_1d(16),
        out_dir=tmp_path / "run",
        config=config,
        monitor=monitor,
        select_metric="heldout_error",
    )
    val = [r for r in result.history if r["phase"] == "val"]
    assert len(val) == 12 and {"heldout_nmse", "heldout_loss", "heldout_r2_t"} <= set(val[0])
    assert val[0]["heldout_error"] == val[0]["heldout_nmse"]
    assert val[0]["heldout_error"] > 0.8 > min(r["heldout_error"] for r in val)  # it learns
    # the same weights give the same value (same items, patches and pairs every time): the
    # selected weights score what was logged for them
    assert monitor(result.model, 0) == monitor(result.model, 7)
    assert result.selected is not None
    assert monitor(result.model, 0)["heldout_error"] == pytest.approx(result.selected["value"])
    noise = np.random.default_rng(0).standard_normal((8, 2, 400)).astype(np.float32)
    on_noise = PretextMonitor(noise, batch_size=4)(result.model, 0)
    assert on_noise["heldout_error"] > 0.8  # nothing to place in white noise


def test_a_selection_that_cannot_happen_is_refused(tmp_path: Path) -> None:
    """select_metric without a monitor was accepted (selected None); a misspelt one trained the
    whole budget with no selection."""
    data = ramp_1d(8)
    with pytest.raises(InputError, match="select_metric: expected None without a monitor"):
        pretrain(data, out_dir=tmp_path / "a", config=tiny_config(), select_metric="heldout_error")
    with pytest.raises(InputError, match=r"select_metric: expected one of .*heldout_error"):
        pretrain(
            data,
            out_dir=tmp_path / "b",
            config=tiny_config(),
            monitor=scripted(CURVE),
            select_metric="heldout_eror",
        )


def test_a_run_that_trained_its_whole_budget_did_not_stop_early(tmp_path: Path) -> None:
    """epochs=3, patience=1: the last evaluation ran out of patience at the last step, and
    stopped_early said True although every step was trained."""
    result = pretrain(
        ramp_1d(8),
        out_dir=tmp_path / "run",
        config=tiny_config(epochs=3, patience=1),
        monitor=scripted({0: 1.0, 1: 0.8, 2: 0.9}),
        select_metric="heldout_error",
    )
    assert result.selected is not None
    assert result.selected["steps"] == 6 and result.selected["epoch"] == 1
    assert not result.selected["stopped_early"]
