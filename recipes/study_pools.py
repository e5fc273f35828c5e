"""The unlabelled axis of a sleep study: pretraining pools of growing size, each pretrained to a
budget chosen on held-out nights.

``StudyConfig.pools`` (``--pools 24 80 240``, hours) turns it on. The nights come from
``pool_src`` (a PC18-format root, e.g. a cohort generated with ``partnd cohort --hours 8``),
preprocessed into ``pool_store``, or else from the study's own store. The pools
(``OUT/pools.json``, :func:`partnd.datasets.pools.make_pretraining_pools`) never hold a night of
a labelled study subject (test or fine-tuning pool): what grows is unlabelled data only. A few
subjects' nights are held out of every pool.

Each (method, pool) pretraining (``OUT/pretrain_pools/<pool>/<method>/``, an engine run) trains
at most the scale's ``pool_pretrain`` step cap (``--pretrain-steps``), evaluates the pretext
error on the held-out nights every ``eval_every_steps`` (at epoch ends;
:class:`partnd.evaluation.probes.PretextMonitor`: the same segments or windows, pairs and masks at
every
evaluation) and stops after ``patience`` evaluations without a lower error; the encoder kept is
the best evaluation's. ``selection.json``, written last, marks it finished and records the pool,
the chosen step, the steps trained, the cap and the throughput (segments or windows per second
and hours of EEG per second). An interrupted pretraining resumes.
"""

from __future__ import annotations

import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from partnd._validation import InputError, renamed_arguments
from partnd.datasets.pools import PretrainingPools, make_pretraining_pools
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.datasets.store import SleepStore
from partnd.engine.config import PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.evaluation.probes import PretextMonitor
from partnd.objectives.diagnostics import pretext_error
from partnd.objectives.registry import list_objectives
from partnd.preprocessing.physionet2018 import preprocess_physionet2018
from partnd.preprocessing.pipeline import without_overwrite_remedy
from partnd.pretraining import pretrain

PC18_DATASET = "PhysioNet/CinC Challenge 2018"
"""The ``source.dataset`` of stores :func:`preprocess_physionet2018` writes."""

if TYPE_CHECKING:
    from partnd.recipes.study_config import StudyConfig
    from partnd.recipes.study_data import StudyData

__all__ = [
    "PC18_DATASET",
    "SELECTION_FILE",
    "SELECT_METRIC",
    "PoolStage",
    "ingested_store",
    "preprocessed",
    "throughput",
]

SELECTION_FILE = "selection.json"
SELECT_METRIC = "heldout_error"
#: Held-out items evaluated per pretext evaluation (a fixed seeded subset): segments of the
#: objectives on segments (``list_objectives("segments")``), windows of the others.
HELD_OUT_SEGMENTS = 64
#: Held-out segments start every ``segment_windows // HELD_OUT_STRIDE_DIVISOR`` windows: a night
#: only a few segments long (8 h in 4-h segments) still gives enough of them, and each
#: evaluation draws its own windows in each.
HELD_OUT_STRIDE_DIVISOR = 16
HELD_OUT_WINDOWS = 512


def ingested_store(path: Path) -> bool:
    """Whether ``path`` holds a store of recordings ingested one by one (``partnd ingest``:
    Sleep-EDF, NSRR, any EDF), which a study reads as it is; PhysioNet 2018 stores are completed
    from their source by :func:`preprocessed` instead."""
    if not (path / "zarr.json").is_file():
        return False
    source = SleepStore(path).attrs.get("source", {})
    return isinstance(source, dict) and source.get("dataset") != PC18_DATASET


def preprocessed(src: Path, store_path: Path, config: StudyConfig, option: str) -> SleepStore:
    """The store of ``src``'s recordings, preprocessed into ``store_path`` unless done (records
    that fail are left out with a warning naming the manifest).

    Args:
        src: A PC18-format root.
        store_path: The store to create or complete.
        config: The study (workers, progress, the signal dtype).
        option: The study's name of the store, for errors (``"store"``, ``"pool_store"``).
    """
    try:
        with renamed_arguments({"out": option}):  # preprocess's out is this study's store
            report = preprocess_physionet2018(
                src,
                store_path,
                n_jobs=config.n_jobs,
                progress=config.progress,
                dtype=config.signal_dtype,
            )
    except InputError as error:  # a study never replaces a store (--overwrite clears --out)
        flag = "--" + option.replace("_", "-")
        remedy = f" (give another {flag}, or delete this one to preprocess it again)"
        raise InputError(without_overwrite_remedy(str(error), remedy)) from None
    unexpected = report.unexpected_failures
    if unexpected:
        warnings.warn(
            f"{len(unexpected)} record(s) failed preprocessing and are left out: "
            f"{', '.join(unexpected[:10])}; reasons in {store_path / 'manifest.json'}",
            stacklevel=3,
        )
    return SleepStore(store_path)


class PoolStage:
    """The pools of a study and their pretraining (see the module docstring).

    Args:
        study: The study's data (its config has ``pools``).
    """

    def __init__(self, study: StudyData) -> None:
        self.study = study
        self.config = study.config

    def pool_summary(self, pool: str) -> dict[str, Any]:
        """What a pretraining's result records of its pool: its name, hours and nights, and the
        held-out nights and hours it is validated on."""
        return {
            "pool": pool,
            "hours": round(self.plan.hours(pool), 3),
            "nights": len(self.plan.records(pool)),
            "held_out_nights": len(self.plan.held_out),
            "held_out_hours": round(self.plan.held_out_hours, 3),
        }

    @cached_property
    def store(self) -> SleepStore:
        """The store of the unlabelled nights (created from ``pool_src`` on first use)."""
        if self.config.pool_src is None:
            return self.study.store
        return preprocessed(
            self.config.pool_src, self.config.pool_store_path, self.config, "pool_store"
        )

    @property
    def plan_path(self) -> Path:
        """``pools.json``: the drawn pools, saved by the first pretraining once its settings were
        checked against them (until then ``--pools`` and the pool options may still change)."""
        return self.study.out / "pools.json"

    @cached_property
    def plan(self) -> PretrainingPools:
        """The nested pools and held-out nights (``pools.json`` once saved, else drawn anew: the
        draw is seeded)."""
        if self.plan_path.is_file():
            return PretrainingPools.load(self.plan_path)
        split = self.study.split
        assert self.config.pools is not None
        with renamed_arguments({"sizes_hours": "pools"}):
            plan = make_pretraining_pools(
                self.store,
                self.config.pools,
                records=None if self.config.pool_src is not None else split.pretrain,
                exclude_subjects={*split.test, *split.finetune_pool},
                held_out_subjects=self.study.scale.held_out_subjects,
                seed=self.config.seed,
            )
        return plan

    def check_fits(self, config: PretrainConfig) -> None:
        """Refuse a segment length (``--pool-segment-windows``) longer than every contiguous run
        of the held-out nights (PART across windows evaluates segments) or of the smallest
        pool's (the pools are nested; every objective on segments), before ``pools.json`` or a
        run directory is written; a study whose pools were never saved still takes a corrected
        value.

        Raises:
            InputError: Naming ``segment_windows`` and the longest run of the nights concerned.
        """
        if config.method not in list_objectives("segments"):
            return
        self.held_out(config)
        smallest = self.plan.records(self.plan.names[0])
        SleepSegmentDataset(
            self.store, records=list(smallest), segment_windows=config.segment_windows
        )

    def run_dir(self, method: str, pool: str) -> Path:
        """Run directory of ``method``'s pretraining on ``pool``."""
        return self.study.out / "pretrain_pools" / pool / method

    def done(self, method: str, pool: str) -> bool:
        """Whether ``method``'s pretraining on ``pool`` has finished (``selection.json``)."""
        return RunDir(self.run_dir(method, pool)).finished(SELECTION_FILE)

    def selection(self, method: str, pool: str) -> dict[str, Any]:
        """What a finished pretraining chose (its ``selection.json``)."""
        return RunDir(self.run_dir(method, pool)).read_result(SELECTION_FILE)

    def held_out(self, config: PretrainConfig) -> Any:
        """The held-out nights as the objective of ``config`` reads them: segments starting every
        ``segment_windows // HELD_OUT_STRIDE_DIVISOR`` windows for the objectives on segments
        (PART across windows, ``part_joint``, relative positioning, temporal shuffling),
        normalised windows otherwise."""
        records = list(self.plan.held_out)
        if config.method in list_objectives("segments"):
            return SleepSegmentDataset(
                self.store,
                records=records,
                segment_windows=config.segment_windows,
                stride=max(1, config.segment_windows // HELD_OUT_STRIDE_DIVISOR),
                normalize="record" if config.normalize == "record" else "none",
            )
        return SleepWindowDataset(self.store, records=records, normalize=self.config.normalization)

    def run(self, method: str, pool: str) -> Path:
        """Pretrain ``method`` on ``pool`` to the budget chosen on the held-out nights, unless
        done; an interrupted run resumes.

        Returns:
            The run directory (``encoder.pt``: the best evaluation's weights).
        """
        run_dir = self.run_dir(method, pool)
        if self.done(method, pool):
            return run_dir
        config = self.config.pretrain_config(method, pool=True)
        run = RunDir(run_dir)
        resume = run.resumable
        if resume:
            config = PretrainConfig.from_json(run_dir / "config.json")
        self.check_fits(config)
        if not self.plan_path.is_file():
            self.plan.save(self.plan_path)
        data = SleepWindowDataset(
            self.store, records=list(self.plan.records(pool)), normalize=self.config.normalization
        )
        segments = config.method in list_objectives("segments")
        monitor = PretextMonitor(
            self.held_out(config),
            max_items=HELD_OUT_SEGMENTS if segments else HELD_OUT_WINDOWS,
            batch_size=config.batch_size,
            seed=self.config.seed,
        )
        options: dict[str, Any] = {"monitor": monitor, "select_metric": SELECT_METRIC}
        if resume:
            result = pretrain(data, out_dir=run_dir, resume=True, max_steps=None, **options)
        else:
            result = pretrain(
                data, out_dir=run_dir, config=config, overwrite=run_dir.exists(), **options
            )
        meta = run.resolved()
        window_seconds = float(self.store.window_seconds)
        item_hours = (config.segment_windows if segments else 1) * window_seconds / 3600.0
        run.write_result(
            {
                "method": method,
                **self.pool_summary(pool),
                "cap": meta["total_steps"],
                "steps_per_epoch": meta["steps_per_epoch"],
                "selected": result.selected,
                **throughput(result.history, item_hours, "segments" if segments else "windows"),
            },
            SELECTION_FILE,
        )
        return run_dir

    def curves(self, method: str, pool: str) -> dict[str, list[tuple[int, float]]]:
        """The pretext error over its floor per step: ``train`` (logged training records) and
        ``heldout`` (the held-out evaluations)."""
        records = RunDir(self.run_dir(method, pool)).history()
        train = [(r["step"], pretext_error(r)) for r in records if r.get("phase") == "train"]
        return {
            "train": [(step, value) for step, value in train if value is not None],
            "heldout": [
                (r["step"], r[SELECT_METRIC])
                for r in records
                if r.get("phase") == "val" and SELECT_METRIC in r
            ],
        }


def throughput(history: list[dict[str, Any]], item_hours: float, unit: str) -> dict[str, Any]:
    """Training throughput of a pretraining run from its logged records.

    Args:
        history: The run's records (``samples_per_s`` of the training records, ``seconds`` of
            the epoch records).
        item_hours: Hours of EEG in one item (a segment or a window).
        unit: What an item is (``"segments"``, ``"windows"``).

    Returns:
        ``unit``, ``items_per_s`` (median over the logging intervals), ``eeg_hours_per_s`` and
        ``train_seconds`` (the epochs' wall time, evaluations included).
    """
    rates = [r["samples_per_s"] for r in history if r.get("phase") == "train"]
    rate = float(np.median(rates)) if rates else float("nan")
    seconds = sum(float(r.get("seconds", 0.0)) for r in history if r.get("phase") == "epoch")
    return {
        "unit": unit,
        "items_per_s": round(rate, 3),
        "eeg_hours_per_s": round(rate * item_hours, 4),
        "train_seconds": round(seconds, 1),
    }
