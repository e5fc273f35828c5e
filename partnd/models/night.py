"""A classifier that reads the whole night: every window's stage from the entire record.

The :class:`~partnd.models.sequence.SequenceClassifier` reads 21 windows (10.5 min) around a
window. The classical pipeline (YASA) reads more: rolling means over 7.5 and 2 minutes,
z-scored over the whole night, and the time of night. :class:`NightClassifier` gives a learned
model the same reach:

1. the window ViT embeds every window ``[C, T]`` once (``[D_w]``, as in the sequence classifier);
2. the temporal ViT of the :class:`~partnd.models.sequence.HierarchicalEncoder` reads *all* the
   windows of the record (or of a training crop) at once. It has no slot position embedding:
   positions enter as time,

   * a **distance bias** on every attention logit, ``-ln 2 * |t_i - t_j| / h`` with a learned
     half-life ``h`` per block and head (initialised geometrically from 1 minute to 4 hours:
     some heads read a window's neighbours, others the whole night; ALiBi, Press et al. 2022,
     with real onsets instead of token indices, so a gap in the record is a gap in time), and
   * a **time-of-night embedding** of the window's onset (hours since the record's first window,
     and the fraction of the recording elapsed; :func:`partnd.datasets.nights.time_of_night`)
     added to its token (an MLP whose output layer starts at zero);

3. a linear layer classifies every window token.

Nothing depends on a length: a record shorter or longer than every training crop is read whole,
in one pass, every window once (:meth:`NightClassifier.predict_night`). Padded places of a batch
are removed from the keys, so they cannot change a valid window's output.

**Pretrained temporal level.** PART across windows (:mod:`partnd.objectives.part_windows`)
pretrains the temporal ViT with slot embeddings for anchor windows and a mask embedding for
hidden ones, whose place it infers from their content. The night classifier keeps that ViT's
token projection, [CLS] token, blocks and norm; it drops the slot table (segment-relative slots
mean nothing in a night of another length) and folds the mask embedding into the token
projection's bias: every window enters as a window whose slot is hidden, and the distance bias
and the time embedding (which starts at zero) place it.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import Tensor, nn

from partnd._validation import check, check_batch_size
from partnd.models.sequence import (
    HierarchicalEncoder,
    RecordClassifier,
    SequenceClassifier,
    hierarchical_from_window,
)
from partnd.models.vit import ViTEncoder

__all__ = ["HALF_LIFE_HOURS", "TIME_FEATURES", "ContextClassifier", "NightClassifier"]

#: Range of the initial attention half-lives of the heads, in hours: geometric from 1 minute (two
#: windows) to 4 hours (half a night), the same in every block.
HALF_LIFE_HOURS = (1.0 / 60.0, 4.0)

#: Time features of a window: hours since the record's first window, fraction of the recording
#: elapsed at its onset.
TIME_FEATURES = 2


def _initial_half_lives(num_heads: int) -> Tensor:
    low, high = HALF_LIFE_HOURS
    if num_heads == 1:
        return torch.tensor([math.sqrt(low * high)])
    return torch.logspace(math.log10(low), math.log10(high), num_heads)


class NightClassifier(RecordClassifier):
    """Classify every window of a night from the whole night (see the module docstring).

    ``x: [B, L, C, T]`` with ``time: [B, L, 2]`` -> ``[B, L, K]``: ``L`` is any length (a whole
    record at prediction, a crop in training).

    Args:
        encoder: The hierarchical encoder (window ViT + temporal ViT), copied unless
            ``copy_encoder=False``; its temporal slot embedding is dropped and its mask
            embedding (when pretrained with one) folded into the token projection's bias.
        num_classes: Number of classes K.
        copy_encoder: Deep-copy ``encoder`` (default) instead of modifying it in place.
    """

    def __init__(
        self, encoder: HierarchicalEncoder, num_classes: int, *, copy_encoder: bool = True
    ) -> None:
        super().__init__(encoder, num_classes, copy_encoder=copy_encoder)
        temporal = self.encoder.temporal
        if temporal.pos_mask_token is not None:
            projection = temporal.patch_embed
            check(
                isinstance(projection, nn.Linear),
                "encoder",
                "a temporal level with the linear front-end (its mask embedding is folded into "
                "the token projection's bias)",
                type(projection).__name__,
            )
            with torch.no_grad():
                cast(nn.Linear, projection).bias.add_(temporal.pos_mask_token)
        if temporal.pos_embed is not None:
            temporal.remove_position_embedding()
        width = temporal.embed_dim
        heads = int(temporal.architecture["num_heads"])
        time_out = nn.Linear(width, width)
        nn.init.zeros_(time_out.weight)
        nn.init.zeros_(time_out.bias)
        self.time_embed = nn.Sequential(nn.Linear(TIME_FEATURES, width), nn.GELU(), time_out)
        #: [depth, H] log half-life of each head's distance bias, in hours.
        self.log_half_life = nn.Parameter(
            _initial_half_lives(heads).log().repeat(len(temporal.blocks), 1)
        )

    @classmethod
    def from_window_encoder(
        cls,
        window: ViTEncoder,
        num_classes: int,
        *,
        window_samples: int,
        temporal: str = "temporal_small",
        temporal_overrides: dict[str, Any] | None = None,
    ) -> NightClassifier:
        """A night classifier on a (pretrained or fresh) window encoder (copied), with a fresh
        temporal encoder (``temporal``: a :data:`~partnd.models.sequence.TEMPORAL_PRESETS` name,
        ``temporal_overrides`` its overrides)."""
        encoder = hierarchical_from_window(window, window_samples, temporal, temporal_overrides)
        return cls(encoder, num_classes, copy_encoder=False)

    @staticmethod
    def no_weight_decay() -> set[str]:
        """The half-lives are not weights to shrink (timm's convention)."""
        return {"log_half_life"}

    def attention_bias(self, hours: Tensor, valid: Tensor | None) -> Tensor:
        """The additive attention bias of every block.

        Args:
            hours: [B, L] window onsets in hours.
            valid: [B, L] bool, False for padding (removed from the keys), or ``None``.

        Returns:
            [depth, B, H, 1 + L, 1 + L] bias ([CLS] first: no distance to or from it), ``-inf``
            at padded keys.
        """
        distance = (hours[:, :, None] - hours[:, None, :]).abs().float()  # [B, L, L]
        rate = math.log(2.0) * torch.exp(-self.log_half_life)  # [depth, H]
        bias = -rate[:, None, :, None, None] * distance[None, :, None]  # [depth, B, H, L, L]
        bias = nn.functional.pad(bias, (1, 0, 1, 0))
        if valid is not None:
            keep = torch.cat([valid.new_ones(valid.shape[0], 1), valid], dim=1)
            bias = bias.masked_fill(~keep[None, :, None, None, :], float("-inf"))
        return bias

    def classify_embeddings(
        self, embeddings: Tensor, time: Tensor, valid: Tensor | None = None
    ) -> Tensor:
        """Classify nights (or crops) of window embeddings.

        Args:
            embeddings: [B, L, D_w] window embeddings.
            time: [B, L, 2] hours since the record's first window and fraction of the recording
                elapsed (:func:`partnd.datasets.nights.time_of_night`).
            valid: [B, L] bool, False for padding (``None``: all valid).

        Returns:
            [B, L, K] logits.
        """
        check(
            time.shape == (*embeddings.shape[:2], TIME_FEATURES),
            "time",
            f"a tensor [B, L, {TIME_FEATURES}] = {(*embeddings.shape[:2], TIME_FEATURES)} "
            "(hours since the first window, fraction of the night)",
            time,
        )
        temporal = self.encoder.temporal
        time = time.to(embeddings.dtype)
        tokens = temporal.patch_embed(embeddings) + self.time_embed(time)
        cls = temporal.cls_token.expand(tokens.shape[0], -1, -1).to(tokens.dtype)
        x = torch.cat([cls, tokens], dim=1)
        biases = self.attention_bias(time[..., 0], valid).to(x.dtype)
        for block, bias in zip(temporal.blocks, biases, strict=True):
            x = block(x, bias)
        return self.head(temporal.norm(x)[:, 1:])

    def forward(self, x: Tensor, valid: Tensor | None, time: Tensor) -> Tensor:
        """Classify every window of a batch of nights or crops.

        Args:
            x: [B, L, C, T] consecutive windows.
            valid: [B, L] bool, False for padding (``None``: all valid).
            time: [B, L, 2] time of night of every window (see :meth:`classify_embeddings`).

        Returns:
            [B, L, K] logits.
        """
        return self.classify_embeddings(self.encoder.embed_sequences(x, valid), time, valid)

    @torch.no_grad()
    def predict_night(self, windows: Tensor, time: Tensor, *, batch_size: int = 256) -> Tensor:
        """Probabilities of every window of one night, read whole: each window is embedded once
        (``batch_size`` at a time) and the temporal ViT reads all of them in one pass.

        Args:
            windows: [N, C, T] the night's windows, in order.
            time: [N, 2] their time of night (:func:`partnd.datasets.nights.time_of_night`).
            batch_size: Windows per pass of the window ViT.

        Returns:
            [N, K] float32 probabilities on the CPU.
        """
        check_batch_size(batch_size)
        embeddings = self.encoder.embed_night(windows, batch_size)  # checks the windows
        check(
            time.shape == (len(windows), TIME_FEATURES),
            "time",
            f"a tensor [N, {TIME_FEATURES}] = [{len(windows)}, {TIME_FEATURES}]",
            time,
        )
        logits = self.classify_embeddings(embeddings[None], time.to(embeddings.device)[None])[0]
        return logits.float().softmax(-1).cpu()


#: A classifier that reads each window with others of its record: a fixed context of consecutive
#: windows, or the whole night.
ContextClassifier = SequenceClassifier | NightClassifier
