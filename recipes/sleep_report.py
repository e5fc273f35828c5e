"""Tables and figures of the sleep-staging recipe, saved to its run directory."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from partnd.metrics import ClassificationReport

__all__ = [
    "PAPER_KAPPA_10_SUBJECTS",
    "MethodResult",
    "plot_confusion_matrices",
    "plot_finetune_validation",
    "plot_hypnogram",
    "plot_pretrain_loss",
    "write_results_table",
]

#: Cohen's kappa on PhysioNet 2018 with 10 fine-tuning subjects, tested on 200 (paper, Table 3).
PAPER_KAPPA_10_SUBJECTS: dict[str, float] = {"part": 0.616, "supervised": 0.531}


@dataclass
class MethodResult:
    """Test outcome of one method.

    Attributes:
        name: Method name (``"part"``, ``"supervised"``).
        report: Metrics on the held-out test subjects.
        history: The fine-tuning run's logged records.
        predictions: Predicted stage per test window, ``[n_test]``.
    """

    name: str
    report: ClassificationReport
    history: list[dict[str, Any]]
    predictions: np.ndarray


def _rows(results: Sequence[MethodResult], class_names: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for result in results:
        report = result.report
        row: dict[str, Any] = {
            "method": result.name,
            "cohen_kappa": round(report.cohen_kappa, 4),
            "accuracy": round(report.accuracy, 4),
            "macro_f1": round(report.macro_f1, 4),
        }
        row.update({f"f1_{name}": round(report.per_class_f1[name], 4) for name in class_names})
        row["n_test_windows"] = report.n
        row["paper_kappa_10_subjects"] = PAPER_KAPPA_10_SUBJECTS.get(result.name, "")
        rows.append(row)
    return rows


def write_results_table(
    results: Sequence[MethodResult], out_dir: Path, class_names: Sequence[str]
) -> list[dict[str, Any]]:
    """Write ``results.csv``, ``results.md`` and ``results.json`` (one row per method).

    Args:
        results: Per-method test results.
        out_dir: Run directory.
        class_names: Stage names, for the per-class F1 columns.

    Returns:
        The table rows.
    """
    rows = _rows(results, class_names)
    columns = list(rows[0])
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows),
    ]
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    payload = {result.name: result.report.to_dict() for result in results} | {
        "paper_kappa_10_subjects": PAPER_KAPPA_10_SUBJECTS
    }
    (out_dir / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
    return rows


def plot_pretrain_loss(history: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Plot the PART training loss per logged step (``phase == "train"``) to ``path``."""
    steps = [record["step"] for record in history if record.get("phase") == "train"]
    losses = [record["loss"] for record in history if record.get("phase") == "train"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, losses, color="tab:blue")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("PART loss (MSE of Δt)")
    ax.set_yscale("log")
    ax.set_title("PART pretraining")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_finetune_validation(results: Sequence[MethodResult], path: Path) -> None:
    """Plot each method's validation kappa per fine-tuning epoch (if validated) to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for result in results:
        val = [record for record in result.history if record.get("phase") == "val"]
        if val:
            ax.plot(
                [record["epoch"] for record in val],
                [record["cohen_kappa"] for record in val],
                marker="o",
                label=result.name,
            )
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation Cohen's kappa")
    ax.set_title("Fine-tuning")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_confusion_matrices(
    results: Sequence[MethodResult], class_names: Sequence[str], path: Path
) -> None:
    """Row-normalised test confusion matrices of every method side by side, saved to ``path``."""
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 4), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        counts = result.report.confusion_matrix.astype(float)
        rates = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
        ax.imshow(rates, vmin=0.0, vmax=1.0, cmap="Blues")
        for (i, j), value in np.ndenumerate(rates):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.5 else "black")  # fmt: skip
        ax.set_xticks(range(len(class_names)), class_names)
        ax.set_yticks(range(len(class_names)), class_names)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(f"{result.name}: κ = {result.report.cohen_kappa:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_hypnogram(
    truth: np.ndarray,
    predictions: Mapping[str, np.ndarray],
    class_names: Sequence[str],
    path: Path,
    *,
    title: str = "",
) -> None:
    """Plot the scored hypnogram of one record above each method's predicted one.

    Args:
        truth: True stage per window, ``[W]``.
        predictions: Method name -> predicted stage per window, ``[W]`` each.
        class_names: Stage names in code order (W, N1, N2, N3, REM).
        path: Output PNG.
        title: Figure title.
    """
    # Conventional hypnogram order from top to bottom: W, REM, N1, N2, N3.
    display_order = [0, 4, 1, 2, 3] if len(class_names) == 5 else list(range(len(class_names)))
    level = {code: -rank for rank, code in enumerate(display_order)}
    panels = {"scored": truth, **predictions}
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.6 * len(panels)), sharex=True)
    hours = np.arange(len(truth)) * 30.0 / 3600.0
    for ax, (name, stages) in zip(np.atleast_1d(axes), panels.items(), strict=True):
        ax.step(hours, [level[int(s)] for s in stages], where="post", lw=0.9)
        ax.set_yticks([level[c] for c in display_order], [class_names[c] for c in display_order])
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[-1].set_xlabel("hours from first kept window")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
