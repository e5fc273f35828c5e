"""Which levels of a sequence or night classifier start from the pretrained encoder
(``FinetuneConfig.pretrained_levels``).

A sequence or night classifier has two levels: the window encoder (a ViT over the tiles of one
window) and the temporal transformer over the window embeddings. PART across windows pretrains
both (a :class:`~partnd.models.HierarchicalEncoder`); the other objectives pretrain the window
encoder, and the classifier gets a fresh temporal transformer. :func:`keep_pretrained_levels`
gives the encoder a classifier is built on when only some levels are kept:

* ``"all"``: the pretrained encoder as it is (every level it brings);
* ``"window"``: its window encoder alone, so the classifier gets a fresh temporal transformer
  (``FinetuneConfig.temporal_encoder``), as it does on a pretrained window encoder;
* ``"temporal"``: its temporal level (token projection, [CLS] token, blocks, norm, slot and mask
  embeddings) over a freshly initialised window encoder of the same architecture, drawn from the
  run's seed.

:func:`kept_parameter_shapes` gives the shapes of the parameters kept, which name the
classifier's pretrained parameters
(:func:`~partnd.finetuning.pretrained_parameters.pretrained_parameter_names`): those
``FinetuneConfig.probe_steps`` holds, so that with ``"temporal"`` only the temporal level is held
during the probe.

A window encoder that holds no learned weights, drawn fresh here or held at its random start by
the pretext (``PretrainConfig.trained_levels="temporal"``), trains at the full rate under
layer-wise decay (:func:`full_rate_parameter_names`), as it would from scratch: the decay keeps
pretrained features, and such a window encoder has none.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from partnd._validation import check
from partnd.finetuning.pretrained_parameters import parameter_shapes
from partnd.models.sequence import HierarchicalEncoder
from partnd.models.serialization import encoder_from_spec, encoder_spec
from partnd.models.vit import ViTEncoder

__all__ = [
    "check_pretrained_levels",
    "full_rate_parameter_names",
    "keep_pretrained_levels",
    "kept_parameter_shapes",
]

#: The prefixes of the two levels' parameters in a :class:`HierarchicalEncoder`.
WINDOW_PREFIX = "window."
TEMPORAL_PREFIX = "temporal."


def check_pretrained_levels(
    levels: str, backbone: ViTEncoder | HierarchicalEncoder | None, encoder: object
) -> None:
    """Refuse a choice of levels the pretrained encoder cannot give.

    Args:
        levels: ``FinetuneConfig.pretrained_levels``.
        backbone: The pretrained encoder (``None`` from scratch).
        encoder: What the caller passed as the encoder (for messages).

    Raises:
        InputError: Naming ``FinetuneConfig.pretrained_levels``: not ``"all"`` from scratch,
            ``"temporal"`` on an encoder without a temporal level, or ``"window"`` on one whose
            window encoder pretraining held (it would keep nothing learned).
    """
    check(
        levels == "all" or backbone is not None,
        "FinetuneConfig.pretrained_levels",
        "'all' when training from scratch (it chooses which levels of a pretrained encoder "
        "start the classifier; pass a pretrained encoder)",
        f"{levels!r} with encoder={encoder!r}",
    )
    check(
        levels != "temporal" or isinstance(backbone, HierarchicalEncoder),
        "FinetuneConfig.pretrained_levels",
        "'all' or 'window' for a pretrained window encoder ('temporal' keeps a pretrained "
        "temporal level: PART across windows' hierarchical encoder)",
        f"{levels!r} with a {type(backbone).__name__}",
    )
    held_window = isinstance(backbone, HierarchicalEncoder) and backbone.trained_levels != "all"
    check(
        levels != "window" or not held_window,
        "FinetuneConfig.pretrained_levels",
        "'all' or 'temporal' for an encoder pretrained with trained_levels='temporal' (its "
        "window encoder was held at its random start, so 'window' keeps nothing learned)",
        f"{levels!r}",
    )


def keep_pretrained_levels(
    backbone: ViTEncoder | HierarchicalEncoder, levels: str, seed: int
) -> ViTEncoder | HierarchicalEncoder:
    """The encoder a sequence or night classifier is built on, keeping ``levels`` of
    ``backbone``.

    Args:
        backbone: The pretrained window or hierarchical encoder (not modified).
        levels: ``"all"``, ``"window"`` or ``"temporal"`` (:func:`check_pretrained_levels`).
        seed: Seed of a fresh window encoder (``"temporal"``); drawn without touching the global
            random state, so that the classifier's other fresh parts are drawn as with
            ``"all"``.

    Returns:
        ``backbone`` itself for ``"all"``; its window encoder for ``"window"`` (the classifier
        puts a fresh temporal transformer on it); for ``"temporal"`` a new hierarchical encoder
        (``trained_levels="temporal"``): a fresh window encoder of ``backbone``'s window
        architecture (and signal) under a copy of its temporal level.
    """
    check_pretrained_levels(levels, backbone, type(backbone).__name__)
    if levels == "all":
        return backbone
    if levels == "window":
        return backbone.window if isinstance(backbone, HierarchicalEncoder) else backbone
    assert isinstance(backbone, HierarchicalEncoder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = encoder_from_spec(encoder_spec(backbone.window))
    fresh.signal_info = backbone.window.signal_info
    return HierarchicalEncoder(
        fresh,
        copy.deepcopy(backbone.temporal),
        backbone.window_samples,
        trained_levels="temporal",
    )


def kept_parameter_shapes(
    backbone: ViTEncoder | HierarchicalEncoder, levels: str
) -> dict[str, torch.Size]:
    """``{name: shape}`` of the pretrained parameters a classifier keeps with ``levels``, named
    as in its hierarchical encoder (``window.*``, ``temporal.*``), taken before the build
    changes them (see :func:`~partnd.finetuning.pretrained_parameters.pretrained_parameter_names`).

    Args:
        backbone: The pretrained window or hierarchical encoder.
        levels: ``"all"``, ``"window"`` or ``"temporal"`` (:func:`check_pretrained_levels`).
    """
    check_pretrained_levels(levels, backbone, type(backbone).__name__)
    if not isinstance(backbone, HierarchicalEncoder):
        return {WINDOW_PREFIX + name: shape for name, shape in parameter_shapes(backbone).items()}
    kept = {"all": (WINDOW_PREFIX, TEMPORAL_PREFIX), "window": (WINDOW_PREFIX,)}
    prefixes = kept.get(levels, (TEMPORAL_PREFIX,))
    return {
        name: shape
        for name, shape in parameter_shapes(backbone).items()
        if name.startswith(prefixes)
    }


def full_rate_parameter_names(model: nn.Module) -> tuple[str, ...]:
    """Names of the parameters of ``model``'s window encoder when it holds no learned weights.

    Args:
        model: A sequence or night classifier (its ``encoder`` a :class:`HierarchicalEncoder`),
            or any other classifier.

    Returns:
        Every parameter of ``model.encoder.window``, with its prefix in ``model``, when
        ``model.encoder.trained_levels`` is ``"temporal"`` (the window encoder was drawn fresh,
        or held at its random start by the pretext); otherwise none. Layer-wise decay leaves
        them at the full rate (``Trainer(full_rate=...)``).
    """
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, HierarchicalEncoder) or encoder.trained_levels != "temporal":
        return ()
    prefix = next(name for name, module in model.named_modules() if module is encoder.window)
    return tuple(f"{prefix}.{name}" for name, _ in encoder.window.named_parameters())
