"""The training loss of a classifier fine-tuned on single windows; the sequence task extends it.

:class:`ClassificationTask` holds what every classification task of ``finetune`` reads (classes,
class weights, label smoothing, batch augmentation) and computes the cross-entropy of a window
classifier; :class:`~partnd.finetuning.sequence.SequenceClassificationTask` keeps its settings and
scores every labelled window of a sequence instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from partnd.engine.augment import Augmentation
from partnd.objectives.diagnostics import classification_diagnostics

__all__ = ["ClassificationTask"]


class ClassificationTask:
    """Cross-entropy on the classifier's logits (optional class weights, label smoothing and
    batch augmentation).

    Labels are checked against ``[0, num_classes)`` before training
    (:func:`~partnd.finetuning.training.finetune`), not here: the step stays free of host
    synchronisations.

    Args:
        num_classes: Number of classes K.
        class_weights: ``[K]`` weights or ``None``.
        label_smoothing: Label smoothing in ``[0, 1)``.
        augment: Batch augmentation (see :mod:`partnd.engine.augment`) or ``None``.
    """

    def __init__(
        self,
        num_classes: int,
        class_weights: torch.Tensor | None,
        label_smoothing: float,
        augment: Augmentation | None = None,
    ) -> None:
        self.num_classes = num_classes
        self.class_weights = class_weights
        self.label_smoothing = label_smoothing
        self.augment = augment

    def loss_weight(self, device: torch.device) -> torch.Tensor | None:
        """The class weights on ``device`` (``None`` without them)."""
        return None if self.class_weights is None else self.class_weights.to(device)

    def compute_loss(
        self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Args: batch: (x [B, C, *spatial], labels [B]). Returns: cross-entropy, train accuracy."""
        x, labels = batch
        if self.augment is not None:
            x = self.augment(x, generator)
        logits = model(x)
        loss = F.cross_entropy(
            logits.float(),
            labels,
            weight=self.loss_weight(logits.device),
            label_smoothing=self.label_smoothing,
        )
        return loss, classification_diagnostics(logits, labels, self.num_classes)
