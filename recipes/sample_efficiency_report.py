"""Tables and figures of the sample-efficiency study's two axes: label draws and pretraining pools.

Written by ``python -m partnd.recipes.sample_efficiency aggregate`` next to ``kappa_by_budget``:

* ``cells.{csv,md,json}``: every finished cell, its kappa and its draw (labelled subjects or
  windows, validation subjects), so any comparison can be made from it;
* ``draws.{csv,md,json}``: one row per budget and seed, what was drawn;
* ``paired_differences.{csv,md,json}``: per draw, each pretrained row minus the same arm trained
  from scratch (``supervised``: the same model from a random initialisation; for the probe, a
  random encoder's features) on the same labels and validation subjects; the oracle ceiling's
  rows (``supervised_pool``, :mod:`partnd.recipes.study_ceiling`) are marked in its ``reference``
  column;
* ``difference_to_scratch.{csv,md,json}``: those differences as mean ± std over draws, how
  many draws are positive and how many distinct sets of labels the draws hold (independent draws
  of one subject from a small pool repeat subjects; ``aggregate`` says which); the ceiling's
  columns end in ``(oracle)``;
* ``ceiling_minus_scratch.{csv,md,json}``: the room for pretraining, per budget, pool and arm:
  the oracle ceiling minus scratch as mean ± std over draws, how many draws are positive, and
  every draw's difference;
* ``room_taken.{csv,md,json}``: each pretrained row's share of that room, its gain over scratch
  divided by the ceiling's on the same draws (:func:`room_taken`);

and with pretraining pools:

* ``pool_pretraining.{csv,md,json}``: each pool (hours, nights, night length) and each method's
  pretraining on it (the step chosen on held-out nights and its pretext error, the steps trained,
  the cap, the throughput in items and hours of EEG per second; ``pools.json`` is the pools
  themselves, :class:`partnd.datasets.pools.PretrainingPools`);
* ``kappa_by_pool.png``: kappa against pool hours at the scarcest budget, the rows without a pool
  (scratch, classical) as horizontal references;
* ``pool_pretext.png``: each pool's pretext error over its floor during pretraining, on the
  training batches and on the held-out nights, the chosen step marked.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from partnd.datasets.label_budget import LabelBudget
from partnd.objectives import list_objectives
from partnd.recipes.baselines import POOL_CEILING
from partnd.recipes.report_files import save_figure, write_table
from partnd.recipes.sleep_report import (
    budget_order,
    plot_spread,
    sample_efficiency_styles,
    summary,
)
from partnd.recipes.study_pools import SELECT_METRIC

if TYPE_CHECKING:
    from partnd.recipes.sleep_study import CellResult, SleepStudy

__all__ = [
    "ORACLE",
    "SCRATCH_BASELINE",
    "ceiling_rows",
    "cell_rows",
    "draw_rows",
    "mark_references",
    "paired_differences",
    "plot_kappa_by_pool",
    "plot_pool_pretext",
    "pool_rows",
    "repeated_draws",
    "room_taken",
    "scratch_summary",
    "write_axes_report",
]

#: The method every pretrained row is paired with: the same arm trained from scratch.
SCRATCH_BASELINE = "supervised"
#: How the tables mark the oracle ceiling's rows (:data:`POOL_CEILING`), a reference no user has.
ORACLE = "oracle"


def mark_references(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``table`` (one column per row label, as ``kappa_by_budget``) with every column of the
    oracle ceiling renamed ``<label> (oracle)``, for the Markdown table a reader reads (the CSV
    and JSON keep the cells' labels)."""
    return [
        {
            f"{key} ({ORACLE})" if key.split(" ")[0].split("+")[0] == POOL_CEILING else key: value
            for key, value in row.items()
        }
        for row in table
    ]


def _labelled(draw: Mapping[str, Any]) -> str:
    """What a draw labels: its subjects, and its windows per stage for a window budget."""
    subjects = ",".join(draw.get("subjects", []))
    windows = draw.get("windows")
    if not windows:
        return subjects
    counts = "/".join(str(n) for n in windows["counts"].values())
    return f"{sum(windows['counts'].values())} windows ({counts} per stage) of {subjects}"


def cell_rows(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One row per finished cell: row, pool, budget, seed, kappa, the labelled and validation
    subjects of its draw, the selected checkpoint's validation kappa (blank: none) and, in a
    study with a night grid, the night settings validation chose (``field=value`` pairs)."""
    return [
        {
            "row": cell.row,
            "pool": cell.pool or "",
            "budget": cell.budget,
            "seed": cell.seed,
            "kappa": round(cell.report.cohen_kappa, 4),
            "labelled": _labelled(cell.draw),
            "validation": ",".join(cell.draw.get("validation", [])),
            "val_kappa": _or_blank(cell.settings.get("val_kappa")),
            "night_grid": " ".join(
                f"{name}={json.dumps(value)}"
                for name, value in cell.settings.get("night_grid", {}).get("chosen", {}).items()
            ),
        }
        for cell in cells
    ]


def _or_blank(value: Any) -> Any:
    """``value``, or ``""`` for ``None`` (a blank table cell)."""
    return "" if value is None else value


def draw_rows(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One row per (budget, seed): the labelled subjects (and windows per stage) and the
    validation subjects every row of that draw used."""
    draws: dict[tuple[Any, int], Mapping[str, Any]] = {}
    for cell in cells:
        if cell.draw:
            draws.setdefault((cell.budget, cell.seed), cell.draw)
    rows = []
    for budget in budget_order(budget for budget, _ in draws):
        for seed in sorted(seed for b, seed in draws if b == budget):
            draw = draws[(budget, seed)]
            windows = draw.get("windows") or {}
            rows.append(
                {
                    "budget": budget,
                    "seed": seed,
                    "labelled_subjects": ",".join(draw["subjects"]),
                    "validation_subjects": ",".join(draw["validation"]),
                    "labelled_windows": sum(windows.get("counts", {}).values()) or "all",
                    "per_stage": "/".join(map(str, windows.get("counts", {}).values())),
                }
            )
    return rows


def _scratch_pairs(cells: Sequence[CellResult]) -> list[tuple[CellResult, CellResult]]:
    """Every pretrained or ceiling cell with :data:`SCRATCH_BASELINE`'s cell of the same arm,
    budget and seed (the same labels and validation subjects), scarcest budget first; cells
    without such a partner are left out."""
    scratch = {
        (cell.arm, cell.budget, cell.seed): cell
        for cell in cells
        if cell.method == SCRATCH_BASELINE and cell.pool is None
    }
    order = {budget: index for index, budget in enumerate(budget_order(c.budget for c in cells))}
    pretrained = [c for c in cells if c.method in (*list_objectives(), POOL_CEILING)]
    pairs = []
    for cell in sorted(pretrained, key=lambda c: (order[c.budget], c.seed)):
        baseline = scratch.get((cell.arm, cell.budget, cell.seed))
        if baseline is not None:
            pairs.append((cell, baseline))
    return pairs


def paired_differences(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """Per draw, every pretrained row minus :data:`SCRATCH_BASELINE`'s row of the same arm with
    the same budget and seed (the same labels and validation subjects).

    Returns:
        Rows ``budget``, ``seed``, ``row`` (with its pool), ``baseline``, ``kappa``,
        ``baseline_kappa``, ``difference``, ``labelled`` (the draw) and ``reference``
        (``"oracle"`` for the ceiling's rows, else empty), scarcest budget first.
    """
    rows = []
    for cell, baseline in _scratch_pairs(cells):
        kappa, base = cell.report.cohen_kappa, baseline.report.cohen_kappa
        rows.append(
            {
                "budget": cell.budget,
                "seed": cell.seed,
                "row": cell.label,
                "baseline": baseline.label,
                "kappa": round(kappa, 4),
                "baseline_kappa": round(base, 4),
                "difference": round(kappa - base, 4),
                "labelled": _labelled(cell.draw),
                "reference": ORACLE if cell.method == POOL_CEILING else "",
            }
        )
    return rows


def room_taken(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    """How much of the oracle ceiling's room each pretrained row takes: its mean gain over
    scratch divided by the ceiling's mean gain (the same arm and pool), over the draws where
    both ran, scarcest budget first.

    A row that takes half the room has a ``share`` of 0.50. The ratio is of the means over
    draws, not a mean of per-draw ratios, which a draw with little room would dominate.

    Returns:
        Rows ``budget``, ``row`` (with its pool), ``ceiling``, ``draws``, ``gain`` (the row
        minus scratch), ``room`` (the ceiling minus scratch) and ``share`` (``"0.45"``, or
        ``"no room"`` when the ceiling is not above scratch on those draws); none without the
        ceiling's cells.
    """
    scored = [
        (cell, cell.report.cohen_kappa - baseline.report.cohen_kappa)
        for cell, baseline in _scratch_pairs(cells)
    ]
    ceiling = {
        (cell.arm, cell.budget, cell.seed, cell.pool): (cell.label, gain)
        for cell, gain in scored
        if cell.method == POOL_CEILING
    }
    gains: dict[tuple[Any, str, str], list[tuple[float, float]]] = {}
    for cell, gain in scored:
        match = ceiling.get((cell.arm, cell.budget, cell.seed, cell.pool))
        if cell.method == POOL_CEILING or match is None:
            continue
        ceiling_label, room = match
        gains.setdefault((cell.budget, cell.label, ceiling_label), []).append((gain, room))
    rows = []
    for (budget, label, ceiling_label), values in gains.items():
        row_gain = float(np.mean([value for value, _ in values]))
        room = float(np.mean([value for _, value in values]))
        rows.append(
            {
                "budget": budget,
                "row": label,
                "ceiling": ceiling_label,
                "draws": len(values),
                "gain": round(row_gain, 4),
                "room": round(room, 4),
                "share": f"{row_gain / room:.2f}" if room > 0 else "no room",
            }
        )
    return rows


def _name(row: Mapping[str, Any]) -> str:
    """A paired difference's column: ``"<row> - <baseline>"``, `` (oracle)`` added for the
    ceiling's."""
    name = f"{row['row']} - {row['baseline']}"
    return f"{name} ({ORACLE})" if row.get("reference") == ORACLE else name


def scratch_summary(differences: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`paired_differences` per budget and row: ``mean ± std (n=draws)`` and how many
    draws are positive (``"0.041 ± 0.030 (n=5), 4/5 > 0"``), and ``labelled_sets``: how many
    distinct sets of labels the budget's draws hold (independent draws of subjects may repeat one;
    a draw of windows per stage is its own set)."""
    rows = []
    for budget in budget_order(row["budget"] for row in differences):
        mine = [row for row in differences if row["budget"] == budget]
        by_subjects = LabelBudget.parse(budget).subjects is not None  # windows differ per seed
        labels = {row["labelled"] if by_subjects else row["seed"] for row in mine}
        line: dict[str, Any] = {"budget": budget, "labelled_sets": len(labels)}
        for name in dict.fromkeys(_name(row) for row in mine):
            values = [r["difference"] for r in mine if _name(r) == name]
            positive = sum(value > 0 for value in values)
            line[name] = f"{summary(values)}, {positive}/{len(values)} > 0"
        rows.append(line)
    return rows


def ceiling_rows(differences: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The room for pretraining: the oracle ceiling's :func:`paired_differences` per budget and
    row (one per pool and arm), scarcest budget first.

    Returns:
        Rows ``budget``, ``ceiling`` (its row and pool), ``scratch`` (the row it is paired
        with), ``ceiling - scratch`` (``mean ± std (n=draws)``), ``positive`` (``"4/5"``) and
        ``per draw`` (``"s0 +0.052, s1 -0.010"``); none without the ceiling's rows.
    """
    mine = [row for row in differences if row.get("reference") == ORACLE]
    rows = []
    for budget in budget_order(row["budget"] for row in mine):
        at_budget = [row for row in mine if row["budget"] == budget]
        for label in dict.fromkeys(row["row"] for row in at_budget):
            draws = [row for row in at_budget if row["row"] == label]
            values = [row["difference"] for row in draws]
            rows.append(
                {
                    "budget": budget,
                    "ceiling": label,
                    "scratch": draws[0]["baseline"],
                    "ceiling - scratch": summary(values),
                    "positive": f"{sum(value > 0 for value in values)}/{len(values)}",
                    "per draw": ", ".join(f"s{r['seed']} {r['difference']:+.3f}" for r in draws),
                }
            )
    return rows


def repeated_draws(draws: Sequence[Mapping[str, Any]]) -> list[str]:
    """Say, per budget, when its draws label the same subjects more than once: such draws differ
    only in their validation subjects and training seed, so their spread understates what
    another labelled night would change.

    Args:
        draws: :func:`draw_rows`.

    Returns:
        One line per budget whose draws repeat a set of labelled subjects (none when every draw
        labels its own), e.g.
        ``"budget 1: 5 draws label 2 distinct sets of subjects (a x3, b x2)"``.
    """
    lines = []
    for budget in budget_order(row["budget"] for row in draws):
        labelled = [
            row["labelled_subjects"]
            for row in draws
            if row["budget"] == budget and row["labelled_windows"] == "all"
        ]
        counts = Counter(labelled)
        if len(counts) < len(labelled):
            sets = ", ".join(f"{name} x{n}" for name, n in counts.most_common())
            lines.append(
                f"budget {budget}: {len(labelled)} draws label {len(counts)} distinct sets "
                f"of subjects ({sets})"
            )
    return lines


def pool_rows(study: SleepStudy, methods: Sequence[str]) -> list[dict[str, Any]]:
    """One row per pool and pretrained method: the pool (hours, nights, night length) and what
    its pretraining chose on the held-out nights (finished pretrainings only): the step and its
    pretext error, or for the oracle ceiling its held-out kappa (``heldout_kappa``)."""
    plan = study.pools.plan
    summaries = {row["pool"]: row for row in plan.summary()}
    rows = []
    for pool in plan.names:
        for method in methods:
            if not study.pools.done(method, pool):
                continue
            chosen = study.pools.selection(method, pool)
            selected = chosen.get("selected") or {}
            train = study.pools.curves(method, pool)["train"]
            metric = selected.get("metric", SELECT_METRIC)
            value = round(selected["value"], 4) if selected else ""
            rows.append(
                {
                    **summaries[pool],
                    "method": method,
                    "held_out_nights": chosen["held_out_nights"],
                    "selected_step": selected.get("step", ""),
                    "heldout_error": value if metric == SELECT_METRIC else "",
                    "heldout_kappa": value if metric != SELECT_METRIC else "",
                    "final_train_error": round(train[-1][1], 4) if train else "",
                    "steps": selected.get("steps", ""),
                    "cap": chosen["cap"],
                    "stopped_early": selected.get("stopped_early", ""),
                    "unit": chosen["unit"],
                    "items_per_s": chosen["items_per_s"],
                    "eeg_hours_per_s": chosen["eeg_hours_per_s"],
                    "train_seconds": chosen["train_seconds"],
                }
            )
    return rows


def plot_kappa_by_pool(
    cells: Sequence[CellResult],
    pool_hours: Mapping[str, float],
    budget: int | str,
    path: Path,
) -> None:
    """Kappa against the pretraining pool's hours at ``budget``: one line per pretrained row
    (mean over draws, min-max band, every draw a dot, colour and style as the sample-efficiency
    figure's), and every row without a pool as a horizontal line at its mean with its band."""
    mine = [cell for cell in cells if cell.budget == budget]
    styles = sample_efficiency_styles(mine)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    rows = list(dict.fromkeys(cell.row for cell in mine))
    for row in rows:
        pooled = [c for c in mine if c.row == row and c.pool is not None]
        if pooled:
            names = sorted({c.pool for c in pooled if c.pool}, key=lambda n: pool_hours[n])
            hours = [pool_hours[name] for name in names]
            values = [[c.report.cohen_kappa for c in pooled if c.pool == n] for n in names]
            colour, linestyle = styles[pooled[-1].label]
            plot_spread(ax, hours, values, colour, linestyle, row)
            continue
        fixed = [c.report.cohen_kappa for c in mine if c.row == row and c.pool is None]
        colour, linestyle = styles[next(c.label for c in mine if c.row == row)]
        ax.axhline(np.mean(fixed), color=colour, ls=linestyle, lw=1.0, label=f"{row} (no pool)")
        ax.axhspan(min(fixed), max(fixed), color=colour, alpha=0.06)
    ax.set_xscale("log")
    ticks = sorted(pool_hours.values())
    ax.set_xticks(ticks, [f"{hours:.0f}" for hours in ticks])
    ax.minorticks_off()
    ax.set_xlabel("pretraining pool (hours of unlabelled EEG)")
    ax.set_ylabel("Cohen's kappa on test subjects")
    ax.set_title(f"Kappa by pool size at budget {budget} (mean, spread and draws)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def plot_pool_pretext(
    curves: Mapping[tuple[str, str], Mapping[str, Sequence[tuple[int, float]]]],
    selected: Mapping[tuple[str, str], int | None],
    path: Path,
) -> None:
    """Each pool's pretext error over its content-free floor during pretraining, one panel per
    method: the training batches (thin) and the held-out nights (markers), one colour per pool
    (darker: larger), the step chosen on the held-out nights starred.

    Args:
        curves: ``{(method, pool): {"train": [(step, error)], "heldout": [(step, error)]}}``,
            pools in increasing size.
        selected: ``{(method, pool): chosen step}``.
        path: Output PNG.
    """
    methods = list(dict.fromkeys(method for method, _ in curves))
    pools = list(dict.fromkeys(pool for _, pool in curves))
    colours = {
        pool: plt.get_cmap("viridis")(0.15 + 0.7 * i / max(1, len(pools) - 1))
        for i, pool in enumerate(pools)
    }
    fig, axes = plt.subplots(1, len(methods), figsize=(5.5 * len(methods), 4), squeeze=False)
    for ax, method in zip(axes[0], methods, strict=True):
        for pool in pools:
            curve = curves.get((method, pool))
            if curve is None:
                continue
            colour = colours[pool]
            if curve["train"]:
                steps, values = zip(*curve["train"], strict=True)
                ax.plot(steps, values, color=colour, lw=0.8, alpha=0.6, label=f"{pool} train")
            if curve["heldout"]:
                steps, values = zip(*curve["heldout"], strict=True)
                ax.plot(steps, values, color=colour, marker="o", ms=3, label=f"{pool} held out")
                chosen = selected.get((method, pool))
                if chosen in steps:
                    value = values[steps.index(chosen)]
                    ax.scatter([chosen], [value], marker="*", s=120, color=colour, zorder=3)
        ax.axhline(1.0, color="black", lw=0.8, ls="--", label="content-free floor")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel("pretext error / floor")
        ax.set_title(f"{method}: pretraining per pool (star: chosen)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def write_axes_report(study: SleepStudy, cells: Sequence[CellResult]) -> list[str]:
    """Write the tables and figures of the module docstring into the study directory.

    Returns:
        What a reader of the tables should know about the draws (:func:`repeated_draws`).
    """
    out = study.out
    write_table(cell_rows(cells), out, "cells")
    draws = draw_rows(cells)
    if draws:
        write_table(draws, out, "draws")
    differences = paired_differences(cells)
    if differences:
        write_table(differences, out, "paired_differences")
        write_table(scratch_summary(differences), out, "difference_to_scratch")
    ceiling = ceiling_rows(differences)
    if ceiling:
        write_table(ceiling, out, "ceiling_minus_scratch")
    room = room_taken(cells)
    if room:
        write_table(room, out, "room_taken")
    notes = repeated_draws(draws)
    if not study.pool_names:
        return notes
    methods = list(dict.fromkeys(c.method for c in cells if c.pool is not None))
    rows = pool_rows(study, methods)
    if rows:
        write_table(rows, out, "pool_pretraining")
    plan = study.pools.plan
    hours = {name: plan.hours(name) for name in plan.names}
    scarcest = budget_order(cell.budget for cell in cells)[0]
    plot_kappa_by_pool(cells, hours, scarcest, out / "kappa_by_pool.png")
    objectives = [method for method in methods if method in list_objectives()]  # pretext curves
    finished = [(m, p) for p in plan.names for m in objectives if study.pools.done(m, p)]
    if finished:
        plot_pool_pretext(
            {(m, p): study.pools.curves(m, p) for m, p in finished},
            {
                (m, p): (study.pools.selection(m, p).get("selected") or {}).get("step")
                for m, p in finished
            },
            out / "pool_pretext.png",
        )
    return notes
