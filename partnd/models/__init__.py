"""Neural network modules: the ViT encoder, relative heads and the classifier.

The pretraining objectives that combine them (PART, ...) live in :mod:`partnd.objectives`.
"""

from partnd.models.classifier import PatchClassifier
from partnd.models.heads import (
    CrossAttentionHead,
    MLPHead,
    PairProjection,
    PairwiseMLPHead,
    build_head,
    list_heads,
)
from partnd.models.registry import create_encoder, list_encoders
from partnd.models.vit import ViTEncoder

__all__ = [
    "CrossAttentionHead",
    "MLPHead",
    "PairProjection",
    "PairwiseMLPHead",
    "PatchClassifier",
    "ViTEncoder",
    "build_head",
    "create_encoder",
    "list_encoders",
    "list_heads",
]
