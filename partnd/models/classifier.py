"""Fine-tuning model: a (pretrained) ViT encoder classifying on-grid patches from its [CLS] token.

Follows the paper's fine-tuning protocol (Ayoughi et al., Sec. 3, "Finetuning"): the relative head
is dropped, a randomly initialised learnable position embedding is added, the input is tiled on
the regular grid (:class:`~partnd.patches.sampling.GridSampler`) instead of sampled off-grid, and a
linear
layer classifies the [CLS] token. ``pos_embed=False`` gives the supervised-without-position-
embedding baseline.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from torch import Tensor, nn

from partnd._validation import check
from partnd.models.vit import ViTEncoder, to_size_tuple
from partnd.patches.sampling import GridSampler
from partnd.signal_info import SignalInfo

__all__ = ["PatchClassifier"]


class PatchClassifier(nn.Module):
    """On-grid ViT classifier for inputs ``x: [B, C, *spatial]`` of one fixed spatial shape.

    Args:
        encoder: The backbone (e.g. PART-pretrained). It is deep-copied unless
            ``copy_encoder=False``, so one pretrained encoder can seed several fine-tuning runs
            (seeds, label budgets) without them sharing weights.
        num_classes: Number of classes; a fresh ``Linear(D -> num_classes)`` is put on [CLS].
        spatial_shape: Spatial shape of every input (e.g. ``(3000,)`` for 30 s at 100 Hz, or
            ``(32, 32)``); fixes the number of grid slots ``prod(L_d // P_d)``.
        patch_size: Grid tile extent; defaults to (and must equal) ``encoder.patch_size``.
        ndim: Number of spatial dimensions; defaults to (and must equal) ``encoder.ndim``.
        pos_embed: Give the classifier a slot position embedding: the encoder's own when it has
            one of the grid's size (anchored PART learned it; MAE and DropPos too), else a new
            randomly initialised one (the paper's protocol for PART); ``False`` removes it
            (baseline without position embedding).
        pos_mask_ratio: Fraction of slot embeddings masked per example during training (see
            :class:`ViTEncoder`); requires ``pos_embed``.
        global_pool: ``"token"`` classifies [CLS] (the paper); ``"avg"`` the mean patch token.
        copy_encoder: Deep-copy ``encoder`` (default) instead of modifying it in place.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        num_classes: int,
        *,
        spatial_shape: Sequence[int],
        patch_size: int | Sequence[int] | None = None,
        ndim: int | None = None,
        pos_embed: bool = True,
        pos_mask_ratio: float = 0.0,
        global_pool: str = "token",
        copy_encoder: bool = True,
    ) -> None:
        super().__init__()
        check(num_classes >= 1, "num_classes", "a positive int", repr(num_classes))
        check(
            ndim is None or ndim == encoder.ndim,
            "ndim",
            f"None or the encoder's ndim={encoder.ndim}",
            repr(ndim),
        )
        if patch_size is not None:
            check(
                to_size_tuple(patch_size, encoder.ndim) == encoder.patch_size,
                "patch_size",
                f"None or the encoder's patch_size={encoder.patch_size}",
                repr(patch_size),
            )
        check(
            pos_embed or pos_mask_ratio == 0.0,
            "pos_mask_ratio",
            "0.0 when pos_embed=False",
            repr(pos_mask_ratio),
        )
        self.spatial_shape = tuple(int(length) for length in spatial_shape)
        self.num_positions = GridSampler(encoder.ndim, encoder.patch_size).num_patches(
            self.spatial_shape
        )
        self.encoder = copy.deepcopy(encoder) if copy_encoder else encoder
        if pos_embed and self.encoder.num_positions == self.num_positions:
            self.encoder.set_position_mask_ratio(pos_mask_ratio)
        elif pos_embed:
            self.encoder.add_position_embedding(self.num_positions, pos_mask_ratio)
        else:
            self.encoder.remove_position_embedding()
        self.encoder.reset_classifier(num_classes, global_pool)
        self.num_classes = num_classes
        self.use_positions = pos_embed
        #: Class names of the labels, recorded by ``finetune`` (``None`` if not given).
        self.class_names: list[str] | None = None
        #: The signal the classifier was trained on (channel names and rate when the training
        #: data gave them), recorded by ``finetune``; inputs are checked against it.
        self.signal_info = SignalInfo(self.encoder.in_chans, self.spatial_shape)

    def forward(self, x: Tensor) -> Tensor:
        """Classify a batch.

        Args:
            x: [B, C, *spatial] inputs with ``spatial == spatial_shape``.

        Returns:
            [B, num_classes] logits.
        """
        check(
            x.dim() == 2 + len(self.spatial_shape)
            and x.shape[1] == self.encoder.in_chans
            and tuple(x.shape[2:]) == self.spatial_shape,
            "x",
            f"a tensor [B, {self.encoder.in_chans}, {', '.join(map(str, self.spatial_shape))}]",
            x,
        )
        return self.encoder.forward_head(self.encoder.forward_grid(x))
