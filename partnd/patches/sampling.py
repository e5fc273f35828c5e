"""Dimension-generic patch samplers: off-grid boxes (PART), on-grid tiles (PART-grid, fine-tuning).

Conventions (shared by every function here, see ``docs/sampling.md``):

* An input ``x: [B, C, *spatial]`` has ``ndim = len(spatial)`` spatial dimensions (1 for EEG, 2 for
  images, 3 for volumes). Coordinates are continuous, in input samples (pixels), one per spatial
  dimension, in the order of ``x``'s axes (for an image ``[..., H, W]``: row first, then column).
* Sample ``k`` of a dimension covers the interval ``[k, k + 1)``; its value sits at ``k + 0.5``.
* A box covers ``[start, start + size)`` in every dimension; its centre is ``start + size / 2``.
* Every box is resampled to ``P`` output samples per dimension; output sample ``j`` sits at
  ``start + (j + 0.5) * size / P``. The resampling is separable, with a triangle (linear) filter
  whose support is widened by ``max(1, size / P)`` when the box is downsampled (anti-aliasing, as
  PIL and ``torch.nn.functional.interpolate(..., antialias=True)`` do); ``antialias=False`` keeps
  plain linear interpolation. Taps outside the input repeat the edge sample (clamped indices). A
  box of extent ``P`` with an integer start therefore yields the slice ``x[..., start:start + P]``
  exactly, and a linear ramp is reproduced exactly by linear interpolation at any box extent.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from partnd._validation import check, check_finite
from partnd.patches.integer_box_resize import resize_integer_boxes
from partnd.patches.resampling import resampling_taps

__all__ = ["Boxes", "GridSampler", "OffGridSampler", "PatchBatch", "crop_and_resize"]


@dataclass(frozen=True)
class PatchBatch:
    """Patches drawn from a batch, with the boxes they were cut from.

    Attributes:
        patches: ``[B, N, C, *patch_size]`` patch values, same dtype and device as the input.
        centers: ``[B, N, ndim]`` float32 box centres in input coordinates (samples or pixels), dims
            in the input's spatial order.
        sizes: ``[B, N, ndim]`` float32 box extents in input coordinates.
        grid_index: ``[B, N]`` long slot index on the on-grid tiling (row-major over the
            ``floor(L_d / P_d)`` tiles per dimension); for an off-grid box the slot whose tile
            contains the box centre (clamped to the tiled region). ``None`` if not provided.
    """

    patches: Tensor
    centers: Tensor
    sizes: Tensor
    grid_index: Tensor | None = None

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions of the boxes."""
        return int(self.centers.shape[-1])

    @property
    def num_patches(self) -> int:
        """Number of patches per example, ``N``."""
        return int(self.centers.shape[1])

    @property
    def batch_size(self) -> int:
        """Number of examples, ``B``."""
        return int(self.centers.shape[0])

    @property
    def starts(self) -> Tensor:
        """``[B, N, ndim]`` lower box corners, ``centers - sizes / 2``."""
        return self.centers - self.sizes / 2

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PatchBatch:
        """Return a copy with every tensor moved to ``device``."""
        grid_index = self.grid_index
        return dataclasses.replace(
            self,
            patches=self.patches.to(device, non_blocking=non_blocking),
            centers=self.centers.to(device, non_blocking=non_blocking),
            sizes=self.sizes.to(device, non_blocking=non_blocking),
            grid_index=None
            if grid_index is None
            else grid_index.to(device, non_blocking=non_blocking),
        )


@dataclass(frozen=True)
class Boxes:
    """The boxes a sampler cuts, drawn before the patches are cut (see ``OffGridSampler.draw``).

    Attributes:
        starts: ``[B, N, ndim]`` float32 lower box corners in input coordinates.
        sizes: ``[B, N, ndim]`` float32 box extents.
        size_bounds: Whole-sample extents on the CPU: the ``(lowest, highest)`` extent per
            dimension that :func:`~partnd.patches.integer_box_resize.resize_integer_boxes` sizes
            its tables by; ``None`` on the other paths.
    """

    starts: Tensor
    sizes: Tensor
    size_bounds: tuple[tuple[int, int], ...] | None = None

    @property
    def centers(self) -> Tensor:
        """``[B, N, ndim]`` box centres, ``starts + sizes / 2``."""
        return self.starts + self.sizes / 2


def _patch_shape(patch_size: int | Sequence[int], ndim: int, argument: str) -> tuple[int, ...]:
    """Expand an int or per-dimension sequence into a tuple of ``ndim`` positive ints."""
    if isinstance(patch_size, int):
        check(
            not isinstance(patch_size, bool), argument, "an int or a sequence of ints", patch_size
        )
        sizes: tuple[int, ...] = (patch_size,) * ndim
    else:
        check(
            isinstance(patch_size, Sequence)
            and all(isinstance(p, int) and not isinstance(p, bool) for p in patch_size),
            argument,
            "an int or a sequence of ints",
            patch_size,
        )
        sizes = tuple(patch_size)
    check(len(sizes) == ndim, argument, f"{ndim} value(s), one per spatial dimension", patch_size)
    check(all(p >= 1 for p in sizes), argument, "positive patch extents", patch_size)
    return sizes


def _check_ndim(ndim: int) -> None:
    check(
        isinstance(ndim, int) and not isinstance(ndim, bool) and ndim >= 1,
        "ndim",
        "an int >= 1 (1 for signals, 2 for images, 3 for volumes)",
        ndim,
    )


def _check_input(x: Tensor, patch_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Validate ``x: [B, C, *spatial]`` against the patch shape; return ``spatial``."""
    ndim = len(patch_shape)
    check(
        isinstance(x, Tensor), "x", f"a torch.Tensor [B, C, *spatial] with {ndim} spatial dims", x
    )
    check(x.is_floating_point(), "x", "a floating point tensor", x)
    check(x.dim() == ndim + 2, "x", f"a tensor [B, C, *spatial] with {ndim} spatial dim(s)", x)
    check(x.shape[0] >= 1 and x.shape[1] >= 1, "x", "at least one example and one channel", x)
    spatial = tuple(int(length) for length in x.shape[2:])
    check(
        all(length >= p for length, p in zip(spatial, patch_shape, strict=True)),
        "x",
        f"spatial size >= patch size {patch_shape} in every dimension",
        x,
    )
    check_finite(x, "x")
    return spatial


def _grid_shape(spatial: Sequence[int], patch_shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(length // p for length, p in zip(spatial, patch_shape, strict=True))


def _grid_slot(centers: Tensor, grid_shape: Sequence[int], patch_shape: Sequence[int]) -> Tensor:
    """``[B, N]`` row-major index of the on-grid tile containing each centre (clamped)."""
    slot = torch.zeros(centers.shape[:-1], dtype=torch.long, device=centers.device)
    for d, (tiles, p) in enumerate(zip(grid_shape, patch_shape, strict=True)):
        tile = torch.div(centers[..., d], p, rounding_mode="floor").long().clamp(0, tiles - 1)
        slot = slot * tiles + tile
    return slot


def _along(values: Tensor, axis: int, rank: int) -> Tensor:
    """View a 1-D tensor so that it broadcasts along ``axis`` of a ``rank``-dimensional tensor."""
    shape = [1] * rank
    shape[axis] = values.numel()
    return values.view(shape)


def _crop_and_resize(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: tuple[int, ...],
    antialias: bool,
    max_sizes: Sequence[float] | None = None,
) -> Tensor:
    """Unvalidated core of :func:`crop_and_resize` (same arguments and result).

    ``max_sizes`` (one known upper bound of ``sizes`` per dimension) sizes the filters and windows
    without reading ``sizes`` back, so the call needs no host synchronisation.

    Separable: dimension ``d`` is resampled by ``K`` gathers (one per filter tap, shared by all
    channels) summed with the filter weights. The first step reads ``x`` through flat indices and
    restricts the later dimensions to each box's integer window (the span of its taps); the next
    steps gather along one axis of the previous result. The tensors stay as small as
    ``[B, N, C, P_0, ..., P_d, W_{d+1}, ..., W_{ndim-1}]``.
    """
    batch, channels = int(x.shape[0]), int(x.shape[1])
    lengths = [int(length) for length in x.shape[2:]]
    ndim = len(lengths)
    num_boxes = int(starts.shape[1])
    device = x.device
    compute_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    starts = starts.to(device)
    sizes = sizes.to(device)
    taps = [
        resampling_taps(
            starts[..., d],
            sizes[..., d],
            patch_shape[d],
            lengths[d],
            antialias,
            compute_dtype,
            None if max_sizes is None else max_sizes[d],
        )
        for d in range(ndim)
    ]
    window_starts: list[Tensor] = []
    window_lengths: list[int] = []
    for d, (index, _) in enumerate(taps):
        first, last = index[0, :, :, 0], index[-1, :, :, -1]
        if max_sizes is None:
            span = int((last - first).max()) + 1
        else:  # first taps of outputs 0 and P - 1 lie at most (P - 1) * step + 1 apart
            step = max_sizes[d] / patch_shape[d]
            span = min(lengths[d], math.ceil((patch_shape[d] - 1) * step) + len(index) + 1)
        window_starts.append(first.clamp(max=lengths[d] - span))
        window_lengths.append(span)

    strides = [math.prod(lengths[d + 1 :]) for d in range(ndim)]
    window_offset = torch.zeros((), dtype=torch.long, device=device)
    for e in range(1, ndim):
        window = torch.arange(window_lengths[e], device=device)
        corner = window_starts[e].view(batch, num_boxes, 1, *[1] * ndim)
        window_offset = window_offset + (corner + _along(window, e + 3, ndim + 3)) * strides[e]
    source = x.reshape(batch, 1, channels, -1).expand(batch, num_boxes, channels, -1)
    for d in range(ndim):
        index, weights = taps[d]
        out_shape = (batch, num_boxes, channels, *patch_shape[: d + 1], *window_lengths[d + 1 :])
        tap_view = (batch, num_boxes, 1, *[1] * d, patch_shape[d], *[1] * (ndim - 1 - d))
        if d == 0:
            gather_axis = 3
            flat_shape = (batch, num_boxes, 1, math.prod(out_shape[3:]))
            index = index * strides[0] if ndim > 1 else index
        else:
            gather_axis = 3 + d
            index = index - window_starts[d].view(1, batch, num_boxes, 1)
        result: Tensor | None = None
        for tap_index, tap_weight in zip(index, weights, strict=True):
            tap_index = tap_index.view(tap_view)
            if d == 0:
                if ndim > 1:
                    tap_index = tap_index + window_offset
                tap_index = tap_index.view(flat_shape).expand(*flat_shape[:2], channels, -1)
            else:
                tap_index = tap_index.expand(out_shape)
            values = source.gather(gather_axis, tap_index).view(out_shape).to(compute_dtype)
            weight = tap_weight.view(tap_view)
            result = values.mul_(weight) if result is None else result.addcmul_(values, weight)
        assert result is not None
        source = result
    return source.to(x.dtype)


def _slice_boxes(x: Tensor, starts: Tensor, patch_shape: tuple[int, ...]) -> Tensor:
    """Exact slices ``x[b, :, s_0:s_0 + P_0, ...]`` at integer ``starts: [B, N, ndim]``.

    One gather for the whole batch (what :func:`_crop_and_resize` returns for integer starts and
    extent ``P``, without its interpolation taps).

    Returns:
        [B, N, C, *P].
    """
    batch, channels = int(x.shape[0]), int(x.shape[1])
    lengths = [int(length) for length in x.shape[2:]]
    ndim = len(lengths)
    num_boxes = int(starts.shape[1])
    flat = torch.zeros((batch, num_boxes, *[1] * ndim), dtype=torch.long, device=x.device)
    corner = starts.to(x.device).long()
    for d in range(ndim):
        stride = math.prod(lengths[d + 1 :])
        offsets = _along(torch.arange(patch_shape[d], device=x.device), d + 2, ndim + 2)
        flat = flat + (corner[..., d].view(batch, num_boxes, *[1] * ndim) + offsets) * stride
    index = flat.view(batch, num_boxes, 1, -1).expand(-1, -1, channels, -1)
    source = x.reshape(batch, 1, channels, -1).expand(-1, num_boxes, -1, -1)
    return source.gather(3, index).view(batch, num_boxes, channels, *patch_shape)


def crop_and_resize(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_size: int | Sequence[int],
    antialias: bool = True,
) -> Tensor:
    """Cut continuous boxes out of ``x`` and resample each one to the patch size.

    Box ``n`` of example ``b`` covers ``[starts[b, n, d], starts[b, n, d] + sizes[b, n, d])`` in
    every spatial dimension ``d`` (sample ``k`` covers ``[k, k + 1)``). Output sample ``j`` of
    dimension ``d`` sits at ``start + (j + 0.5) * size / P_d`` and is a weighted sum of the input
    samples around it, with triangle-filter weights ``max(0, 1 - |k + 0.5 - position| / support)``
    normalised to sum to one. ``support`` is 1 (linear interpolation) unless ``antialias`` and the
    box is larger than the patch, then ``size / P_d`` (the anti-aliased resize of PIL and of
    ``torch.nn.functional.interpolate(..., antialias=True)``). Indices outside the input are
    clamped to the edge sample. A box of extent ``P_d`` with integer start returns the plain slice;
    fractional starts interpolate linearly between neighbouring samples. Vectorised over examples
    and boxes, with memory of the order of the output times the window of the later dimensions.
    Differentiable with respect to ``x`` (not to the boxes).

    Args:
        x: ``[B, C, *spatial]`` floating point input, ``len(spatial) = ndim``.
        starts: ``[B, N, ndim]`` box starts in input coordinates (float).
        sizes: ``[B, N, ndim]`` box extents in input coordinates (float, positive).
        patch_size: Output samples per dimension: an int, or one int per spatial dimension.
        antialias: Widen the filter when downsampling (default); ``False``: linear interpolation.

    Returns:
        ``[B, N, C, *patch_size]`` patches with ``x``'s dtype and device.

    Raises:
        InputError: If ``x``, ``starts``, ``sizes`` or ``patch_size`` break this contract, or a box
            leaves the input by more than a rounding tolerance.
    """
    check(isinstance(x, Tensor) and x.dim() >= 3, "x", "a tensor [B, C, *spatial]", x)
    check(x.shape[0] >= 1 and x.shape[1] >= 1, "x", "at least one example and one channel", x)
    ndim = x.dim() - 2
    patch_shape = _patch_shape(patch_size, ndim, "patch_size")
    check(x.is_floating_point(), "x", "a floating point tensor", x)
    check_finite(x, "x")
    batch = int(x.shape[0])
    for name, boxes in (("starts", starts), ("sizes", sizes)):
        check(
            isinstance(boxes, Tensor)
            and boxes.is_floating_point()
            and boxes.dim() == 3
            and int(boxes.shape[0]) == batch
            and int(boxes.shape[2]) == ndim,
            name,
            f"a floating point tensor [B={batch}, N, ndim={ndim}]",
            boxes,
        )
        check_finite(boxes, name)
    check(starts.shape == sizes.shape, "sizes", f"the shape of starts {tuple(starts.shape)}", sizes)
    check(bool((sizes > 0).all()), "sizes", "positive box extents", sizes)
    lengths = torch.tensor(x.shape[2:], dtype=starts.dtype, device=starts.device)
    tolerance = 1e-3 + 1e-6 * lengths
    inside = (starts >= -tolerance) & (starts + sizes <= lengths + tolerance)
    check(
        bool(inside.all()),
        "starts",
        f"boxes inside the input, 0 <= start and start + size <= {tuple(x.shape[2:])}",
        f"{int((~inside).sum())} coordinate(s) outside",
    )
    return _crop_and_resize(x, starts, sizes, patch_shape, antialias)


def _resample_by_extent(x: Tensor) -> bool:
    """Whether whole-sample boxes of ``x`` take :func:`resize_integer_boxes` (on the CPU, where its
    few reads of the box extents cost nothing) rather than the gather path, which never reads
    values back (no host synchronisation on an accelerator)."""
    return x.device.type == "cpu"


@torch.compiler.disable(reason="a numba kernel on the CPU, which torch.compile cannot trace")
def _resize_integer_boxes(
    x: Tensor,
    starts: Tensor,
    sizes: Tensor,
    patch_shape: tuple[int, ...],
    size_bounds: list[tuple[int, int]],
    antialias: bool,
) -> Tensor:
    """:func:`~partnd.patches.integer_box_resize.resize_integer_boxes`, run eagerly inside a
    compiled step (its CPU kernel is numba's: one graph break, on the CPU with ``scale_range``)."""
    return resize_integer_boxes(x, starts, sizes, patch_shape, size_bounds, antialias)


def _integer_extent_range(
    spatial: Sequence[int], patch_shape: Sequence[int], scale_range: tuple[float, float]
) -> tuple[list[float], list[float]]:
    """Whole-sample extent range per dimension: ``ceil(min(a P, L))`` and ``floor(min(b P,
    L))``, each at least 1, computed in float32 as the drawn extents are."""
    patch = np.asarray(patch_shape, dtype=np.float32)
    lengths = np.asarray(spatial, dtype=np.float32)
    low = np.minimum(patch * np.float32(scale_range[0]), lengths)
    high = np.minimum(patch * np.float32(scale_range[1]), lengths)
    low = np.maximum(np.ceil(low), np.float32(1.0))
    high = np.maximum(np.floor(high), np.float32(1.0))
    return [float(v) for v in low], [float(v) for v in high]


@functools.lru_cache(maxsize=64)
def _float_constant(values: tuple[float, ...], device: torch.device) -> Tensor:
    """``values`` as a float32 tensor ``[len(values)]`` on ``device``, built once per (values,
    device) and shared: never modify it in place.

    On CUDA a tensor built from host values is a copy followed by a wait for the device to
    finish all queued work; a training step's draws must not wait so (the host would stop
    queueing the next kernels), so the sampler's lengths and patch sizes are built once.
    """
    with torch.inference_mode(False):  # a normal tensor even when first built for inference
        return torch.tensor(values, dtype=torch.float32, device=device)


def _draw_uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Uniform [0, 1) float32 draws on the generator's device, moved to ``device``."""
    draw_device = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=draw_device).to(device)


class OffGridSampler:
    """Sample ``N`` boxes at continuous random positions (and optionally extents) per example.

    For every example independently: each box extent is the patch size ``P_d``, or with
    ``scale_range = (a, b)`` drawn uniformly and independently per dimension in
    ``[a * P_d, b * P_d]`` (both ends clamped to the input length ``L_d``, so aspect ratios vary);
    the start is then drawn uniformly in ``[0, L_d - size]``, so every box lies inside the input.
    Boxes may overlap and leave parts of the input uncovered (PART's masking). Every box is
    resampled to the patch size with :func:`crop_and_resize`. Runs without autograd.

    **Integer boxes (default).** With ``integer_boxes=True`` starts (and, with ``scale_range``,
    extents) are whole samples, drawn uniformly among the integers of the same ranges, as the
    authors' integer pixel boxes. A fixed-size box is then an exact slice ``x[..., s:s + P]``, the
    very input a fine-tuning tile gives the patch embedding (a fractional start would interpolate
    linearly and low-pass the patch: a 30 Hz sine at 100 Hz keeps 0.59 of its amplitude at a
    half-sample offset). Targets stay floats either way. ``integer_boxes=False`` draws continuous
    starts and extents.

    Args:
        ndim: Number of spatial dimensions (1 for EEG, 2 for images, 3 for volumes).
        patch_size: Patch extent ``P``: an int, or one int per dimension.
        num_patches: Boxes per example ``N``; ``None`` uses the on-grid count ``prod(L_d // P_d)``
            (64 for 32x32 images with ``P = 4``; EEG in the paper uses 40 boxes of 100 samples).
        scale_range: ``(a, b)`` with ``0 < a <= b`` to draw extents in ``[a * P, b * P]`` (the
            paper's scale/aspect extension uses ``(0.5, 2.0)``), or ``None`` for fixed extents.
        antialias: Anti-aliased downsampling of boxes larger than ``P`` (see
            :func:`crop_and_resize`).
        integer_boxes: Draw whole-sample starts and extents (default) instead of continuous ones.
        max_patches: Upper bound on ``N`` (guards memory when the default count would be huge).

    Example:
        >>> sampler = OffGridSampler(1, 100, num_patches=40)
        >>> batch = sampler(torch.randn(8, 6, 3000))
        >>> batch.patches.shape, batch.centers.shape
        (torch.Size([8, 40, 6, 100]), torch.Size([8, 40, 1]))
    """

    def __init__(
        self,
        ndim: int,
        patch_size: int | Sequence[int],
        num_patches: int | None = None,
        *,
        scale_range: tuple[float, float] | None = None,
        antialias: bool = True,
        integer_boxes: bool = True,
        max_patches: int = 16384,
    ) -> None:
        _check_ndim(ndim)
        self.ndim = ndim
        self.patch_size = _patch_shape(patch_size, ndim, "patch_size")
        check(
            isinstance(max_patches, int) and max_patches >= 1,
            "max_patches",
            "an int >= 1",
            max_patches,
        )
        if num_patches is not None:
            check(
                isinstance(num_patches, int)
                and not isinstance(num_patches, bool)
                and 1 <= num_patches <= max_patches,
                "num_patches",
                f"None or an int in [1, max_patches={max_patches}]",
                num_patches,
            )
        if scale_range is not None:
            check(
                isinstance(scale_range, Sequence)
                and len(scale_range) == 2
                and all(isinstance(v, (int, float)) and math.isfinite(v) for v in scale_range)
                and 0 < scale_range[0] <= scale_range[1],
                "scale_range",
                "None or (a, b) with 0 < a <= b",
                scale_range,
            )
            scale_range = (float(scale_range[0]), float(scale_range[1]))
        self.num_patches = num_patches
        self.scale_range = scale_range
        self.antialias = antialias
        self.integer_boxes = integer_boxes
        self.max_patches = max_patches

    def num_patches_for(self, spatial_shape: Sequence[int]) -> int:
        """Number of boxes drawn per example for an input of this spatial shape."""
        check(
            len(spatial_shape) == self.ndim,
            "spatial_shape",
            f"{self.ndim} spatial length(s)",
            spatial_shape,
        )
        return self._resolve_num_patches(spatial_shape, "spatial_shape")

    def _resolve_num_patches(self, spatial_shape: Sequence[int], argument: str) -> int:
        if self.num_patches is not None:
            return self.num_patches
        count = math.prod(_grid_shape(spatial_shape, self.patch_size))
        check(
            1 <= count <= self.max_patches,
            argument,
            f"a grid count prod(L // P) in [1, max_patches={self.max_patches}] "
            "(or pass num_patches)",
            f"{count} for spatial shape {tuple(spatial_shape)} and patch size {self.patch_size}",
        )
        return count

    def __call__(
        self, x: Tensor, generator: torch.Generator | None = None, *, validate: bool = True
    ) -> PatchBatch:
        """Draw boxes and cut the patches (:meth:`draw`, then :meth:`cut`).

        Args:
            x: ``[B, C, *spatial]`` floating point input, every ``L_d >= P_d``.
            generator: Source of randomness (same seed, same boxes); may live on another device than
                ``x``: draws happen on its device and are moved.
            validate: Check ``x`` (shape, dtype, finite values). Training loops that validated
                their data once pass ``False`` (the finite check costs a host synchronisation).

        Returns:
            A :class:`PatchBatch` with ``patches: [B, N, C, *P]``, float32 ``centers``/``sizes:
            [B, N, ndim]`` and ``grid_index: [B, N]``.
        """
        if validate:
            _check_input(x, self.patch_size)
        return self.cut(x, self.draw(x.shape, generator, x.device))

    def draw(
        self,
        shape: Sequence[int],
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ) -> Boxes:
        """Draw the boxes of a batch of inputs of shape ``shape`` (every random draw of the
        sampler; no input values are read, so a training step draws before its compiled forward).

        Args:
            shape: ``(B, C, *spatial)``, the input's shape.
            generator: Source of randomness (same seed, same boxes); draws happen on its device and
                are moved to ``device``.
            device: Device of the input (and of the returned boxes).

        Returns:
            The :class:`Boxes`: float32 ``starts``/``sizes: [B, N, ndim]`` on ``device``.
        """
        device = torch.device(device)
        spatial = tuple(int(length) for length in shape[2:])
        num_boxes = self._resolve_num_patches(spatial, "x")
        box_shape = (int(shape[0]), num_boxes, self.ndim)
        lengths = _float_constant(spatial, device)
        patch = _float_constant(tuple(self.patch_size), device)
        size_bounds: tuple[tuple[int, int], ...] | None = None
        if self.scale_range is None:
            sizes = patch.expand(box_shape).clone()
        elif self.integer_boxes:
            # the extent range in whole samples, in float32 on the host (no read-back)
            lowest, highest = _integer_extent_range(spatial, self.patch_size, self.scale_range)
            low = _float_constant(tuple(lowest), device)
            high = _float_constant(tuple(highest), device)
            draw = _draw_uniform(box_shape, generator, device)
            sizes = (low + draw * (high - low + 1)).floor_().clamp_(max=high)
            # low > high (rounding) draws only high
            size_bounds = tuple(
                (int(min(a, b)), int(b)) for a, b in zip(lowest, highest, strict=True)
            )
        else:
            low = torch.minimum(patch * self.scale_range[0], lengths)
            high = torch.minimum(patch * self.scale_range[1], lengths)
            draw = _draw_uniform(box_shape, generator, device)
            sizes = low + draw * (high - low)
        free = lengths - sizes
        draw = _draw_uniform(box_shape, generator, device)
        if self.integer_boxes:
            starts = (draw * (free + 1)).floor_().clamp_(max=free)
        else:
            starts = draw * free
        return Boxes(starts=starts, sizes=sizes, size_bounds=size_bounds)

    def cut(self, x: Tensor, boxes: Boxes) -> PatchBatch:
        """Cut the patches of drawn boxes (no random draws, no gradient, no checks of ``x``).

        Args:
            x: ``[B, C, *spatial]`` floating point input.
            boxes: Boxes drawn by :meth:`draw` for ``x``'s shape and device.

        Returns:
            A :class:`PatchBatch` (see :meth:`__call__`).
        """
        spatial = tuple(int(length) for length in x.shape[2:])
        starts, sizes = boxes.starts, boxes.sizes
        with torch.no_grad():
            if self.scale_range is None and self.integer_boxes:
                patches = _slice_boxes(x, starts, self.patch_size)
            elif boxes.size_bounds is not None and _resample_by_extent(x):
                patches = _resize_integer_boxes(
                    x, starts, sizes, self.patch_size, list(boxes.size_bounds), self.antialias
                )
            else:
                largest = [
                    min(float(length), p * (self.scale_range or (1.0, 1.0))[1])
                    for length, p in zip(spatial, self.patch_size, strict=True)
                ]
                patches = _crop_and_resize(
                    x, starts, sizes, self.patch_size, self.antialias, max_sizes=largest
                )
        centers = starts + sizes / 2
        grid_index = _grid_slot(centers, _grid_shape(spatial, self.patch_size), self.patch_size)
        return PatchBatch(patches=patches, centers=centers, sizes=sizes, grid_index=grid_index)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ndim={self.ndim}, patch_size={self.patch_size}, "
            f"num_patches={self.num_patches}, scale_range={self.scale_range}, "
            f"antialias={self.antialias}, integer_boxes={self.integer_boxes}, "
            f"max_patches={self.max_patches})"
        )


class GridSampler:
    """Cut non-overlapping ``P``-tiles on the regular grid (PART-grid ablation, fine-tuning input).

    ``floor(L_d / P_d)`` tiles per dimension starting at the origin (the remainder is dropped), in
    row-major order over the tile grid (last dimension fastest), so ``grid_index = arange(N)``.

    Args:
        ndim: Number of spatial dimensions.
        patch_size: Tile extent ``P``: an int, or one int per dimension.

    Example:
        >>> batch = GridSampler(2, 4)(torch.randn(2, 3, 32, 32))
        >>> batch.patches.shape
        torch.Size([2, 64, 3, 4, 4])
    """

    def __init__(self, ndim: int, patch_size: int | Sequence[int]) -> None:
        _check_ndim(ndim)
        self.ndim = ndim
        self.patch_size = _patch_shape(patch_size, ndim, "patch_size")

    def num_patches(self, spatial_shape: Sequence[int]) -> int:
        """Number of tiles ``prod(L_d // P_d)`` for an input of this spatial shape."""
        check(
            len(spatial_shape) == self.ndim
            and all(length >= p for length, p in zip(spatial_shape, self.patch_size, strict=True)),
            "spatial_shape",
            f"{self.ndim} length(s), each >= patch size {self.patch_size}",
            spatial_shape,
        )
        return math.prod(_grid_shape(spatial_shape, self.patch_size))

    def __call__(
        self, x: Tensor, generator: torch.Generator | None = None, *, validate: bool = True
    ) -> PatchBatch:
        """Tile ``x``.

        Args:
            x: ``[B, C, *spatial]`` floating point input, every ``L_d >= P_d``.
            generator: Ignored (tiling is deterministic); accepted for a sampler-agnostic call.
            validate: Check ``x`` (shape, dtype, finite values); ``False`` skips the checks.

        Returns:
            A :class:`PatchBatch` with ``patches: [B, N, C, *P]``, tile centres ``(g + 0.5) * P``,
            sizes ``P`` and ``grid_index = arange(N)``.
        """
        if validate:
            _check_input(x, self.patch_size)
        return self.cut(x, self.draw(x.shape, generator, x.device))

    def draw(
        self,
        shape: Sequence[int],
        generator: torch.Generator | None = None,
        device: torch.device | str = "cpu",
    ) -> Boxes:
        """The tiles of inputs of shape ``shape`` as :class:`Boxes` (deterministic: the
        generator is ignored, as in :meth:`__call__`).

        Returns:
            Tile corners ``g * P`` and extents ``P``, ``[B, N, ndim]`` float32 on ``device``.
        """
        spatial = tuple(int(length) for length in shape[2:])
        grid = _grid_shape(spatial, self.patch_size)
        batch = int(shape[0])
        axes = [
            torch.arange(g, device=device, dtype=torch.float32) * p
            for g, p in zip(grid, self.patch_size, strict=True)
        ]
        mesh = torch.meshgrid(*axes, indexing="ij")
        starts = torch.stack([m.reshape(-1) for m in mesh], dim=-1).expand(batch, -1, -1)
        sizes = _float_constant(tuple(self.patch_size), device)
        return Boxes(
            starts=starts.contiguous(),
            sizes=sizes.expand_as(starts).clone(memory_format=torch.contiguous_format),
            size_bounds=None,
        )

    def cut(self, x: Tensor, boxes: Boxes) -> PatchBatch:
        """Tile ``x`` (the boxes of :meth:`draw` give the centres and extents; no checks of
        ``x``).

        Returns:
            A :class:`PatchBatch` (see :meth:`__call__`).
        """
        spatial = tuple(int(length) for length in x.shape[2:])
        grid = _grid_shape(spatial, self.patch_size)
        batch, channels = int(x.shape[0]), int(x.shape[1])
        ndim = self.ndim
        covered = x
        for d, (g, p) in enumerate(zip(grid, self.patch_size, strict=True)):
            covered = covered.narrow(2 + d, 0, g * p)
        split = [size for pair in zip(grid, self.patch_size, strict=True) for size in pair]
        tiles = covered.reshape(batch, channels, *split)
        grid_axes = [2 + 2 * d for d in range(ndim)]
        patch_axes = [3 + 2 * d for d in range(ndim)]
        tiles = tiles.permute(0, *grid_axes, 1, *patch_axes)
        num_tiles = math.prod(grid)
        patches = tiles.reshape(batch, num_tiles, channels, *self.patch_size)
        grid_index = torch.arange(num_tiles, device=x.device).expand(batch, -1)
        return PatchBatch(
            patches=patches,
            centers=boxes.centers,
            sizes=boxes.sizes,
            grid_index=grid_index.contiguous(),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ndim={self.ndim}, patch_size={self.patch_size})"
