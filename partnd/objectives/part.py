"""PART (PAirwise Relative Translations) and PART-grid as one objective module.

One training step, for inputs ``x: [B, C, *spatial]`` (Ayoughi et al., Sec. 3):

1. the sampler cuts N boxes per example (no gradient): off-grid boxes at random integer positions
   for PART (:class:`~partnd.patches.sampling.OffGridSampler`), the fixed on-grid tiles for the
   PART-grid
   ablation (:class:`~partnd.patches.sampling.GridSampler`);
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

**Anchored PART (optional, EEG).** The paper's EEG run "randomly masks out 20% of the position
embeddings". A slot embedding on every patch gives the answer away (see ``docs/part.md``), so when
the encoder has one, PART runs *anchored*: per example ``M = max(1, round(r N))`` patches get the
mask embedding instead of their slot's, the others are anchors whose slot is visible, and the loss
and every diagnostic use only pairs whose **target** is masked. Their answer cannot be read from
the visible slots: the target's position must be found from its content (e.g. by matching it
against overlapping anchors). The diagnostics' floor is then the predictor that knows every
anchor's slot and nothing else (``(E[c] - c^_ref) / s_ref`` with ``c^_ref`` the slot centre of a
visible reference, else ``E[c]``), not the constant.

**Local pairs (optional).** With ``pair_radius = r`` pairs are drawn, per example and with
replacement, only among patches whose centres lie less than ``r`` reference-patch lengths apart in
every dimension. On a window whose content is stationary (30 s of EEG), only such pairs have an
answer the content determines (overlapping patches, ``r = 1``); far pairs are unpredictable, and
their target variance (about 140 squared patch lengths for 40 patches of 1 s in 30 s) swamps the
learnable part in the loss (see ``docs/part.md``). ``None`` (the paper) draws any pair.

**Every parameter is trained.** The heads see only the patch tokens X' (the paper's keys/values
exclude [CLS]), yet the [CLS] token still receives a gradient: every patch token attends to it in
every block. DDP can therefore run without ``find_unused_parameters``. The constructor rejects an
encoder with a [CLS] classifier, and a position embedding without a mask embedding (it would give
the answer away).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check
from partnd.models.vit import ViTEncoder
from partnd.objectives.anti_collapse import variance_covariance_terms
from partnd.objectives.base import Objective, ObjectiveOutput
from partnd.objectives.diagnostics import regression_diagnostics, target_names
from partnd.patches.sampling import Boxes, PatchBatch
from partnd.patches.targets import all_pairs, relative_targets, sample_pairs

__all__ = ["PARTDraws", "PARTModel", "PARTOutput", "PatchSampler"]


class PatchSampler(Protocol):
    """Anything that draws boxes for inputs ``x: [B, C, *spatial]`` and cuts a
    :class:`~partnd.patches.sampling.PatchBatch` out of them."""

    ndim: int
    patch_size: tuple[int, ...]

    def draw(
        self,
        shape: Sequence[int],
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ) -> Boxes: ...

    def cut(self, x: Tensor, boxes: Boxes) -> PatchBatch: ...


@dataclass(frozen=True)
class PARTDraws:
    """Every random quantity of one PART step, drawn before the forward (:meth:`PARTModel.draw`).

    Attributes:
        boxes: The sampler's :class:`~partnd.patches.sampling.Boxes`.
        ref: [K] (shared pairs) or [B, K] reference patch indices.
        tgt: Target patch indices, same shape as ``ref``.
        position_mask: Anchored PART: [B, N] bool, True where the slot is hidden; else ``None``.
    """

    boxes: Boxes
    ref: Tensor
    tgt: Tensor
    position_mask: Tensor | None = None


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
        patches: The sampled :class:`~partnd.patches.sampling.PatchBatch`.
        baseline: [B, K, out_dim] predictions of the content-free predictor that knows the
            visible slots (anchored PART), ``None`` when that predictor is the best constant.
    """

    pred: Tensor
    target: Tensor
    ref: Tensor
    tgt: Tensor
    patches: PatchBatch
    baseline: Tensor | None = None


class PARTModel(Objective):
    """Encoder + relative head + sampler, trained by regressing pairwise relative translations.

    Args:
        encoder: A :class:`ViTEncoder` without classifier (``num_classes == 0``) and without
            position embedding.
        head: A relative head (see :mod:`partnd.models.heads`) with ``out_dim`` equal to
            ``encoder.ndim * (2 if scale_targets else 1)`` and ``embed_dim == encoder.embed_dim``.
        sampler: Patch sampler (e.g. :class:`~partnd.patches.sampling.OffGridSampler` for PART,
            :class:`~partnd.patches.sampling.GridSampler` for PART-grid) with the encoder's
            ``ndim`` and
            ``patch_size``.
        num_pairs: Pairs K drawn per step (the paper's sweet spot is 2048 for CIFAR-100).
        scale_targets: Also regress the extent ratios ``s_tgt / s_ref`` (scale/aspect extension).
        shared_pairs: Draw one set of pairs for the whole batch (the authors' code) instead of one
            per example (anchored PART and local pairs always draw per example).
        pair_radius: Draw only pairs closer than this many reference-patch lengths in every
            dimension (local pairs); ``None`` draws any pair.
        variance_weight: Weight of VICReg's variance term on the encoder's features
            (:mod:`partnd.objectives.anti_collapse`; 0: off); logged as ``variance_term``.
        covariance_weight: Weight of VICReg's covariance term (0: off); ``covariance_term``.
        position_free: Encode the patches without the encoder's position embedding, which
            belongs to another view of it (``part_joint``: the window encoder's tile embedding
            of the across-windows view); the model is then never anchored.

    An encoder with a slot position embedding (and a mask embedding, ``pos_mask_ratio > 0``)
    makes the model anchored (see the module docstring); the sampler must then provide
    ``grid_index``.
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
        pair_radius: float | None = None,
        variance_weight: float = 0.0,
        covariance_weight: float = 0.0,
        position_free: bool = False,
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
            encoder.pos_embed is None or encoder.pos_mask_token is not None or position_free,
            "encoder",
            "an encoder without position embedding, or with one and a mask embedding "
            "(pos_mask_ratio > 0: anchored PART); visible slot embeddings on every patch would "
            "give the answer away",
            f"an encoder with {encoder.num_positions} slot embeddings and pos_mask_ratio 0",
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
            pair_radius is None or (pair_radius > 0 and encoder.pos_embed is None),
            "pair_radius",
            "None, or a positive radius without a position embedding (not anchored PART)",
            repr(pair_radius),
        )
        check(
            variance_weight >= 0 and covariance_weight >= 0,
            "PretrainConfig.variance_weight",
            "weights >= 0 (variance_weight and covariance_weight)",
            f"{variance_weight}, {covariance_weight}",
        )
        self.variance_weight = float(variance_weight)
        self.covariance_weight = float(covariance_weight)
        self.pair_radius = pair_radius
        self.encoder = encoder
        self.head = head
        self.sampler = sampler
        self.num_pairs = num_pairs
        self.scale_targets = scale_targets
        self.shared_pairs = shared_pairs
        self.target_names = target_names(encoder.ndim, scale_targets)
        self.position_free = bool(position_free)
        self.anchored = encoder.pos_embed is not None and not position_free

    def encode_patches(self, patches: PatchBatch, position_mask: Tensor | None = None) -> Tensor:
        """Encode a patch batch and drop the prefix ([CLS]) token.

        Args:
            patches: A :class:`~partnd.patches.sampling.PatchBatch` with ``patches: [B, N, C, *P]``.
            position_mask: Anchored PART: [B, N] bool, True where the slot is hidden (``None``:
                every slot hidden, so no position reaches the encoder).

        Returns:
            [B, N, D] patch tokens X'.
        """
        return self.encode(patches, position_mask)[0]

    def slots(
        self, patches: PatchBatch, position_mask: Tensor | None
    ) -> tuple[Tensor | None, Tensor | None]:
        """The slot indices and hidden-slot mask the encoder reads (``None, None`` unless
        anchored; anchored without a mask: every slot hidden)."""
        if not self.anchored:
            return None, position_mask
        positions = patches.grid_index
        check(
            positions is not None,
            "patches",
            "a PatchBatch with grid_index (anchored PART)",
            "grid_index=None",
        )
        assert positions is not None
        if position_mask is None:
            position_mask = torch.ones_like(positions, dtype=torch.bool)
        return positions, position_mask

    def encode(
        self, patches: PatchBatch, position_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Encode a patch batch (see :meth:`encode_patches`).

        Returns:
            ``[B, N, D]`` patch tokens, and the features the anti-collapse term reads
            (``variance_weight``, ``covariance_weight``): here the same tokens.
        """
        positions, position_mask = self.slots(patches, position_mask)
        features = self.encoder.forward_features(
            patches.patches,
            positions,
            position_mask=position_mask,
            without_positions=self.position_free,
        )
        tokens = features[:, self.encoder.num_prefix_tokens :]
        return tokens, tokens

    def _anchored_pairs(
        self,
        batch: int,
        num_patches: int,
        generator: torch.Generator | None,
        device: torch.device,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Hide ``M`` slots per example and draw pairs whose target is hidden.

        Returns:
            ``position_mask: [B, N]`` and per-example ``ref, tgt: [B, K]``.
        """
        ratio = self.encoder.pos_mask_ratio
        num_masked = min(num_patches - 1, max(1, round(ratio * num_patches)))
        draw_device = generator.device if generator is not None else device

        def uniform(*shape: int) -> Tensor:
            return torch.rand(shape, generator=generator, device=draw_device).to(device)

        masked = uniform(batch, num_patches).argsort(dim=1)[:, :num_masked]  # [B, M]
        position_mask = torch.zeros(batch, num_patches, dtype=torch.bool, device=device)
        position_mask.scatter_(1, masked, True)
        choice = (uniform(batch, self.num_pairs) * num_masked).long().clamp_(max=num_masked - 1)
        tgt = masked.gather(1, choice)
        ref = (uniform(batch, self.num_pairs) * (num_patches - 1)).long()
        ref = ref.clamp_(max=num_patches - 2)
        ref = ref + (ref >= tgt).long()
        return position_mask, ref, tgt

    def _local_pairs(
        self, boxes: Boxes, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        """Per-example pairs among patches closer than ``pair_radius`` reference lengths.

        An example without such a pair draws among all pairs (each pair keeps a tiny weight).

        Returns:
            ``ref, tgt: [B, K]``.
        """
        assert self.pair_radius is not None
        centers, sizes = boxes.centers, boxes.sizes
        num_patches = int(centers.shape[1])
        offsets = (centers[:, None, :, :] - centers[:, :, None, :]).abs()  # [B, ref, tgt, d]
        close = (offsets < self.pair_radius * sizes[:, :, None, :]).all(dim=-1)
        eye = torch.eye(num_patches, dtype=torch.bool, device=centers.device)
        weights = (close & ~eye).float() + (~eye).float() * 1e-6
        draw = weights.flatten(1)
        if generator is not None and generator.device != draw.device:
            draw = draw.to(generator.device)
        flat = torch.multinomial(draw, self.num_pairs, replacement=True, generator=generator)
        flat = flat.to(centers.device)
        return torch.div(flat, num_patches, rounding_mode="floor"), flat % num_patches

    def _anchored_floor(
        self,
        patches: PatchBatch,
        spatial: tuple[int, ...],
        position_mask: Tensor,
        ref: Tensor,
        tgt: Tensor,
    ) -> Tensor:
        """[B, K, T] predictions of the content-free predictor that knows the visible slots."""
        centers, sizes = patches.centers, patches.sizes
        ndim = centers.shape[-1]
        patch = centers.new_tensor(self.encoder.patch_size)
        last_tile = centers.new_tensor(
            [length // p - 1 for length, p in zip(spatial, self.encoder.patch_size, strict=True)]
        )
        tile = torch.minimum(torch.div(centers, patch, rounding_mode="floor"), last_tile)
        slot_centres = (tile + 0.5) * patch
        mean_centre = centers.mean(dim=(0, 1))
        index = ref[..., None].expand(-1, -1, ndim)
        visible = ~position_mask.gather(1, ref)
        ref_guess = torch.where(visible[..., None], slot_centres.gather(1, index), mean_centre)
        translation = (mean_centre - ref_guess) / sizes.gather(1, index)
        if not self.scale_targets:
            return translation
        ratios = relative_targets(centers, sizes, ref, tgt, scale=True, validate=False)
        return torch.cat(
            [translation, ratios[..., ndim:].mean(dim=(0, 1)).expand_as(translation)], -1
        )

    def _check_input(self, x: Tensor) -> None:
        check(
            x.dim() == 2 + self.encoder.ndim and x.shape[1] == self.encoder.in_chans,
            "x",
            f"a tensor [B, {self.encoder.in_chans}, *spatial] with {self.encoder.ndim} spatial "
            "dimension(s)",
            x,
        )

    def cut(self, x: Tensor, boxes: Boxes) -> PatchBatch:
        """Cut the patches of drawn ``boxes`` from ``x: [B, C, *spatial]`` (no gradient, no
        random draws; shape checks only)."""
        self._check_input(x)
        with torch.no_grad():
            return self.sampler.cut(x, boxes)

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> PatchBatch:
        """Draw boxes and cut patches from ``x: [B, C, *spatial]`` without gradient (shape checks
        only)."""
        self._check_input(x)
        return self.cut(x, self.sampler.draw(x.shape, generator, x.device))

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> PARTDraws:
        """Draw every random quantity of a step on ``x`` (reads its shape and device only): the
        boxes, then the hidden slots and pairs (anchored), the local pairs, or the pairs.

        The same draws, in the same order, from the same generator as the step drew inside its
        forward before they were split out, so a seed gives the boxes and pairs it always gave.

        Args:
            x: [B, C, *spatial] inputs.
            generator: Random source (same seed, same draws).

        Returns:
            The :class:`PARTDraws`, on ``x``'s device.
        """
        self._check_input(x)
        boxes = self.sampler.draw(x.shape, generator, x.device)
        batch, num_patches = int(boxes.sizes.shape[0]), int(boxes.sizes.shape[1])
        if self.anchored:
            position_mask, ref, tgt = self._anchored_pairs(batch, num_patches, generator, x.device)
            return PARTDraws(boxes=boxes, ref=ref, tgt=tgt, position_mask=position_mask)
        if self.pair_radius is not None:
            ref, tgt = self._local_pairs(boxes, generator)
        else:
            ref, tgt = sample_pairs(
                num_patches,
                self.num_pairs,
                batch_size=None if self.shared_pairs else batch,
                generator=generator,
                device=x.device,
            )
        return PARTDraws(boxes=boxes, ref=ref, tgt=tgt)

    def forward_with_draws(self, x: Tensor, draws: PARTDraws) -> PARTOutput:
        """Run one PART step on the step's boxes and pairs (``forward(x, generator)`` draws
        them).

        Args:
            x: [B, C, *spatial] inputs (finite; validated once where the data enter).
            draws: The step's draws (:meth:`draw`); the forward draws nothing, and compiles as
                one graph.

        Returns:
            A :class:`PARTOutput`; call ``output.loss.backward()`` to train.
        """
        patches = self.cut(x, draws.boxes)
        ref, tgt = draws.ref, draws.tgt
        baseline = None
        if self.anchored:
            position_mask = draws.position_mask
            assert position_mask is not None
            tokens, features = self.encode(patches, position_mask)
            spatial = tuple(int(length) for length in x.shape[2:])
            baseline = self._anchored_floor(patches, spatial, position_mask, ref, tgt)
        else:
            tokens, features = self.encode(patches)
        target = relative_targets(
            patches.centers, patches.sizes, ref, tgt, scale=self.scale_targets, validate=False
        ).float()
        pred = self.head(tokens, ref, tgt)
        loss = F.mse_loss(pred.float(), target)
        metrics = regression_diagnostics(
            pred, target, self.target_names, self.encoder.ndim, baseline
        )
        if self.variance_weight > 0 or self.covariance_weight > 0:
            variance, covariance = variance_covariance_terms(features.flatten(0, -2))
            loss = loss + self.variance_weight * variance + self.covariance_weight * covariance
            metrics["variance_term"] = variance.detach()
            metrics["covariance_term"] = covariance.detach()
        return PARTOutput(
            loss=loss,
            metrics=metrics,
            pred=pred,
            target=target,
            ref=ref,
            tgt=tgt,
            patches=patches,
            baseline=baseline,
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
                already sampled :class:`~partnd.patches.sampling.PatchBatch` (pass one to know the
                boxes).
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
            patches: A :class:`~partnd.patches.sampling.PatchBatch` with N patches per example.

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
            f"shared_pairs={self.shared_pairs}, pair_radius={self.pair_radius}, "
            f"anchored={self.anchored}, sampler={self.sampler!r}"
        )
