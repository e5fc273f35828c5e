"""What every self-supervised objective shares: its output and the module contract.

An objective is an ``nn.Module`` that owns an encoder (a :class:`~partnd.models.ViTEncoder`)
and whatever it trains alongside it (a relative head, a decoder, a classifier), and maps a batch
``x: [B, C, *spatial]`` to an :class:`ObjectiveOutput`: the scalar loss and detached scalar
diagnostics. Diagnostics stay on the device; the engine averages them over its logging interval
and moves them to the host only when it writes a record, so an objective never forces a host
synchronisation per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from partnd.models.vit import ViTEncoder

__all__ = ["Objective", "ObjectiveOutput"]


@dataclass(frozen=True)
class ObjectiveOutput:
    """Result of one objective forward pass.

    Attributes:
        loss: Scalar float32 training loss.
        metrics: Detached scalar tensors (pretext diagnostics, each next to its content-free floor,
            e.g. ``nmse``, ``r2_t``, ``accuracy`` and ``accuracy_chance``).
    """

    loss: Tensor
    metrics: dict[str, Tensor]


class Objective(nn.Module):
    """Base class of the pretraining objectives (PART, PART-grid, MAE, MP3, DropPos).

    Subclasses keep their backbone in ``self.encoder`` and implement :meth:`forward`.
    ``pretrain`` returns ``objective.encoder``; fine-tuning drops the rest. An objective whose
    behaviour changes over the run (DropPos's smoothing) defines
    ``set_training_progress(fraction)``: the engine calls it before every step with
    ``step / total_steps`` in ``[0, 1)``, so it is a function of the step and resumes exactly.
    """

    encoder: ViTEncoder

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> ObjectiveOutput:
        """Compute the loss of a batch.

        Args:
            x: [B, C, *spatial] inputs (already validated by the caller).
            generator: Source of every random draw of the step (boxes, masks, pairs).

        Returns:
            The loss and diagnostics.
        """
        raise NotImplementedError
