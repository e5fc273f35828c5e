"""PART within and across windows trained together (``method="part_joint"``): the loss is the
sum of both, the within-window view adds no position embedding, it learns a planted structure
inside windows and stays at its floor on noise, and pretraining saves the two encoders that PART
across windows saves. The shared objective contract (``test_objectives_contract.py``) covers it
too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd.engine.config import PretrainConfig
from partnd.models.serialization import load_hierarchical_encoder
from partnd.objectives import JointPART, build_objective
from partnd.objectives.part_joint import JointDraws
from partnd.pretraining import pretrain
from partnd.signal_info import SignalSpec

pytestmark = pytest.mark.usefixtures("one_thread")

#: Segments of 4 windows of 16 samples, 3 windows drawn per segment (half hidden), 4 off-grid
#: patches of 4 samples in each drawn window.
SETTINGS: dict[str, object] = {
    "method": "part_joint",
    "patch_size": 4,
    "window_samples": 16,
    "segment_windows": 4,
    "num_windows": 3,
    "num_patches": 4,
    "within_pairs": 8,
    "temporal_encoder": "temporal_test",
    "pos_embed": True,
    "pos_mask_ratio": 0.5,
}


def build(**overrides: object) -> JointPART:
    torch.manual_seed(0)
    config = PretrainConfig.preset("test", **{**SETTINGS, **overrides})  # type: ignore[arg-type]
    model = build_objective(config, SignalSpec(1, (64,)))
    assert isinstance(model, JointPART)
    return model


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ramps(batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, 1, 64]: one rising ramp over the segment plus noise. A drawn window starts anywhere
    (off the stored grid); after its own normalisation it is still a ramp, so a patch's level
    says where in its window it lies."""
    ramp = torch.linspace(-1.0, 1.0, 64)
    return ramp + 0.05 * torch.randn(batch, 1, 64, generator=generator)


def train(model: JointPART, signal, steps: int) -> dict[str, float]:
    """Train ``steps`` steps and average the metrics of the last 10."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data, draws, history = seeded(1), seeded(2), []
    for _ in range(steps):
        out = model(signal(16, data), generator=draws)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        history.append({name: float(value) for name, value in out.metrics.items()})
    return {name: float(np.mean([r[name] for r in history[-10:]])) for name in history[0]}


def test_the_loss_adds_the_weighted_within_window_loss_on_the_same_draws() -> None:
    model = build()
    x = ramps(4, seeded())
    draws = model.draw(x, seeded(3))
    assert isinstance(draws, JointDraws)
    # B * N = 12 drawn windows, each with 4 patches; one set of 8 pairs for the batch
    assert draws.within.boxes.sizes.shape[:2] == (12, 4) and draws.within.ref.shape == (8,)
    once = model.forward_with_draws(x, draws)
    model.within_weight = 3.0
    thrice = model.forward_with_draws(x, draws)
    within = once.metrics["within_loss"]
    torch.testing.assert_close(thrice.loss - once.loss, 2.0 * within)
    across = super(JointPART, model).forward_with_draws(x, draws.across)
    torch.testing.assert_close(once.loss, across.loss + within)
    assert {"nmse", "within_nmse", "nmse_isolated"} <= set(once.metrics)


def test_the_within_window_view_adds_no_position_embedding() -> None:
    model = build()
    window = model.hierarchical.window
    assert window.pos_embed is not None  # the across-windows view tiles windows on the grid
    assert model.within.encoder is window and not model.within.anchored
    x = ramps(4, seeded())
    draws = model.draw(x, seeded(3))
    across = super(JointPART, model).forward_with_draws(x, draws.across)
    windows = across.patches.patches.flatten(0, 1)
    within = model.within.forward_with_draws(windows, draws.within)
    with torch.no_grad():
        window.pos_embed.add_(5.0)
    moved_within = model.within.forward_with_draws(windows, draws.within)
    moved_across = super(JointPART, model).forward_with_draws(x, draws.across)
    torch.testing.assert_close(moved_within.pred, within.pred)  # no position reaches patches
    assert not torch.allclose(moved_across.pred, across.pred)  # the tiles' embedding does


def test_within_windows_learns_a_planted_structure_and_stays_at_its_floor_on_noise() -> None:
    learnt = train(build(), ramps, steps=120)
    assert learnt["within_nmse"] < 0.5, learnt
    noise = train(build(), lambda b, g: torch.randn(b, 1, 64, generator=g), steps=60)
    assert noise["within_nmse"] > 0.85, noise


def test_pretraining_saves_the_window_and_temporal_encoders(tmp_path: Path) -> None:
    data = ramps(16, seeded()).numpy()
    config = PretrainConfig.preset("test", **SETTINGS, batch_size=4)  # type: ignore[arg-type]
    result = pretrain(data, out_dir=tmp_path, config=config, epochs=1)
    assert isinstance(result.model, JointPART)
    encoder = load_hierarchical_encoder(tmp_path)
    trained = result.model.hierarchical
    for name, value in trained.window.state_dict().items():
        torch.testing.assert_close(encoder.window.state_dict()[name], value)
    for name, value in trained.temporal.state_dict().items():
        torch.testing.assert_close(encoder.temporal.state_dict()[name], value)
    train_records = [r for r in result.history if r["phase"] == "train"]
    assert train_records and all("within_nmse" in r for r in train_records)


def test_the_studies_read_it_as_part_across_windows(tmp_path: Path) -> None:
    """A study pretrains it on segments with PART across windows' preset and budget, and its
    night rows may keep only the temporal level, as part_windows' may."""
    from partnd.recipes.study_config import TEMPORAL_LEVEL_METHODS, StudyConfig

    assert "part_joint" in TEMPORAL_LEVEL_METHODS
    config = StudyConfig(out=tmp_path, night_overrides={"pretrained_levels": "temporal"})
    joint = config.pretrain_config("part_joint", pool=True)
    windows = config.pretrain_config("part_windows", pool=True)
    differs = {key for key, value in joint.to_dict().items() if value != windows.to_dict()[key]}
    assert differs == {"method"}
    config.check_pretrained_levels([("part_joint", "night")])
    assert config.finetune_config("part_joint", 0, "night").pretrained_levels == "temporal"
