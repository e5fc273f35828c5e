"""Uncertainty for the sleep-staging tables: bootstrap over subjects and paired differences.

Test windows of one subject are not independent, so confidence intervals resample **subjects**
(the cluster bootstrap): each replicate draws as many subjects as the test set has, with
replacement, pools their windows and recomputes the metric. A paired difference between two
methods uses the same replicate draws for both, so the interval reflects how much the methods
differ on the same subjects rather than how hard the subjects are.

Percentile intervals (2.5th and 97.5th percentiles of the replicates) by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from partnd._validation import check
from partnd.evaluation.metrics import cohen_kappa, confusion_matrix

__all__ = ["BootstrapResult", "bootstrap_metric", "kappa_metric", "paired_bootstrap_difference"]

Metric = Callable[[np.ndarray, np.ndarray], float]


def kappa_metric(num_classes: int) -> Metric:
    """Cohen's kappa of ``(y_true, y_pred)`` over ``num_classes`` classes."""

    def kappa(y_true: np.ndarray, y_pred: np.ndarray) -> float:
        return cohen_kappa(confusion_matrix(y_true, y_pred, num_classes))

    return kappa


@dataclass(frozen=True)
class BootstrapResult:
    """A point estimate with its bootstrap interval.

    Attributes:
        estimate: The metric on the whole test set.
        low: Lower bound of the interval.
        high: Upper bound of the interval.
        replicates: The ``n_boot`` replicate values.
    """

    estimate: float
    low: float
    high: float
    replicates: np.ndarray


def _groups(groups: Sequence[str] | np.ndarray, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    labels = np.asarray(groups)
    check(labels.shape == (n,), "groups", f"one subject per window ({n})", f"{labels.shape}")
    unique, inverse = np.unique(labels, return_inverse=True)
    check(len(unique) >= 2, "groups", "at least 2 subjects to resample", f"{len(unique)}")
    members = [np.flatnonzero(inverse == g) for g in range(len(unique))]
    return unique, members


def _replicate_indices(
    members: list[np.ndarray], n_boot: int, rng: np.random.Generator
) -> list[np.ndarray]:
    draws = rng.integers(0, len(members), size=(n_boot, len(members)))
    return [np.concatenate([members[g] for g in draw]) for draw in draws]


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def _cluster_bootstrap(
    statistic: Callable[[np.ndarray], float],
    everything: np.ndarray,
    groups: Sequence[str] | np.ndarray,
    *,
    n_boot: int,
    confidence: float,
    seed: int,
) -> BootstrapResult:
    """``statistic`` on all windows and on ``n_boot`` subject-resampled index sets, with its
    percentile interval (``everything``: [n] the indices of all windows)."""
    check(n_boot >= 10, "n_boot", "an int >= 10", repr(n_boot))
    check(0.0 < confidence < 1.0, "confidence", "a number in (0, 1)", repr(confidence))
    _, members = _groups(groups, len(everything))
    rng = np.random.default_rng(seed)
    replicates = np.array([statistic(idx) for idx in _replicate_indices(members, n_boot, rng)])
    low, high = _interval(replicates, confidence)
    return BootstrapResult(statistic(everything), low, high, replicates)


def bootstrap_metric(
    y_true: Sequence[int] | np.ndarray,
    y_pred: Sequence[int] | np.ndarray,
    groups: Sequence[str] | np.ndarray,
    metric: Metric,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapResult:
    """Cluster-bootstrap interval of a metric, resampling subjects.

    Args:
        y_true: [n] labels.
        y_pred: [n] predictions.
        groups: [n] subject of every window.
        metric: ``metric(y_true, y_pred) -> float`` (e.g. :func:`kappa_metric`).
        n_boot: Number of replicates.
        confidence: Interval coverage.
        seed: Seed of the replicate draws.

    Returns:
        A :class:`BootstrapResult` (the estimate lies inside the interval unless the metric is
        very skewed).
    """
    truth, prediction = np.asarray(y_true), np.asarray(y_pred)
    check(truth.shape == prediction.shape, "y_pred", f"shape {truth.shape}", prediction.shape)
    return _cluster_bootstrap(
        lambda idx: metric(truth[idx], prediction[idx]),
        np.arange(len(truth)),
        groups,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )


def paired_bootstrap_difference(
    y_true: Sequence[int] | np.ndarray,
    y_pred: Sequence[int] | np.ndarray,
    y_pred_reference: Sequence[int] | np.ndarray,
    groups: Sequence[str] | np.ndarray,
    metric: Metric,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapResult:
    """Interval of ``metric(method) - metric(reference)`` on the same resampled subjects.

    Args:
        y_true: [n] labels.
        y_pred: [n] predictions of the method.
        y_pred_reference: [n] predictions of the reference method (e.g. PART).
        groups: [n] subject of every window.
        metric: The metric.
        n_boot: Number of replicates.
        confidence: Interval coverage.
        seed: Seed of the replicate draws (use the same for every method of a table).

    Returns:
        A :class:`BootstrapResult` of the difference; an interval excluding 0 means the methods
        differ on these subjects.
    """
    truth = np.asarray(y_true)
    method, reference = np.asarray(y_pred), np.asarray(y_pred_reference)
    check(method.shape == truth.shape, "y_pred", f"shape {truth.shape}", method.shape)
    check(
        reference.shape == truth.shape, "y_pred_reference", f"shape {truth.shape}", reference.shape
    )
    return _cluster_bootstrap(
        lambda idx: metric(truth[idx], method[idx]) - metric(truth[idx], reference[idx]),
        np.arange(len(truth)),
        groups,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
