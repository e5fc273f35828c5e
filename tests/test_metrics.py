"""Tests for classification metrics against hand-computed values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.evaluation.metrics import classification_metrics, cohen_kappa, confusion_matrix

Y_TRUE = [0, 0, 0, 1, 1, 2, 2, 2, 2, 0]
Y_PRED = [0, 1, 0, 1, 2, 2, 2, 0, 2, 0]


def test_hand_computed_example() -> None:
    report = classification_metrics(Y_TRUE, Y_PRED, 4, class_names=["W", "N1", "N2", "R"])
    expected_confusion = np.array([[3, 1, 0, 0], [0, 1, 1, 0], [1, 0, 3, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(report.confusion_matrix, expected_confusion)
    assert report.n == 10
    assert report.accuracy == pytest.approx(0.7)
    # p_o = 0.7, p_e = (4*4 + 2*2 + 4*4) / 100 = 0.36, kappa = 0.34 / 0.64
    assert report.cohen_kappa == pytest.approx(0.53125)
    # F1 = 2TP / (2TP + FP + FN): W 6/8, N1 2/4, N2 6/8; R absent: 0 and excluded from macro
    assert report.per_class_f1 == pytest.approx({"W": 0.75, "N1": 0.5, "N2": 0.75, "R": 0.0})
    assert report.macro_f1 == pytest.approx(2.0 / 3.0)


def test_textbook_kappa() -> None:
    # Two raters, 50 items: yes/yes 20, yes/no 5, no/yes 10, no/no 15 -> p_o 0.7, p_e 0.5.
    assert cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.4)


def test_perfect_and_degenerate_predictions() -> None:
    labels = np.array([0, 1, 2, 3, 4, 1, 2])
    perfect = classification_metrics(labels, labels, 5)
    assert perfect.cohen_kappa == pytest.approx(1.0)
    assert perfect.accuracy == 1.0 and perfect.macro_f1 == 1.0
    one_class = classification_metrics([2, 2, 2], [2, 2, 2], 3)
    assert one_class.cohen_kappa == 0.0  # chance agreement is 1: kappa undefined, reported as 0
    assert one_class.macro_f1 == 1.0 and one_class.per_class_f1 == {"0": 0.0, "1": 0.0, "2": 1.0}
    constant = classification_metrics([0, 1, 1, 0], [1, 1, 1, 1], 2)
    assert constant.cohen_kappa == pytest.approx(0.0)  # p_o = p_e = 0.5
    opposite = classification_metrics([0, 1, 0, 1], [1, 0, 1, 0], 2)
    assert opposite.cohen_kappa == pytest.approx(-1.0)


def test_confusion_matrix_sums_and_inputs() -> None:
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.integers(0, 5, 200), rng.integers(0, 5, 200)
    matrix = confusion_matrix(y_true, y_pred, 5)
    assert matrix.sum() == 200
    np.testing.assert_array_equal(matrix.sum(axis=1), np.bincount(y_true, minlength=5))
    np.testing.assert_array_equal(matrix.sum(axis=0), np.bincount(y_pred, minlength=5))
    from_torch = classification_metrics(torch.tensor(y_true), torch.tensor(y_pred), 5)
    from_numpy = classification_metrics(y_true, y_pred, 5)
    assert from_torch.to_dict() == from_numpy.to_dict()
    assert from_numpy.accuracy == pytest.approx(float(np.mean(y_true == y_pred)))


def test_to_dict_is_json_serialisable() -> None:
    report = classification_metrics(Y_TRUE, Y_PRED, 3)
    decoded = json.loads(json.dumps(report.to_dict()))
    assert decoded["confusion_matrix"] == [[3, 1, 0], [0, 1, 1], [1, 0, 3]]
    assert decoded["n"] == 10 and decoded["per_class_f1"]["1"] == pytest.approx(0.5)


def test_validation() -> None:
    with pytest.raises(InputError, match="y_pred"):
        classification_metrics([0, 1], [0], 2)
    with pytest.raises(InputError, match=r"y_true.*\[0, 2\)"):
        classification_metrics([0, 2], [0, 1], 2)
    with pytest.raises(InputError, match="y_pred"):
        classification_metrics([0, 1], [0.0, 1.0], 2)
    with pytest.raises(InputError, match="y_true"):
        classification_metrics([], [], 2)
    with pytest.raises(InputError, match="class_names"):
        classification_metrics([0, 1], [0, 1], 2, class_names=["a"])
    with pytest.raises(InputError, match="num_classes"):
        confusion_matrix([0], [0], 0)
