"""MP3 (masked patch position prediction, Zhai et al., ICML 2022) on on-grid N-D patches.

"Position Prediction as an Effective Pretraining Strategy": a Transformer **without position
embedding** sees the on-grid patches and classifies, for every patch, which of the N grid slots
it came from. To make the task non-trivial, a random subset of the patches is *masked*: they are
removed from the keys and values of the attention (they only serve as queries), so the
Transformer has to place every patch, masked or not, from a reduced context.

One training step, for inputs ``x: [B, C, *spatial]``:

1. the input is tiled on the regular grid (:class:`~partnd.patches.sampling.GridSampler`, N slots,
   row-major, no position embedding);
2. per example ``M = round(mask_ratio * N)`` patch tokens (clamped to ``[1, N - 1]``) drawn with
   the step's generator are removed from the keys and values of **every** attention layer
   (``ViTEncoder.forward_features(key_mask=...)``; [CLS] always stays a key, and it only sees the
   context patches, so it leaks nothing about the masked ones);
3. a linear head ``Linear(D -> N)`` on every patch token scores the N slots;
4. the loss is the cross-entropy of each token's own slot index, averaged over **all** N tokens
   (masked and context alike).

**Which tokens carry the loss.** The paper's formulation: all patches are queries, the context
patches are the keys and values, and the position of every input token is classified (a
classification problem "among all possible positions for each input token"; the paper's
abstract). Independent re-implementations (lucidrains ``vit-pytorch``, ``vit_pytorch/mp3.py``)
also apply the cross-entropy to all tokens. No official code was available to check this; see
``docs/baselines.md``.

Diagnostics (:func:`~partnd.objectives.diagnostics.classification_diagnostics`): accuracy of the
slot prediction over all tokens next to chance ``1 / N``, plus ``accuracy_masked`` (tokens that
were no keys). Without position embedding a content-free predictor cannot beat chance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.vit import ViTEncoder, init_weights
from partnd.objectives.base import GridObjective, ObjectiveOutput, build_encoder
from partnd.objectives.diagnostics import classification_diagnostics
from partnd.objectives.mae import masked_count, random_split

if TYPE_CHECKING:
    from partnd.engine.config import PretrainConfig
    from partnd.signal_info import SignalSpec

__all__ = ["MP3Draws", "MP3Model", "MP3Output", "build_mp3"]


@dataclass(frozen=True)
class MP3Draws:
    """The random key masks of one MP3 step (:meth:`MP3Model.draw`).

    Attributes:
        masked: [B, M] slot indices of the tokens removed from the keys and values, ascending.
    """

    masked: Tensor


@dataclass(frozen=True)
class MP3Output(ObjectiveOutput):
    """Result of one MP3 forward pass.

    Attributes:
        loss: Scalar float32 cross-entropy of the slot index, averaged over all tokens.
        metrics: ``accuracy``, ``accuracy_chance`` (``1 / N``) and ``accuracy_masked`` (over the
            tokens removed from the keys and values).
        logits: [B, N, N] slot scores of every patch token.
        labels: [B, N] slot index of every token (its grid index).
        key_mask: [B, N] bool, True where the token was removed from the keys and values.
    """

    logits: Tensor
    labels: Tensor
    key_mask: Tensor


class MP3Model(GridObjective):
    """Encoder without position embedding + linear slot classifier.

    Args:
        encoder: A :class:`ViTEncoder` without classifier and without position embedding.
        spatial_shape: Spatial shape of every input (fixes the grid of N slots).
        mask_ratio: Fraction of patch tokens removed from the keys and values per example.
    """

    def __init__(
        self, encoder: ViTEncoder, spatial_shape: tuple[int, ...], *, mask_ratio: float = 0.75
    ) -> None:
        super().__init__(encoder, spatial_shape, "MP3")
        check(
            encoder.pos_embed is None,
            "encoder",
            "an encoder without position embedding (a slot embedding gives MP3's answer away)",
            f"an encoder with {encoder.num_positions} slot embeddings",
        )
        check(0.0 < mask_ratio < 1.0, "mask_ratio", "a ratio in (0, 1)", repr(mask_ratio))
        num_positions = self.num_positions
        check(
            num_positions >= 2,
            "spatial_shape",
            "a grid of at least 2 patches (MP3 classifies the slot among N >= 2)",
            f"{num_positions} patch(es) for {self.spatial_shape} and patch size "
            f"{encoder.patch_size}",
        )
        self.head = nn.Linear(encoder.embed_dim, num_positions)
        init_weights(self.head)
        self.mask_ratio = mask_ratio
        self.num_masked = masked_count(mask_ratio, num_positions)

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> MP3Draws:
        """Draw the tokens removed from the keys and values of every example of ``x``.

        Args:
            x: [B, C, *spatial] inputs (shape and device read).
            generator: Random source of the key masks (same seed, same masks).

        Returns:
            The :class:`MP3Draws`.
        """
        self.check_input(x)
        masked, _ = random_split(
            int(x.shape[0]), self.num_positions, self.num_masked, generator, x.device
        )
        return MP3Draws(masked=masked)

    def forward_with_draws(self, x: Tensor, draws: MP3Draws) -> MP3Output:
        """Run one MP3 step on the step's key masks (``forward(x, generator)`` draws them).

        Args:
            x: [B, C, *spatial] inputs.
            draws: The step's key masks (:meth:`draw`).

        Returns:
            An :class:`MP3Output`; call ``output.loss.backward()`` to train.
        """
        masked = draws.masked
        batch_patches = self.sample(x)
        patches = batch_patches.patches  # [B, N, C, *P]
        labels = batch_patches.grid_index
        assert labels is not None
        batch = patches.shape[0]
        key_mask = torch.zeros(batch, self.num_positions, dtype=torch.bool, device=patches.device)
        key_mask.scatter_(1, masked, True)
        features = self.encoder.forward_features(patches, None, key_mask=key_mask)
        logits = self.head(features[:, self.encoder.num_prefix_tokens :])  # [B, N, N]
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        metrics = classification_diagnostics(
            logits.flatten(0, 1), labels.flatten(), self.num_positions
        )
        with torch.no_grad():
            hit = (logits.detach().argmax(dim=-1) == labels).float()
            metrics["accuracy_masked"] = hit.gather(1, masked).mean()
        return MP3Output(
            loss=loss, metrics=metrics, logits=logits, labels=labels, key_mask=key_mask
        )

    def extra_repr(self) -> str:
        return (
            f"num_positions={self.num_positions}, mask_ratio={self.mask_ratio}, "
            f"num_masked={self.num_masked}"
        )


def build_mp3(config: PretrainConfig, spec: SignalSpec) -> MP3Model:
    """MP3: the configured encoder (no position embedding) and a linear slot classifier.

    Args:
        config: ``encoder``, ``encoder_overrides``, ``patch_size`` and ``mask_ratio`` are read.
        spec: Shape of the data.

    Returns:
        The objective.
    """
    encoder = build_encoder(config, spec)
    return MP3Model(encoder, spec.spatial_shape, mask_ratio=config.mask_ratio)
