"""Tables and figures of the sleep-staging recipe, saved to its run directory."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from partnd.engine.checkpoint import atomic_save, atomic_write_text
from partnd.metrics import ClassificationReport
from partnd.stats import bootstrap_metric, kappa_metric, paired_bootstrap_difference

__all__ = [
    "ARM_LINESTYLES",
    "PAPER_KAPPA_10_SUBJECTS",
    "PAPER_SAMPLE_EFFICIENCY",
    "default_reference",
    "plot_confusion_matrices",
    "plot_finetune_validation",
    "plot_hypnogram",
    "plot_pretrain_loss",
    "plot_sample_efficiency",
    "sample_efficiency_styles",
    "sample_efficiency_tables",
    "staging_table",
    "write_table",
]

#: Cohen's kappa on PhysioNet 2018 with 10 fine-tuning subjects, tested on 200 (paper, Table 3;
#: PART-grid from its sampling ablation).
PAPER_KAPPA_10_SUBJECTS: dict[str, float] = {
    "supervised": 0.531,
    "mp3": 0.553,
    "droppos": 0.582,
    "mae": 0.595,
    "part": 0.616,
    "part_grid": 0.500,
}

#: Kappa by number of fine-tuning subjects, mean of 5 seeds (paper, appendix "Sample efficiency").
PAPER_SAMPLE_EFFICIENCY: dict[str, dict[int, float]] = {
    "mp3": {10: 0.56, 50: 0.63, 100: 0.65, 657: 0.68},
    "droppos": {10: 0.58, 50: 0.64, 100: 0.66, 657: 0.68},
    "mae": {10: 0.62, 50: 0.65, 100: 0.67, 657: 0.68},
    "part": {10: 0.64, 50: 0.67, 100: 0.68, 657: 0.70},
}


class _Cell(Protocol):
    method: str
    arm: str
    budget: int
    seed: int
    report: ClassificationReport
    predictions: np.ndarray
    history: list[dict[str, Any]]
    settings: dict[str, Any]

    @property
    def label(self) -> str: ...


def default_reference(cells: Sequence[_Cell]) -> str:
    """The row every other is compared with: the classical row with context when present (the
    strongest simple baseline), else PART's single-window row, else the first."""
    labels = [cell.label for cell in cells]
    for candidate in ("classical+seq", "part"):
        if candidate in labels:
            return candidate
    return labels[0]


def staging_table(
    cells: Sequence[_Cell],
    truth: np.ndarray,
    subjects: np.ndarray,
    class_names: Sequence[str],
    pretrain_steps: Mapping[str, int],
    *,
    reference: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The sleep-staging table with uncertainty, one row per method and arm.

    Columns: ``row`` (``method``, ``method+seq``, ``method+night``, ``method probe``), ``method``,
    ``arm``,
    ``labels`` (labelled subjects used), ``pt_steps``, the settings the row used (``ft_steps``,
    ``selected_step`` and its ``val_kappa``, ``augmentations``, ``context``), ``kappa`` with its
    95% interval from a bootstrap over test subjects (``kappa_low``, ``kappa_high``), the paired
    difference to the ``reference`` row on the same resampled subjects (``delta_kappa``,
    ``delta_low``, ``delta_high``), ``accuracy``, ``macro_f1``, ``f1_<stage>``,
    ``n_test_windows``, ``n_test_subjects``, the paper's kappa (single-window rows of its methods)
    and a ``note``.

    Args:
        cells: One finished cell per row (same test set).
        truth: [n_test] true stages.
        subjects: [n_test] subject of every test window.
        class_names: Stage names.
        pretrain_steps: Method -> pretraining optimiser steps (absent: no pretraining).
        reference: The row differences are measured against (default
            :func:`default_reference`).
        n_boot: Bootstrap replicates.
        seed: Seed of the replicates (shared by every row, so differences are paired).
    """
    metric = kappa_metric(len(class_names))
    reference = reference or default_reference(cells)
    by_label = {cell.label: cell for cell in cells}
    rows = []
    for cell in cells:
        report, settings = cell.report, cell.settings
        interval = bootstrap_metric(
            truth, cell.predictions, subjects, metric, n_boot=n_boot, seed=seed
        )
        row: dict[str, Any] = {
            "row": cell.label,
            "method": cell.method,
            "arm": cell.arm,
            "labels": 0 if cell.method == "yasa_pretrained" else cell.budget,
            "pt_steps": pretrain_steps.get(cell.method, 0),
            "ft_steps": settings.get("steps", ""),
            "selected_step": settings.get("selected_step") or "",
            "val_kappa": settings.get("val_kappa") or "",
            "augmentations": "+".join(settings.get("augmentations") or []),
            "context": settings.get("context") or "",
            "kappa": round(report.cohen_kappa, 4),
            "kappa_low": round(interval.low, 4),
            "kappa_high": round(interval.high, 4),
        }
        if reference in by_label and cell.label != reference:
            delta = paired_bootstrap_difference(
                truth,
                cell.predictions,
                by_label[reference].predictions,
                subjects,
                metric,
                n_boot=n_boot,
                seed=seed,
            )
            row.update(
                delta_kappa=round(delta.estimate, 4),
                delta_low=round(delta.low, 4),
                delta_high=round(delta.high, 4),
            )
        else:
            row.update(delta_kappa="", delta_low="", delta_high="")
        row.update(accuracy=round(report.accuracy, 4), macro_f1=round(report.macro_f1, 4))
        row.update({f"f1_{name}": round(report.per_class_f1[name], 4) for name in class_names})
        row["n_test_windows"] = report.n
        row["n_test_subjects"] = len(np.unique(subjects))
        paper = PAPER_KAPPA_10_SUBJECTS.get(cell.method, "") if cell.arm == "window" else ""
        row["paper_kappa"] = paper
        row["note"] = settings.get("note", "")
        rows.append(row)
    return rows


def write_table(rows: Sequence[Mapping[str, Any]], out_dir: Path, name: str) -> None:
    """Write ``<name>.csv``, ``<name>.md`` and ``<name>.json`` (atomically each)."""
    columns = list(rows[0])
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(buffer.getvalue(), out_dir / f"{name}.csv")
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
        *("| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows),
    ]
    atomic_write_text("\n".join(lines) + "\n", out_dir / f"{name}.md")
    atomic_write_text(json.dumps(list(rows), indent=2) + "\n", out_dir / f"{name}.json")


def sample_efficiency_tables(
    cells: Sequence[_Cell], reference: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The appendix layout: one row per budget, one column per row label (``method``,
    ``method+seq``, ``method probe``), ``mean ± std`` of kappa over seeds; and the paired
    difference to ``reference`` per seed, as ``mean ± std``.

    Returns:
        ``(kappa_rows, difference_rows)``; each row has ``subjects`` and one column per label
        (``"0.612 ± 0.021 (n=5)"``), and the kappa rows the paper's values as ``paper_<method>``.
    """
    labels = list(dict.fromkeys(cell.label for cell in cells))
    reference = reference or default_reference(cells)
    budgets = sorted({cell.budget for cell in cells})
    kappa = {(c.label, c.budget, c.seed): c.report.cohen_kappa for c in cells}

    def summary(values: list[float]) -> str:
        if not values:
            return ""
        spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        return f"{np.mean(values):.3f} ± {spread:.3f} (n={len(values)})"

    kappa_rows, difference_rows = [], []
    for budget in budgets:
        row: dict[str, Any] = {"subjects": budget}
        diff: dict[str, Any] = {"subjects": budget}
        for label in labels:
            seeds = sorted(s for (m, b, s) in kappa if m == label and b == budget)
            row[label] = summary([kappa[(label, budget, s)] for s in seeds])
            if label != reference:
                paired = [
                    kappa[(label, budget, s)] - kappa[(reference, budget, s)]
                    for s in seeds
                    if (reference, budget, s) in kappa
                ]
                diff[f"{label} - {reference}"] = summary(paired)
        for method, values in PAPER_SAMPLE_EFFICIENCY.items():
            row[f"paper_{method}"] = values.get(budget, "")
        kappa_rows.append(row)
        difference_rows.append(diff)
    return kappa_rows, difference_rows


#: Line style of each arm in the sample-efficiency figure (colour is the method).
ARM_LINESTYLES: dict[str, str] = {"window": "-", "sequence": "--", "night": "-.", "probe": ":"}


def sample_efficiency_styles(cells: Sequence[_Cell]) -> dict[str, tuple[Any, str]]:
    """Colour and line style of each row of the figure: one colour per method (in order of first
    appearance, from a 20-colour palette so that no two methods share one) and one line style per
    arm (window solid, sequence dashed, night dash-dotted, probe dotted).

    Returns:
        ``{row label: (RGBA colour, line style)}``.
    """
    methods = list(dict.fromkeys(cell.method for cell in cells))
    palette = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
    colours = {method: palette(index % palette.N) for index, method in enumerate(methods)}
    return {cell.label: (colours[cell.method], ARM_LINESTYLES[cell.arm]) for cell in cells}


def plot_sample_efficiency(cells: Sequence[_Cell], path: Path, note: str = "") -> None:
    """Kappa against the number of fine-tuning subjects: mean over seeds with the min-max spread
    as a band and every seed as a dot; colour is the method and line style the arm
    (``sample_efficiency_styles``); log-scaled x axis ticked at the budgets, legend beside the
    axes; ``note`` (e.g. that cells are missing) is added to the title."""
    styles = sample_efficiency_styles(cells)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    all_budgets = sorted({cell.budget for cell in cells})
    for label, (colour, linestyle) in styles.items():
        mine = [cell for cell in cells if cell.label == label]
        budgets = sorted({cell.budget for cell in mine})
        values = [[c.report.cohen_kappa for c in mine if c.budget == b] for b in budgets]
        ax.plot(
            budgets, [np.mean(v) for v in values], marker="o", ls=linestyle, color=colour,
            label=label,
        )  # fmt: skip
        ax.fill_between(
            budgets, [min(v) for v in values], [max(v) for v in values], alpha=0.12, color=colour
        )
        for budget, seed_values in zip(budgets, values, strict=True):
            ax.scatter([budget] * len(seed_values), seed_values, s=8, color=colour)
    ax.set_xscale("log")
    ax.set_xticks(all_budgets, [str(budget) for budget in all_budgets])
    ax.minorticks_off()
    ax.set_xlabel("fine-tuning subjects")
    ax.set_ylabel("Cohen's kappa on test subjects")
    ax.set_title("Sample efficiency (mean, spread and seeds)" + (f"\n{note}" if note else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Any, path: Path) -> None:
    atomic_save(
        fig, path, save=lambda figure, handle: figure.savefig(handle, format="png", dpi=120)
    )
    plt.close(fig)


def plot_pretrain_loss(histories: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    """Each method's pretext diagnostic per logged step, normalised by its content-free floor
    (``nmse`` for PART, ``recon_nmse`` for MAE, ``1 - accuracy`` over ``1 - chance`` for the
    position classifiers): 1.0 means no better than ignoring the content. PART across windows
    also shows ``nmse_isolated`` (dotted): the pairs whose windows share no samples with another
    drawn window."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method, history in histories.items():
        train = [r for r in history if r.get("phase") == "train"]
        if not train:
            continue
        if "nmse" in train[0]:
            values = [r["nmse"] for r in train]
        elif "recon_nmse" in train[0]:
            values = [r["recon_nmse"] for r in train]
        elif "accuracy" in train[0]:
            values = [(1 - r["accuracy"]) / (1 - r["accuracy_chance"]) for r in train]
        else:
            continue
        line = ax.plot([r["step"] for r in train], values, label=method)[0]
        if "nmse_isolated" in train[0]:
            ax.plot(
                [r["step"] for r in train],
                [r["nmse_isolated"] for r in train],
                color=line.get_color(),
                ls=":",
                label=f"{method}, isolated pairs",
            )
    ax.axhline(1.0, color="black", lw=0.8, ls="--", label="content-free floor")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("pretext error / floor")
    ax.set_title("Pretraining: is the pretext learned from content?")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _save(fig, path)


def plot_finetune_validation(results: Sequence[_Cell], path: Path) -> None:
    """Plot each row's validation kappa per fine-tuning step (if validated) to ``path``."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for result in results:
        val = [record for record in result.history if record.get("phase") == "val"]
        if val:
            ax.plot(
                [record["step"] for record in val],
                [record["cohen_kappa"] for record in val],
                marker="o",
                markersize=3,
                label=result.label,
            )
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("validation Cohen's kappa")
    ax.set_title("Fine-tuning")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    _save(fig, path)


def plot_confusion_matrices(
    results: Sequence[_Cell], class_names: Sequence[str], path: Path
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
        ax.set_title(f"{result.label}: κ = {result.report.cohen_kappa:.3f}")
    fig.tight_layout()
    _save(fig, path)


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
    _save(fig, path)
