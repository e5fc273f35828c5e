"""Every random quantity of an objective's step is drawn before its forward (``draw``), and those
draws are the ones the step drew inside its forward before the split.

``tests/recorded/objective_draws.json`` was recorded from the code before the draws were split out
(the same cases, batch and seeds as here): boxes, pairs and masks, the loss, and the next two
draws of the generator (so the step consumed exactly what it consumed before). Relative
positioning's and temporal shuffling's cases were recorded the same way from the pairs, triplets
and labels their forward drew before their draws were split out. The pre-drawn forward must also
be the forward that draws for itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from partnd.engine.config import PretrainConfig
from partnd.objectives import build_objective
from partnd.signal_info import SignalSpec

RECORDED = json.loads((Path(__file__).parent / "recorded" / "objective_draws.json").read_text())

WINDOWS = {"window_samples": 8, "segment_windows": 4, "num_windows": 3}
WINDOWS.update({"temporal_encoder": "temporal_test"})


def context(window_samples: int, segment_windows: int, num_windows: int) -> dict[str, int]:
    """Segments of a relative-positioning or temporal-shuffling case."""
    return {
        "window_samples": window_samples,
        "segment_windows": segment_windows,
        "num_windows": num_windows,
    }


#: case -> (method, spatial shape, settings beyond the ``test`` preset), as recorded.
CASES: dict[str, tuple[str, tuple[int, ...], dict[str, object]]] = {
    "part_1d": ("part", (32,), {}),
    "part_2d": ("part", (16, 12), {}),
    "part_per_example": ("part", (32,), {"shared_pairs": False}),
    "part_many_pairs": ("part", (16,), {"num_pairs": 40}),
    "part_scale": ("part", (32,), {"scale_range": (0.5, 2.0), "scale_targets": True}),
    "part_continuous": ("part", (16, 12), {"scale_range": (0.5, 2.0), "integer_boxes": False}),
    "part_local": ("part", (32,), {"pair_radius": 1.0}),
    "part_anchored": ("part", (32,), {"pos_embed": True, "pos_mask_ratio": 0.5}),
    "part_grid": ("part_grid", (16, 12), {}),
    "mae": ("mae", (16, 12), {}),
    "mp3": ("mp3", (16, 12), {}),
    "droppos": ("droppos", (16, 12), {}),
    "part_windows": ("part_windows", (32,), {**WINDOWS, "pos_embed": True, "pos_mask_ratio": 0.5}),
    "part_windows_plain": ("part_windows", (32,), {**WINDOWS, "pos_embed": False}),
    "rp": ("rp", (32,), {**context(8, 4, 6), "tau_pos_windows": 1, "tau_neg_windows": 2}),
    "rp_long": ("rp", (48,), {**context(4, 12, 10), "tau_pos_windows": 2, "tau_neg_windows": 5}),
    "ts": ("ts", (32,), {**context(8, 4, 6), "tau_pos_windows": 2, "tau_neg_windows": 1}),
    "ts_long": ("ts", (48,), {**context(4, 12, 12), "tau_pos_windows": 3, "tau_neg_windows": 2}),
}

#: What each kind of objective's output shows of its draws.
FIELDS = {
    "part": ("patches.centers", "patches.sizes", "ref", "tgt"),
    "mae": ("visible", "masked"),
    "mp3": ("key_mask",),
    "droppos": ("labels", "position_mask"),
}
#: What each window-context objective's draws hold (its output shows none of them).
DRAWN_FIELDS = {"rp": ("first", "second", "labels"), "ts": ("triplets", "labels")}


def build_case(case: str):
    method, spatial, settings = CASES[case]
    torch.manual_seed(0)
    model = build_objective(
        PretrainConfig.preset("test", method=method, **settings), SignalSpec(2, spatial)
    )
    x = torch.randn(3, 2, *spatial, generator=torch.Generator().manual_seed(1))
    return model, x, method if method in FIELDS or method in DRAWN_FIELDS else "part"


def attribute(value: object, dotted: str) -> object:
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


def test_every_case_was_recorded() -> None:
    assert set(RECORDED) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_predrawn_step_equals_the_recorded_draws(case: str) -> None:
    model, x, kind = build_case(case)
    generator = torch.Generator().manual_seed(7)
    draws = model.draw(x, generator)
    after = torch.rand(2, generator=generator).tolist()
    output = model(x, draws=draws)
    recorded = RECORDED[case]
    for field in DRAWN_FIELDS.get(kind, ()):
        assert attribute(draws, field).tolist() == recorded[field], field
    for field in FIELDS.get(kind, ()):
        assert attribute(output, field).tolist() == recorded[field], field
    if "baseline" in recorded:
        assert output.baseline.tolist() == recorded["baseline"]
    assert after == recorded["after"]  # exactly the draws of before, no more, no fewer
    assert float(output.loss.detach()) == pytest.approx(recorded["loss"], rel=1e-6)


@pytest.mark.parametrize(
    "case", ["part_1d", "part_anchored", "mae", "droppos", "part_windows", "rp", "ts_long"]
)
def test_forward_with_a_generator_draws_what_draw_draws(case: str) -> None:
    model, x, _ = build_case(case)
    drawn = model(x, draws=model.draw(x, torch.Generator().manual_seed(7)))
    itself = model(x, generator=torch.Generator().manual_seed(7))
    assert torch.equal(drawn.loss, itself.loss)
    other = model(x, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(drawn.loss, other.loss)
