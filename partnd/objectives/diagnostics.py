"""Pretext diagnostics, each next to the floor of a predictor that ignores the content.

A falling loss proves nothing by itself: it also falls when the answer leaks into the input
(position embeddings, padding, overlap with the target). Every objective therefore reports its
error *relative to a content-free predictor* computed on the same batch:

* regression (PART): the best constant predictor (the batch mean of each target dimension) has
  mean squared error ``Var(target)``; ``nmse = MSE / Var`` (1.0 = no better than ignoring the
  input) and ``r2_<dim> = 1 - MSE_dim / Var_dim``; the Euclidean error of the translation next to
  that of the constant predictor (the x / y / Euclidean errors of the paper's heads table);
* classification (MP3, DropPos): accuracy next to chance ``1 / num_classes``;
* reconstruction (MAE): the error of predicting each normalised patch's mean (zero), i.e. the
  mean square of the normalised targets, and their ratio.

All functions run without gradient and return detached scalar tensors on the input's device.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = [
    "classification_diagnostics",
    "pretext_error",
    "reconstruction_diagnostics",
    "regression_diagnostics",
    "target_names",
]

_AXIS_NAMES = {1: ("t",), 2: ("y", "x"), 3: ("z", "y", "x")}


def pretext_error(metrics: Mapping[str, float]) -> float | None:
    """An objective's error over its content-free floor, from its logged diagnostics (1.0: no
    better than ignoring the content).

    ``nmse`` for PART (and PART across windows), ``recon_nmse`` for MAE, and
    ``(1 - accuracy) / (1 - accuracy_chance)`` for the position classifiers (MP3, DropPos).

    Args:
        metrics: One logged record (or averaged diagnostics) of an objective.

    Returns:
        The ratio, or ``None`` when the record has none of these diagnostics.
    """
    if "nmse" in metrics:
        return float(metrics["nmse"])
    if "recon_nmse" in metrics:
        return float(metrics["recon_nmse"])
    if "accuracy" in metrics and "accuracy_chance" in metrics:
        return (1.0 - float(metrics["accuracy"])) / (1.0 - float(metrics["accuracy_chance"]))
    return None


def target_names(ndim: int, scale: bool = False) -> list[str]:
    """Names of PART's target channels: translations, then (with ``scale``) extent ratios.

    ``["t"]`` for 1D signals, ``["y", "x"]`` for images (input axis order), ``["z", "y", "x"]``
    for volumes, ``d0, d1, ...`` beyond; scale channels are prefixed ``s`` (``sy``, ``sx``).
    """
    axes = list(_AXIS_NAMES.get(ndim, tuple(f"d{d}" for d in range(ndim))))
    return axes + ([f"s{axis}" for axis in axes] if scale else [])


@torch.no_grad()
def regression_diagnostics(
    pred: Tensor,
    target: Tensor,
    names: list[str],
    translation_dims: int,
    baseline: Tensor | None = None,
) -> dict[str, Tensor]:
    """Errors of a relative-target regression next to the best content-free predictor.

    Args:
        pred: [B, K, T] predictions.
        target: [B, K, T] targets.
        names: T channel names (see :func:`target_names`).
        translation_dims: How many leading channels are translations (``ndim``).
        baseline: [B, K, T] predictions of the content-free predictor when it knows more than
            nothing (e.g. the visible slots of anchored PART); ``None``: the best constant, the
            batch mean of each channel.

    Returns:
        ``nmse`` (sum of MSEs over sum of floor MSEs), and per channel ``mse_<name>``,
        ``mse_floor_<name>`` (the floor: the target variance for the constant predictor) and
        ``r2_<name>``; ``euclid`` and ``euclid_floor``: mean Euclidean error of the translation
        and of the content-free predictor.
    """
    pred = pred.detach().float().flatten(0, -2)
    target = target.detach().float().flatten(0, -2)
    error = pred - target
    mse = error.square().mean(dim=0)
    if baseline is None:
        centred = target - target.mean(dim=0)
    else:
        centred = target - baseline.detach().float().flatten(0, -2)
    variance = centred.square().mean(dim=0)
    metrics = {"nmse": mse.sum() / variance.sum().clamp_min(1e-12)}
    for index, name in enumerate(names):
        metrics[f"mse_{name}"] = mse[index]
        metrics[f"mse_floor_{name}"] = variance[index]
        metrics[f"r2_{name}"] = 1.0 - mse[index] / variance[index].clamp_min(1e-12)
    metrics["euclid"] = error[:, :translation_dims].norm(dim=-1).mean()
    metrics["euclid_floor"] = centred[:, :translation_dims].norm(dim=-1).mean()
    return metrics


@torch.no_grad()
def classification_diagnostics(
    logits: Tensor, labels: Tensor, num_classes: int
) -> dict[str, Tensor]:
    """Accuracy of a pretext classifier next to chance.

    Args:
        logits: [M, num_classes] scores.
        labels: [M] integer labels (hard) or [M, num_classes] soft labels (argmax is the label).
        num_classes: Number of classes (chance is ``1 / num_classes``).

    Returns:
        ``accuracy`` and ``accuracy_chance``.
    """
    hard = labels.argmax(dim=-1) if labels.dim() == logits.dim() else labels
    accuracy = (logits.detach().argmax(dim=-1) == hard).float().mean()
    return {"accuracy": accuracy, "accuracy_chance": accuracy.new_tensor(1.0 / num_classes)}


@torch.no_grad()
def reconstruction_diagnostics(pred: Tensor, target: Tensor) -> dict[str, Tensor]:
    """Reconstruction error next to predicting zero (each normalised patch's own mean).

    Args:
        pred: [M, F] reconstructed (normalised) patch values of the masked patches.
        target: [M, F] their normalised targets.

    Returns:
        ``recon_mse``, ``recon_mse_floor`` and ``recon_nmse`` (their ratio).
    """
    mse = (pred.detach().float() - target.float()).square().mean()
    floor = target.float().square().mean()
    return {"recon_mse": mse, "recon_mse_floor": floor, "recon_nmse": mse / floor.clamp_min(1e-12)}
