"""Scoring: frozen-feature probes, metrics, bootstrap intervals, the classical reference, and the
paper's capability figures.

- :mod:`partnd.evaluation.probes`: linear probe, kNN, feature extraction, pretraining monitors.
- :mod:`partnd.evaluation.metrics`: confusion matrix, Cohen's kappa, per-class F1.
- :mod:`partnd.evaluation.bootstrap`: subject-clustered bootstrap intervals and paired differences.
- :mod:`partnd.evaluation.classical`: YASA's features with LightGBM (the sleep field's reference).
- :mod:`partnd.evaluation.capabilities`: off-grid reconstruction, uncertainty, negative symmetry.
"""

__all__: list[str] = []
