"""The feature-content benchmark's measure: stage and time of night read from frozen features,
each night predicted by models fitted on the others."""

from __future__ import annotations

import numpy as np
import pytest

from partnd.recipes import bench_support as bench


def nights(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three 4-h nights of 480 windows: stages in bouts of 20 windows, the hour of each window,
    the night id."""
    rng = np.random.default_rng(seed)
    stages = np.concatenate([np.repeat(rng.permutation(24) % 5, 20) for _ in range(3)])
    hours = np.tile(np.arange(480) * 30 / 3600, 3)
    return stages, hours, np.repeat(np.arange(3), 480)


def test_a_clock_feature_gives_the_hour_and_a_stage_feature_the_stage() -> None:
    stages, hours, night_ids = nights(0)
    rng = np.random.default_rng(1)
    stage_code = np.eye(5)[stages] + 0.1 * rng.standard_normal((len(stages), 5))
    clock = hours[:, None] + 0.05 * rng.standard_normal((len(stages), 1))
    noise = rng.standard_normal((len(stages), 4))

    stage_only = bench.leave_one_night_out(
        np.hstack([stage_code, noise]), stages, hours, night_ids, seed=0
    )
    assert stage_only["stage_kappa"] > 0.95 and stage_only["stage_kappa_scarce"] > 0.9
    assert stage_only["hour_r2"] < 0.05  # the bouts are shuffled: stage says nothing of the hour
    stage_alone = bench.hour_r2(np.eye(5)[stages], hours, night_ids)
    assert stage_alone == pytest.approx(stage_only["hour_r2"], abs=0.05)

    clock_only = bench.leave_one_night_out(np.hstack([clock, noise]), stages, hours, night_ids, 0)
    assert clock_only["hour_r2"] > 0.95
    assert abs(clock_only["stage_kappa"]) < 0.1 and abs(clock_only["stage_kappa_scarce"]) < 0.1
    assert clock_only["hour_r2"] == bench.hour_r2(np.hstack([clock, noise]), hours, night_ids)
    assert bench.hour_r2(clock, hours, night_ids) > 0.95 > stage_alone


def test_the_scarce_probe_reads_only_its_drawn_windows() -> None:
    """A feature that separates the stages only through a few windows' noise cannot be learned
    from 2 windows per stage, but from all of them; the draws are seeded."""
    stages, hours, night_ids = nights(1)
    rng = np.random.default_rng(2)
    weak = np.eye(5)[stages] + 1.5 * rng.standard_normal((len(stages), 5))
    full = bench.leave_one_night_out(weak, stages, hours, night_ids, seed=0, per_stage=2)
    assert full["stage_kappa"] > full["stage_kappa_scarce"] + 0.1
    again = bench.leave_one_night_out(weak, stages, hours, night_ids, seed=0, per_stage=2)
    assert again == full


def test_effective_dimensions_count_the_directions_that_share_the_variance() -> None:
    rng = np.random.default_rng(0)
    independent = rng.standard_normal((4000, 8))
    assert bench.effective_dimensions(independent) == pytest.approx(8.0, rel=0.05)
    one_direction = rng.standard_normal((4000, 1)) @ rng.standard_normal((1, 8))
    one_direction += 1e-3 * rng.standard_normal((4000, 8))
    assert bench.effective_dimensions(one_direction) == pytest.approx(1.0, abs=0.01)
    two = np.hstack(
        [np.repeat(independent[:, :1], 4, axis=1), np.repeat(independent[:, 1:2], 4, axis=1)]
    )
    assert bench.effective_dimensions(two) == pytest.approx(2.0, rel=0.05)


def test_night_share_is_the_between_night_part_of_the_within_stage_variance() -> None:
    stages, _hours, night_ids = nights(2)
    rng = np.random.default_rng(3)
    stage_code = 3.0 * np.eye(5)[stages]
    noise = rng.standard_normal((len(stages), 5))
    assert bench.night_share(stage_code + noise, stages, night_ids) < 0.01
    offset = np.array([-1.0, 0.0, 1.0])[night_ids][:, None]  # variance 2/3 between nights
    share = bench.night_share(stage_code + noise + offset, stages, night_ids)
    assert share == pytest.approx((2 / 3) / (2 / 3 + 1), abs=0.03)
    assert bench.night_share(stage_code + 100 * offset, stages, night_ids) > 0.999
