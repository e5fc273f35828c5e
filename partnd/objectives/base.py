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
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.registry import create_encoder
from partnd.models.vit import ViTEncoder, check_tiles
from partnd.patches.sampling import GridSampler, PatchBatch

if TYPE_CHECKING:
    from partnd.engine.config import PretrainConfig
    from partnd.signal_info import SignalSpec

__all__ = [
    "GridObjective",
    "Objective",
    "ObjectiveOutput",
    "add_slot_embedding",
    "build_encoder",
    "draws_first",
    "patch_shape",
]


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

    Subclasses keep their backbone in ``self.encoder`` and implement :meth:`draw` and
    :meth:`forward_with_draws` (an objective that draws inside its forward overrides
    :meth:`forward` instead). ``pretrain`` returns ``objective.encoder``; fine-tuning drops the
    rest. An objective whose behaviour changes over the run (DropPos's smoothing) defines
    ``set_training_progress(fraction)``: the engine calls it before every step with
    ``step / total_steps`` in ``[0, 1)``, so it is a function of the step and resumes exactly.

    **Draws before the forward.** Every random quantity of a step (boxes, pairs, masks) comes from
    :meth:`draw`, a small frozen dataclass of tensors drawn from the step's generator; the forward
    given those draws is a pure function of the batch, the draws and the parameters, so
    ``torch.compile`` traces it as one graph (a generator cannot be traced: every draw inside the
    forward would break it). The engine draws eagerly, then calls the (compiled) forward;
    ``forward(x, generator)`` draws itself and gives the same result.
    """

    encoder: ViTEncoder

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> Any:
        """Draw every random quantity of a step on ``x`` (its shape and device are read, not
        its values).

        Args:
            x: [B, C, *spatial] inputs.
            generator: Source of every random draw of the step.

        Returns:
            The objective's draws (a frozen dataclass of tensors on ``x``'s device).
        """
        raise NotImplementedError

    def forward(
        self, x: Tensor, generator: torch.Generator | None = None, *, draws: Any = None
    ) -> ObjectiveOutput:
        """Compute the loss of a batch: draw the step's randomness unless ``draws`` are given,
        then :meth:`forward_with_draws`.

        Args:
            x: [B, C, *spatial] inputs (already validated by the caller).
            generator: Source of every random draw of the step (boxes, masks, pairs), used when
                ``draws`` is ``None``.
            draws: The step's draws from :meth:`draw` (then nothing is drawn here).

        Returns:
            The loss and diagnostics (the subclass's output type).
        """
        if draws is None:
            draws = self.draw(x, generator)
        return self.forward_with_draws(x, draws)

    def forward_with_draws(self, x: Tensor, draws: Any) -> ObjectiveOutput:
        """Compute the loss of a batch given the step's draws: a pure function of ``x``, the
        draws and the parameters (no random draw, so it compiles as one graph).

        Args:
            x: [B, C, *spatial] inputs.
            draws: The step's draws from :meth:`draw`.

        Returns:
            The loss and diagnostics.
        """
        raise NotImplementedError


def draws_first(objective: Objective) -> bool:
    """Whether ``objective`` draws its step's randomness before the forward (it implements
    :meth:`Objective.draw`). Every built-in objective does; one registered from outside
    (:func:`~partnd.objectives.registry.register_objective`) without ``draw`` draws inside its
    forward, so its compiled step breaks at each draw."""
    return type(objective).draw is not Objective.draw


class GridObjective(Objective):
    """An objective on the on-grid tiling of inputs of one fixed shape (MAE, MP3, DropPos).

    Checks that the encoder has no classifier, keeps it as ``self.encoder``, and fixes the grid:
    ``sampler`` (a :class:`~partnd.patches.sampling.GridSampler`), ``spatial_shape`` and
    ``num_positions`` (the number of grid slots N).

    Args:
        encoder: A :class:`ViTEncoder` with ``num_classes == 0``.
        spatial_shape: Spatial shape of every input.
        name: The method's name, for error messages.
    """

    def __init__(self, encoder: ViTEncoder, spatial_shape: tuple[int, ...], name: str) -> None:
        super().__init__()
        check(
            encoder.num_classes == 0,
            "encoder",
            f"an encoder with num_classes=0 ({name} trains no classifier)",
            f"num_classes={encoder.num_classes}",
        )
        self.encoder = encoder
        self.sampler = GridSampler(encoder.ndim, encoder.patch_size)
        self.spatial_shape = tuple(int(length) for length in spatial_shape)
        self.num_positions = self.sampler.num_patches(self.spatial_shape)

    def sample(self, x: Tensor) -> PatchBatch:
        """Tile ``x: [B, C, *spatial]`` on the grid (shape checks only, no gradient)."""
        self.check_input(x)
        with torch.no_grad():
            return self.sampler(x, validate=False)

    def check_input(self, x: Tensor) -> None:
        """Check that ``x`` is ``[B, C, *spatial_shape]`` with the encoder's channels."""
        check(
            x.dim() == 2 + self.encoder.ndim
            and x.shape[1] == self.encoder.in_chans
            and tuple(x.shape[2:]) == self.spatial_shape,
            "x",
            f"a tensor [B, {self.encoder.in_chans}, {', '.join(map(str, self.spatial_shape))}]",
            x,
        )


def patch_shape(config: PretrainConfig, spec: SignalSpec) -> tuple[int, ...]:
    """The configured patch extent per dimension, checked against the data's shape."""
    patch = config.patch_size
    sizes = (patch,) * spec.ndim if isinstance(patch, int) else tuple(patch)
    check(
        len(sizes) == spec.ndim,
        "PretrainConfig.patch_size",
        f"an int or {spec.ndim} ints (the data has {spec.ndim} spatial dimension(s))",
        repr(patch),
    )
    check(
        all(length >= size for length, size in zip(spec.spatial_shape, sizes, strict=True)),
        "dataset",
        f"items whose spatial size is at least the patch size {sizes} in every dimension",
        f"items of shape {spec.item_shape}",
    )
    check_tiles(spec.spatial_shape, sizes, "PretrainConfig.patch_size")
    return sizes


def build_encoder(config: PretrainConfig, spec: SignalSpec) -> ViTEncoder:
    """The configured encoder preset for data of shape ``spec`` (no position embedding)."""
    return create_encoder(
        config.encoder,
        in_chans=spec.in_chans,
        patch_size=patch_shape(config, spec),
        ndim=spec.ndim,
        **config.encoder_overrides,
    )


def add_slot_embedding(
    encoder: ViTEncoder, spatial_shape: tuple[int, ...], pos_mask_ratio: float
) -> None:
    """Give ``encoder`` a slot position embedding over the on-grid tiles of inputs of
    ``spatial_shape`` (``N = prod(L_d // P_d)`` slots), ``pos_mask_ratio`` of them hidden per
    step (a position mask token when above 0)."""
    num_slots = GridSampler(encoder.ndim, encoder.patch_size).num_patches(spatial_shape)
    encoder.add_position_embedding(num_slots, pos_mask_ratio)
