"""Self-supervised pretraining objectives, one module per method, behind one registry.

``pretrain(data, method=...)`` builds its objective here from a
:class:`~partnd.engine.config.PretrainConfig` and the data's shape. Every objective is an
:class:`~partnd.objectives.base.Objective`: it owns the encoder, maps a batch to an
:class:`~partnd.objectives.base.ObjectiveOutput` (loss plus diagnostics next to their content-free
floors) and runs under the same engine (bf16, EMA, resume, DDP, logs).

| name | module | what it learns |
|---|---|---|
| ``part`` | :mod:`~partnd.objectives.part` | relative translations between off-grid patches |
| ``part_grid`` | :mod:`~partnd.objectives.part` | the same on the fixed on-grid tiles (ablation) |
| ``mae`` | :mod:`~partnd.objectives.mae` | the values of masked on-grid patches (MAE) |
| ``mp3`` | :mod:`~partnd.objectives.mp3` | each patch's slot, without position embedding |
| ``droppos`` | :mod:`~partnd.objectives.droppos` | the slots of tokens whose position was dropped |
| ``part_windows`` | :mod:`~partnd.objectives.part_windows` | shifts between whole windows of a |
|  |  | segment of consecutive windows (PART across windows) |
| ``part_joint`` | :mod:`~partnd.objectives.part_joint` | PART across windows plus PART within |
|  |  | each drawn window, one shared window encoder |
| ``rp`` | :mod:`~partnd.objectives.relative_positioning` | whether two windows of a segment |
|  |  | are close or far (relative positioning, Banville et al. 2021) |
| ``ts`` | :mod:`~partnd.objectives.temporal_shuffling` | whether a window lies between two |
|  |  | close windows, in order (temporal shuffling, Banville et al. 2021) |

Defaults, sources and differences from the original methods: ``docs/baselines.md``.

Register another with :func:`register_objective` (:mod:`partnd.objectives.registry`).
"""

from __future__ import annotations

from partnd._validation import InputError, check
from partnd.engine.config import PretrainConfig
from partnd.models import build_head
from partnd.objectives.base import (
    GridObjective,
    Objective,
    ObjectiveOutput,
    add_slot_embedding,
    build_encoder,
)
from partnd.objectives.droppos import DropPosModel, DropPosOutput, build_droppos
from partnd.objectives.mae import MAEModel, MAEOutput, build_mae
from partnd.objectives.mp3 import MP3Model, MP3Output, build_mp3
from partnd.objectives.part import PARTModel, PARTOutput, PatchSampler
from partnd.objectives.part_joint import JointPART, build_part_joint
from partnd.objectives.part_windows import CrossWindowPART, build_part_windows
from partnd.objectives.registry import (
    ObjectiveSpec,
    list_objectives,
    register_objective,
    registered,
)
from partnd.objectives.relative_positioning import (
    RelativePositioning,
    build_relative_positioning,
)
from partnd.objectives.temporal_shuffling import TemporalShuffling, build_temporal_shuffling
from partnd.objectives.window_context import WindowContextObjective
from partnd.patches.sampling import GridSampler, OffGridSampler
from partnd.signal_info import SignalSpec

__all__ = [
    "CrossWindowPART",
    "DropPosModel",
    "DropPosOutput",
    "GridObjective",
    "JointPART",
    "MAEModel",
    "MAEOutput",
    "MP3Model",
    "MP3Output",
    "Objective",
    "ObjectiveOutput",
    "ObjectiveSpec",
    "PARTModel",
    "PARTOutput",
    "PatchSampler",
    "RelativePositioning",
    "TemporalShuffling",
    "WindowContextObjective",
    "build_droppos",
    "build_encoder",
    "build_mae",
    "build_mp3",
    "build_objective",
    "build_part_joint",
    "build_part_windows",
    "build_relative_positioning",
    "build_temporal_shuffling",
    "list_objectives",
    "register_objective",
]


def _build_part(config: PretrainConfig, spec: SignalSpec, grid: bool) -> PARTModel:
    encoder = build_encoder(config, spec)
    sampler: PatchSampler
    if grid:
        check(
            config.scale_range is None and not config.scale_targets,
            "PretrainConfig.scale_range",
            "None for part_grid (on-grid tiles all have the patch size)",
            repr(config.scale_range),
        )
        sampler = GridSampler(spec.ndim, encoder.patch_size)
        num_patches = sampler.num_patches(spec.spatial_shape)
    else:
        sampler = OffGridSampler(
            spec.ndim,
            encoder.patch_size,
            config.num_patches,
            scale_range=config.scale_range,
            antialias=config.antialias,
            integer_boxes=config.integer_boxes,
        )
        num_patches = sampler.num_patches_for(spec.spatial_shape)
    check(
        num_patches >= 2,
        "PretrainConfig.num_patches",
        "at least 2 patches per example (PART predicts relations between pairs)",
        f"{num_patches} for items of shape {spec.item_shape} and patch size {encoder.patch_size}",
    )
    if config.pos_embed:  # anchored PART (also on the grid: the hidden slots carry the loss)
        add_slot_embedding(encoder, spec.spatial_shape, config.pos_mask_ratio)
    head = build_head(
        config.head,
        embed_dim=encoder.embed_dim,
        out_dim=spec.ndim * (2 if config.scale_targets else 1),
        num_patches=num_patches,
        **config.head_overrides,
    )
    return PARTModel(
        encoder,
        head,
        sampler,
        num_pairs=config.num_pairs,
        scale_targets=config.scale_targets,
        shared_pairs=config.shared_pairs,
        pair_radius=config.pair_radius,
        variance_weight=config.variance_weight,
        covariance_weight=config.covariance_weight,
    )


def build_part(config: PretrainConfig, spec: SignalSpec) -> PARTModel:
    """PART: the configured off-grid sampler, encoder and relative head."""
    return _build_part(config, spec, grid=False)


def build_part_grid(config: PretrainConfig, spec: SignalSpec) -> PARTModel:
    """PART-grid: PART's objective on the fixed on-grid tiles (the paper's sampling ablation)."""
    return _build_part(config, spec, grid=True)


register_objective(
    "part", build_part, "PART: relative translations between patches at random off-grid positions"
)
register_objective(
    "part_grid", build_part_grid, "PART-grid: PART's objective on the fixed on-grid tiles"
)
register_objective(
    "mae", build_mae, "MAE: reconstruct the normalised values of masked on-grid patches"
)
register_objective(
    "mp3",
    build_mp3,
    "MP3: classify each patch's slot without position embedding, from a subset of keys/values",
)
register_objective(
    "droppos",
    build_droppos,
    "DropPos: classify the slots of patches whose position embedding was dropped",
)
register_objective(
    "part_windows",
    build_part_windows,
    "PART across windows: relative shifts between whole windows drawn off-grid from segments of "
    "consecutive windows (window ViT + temporal ViT)",
    data="segments",
)
register_objective(
    "part_joint",
    build_part_joint,
    "PART within and across windows: PART across windows plus relative positions of off-grid "
    "patches inside each drawn window, one loss, one shared window encoder",
    data="segments",
)
register_objective(
    "rp",
    build_relative_positioning,
    "Relative positioning (Banville et al. 2021): whether two stored windows of a segment lie "
    "within tau_pos or beyond tau_neg, from |h(x1) - h(x2)|",
    data="segments",
)
register_objective(
    "ts",
    build_temporal_shuffling,
    "Temporal shuffling (Banville et al. 2021): whether a window lies between two windows of "
    "the positive context, in order, or in the negative context",
    data="segments",
)


def build_objective(config: PretrainConfig, spec: SignalSpec) -> Objective:
    """Build the objective named by ``config.method`` for data of shape ``spec``."""
    entry = registered(config.method)
    if entry is None:
        raise InputError(
            f"PretrainConfig.method: expected one of {list_objectives()}, got {config.method!r}"
        )
    return entry.build(config, spec)
