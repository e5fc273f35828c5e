"""Which parameters of a classifier came from its pretrained encoder.

Linear probe, then fine-tune (``FinetuneConfig.probe_steps``; Kumar et al. 2022) holds those
fixed for the first steps while the classifier's new parameters train. Building a classifier
copies the pretrained encoder into it and changes it where fine-tuning needs something new: a
fresh classifier, a fresh slot position embedding where the encoder had none (or one of another
number of slots), a night classifier's time-of-night embedding and its temporal encoder without
slot embeddings. A parameter came from the pretrained encoder when the encoder had a parameter of
the same name (relative to the module holding the copy) and the same shape; what a build
replaced or added is new.

These are not the depth levels of layer-wise learning-rate decay
(:func:`partnd.engine.optim.layer_id`), which go by name alone: a fresh position embedding sits
at its input level, a pretrained final norm above its blocks.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from partnd._validation import check

__all__ = ["parameter_shapes", "pretrained_parameter_names"]


def parameter_shapes(encoder: nn.Module) -> dict[str, torch.Size]:
    """``{name: shape}`` of every parameter of ``encoder``: what a classifier built on it
    inherits, taken before the build changes it."""
    return {name: param.shape for name, param in encoder.named_parameters()}


def pretrained_parameter_names(
    model: nn.Module, holder: nn.Module, pretrained: Mapping[str, torch.Size]
) -> tuple[str, ...]:
    """Names (in ``model``) of the parameters that came from the pretrained encoder.

    Args:
        model: The classifier.
        holder: The submodule of ``model`` that holds the pretrained encoder's copy (a window
            classifier's ``encoder``; a sequence or night classifier's ``encoder``, with the
            shapes of :func:`~partnd.finetuning.pretrained_levels.kept_parameter_shapes`).
        pretrained: :func:`parameter_shapes` of the pretrained encoder before the build.

    Returns:
        The names of ``holder``'s parameters whose name and shape the pretrained encoder had,
        with ``holder``'s prefix in ``model``, sorted.
    """
    prefixes = [name for name, module in model.named_modules() if module is holder]
    check(bool(prefixes), "holder", "a submodule of model", type(holder).__name__)
    prefix = f"{prefixes[0]}." if prefixes[0] else ""
    return tuple(
        sorted(
            prefix + name
            for name, param in holder.named_parameters()
            if pretrained.get(name) == param.shape
        )
    )
