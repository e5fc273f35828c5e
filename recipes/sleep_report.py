"""Tables and figures of the sleep-staging recipe, saved to its run directory."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from partnd._validation import check
from partnd.datasets.label_budget import LabelBudget
from partnd.evaluation.bootstrap import bootstrap_metric, kappa_metric, paired_bootstrap_difference
from partnd.evaluation.metrics import ClassificationReport
from partnd.objectives.diagnostics import pretext_error
from partnd.recipes.baselines import POOL_CEILING
from partnd.recipes.report_files import save_figure

__all__ = [
    "ARM_LINESTYLES",
    "CONFUSION_COLUMNS",
    "PAPER_KAPPA_10_SUBJECTS",
    "PAPER_SAMPLE_EFFICIENCY",
    "REFERENCE_METHODS",
    "budget_order",
    "confusion_figure",
    "default_reference",
    "plot_confusion_matrices",
    "plot_finetune_validation",
    "plot_hypnogram",
    "plot_pretrain_loss",
    "plot_sample_efficiency",
    "plot_spread",
    "sample_efficiency_styles",
    "sample_efficiency_tables",
    "staging_table",
    "summary",
    "summary_table",
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
    budget: int | str
    seed: int
    report: ClassificationReport
    predictions: np.ndarray
    history: list[dict[str, Any]]
    settings: dict[str, Any]
    pool: str | None

    @property
    def label(self) -> str: ...


def budget_order(budgets: Iterable[int | str]) -> list[int | str]:
    """Distinct label budgets as written (``2``, ``"w20"``), scarcest first: windows per stage
    before subjects (:attr:`~partnd.datasets.label_budget.LabelBudget.sort_key`)."""
    parsed = {LabelBudget.parse(budget) for budget in budgets}
    return [budget.to_json() for budget in sorted(parsed, key=lambda b: b.sort_key)]


def summary(values: Sequence[float]) -> str:
    """``"0.612 ± 0.021 (n=5)"``: mean and sample standard deviation (0 for one value)."""
    if not values:
        return ""
    spread = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{np.mean(values):.3f} ± {spread:.3f} (n={len(values)})"


def default_reference(cells: Sequence[_Cell]) -> str:
    """The row every other is compared with: the classical row with context when present (the
    strongest simple baseline), else PART's single-window row, else the first that is not the
    oracle ceiling (:data:`~partnd.recipes.baselines.POOL_CEILING`, no user's row)."""
    labels = [cell.label for cell in cells]
    for candidate in ("classical+seq", "part"):
        if candidate in labels:
            return candidate
    users = [cell.label for cell in cells if cell.method != POOL_CEILING]
    return (users or labels)[0]


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


def _interval(estimate: Any, low: Any, high: Any, signed: bool = False) -> str:
    """``"0.712 [0.651, 0.770]"`` (``signed``: ``"+0.012 [-0.030, +0.051]"``); empty without an
    estimate."""
    if estimate == "":
        return ""
    form = "+.3f" if signed else ".3f"
    return f"{estimate:{form}} [{low:{form}}, {high:{form}}]"


def summary_table(table: Sequence[Mapping[str, Any]], reference: str) -> list[dict[str, Any]]:
    """The columns a reader compares, from :func:`staging_table`'s rows: ``row``, ``labels``,
    ``kappa [95% CI]``, the difference to ``reference`` with its interval (``—`` on the
    reference row), ``macro-F1`` and ``N1 F1`` (when the stages have N1).

    Args:
        table: The full table's rows.
        reference: The row the differences are measured against (its label).

    Returns:
        One row per row of ``table``, its values formatted as text.
    """
    difference = f"difference to {reference} [95% CI]"
    rows = []
    for row in table:
        compact: dict[str, Any] = {
            "row": row["row"],
            "labels": row["labels"],
            "kappa [95% CI]": _interval(row["kappa"], row["kappa_low"], row["kappa_high"]),
            difference: "—"
            if row["row"] == reference
            else _interval(row["delta_kappa"], row["delta_low"], row["delta_high"], signed=True),
            "macro-F1": f"{row['macro_f1']:.3f}",
        }
        if "f1_N1" in row:
            compact["N1 F1"] = f"{row['f1_N1']:.3f}"
        rows.append(compact)
    return rows


def sample_efficiency_tables(
    cells: Sequence[_Cell], reference: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The appendix layout: one row per label budget (scarcest first), one column per row label
    (``method``, ``method+seq``, ``method probe``, with `` @<pool>`` for a pool's encoder),
    ``mean ± std`` of kappa over draws (seeds); and the paired difference to ``reference`` per
    draw, as ``mean ± std``.

    Returns:
        ``(kappa_rows, difference_rows)``; each row has ``budget`` (``2`` subjects, ``w20``
        windows per stage) and one column per label (``"0.612 ± 0.021 (n=5)"``), and the kappa
        rows the paper's values as ``paper_<method>``.
    """
    labels = list(dict.fromkeys(cell.label for cell in cells))
    reference = reference or default_reference(cells)
    budgets = budget_order(cell.budget for cell in cells)
    kappa = {(c.label, c.budget, c.seed): c.report.cohen_kappa for c in cells}

    kappa_rows, difference_rows = [], []
    for budget in budgets:
        row: dict[str, Any] = {"budget": budget}
        diff: dict[str, Any] = {"budget": budget}
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
            row[f"paper_{method}"] = values.get(budget, "") if isinstance(budget, int) else ""
        kappa_rows.append(row)
        difference_rows.append(diff)
    return kappa_rows, difference_rows


#: Line style of each arm in the sample-efficiency figure (colour is the method).
ARM_LINESTYLES: dict[str, str] = {"window": "-", "sequence": "--", "night": "-.", "probe": ":"}
#: Methods drawn beside the learned rows in every panel of the sample-efficiency figure.
REFERENCE_METHODS = ("classical", "yasa_pretrained")


def _pool_rank(cells: Sequence[_Cell]) -> dict[str | None, float]:
    """Each pool's place among the cells' pools, 0 (smallest) to 1 (largest, and no pool)."""
    pools = sorted(
        {cell.pool for cell in cells if cell.pool is not None},
        key=lambda name: float(name.rstrip("h")),
    )
    ranks: dict[str | None, float] = {None: 1.0}
    for index, name in enumerate(pools):
        ranks[name] = index / (len(pools) - 1) if len(pools) > 1 else 1.0
    return ranks


def sample_efficiency_styles(cells: Sequence[_Cell]) -> dict[str, tuple[Any, str]]:
    """Colour and line style of each row of the figure: one colour per method (in order of first
    appearance, from a 20-colour palette so that no two methods share one), lighter for smaller
    pretraining pools (the largest pool, and rows without a pool, at full colour), and one line
    style per arm (window solid, sequence dashed, night dash-dotted, probe dotted).

    Returns:
        ``{row label: (RGBA colour, line style)}``.
    """
    methods = list(dict.fromkeys(cell.method for cell in cells))
    palette = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
    colours = {method: palette(index % palette.N) for index, method in enumerate(methods)}
    rank = _pool_rank(cells)
    styles = {}
    for cell in cells:
        lighten = 0.6 * (1.0 - rank[cell.pool])
        colour = (*((1 - lighten) * c + lighten for c in colours[cell.method][:3]), 1.0)
        styles[cell.label] = (colour, ARM_LINESTYLES[cell.arm])
    return styles


def plot_spread(
    ax: Any,
    xs: Sequence[float],
    values: Sequence[Sequence[float]],
    colour: Any,
    linestyle: str,
    label: str,
) -> None:
    """One row of a sample-efficiency figure: the mean of ``values[i]`` at ``xs[i]`` as a line,
    their min-max spread as a band and every value (a draw) as a dot."""
    ax.plot(xs, [np.mean(v) for v in values], marker="o", ls=linestyle, color=colour, label=label)
    ax.fill_between(
        xs, [min(v) for v in values], [max(v) for v in values], alpha=0.12, color=colour
    )
    for x, draws in zip(xs, values, strict=True):
        ax.scatter([x] * len(draws), draws, s=8, color=colour)


def plot_sample_efficiency(
    cells: Sequence[_Cell],
    path: Path,
    references: Iterable[str] = REFERENCE_METHODS,
    note: str = "",
) -> None:
    """Kappa against the label budget, one panel per arm of the learned rows: mean over draws
    with the min-max spread as a band and every draw as a dot; colour is the method (lighter for
    smaller pretraining pools: one line per pool) and line style the arm
    (``sample_efficiency_styles``); the rows of the ``references`` methods (the classical ones)
    are drawn beside the learned rows in every panel. Budgets are placed scarcest first (windows
    per stage, then subjects), each panel's legend below it; ``note`` (e.g. that cells are
    missing) is added to the title."""
    styles = sample_efficiency_styles(cells)
    reference = set(references)
    learned = [cell.arm for cell in cells if cell.method not in reference]
    arms = list(dict.fromkeys(learned or [cell.arm for cell in cells]))
    budgets = budget_order(cell.budget for cell in cells)
    position = {budget: index for index, budget in enumerate(budgets)}
    fig, axes = plt.subplots(
        1, len(arms), figsize=(4.6 * len(arms) + 1.0, 6.0), sharey=True, squeeze=False
    )
    for ax, arm in zip(axes[0], arms, strict=True):
        for label, (colour, linestyle) in styles.items():
            mine = [
                cell
                for cell in cells
                if cell.label == label and (cell.arm == arm or cell.method in reference)
            ]
            if not mine:
                continue
            places = sorted({position[cell.budget] for cell in mine})
            values = [
                [c.report.cohen_kappa for c in mine if position[c.budget] == x] for x in places
            ]
            plot_spread(ax, places, values, colour, linestyle, label)
        ax.set_xticks(range(len(budgets)), [str(budget) for budget in budgets])
        ax.set_xlabel("labels: windows per stage (wK) or subjects")
        ax.set_title(f"{arm} arm")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize="small", ncol=1)
    axes[0][0].set_ylabel("Cohen's kappa on test subjects")
    fig.suptitle("Sample efficiency (mean, spread and draws)" + (f"\n{note}" if note else ""))
    fig.tight_layout()
    save_figure(fig, path)


def plot_pretrain_loss(histories: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    """Each method's pretext diagnostic per logged step, normalised by its content-free floor
    (``nmse`` for PART, ``recon_nmse`` for MAE, ``1 - accuracy`` over ``1 - chance`` for the
    position classifiers): 1.0 means no better than ignoring the content. PART across windows
    also shows ``nmse_isolated`` (dotted): the pairs whose windows share no samples with another
    drawn window."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method, history in histories.items():
        train = [r for r in history if r.get("phase") == "train"]
        if not train or pretext_error(train[0]) is None:
            continue
        values = [pretext_error(r) for r in train]
        line = ax.plot([r["step"] for r in train], np.array(values, dtype=float), label=method)[0]
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
    save_figure(fig, path)


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
    save_figure(fig, path)


#: Panels per row of the confusion-matrix grid: four panels are about 1,650 pixels wide at 120
#: dpi, readable at 100 % zoom.
CONFUSION_COLUMNS = 4


def confusion_figure(
    results: Sequence[_Cell], class_names: Sequence[str], columns: int = CONFUSION_COLUMNS
) -> Any:
    """Row-normalised test confusion matrices as a grid of ``columns`` panels a row, each titled
    with its row's label and kappa; the unused panels of the last row are hidden.

    Returns:
        The matplotlib figure (its visible axes in the order of ``results``).
    """
    check(len(results) > 0, "results", "at least one finished cell", len(results))
    check(columns >= 1, "columns", "at least one panel a row", columns)
    columns = min(columns, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.4 * columns, 3.3 * rows), squeeze=False, layout="constrained"
    )
    flat = list(axes.flat)
    for ax, result in zip(flat, results, strict=False):
        counts = result.report.confusion_matrix.astype(float)
        rates = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
        ax.imshow(rates, vmin=0.0, vmax=1.0, cmap="Blues")
        for (i, j), value in np.ndenumerate(rates):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if value > 0.5 else "black")  # fmt: skip
        ax.set_xticks(range(len(class_names)), class_names)
        ax.set_yticks(range(len(class_names)), class_names)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(f"{result.label}\nκ = {result.report.cohen_kappa:.3f}", fontsize=11)
    for ax in flat[len(results) :]:
        ax.set_visible(False)
    fig.suptitle("Test confusion matrices (each true stage's row sums to 1)")
    return fig


def plot_confusion_matrices(
    results: Sequence[_Cell], class_names: Sequence[str], path: Path
) -> None:
    """Save :func:`confusion_figure` of ``results`` to ``path``."""
    save_figure(confusion_figure(results, class_names), path)


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
    save_figure(fig, path)
