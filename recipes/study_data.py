"""The data of a sleep study: its store, subject split, labelled windows and label draws.

:class:`StudyData` opens (or creates) the study's preprocessed store (``OUT/store.zarr``, or the
``--store`` given; a channel subset is copied once), makes the subject split once
(``OUT/split.json``: test subjects, the fine-tuning pool, the pretraining records), and serves
what every stage reads: the test set in one fixed order, the labelled windows, sequences or night
crops an arm trains on, the *draw* of a label budget and seed (the same for every row, so that rows
are paired), and the classical rows' YASA features (``OUT/features.npz``, computed once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from partnd._validation import renamed_arguments
from partnd.cohort.pc18_cohort import ensure_sample_cohort
from partnd.datasets.channel_subset import store_with_channels
from partnd.datasets.label_budget import LabelBudget, LabelDraw, draw_labels
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.datasets.splits import SubjectSplit, make_subject_split
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_save
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.sequence import EVALUATION_CROP
from partnd.recipes.study_config import StudyConfig
from partnd.recipes.study_pools import ingested_store, preprocessed
from partnd.recipes.study_scales import SCALES, StudyScale

__all__ = ["StudyData", "split_sizes"]


def split_sizes(budgets: Iterable[int | str | LabelBudget]) -> tuple[int, ...]:
    """The fine-tuning pool sizes a study's subject split is made for.

    Only subject budgets size the split; night and window budgets are drawn from its fine-tuning
    subjects, each in cells of its own, so adding or removing one leaves the split as it is.

    Args:
        budgets: Label budgets as written (``2``, ``"1n"``, ``"w20"``) or parsed.

    Returns:
        The subject budgets, smallest first, or ``(1,)`` when there are none.
    """
    parsed = sorted((LabelBudget.parse(b, "budgets") for b in budgets), key=lambda b: b.sort_key)
    return tuple(b.subjects for b in parsed if b.subjects is not None) or (1,)


class StudyData:
    """The store, split, labelled data and label draws of the study in ``config.out``.

    Args:
        config: The study's settings.
    """

    def __init__(self, config: StudyConfig) -> None:
        self.config = config
        self.out = config.out
        self._draws: dict[tuple[str, int], LabelDraw] = {}

    @property
    def scale(self) -> StudyScale:
        """The scale's settings, with the config's budgets, seeds and held-out subjects when
        given."""
        changes: dict[str, Any] = {}
        if self.config.budgets is not None:
            changes["budgets"] = tuple(self.config.budgets)
        if self.config.seeds is not None:
            changes["seeds"] = tuple(self.config.seeds)
        if self.config.held_out_subjects is not None:
            changes["held_out_subjects"] = self.config.held_out_subjects
        return SCALES[self.config.scale].replace(**changes)

    @property
    def budgets(self) -> tuple[LabelBudget, ...]:
        """The label budgets of the study, scarcest first."""
        parsed = (LabelBudget.parse(budget, "budgets") for budget in self.scale.budgets)
        return tuple(sorted(parsed, key=lambda budget: budget.sort_key))

    @cached_property
    def store(self) -> SleepStore:
        """The preprocessed store (created or completed on first use)."""
        config = self.config
        src = config.src
        if src is None and config.store is not None and ingested_store(config.store):
            store = SleepStore(config.store)  # e.g. Sleep-EDF or NSRR nights from partnd ingest
        else:
            if src is None:
                with renamed_arguments({"out_dir": "cohort_dir"}):
                    src = ensure_sample_cohort(config.cohort_dir, progress=config.progress).root
            store = preprocessed(src, config.store_path, config, "store")
        if config.channels is None:
            return store
        subset = self.out / f"store-{'_'.join(config.channels)}.zarr"
        return store_with_channels(store, config.channels, subset)

    @cached_property
    def split(self) -> SubjectSplit:
        """The subject split (``split.json``, made once)."""
        path = self.out / "split.json"
        if path.exists():
            return SubjectSplit.load(path)
        split = make_subject_split(
            self.store,
            n_test_subjects=self.scale.n_test_subjects,
            finetune_sizes=split_sizes(self.budgets),
            seed=self.config.seed,
        )
        split.save(path)
        return split

    @property
    def class_names(self) -> list[str]:
        """Stage names from the store."""
        return list(self.store.stage_names)

    def windows(
        self, subjects: Sequence[str], labelled_windows: Mapping[str, Any] | None = None
    ) -> InMemoryWindows:
        """Labelled, normalised windows of ``subjects`` in memory (only ``labelled_windows``
        when given)."""
        return InMemoryWindows(
            self.store, labelled_only=True, **self._reading(subjects, labelled_windows)
        )

    def sequences(
        self,
        subjects: Sequence[str],
        context: int,
        labelled_windows: Mapping[str, Any] | None = None,
        *,
        night: bool = False,
    ) -> SleepSequenceDataset:
        """Sequences of ``context`` consecutive windows of ``subjects``' records (in memory)
        holding a labelled window (only ``labelled_windows`` keep their labels when given; their
        neighbours are context), or with ``night`` crops of ``context`` windows of their whole
        records (:class:`~partnd.datasets.SleepNightDataset`)."""
        kind = SleepNightDataset if night else SleepSequenceDataset
        return kind(self.store, context=context, **self._reading(subjects, labelled_windows))

    def _reading(
        self, subjects: Sequence[str], labelled_windows: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """How every labelled dataset of ``subjects`` reads the store: their records (only those
        holding ``labelled_windows`` when given: a subject's unlabelled night adds no label), the
        study's normalisation and progress, only ``labelled_windows`` labelled when given."""
        records = self.split.records_of(subjects)
        if labelled_windows is not None:
            records = [record for record in records if record in labelled_windows]
        return {
            "records": records,
            "normalize": self.config.normalization,
            "progress": self.config.progress,
            "labelled_windows": labelled_windows,
        }

    def arm_data(
        self,
        arm: str,
        subjects: Sequence[str],
        config: FinetuneConfig,
        labelled_windows: Mapping[str, Any] | None = None,
        *,
        evaluation: bool = False,
    ) -> Any:
        """The labelled data an arm trains on, or validates on with ``evaluation``: single
        windows for the window arm, sequences of ``config.context`` windows for the sequence
        arm, crops of ``config.night_crop`` windows of whole records for the night arm (of
        ``EVALUATION_CROP`` windows, whole nights, to validate on)."""
        if config.context == "night":
            length = EVALUATION_CROP if evaluation else int(config.night_crop)
            return self.sequences(subjects, length, labelled_windows, night=True)
        if config.context is not None:
            return self.sequences(subjects, int(config.context), labelled_windows)
        return self.windows(subjects, labelled_windows)

    @cached_property
    def test_set(self) -> InMemoryWindows:
        """The held-out test subjects' windows (one fixed order for every method)."""
        return self.windows(self.split.test)

    @cached_property
    def test_subjects(self) -> np.ndarray:
        """[n_test] subject of every test window."""
        subject_of = {r: info.subject_id for r, info in self.split.records.items()}
        return np.array([subject_of[self.test_set.record_of(i)] for i in range(len(self.test_set))])

    def draw(self, budget: LabelBudget | int | str, seed: int) -> LabelDraw:
        """The labels of ``budget`` for ``seed``: labelled subjects (nested within a seed for
        subject budgets) or windows per stage, and validation subjects, from the fine-tuning
        pool (:func:`~partnd.datasets.label_budget.draw_labels`); the same for every row."""
        budget = LabelBudget.parse(budget, "budgets")
        key = (str(budget), int(seed))
        if key not in self._draws:
            self._draws[key] = draw_labels(
                self.split, self.store, budget, int(seed), n_validation=self.scale.val_subjects
            )
        return self._draws[key]

    def subjects(self, budget: LabelBudget | int | str, seed: int) -> tuple[str, ...]:
        """Labelled subjects of a budget for ``seed`` (:meth:`draw`)."""
        return self.draw(budget, seed).subjects

    @cached_property
    def classical_features(self) -> Any:
        """YASA's features (with context) of every labelled window of the split's labelled
        records, computed once (``features.npz``)."""
        from partnd.evaluation.classical import FeatureTable, sleep_features

        path = self.out / "features.npz"
        if path.is_file():
            with np.load(path, allow_pickle=False) as stored:
                return FeatureTable(
                    features=stored["features"],
                    labels=stored["labels"],
                    records=stored["records"],
                    windows=stored["windows"],
                    columns=tuple(stored["columns"].tolist()),
                )
        records = [*self.split.records_of(self.split.finetune_pool), *self.split.test_records]
        table = sleep_features(self.store, records, context=True, n_jobs=self.config.n_jobs)
        arrays = {
            "features": table.features,
            "labels": table.labels,
            "records": table.records.astype(str),
            "windows": table.windows,
            "columns": np.array(table.columns),
        }
        atomic_save(arrays, path, save=lambda named, handle: np.savez(handle, **named))
        return table
