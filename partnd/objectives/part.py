"""The PART objective (PAirwise Relative Translations) as one ``nn.Module``.

One training step, for inputs ``x: [B, C, *spatial]`` (Ayoughi et al., Sec. 3):

1. the sampler cuts N boxes per example at continuous random positions (no gradient);
2. the ViT encodes the patches without position embedding (``[B, 1 + N, D]``, [CLS] first);
3. ``num_pairs`` (reference, target) index pairs are drawn, shared by the batch (as in the authors'
   code) or per example;
4. the targets are the float relative offsets ``(c_tgt - c_ref) / s_ref`` (and, with
   ``scale_targets``, the extent ratios ``s_tgt / s_ref``);
5. a relative head predicts them from the patch tokens; the loss is the mean squared error over
   pairs and target channels, computed in float32 even under autocast.

**Every parameter is trained.** The heads see only the patch tokens X' (the paper's keys/values
exclude [CLS]), yet the [CLS] token still receives a gradient: it sits in the encoder's
self-attention, where every patch token attends to it in every block, so it shapes the patch
tokens the head consumes. No auxiliary or zero-weight loss term is needed, and DDP can run without
``find_unused_parameters``. The only parameters that would stay untouched are a [CLS] classifier
and an unused position embedding, so the constructor rejects an encoder with ``num_classes > 0`` and
requires ``use_positions`` exactly when the encoder has a position embedding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check, check_finite
from partnd.models.vit import ViTEncoder
from partnd.sampling import PatchBatch
from partnd.targets import all_pairs, relative_targets, sample_pairs

__all__ = ["PARTModel", "PARTOutput", "PatchSampler"]


class PatchSampler(Protocol):
    """Anything that cuts a :class:`~partnd.sampling.PatchBatch` out of ``x: [B, C, *spatial]``."""

    ndim: int
    patch_size: tuple[int, ...]

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> PatchBatch: ...


@dataclass(frozen=True)
class PARTOutput:
    """Result of one PART forward pass.

    Attributes:
        loss: Scalar float32 mean squared error over pairs and target channels.
        pred: [B, K, out_dim] predicted relative targets.
        target: [B, K, out_dim] float ground truth.
        ref: [K] (shared pairs) or [B, K] reference patch indices.
        tgt: Target patch indices, same shape as ``ref``.
        patches: The sampled :class:`~partnd.sampling.PatchBatch`.
    """

    loss: Tensor
    pred: Tensor
    target: Tensor
    ref: Tensor
    tgt: Tensor
    patches: PatchBatch


class PARTModel(nn.Module):
    """Encoder + relative head + sampler, trained by regressing pairwise relative translations.

    Args:
        encoder: A :class:`ViTEncoder` with ``num_classes == 0``.
        head: A relative head (see :mod:`partnd.models.heads`) with ``out_dim`` equal to
            ``encoder.ndim * (2 if scale_targets else 1)`` and ``embed_dim == encoder.embed_dim``.
        sampler: Patch sampler (e.g. :class:`~partnd.sampling.OffGridSampler` for PART,
            :class:`~partnd.sampling.GridSampler` for PART-grid) with the encoder's ``ndim`` and
            ``patch_size``.
        num_pairs: Pairs K drawn per step (the paper's sweet spot is 2048 for CIFAR-100).
        scale_targets: Also regress the extent ratios ``s_tgt / s_ref`` (scale/aspect extension).
        shared_pairs: Draw one set of pairs for the whole batch (the authors' code) instead of one
            per example.
        use_positions: Add the encoder's slot position embedding at ``PatchBatch.grid_index``;
            must be ``True`` exactly when the encoder has a position embedding.
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
        use_positions: bool = False,
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
        check(
            use_positions == (encoder.pos_embed is not None),
            "use_positions",
            f"{encoder.pos_embed is not None} (it must be True exactly when the encoder has a "
            "position embedding, otherwise parameters go untrained or positions are missing)",
            repr(use_positions),
        )
        self.encoder = encoder
        self.head = head
        self.sampler = sampler
        self.num_pairs = num_pairs
        self.scale_targets = scale_targets
        self.shared_pairs = shared_pairs
        self.use_positions = use_positions

    def encode_patches(self, patches: PatchBatch) -> Tensor:
        """Encode a patch batch and drop the prefix ([CLS]) token.

        Args:
            patches: A :class:`~partnd.sampling.PatchBatch` with ``patches: [B, N, C, *P]``.

        Returns:
            [B, N, D] patch tokens X'.
        """
        positions = None
        if self.use_positions:
            check(
                patches.grid_index is not None,
                "patches",
                "a PatchBatch with grid_index (use_positions=True)",
                "grid_index=None",
            )
            positions = patches.grid_index
        features = self.encoder.forward_features(patches.patches, positions=positions)
        return features[:, self.encoder.num_prefix_tokens :]

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> PatchBatch:
        """Check ``x: [B, C, *spatial]`` and cut patches from it without gradient."""
        check(
            x.dim() == 2 + self.encoder.ndim and x.shape[1] == self.encoder.in_chans,
            "x",
            f"a tensor [B, {self.encoder.in_chans}, *spatial] with {self.encoder.ndim} spatial "
            "dimension(s)",
            x,
        )
        check_finite(x, "x")
        with torch.no_grad():
            return self.sampler(x, generator=generator)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> PARTOutput:
        """Run one PART step.

        Args:
            x: [B, C, *spatial] inputs.
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
            patches.centers, patches.sizes, ref, tgt, scale=self.scale_targets
        ).float()
        pred = self.head(tokens, ref, tgt)
        loss = F.mse_loss(pred.float(), target)
        return PARTOutput(loss=loss, pred=pred, target=target, ref=ref, tgt=tgt, patches=patches)

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
            f"shared_pairs={self.shared_pairs}, use_positions={self.use_positions}, "
            f"sampler={self.sampler!r}"
        )
