"""Neural network modules: the ViT encoder, relative heads, the PART model and the classifier."""

from partnd.models.classifier import PatchClassifier
from partnd.models.heads import (
    CrossAttentionHead,
    MLPHead,
    PairProjection,
    PairwiseMLPHead,
    build_head,
    list_heads,
)
from partnd.models.part import PARTModel, PARTOutput, PatchSampler
from partnd.models.registry import create_encoder, list_encoders
from partnd.models.vit import ViTEncoder

__all__ = [
    "CrossAttentionHead",
    "MLPHead",
    "PARTModel",
    "PARTOutput",
    "PairProjection",
    "PairwiseMLPHead",
    "PatchClassifier",
    "PatchSampler",
    "ViTEncoder",
    "build_head",
    "create_encoder",
    "list_encoders",
    "list_heads",
]
