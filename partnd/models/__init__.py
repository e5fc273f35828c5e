"""Neural network modules: the ViT encoder, relative heads, the classifiers and the models over
sequences of windows (hierarchical encoder, sequence classifier, night classifier).

The pretraining objectives that combine them (PART, ...) live in :mod:`partnd.objectives`.
"""

from partnd.models.channel_set import ChannelSetPatchEmbed
from partnd.models.classifier import PatchClassifier
from partnd.models.heads import (
    CrossAttentionHead,
    MLPHead,
    PairProjection,
    PairwiseMLPHead,
    build_head,
    list_heads,
)
from partnd.models.night import NightClassifier
from partnd.models.registry import create_encoder, list_encoders
from partnd.models.sequence import (
    HierarchicalEncoder,
    SequenceClassifier,
    create_temporal_encoder,
)
from partnd.models.vit import ViTEncoder

__all__ = [
    "ChannelSetPatchEmbed",
    "CrossAttentionHead",
    "HierarchicalEncoder",
    "MLPHead",
    "NightClassifier",
    "PairProjection",
    "PairwiseMLPHead",
    "PatchClassifier",
    "SequenceClassifier",
    "ViTEncoder",
    "build_head",
    "create_encoder",
    "create_temporal_encoder",
    "list_encoders",
    "list_heads",
]
