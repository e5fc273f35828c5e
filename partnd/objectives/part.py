"""PART (PAirwise Relative Translations) and PART-grid as one objective module.

One training step, for inputs ``x: [B, C, *spatial]`` (Ayoughi et al., Sec. 3):

1. the sampler cuts N boxes per example (no gradient): off-grid boxes at random integer positions
   for PART (:class:`~partnd.sampling.OffGridSampler`), the fixed on-grid tiles for the PART-grid
   ablation (:class:`~partnd.sampling.GridSampler`);
2. the ViT encodes the patches **without position embedding** (``[B, 1 + N, D]``, [CLS] first),
   so the only way to the answer is the patches' content;
3. ``num_pairs`` (reference, target) index pairs are drawn, shared by the batch (as in the authors'
   code) or per example;
4. the targets are the float relative offsets ``(c_tgt - c_ref) / s_ref`` (and, with
   ``scale_targets``, the extent ratios ``s_tgt / s_ref``);
5. a relative head predicts them from the patch tokens; the loss is the mean squared error over
   pairs and target channels (in squared reference-patch lengths), computed in float32 even under
   autocast. Diagnostics (:func:`~partnd.objectives.diagnostics.regression_diagnostics`) put it
   next to the error of a predictor that ignores the content.

**Every parameter is trained.** The heads see only the patch tokens X' (the paper's keys/values
exclude [CLS]), yet the [CLS] token still receives a gradient: every patch token attends to it in
every block. DDP can therefore run without ``find_unused_parameters``. The constructor rejects an
encoder with a [CLS] classifier or a position embedding (neither would be trained, and a slot
embedding of off-grid patches gives the answer away: see ``docs/part.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.vit import ViTEncoder
from partnd.objectives.base import Objective, ObjectiveOutput
from partnd.objectives.diagnostics import regression_diagnostics, target_names
from partnd.sampling import PatchBatch
from partnd.targets import all_pairs, relative_targets, sample_pairs

__all__ = ["PARTModel", "PARTOutput", "PatchSampler"]


class PatchSampler(Protocol):
    """Anything that cuts a :class:`~partnd.sampling.PatchBatch` out of ``x: [B, C, *spatial]``."""

    ndim: int
    patch_size: tuple[int, ...]

    def __call__(
        self, x: Tensor, generator: torch.Generator | None = None, *, validate: bool = True
    ) -> PatchBatch: ...


@dataclass(frozen=True)
class PARTOutput(ObjectiveOutput):
    """Result of one PART forward pass.

    Attributes:
        loss: Scalar float32 mean squared error over pairs and target channels.
        metrics: Diagnostics next to their content-free floors (``nmse``, ``r2_<dim>``,
            ``mse_<dim>``, ``mse_floor_<dim>``, ``euclid``, ``euclid_floor``).
        pred: [B, K, out_dim] predicted relative targets.
        target: [B, K, out_dim] float ground truth.
        ref: [K] (shared pairs) or [B, K] reference patch indices.
        tgt: Target patch indices, same shape as ``ref``.
        patches: The sampled :class:`~partnd.sampling.PatchBatch`.
    """

    pred: Tensor
    target: Tensor
    ref: Tensor
    tgt: Tensor
    patches: PatchBatch


class PARTModel(Objective):
    """Encoder + relative head + sampler, trained by regressing pairwise relative translations.

    Args:
        encoder: A :class:`ViTEncoder` without classifier (``num_classes == 0``) and without
            position embedding.
        head: A relative head (see :mod:`partnd.models.heads`) with ``out_dim`` equal to
            ``encoder.ndim * (2 if scale_targets else 1)`` and ``embed_dim == encoder.embed_dim``.
        sampler: Patch sampler (e.g. :class:`~partnd.sampling.OffGridSampler` for PART,
            :class:`~partnd.sampling.GridSampler` for PART-grid) with the encoder's ``ndim`` and
            ``patch_size``.
        num_pairs: Pairs K drawn per step (the paper's sweet spot is 2048 for CIFAR-100).
        scale_targets: Also regress the extent ratios ``s_tgt / s_ref`` (scale/aspect extension).
        shared_pairs: Draw one set of pairs for the whole batch (the authors' code) instead of one
            per example.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        head: nn.Module,
        sampler: PatchSampler,
        *,
        num_pairs: int,
        scale_targets: bool = False,
        shared_pairs: bool = True,
    ) -> None:
        super().__init__()
        self.out_dim = encoder.ndim * (2 if scale_targets else 1)
        check(
            encoder.num_classes == 0,
            "encoder",
            "an encoder with num_classes=0 (PART trains no classifier)",
            f"num_classes={encoder.num_classes}",
        )
        check(
            encoder.pos_embed is None,
            "encoder",
            "an encoder without position embedding (PART learns positions from content; a slot "
            "embedding of the patches would give the answer away)",
            f"an encoder with {encoder.num_positions} slot embeddings",
        )
        check(
            getattr(head, "out_dim", self.out_dim) == self.out_dim,
            "head",
            f"a head with out_dim={self.out_dim} (ndim={encoder.ndim}, "
            f"scale_targets={scale_targets})",
            f"out_dim={getattr(head, 'out_dim', None)}",
        )
        check(
            getattr(head, "embed_dim", encoder.embed_dim) == encoder.embed_dim,
            "head",
            f"a head with embed_dim={encoder.embed_dim} (the encoder's width)",
            f"embed_dim={getattr(head, 'embed_dim', None)}",
        )
        check(
            sampler.ndim == encoder.ndim and tuple(sampler.patch_size) == encoder.patch_size,
            "sampler",
            f"a sampler with ndim={encoder.ndim} and patch_size={encoder.patch_size}",
            f"ndim={sampler.ndim}, patch_size={tuple(sampler.patch_size)}",
        )
        check(num_pairs >= 1, "num_pairs", "a positive int", repr(num_pairs))
        self.encoder = encoder
        self.head = head
        self.sampler = sampler
        self.num_pairs = num_pairs
        self.scale_targets = scale_targets
        self.shared_pairs = shared_pairs
        self.target_names = target_names(encoder.ndim, scale_targets)

    def encode_patches(self, patches: PatchBatch) -> Tensor:
        """Encode a patch batch and drop the prefix ([CLS]) token.

        Args:
            patches: A :class:`~partnd.sampling.PatchBatch` with ``patches: [B, N, C, *P]``.

        Returns:
            [B, N, D] patch tokens X'.
        """
        features = self.encoder.forward_features(patches.patches)
        return features[:, self.encoder.num_prefix_tokens :]

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> PatchBatch:
        """Cut patches from ``x: [B, C, *spatial]`` without gradient (shape checks only)."""
        check(
            x.dim() == 2 + self.encoder.ndim and x.shape[1] == self.encoder.in_chans,
            "x",
            f"a tensor [B, {self.encoder.in_chans}, *spatial] with {self.encoder.ndim} spatial "
            "dimension(s)",
            x,
        )
        with torch.no_grad():
            return self.sampler(x, generator=generator, validate=False)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> PARTOutput:
        """Run one PART step.

        Args:
            x: [B, C, *spatial] inputs (finite; validated once where the data enter).
            generator: Random source for boxes and pairs (same seed, same boxes and pairs).

        Returns:
            A :class:`PARTOutput`; call ``output.loss.backward()`` to train.
        """
        patches = self.sample(x, generator)
        tokens = self.encode_patches(patches)
        batch, num_patches = tokens.shape[:2]
        ref, tgt = sample_pairs(
            num_patches,
            self.num_pairs,
            batch_size=None if self.shared_pairs else batch,
            generator=generator,
            device=tokens.device,
        )
        target = relative_targets(
            patches.centers, patches.sizes, ref, tgt, scale=self.scale_targets, validate=False
        ).float()
        pred = self.head(tokens, ref, tgt)
        loss = F.mse_loss(pred.float(), target)
        metrics = regression_diagnostics(pred, target, self.target_names, self.encoder.ndim)
        return PARTOutput(
            loss=loss, metrics=metrics, pred=pred, target=target, ref=ref, tgt=tgt, patches=patches
        )

    def predict_pairs(
        self,
        x_or_patches: Tensor | PatchBatch,
        ref: Tensor,
        tgt: Tensor,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Predict relative targets for given pairs (gradient mode is left to the caller).

        Args:
            x_or_patches: [B, C, *spatial] inputs (patches are sampled, with ``generator``) or an
                already sampled :class:`~partnd.sampling.PatchBatch` (pass one to know the boxes).
            ref: [K] or [B, K] reference patch indices.
            tgt: Target patch indices, same shape as ``ref``.
            generator: Random source for sampling when ``x_or_patches`` is a tensor.

        Returns:
            [B, K, out_dim] predictions.
        """
        patches = (
            x_or_patches
            if isinstance(x_or_patches, PatchBatch)
            else self.sample(x_or_patches, generator)
        )
        return self.head(self.encode_patches(patches), ref, tgt)

    def predict_all_pairs(self, patches: PatchBatch) -> Tensor:
        """Predict the relative targets of all N x N ordered pairs (diagonal included).

        Used by the capability figures: off-grid reconstruction (row ``i`` places every patch
        relative to reference ``i``), antisymmetry, and patch uncertainty (column ``j`` is target
        ``j``'s position as seen from every reference).

        Args:
            patches: A :class:`~partnd.sampling.PatchBatch` with N patches per example.

        Returns:
            [B, N, N, out_dim]; entry ``[b, i, j]`` is the prediction for reference ``i``, target
            ``j``.
        """
        tokens = self.encode_patches(patches)
        batch, num_patches = tokens.shape[:2]
        ref, tgt = all_pairs(num_patches, device=tokens.device)
        pred = self.head(tokens, ref, tgt)
        return pred.view(batch, num_patches, num_patches, pred.shape[-1])

    def extra_repr(self) -> str:
        return (
            f"num_pairs={self.num_pairs}, scale_targets={self.scale_targets}, "
            f"shared_pairs={self.shared_pairs}, sampler={self.sampler!r}"
        )
