"""Evaluation of frozen self-supervised features: linear probe, kNN, and a kNN monitor.

The standard protocols of the SSL literature, applied to any :class:`~partnd.models.ViTEncoder`
(pretrained by any objective, or randomly initialised as the reference a pretraining method must
beat):

* **features** (:func:`extract_features`): the input is tiled on the regular grid (as in
  fine-tuning), encoded in eval mode without gradient, and represented by the [CLS] token
  concatenated with the mean patch token (``[N, 2D]``). An encoder that carries a position
  embedding gets its slot indices; a PART encoder has none.
* **linear probe** (:func:`linear_probe`): multinomial logistic regression (scikit-learn, L-BFGS)
  on standardised features, its L2 strength chosen by stratified cross-validation on the
  *training* set only (the SimCLR/BYOL small-data protocol; MAE and DINO use SGD on ImageNet).
* **kNN** (:func:`knn_eval`): cosine similarity on L2-normalised features, the ``k = 20`` nearest
  training examples vote with weights ``exp(sim / 0.07)`` (DINO's weighted kNN, lightly's kNN
  monitor).
* :class:`KNNMonitor`: the kNN accuracy of a small labelled subset logged after every epoch of
  ``pretrain`` (``monitor=KNNMonitor(train, test)``).
* :class:`PretextMonitor`: the pretext error on held-out data, logged after pretraining epochs
  and used to choose the pretraining budget (``select_metric="heldout_error"``).

Each returns a :class:`~partnd.evaluation.metrics.ClassificationReport` (accuracy, Cohen's kappa,
F1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from partnd._validation import check
from partnd.datasets.adapters import as_labelled_dataset, as_signal_dataset
from partnd.engine.distributed import resolve_device
from partnd.evaluation.metrics import ClassificationReport, classification_metrics
from partnd.models.montage import read_data_channels
from partnd.models.vit import ViTEncoder
from partnd.objectives.diagnostics import pretext_error

__all__ = [
    "KNNMonitor",
    "PretextMonitor",
    "ProbeResult",
    "extract_features",
    "knn_eval",
    "knn_predict",
    "linear_probe",
    "logistic_regression_probe",
]

DataLike = Dataset[Any] | np.ndarray | torch.Tensor


def _encoder_of(model: nn.Module) -> ViTEncoder:
    encoder = model if isinstance(model, ViTEncoder) else getattr(model, "encoder", None)
    check(
        isinstance(encoder, ViTEncoder),
        "encoder",
        "a ViTEncoder (or a module with an .encoder, e.g. a pretraining objective)",
        type(model).__name__,
    )
    assert isinstance(encoder, ViTEncoder)
    return encoder


@torch.no_grad()
def extract_features(
    encoder: nn.Module,
    data: DataLike,
    labels: Sequence[int] | None = None,
    *,
    batch_size: int = 256,
    device: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Frozen features ([CLS] and mean patch token) of a labelled dataset.

    Args:
        encoder: A :class:`ViTEncoder`, or a module holding one as ``.encoder``.
        data: Items ``(x [C, *spatial], label)``, or an array ``[N, C, *spatial]`` with ``labels``.
        labels: Labels when ``data`` is an array.
        batch_size: Encoding batch size.
        device: ``None`` runs where the encoder is; else ``"auto"``, ``"cpu"``, ``"cuda"``... (the
            encoder is moved back afterwards).

    Returns:
        ``features: [N, 2D]`` float32 and ``labels: [N]`` int64.
    """
    vit = _encoder_of(encoder)
    channel_set = vit.channel_mode == "set"
    dataset, spec = as_labelled_dataset(
        data, labels, "data", expected=vit.signal_info if channel_set else None, same_shape=False
    )
    if channel_set:  # a channel-set encoder reads the data's channels
        read_data_channels(vit, dataset.info)
    check(
        spec.in_chans == vit.in_chans and spec.ndim == vit.ndim,
        "data",
        f"items [{vit.in_chans}, *spatial] with {vit.ndim} spatial dimension(s) (the encoder's)",
        f"items of shape {spec.item_shape}",
    )
    first = next(vit.parameters())
    original_device, was_training = first.device, vit.training
    target = original_device if device is None else resolve_device(device)
    vit.to(target).eval()
    features, targets = [], []
    try:
        for x, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
            tokens = vit.forward_grid(x.to(target))
            cls, patch_tokens = tokens[:, 0], tokens[:, vit.num_prefix_tokens :]
            features.append(torch.cat([cls, patch_tokens.mean(dim=1)], dim=1).float().cpu())
            targets.append(y)
    finally:
        vit.to(original_device).train(was_training)
    return torch.cat(features).numpy(), torch.cat(targets).numpy().astype(np.int64)


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of a linear probe.

    Attributes:
        report: Test-set accuracy, Cohen's kappa, F1 and confusion matrix.
        inverse_regularisation: The logistic regression ``C`` chosen by cross-validation.
        predictions: [M] predicted class of every test example (for paired comparisons and
            bootstrap intervals).
    """

    report: ClassificationReport
    inverse_regularisation: float
    predictions: np.ndarray


def _check_classes(labels: np.ndarray, argument: str) -> None:
    """A classifier is fitted on at least two classes (scikit-learn fails deep inside else)."""
    present = np.unique(labels).tolist()
    check(
        len(present) >= 2,
        argument,
        "labelled examples of at least two classes (a probe separates classes)",
        f"{len(labels)} example(s) of class {present[0]} only" if present else "no examples",
    )


def logistic_regression_probe(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    *,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
    inverse_regularisations: Sequence[float] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0),
    cv_folds: int = 3,
    seed: int = 0,
) -> ProbeResult:
    """Multinomial logistic regression on standardised features, C chosen on the training set.

    ``C`` is chosen by stratified ``cv_folds``-fold cross-validation on the training features
    (the largest fold count every class supports, at least 2); with fewer than 2 examples in a
    class ``C = 1``. The test set is used once, for the report.

    Args:
        train_features: [N, F] training features (or raw inputs, flattened).
        train_labels: [N] integer labels.
        test_features: [M, F] test features.
        test_labels: [M] integer labels.
        num_classes: Number of classes K (default: ``max label + 1``).
        class_names: K names for the report.
        inverse_regularisations: Candidate ``C`` values.
        cv_folds: Maximum number of cross-validation folds.
        seed: Seed of the fold split.

    Returns:
        A :class:`ProbeResult`.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train_features = np.asarray(train_features, dtype=np.float64).reshape(len(train_features), -1)
    test_features = np.asarray(test_features, dtype=np.float64).reshape(len(test_features), -1)
    check(
        train_features.shape[1] == test_features.shape[1],
        "test_features",
        f"{train_features.shape[1]} features per example like train_features",
        f"{test_features.shape[1]}",
    )
    train_labels = np.asarray(train_labels, dtype=np.int64)
    test_labels = np.asarray(test_labels, dtype=np.int64)
    _check_classes(train_labels, "train_labels")
    classes = num_classes or int(max(train_labels.max(), test_labels.max())) + 1
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    folds = min(cv_folds, int(np.bincount(train_labels)[np.unique(train_labels)].min()))
    if folds >= 2 and len(inverse_regularisations) > 1:
        search = GridSearchCV(
            pipeline,
            {"logisticregression__C": list(inverse_regularisations)},
            cv=StratifiedKFold(folds, shuffle=True, random_state=seed),
        )
        search.fit(train_features, train_labels)
        chosen = float(search.best_params_["logisticregression__C"])
        model = search.best_estimator_
    else:
        chosen = 1.0
        model = pipeline.set_params(logisticregression__C=chosen).fit(train_features, train_labels)
    predictions = model.predict(test_features)
    report = classification_metrics(test_labels, predictions, classes, class_names)
    return ProbeResult(report=report, inverse_regularisation=chosen, predictions=predictions)


def linear_probe(
    encoder: nn.Module,
    train: DataLike,
    test: DataLike,
    *,
    train_labels: Sequence[int] | None = None,
    test_labels: Sequence[int] | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
    batch_size: int = 256,
    device: str | None = None,
    seed: int = 0,
) -> ProbeResult:
    """Linear-probe accuracy of an encoder's frozen features.

    Args:
        encoder: A :class:`ViTEncoder` (or a module holding one as ``.encoder``).
        train: Labelled training data (items ``(x, label)`` or an array with ``train_labels``).
        test: Labelled test data (or an array with ``test_labels``).
        train_labels: Labels of an array ``train``.
        test_labels: Labels of an array ``test``.
        num_classes: Number of classes K (default: ``max label + 1``).
        class_names: K names for the report.
        batch_size: Feature-extraction batch size.
        device: Where to encode (``None``: where the encoder is).
        seed: Seed of the cross-validation split.

    Returns:
        A :class:`ProbeResult` (see :func:`logistic_regression_probe`).
    """
    train_x, train_y = extract_features(
        encoder, train, train_labels, batch_size=batch_size, device=device
    )
    _check_classes(train_y, "train_labels" if train_labels is not None else "train")
    test_x, test_y = extract_features(
        encoder, test, test_labels, batch_size=batch_size, device=device
    )
    return logistic_regression_probe(
        train_x,
        train_y,
        test_x,
        test_y,
        num_classes=num_classes,
        class_names=class_names,
        seed=seed,
    )


def knn_predict(
    train_features: torch.Tensor | np.ndarray,
    train_labels: torch.Tensor | np.ndarray,
    test_features: torch.Tensor | np.ndarray,
    *,
    num_classes: int,
    k: int = 20,
    temperature: float = 0.07,
    chunk_size: int = 1024,
) -> np.ndarray:
    """Weighted kNN classification on cosine similarity (DINO's protocol).

    Args:
        train_features: [N, F] features of the labelled bank.
        train_labels: [N] labels in ``[0, num_classes)``.
        test_features: [M, F] features to classify.
        num_classes: Number of classes K.
        k: Neighbours (clipped to N).
        temperature: Vote weight ``exp(similarity / temperature)``.
        chunk_size: Test rows per similarity block (bounds memory).

    Returns:
        [M] predicted labels.
    """
    check(k >= 1, "k", "an int >= 1", repr(k))
    check(temperature > 0, "temperature", "a positive number", repr(temperature))
    bank = torch.nn.functional.normalize(torch.as_tensor(train_features).float(), dim=1)
    bank_labels = torch.as_tensor(train_labels).long()
    queries = torch.nn.functional.normalize(torch.as_tensor(test_features).float(), dim=1)
    neighbours = min(k, len(bank))
    predictions = []
    for block in torch.split(queries, chunk_size):
        similarity, index = (block @ bank.T).topk(neighbours, dim=1)
        weights = (similarity / temperature).exp()
        votes = torch.zeros(len(block), num_classes).scatter_add_(1, bank_labels[index], weights)
        predictions.append(votes.argmax(dim=1))
    return torch.cat(predictions).numpy()


def knn_eval(
    encoder: nn.Module,
    train: DataLike,
    test: DataLike,
    *,
    train_labels: Sequence[int] | None = None,
    test_labels: Sequence[int] | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
    k: int = 20,
    temperature: float = 0.07,
    batch_size: int = 256,
    device: str | None = None,
) -> ClassificationReport:
    """kNN accuracy of an encoder's frozen features (see :func:`knn_predict`).

    Args:
        encoder: A :class:`ViTEncoder` (or a module holding one as ``.encoder``).
        train: Labelled bank (items ``(x, label)`` or an array with ``train_labels``).
        test: Labelled test data (or an array with ``test_labels``).
        train_labels: Labels of an array ``train``.
        test_labels: Labels of an array ``test``.
        num_classes: Number of classes K (default: ``max label + 1``).
        class_names: K names for the report.
        k: Neighbours.
        temperature: Vote temperature.
        batch_size: Feature-extraction batch size.
        device: Where to encode (``None``: where the encoder is).

    Returns:
        The test set's :class:`~partnd.evaluation.metrics.ClassificationReport`.
    """
    train_x, train_y = extract_features(
        encoder, train, train_labels, batch_size=batch_size, device=device
    )
    test_x, test_y = extract_features(
        encoder, test, test_labels, batch_size=batch_size, device=device
    )
    classes = num_classes or int(max(train_y.max(), test_y.max())) + 1
    predictions = knn_predict(
        train_x, train_y, test_x, num_classes=classes, k=k, temperature=temperature
    )
    return classification_metrics(test_y, predictions, classes, class_names)


class KNNMonitor:
    """Log the kNN accuracy of frozen features after pretraining epochs.

    Pass it as ``pretrain(..., monitor=KNNMonitor(train, test))``: after every ``every_epochs``
    epochs the current encoder (EMA weights when on) embeds both sets on its training device and
    ``knn_accuracy`` and ``knn_kappa`` are logged as ``phase="val"`` records.

    Args:
        train: Small labelled bank (items ``(x, label)`` or an array with ``train_labels``).
        test: Labelled monitor set (or an array with ``test_labels``).
        train_labels: Labels of an array ``train``.
        test_labels: Labels of an array ``test``.
        k: Neighbours.
        every_epochs: Evaluate every this many epochs.
        batch_size: Feature-extraction batch size.
    """

    def __init__(
        self,
        train: DataLike,
        test: DataLike,
        *,
        train_labels: Sequence[int] | None = None,
        test_labels: Sequence[int] | None = None,
        k: int = 20,
        every_epochs: int = 1,
        batch_size: int = 256,
    ) -> None:
        check(every_epochs >= 1, "every_epochs", "an int >= 1", repr(every_epochs))
        self.train, _ = as_labelled_dataset(train, train_labels, "train", "train_labels")
        self.test, _ = as_labelled_dataset(test, test_labels, "test", "test_labels")
        self.k = k
        self.every_epochs = every_epochs
        self.batch_size = batch_size

    def __call__(self, model: nn.Module, epoch: int) -> dict[str, float]:
        """Args: model: the objective (or encoder); epoch: 0-based. Returns: the logged values."""
        if (epoch + 1) % self.every_epochs:
            return {}
        report = knn_eval(model, self.train, self.test, k=self.k, batch_size=self.batch_size)
        return {"knn_accuracy": report.accuracy, "knn_kappa": report.cohen_kappa}


class PretextMonitor:
    """The pretext error of a pretraining objective on held-out data, after pretraining epochs.

    Pass it as ``pretrain(..., monitor=PretextMonitor(held_out), select_metric="heldout_error")``
    to choose the pretraining budget on held-out nights. At every evaluation (after the epochs
    that ``eval_every_steps`` lets through) the objective (EMA weights when on) runs in eval mode
    without gradient on the same held-out items with the same sampling generator, so it draws the
    same patches, windows, pairs and masks every time and successive values differ only by the
    weights. Logged as ``phase="val"``: the objective's loss and diagnostics averaged over the
    items, prefixed ``heldout_``, and ``heldout_error``, its error over the content-free floor
    (:func:`~partnd.objectives.diagnostics.pretext_error`; 1.0: nothing learned from content).

    Args:
        data: Held-out items in the form the objective trains on: segments ``[C, S*T]`` for PART
            across windows (e.g. a :class:`~partnd.datasets.segments.SleepSegmentDataset` of
            held-out nights), single items ``[C, *spatial]`` otherwise; a dataset (items or
            tuples starting with one) or an array ``[N, C, *spatial]``.
        max_items: Evaluate a fixed seeded subset of at most this many items; ``None``: all.
        batch_size: Items per forward pass.
        seed: Seed of the subset and of the sampling generator.
    """

    def __init__(
        self,
        data: DataLike,
        *,
        max_items: int | None = 256,
        batch_size: int = 16,
        seed: int = 0,
    ) -> None:
        check(batch_size >= 1, "batch_size", "an int >= 1", repr(batch_size))
        check(max_items is None or max_items >= 1, "max_items", "None or an int >= 1", max_items)
        self.data, _ = as_signal_dataset(data, "data", same_shape=False)
        count = len(self.data)
        rng = np.random.default_rng(seed)
        chosen = np.arange(count) if max_items is None or max_items >= count else None
        if chosen is None:
            assert max_items is not None
            chosen = np.sort(rng.choice(count, size=max_items, replace=False))
        self.indices: list[int] = chosen.tolist()
        self.batch_size = batch_size
        self.seed = seed

    @torch.no_grad()
    def __call__(self, model: nn.Module, epoch: int) -> dict[str, float]:
        """Args: model: the objective; epoch: 0-based (unused). Returns: the logged values."""
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        generator = torch.Generator(device=device).manual_seed(self.seed)
        sums: dict[str, float] = {}
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                for start in range(0, len(self.indices), self.batch_size):
                    chunk = self.indices[start : start + self.batch_size]
                    batch = torch.stack(self.data.__getitems__(chunk)).to(device)
                    output = model(batch, generator=generator)
                    values = {"loss": output.loss, **output.metrics}
                    for name, value in values.items():
                        sums[name] = sums.get(name, 0.0) + float(value) * len(chunk)
        finally:
            model.train(was_training)
        means = {name: total / len(self.indices) for name, total in sums.items()}
        error = pretext_error(means)
        return {
            **{f"heldout_{name}": value for name, value in means.items()},
            **({} if error is None else {"heldout_error": error}),
        }
