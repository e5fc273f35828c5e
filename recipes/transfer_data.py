"""The settings and data of the transfer study: a target profile, source profiles, their stores.

The transfer study (:mod:`partnd.recipes.transfer_study`) is a sleep study
(:class:`~partnd.recipes.study_config.StudyConfig`) on a *target* dataset profile, the
Sleep-EDF-like one by default, beside one or more *source* profiles
(:mod:`partnd.cohort.profiles`: ``pc18``, ``sleep_edf``, ``nsrr``, ``headband``). Each profile's
nights are generated once into ``OUT/cohorts/<profile>/`` (``partnd cohort --profile``) and read
into ``OUT/stores/<profile>.zarr`` (``partnd ingest``; the PC18 profile is preprocessed as
``partnd preprocess`` does). The target store is the study's store: its subject split gives the
test subjects, the fine-tuning pool the label budgets are drawn from and the target's unlabelled
nights (every night of a non-test subject).

Every profile gets its own cohort seed (:func:`cohort_seeds`): the profiles synthesise their nights
from per-night seeds drawn from the cohort seed alone, so two profiles written with one seed would
hold the same sleepers' nights in other montages, and a target test subject would be in a source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partnd._validation import check
from partnd.cohort.pc18_cohort import MAX_HOURS, MIN_HOURS, make_pc18_cohort
from partnd.cohort.profiles import PROFILES, make_profile_cohort
from partnd.datasets.label_budget import LabelBudget
from partnd.datasets.store import SleepStore
from partnd.engine.config import FinetuneConfig
from partnd.preprocessing.dataset_ingest import ingest_dataset
from partnd.recipes.study_config import SCRATCH_METHODS, StudyConfig
from partnd.recipes.study_pools import preprocessed

__all__ = [
    "PROFILE_NAMES",
    "SOURCE_SUPERVISED",
    "TransferConfig",
    "cohort_seeds",
    "profile_name",
    "profile_store",
]

#: The dataset profiles a transfer study reads (:mod:`partnd.cohort.profiles`).
PROFILE_NAMES = ("pc18", *PROFILES)

#: The channel set every neural row reads: a target of another montage than the sources.
SET_MODE: dict[str, Any] = {"channel_mode": "set"}

#: The row trained on the sources' labels (its zero-shot arm, and its night arm fine-tuned).
SOURCE_SUPERVISED = "source_supervised"


def profile_name(name: str, argument: str) -> str:
    """A profile's name as :data:`PROFILE_NAMES` spells it (``"sleep-edf"`` -> ``"sleep_edf"``).

    Raises:
        InputError: An unknown profile, naming ``argument``.
    """
    spelled = str(name).strip().lower().replace("-", "_")
    check(spelled in PROFILE_NAMES, argument, f"one of {list(PROFILE_NAMES)}", repr(name))
    return spelled


@dataclass(frozen=True)
class TransferConfig(StudyConfig):
    """Settings of a transfer study (saved as ``study.json``): a sleep study on the target
    profile's store, with source profiles.

    Every :class:`StudyConfig` setting keeps its meaning on the target (``budgets`` accepts night
    budgets, ``"1n"``); ``seeds`` default to ``range(draws)``; every pretraining and every neural
    row but the from-scratch ones read a channel set (``channel_mode="set"``), so that one model
    reads the sources' and the target's montages.

    Attributes:
        target: The target profile (:data:`PROFILE_NAMES`; ``"sleep-edf"`` is accepted).
        sources: The source profiles: all their nights join the target's unlabelled nights in
            the mixed pool. Never the target.
        labelled_sources: The sources whose labelled nights train the source-supervised rows
            (``None``: every source): one night classifier reads the nights of every one of
            them, each validated on held-out subjects of its own store.
        target_records: Nights of the target's cohort.
        source_records: Nights of each source's cohort.
        hours: Length of every generated night.
        draws: Draws (seeds) of every label budget, when ``seeds`` is not given.
    """

    target: str = "sleep_edf"
    sources: tuple[str, ...] = ("pc18", "nsrr")
    labelled_sources: tuple[str, ...] | None = None
    target_records: int = 16
    source_records: int = 8
    hours: float = 2.0
    draws: int = 5

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", profile_name(self.target, "target"))
        sources = tuple(profile_name(name, "sources") for name in self.sources)
        check(
            len(sources) > 0 and len(set(sources)) == len(sources),
            "sources",
            "one or more distinct source profiles",
            repr(self.sources),
        )
        check(
            self.target not in sources,
            "sources",
            f"profiles other than the target {self.target!r} (its subjects would be both "
            "target test subjects and source nights; its own unlabelled nights are in the pool "
            "already)",
            repr(self.sources),
        )
        object.__setattr__(self, "sources", sources)
        labelled = sources if self.labelled_sources is None else self.labelled_sources
        check(
            isinstance(labelled, list | tuple),
            "labelled_sources",
            "a sequence of source profiles (None: every source)",
            repr(labelled),
        )
        labelled = tuple(profile_name(name, "labelled_sources") for name in labelled)
        check(
            len(labelled) > 0 and len(set(labelled)) == len(labelled),
            "labelled_sources",
            "one or more distinct sources",
            repr(self.labelled_sources),
        )
        check(
            set(labelled) <= set(sources),
            "labelled_sources",
            f"sources among {list(sources)}",
            repr(self.labelled_sources),
        )
        object.__setattr__(self, "labelled_sources", labelled)
        for name in ("target_records", "source_records", "draws"):
            value = getattr(self, name)
            check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                name,
                "an int >= 1",
                repr(value),
            )
        check(
            MIN_HOURS <= self.hours <= MAX_HOURS,
            "hours",
            f"a night length in [{MIN_HOURS}, {MAX_HOURS}] hours",
            repr(self.hours),
        )
        check(
            self.src is None and self.pools is None and self.channels is None,
            "src",
            "no --src, --pools or --channels in a transfer study (its nights are the profiles'; "
            "its pools are the mixed pool and the target's unlabelled nights)",
            repr((self.src, self.pools, self.channels)),
        )
        if self.seeds is None:
            object.__setattr__(self, "seeds", tuple(range(self.draws)))
        if self.store is None:
            object.__setattr__(self, "store", self.out / "stores" / f"{self.target}.zarr")
        object.__setattr__(self, "pretrain_overrides", {**SET_MODE, **self.pretrain_overrides})
        super().__post_init__()

    def finetune_config(
        self,
        method: str,
        seed: int,
        arm: str = "window",
        budget: LabelBudget | int | str | None = None,
        grid: Mapping[str, Any] | None = None,
    ) -> FinetuneConfig:
        """The sleep study's fine-tuning configuration (:meth:`StudyConfig.finetune_config`), a
        channel-set model's for every row but the from-scratch ones, which train on the target's
        channels as the sleep study trains them. The source-supervised row starts from a trained
        classifier, so its starting weights are a candidate of the checkpoint selection
        (``evaluate_start``): validation on the target keeps the source model when no step on
        the target's labels does better."""
        config = super().finetune_config(method, seed, arm, budget, grid)
        if method == SOURCE_SUPERVISED:
            config = config.replace(evaluate_start=True)
        return config if method in SCRATCH_METHODS else config.replace(**SET_MODE)

    @property
    def settings(self) -> dict[str, Any]:
        """What must agree between commands run on the same study directory: the sleep study's
        and the profiles, their cohort sizes and the draws."""
        return {
            **super().settings,
            "target": self.target,
            "sources": list(self.sources),
            "labelled_sources": list(self.labelled_sources or ()),
            "target_records": self.target_records,
            "source_records": self.source_records,
            "hours": self.hours,
            "seeds": list(self.seeds or ()),
        }

    def store_path_of(self, profile: str) -> Path:
        """The store of ``profile``'s nights: the study's store for the target."""
        if profile == self.target:
            return self.store_path
        return self.out / "stores" / f"{profile}.zarr"


def cohort_seeds(config: TransferConfig) -> dict[str, int]:
    """The cohort seed of every profile of the study: the study's seed for the target, the next
    ones for the sources in order (distinct seeds: distinct sleepers, see the module
    docstring)."""
    profiles = (config.target, *config.sources)
    return {profile: config.seed + index for index, profile in enumerate(profiles)}


def profile_store(config: TransferConfig, profile: str) -> SleepStore:
    """The store of ``profile``'s nights, generated and read in unless done (both steps resume).

    Args:
        config: The study's settings (cohort sizes, seeds, workers, progress, dtype).
        profile: The target or one of the sources.

    Returns:
        The store (``config.store_path_of(profile)``).
    """
    check(
        profile in (config.target, *config.sources),
        "profile",
        f"the target or a source {[config.target, *config.sources]}",
        repr(profile),
    )
    records = config.target_records if profile == config.target else config.source_records
    seed = cohort_seeds(config)[profile]
    root = config.out / "cohorts" / profile
    path = config.store_path_of(profile)
    n_jobs = max(1, config.n_jobs)
    if profile == "pc18":
        make_pc18_cohort(
            root,
            n_records=records,
            hours=config.hours,
            seed=seed,
            n_jobs=n_jobs,
            progress=config.progress,
        )
        return preprocessed(root, path, config, "store")
    make_profile_cohort(
        profile, root, n_records=records, hours=config.hours, seed=seed, n_jobs=n_jobs
    )
    if not (path / "zarr.json").is_file() or len(SleepStore(path).record_ids()) < records:
        ingest_dataset(
            root, path, n_jobs=n_jobs, dtype=config.signal_dtype, progress=config.progress
        )
    return SleepStore(path)
