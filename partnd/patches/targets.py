"""PART's regression targets: relative translations (and scales) between pairs of boxes.

For a pair (reference ``i``, target ``j``) with centres ``c`` and extents ``s`` per dimension ``d``
(Ayoughi et al., "How PARTs assemble into wholes", Eq. for theta):

* translation ``Δ_d = (c_j,d - c_i,d) / s_i,d`` (``Δt`` for signals, ``Δy, Δx`` for images in the
  input's axis order),
* with the scale/aspect extension also ``s_j,d / s_i,d`` (``Δh, Δw``).

Targets are floats (the authors' code truncated them to integers, which is not done here). See
``docs/sampling.md`` for a worked example.
"""

from __future__ import annotations

import torch
from torch import Tensor

from partnd._validation import check, check_finite, check_in_range

__all__ = ["all_pairs", "relative_targets", "sample_pairs"]


def _check_pair_index(index: Tensor, argument: str, batch: int, num_patches: int) -> None:
    check(
        isinstance(index, Tensor)
        and not index.is_floating_point()
        and not index.is_complex()
        and index.dtype != torch.bool,
        argument,
        "an integer index tensor [K] or [B, K]",
        index,
    )
    check(
        index.dim() == 1 or (index.dim() == 2 and int(index.shape[0]) == batch),
        argument,
        f"an index tensor [K] or [B={batch}, K]",
        index,
    )
    if index.numel() > 0:
        check_in_range(int(index.min()), int(index.max()), num_patches, argument, "patch indices")


def _select(values: Tensor, index: Tensor) -> Tensor:
    """Pick ``values: [B, N, D]`` at ``index: [K]`` or ``[B, K]`` -> ``[B, K, D]``."""
    if index.dim() == 1:
        return values[:, index]
    return values.gather(1, index[..., None].expand(-1, -1, values.shape[-1]))


def relative_targets(
    centers: Tensor,
    sizes: Tensor,
    ref: Tensor,
    tgt: Tensor,
    *,
    scale: bool = False,
    validate: bool = True,
) -> Tensor:
    """Relative translation (and optionally scale) of target boxes with respect to reference boxes.

    Args:
        centers: ``[B, N, ndim]`` box centres (e.g. ``PatchBatch.centers``).
        sizes: ``[B, N, ndim]`` positive box extents (e.g. ``PatchBatch.sizes``).
        ref: Reference patch indices, ``[K]`` (shared by the batch) or ``[B, K]``, in ``[0, N)``.
        tgt: Target patch indices, same shape as ``ref``.
        scale: Also return the extent ratios ``s_tgt / s_ref`` (scale/aspect extension).
        validate: Check shapes, finiteness, positive extents and index ranges (host
            synchronisations); training loops that drew the boxes and pairs themselves pass
            ``False``.

    Returns:
        ``[B, K, ndim]`` translations ``(c_tgt - c_ref) / s_ref`` per dimension, or with ``scale``
        ``[B, K, 2 * ndim]``: the ``ndim`` translations followed by the ``ndim`` ratios
        ``s_tgt / s_ref``. Same dtype as ``centers``.

    Raises:
        InputError: On mismatched shapes, non-positive or non-finite extents, or indices outside
            ``[0, N)``.

    Example:
        >>> centers = torch.tensor([[[10.0, 20.0], [30.0, 10.0]]])
        >>> sizes = torch.tensor([[[10.0, 20.0], [5.0, 5.0]]])
        >>> relative_targets(centers, sizes, torch.tensor([0]), torch.tensor([1]))
        tensor([[[ 2.0000, -0.5000]]])
    """
    if validate:
        _check_boxes_and_pairs(centers, sizes, ref, tgt)
    ref = ref.to(centers.device)
    tgt = tgt.to(centers.device)
    ref_sizes = _select(sizes, ref)
    translation = (_select(centers, tgt) - _select(centers, ref)) / ref_sizes
    if not scale:
        return translation
    return torch.cat([translation, _select(sizes, tgt) / ref_sizes], dim=-1)


def _check_boxes_and_pairs(centers: Tensor, sizes: Tensor, ref: Tensor, tgt: Tensor) -> None:
    check(
        isinstance(centers, Tensor) and centers.is_floating_point() and centers.dim() == 3,
        "centers",
        "a floating point tensor [B, N, ndim]",
        centers,
    )
    check(
        isinstance(sizes, Tensor) and sizes.is_floating_point() and sizes.dim() == 3,
        "sizes",
        "a floating point tensor [B, N, ndim]",
        sizes,
    )
    check(
        sizes.shape == centers.shape,
        "sizes",
        f"the shape of centers {tuple(centers.shape)} (same B, N and ndim)",
        sizes,
    )
    check_finite(centers, "centers")
    check_finite(sizes, "sizes")
    check(bool((sizes > 0).all()), "sizes", "positive box extents", f"min {float(sizes.min())}")
    batch, num_patches = int(centers.shape[0]), int(centers.shape[1])
    _check_pair_index(ref, "ref", batch, num_patches)
    _check_pair_index(tgt, "tgt", batch, num_patches)
    check(tgt.shape == ref.shape, "tgt", f"the shape of ref {tuple(ref.shape)}", tgt)


def _split_off_diagonal(flat: Tensor, num_patches: int) -> tuple[Tensor, Tensor]:
    """Map indices in ``[0, N * (N - 1))`` onto the ordered pairs ``(i, j)`` with ``i != j``."""
    ref = torch.div(flat, num_patches - 1, rounding_mode="floor")
    rest = flat - ref * (num_patches - 1)
    tgt = rest + (rest >= ref).long()
    return ref, tgt


def sample_pairs(
    num_patches: int,
    num_pairs: int,
    *,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """Draw random ordered (reference, target) pairs of distinct patches.

    When ``num_pairs <= N * (N - 1)`` the pairs are drawn without replacement from the
    ``N * (N - 1)`` ordered off-diagonal pairs (all distinct); beyond that every pair is drawn
    independently and uniformly with replacement (duplicates occur). Vectorised: a random
    permutation (shared pairs) or the top ``K`` of random keys per example (``O(B * N^2)`` memory).

    Args:
        num_patches: Number of patches ``N`` (>= 2).
        num_pairs: Number of pairs ``K`` (>= 1); the paper uses 2048 for CIFAR-100.
        batch_size: ``None`` draws one set of pairs shared by the whole batch (as the authors'
            code), an int ``B`` draws independent pairs per example.
        generator: Source of randomness; draws happen on its device and are moved to ``device``.
        device: Device of the returned indices (default: the generator's device, else CPU).

    Returns:
        ``(ref, tgt)``: long tensors ``[K]`` each (``batch_size=None``) or ``[B, K]`` each, with
        ``ref != tgt`` everywhere.
    """
    check(
        isinstance(num_patches, int) and num_patches >= 2, "num_patches", "an int >= 2", num_patches
    )
    check(isinstance(num_pairs, int) and num_pairs >= 1, "num_pairs", "an int >= 1", num_pairs)
    if batch_size is not None:
        check(
            isinstance(batch_size, int) and batch_size >= 1,
            "batch_size",
            "None or an int >= 1",
            batch_size,
        )
    draw_device = generator.device if generator is not None else torch.device(device or "cpu")
    target_device = torch.device(device) if device is not None else draw_device
    num_off_diagonal = num_patches * (num_patches - 1)
    rows = 1 if batch_size is None else batch_size
    if num_pairs > num_off_diagonal:
        flat = torch.randint(
            num_off_diagonal, (rows, num_pairs), generator=generator, device=draw_device
        )
    elif batch_size is None:
        flat = torch.randperm(num_off_diagonal, generator=generator, device=draw_device)
        flat = flat[None, :num_pairs]
    else:
        keys = torch.rand(rows, num_off_diagonal, generator=generator, device=draw_device)
        flat = keys.topk(num_pairs, dim=1).indices
    ref, tgt = _split_off_diagonal(flat.to(target_device), num_patches)
    if batch_size is None:
        return ref[0], tgt[0]
    return ref, tgt


def all_pairs(num_patches: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Every ordered pair, diagonal included, in row-major order.

    Args:
        num_patches: Number of patches ``N`` (>= 1).
        device: Device of the returned indices.

    Returns:
        ``(ref, tgt)``: long tensors ``[N * N]`` with pair ``i * N + j = (i, j)``, so targets
        reshaped to ``[B, N, N, D]`` form the full prediction matrix.
    """
    check(
        isinstance(num_patches, int) and num_patches >= 1, "num_patches", "an int >= 1", num_patches
    )
    index = torch.arange(num_patches, device=device)
    return index.repeat_interleave(num_patches), index.repeat(num_patches)
