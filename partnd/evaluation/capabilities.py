"""The capabilities the PART paper shows, each one call that returns numbers and draws a figure.

Ayoughi et al. (*How PARTs assemble into wholes*, Sec. 4) show four things a pretrained PART model
can do beyond the pretext loss. Each function here samples off-grid patches of ``x`` with the
model's own sampler (``model.sample``, reproducible with ``generator``), predicts the relative
targets of all ``N x N`` ordered pairs (:meth:`~partnd.objectives.part.PARTModel.predict_all_pairs`,
entry ``[b, i, j]`` = reference ``i``, target ``j``), and reduces them to a few numbers (a frozen
dataclass); with ``path`` it also saves a PNG figure:

* :func:`offgrid_reconstruction` (i): place every patch relative to one reference patch,
  ``c^_j = c_ref + Δ^_ref,j * s_ref``, and report how far from its true place each one lands;
* :func:`scale_prediction` (ii): the predicted extent ratios ``s_tgt / s_ref`` of the
  scale/aspect extension next to the floor of predicting their mean;
* :func:`patch_uncertainty` (iii): one target patch as placed by every other reference,
  ``c^_tgt(i) = c_i + Δ^_i,tgt * s_i``, and how much those placements disagree;
* :func:`negative_symmetry` (iv): the predicted ``N x N`` translation matrices beside the ground
  truth and how antisymmetric they are (:func:`antisymmetry_score`).

Conventions (those of :mod:`partnd.patches.sampling`): coordinates are continuous, in input samples
(pixels), one per spatial dimension in the order of ``x``'s axes (row, then column for an image);
sample ``k`` covers ``[k, k + 1)``; a box covers ``[start, start + size)``. Every function accepts
one example ``[C, *spatial]`` or a batch ``[B, C, *spatial]``: the numbers are computed over the
whole batch, the figure shows example 0. The model runs in eval mode under ``torch.no_grad()`` on
its own device, and every submodule's train/eval mode is restored afterwards. Figures are written
atomically with matplotlib's Agg backend; see ``docs/capabilities.md`` for the definitions and the
figures. All ``B * N * N`` pairs are predicted in one pass: for many patches (196 for 224² images)
pass a few examples at a time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from partnd._validation import check, check_finite
from partnd.engine.checkpoint import atomic_save
from partnd.objectives.diagnostics import regression_diagnostics
from partnd.objectives.part import PARTModel
from partnd.patches.sampling import PatchBatch
from partnd.patches.targets import all_pairs, relative_targets

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "NegativeSymmetry",
    "PatchUncertainty",
    "Reconstruction",
    "ScalePrediction",
    "antisymmetry_score",
    "draw_box",
    "negative_symmetry",
    "offgrid_reconstruction",
    "patch_uncertainty",
    "scale_prediction",
]

_REF_COLOUR = "#d62728"
_TGT_COLOUR = "#ff7f0e"


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Reconstruction:
    """Off-grid reconstruction: every patch placed relative to one reference patch.

    Distances are Euclidean over the spatial dimensions and averaged over the ``N - 1``
    non-reference patches of every example of the batch (``B * (N - 1)`` values).

    Attributes:
        reference: Index of the reference patch (the same index in every example).
        mean_error: Mean distance ``||c^_j - c_j||`` between predicted and true centres, in input
            samples (pixels).
        median_error: Median of the same distances.
        mean_error_patches: Mean distance in reference-patch lengths,
            ``||(c^_j - c_j) / s_ref|| = ||Δ^_ref,j - Δ_ref,j||`` (per dimension divided by the
            reference extent).
        median_error_patches: Median of the same.
        mean_error_floor: The error of the content-free prediction ``Δ^ = 0`` (every patch put on
            the reference), i.e. the mean distance of the patches to the reference, in samples.
        mean_error_floor_patches: The same in reference-patch lengths.
        centers: [B, N, ndim] true box centres (float64).
        sizes: [B, N, ndim] true box extents (float64).
        predicted_centers: [B, N, ndim] predicted centres ``c_ref + Δ^_ref,j * s_ref`` (the
            reference itself at its true centre: it is the anchor).
        predicted_sizes: [B, N, ndim] predicted extents ``(s_j / s_ref)^ * s_ref`` when the model
            predicts scale targets, else the true extents (the reference keeps its own).
    """

    reference: int
    mean_error: float
    median_error: float
    mean_error_patches: float
    median_error_patches: float
    mean_error_floor: float
    mean_error_floor_patches: float
    centers: Tensor
    sizes: Tensor
    predicted_centers: Tensor
    predicted_sizes: Tensor


@dataclass(frozen=True, eq=False)
class PatchUncertainty:
    """One target patch as placed by each of the other ``N - 1`` reference patches.

    Per example, the ``N - 1`` placements ``c^_tgt(i) = c_i + Δ^_i,tgt * s_i`` (``i != target``)
    are reduced as below, then averaged over the batch. All values are in input samples.

    Attributes:
        target: Index of the target patch (the same index in every example).
        std: Per spatial dimension, the population standard deviation (``ddof = 0``) of the
            placements.
        spread: ``sqrt(sum_d std_d^2)``: the root mean square distance of the placements to their
            mean (0 when every reference agrees).
        mean_error: Mean distance ``||c^_tgt(i) - c_tgt||`` of the placements to the true centre.
        consensus_error: Distance of the mean placement ``mean_i c^_tgt(i)`` to the true centre.
        references: [N - 1] indices of the references, in order.
        predicted_centers: [B, N - 1, ndim] the placements (float64).
        true_center: [B, ndim] the target's true centre.
        true_size: [B, ndim] the target's true extent.
    """

    target: int
    std: tuple[float, ...]
    spread: float
    mean_error: float
    consensus_error: float
    references: Tensor
    predicted_centers: Tensor
    true_center: Tensor
    true_size: Tensor


@dataclass(frozen=True, eq=False)
class NegativeSymmetry:
    """Antisymmetry of the predicted and true ``N x N`` translation matrices.

    Scores and correlations use the off-diagonal entries only and are pooled over the batch (and,
    for the unsuffixed values, over the translation dimensions). See :func:`antisymmetry_score`.

    Attributes:
        score: :func:`antisymmetry_score` of the prediction (1 = perfectly antisymmetric, 0 =
            symmetric; NaN for an all-zero matrix).
        score_truth: The same for the ground truth (1 for equal-size boxes; below 1 when extents
            differ, since ``Δ_ij = (c_j - c_i) / s_i`` and ``Δ_ji = (c_i - c_j) / s_j``).
        score_per_dim: ``score`` per translation dimension.
        score_truth_per_dim: ``score_truth`` per translation dimension.
        correlation: Pearson correlation between ``P_ij`` and ``-P_ji`` over all ordered pairs
            ``i != j`` (1 for an antisymmetric prediction; NaN without variance).
        correlation_truth: The same for the ground truth.
        correlation_per_dim: ``correlation`` per translation dimension.
        truth_correlation: Pearson correlation between the prediction and the ground truth over
            the off-diagonal entries (how well the matrices match).
        pred: [B, ndim, N, N] predicted translations (``[b, d, i, j]``: reference ``i``, target
            ``j``), in sampling order.
        truth: [B, ndim, N, N] true translations ``(c_j - c_i) / s_i``.
        order: [B, N] the permutation sorting the patches by true centre (first dimension first,
            ties by the next dimensions: top-left to bottom-right for images).
    """

    score: float
    score_truth: float
    score_per_dim: tuple[float, ...]
    score_truth_per_dim: tuple[float, ...]
    correlation: float
    correlation_truth: float
    correlation_per_dim: tuple[float, ...]
    truth_correlation: float
    pred: Tensor
    truth: Tensor
    order: Tensor


@dataclass(frozen=True, eq=False)
class ScalePrediction:
    """Predicted extent ratios ``s_tgt / s_ref`` next to the floor of predicting their mean.

    Computed over the off-diagonal pairs ``i != j`` of every example (the diagonal is 1 by
    definition) with :func:`~partnd.objectives.diagnostics.regression_diagnostics`.

    Attributes:
        names: Channel names (``("st",)`` for 1D, ``("sy", "sx")`` for images).
        mse: Per dimension, mean squared error of the predicted ratios.
        mse_floor: Per dimension, the error of predicting the mean true ratio (their variance).
        r2: Per dimension, ``1 - mse / mse_floor``.
        nmse: ``sum(mse) / sum(mse_floor)`` (1 = no better than the mean).
        pred: [B, N, N, ndim] predicted ratios (``[b, i, j]``: reference ``i``, target ``j``).
        truth: [B, N, N, ndim] true ratios ``s_j / s_i``.
    """

    names: tuple[str, ...]
    mse: tuple[float, ...]
    mse_floor: tuple[float, ...]
    r2: tuple[float, ...]
    nmse: float
    pred: Tensor
    truth: Tensor


# --------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Draw:
    """One sampled batch and the model's predictions for every ordered pair (on the CPU)."""

    x: Tensor  # [B, C, *spatial] float32
    patches: PatchBatch  # centers/sizes float64
    pred: Tensor  # [B, N, N, out_dim] float64
    ndim: int
    names: list[str]


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode and no gradient; restore every submodule's own mode afterwards."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, mode in modes:
            module.training = mode


def _check_model(model: Any) -> PARTModel:
    check(
        isinstance(model, PARTModel),
        "model",
        "a PARTModel (e.g. partnd.pretrain(...).model with method='part')",
        model,
    )
    return model


def _check_path(path: Any) -> Path | None:
    if path is None:
        return None
    check(isinstance(path, (str, os.PathLike)), "path", "None or a file path (str or Path)", path)
    return Path(path)


def _as_batch(model: PARTModel, x: Any) -> Tensor:
    """Validate ``x: [C, *spatial]`` or ``[B, C, *spatial]``; return ``[B, C, *spatial]``."""
    ndim, channels = model.encoder.ndim, model.encoder.in_chans
    patch = tuple(model.encoder.patch_size)
    expected = (
        f"a floating point tensor [C={channels}, *spatial] or [B, C={channels}, *spatial] with "
        f"{ndim} spatial dimension(s), each at least the patch size {patch}"
    )
    if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
        x = torch.from_numpy(np.ascontiguousarray(x))
    check(isinstance(x, Tensor) and x.is_floating_point(), "x", expected, x)
    check(x.dim() in (ndim + 1, ndim + 2), "x", expected, x)
    if x.dim() == ndim + 1:
        x = x[None]
    check(x.shape[0] >= 1 and x.shape[1] == channels, "x", expected, x)
    spatial = tuple(int(length) for length in x.shape[2:])
    check(all(length >= p for length, p in zip(spatial, patch, strict=True)), "x", expected, x)
    check_finite(x, "x")
    return x


def _check_generator(generator: Any) -> None:
    check(
        generator is None or isinstance(generator, torch.Generator),
        "generator",
        "None or a torch.Generator",
        generator,
    )


def _check_index(value: Any, argument: str, num_patches: int) -> int:
    check(
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and 0 <= int(value) < num_patches,
        argument,
        f"a patch index in [0, {num_patches}) (the model samples N={num_patches} patches)",
        repr(value),
    )
    return int(value)


def _draw(model: Any, x: Any, generator: Any, path: Any) -> tuple[_Draw, Path | None]:
    """Validate the common arguments, sample the patches and predict all ordered pairs."""
    part = _check_model(model)
    batch = _as_batch(part, x)
    _check_generator(generator)
    target_path = _check_path(path)
    parameter = next(part.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    dtype = parameter.dtype if parameter is not None else torch.float32
    with _evaluating(part):
        patches = part.sample(batch.to(device=device, dtype=dtype), generator)
        check(
            patches.num_patches >= 2,
            "model",
            "a sampler drawing at least 2 patches per example",
            f"{patches.num_patches} patch(es)",
        )
        pred = part.predict_all_pairs(patches)
    patches = PatchBatch(
        patches=patches.patches.detach().float().cpu(),
        centers=patches.centers.detach().double().cpu(),
        sizes=patches.sizes.detach().double().cpu(),
        grid_index=None if patches.grid_index is None else patches.grid_index.cpu(),
    )
    draw = _Draw(
        x=batch.detach().float().cpu(),
        patches=patches,
        pred=pred.detach().double().cpu(),
        ndim=part.encoder.ndim,
        names=list(part.target_names),
    )
    return draw, target_path


def _check_drawable(draw: _Draw, path: Path | None) -> None:
    check(
        path is None or draw.ndim in (1, 2),
        "path",
        "None for inputs with more than 2 spatial dimensions (figures exist for 1D signals and "
        "2D images)",
        f"{path} for ndim={draw.ndim}",
    )


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Figure, path: Path) -> None:
    plt = _pyplot()
    try:
        atomic_save(
            figure, path, save=lambda fig, handle: fig.savefig(handle, format="png", dpi=120)
        )
    finally:
        plt.close(figure)


def _others(num_patches: int, index: int) -> Tensor:
    """[N - 1] indices of every patch but ``index``."""
    everything = torch.arange(num_patches)
    return everything[everything != index]


def _off_diagonal(num_patches: int) -> Tensor:
    return ~torch.eye(num_patches, dtype=torch.bool)


def _pearson(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two equally shaped tensors (flattened); NaN without variance."""
    a = a.flatten().double() - a.double().mean()
    b = b.flatten().double() - b.double().mean()
    denominator = float(a.norm() * b.norm())
    return float((a * b).sum()) / denominator if denominator > 0 else math.nan


def antisymmetry_score(matrix: Tensor) -> float:
    """How antisymmetric a batch of square matrices is, over their off-diagonal entries.

    ``A(M) = 1 - ||M + M^T||_F / (||M||_F + ||M^T||_F)`` with the Frobenius norms taken over the
    off-diagonal entries ``i != j`` of every matrix together (the diagonal of a prediction matrix
    is the trivial self-translation). Since ``||M + M^T|| <= ||M|| + ||M^T||``, ``A`` lies in
    ``[0, 1]``: 1 exactly when ``M^T = -M`` (off the diagonal), 0 exactly when ``M^T = M``; for
    ``M = A + S`` with antisymmetric ``A`` and symmetric ``S`` (orthogonal parts),
    ``A(M) = 1 - ||S|| / sqrt(||A||^2 + ||S||^2)``. NaN for an all-zero matrix (both symmetric
    and antisymmetric).

    Args:
        matrix: [..., N, N] real matrices (e.g. ``[B, N, N]`` or ``[B, ndim, N, N]``), N >= 2.

    Returns:
        The score as a Python float.

    Raises:
        InputError: If ``matrix`` is not a real tensor with two equal trailing dimensions >= 2.
    """
    check(
        isinstance(matrix, Tensor)
        and matrix.dim() >= 2
        and not matrix.is_complex()
        and matrix.shape[-1] == matrix.shape[-2]
        and matrix.shape[-1] >= 2,
        "matrix",
        "a real tensor [..., N, N] with N >= 2",
        matrix,
    )
    mask = _off_diagonal(int(matrix.shape[-1])).to(matrix.device)
    values = matrix.detach().double()
    direct = values[..., mask]
    transposed = values.transpose(-1, -2)[..., mask]
    denominator = float(direct.norm() + transposed.norm())
    if denominator == 0:
        return math.nan
    return 1.0 - float((direct + transposed).norm()) / denominator


# --------------------------------------------------------------------------------------------
# Rendering helpers
# --------------------------------------------------------------------------------------------


def _paste(
    spatial: Sequence[int], patches: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """Paste patches into a canvas by nearest-neighbour resampling; average overlaps.

    Args:
        spatial: Canvas extent per dimension.
        patches: [N, C, *P] patch values.
        starts: [N, ndim] box starts (may lie partly outside the canvas; the rest is clipped).
        sizes: [N, ndim] box extents.

    Returns:
        [C, *spatial] canvas; NaN where no patch lands.
    """
    channels = patches.shape[1]
    patch_shape = patches.shape[2:]
    total = np.zeros((channels, *spatial))
    count = np.zeros(tuple(spatial))
    for values, start, size in zip(patches, starts, sizes, strict=True):
        targets, sources = [], []
        for length, p, s0, extent in zip(spatial, patch_shape, start, size, strict=True):
            centres = np.arange(length) + 0.5
            inside = np.flatnonzero((centres >= s0) & (centres < s0 + extent))
            source = np.floor((inside + 0.5 - s0) / extent * p).astype(int).clip(0, p - 1)
            targets.append(inside)
            sources.append(source)
        if any(t.size == 0 for t in targets):
            continue
        every_channel = np.arange(channels)
        total[np.ix_(every_channel, *targets)] += values[np.ix_(every_channel, *sources)]
        count[np.ix_(*targets)] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        canvas = total / count
    canvas[:, count == 0] = np.nan
    return canvas


def _to_rgba(canvas: np.ndarray, low: float, high: float) -> np.ndarray:
    """[C, H, W] values -> [H, W, 4] RGBA: RGB for 3 channels, grey (channel mean) otherwise;
    transparent where NaN."""
    scale = high - low if high > low else 1.0
    if canvas.shape[0] == 3:
        rgb = np.moveaxis((canvas - low) / scale, 0, -1)
    else:
        grey = (canvas.mean(axis=0) - low) / scale
        rgb = np.repeat(grey[..., None], 3, axis=-1)
    alpha = np.isfinite(rgb).all(axis=-1).astype(float)
    rgba = np.concatenate([np.nan_to_num(rgb).clip(0, 1), alpha[..., None]], axis=-1)
    return rgba


def _display_range(image: np.ndarray) -> tuple[float, float]:
    """Intensity range of ``[C, H, W]`` as displayed (channel mean unless RGB)."""
    shown = image if image.shape[0] == 3 else image.mean(axis=0, keepdims=True)
    return float(shown.min()), float(shown.max())


def _show(ax: Axes, canvas: np.ndarray, low: float, high: float, title: str) -> None:
    height, width = canvas.shape[1:]
    ax.set_facecolor("white")
    ax.imshow(_to_rgba(canvas, low, high), extent=(0, width, height, 0), interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def draw_box(
    ax: Axes,
    start: np.ndarray | torch.Tensor | Sequence[float],
    size: np.ndarray | torch.Tensor | Sequence[float],
    colour: str,
    width: float,
) -> None:
    """Outline a 2-D box given in (row, column) input coordinates on an image axis.

    Args:
        ax: The axis the image is shown on (extent in input pixels).
        start: The box's (row, column) corner.
        size: Its (height, width).
        colour: Edge colour.
        width: Edge line width.
    """
    from matplotlib.patches import Rectangle

    ax.add_patch(
        Rectangle(
            (float(start[1]), float(start[0])),
            float(size[1]),
            float(size[0]),
            fill=False,
            edgecolor=colour,
            linewidth=width,
        )
    )


def _channel_spacing(signal: np.ndarray) -> float:
    """Vertical distance between stacked channels of a [C, T] signal."""
    spread = float((signal.max(axis=1) - signal.min(axis=1)).max())
    return 1.1 * spread if spread > 0 else 1.0


def _plot_signal(ax: Axes, signal: np.ndarray, spacing: float, alpha: float) -> None:
    time = np.arange(signal.shape[1]) + 0.5
    for channel, values in enumerate(signal):
        ax.plot(time, values - channel * spacing, color="0.6", linewidth=0.6, alpha=alpha)
    ax.set_yticks([-c * spacing for c in range(signal.shape[0])])
    ax.set_yticklabels([f"ch {c}" for c in range(signal.shape[0])], fontsize=7)


def _plot_patches_1d(
    ax: Axes,
    patches: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    colours: np.ndarray,
    spacing: float,
    reference: int,
) -> None:
    """Draw each [C, P] patch as coloured segments over ``[start, start + size)``."""
    for index, (values, start, size, colour) in enumerate(
        zip(patches, starts, sizes, colours, strict=True)
    ):
        p = values.shape[-1]
        time = start + (np.arange(p) + 0.5) * size / p
        is_reference = index == reference
        for channel, trace in enumerate(values):
            ax.plot(
                time,
                trace - channel * spacing,
                color="black" if is_reference else colour,
                linewidth=1.6 if is_reference else 0.9,
                alpha=1.0 if is_reference else 0.8,
                zorder=3 if is_reference else 2,
            )
    ax.axvspan(
        float(starts[reference]),
        float(starts[reference] + sizes[reference]),
        color=_REF_COLOUR,
        alpha=0.15,
        linewidth=0,
    )


# --------------------------------------------------------------------------------------------
# (i) Off-grid reconstruction
# --------------------------------------------------------------------------------------------


def offgrid_reconstruction(
    model: PARTModel,
    x: Tensor | np.ndarray,
    *,
    reference: int = 0,
    generator: torch.Generator | None = None,
    path: str | os.PathLike[str] | None = None,
) -> Reconstruction:
    """Place every sampled patch relative to one reference patch and measure the placement error.

    The model's sampler cuts ``N`` patches per example (``model.sample``); row ``reference`` of
    the ``N x N`` prediction places patch ``j`` at
    ``c^_j,d = c_ref,d + Δ^_ref,j,d * s_ref,d`` (per dimension ``d``), with extent
    ``s^_j,d = r^_ref,j,d * s_ref,d`` when the model predicts scale targets ``r = s_tgt / s_ref``
    (else the true extent). The reference is the anchor: it stays at its true box, and the errors
    are over the other ``N - 1`` patches of every example (see :class:`Reconstruction`).

    Figure (example 0, ``path`` given):

    * **2D** (images ``[C, H, W]``): three panels, the input; the sampled patches pasted at their
      true boxes; the same patches pasted at their predicted boxes. Canvases have the input's
      size, each P-sized patch is resampled (nearest neighbour) into its box extent, overlapping
      patches are averaged, uncovered pixels stay blank (white), parts outside the canvas are
      clipped. 3 channels are shown as RGB, any other channel count as the channel mean (grey).
      The reference box is outlined in red.
    * **1D** (signals ``[C, T]``): two stacked panels over the time axis, the channels stacked
      vertically (grey, faint) with each patch's values drawn as coloured segments over its box,
      at the true time (top) and at the predicted time (bottom); a patch's colour encodes its
      true position, the reference is drawn in black over a red band.

    Args:
        model: A PART model (``pretrain(...).model``); its mode is restored afterwards.
        x: One example ``[C, *spatial]`` or a batch ``[B, C, *spatial]``.
        reference: Index of the reference patch in ``[0, N)`` (sampling order is random, so any
            index is a random patch).
        generator: Random source of the patch draw (same seed, same boxes).
        path: Where to save the PNG figure (only for 1D and 2D inputs); ``None``: no figure.

    Returns:
        A :class:`Reconstruction` with the errors, in samples and in reference-patch lengths,
        next to the content-free floor.

    Raises:
        InputError: If ``model`` is not a :class:`PARTModel`, ``x`` has the wrong shape or
            non-finite values, ``reference`` is outside ``[0, N)``, or ``path`` is given for a
            3D input.
    """
    draw, target_path = _draw(model, x, generator, path)
    patches, ndim = draw.patches, draw.ndim
    num_patches = patches.num_patches
    reference = _check_index(reference, "reference", num_patches)
    _check_drawable(draw, target_path)
    centers, sizes = patches.centers, patches.sizes
    row = draw.pred[:, reference]  # [B, N, out]
    ref_centre = centers[:, reference : reference + 1]
    ref_size = sizes[:, reference : reference + 1]
    predicted_centers = ref_centre + row[..., :ndim] * ref_size
    # with scale targets the extent is predicted too, else the patch keeps its true extent
    predicted_sizes = row[..., ndim:] * ref_size if row.shape[-1] > ndim else sizes.clone()
    predicted_centers[:, reference] = centers[:, reference]
    predicted_sizes[:, reference] = sizes[:, reference]

    others = _others(num_patches, reference)
    error = (predicted_centers - centers)[:, others]
    distance = error.norm(dim=-1).flatten()
    distance_patches = (error / ref_size).norm(dim=-1).flatten()
    floor = (centers - ref_centre)[:, others]
    result = Reconstruction(
        reference=reference,
        mean_error=float(distance.mean()),
        median_error=float(np.median(distance.numpy())),
        mean_error_patches=float(distance_patches.mean()),
        median_error_patches=float(np.median(distance_patches.numpy())),
        mean_error_floor=float(floor.norm(dim=-1).mean()),
        mean_error_floor_patches=float((floor / ref_size).norm(dim=-1).mean()),
        centers=centers,
        sizes=sizes,
        predicted_centers=predicted_centers,
        predicted_sizes=predicted_sizes,
    )
    if target_path is not None:
        _reconstruction_figure(draw, result, target_path)
    return result


def _reconstruction_figure(draw: _Draw, result: Reconstruction, path: Path) -> None:
    plt = _pyplot()
    image = draw.x[0].numpy()
    values = draw.patches.patches[0].numpy()
    sizes = result.sizes[0].numpy()
    starts = result.centers[0].numpy() - sizes / 2
    predicted_sizes = result.predicted_sizes[0].numpy()
    predicted_starts = result.predicted_centers[0].numpy() - predicted_sizes / 2
    reference = result.reference
    spatial = image.shape[1:]
    summary = (
        f"reference {reference}: mean error {result.mean_error:.2f} samples "
        f"({result.mean_error_patches:.2f} patch lengths), median {result.median_error:.2f}; "
        f"floor (all on the reference) {result.mean_error_floor:.2f}"
    )
    if draw.ndim == 2:
        low, high = _display_range(image)
        figure, axes = plt.subplots(1, 3, figsize=(12, 4.4))
        _show(axes[0], image, low, high, "input")
        _show(
            axes[1],
            _paste(spatial, values, starts, sizes),
            low,
            high,
            f"{len(values)} off-grid patches at their true boxes",
        )
        _show(
            axes[2],
            _paste(spatial, values, predicted_starts, predicted_sizes),
            low,
            high,
            "the same patches at their predicted boxes",
        )
        for ax in axes[1:]:
            draw_box(ax, starts[reference], sizes[reference], _REF_COLOUR, 2.0)
    else:
        signal = image
        spacing = _channel_spacing(signal)
        length = signal.shape[1]
        colours = plt.get_cmap("viridis")(
            (result.centers[0, :, 0].numpy() / max(length, 1)).clip(0, 1)
        )
        figure, axes = plt.subplots(2, 1, figsize=(12, 2.0 + 1.1 * signal.shape[0]), sharex=True)
        for ax, box_starts, box_sizes, title in (
            (axes[0], starts, sizes, "patches at their true time"),
            (axes[1], predicted_starts, predicted_sizes, "patches at their predicted time"),
        ):
            _plot_signal(ax, signal, spacing, alpha=0.5)
            _plot_patches_1d(
                ax, values, box_starts[:, 0], box_sizes[:, 0], colours, spacing, reference
            )
            ax.set_title(title, fontsize=9)
        low = min(0.0, float(predicted_starts.min()))
        high = max(float(length), float((predicted_starts + predicted_sizes).max()))
        axes[1].set_xlim(low, high)
        axes[1].set_xlabel("time (samples)")
    figure.suptitle(summary, fontsize=9)
    figure.tight_layout()
    _save(figure, path)


# --------------------------------------------------------------------------------------------
# (iii) Patch uncertainty
# --------------------------------------------------------------------------------------------


def patch_uncertainty(
    model: PARTModel,
    x: Tensor | np.ndarray,
    *,
    target: int = 0,
    generator: torch.Generator | None = None,
    path: str | os.PathLike[str] | None = None,
) -> PatchUncertainty:
    """Where every other patch places one target patch, and how much those placements disagree.

    Column ``target`` of the ``N x N`` prediction gives, for each reference ``i != target``, the
    placement ``c^_tgt(i),d = c_i,d + Δ^_i,tgt,d * s_i,d``. Clustered placements mean the model
    is sure where the target belongs; scattered ones mean its content fits several places (the
    paper's Fig. "Patch uncertainty"). See :class:`PatchUncertainty` for the reported numbers.

    Figure (example 0, ``path`` given):

    * **2D**: two panels, the input with the target box outlined (orange), and the input (faint)
      under a heat map of the placements (a Gaussian kernel density on the pixel grid, bandwidth
      a quarter of the target extent per dimension, at least half a pixel), the placements as
      dots, the true box outlined and the true centre marked. The axes extend beyond the image
      when placements fall outside it.
    * **1D**: two stacked panels over the time axis, the signal's channels with the target
      interval shaded, and a histogram of the placed centre times with the true interval shaded
      and the true centre (solid) and mean placement (dashed) marked.

    Args:
        model: A PART model; its mode is restored afterwards.
        x: One example ``[C, *spatial]`` or a batch ``[B, C, *spatial]``.
        target: Index of the target patch in ``[0, N)``.
        generator: Random source of the patch draw.
        path: Where to save the PNG figure (1D and 2D inputs only); ``None``: no figure.

    Returns:
        A :class:`PatchUncertainty` (values in input samples, averaged over the batch).

    Raises:
        InputError: On a non-PART ``model``, a badly shaped or non-finite ``x``, ``target``
            outside ``[0, N)``, or ``path`` for a 3D input.
    """
    draw, target_path = _draw(model, x, generator, path)
    patches, ndim = draw.patches, draw.ndim
    num_patches = patches.num_patches
    target = _check_index(target, "target", num_patches)
    _check_drawable(draw, target_path)
    references = _others(num_patches, target)
    centers, sizes = patches.centers, patches.sizes
    column = draw.pred[:, references, target, :ndim]  # [B, N - 1, ndim]
    placements = centers[:, references] + column * sizes[:, references]
    true_center = centers[:, target]
    variance = placements.var(dim=1, correction=0)  # [B, ndim]
    result = PatchUncertainty(
        target=target,
        std=tuple(float(v) for v in variance.sqrt().mean(dim=0)),
        spread=float(variance.sum(dim=-1).sqrt().mean()),
        mean_error=float((placements - true_center[:, None]).norm(dim=-1).mean()),
        consensus_error=float((placements.mean(dim=1) - true_center).norm(dim=-1).mean()),
        references=references,
        predicted_centers=placements,
        true_center=true_center,
        true_size=sizes[:, target],
    )
    if target_path is not None:
        _uncertainty_figure(draw, result, target_path)
    return result


def _kernel_density(
    points: np.ndarray, grids: Sequence[np.ndarray], bandwidth: np.ndarray
) -> np.ndarray:
    """Gaussian kernel density of ``points: [M, ndim]`` on the product of 1-D ``grids``."""
    density = np.zeros(tuple(len(g) for g in grids))
    for point in points:
        kernels = [
            np.exp(-0.5 * ((grid - coordinate) / width) ** 2)
            for grid, coordinate, width in zip(grids, point, bandwidth, strict=True)
        ]
        term = kernels[0]
        for kernel in kernels[1:]:
            term = np.multiply.outer(term, kernel)
        density += term
    return density


def _uncertainty_figure(draw: _Draw, result: PatchUncertainty, path: Path) -> None:
    plt = _pyplot()
    image = draw.x[0].numpy()
    placements = result.predicted_centers[0].numpy()
    centre = result.true_center[0].numpy()
    size = result.true_size[0].numpy()
    start = centre - size / 2
    std = ", ".join(
        f"{name} {value:.2f}" for name, value in zip(draw.names, result.std, strict=False)
    )
    summary = (
        f"target {result.target} placed by {len(placements)} references: std {std} samples, "
        f"mean distance to the truth {result.mean_error:.2f}, consensus error "
        f"{result.consensus_error:.2f}"
    )
    if draw.ndim == 2:
        height, width = image.shape[1:]
        low_y = min(0.0, float(placements[:, 0].min()) - size[0] / 2)
        high_y = max(float(height), float(placements[:, 0].max()) + size[0] / 2)
        low_x = min(0.0, float(placements[:, 1].min()) - size[1] / 2)
        high_x = max(float(width), float(placements[:, 1].max()) + size[1] / 2)
        grid_y = np.arange(math.floor(low_y), math.ceil(high_y)) + 0.5
        grid_x = np.arange(math.floor(low_x), math.ceil(high_x)) + 0.5
        bandwidth = np.maximum(size / 4, 0.5)
        density = _kernel_density(placements, [grid_y, grid_x], bandwidth)
        low, high = _display_range(image)
        figure, axes = plt.subplots(1, 2, figsize=(10, 4.8))
        _show(axes[0], image, low, high, f"input, target patch {result.target}")
        draw_box(axes[0], start, size, _TGT_COLOUR, 2.0)
        _show(axes[1], image, low, high, "placements of the target by every reference")
        axes[1].images[0].set_alpha(0.45)
        axes[1].imshow(
            density,
            extent=(
                float(grid_x[0] - 0.5),
                float(grid_x[-1] + 0.5),
                float(grid_y[-1] + 0.5),
                float(grid_y[0] - 0.5),
            ),
            cmap="magma",
            alpha=0.6,
            interpolation="bilinear",
        )
        axes[1].scatter(placements[:, 1], placements[:, 0], s=9, color="cyan", linewidths=0)
        draw_box(axes[1], start, size, _TGT_COLOUR, 2.0)
        axes[1].plot([centre[1]], [centre[0]], marker="x", color=_TGT_COLOUR, markersize=9)
        axes[1].set_xlim(low_x, high_x)
        axes[1].set_ylim(high_y, low_y)
    else:
        signal = image
        spacing = _channel_spacing(signal)
        length = signal.shape[1]
        times = placements[:, 0]
        figure, axes = plt.subplots(2, 1, figsize=(12, 3.5 + 0.8 * signal.shape[0]), sharex=True)
        _plot_signal(axes[0], signal, spacing, alpha=1.0)
        axes[0].axvspan(start[0], start[0] + size[0], color=_TGT_COLOUR, alpha=0.3, linewidth=0)
        axes[0].set_title(f"signal, target patch {result.target}", fontsize=9)
        low = min(0.0, float(times.min()))
        high = max(float(length), float(times.max()))
        bins = max(10, min(200, math.ceil((high - low) / max(size[0] / 4, 1.0))))
        axes[1].hist(times, bins=bins, range=(low, high), color="0.3")
        axes[1].axvspan(start[0], start[0] + size[0], color=_TGT_COLOUR, alpha=0.3, linewidth=0)
        axes[1].axvline(centre[0], color=_TGT_COLOUR, linewidth=1.5, label="true centre")
        axes[1].axvline(
            float(times.mean()), color="black", linestyle="--", linewidth=1.0, label="mean"
        )
        axes[1].legend(fontsize=8)
        axes[1].set_ylabel("references")
        axes[1].set_xlabel("placed centre (samples)")
        axes[1].set_xlim(low, high)
        axes[1].set_title("placements of the target by every reference", fontsize=9)
    figure.suptitle(summary, fontsize=9)
    figure.tight_layout()
    _save(figure, path)


# --------------------------------------------------------------------------------------------
# (iv) Negative symmetry
# --------------------------------------------------------------------------------------------


def negative_symmetry(
    model: PARTModel,
    x: Tensor | np.ndarray,
    *,
    generator: torch.Generator | None = None,
    path: str | os.PathLike[str] | None = None,
) -> NegativeSymmetry:
    """The predicted ``N x N`` translation matrices beside the truth, and how antisymmetric.

    If patch ``i`` sees patch ``j`` at ``Δ``, patch ``j`` should see ``i`` at ``-Δ`` (exactly for
    equal extents). The score is :func:`antisymmetry_score` of the predicted translations ``P``
    (off-diagonal, pooled over the batch), next to the ground truth's; the correlation is the
    Pearson correlation of ``P_ij`` with ``-P_ji`` (see :class:`NegativeSymmetry`).

    Figure (example 0, ``path`` given), the same for every ndim: one row per translation
    dimension (``t`` for 1D signals; ``y`` then ``x`` for images), four ``N x N`` matrices per
    row, entry ``(i, j)`` = reference ``i``, target ``j``: ground truth and prediction with the
    patches ordered by true position (first dimension, then the next: top-left to bottom-right
    for images), then both in sampling (shuffled) order. Diverging colours (red positive, blue
    negative, white zero) on one symmetric scale per row.

    Args:
        model: A PART model; its mode is restored afterwards.
        x: One example ``[C, *spatial]`` or a batch ``[B, C, *spatial]``.
        generator: Random source of the patch draw.
        path: Where to save the PNG figure; ``None``: no figure.

    Returns:
        A :class:`NegativeSymmetry`.

    Raises:
        InputError: On a non-PART ``model`` or a badly shaped or non-finite ``x``.
    """
    draw, target_path = _draw(model, x, generator, path)
    patches, ndim = draw.patches, draw.ndim
    batch, num_patches = patches.batch_size, patches.num_patches
    pred = draw.pred[..., :ndim].permute(0, 3, 1, 2).contiguous()  # [B, ndim, N, N]
    ref, tgt = all_pairs(num_patches)
    truth = relative_targets(patches.centers, patches.sizes, ref, tgt)
    truth = truth.view(batch, num_patches, num_patches, ndim).permute(0, 3, 1, 2).contiguous()
    mask = _off_diagonal(num_patches)

    def negation_correlation(matrix: Tensor) -> float:
        return _pearson(matrix[..., mask], -matrix.transpose(-1, -2)[..., mask])

    order = torch.stack(
        [
            torch.from_numpy(np.lexsort(patches.centers[b].numpy().T[::-1]).copy())
            for b in range(batch)
        ]
    )
    result = NegativeSymmetry(
        score=antisymmetry_score(pred),
        score_truth=antisymmetry_score(truth),
        score_per_dim=tuple(antisymmetry_score(pred[:, d]) for d in range(ndim)),
        score_truth_per_dim=tuple(antisymmetry_score(truth[:, d]) for d in range(ndim)),
        correlation=negation_correlation(pred),
        correlation_truth=negation_correlation(truth),
        correlation_per_dim=tuple(negation_correlation(pred[:, d]) for d in range(ndim)),
        truth_correlation=_pearson(pred[..., mask], truth[..., mask]),
        pred=pred,
        truth=truth,
        order=order,
    )
    if target_path is not None:
        _symmetry_figure(draw, result, target_path)
    return result


def _symmetry_figure(draw: _Draw, result: NegativeSymmetry, path: Path) -> None:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    ndim = draw.ndim
    order = result.order[0].numpy()
    figure, axes = plt.subplots(
        ndim, 4, figsize=(15, 3.4 * ndim + 0.8), squeeze=False, layout="constrained"
    )
    for d in range(ndim):
        truth = result.truth[0, d].numpy()
        pred = result.pred[0, d].numpy()
        scale = float(max(np.abs(truth).max(), np.abs(pred).max(), 1e-12))
        panels = (
            (truth[np.ix_(order, order)], "ground truth, ordered"),
            (pred[np.ix_(order, order)], "prediction, ordered"),
            (truth, "ground truth, sampling order"),
            (pred, "prediction, sampling order"),
        )
        image = None
        for ax, (matrix, title) in zip(axes[d], panels, strict=True):
            image = ax.imshow(
                matrix, cmap="RdBu_r", vmin=-scale, vmax=scale, interpolation="nearest"
            )
            ax.set_title(f"Δ{draw.names[d]}: {title}", fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("target j", fontsize=8)
        axes[d][0].set_ylabel("reference i", fontsize=8)
        assert image is not None
        figure.colorbar(image, ax=list(axes[d]), shrink=0.8, label="patch lengths")
    per_dim = ", ".join(
        f"{name} {value:.3f}" for name, value in zip(draw.names, result.score_per_dim, strict=False)
    )
    figure.suptitle(
        f"antisymmetry score: prediction {result.score:.3f} ({per_dim}), ground truth "
        f"{result.score_truth:.3f}; corr(P_ij, -P_ji) {result.correlation:.3f}; "
        f"corr(prediction, truth) {result.truth_correlation:.3f}",
        fontsize=9,
    )
    _save(figure, path)


# --------------------------------------------------------------------------------------------
# (ii) Scales and aspect ratios
# --------------------------------------------------------------------------------------------


def scale_prediction(
    model: PARTModel,
    x: Tensor | np.ndarray,
    *,
    generator: torch.Generator | None = None,
    path: str | os.PathLike[str] | None = None,
) -> ScalePrediction:
    """Error of the predicted extent ratios ``s_tgt / s_ref`` next to predicting their mean.

    Only for models trained with the scale/aspect extension (``model.scale_targets``, boxes of
    varying extent from ``scale_range``). Over every off-diagonal pair of every example, the
    per-dimension mean squared error of the predicted ratios is put next to the floor of the
    content-free predictor that outputs the mean true ratio (their variance), with
    :func:`~partnd.objectives.diagnostics.regression_diagnostics`.

    Figure (example 0, ``path`` given), the same for every ndim: one scatter panel per dimension
    (``st`` for 1D signals; ``sy``, ``sx`` for images) of predicted against true ratio (linear
    axes), with the identity line, the mean true ratio (the floor's prediction, dashed) and the
    panel's MSE, floor and ``R^2`` in its title.

    Args:
        model: A PART model with ``scale_targets=True``; its mode is restored afterwards.
        x: One example ``[C, *spatial]`` or a batch ``[B, C, *spatial]``.
        generator: Random source of the patch draw.
        path: Where to save the PNG figure; ``None``: no figure.

    Returns:
        A :class:`ScalePrediction`.

    Raises:
        InputError: If ``model`` is not a PART model predicting scale targets, or ``x`` is badly
            shaped or non-finite.
    """
    part = _check_model(model)
    check(
        part.scale_targets,
        "model",
        "a PARTModel trained with scale targets (scale_targets=True, boxes with scale_range)",
        "a model without scale targets",
    )
    draw, target_path = _draw(part, x, generator, path)
    patches, ndim = draw.patches, draw.ndim
    num_patches = patches.num_patches
    sizes = patches.sizes
    pred = draw.pred[..., ndim:]  # [B, N, N, ndim]
    truth = sizes[:, None, :, :] / sizes[:, :, None, :]  # [b, i, j] = s_j / s_i
    mask = _off_diagonal(num_patches)
    names = draw.names[ndim:]
    metrics = regression_diagnostics(pred[:, mask], truth[:, mask], names, ndim)
    result = ScalePrediction(
        names=tuple(names),
        mse=tuple(float(metrics[f"mse_{name}"]) for name in names),
        mse_floor=tuple(float(metrics[f"mse_floor_{name}"]) for name in names),
        r2=tuple(float(metrics[f"r2_{name}"]) for name in names),
        nmse=float(metrics["nmse"]),
        pred=pred,
        truth=truth,
    )
    if target_path is not None:
        _scale_figure(result, num_patches, target_path)
    return result


def _scale_figure(result: ScalePrediction, num_patches: int, path: Path) -> None:
    plt = _pyplot()
    mask = _off_diagonal(num_patches).numpy()
    count = len(result.names)
    figure, axes = plt.subplots(1, count, figsize=(4.6 * count, 4.4), squeeze=False)
    for d, ax in enumerate(axes[0]):
        truth = result.truth[0, ..., d].numpy()[mask]
        pred = result.pred[0, ..., d].numpy()[mask]
        ax.scatter(truth, pred, s=6, alpha=0.5, linewidths=0)
        low = float(min(truth.min(), pred.min()))
        high = float(max(truth.max(), pred.max()))
        ax.plot([low, high], [low, high], color="black", linewidth=1.0, label="identity")
        ax.axhline(float(truth.mean()), color="0.5", linestyle="--", linewidth=1.0, label="mean")
        ax.legend(fontsize=8, loc="upper left")
        ax.set_xlabel(f"true {result.names[d]} = s_tgt / s_ref")
        ax.set_ylabel("predicted")
        ax.set_title(
            f"{result.names[d]}: MSE {result.mse[d]:.4f} vs floor {result.mse_floor[d]:.4f} "
            f"(R² {result.r2[d]:.3f})",
            fontsize=9,
        )
    figure.tight_layout()
    _save(figure, path)
