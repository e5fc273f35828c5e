"""Transfer study: kappa on a target montage by target labels, for rows that bring other data.

The sample-efficiency study (:mod:`partnd.recipes.sample_efficiency`) asks how many labels a
model needs on one cohort. This study asks what other datasets give when the montage at hand has
few labels (issue 41): a *target* profile (the Sleep-EDF-like one by default: Fpz-Cz, Pz-Oz) with
its own label budgets and test subjects, *source* profiles (PC18's six derivations, SHHS's C4-A1
and C3-A2, a frontal headband) with their labelled and unlabelled nights, and a *mixed* pool of
unlabelled nights of every profile (:mod:`partnd.recipes.transfer_data` writes them).

Rows, every one scored on the target's test subjects, every neural row but scratch a channel-set
model (``channel_mode="set"``; scratch reads the target's channels as the sleep study's does) and
every row with labels on the same target draws:

| row | cell (method:arm[:pool]) | trained on |
|---|---|---|
| scratch | ``supervised:night`` | target labels only: the study's night classifier from scratch |
| classical, classical+seq | ``classical:window``, ``classical:sequence`` | target labels: YASA's features + LightGBM |
| YASA's stager | ``yasa_pretrained:sequence`` | no labels: YASA's shipped classifier |
| source-supervised, zero-shot | ``source_supervised:zeroshot`` | source labels only |
| source-supervised, fine-tuned | ``source_supervised:night`` | source labels, then the target's |
| pretrained on the mixed pool | ``part_windows:night:mixed``, ``mae:night:mixed`` | every profile's unlabelled nights, then target labels |
| pretrained on the target only | ``part_windows:night:target``, ``mae:night:target`` | the target's unlabelled nights, then target labels |

The target's unlabelled nights are every night of its non-test subjects; a source's, all its
nights. Target test subjects are in no pool and no source: the split keeps them out of the target's
pool, and every profile's nights come from their own cohort seed (:func:`cohort_seeds`).

The source-supervised model is a night classifier trained once on the labelled nights of every
source (``--labelled-sources`` names fewer), one night dataset per source store (a
:class:`~partnd.datasets.MontageUnion` of whole nights); its checkpoint is chosen on held-out
subjects of each source's own store, never on target labels. Its zero-shot cell
predicts the target's test nights. Its fine-tuned cells start from the whole classifier
(``OUT/source_supervised/run``: both levels, the stage head, the time-of-night embedding;
:mod:`partnd.finetuning.classifier_start`), and its starting weights are a candidate of their
checkpoint selection (``evaluate_start``): validation on the draw's target subjects keeps the
source model when no step on the target's labels does better.

Each cell is one of the sleep study's (``OUT/finetune/<method>/<arm>/b<B>_s<S>[_p<pool>]``),
resumable and written atomically; ``OUT/pretrain_pools/<pool>/<method>`` holds the pretrainings.

Commands (each skips what is finished)::

    python -m partnd.recipes.transfer_study run --out runs/transfer --target sleep-edf \\
        --sources pc18 nsrr --budgets w20 1n 2n 4n --draws 5 --jobs 2
    python -m partnd.recipes.transfer_study run --out runs/transfer_1n --budgets 1n \\
        --labelled-sources pc18 --methods part_windows mae --pools mixed \\
        --night-set min_steps=150 --night-set eval_every_steps=25
    python -m partnd.recipes.transfer_study cells --out runs/transfer
    python -m partnd.recipes.transfer_study report --out runs/transfer

``report`` writes the tables and the figure of :mod:`partnd.recipes.transfer_report`.
"""  # noqa: E501

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import check
from partnd.cli.errors import OptionNames
from partnd.datasets import MontageUnion
from partnd.datasets.label_budget import LabelDraw
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.segments import as_segment_dataset
from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.datasets.splits import make_subject_split
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_save
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.finetuning.sequence import EVALUATION_CROP
from partnd.finetuning.training import finetune
from partnd.models import NightClassifier
from partnd.models.serialization import CLASSIFIER_FILE, load_classifier
from partnd.objectives import list_objectives
from partnd.objectives.registry import registered
from partnd.recipes.set_options import add_set_arguments, assigned_fields, assigned_grid
from partnd.recipes.sleep_study import SleepStudy
from partnd.recipes.study_cell_store import save_npy
from partnd.recipes.study_cells import StudyCells
from partnd.recipes.study_config import available_methods, method_arms
from partnd.recipes.study_directory import (
    RECIPE_OPTIONS,
    add_run_arguments,
    released_on_failure,
    run_recipe,
)
from partnd.recipes.study_pretraining import StudyPretraining
from partnd.recipes.study_scales import SCALES
from partnd.recipes.study_tasks import (
    Cell,
    add_worker_arguments,
    cell_tasks,
    check_worker_options,
    format_cell,
    run_tasks,
)
from partnd.recipes.transfer_data import (
    PROFILE_NAMES,
    SET_MODE,
    SOURCE_SUPERVISED,
    TransferConfig,
    cohort_seeds,
    profile_store,
)

__all__ = [
    "PRETRAINED_METHODS",
    "SOURCE_SUPERVISED",
    "TRANSFER_POOLS",
    "ZERO_SHOT",
    "TransferStudy",
    "cohort_seeds",
    "main",
    "transfer_cells",
    "transfer_rows",
]

#: The arm that predicts the target with the source-supervised model as it is.
ZERO_SHOT = "zeroshot"
#: The pretraining pools: every profile's unlabelled nights, and the target's only.
TRANSFER_POOLS = ("mixed", "target")
#: The self-supervised methods pretrained on each pool by default.
PRETRAINED_METHODS = ("part_windows", "mae")

#: A row: method, arm and pool (``None``: no pretraining pool).
Row = tuple[str, str, str | None]


def transfer_rows(
    pretrained: Sequence[str] = PRETRAINED_METHODS, pools: Sequence[str] = TRANSFER_POOLS
) -> list[Row]:
    """The rows of the study (module table), ``pretrained`` methods on each of ``pools``."""
    for pool in pools:
        check(pool in TRANSFER_POOLS, "pools", f"pools among {TRANSFER_POOLS}", repr(pool))
    rows: list[Row] = [
        ("supervised", "night", None),
        ("classical", "window", None),
        ("classical", "sequence", None),
        ("yasa_pretrained", "sequence", None),
        (SOURCE_SUPERVISED, ZERO_SHOT, None),
        (SOURCE_SUPERVISED, "night", None),
    ]
    return rows + [(m, "night", pool) for pool in pools for m in pretrained]


def transfer_cells(study: TransferStudy, rows: Sequence[Row]) -> list[Cell]:
    """Every cell of ``rows``: budgets scarcest first, then seeds (the draws), in a fixed order."""
    return [
        (method, arm, budget.to_json(), int(seed), pool)
        for method, arm, pool in rows
        for budget in study.budgets
        for seed in study.scale.seeds
    ]


class SourceSupervision:
    """The night classifier trained on the labelled sources' nights (see the module docstring):
    ``OUT/source_supervised/run``, the engine run whose ``classifier.pt`` (written last) the
    zero-shot cells predict with and the fine-tuned cells start from.

    Args:
        study: The transfer study.
    """

    def __init__(self, study: TransferStudy) -> None:
        self.study = study
        self.config = study.config
        self.run_dir = study.out / SOURCE_SUPERVISED / "run"

    @property
    def done(self) -> bool:
        """Whether the model is trained (its ``classifier.pt`` written)."""
        return (self.run_dir / CLASSIFIER_FILE).is_file()

    def finetune_config(self) -> FinetuneConfig:
        """The training configuration: the study's night classifier from scratch, on the
        labelled sources (every labelled night outside each source's validation subjects)."""
        config = self.config.finetune_config("supervised", self.config.seed, "night")
        return config.replace(**SET_MODE)

    @property
    def stores(self) -> dict[str, SleepStore]:
        """``{source: store}`` of the labelled sources, in their order."""
        return {p: self.study.profile_stores[p] for p in self.config.labelled_sources or ()}

    @cached_property
    def validation(self) -> dict[str, list[str]]:
        """``{source: records}`` of the held-out subjects of each labelled source's own store
        that the checkpoint is chosen on (the scale's number of validation subjects, drawn with
        the study's seed)."""
        return {
            profile: list(
                make_subject_split(
                    store,
                    n_test_subjects=self.study.scale.val_subjects,
                    finetune_sizes=(1,),
                    seed=self.config.seed,
                ).test_records
            )
            for profile, store in self.stores.items()
        }

    def nights(self, length: int, validation: bool) -> list[SleepNightDataset]:
        """The labelled nights of every labelled source (crops of ``length`` windows), one
        dataset per source store: its validation records, or every other labelled night."""
        parts = []
        for profile, store in self.stores.items():
            held_out = self.validation[profile]
            labelled = store.record_ids(labelled_only=True)
            parts.append(
                SleepNightDataset(
                    store,
                    context=length,
                    records=held_out if validation else [r for r in labelled if r not in held_out],
                    normalize=self.config.normalization,
                    progress=self.config.progress,
                )
            )
        return parts

    def run(self) -> Path:
        """Train the model unless done (an interrupted run resumes).

        Returns:
            The run directory (holding ``classifier.pt``).
        """
        if self.done:
            return self.run_dir
        config = self.finetune_config()
        resume = RunDir(self.run_dir).resumable
        result = finetune(
            None,
            self.nights(int(config.night_crop), validation=False),
            num_classes=len(self.study.class_names),
            val_dataset=self.nights(EVALUATION_CROP, validation=True),
            out_dir=self.run_dir,
            config=None if resume else config,
            class_names=self.study.class_names,
            resume=resume,
            overwrite=not resume and self.run_dir.exists(),
            **({"max_steps": None} if resume else {}),
        )
        check(
            isinstance(result.model, NightClassifier),
            "FinetuneConfig.context",
            "'night' (the source-supervised model is a night classifier)",
            type(result.model).__name__,
        )
        return self.run_dir

    def zero_shot(self, cells: StudyCells) -> np.ndarray:
        """[n_test] the model's predicted stage of every target test window, computed once
        (``OUT/source_supervised/zeroshot.npy``)."""
        path = self.study.out / SOURCE_SUPERVISED / "zeroshot.npy"
        if not path.is_file():
            model = load_classifier(self.run_dir)
            atomic_save(cells.predict_test(model, self.finetune_config()), path, save=save_npy)
        return np.asarray(np.load(path))


class TransferPretraining(StudyPretraining):
    """The pretrainings of a transfer study: each method on the mixed pool and on the target's
    unlabelled nights (``OUT/pretrain_pools/<pool>/<method>``, the study's step budget), and the
    source-supervised model, whose encoders its fine-tuned cells start from."""

    data: TransferStudy

    @cached_property
    def source(self) -> SourceSupervision:
        """The source-supervised model."""
        return SourceSupervision(self.data)

    @property
    def pool_names(self) -> tuple[str, ...]:
        """:data:`TRANSFER_POOLS`."""
        return TRANSFER_POOLS

    def pretrain_dir(self, method: str, pool: str | None = None) -> Path:
        """Run directory of ``method``'s pretraining on ``pool`` (the source-supervised
        classifier's run for :data:`SOURCE_SUPERVISED`)."""
        if method == SOURCE_SUPERVISED:
            return self.source.run_dir
        if pool is None:
            return super().pretrain_dir(method)
        return self.out / "pretrain_pools" / pool / method

    def pretrained(self, method: str, pool: str | None = None) -> bool:
        """Whether ``method``'s pretraining on ``pool`` (or the source model) has finished."""
        if method == SOURCE_SUPERVISED:
            return self.source.done
        return self.trained(self.pretrain_dir(method, pool))

    def run_pretraining(self, method: str, pool: str | None = None) -> Path:
        """Pretrain ``method`` on ``pool`` (train the source model for
        :data:`SOURCE_SUPERVISED`) unless done; an interrupted run resumes.

        Returns:
            The run directory (holding ``encoder.pt``).
        """
        if method == SOURCE_SUPERVISED:
            return self.source.run()
        check(
            method in list_objectives(),
            "method",
            f"a pretraining method {list_objectives()}",
            repr(method),
        )
        check(pool in TRANSFER_POOLS, "pool", f"one of {TRANSFER_POOLS}", repr(pool))
        run_dir = self.pretrain_dir(method, pool)
        if self.pretrained(method, pool):
            return run_dir
        return self.pretrain_run(run_dir, self.pool_data(method, str(pool)), method)

    def pool_nights(self, pool: str) -> dict[str, list[str]]:
        """``{profile: records}`` of a pool: the target's unlabelled nights (every night of a
        non-test subject), and for the mixed pool every night of every source."""
        nights = {self.config.target: list(self.data.split.pretrain)}
        if pool == "mixed":
            for profile, store in self.data.source_stores.items():
                nights[profile] = list(store.record_ids())
        return nights

    def pool_data(self, method: str, pool: str) -> Any:
        """The pretraining data of ``method`` on ``pool``: normalised windows, or segments for
        the objectives on segments, of several montages on the union of their channels."""
        config = self.config.pretrain_config(method)
        entry = registered(method)
        segments = entry is not None and entry.data == "segments"
        parts = []
        for profile, records in self.pool_nights(pool).items():
            windows = SleepWindowDataset(
                self.data.profile_stores[profile],
                records=records,
                normalize="none" if segments else self.config.normalization,
            )
            if segments:
                window_samples = config.window_samples
                parts.append(
                    as_segment_dataset(
                        windows, config.segment_windows, window_samples, config.normalize
                    )
                )
            else:
                parts.append(windows)
        return parts[0] if len(parts) == 1 else MontageUnion(parts)


class TransferCells(StudyCells):
    """The cells of a transfer study: the sleep study's, and the source-supervised rows."""

    pretraining: TransferPretraining

    def _check_cell(self, method: str, arm: str, pool: str | None) -> None:
        """Refuse a cell the study cannot run (an unknown row, a pool it lacks, a pretraining
        that has not finished)."""
        rows = [(m, a) for m in available_methods() for a in method_arms(m)]
        rows += [(SOURCE_SUPERVISED, ZERO_SHOT), (SOURCE_SUPERVISED, "night")]
        check(
            (method, arm) in rows,
            "cell",
            "a row of the transfer study (METHOD:ARM, e.g. supervised:night or "
            f"{SOURCE_SUPERVISED}:{ZERO_SHOT})",
            f"{method}:{arm}",
        )
        needs_pool = method in list_objectives()
        check(
            (pool in TRANSFER_POOLS) if needs_pool else pool is None,
            "pool",
            f"one of {TRANSFER_POOLS} for a pretrained method, none for another",
            repr(pool),
        )
        if needs_pool or method == SOURCE_SUPERVISED:
            check(
                self.pretraining.pretrained(method, pool),
                "method",
                f"a finished pretraining of {method!r} (run the run command)",
                f"none in {self.pretraining.pretrain_dir(method, pool)}",
            )

    def _predict(
        self, method: str, arm: str, draw: LabelDraw, seed: int, cell: Path, pool: str | None
    ) -> tuple[np.ndarray, dict[str, Any], tuple[str, ...]]:
        """The sleep study's cells; the zero-shot cell predicts with the source model as it
        is (no target label)."""
        if method == SOURCE_SUPERVISED and arm == ZERO_SHOT:
            source = self.pretraining.source
            settings = {
                "init": "night classifier trained on the labelled sources' nights",
                "sources": list(source.stores),
                "validation_records": source.validation,
                "target_labels": 0,
            }
            return source.zero_shot(self), settings, ()
        predictions, settings, used = super()._predict(method, arm, draw, seed, cell, pool)
        if method == SOURCE_SUPERVISED:
            settings["init"] = "source-supervised night classifier, whole"
        return predictions, settings, used


class TransferStudy(SleepStudy):
    """A sleep study on the target profile's store, with source profiles (module docstring).

    Args:
        config: The study's settings.
        overwrite: Start the directory over.
    """

    config: TransferConfig
    pretraining: TransferPretraining
    pretraining_type = TransferPretraining
    cells_type = TransferCells

    def __init__(self, config: TransferConfig, overwrite: bool = False) -> None:
        check(
            isinstance(config, TransferConfig),
            "config",
            "a TransferConfig",
            type(config).__name__,
        )
        super().__init__(config, overwrite)

    @cached_property
    def profile_stores(self) -> dict[str, SleepStore]:
        """``{profile: store}`` of the target and every source (generated and read in on first
        use), checked to share the target's stages and no subject with it."""
        stores = {
            p: profile_store(self.config, p) for p in (self.config.target, *self.config.sources)
        }
        target = stores[self.config.target]
        subjects = {target.record_attrs(r)["subject_id"] for r in target.record_ids()}
        for profile in self.config.sources:
            source = stores[profile]
            check(
                list(source.stage_names) == list(target.stage_names),
                "sources",
                f"stores scored in the target's stages {list(target.stage_names)}",
                f"{profile}: {list(source.stage_names)}",
            )
            shared = subjects & {source.record_attrs(r)["subject_id"] for r in source.record_ids()}
            check(
                not shared,
                "sources",
                "sources sharing no subject with the target",
                f"{profile} shares {sorted(shared)[:5]}",
            )
        return stores

    @cached_property
    def store(self) -> SleepStore:
        """The target profile's store."""
        return self.profile_stores[self.config.target]

    @property
    def source_stores(self) -> dict[str, SleepStore]:
        """``{source: store}``."""
        return {p: self.profile_stores[p] for p in self.config.sources}

    def build_shared_data(self, pool_pretraining: bool) -> None:
        """Build every profile's store and the target's split once, before parallel tasks."""
        _ = self.profile_stores, self.split

    def run_cells(
        self,
        cells: Sequence[Cell],
        jobs: int = 1,
        backend: str = "loky",
        scheduler_address: str | None = None,
    ) -> None:
        """Run the unfinished ``cells`` and the pretrainings they need (the source model and
        each method's pool pretraining first, beside the cells that need none) on ``jobs``
        processes (:func:`partnd.recipes.study_tasks.run_tasks`)."""
        todo = [cell for cell in cells if not self.cell_done(*cell)]
        for budget, seed in dict.fromkeys((cell[2], cell[3]) for cell in todo):
            self.draw(budget, seed)  # a budget the target cannot hold is refused first
        print(f"{len(cells) - len(todo)} of {len(cells)} cells already finished")
        needs = {*list_objectives(), SOURCE_SUPERVISED}
        for tasks in cell_tasks(todo, self.pretrained, needs):
            run_tasks(self, tasks, jobs, backend=backend, scheduler_address=scheduler_address)


COMMANDS = ("cells", "run", "report")

OPTIONS = OptionNames(
    {
        **RECIPE_OPTIONS.options,
        "target": "--target",
        "sources": "--sources",
        "labelled_sources": "--labelled-sources",
        "draws": "--draws",
        "night_overrides": "--night-set",
        "night_grid": "--night-grid",
        "pretrain_overrides": "--pretrain-set",
        "pools": "--pools",
        "target_records": "--target-records",
        "source_records": "--source-records",
        "hours": "--hours",
    }
)


def build_parser() -> argparse.ArgumentParser:
    """The command line of the recipe."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.recipes.transfer_study",
        description="Kappa on a target montage by target labels: scratch, classical, YASA, "
        "source-supervised and pretrained rows on the same target draws.",
    )
    parser.add_argument("stage", choices=COMMANDS, help="what to do")
    parser.add_argument("--out", type=Path, default=Path("runs/transfer"), help="study directory")
    parser.add_argument("--target", default="sleep_edf", help=f"target profile {PROFILE_NAMES}")
    parser.add_argument(
        "--sources", nargs="+", default=["pc18", "nsrr"], help="source profiles (not the target)"
    )
    parser.add_argument(
        "--budgets",
        nargs="+",
        default=["w20", "1n", "2n", "4n"],
        help="target label budgets: wK windows per stage, Nn nights, N subjects",
    )
    parser.add_argument(
        "--labelled-sources",
        nargs="+",
        default=None,
        help="the sources whose labelled nights train the source-supervised rows (default: "
        "every one of --sources)",
    )
    parser.add_argument("--draws", type=int, default=5, help="draws (seeds) of every budget")
    parser.add_argument(
        "--methods",
        nargs="*",
        default=list(PRETRAINED_METHODS),
        help="self-supervised methods pretrained on the mixed pool and on the target's nights "
        "(none after the option: only the rows that pretrain nothing and the source rows)",
    )
    parser.add_argument(
        "--pools",
        nargs="+",
        default=list(TRANSFER_POOLS),
        help="the unlabelled pools the methods are pretrained on (mixed: every source and the "
        "target's non-test nights; target: the target's non-test nights only)",
    )
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo", help="study scale")
    parser.add_argument("--target-records", type=int, default=16, help="nights of the target")
    parser.add_argument("--source-records", type=int, default=8, help="nights of each source")
    parser.add_argument("--hours", type=float, default=2.0, help="length of every night")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and cohorts")
    parser.add_argument("--n-jobs", type=int, default=1, help="cohort and ingest workers")
    parser.add_argument("--jobs", type=int, default=1, help="run: cells in parallel processes")
    add_set_arguments(parser)
    add_worker_arguments(parser)
    add_run_arguments(parser)
    return parser


def config_from_args(args: argparse.Namespace) -> TransferConfig:
    """The study's settings from the command line."""
    return TransferConfig(
        out=args.out,
        target=args.target,
        sources=tuple(args.sources),
        labelled_sources=None if args.labelled_sources is None else tuple(args.labelled_sources),
        budgets=tuple(args.budgets),
        draws=args.draws,
        night_overrides=assigned_fields(args.night_set, FinetuneConfig, "--night-set"),
        night_grid=assigned_grid(args.night_grid, FinetuneConfig, "--night-grid"),
        pretrain_overrides=assigned_fields(args.pretrain_set, PretrainConfig, "--pretrain-set"),
        scale=args.scale,
        target_records=args.target_records,
        source_records=args.source_records,
        hours=args.hours,
        seed=args.seed,
        n_jobs=args.n_jobs,
        device=args.device,
        progress=args.progress,
    )


def _run_stage(args: argparse.Namespace) -> None:
    """Run one command on the study of ``args``."""
    from partnd.recipes.transfer_report import write_report

    for method in args.methods:
        check(method in list_objectives(), "--methods", f"objectives {list_objectives()}", method)
    rows = transfer_rows(args.methods, args.pools)
    config = config_from_args(args)
    config.check_pretrained_levels([(method, arm) for method, arm, _ in rows])
    study = TransferStudy(config, overwrite=args.overwrite)
    cells = transfer_cells(study, rows)
    if args.stage == "cells":
        print("\n".join(format_cell(cell) for cell in cells))
        return
    if args.stage == "run":
        study.run_cells(cells, args.jobs, args.backend, args.scheduler)
    write_report(study, rows, cells)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recipe from the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    check_worker_options(args)
    check(args.jobs != 0, "--jobs", "a number of processes (>= 1; -1: every core)", "0")
    with released_on_failure(args.out):
        _run_stage(args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_recipe("python -m partnd.recipes.transfer_study", lambda: main(), OPTIONS))
