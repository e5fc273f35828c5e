"""Classification metrics for sleep staging and image benchmarks: accuracy, Cohen's kappa, F1.

Implemented with numpy (no scikit-learn dependency). Conventions:

- ``confusion_matrix[i, j]`` counts examples of true class ``i`` predicted as class ``j``.
- Per-class F1 is ``2·TP / (2·TP + FP + FN)``. A class absent from both ``y_true`` and ``y_pred``
  has an undefined F1; it is reported as 0.0 in ``per_class_f1`` but **excluded** from the macro-F1,
  which averages over the classes that occur in either array (scikit-learn's behaviour when no
  ``labels`` are given).
- Cohen's kappa is ``(p_o - p_e) / (1 - p_e)`` with observed agreement ``p_o`` (accuracy) and
  chance agreement ``p_e = sum_k (rows_k · cols_k) / n²``. When ``p_e = 1`` (both raters used one
  single, identical class) kappa is undefined; we report 0.0 (no agreement beyond chance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from partnd._validation import check, check_in_range

__all__ = ["ClassificationReport", "classification_metrics", "cohen_kappa", "confusion_matrix"]


@dataclass(frozen=True)
class ClassificationReport:
    """Metrics of one set of predictions.

    Attributes:
        accuracy: Fraction of correct predictions.
        cohen_kappa: Cohen's kappa (see the module docstring for the degenerate case).
        macro_f1: Mean F1 over the classes present in ``y_true`` or ``y_pred``.
        per_class_f1: Class name -> F1 (0.0 for classes absent from both arrays).
        confusion_matrix: [K, K] int counts, rows = true class, columns = predicted class.
        n: Number of examples.
        loss: Mean cross-entropy of the logits, when the report came from a model
            (:func:`partnd.evaluate`); ``None`` otherwise.
    """

    accuracy: float
    cohen_kappa: float
    macro_f1: float
    per_class_f1: dict[str, float]
    confusion_matrix: np.ndarray
    n: int
    loss: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (the confusion matrix as nested lists of ints)."""
        return {
            "accuracy": self.accuracy,
            "cohen_kappa": self.cohen_kappa,
            "macro_f1": self.macro_f1,
            "per_class_f1": dict(self.per_class_f1),
            "confusion_matrix": self.confusion_matrix.astype(int).tolist(),
            "n": self.n,
            **({} if self.loss is None else {"loss": self.loss}),
        }


def _as_labels(values: Any, argument: str, num_classes: int) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    check(
        array.ndim == 1 and (array.size == 0 or np.issubdtype(array.dtype, np.integer)),
        argument,
        "a 1D sequence of integer class labels",
        f"an array of shape {array.shape} and dtype {array.dtype}",
    )
    if array.size:
        check_in_range(int(array.min()), int(array.max()), num_classes, argument, "labels")
    return array.astype(np.int64)


def confusion_matrix(y_true: Any, y_pred: Any, num_classes: int) -> np.ndarray:
    """Count (true, predicted) label pairs.

    Args:
        y_true: [n] integer labels in [0, num_classes) (numpy, list or torch).
        y_pred: [n] integer predictions in [0, num_classes).
        num_classes: Number of classes K.

    Returns:
        [K, K] int64 counts, rows = true class, columns = predicted class.
    """
    check(
        isinstance(num_classes, int) and num_classes >= 1,
        "num_classes",
        "a positive int",
        repr(num_classes),
    )
    true = _as_labels(y_true, "y_true", num_classes)
    pred = _as_labels(y_pred, "y_pred", num_classes)
    check(
        true.shape == pred.shape,
        "y_pred",
        f"{true.size} predictions (one per entry of y_true)",
        f"{pred.size} predictions",
    )
    counts = np.bincount(true * num_classes + pred, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes)


def cohen_kappa(confusion: np.ndarray) -> float:
    """Cohen's kappa of a [K, K] confusion matrix.

    Equals scikit-learn's ``cohen_kappa_score`` (also when a class is very rare); 0.0 where
    scikit-learn returns NaN, i.e. when chance agreement is exactly 1 (a single class in both the
    labels and the predictions).

    Args:
        confusion: [K, K] counts with at least one example.

    Returns:
        ``(p_o - p_e) / (1 - p_e)``.
    """
    counts = np.asarray(confusion, dtype=np.float64)
    total = counts.sum()
    check(total > 0, "confusion", "a confusion matrix with at least one example", "an empty one")
    observed = np.trace(counts) / total
    expected = float(counts.sum(axis=1) @ counts.sum(axis=0)) / total**2
    if expected >= 1.0:  # one single class in both labels and predictions: kappa is undefined
        return 0.0
    return float((observed - expected) / (1.0 - expected))


def classification_metrics(
    y_true: Any,
    y_pred: Any,
    num_classes: int,
    class_names: Sequence[str] | None = None,
) -> ClassificationReport:
    """Accuracy, Cohen's kappa, macro and per-class F1 and the confusion matrix.

    Args:
        y_true: [n] integer labels in [0, num_classes) (numpy, list or torch), n >= 1.
        y_pred: [n] integer predictions.
        num_classes: Number of classes K.
        class_names: K names for ``per_class_f1`` (default ``"0"`` ... ``"K-1"``).

    Returns:
        A :class:`ClassificationReport`.
    """
    confusion = confusion_matrix(y_true, y_pred, num_classes)
    total = int(confusion.sum())
    check(total > 0, "y_true", "at least one label", "an empty sequence")
    names = [str(k) for k in range(num_classes)] if class_names is None else list(class_names)
    check(
        len(names) == num_classes and len(set(names)) == num_classes,
        "class_names",
        f"{num_classes} distinct names",
        repr(class_names),
    )
    true_positive = np.diag(confusion).astype(np.float64)
    denominator = confusion.sum(axis=0) + confusion.sum(axis=1)  # 2·TP + FP + FN
    present = denominator > 0
    f1 = np.divide(2.0 * true_positive, denominator, out=np.zeros(num_classes), where=present)
    return ClassificationReport(
        accuracy=float(true_positive.sum() / total),
        cohen_kappa=cohen_kappa(confusion),
        macro_f1=float(f1[present].mean()),
        per_class_f1={name: float(value) for name, value in zip(names, f1, strict=True)},
        confusion_matrix=confusion,
        n=total,
    )
