"""Optimiser parts: weight-decay/layer-decay parameter groups, per-step schedules, EMA.

Weight decay applies to weight *matrices* only (parameters with ``ndim >= 2``), never to norms,
biases, the [CLS] token, position embeddings or mask tokens (the timm/MAE convention). Layer-wise
learning-rate decay (BEiT/MAE fine-tuning) scales each group's rate by ``layer_decay ** depth_gap``;
the schedule writes ``lr * group["lr_scale"]`` into every group at every step.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch
from torch import nn

from partnd._validation import check

__all__ = [
    "TOP_LEVEL_NAME_PARTS",
    "FunctionSchedule",
    "ModelEMA",
    "StepSchedule",
    "WarmupCosineSchedule",
    "build_optimizer",
    "layer_id",
    "no_weight_decay_names",
    "param_groups",
]

#: Parameter-name parts that never get weight decay whatever their shape.
NO_DECAY_NAME_PARTS = ("cls_token", "pos_embed", "mask_token", "pos_mask_token")
#: Parameter-name parts that belong to the input layer (layer 0) for layer-wise decay.
INPUT_LAYER_NAME_PARTS = ("patch_embed", *NO_DECAY_NAME_PARTS)
#: Modules above the (pretrained) backbone: the temporal encoder of a sequence classifier sits on
#: top of the window encoder, so it keeps the full rate like the classifier head.
TOP_LEVEL_NAME_PARTS = ("temporal.",)
_BLOCK_INDEX = re.compile(r"(?:^|\.)blocks\.(\d+)\.")


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Names of parameters excluded from weight decay.

    Excluded: every parameter with ``ndim < 2`` (biases, norm scales), every parameter whose name
    contains one of :data:`NO_DECAY_NAME_PARTS`, and the names any submodule lists in a timm-style
    ``no_weight_decay()`` method (relative to that submodule).
    """
    excluded: set[str] = set()
    for module_name, module in model.named_modules():
        listing = getattr(module, "no_weight_decay", None)
        if callable(listing):
            prefix = f"{module_name}." if module_name else ""
            excluded.update(prefix + name for name in listing())
    for name, param in model.named_parameters():
        if param.ndim < 2 or any(part in name for part in NO_DECAY_NAME_PARTS):
            excluded.add(name)
    return excluded


def layer_id(name: str, num_layers: int) -> int:
    """Depth index of a parameter for layer-wise learning-rate decay.

    Args:
        name: Parameter name, e.g. ``"encoder.blocks.3.attn.qkv.weight"``.
        num_layers: Number of transformer blocks L.

    Returns:
        0 for the patch embedding, [CLS] and position embeddings, ``i + 1`` for block ``i``, and
        ``L + 1`` for everything after the blocks (final norm, classifier, and a sequence
        classifier's temporal encoder, :data:`TOP_LEVEL_NAME_PARTS`).
    """
    if any(part in name for part in TOP_LEVEL_NAME_PARTS):
        return num_layers + 1
    match = _BLOCK_INDEX.search(name)
    if match is not None:
        return int(match.group(1)) + 1
    if any(part in name for part in INPUT_LAYER_NAME_PARTS):
        return 0
    return num_layers + 1


def _count_blocks(names: Iterable[str]) -> int:
    indices = [
        int(match.group(1))
        for name in names
        if not any(part in name for part in TOP_LEVEL_NAME_PARTS)
        and (match := _BLOCK_INDEX.search(name))
    ]
    return max(indices) + 1 if indices else 0


def param_groups(
    model: nn.Module,
    weight_decay: float,
    layer_decay: float | None = None,
    full_rate: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Split trainable parameters into AdamW groups.

    Args:
        model: The module to optimise (frozen parameters are skipped).
        weight_decay: Decay of the weight-matrix groups (other groups get 0).
        layer_decay: If set, group ``k`` of L+2 depth levels gets ``lr_scale = layer_decay **
            (L + 1 - k)`` (see :func:`layer_id`); otherwise every ``lr_scale`` is 1.
        full_rate: Names of parameters at the top depth level (``lr_scale`` 1) whatever their
            name: a level that starts untrained, which layer-wise decay has nothing to keep in.

    Returns:
        Groups with keys ``params``, ``param_names``, ``weight_decay`` and ``lr_scale``.
    """
    named = [(name, param) for name, param in model.named_parameters() if param.requires_grad]
    excluded = no_weight_decay_names(model)
    num_layers = _count_blocks(name for name, _ in named)
    groups: dict[tuple[bool, int], dict[str, Any]] = {}
    for name, param in named:
        decay = name not in excluded
        depth = 0 if layer_decay is None else layer_id(name, num_layers)
        if layer_decay is not None and name in full_rate:
            depth = num_layers + 1
        scale = layer_decay ** (num_layers + 1 - depth) if layer_decay is not None else 1.0
        group = groups.setdefault(
            (decay, depth),
            {
                "params": [],
                "param_names": [],
                "weight_decay": weight_decay if decay else 0.0,
                "lr_scale": scale,
            },
        )
        group["params"].append(param)
        group["param_names"].append(name)
    return [groups[key] for key in sorted(groups)]


def build_optimizer(
    model: nn.Module,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    layer_decay: float | None = None,
    full_rate: Collection[str] = (),
) -> torch.optim.AdamW:
    """AdamW over :func:`param_groups` (initial rate ``lr * lr_scale``; the schedule sets it).

    Uses the fused (single-kernel) implementation when every parameter is a floating point tensor
    on the CPU or a GPU: same update rule, several times faster than the per-parameter loop.
    """
    groups = param_groups(model, weight_decay, layer_decay, full_rate)
    for group in groups:
        group["lr"] = lr * group["lr_scale"]
    params = [param for group in groups for param in group["params"]]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(
        groups, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused or None
    )


class StepSchedule:
    """A learning rate set at every optimiser step: every group's rate is :meth:`lr_at` of the
    next step times its ``lr_scale``; resumable through :meth:`state_dict`.

    Subclasses define :meth:`lr_at`; :class:`WarmupCosineSchedule` is the engine's default,
    :class:`FunctionSchedule` takes any function of the step (a step decay, ...).

    Args:
        optimizer: Optimiser whose groups are updated in place.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.steps_done = 0
        self._apply()

    def lr_at(self, step: int) -> float:
        """Scheduled (unscaled) learning rate of 0-based optimiser step ``step``."""
        raise NotImplementedError

    @property
    def current_lr(self) -> float:
        """Unscaled rate the next optimiser step will use."""
        return self.lr_at(self.steps_done)

    def _apply(self) -> None:
        lr = self.current_lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)

    def step(self) -> None:
        """Advance by one optimiser step and set the rates of the next one."""
        self.steps_done += 1
        self._apply()

    def state_dict(self) -> dict[str, int]:
        """Resumable state (the number of steps done)."""
        return {"steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore :meth:`state_dict` and set the group rates accordingly."""
        self.steps_done = int(state["steps_done"])
        self._apply()


class WarmupCosineSchedule(StepSchedule):
    """Per-step linear warm-up to ``base_lr`` then cosine decay to ``min_lr``.

    Step ``k`` (0-based, the k-th optimiser step) uses ``base_lr * (k + 1) / W`` for ``k < W`` (so
    the last warm-up step is at ``base_lr``), then ``min_lr + (base_lr - min_lr) * (1 + cos(pi *
    (k - W) / (T - 1 - W))) / 2``, which is ``base_lr`` at ``k = W`` and ``min_lr`` at the last
    step ``k = T - 1``. Every group's rate is the scheduled rate times its ``lr_scale``.

    Args:
        optimizer: Optimiser whose groups are updated in place.
        base_lr: Peak learning rate.
        min_lr: Final learning rate.
        warmup_steps: W, number of warm-up steps (0 for none).
        total_steps: T, total optimiser steps of the run.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        base_lr: float,
        min_lr: float,
        warmup_steps: int,
        total_steps: int,
    ) -> None:
        check(total_steps >= 1, "total_steps", "an int >= 1", repr(total_steps))
        check(warmup_steps >= 0, "warmup_steps", "an int >= 0", repr(warmup_steps))
        self.base_lr = base_lr
        self.min_lr = min_lr
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        """Scheduled (unscaled) learning rate of 0-based optimiser step ``step``."""
        if step < self.warmup_steps:
            return self.base_lr * (step + 1) / self.warmup_steps
        span = max(1, self.total_steps - 1 - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (
            1.0 + math.cos(math.pi * progress)
        )


class FunctionSchedule(StepSchedule):
    """Per-step rate given by a function of the 0-based optimiser step (e.g. a multi-step decay).

    Args:
        optimizer: Optimiser whose groups are updated in place.
        rate: Step ``k`` -> unscaled learning rate of that step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, rate: Callable[[int], float]) -> None:
        self.rate = rate
        super().__init__(optimizer)

    def lr_at(self, step: int) -> float:
        """Scheduled (unscaled) learning rate of 0-based optimiser step ``step``."""
        return float(self.rate(step))


class ModelEMA:
    """Exponential moving average of a module's weights, with a warm-up of the decay.

    After optimiser step ``t`` (1-based), each floating point parameter and buffer ``e`` of the
    copy becomes ``d_t * e + (1 - d_t) * w`` with ``d_t = min(decay, (1 + t) / (10 + t))`` (the
    warm-up of TensorFlow's ``ExponentialMovingAverage(num_updates=...)``); buffers that are not
    floating point are copied. Without the warm-up a decay of 0.9999 leaves the average 92% at its
    initialisation after 840 steps; with it the average follows the recent weights from the start
    and reaches the full decay after ``~10 / (1 - decay)`` steps.

    Args:
        model: The module being trained (the average starts as an exact copy of it).
        decay: Final averaging decay in (0, 1).
        warmup: Use the warm-up above (default); ``False`` uses ``decay`` from the first step.
    """

    def __init__(self, model: nn.Module, decay: float, warmup: bool = True) -> None:
        check(0.0 < decay < 1.0, "decay", "a number in (0, 1)", repr(decay))
        self.decay = decay
        self.warmup = warmup
        self.updates = 0
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)

    def decay_at(self, update: int) -> float:
        """Decay used by the ``update``-th update (1-based)."""
        if not self.warmup:
            return self.decay
        return min(self.decay, (1.0 + update) / (10.0 + update))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average one step towards ``model``'s current weights."""
        self.updates += 1
        weight = 1.0 - self.decay_at(self.updates)
        current = model.state_dict(keep_vars=True)
        averaged_float, current_float = [], []
        for name, averaged in self.module.state_dict(keep_vars=True).items():
            value = current[name].detach()
            if averaged.is_floating_point():
                averaged_float.append(averaged)
                current_float.append(value.to(averaged.dtype))
            else:
                averaged.copy_(value)
        if averaged_float:
            torch._foreach_lerp_(averaged_float, current_float, weight)

    def state_dict(self) -> dict[str, Any]:
        """The averaged weights and the number of updates."""
        return {"module": self.module.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])
