"""Tests of the subject-level bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from partnd._validation import InputError
from partnd.evaluation.bootstrap import bootstrap_metric, kappa_metric, paired_bootstrap_difference


def predictions(n_subjects: int, accuracy: float, seed: int) -> tuple[np.ndarray, ...]:
    """30 windows per subject, 5 classes, predictions correct with a per-subject accuracy."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"s{i}" for i in range(n_subjects)], 30)
    truth = rng.integers(0, 5, len(groups))
    per_subject = np.clip(rng.normal(accuracy, 0.1, n_subjects), 0, 1).repeat(30)
    correct = rng.random(len(groups)) < per_subject
    pred = np.where(correct, truth, rng.integers(0, 5, len(groups)))
    return truth, pred, groups


def test_estimate_is_kappa_and_lies_in_its_interval() -> None:
    truth, pred, groups = predictions(20, 0.7, seed=0)
    result = bootstrap_metric(truth, pred, groups, kappa_metric(5), n_boot=300)
    assert result.estimate == pytest.approx(cohen_kappa_score(truth, pred))
    assert result.low < result.estimate < result.high
    assert len(result.replicates) == 300


def test_interval_shrinks_with_more_subjects() -> None:
    widths = []
    for n_subjects in (8, 32, 128):
        truth, pred, groups = predictions(n_subjects, 0.7, seed=n_subjects)
        result = bootstrap_metric(truth, pred, groups, kappa_metric(5), n_boot=300)
        widths.append(result.high - result.low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] > 1.7 * widths[2]  # ~ 1 / sqrt(subjects): 4x fewer subjects, ~2x wider


def test_paired_difference_sees_a_consistent_gain_the_separate_intervals_hide() -> None:
    truth, good, groups = predictions(12, 0.75, seed=1)
    rng = np.random.default_rng(2)
    worse = np.where(rng.random(len(truth)) < 0.05, (good + 1) % 5, good)  # 5% more errors
    separate = [
        bootstrap_metric(truth, p, groups, kappa_metric(5), n_boot=300) for p in (good, worse)
    ]
    assert separate[1].high > separate[0].low  # the separate intervals overlap
    paired = paired_bootstrap_difference(truth, worse, good, groups, kappa_metric(5), n_boot=300)
    assert paired.estimate < 0 and paired.high < 0  # yet the paired difference excludes 0


def test_validation() -> None:
    truth, pred, groups = predictions(4, 0.7, seed=3)
    with pytest.raises(InputError, match="groups"):
        bootstrap_metric(truth, pred, groups[:-1], kappa_metric(5))
    with pytest.raises(InputError, match="groups"):
        bootstrap_metric(truth, pred, np.full(len(truth), "s0"), kappa_metric(5))
    with pytest.raises(InputError, match="y_pred"):
        bootstrap_metric(truth, pred[:-1], groups, kappa_metric(5))
