"""Draw ``docs/figures/sampling_conventions.png``: the box and target conventions of partnd.

Top: a synthetic 30 s EEG-like trace (100 Hz) with off-grid 1 s boxes and the Δt of one pair.
Bottom: one image with on-grid tiles, off-grid boxes with scale/aspect and the Δ of one pair, and
the two patches of that pair after resampling to the patch size.

Run from the repository root (takes a few seconds):

    .venv/bin/python docs/make_sampling_figure.py [--out docs/figures/sampling_conventions.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from sklearn.datasets import load_sample_image

from partnd.evaluation.capabilities import draw_box
from partnd.patches.sampling import GridSampler, OffGridSampler, PatchBatch
from partnd.patches.targets import relative_targets

__all__ = ["draw_figure", "main"]

REF_COLOUR = "#f2b701"
TGT_COLOUR = "#2ca02c"
OTHER_COLOUR = "#1f77b4"


def _eeg_like_signal(num_samples: int, sfreq: float, seed: int) -> np.ndarray:
    """Pink-ish noise with an alpha burst and a sleep spindle, in µV."""
    rng = np.random.default_rng(seed)
    spectrum = rng.normal(size=num_samples // 2 + 1) + 1j * rng.normal(size=num_samples // 2 + 1)
    frequencies = np.fft.rfftfreq(num_samples, 1 / sfreq)
    spectrum /= np.maximum(frequencies, 0.5)
    signal = np.fft.irfft(spectrum, n=num_samples)
    signal *= 20 / signal.std()
    time = np.arange(num_samples) / sfreq
    alpha = np.exp(-(((time - 8.0) / 2.0) ** 2)) * np.sin(2 * np.pi * 10 * time)
    spindle = np.exp(-(((time - 21.0) / 0.6) ** 2)) * np.sin(2 * np.pi * 13 * time)
    return signal + 25 * alpha + 35 * spindle


def _draw_eeg(ax: Axes, seed: int) -> None:
    sfreq, patch = 100, 100
    signal = _eeg_like_signal(3000, sfreq, seed)
    x = torch.from_numpy(signal).float()[None, None]
    batch = OffGridSampler(1, patch, num_patches=8)(x, torch.Generator().manual_seed(seed))
    positions = np.arange(3000) + 0.5
    ax.plot(positions, signal, color="0.25", linewidth=0.5)
    for second in range(0, 3001, patch):
        ax.axvline(second, color="0.85", linewidth=0.5, zorder=0)
    starts, sizes, centers = batch.starts[0, :, 0], batch.sizes[0, :, 0], batch.centers[0, :, 0]
    ref = int((centers - 1000).abs().argmin())
    tgt = int((centers - 2000).abs().argmin())
    for n in range(batch.num_patches):
        colour = {ref: REF_COLOUR, tgt: TGT_COLOUR}.get(n, OTHER_COLOUR)
        ax.axvspan(float(starts[n]), float(starts[n] + sizes[n]), color=colour, alpha=0.35)
    delta = relative_targets(batch.centers, batch.sizes, torch.tensor([ref]), torch.tensor([tgt]))
    top = float(np.abs(signal).max()) * 1.1
    ax.annotate(
        "",
        xy=(float(centers[tgt]), top),
        xytext=(float(centers[ref]), top),
        arrowprops={"arrowstyle": "->", "color": "black"},
    )
    ax.text(
        float(centers[ref] + centers[tgt]) / 2,
        top * 1.05,
        f"Δt = (c_tgt − c_ref) / s_ref = ({centers[tgt]:.1f} − {centers[ref]:.1f}) / "
        f"{sizes[ref]:.0f} = {float(delta[0, 0, 0]):.3f}",
        ha="center",
        va="bottom",
        fontsize=8,
    )
    ax.set_ylim(-top * 1.1, top * 1.35)
    ax.set_xlim(0, 3000)
    ax.set_xlabel("input coordinate t (samples, 100 per second); grey lines: on-grid 1 s tiles")
    ax.set_ylabel("µV")
    ax.set_title(
        "1D: OffGridSampler(1, 100, num_patches=8) on a 30 s window "
        "(yellow = reference, green = target)",
        fontsize=9,
    )


def _draw_image_panels(axes: list[Axes], seed: int) -> None:
    photo = load_sample_image("china.jpg")[40:264, 200:424]  # a 224 x 224 crop
    image = torch.from_numpy(photo.copy()).permute(2, 0, 1).float()[None] / 255
    patch = 32
    grid = GridSampler(2, patch)(image)
    off_grid = OffGridSampler(2, patch, num_patches=10, scale_range=(0.5, 2.0))(
        image, torch.Generator().manual_seed(seed)
    )
    grid_ax, off_ax, patch_ax = axes
    for ax in (grid_ax, off_ax):
        ax.imshow(photo)
        ax.set_ylabel("row (1st coordinate)")
    grid_ax.set_xlabel("column (2nd coordinate)")
    for n in range(grid.num_patches):
        draw_box(grid_ax, grid.starts[0, n], grid.sizes[0, n], "white", 0.8)
    grid_ax.set_title(f"GridSampler(2, {patch}): {grid.num_patches} tiles", fontsize=9)
    ref, tgt = _draw_pair(off_ax, off_grid)
    off_ax.set_title("OffGridSampler(2, 32, scale_range=(0.5, 2))", fontsize=9)
    ref_patch = off_grid.patches[0, ref].permute(1, 2, 0).numpy()
    tgt_patch = off_grid.patches[0, tgt].permute(1, 2, 0).numpy()
    gap = np.ones((patch, 4, 3))
    patch_ax.imshow(np.concatenate([ref_patch, gap, tgt_patch], axis=1).clip(0, 1))
    patch_ax.set_title("ref | tgt after resampling to 32 x 32", fontsize=9)
    patch_ax.set_xticks([])
    patch_ax.set_yticks([])


def _draw_pair(ax: Axes, batch: PatchBatch) -> tuple[int, int]:
    """Draw the boxes, highlight a reference/target pair and its targets; return the pair."""
    centers = batch.centers[0]
    ref = int((centers - 112).norm(dim=1).argmin())
    tgt = int((centers - centers[ref]).norm(dim=1).argmax())
    others = [n for n in range(batch.num_patches) if n not in (ref, tgt)]
    for n in others:
        draw_box(ax, batch.starts[0, n], batch.sizes[0, n], OTHER_COLOUR, 1.0)
    draw_box(ax, batch.starts[0, ref], batch.sizes[0, ref], REF_COLOUR, 2.0)
    draw_box(ax, batch.starts[0, tgt], batch.sizes[0, tgt], TGT_COLOUR, 2.0)
    targets = relative_targets(
        batch.centers, batch.sizes, torch.tensor([ref]), torch.tensor([tgt]), scale=True
    )[0, 0]
    centre_ref, centre_tgt = batch.centers[0, ref], batch.centers[0, tgt]
    ax.annotate(
        "",
        xy=(float(centre_tgt[1]), float(centre_tgt[0])),
        xytext=(float(centre_ref[1]), float(centre_ref[0])),
        arrowprops={"arrowstyle": "->", "color": "white", "linewidth": 1.5},
    )
    columns = [float(centre_ref[1]), float(centre_tgt[1])]
    ax.plot(columns, [float(centre_ref[0]), float(centre_tgt[0])], "w.")
    ax.set_xlabel(
        f"Δ_row = {targets[0]:.2f}, Δ_col = {targets[1]:.2f} (in units of the ref extents)\n"
        f"h_tgt / h_ref = {targets[2]:.2f}, w_tgt / w_ref = {targets[3]:.2f}",
        fontsize=8,
    )
    return ref, tgt


def draw_figure(out: Path, seed: int = 3) -> None:
    """Render the figure to ``out`` (PNG)."""
    fig = plt.figure(figsize=(11, 7.2), dpi=90)
    grid = fig.add_gridspec(2, 3, height_ratios=[1, 1.35], hspace=0.4, wspace=0.3)
    _draw_eeg(fig.add_subplot(grid[0, :]), seed)
    _draw_image_panels([fig.add_subplot(grid[1, i]) for i in range(3)], seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "figures" / "sampling_conventions.png"
    )
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    draw_figure(args.out, args.seed)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
