"""Tables and figures of the image recipes, in the layout of the paper's image tables.

Every table is written as ``<name>.csv``, ``<name>.md`` and ``<name>.json`` (atomically,
:func:`partnd.recipes.report_files.write_table`); the paper's numbers sit in ``paper_*`` columns next to
the measured ones (empty where the paper has none).

| table | paper | rows |
|---|---|---|
| ``results`` | CIFAR-100 / ImageNet-1k comparison tables | one per method |
| ``ablation_sampling`` | "Apples-to-apples comparison" (on- vs off-grid) | PART, PART-grid |
| ``ablation_heads`` | "Ablation on different relative encoders" (CIFAR-100) | MLP, pairwise MLP, cross-attention |
| ``ablation_pairs`` | "#patch_pairs ablation" (figure) | one per number of pairs |
| ``ablation_scale`` | "Extending PART to patches of different aspect ratios & scales" | PART, PART + scale |
"""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from partnd.recipes.report_files import save_figure

__all__ = [
    "PAPER_HEADS",
    "PAPER_SAMPLING",
    "PAPER_SCALE",
    "PAPER_TOP1",
    "VariantResult",
    "heads_table",
    "pairs_table",
    "plot_pairs",
    "results_table",
    "sampling_table",
    "scale_table",
]

#: The paper's accuracies (top-1, %) with their pretraining / fine-tuning epochs, per dataset and
#: partnd method. CIFAR-100: the "CIFAR-100 ViT-S" table (MP3 without position embedding, as
#: partnd's MP3; PART-grid from the sampling ablation). ImageNet-1k: the "ImageNet-1k
#: classification with ViT-B" table (MAE's 150/150-epoch row, MP3 without position embedding).
PAPER_TOP1: dict[str, dict[str, tuple[float, int | None, int | None]]] = {
    "cifar100": {
        "supervised": (73.6, 0, None),
        "supervised_no_pos": (64.6, 0, None),
        "mae": (84.5, 2000, None),
        "mp3": (82.6, 2000, None),
        "part": (83.0, 1000, 400),
        "part_grid": (82.1, None, None),
    },
    "imagenet": {
        "supervised": (81.8, 0, 300),
        "supervised_no_pos": (79.1, 0, 300),
        "mae": (82.7, 150, 150),
        "mp3": (81.9, 100, 300),
        "droppos": (83.0, 200, 100),
        "part": (82.7, 400, 300),
        "part_grid": (82.43, None, None),
    },
}

#: The sampling ablation ("Apples-to-apples comparison"): COCO AP^b, CIFAR-100 and IN-1K top-1.
PAPER_SAMPLING: dict[str, dict[str, float]] = {
    "part_grid": {"coco_ap_b": 41.4, "cifar100": 82.1, "imagenet": 82.43},
    "part": {"coco_ap_b": 42.4, "cifar100": 83.0, "imagenet": 82.7},
}

#: The heads ablation (CIFAR-100, 1000 pretraining epochs): x, y and Euclidean errors, top-1.
PAPER_HEADS: dict[str, dict[str, float]] = {
    "mlp": {"x": 3.18, "y": 2.02, "euclid": 1.68, "top1": 82.38},
    "pairwise_mlp": {"x": 2.84, "y": 1.76, "euclid": 1.59, "top1": 82.52},
    "cross_attention": {"x": 1.14, "y": 0.77, "euclid": 0.81, "top1": 83.00},
}

#: The scale/aspect extension (ImageNet pretraining): COCO AP^b / AP^b_50 / AP^b_75, IN-1K top-1.
PAPER_SCALE: dict[bool, dict[str, float]] = {
    False: {"coco_ap_b": 42.4, "coco_ap_b50": 62.5, "coco_ap_b75": 46.8, "imagenet": 82.7},
    True: {"coco_ap_b": 42.0, "coco_ap_b50": 61.8, "coco_ap_b75": 46.3, "imagenet": 82.6},
}

#: The number of pairs the paper found best on CIFAR-100 ("sweet spot").
PAPER_BEST_PAIRS = 2048


@dataclass(frozen=True)
class VariantResult:
    """A finished variant (pretraining, when any, and DeiT fine-tuning).

    Attributes:
        name: Variant name (``part``, ``part_head-mlp``, ``supervised``...).
        method: Pretraining method, or ``supervised`` / ``supervised_no_pos``.
        pretrain_epochs: Pretraining epochs (0 from scratch).
        finetune_epochs: Fine-tuning epochs.
        pos_embed: Whether the method uses a position embedding (in pretraining; for the
            from-scratch baselines, in training).
        top1: Test top-1 accuracy (%).
        top5: Test top-5 accuracy (%), ``None`` with fewer than 5 classes.
        n_test: Test images.
        pretext: The pretraining's last epoch record (diagnostics next to their floors).
        pretrain_config: The pretraining configuration (``None`` from scratch).
        head_parameters: Parameters of the relative head (PART variants).
    """

    name: str
    method: str
    pretrain_epochs: int
    finetune_epochs: int
    pos_embed: bool
    top1: float
    top5: float | None
    n_test: int
    pretext: Mapping[str, Any] = field(default_factory=dict)
    pretrain_config: Mapping[str, Any] | None = None
    head_parameters: int | None = None


def _round(value: Any, digits: int = 4) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return round(value, digits)
    return "" if value is None else value


def results_table(results: Sequence[VariantResult], dataset: str) -> list[dict[str, Any]]:
    """The paper's comparison table: method, PT epochs, FT epochs, pos embed, top-1.

    Columns: ``method``, ``pt_epochs``, ``ft_epochs``, ``pos_embed`` (yes/no), ``top1``,
    ``top5``, ``n_test``, ``paper_top1``, ``paper_pt_epochs``, ``paper_ft_epochs``.
    """
    rows = []
    paper = PAPER_TOP1.get(dataset, {})
    for result in results:
        reference = paper.get(result.name)
        rows.append(
            {
                "method": result.name,
                "pt_epochs": result.pretrain_epochs,
                "ft_epochs": result.finetune_epochs,
                "pos_embed": "yes" if result.pos_embed else "no",
                "top1": _round(result.top1, 2),
                "top5": _round(result.top5, 2),
                "n_test": result.n_test,
                "paper_top1": "" if reference is None else reference[0],
                "paper_pt_epochs": "" if reference is None else _round(reference[1]),
                "paper_ft_epochs": "" if reference is None else _round(reference[2]),
            }
        )
    return rows


def _pretext(result: VariantResult, key: str) -> Any:
    return _round(result.pretext.get(key))


def sampling_table(results: Sequence[VariantResult], dataset: str) -> list[dict[str, Any]]:
    """On-grid (PART-grid) against off-grid (PART) sampling with the same objective.

    Columns: ``method``, ``sampling``, ``pt_epochs``, ``ft_epochs``, ``top1``, ``nmse``,
    ``euclid``, ``euclid_floor``, ``paper_top1``, ``paper_coco_ap_b``.
    """
    rows = []
    for result in results:
        paper = PAPER_SAMPLING.get(result.method, {})
        rows.append(
            {
                "method": result.name,
                "sampling": "on-grid" if result.method == "part_grid" else "off-grid",
                "pt_epochs": result.pretrain_epochs,
                "ft_epochs": result.finetune_epochs,
                "top1": _round(result.top1, 2),
                "nmse": _pretext(result, "nmse"),
                "euclid": _pretext(result, "euclid"),
                "euclid_floor": _pretext(result, "euclid_floor"),
                "paper_top1": paper.get(dataset, ""),
                "paper_coco_ap_b": paper.get("coco_ap_b", ""),
            }
        )
    return rows


def heads_table(results: Sequence[VariantResult]) -> list[dict[str, Any]]:
    """The relative-encoder ablation: the x / y mean squared errors and the Euclidean error of the
    translation (from the last pretraining epoch, next to the content-free floors), the head's
    parameter count, and the fine-tuned top-1.

    Columns: ``head``, ``variant``, ``head_parameters``, ``mse_x``, ``mse_floor_x``, ``mse_y``,
    ``mse_floor_y``, ``euclid``, ``euclid_floor``, ``top1``, ``paper_x``, ``paper_y``,
    ``paper_euclid``, ``paper_top1``.
    """
    rows = []
    for result in results:
        head = str((result.pretrain_config or {}).get("head", ""))
        paper = PAPER_HEADS.get(head, {})
        rows.append(
            {
                "head": head,
                "variant": result.name,
                "head_parameters": _round(result.head_parameters),
                "mse_x": _pretext(result, "mse_x"),
                "mse_floor_x": _pretext(result, "mse_floor_x"),
                "mse_y": _pretext(result, "mse_y"),
                "mse_floor_y": _pretext(result, "mse_floor_y"),
                "euclid": _pretext(result, "euclid"),
                "euclid_floor": _pretext(result, "euclid_floor"),
                "top1": _round(result.top1, 2),
                "paper_x": paper.get("x", ""),
                "paper_y": paper.get("y", ""),
                "paper_euclid": paper.get("euclid", ""),
                "paper_top1": paper.get("top1", ""),
            }
        )
    return rows


def pairs_table(results: Sequence[VariantResult]) -> list[dict[str, Any]]:
    """The number-of-pairs sweep, sorted by the number of pairs.

    Columns: ``num_pairs``, ``variant``, ``pt_epochs``, ``top1``, ``nmse``, ``euclid``,
    ``euclid_floor``, ``paper_best`` ("yes" at the paper's sweet spot, 2048).
    """
    rows = []
    for result in results:
        pairs = int((result.pretrain_config or {}).get("num_pairs", 0))
        rows.append(
            {
                "num_pairs": pairs,
                "variant": result.name,
                "pt_epochs": result.pretrain_epochs,
                "top1": _round(result.top1, 2),
                "nmse": _pretext(result, "nmse"),
                "euclid": _pretext(result, "euclid"),
                "euclid_floor": _pretext(result, "euclid_floor"),
                "paper_best": "yes" if pairs == PAPER_BEST_PAIRS else "",
            }
        )
    return sorted(rows, key=lambda row: int(row["num_pairs"]))


def scale_table(results: Sequence[VariantResult], dataset: str) -> list[dict[str, Any]]:
    """PART with fixed-size boxes against the scale/aspect extension (Δw, Δh targets).

    Columns: ``variant``, ``scale_range``, ``scale_targets``, ``top1``, ``nmse``, ``mse_x``,
    ``mse_y``, ``mse_sx``, ``mse_sy`` (scale channels; empty without), ``paper_imagenet_top1``,
    ``paper_coco_ap_b``, ``paper_coco_ap_b50``, ``paper_coco_ap_b75``.
    """
    rows = []
    for result in results:
        config = result.pretrain_config or {}
        scaled = bool(config.get("scale_targets", False))
        paper = PAPER_SCALE[scaled]
        scale_range = config.get("scale_range")
        rows.append(
            {
                "variant": result.name,
                "scale_range": "" if scale_range is None else "-".join(map(str, scale_range)),
                "scale_targets": "yes" if scaled else "no",
                "top1": _round(result.top1, 2),
                "nmse": _pretext(result, "nmse"),
                "mse_x": _pretext(result, "mse_x"),
                "mse_y": _pretext(result, "mse_y"),
                "mse_sx": _pretext(result, "mse_sx"),
                "mse_sy": _pretext(result, "mse_sy"),
                "paper_imagenet_top1": paper["imagenet"],
                "paper_coco_ap_b": paper["coco_ap_b"],
                "paper_coco_ap_b50": paper["coco_ap_b50"],
                "paper_coco_ap_b75": paper["coco_ap_b75"],
            }
        )
    return rows


def plot_pairs(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """The #pairs curve: fine-tuned top-1 (left axis) and pretext NMSE (right axis) against the
    number of pairs (log2 axis), the paper's sweet spot marked."""
    pairs = [int(row["num_pairs"]) for row in rows]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.plot(pairs, [float(row["top1"]) for row in rows], "o-", color="tab:blue", label="top-1")
    ax.set_xscale("log", base=2)
    ax.set_xticks(pairs, [str(p) for p in pairs])
    ax.set_xlabel("#pairs")
    ax.set_ylabel("fine-tuned top-1 (%)", color="tab:blue")
    ax.axvline(PAPER_BEST_PAIRS, color="grey", ls=":", lw=1, label="paper's best (2048)")
    nmse = [row["nmse"] for row in rows]
    if all(isinstance(value, float) for value in nmse):
        twin = ax.twinx()
        twin.plot(pairs, nmse, "s--", color="tab:orange", label="pretext NMSE")
        twin.set_ylabel("pretext NMSE (1 = content-free)", color="tab:orange")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    save_figure(fig, path)
