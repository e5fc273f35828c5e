"""PART within and across windows, trained together (``method="part_joint"``).

PART across windows (:mod:`partnd.objectives.part_windows`) trains the window encoder only
through the temporal encoder: a window's embedding must help place it among the segment's other
windows. PART within windows (the paper's EEG pretext, ``method="part"``) trains it on the
relative positions of off-grid patches inside one window. Issue 42 lists the two trained together
as a candidate for a PART that pays at few labels: one step computes both losses on the same
drawn windows, and both reach the window encoder.

One step, for a batch of segments ``x: [B, C, S*T]``:

1. PART across windows draws ``N`` windows per segment, normalises them as fine-tuning windows
   are, and regresses the relative shifts of ``num_pairs`` window pairs (its loss ``L_across``,
   its diagnostics ``nmse``, ``nmse_isolated``, ...);
2. every drawn window ``[B*N, C, T]`` also gets ``num_patches`` off-grid patches of the window
   encoder's tile size, encoded without position embedding (the window encoder's tile
   embedding belongs to the across-windows view, where windows are tiled on the grid; an
   off-grid patch has no slot, and a visible one would give its position away); a second
   relative head (``within_pairs`` pairs, shared by the batch) regresses their relative
   positions from the window encoder's patch tokens (its loss
   ``L_within``, its diagnostics prefixed ``within_``: ``within_nmse`` against its own
   content-free floor, the best constant);
3. the loss is ``L_across + within_weight * L_within``.

The window encoder is shared: the same parameters, a second view of it
(``self.within.encoder``). Selection on held-out nights reads ``nmse`` (the across-windows
error), as for PART across windows. The saved encoders are the same two files
(``encoder.pt``, ``temporal_encoder.pt``), so everything that reads PART across windows' run
directory reads this one's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from partnd._validation import check
from partnd.engine.config import PretrainConfig
from partnd.models.heads import build_head
from partnd.models.sequence import HierarchicalEncoder
from partnd.objectives.part import PARTDraws, PARTModel, PARTOutput
from partnd.objectives.part_windows import CrossWindowPART, part_windows_parts
from partnd.patches.sampling import OffGridSampler
from partnd.signal_info import SignalSpec

__all__ = ["JointDraws", "JointPART", "build_part_joint"]


@dataclass(frozen=True)
class JointDraws:
    """Every random quantity of one joint step, drawn before the forward.

    Attributes:
        across: PART across windows' draws (windows, hidden slots, pairs).
        within: PART within windows' draws on the ``[B*N, C, T]`` drawn windows (patches,
            pairs).
    """

    across: PARTDraws
    within: PARTDraws


class JointPART(CrossWindowPART):
    """PART across windows plus PART within the drawn windows (see the module docstring).

    Args:
        encoder: The hierarchical encoder (its window encoder without position embedding).
        head: The across-windows relative head (``out_dim=1``, the temporal width).
        within_head: The within-window relative head (``out_dim=1``, the window width).
        segment_windows: Windows S per segment.
        num_windows: Windows N drawn per segment.
        num_pairs: Across-windows pairs per segment.
        within_patches: Off-grid patches per drawn window (at least 2).
        within_pairs: Within-window pairs per step (one set for the batch).
        within_weight: Weight of the within-window loss (> 0).
        **options: :class:`CrossWindowPART`'s other options (``shared_pairs``, ``normalize``,
            ``variance_weight``, ``covariance_weight``).
    """

    def __init__(
        self,
        encoder: HierarchicalEncoder,
        head: nn.Module,
        within_head: nn.Module,
        *,
        segment_windows: int,
        num_windows: int,
        num_pairs: int,
        within_patches: int,
        within_pairs: int,
        within_weight: float,
        **options: object,
    ) -> None:
        super().__init__(
            encoder,
            head,
            segment_windows=segment_windows,
            num_windows=num_windows,
            num_pairs=num_pairs,
            **options,  # type: ignore[arg-type]
        )
        check(
            within_weight > 0,
            "PretrainConfig.within_weight",
            "a weight > 0 (part_joint trains PART within windows too)",
            repr(within_weight),
        )
        check(
            within_patches >= 2,
            "PretrainConfig.num_patches",
            "at least 2 patches per window (PART within windows predicts relations of pairs)",
            repr(within_patches),
        )
        window = self.hierarchical.window
        sampler = OffGridSampler(1, window.patch_size, within_patches, integer_boxes=True)
        self.within = PARTModel(
            window, within_head, sampler, num_pairs=within_pairs, position_free=True
        )
        self.within_weight = float(within_weight)

    def draw(  # type: ignore[override]
        self, x: Tensor, generator: torch.Generator | None = None
    ) -> JointDraws:
        """Draw the across-windows step (windows, slots, pairs), then the within-window patches
        and pairs of its ``B * N`` windows, from the same generator in that order.

        Args:
            x: [B, C, S * T] segments (their shape and device are read).
            generator: Random source (same seed, same draws).

        Returns:
            The :class:`JointDraws`.
        """
        across = super().draw(x, generator)
        hierarchical = self.hierarchical
        shape = (x.shape[0] * self.num_windows, hierarchical.in_chans, hierarchical.window_samples)
        windows = x.new_zeros(()).expand(shape)  # shape and device only: nothing is allocated
        return JointDraws(across, self.within.draw(windows, generator))

    def forward_with_draws(self, x: Tensor, draws: JointDraws) -> PARTOutput:  # type: ignore[override]
        """One joint step.

        Args:
            x: [B, C, S * T] segments.
            draws: The step's :class:`JointDraws`.

        Returns:
            PART across windows' output with the summed loss; ``metrics`` also hold the
            within-window diagnostics, prefixed ``within_``, and ``within_loss``.
        """
        output = super().forward_with_draws(x, draws.across)
        windows = output.patches.patches.flatten(0, 1)  # [B * N, C, T], normalised
        within = self.within.forward_with_draws(windows, draws.within)
        metrics = dict(output.metrics)
        metrics.update({f"within_{name}": value for name, value in within.metrics.items()})
        metrics["within_loss"] = within.loss.detach()
        loss = output.loss + self.within_weight * within.loss
        return dataclasses.replace(output, loss=loss, metrics=metrics)

    def extra_repr(self) -> str:
        return f"within_weight={self.within_weight}, " + super().extra_repr()


def build_part_joint(config: PretrainConfig, spec: SignalSpec) -> JointPART:
    """PART within and across windows for segments ``[C, segment_windows * window_samples]``:
    PART across windows as :func:`~partnd.objectives.part_windows.build_part_windows` builds it,
    plus a within-window relative head (``config.head``) over ``config.num_patches`` off-grid
    patches of each drawn window (``None``: the window's tile count), ``within_pairs`` pairs and
    ``within_weight``."""
    encoder, head = part_windows_parts(config, spec)
    window = encoder.window
    patches = config.num_patches or config.window_samples // int(window.patch_size[0])
    within_head = build_head(
        config.head,
        embed_dim=window.embed_dim,
        out_dim=1,
        num_patches=patches,
        **config.head_overrides,
    )
    return JointPART(
        encoder,
        head,
        within_head,
        segment_windows=config.segment_windows,
        num_windows=config.num_windows,
        num_pairs=config.num_pairs,
        within_patches=patches,
        within_pairs=config.within_pairs,
        within_weight=config.within_weight,
        shared_pairs=config.shared_pairs,
        normalize=config.normalize,
        variance_weight=config.variance_weight,
        covariance_weight=config.covariance_weight,
    )
