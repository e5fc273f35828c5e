"""Named ViT encoder presets (width / depth / heads), created with :func:`create_encoder`.

``vit_eeg_12m`` is the paper's 1D EEG backbone: with ``in_chans=6``, ``patch_size=100``, ``ndim=1``
and ``num_positions=30`` it has about 12.93 M parameters (the paper reports 12.9 M). ``vit_tiny``,
``vit_small`` and ``vit_base`` are the usual ViT-Ti/S/B widths (ViT-S is the paper's CIFAR-100
backbone, ViT-B its ImageNet one); ``vit_mini`` (128 wide, 6 deep, 1.2 M parameters) is sized for
CPU runs on small images; ``vit_test`` and ``vit_test_wide`` are tiny variants for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from partnd._validation import InputError
from partnd.models.vit import ViTEncoder

__all__ = ["ENCODER_PRESETS", "create_encoder", "list_encoders"]

ENCODER_PRESETS: dict[str, dict[str, Any]] = {
    "vit_eeg_12m": {"embed_dim": 512, "depth": 4, "num_heads": 8, "mlp_ratio": 4.0},
    "vit_mini": {"embed_dim": 128, "depth": 6, "num_heads": 4, "mlp_ratio": 4.0},
    "vit_tiny": {"embed_dim": 192, "depth": 12, "num_heads": 3, "mlp_ratio": 4.0},
    "vit_small": {"embed_dim": 384, "depth": 12, "num_heads": 6, "mlp_ratio": 4.0},
    "vit_base": {"embed_dim": 768, "depth": 12, "num_heads": 12, "mlp_ratio": 4.0},
    "vit_test": {"embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0},
    "vit_test_wide": {"embed_dim": 64, "depth": 2, "num_heads": 4, "mlp_ratio": 2.0},
}


def list_encoders() -> list[str]:
    """Return the names accepted by :func:`create_encoder`, sorted."""
    return sorted(ENCODER_PRESETS)


def create_encoder(
    name: str, *, in_chans: int, patch_size: int | Sequence[int], ndim: int, **overrides: Any
) -> ViTEncoder:
    """Build a :class:`ViTEncoder` from a named preset.

    Args:
        name: One of :func:`list_encoders`.
        in_chans: Channels of each patch.
        patch_size: Patch extent (int or one int per dimension).
        ndim: Number of spatial dimensions.
        **overrides: Any other :class:`ViTEncoder` keyword (e.g. ``num_positions``,
            ``drop_path_rate``, or a preset value such as ``depth``).

    Returns:
        A freshly initialised encoder.

    Raises:
        InputError: If ``name`` is not a known preset.
    """
    if name not in ENCODER_PRESETS:
        raise InputError(f"name: expected one of {list_encoders()}, got {name!r}")
    kwargs = {**ENCODER_PRESETS[name], **overrides}
    return ViTEncoder(in_chans=in_chans, patch_size=patch_size, ndim=ndim, **kwargs)
