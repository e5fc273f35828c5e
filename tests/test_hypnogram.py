"""Tests for the realistic hypnogram generator."""

from __future__ import annotations

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.cohort.hypnogram import (
    STAGE_LABELS,
    HypnogramParams,
    SleepStage,
    draw_hypnogram_params,
    hypnogram_from_string,
    hypnogram_to_string,
    make_hypnogram,
    stage_fractions,
)

NIGHT_EPOCHS = 8 * 120
TWO_HOURS = 2 * 120


def _nights(n_epochs: int, n_subjects: int = 60) -> list[np.ndarray]:
    return [make_hypnogram(n_epochs, np.random.default_rng(seed)) for seed in range(n_subjects)]


def _bouts(hypnogram: np.ndarray) -> list[tuple[int, int, int]]:
    """(stage, start, length) of every run of equal stages."""
    edges = np.flatnonzero(np.diff(hypnogram)) + 1
    starts = np.concatenate([[0], edges])
    stops = np.concatenate([edges, [len(hypnogram)]])
    return [(int(hypnogram[a]), int(a), int(b - a)) for a, b in zip(starts, stops, strict=True)]


def test_whole_night_stage_proportions_match_adult_norms() -> None:
    fractions = np.array([list(stage_fractions(h).values()) for h in _nights(NIGHT_EPOCHS)])
    mean = dict(zip(STAGE_LABELS, fractions.mean(axis=0), strict=True))
    assert 0.10 <= mean["W"] <= 0.20
    assert 0.05 <= mean["N1"] <= 0.10
    assert 0.45 <= mean["N2"] / (1.0 - mean["W"]) <= 0.55  # 45-55 % of sleep (Carskadon & Dement)
    assert 0.08 <= mean["N3"] <= 0.23  # 13-23 % in young adults, less by 45 (Ohayon et al. 2004)
    assert 0.18 <= mean["R"] <= 0.25
    assert fractions.std(axis=0).min() > 0.015  # subjects differ as adults do (N1 least)


def test_n3_front_loaded_and_rem_back_loaded() -> None:
    nights = np.stack(_nights(NIGHT_EPOCHS))
    first, last = nights[:, : NIGHT_EPOCHS // 3], nights[:, -NIGHT_EPOCHS // 3 :]
    assert (first == SleepStage.N3).mean() > 3 * (last == SleepStage.N3).mean()
    assert (last == SleepStage.REM).mean() > 1.5 * (first == SleepStage.REM).mean()


def test_cycles_last_about_ninety_minutes() -> None:
    gaps = []
    for night in _nights(NIGHT_EPOCHS, 30):
        rem = np.flatnonzero(night == SleepStage.REM)
        period_onsets = rem[np.concatenate([[True], np.diff(rem) > 60])]  # > 30 min without REM
        gaps += list(np.diff(period_onsets) / 2.0)  # minutes between REM period onsets
    assert 70.0 <= float(np.median(gaps)) <= 110.0


def test_two_hour_records_hold_the_first_part_of_a_night() -> None:
    for night in _nights(TWO_HOURS, 40):
        assert night[0] == SleepStage.WAKE  # sleep latency first
        assert all(np.any(night == stage) for stage in SleepStage)
        first_n3 = np.flatnonzero(night == SleepStage.N3)[0]
        rem = np.flatnonzero(night == SleepStage.REM)
        assert rem.max() > first_n3  # N3 comes before the REM period
    fractions = np.array([list(stage_fractions(h).values()) for h in _nights(TWO_HOURS)])
    mean = dict(zip(STAGE_LABELS, fractions.mean(axis=0), strict=True))
    assert mean["N3"] > 0.18 and 0.08 <= mean["R"] <= 0.2  # early night: more N3, less REM


@pytest.mark.parametrize("n_epochs", [10, 17, 30, 60])
def test_short_records_still_contain_every_stage(n_epochs: int) -> None:
    for seed in range(20):
        night = make_hypnogram(n_epochs, np.random.default_rng(seed))
        assert night.shape == (n_epochs,) and night.dtype == np.int8
        assert set(night.tolist()) == set(SleepStage)


def test_bouts_are_semi_markov_with_brief_awakenings() -> None:
    wake_after_onset, n2_bouts = [], []
    for night in _nights(NIGHT_EPOCHS, 30):
        bouts = _bouts(night)
        onset = next(i for i, (stage, _, _) in enumerate(bouts) if stage != SleepStage.WAKE)
        wake_after_onset += [n for stage, _, n in bouts[onset:] if stage == SleepStage.WAKE]
        n2_bouts += [n for stage, _, n in bouts if stage == SleepStage.N2]
    assert np.median(wake_after_onset) <= 3  # brief awakenings dominate
    assert max(wake_after_onset) >= 4  # but longer ones happen
    assert np.median(n2_bouts) >= 4 and max(n2_bouts) >= 30  # stable N2 bouts of minutes


def test_n1_lasts_several_epochs_inside_sleep_and_follows_awakenings() -> None:
    inside_n2, after_wake = [], []
    for night in _nights(NIGHT_EPOCHS, 30):
        bouts = _bouts(night)
        onset = next(i for i, (stage, _, _) in enumerate(bouts) if stage != SleepStage.WAKE)
        for index in range(onset + 1, len(bouts) - 1):
            before, bout, after = bouts[index - 1 : index + 2]
            if bout[0] == SleepStage.N1 and before[0] == after[0] == SleepStage.N2:
                inside_n2.append(bout[2])
            if bout[0] == SleepStage.WAKE:
                after_wake.append(after[0])
    # N1 after an arousal lasts until spindles or K-complexes return (AASM): 1–8 epochs here.
    assert np.mean(inside_n2) >= 2.0 and max(inside_n2) >= 5
    # Sleep resumes through N1 after most awakenings.
    assert np.mean(np.array(after_wake) == SleepStage.N1) > 0.6


def test_subjects_differ_and_seed_reproduces() -> None:
    a = make_hypnogram(TWO_HOURS, np.random.default_rng(3))
    b = make_hypnogram(TWO_HOURS, np.random.default_rng(3))
    c = make_hypnogram(TWO_HOURS, np.random.default_rng(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    params = draw_hypnogram_params(np.random.default_rng(0))
    assert isinstance(params, HypnogramParams) and 3.0 <= params.sleep_latency <= 40.0


def test_string_round_trip_and_fractions() -> None:
    night = np.array([0, 0, 1, 2, 2, 3, 4, 4, 4, 0], dtype=np.int8)
    text = hypnogram_to_string(night)
    assert text == "WW1223RRRW"
    np.testing.assert_array_equal(hypnogram_from_string(text), night)
    fractions = stage_fractions(night)
    assert fractions == {"W": 0.3, "N1": 0.1, "N2": 0.2, "N3": 0.1, "R": 0.3}


def test_bad_input_is_rejected() -> None:
    with pytest.raises(InputError, match="n_epochs"):
        make_hypnogram(9, np.random.default_rng(0))
    with pytest.raises(InputError, match="text"):
        hypnogram_from_string("W12X")
    with pytest.raises(InputError, match="hypnogram"):
        hypnogram_to_string(np.array([0, 5]))
