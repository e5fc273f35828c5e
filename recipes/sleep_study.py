"""The stages both sleep recipes share: data, split, pretraining per method, fine-tuning cells.

A *study* lives in one output directory::

    OUT/
      study.json                 the settings (a later command must agree with them)
      split.json                 subject split (test subjects, pretraining pool, nested chains)
      store.zarr/                the preprocessed store (unless --store points elsewhere)
      features.npz               the classical rows' YASA features of every labelled window
      pretrain/<method>/         one engine run per self-supervised method (encoder.pt when done)
      finetune/<method>/<arm>/b<B>_s<S>/   one cell: budget B (subjects, or wK windows per
                                 stage), seed S
          result.json            written last (atomically): the cell is finished
          predictions.npy        predicted stage per test window (test-set order)

With pretraining pools (``StudyConfig.pools``, the unlabelled axis) it also holds::

      pool_store.zarr/           the unlabelled nights (``pool_src``; else the study's own store)
      pools.json                 nested pools in hours, held-out nights (:mod:`partnd.datasets.pools`)
      pretrain_pools/<pool>/<method>/  one engine run per pool and method, its budget chosen on the
                                 held-out nights' pretext error; selection.json when done
      finetune/<method>/<arm>/b<B>_s<S>_p<pool>/   a pretrained method's cell on a pool's encoder

Every stage is idempotent: a finished pretraining run (``encoder.pt``) or cell (``result.json``)
is never recomputed, an interrupted one resumes from its last checkpoint, and a directory made
with other settings is refused (``--overwrite`` starts over).

A *row* of the results is a method and an *arm*, how its labelled subjects are used:

| arm | what is trained on the labelled subjects | scored |
|---|---|---|
| ``window`` | a single-window classifier (the paper's protocol) | each 30 s window alone |
| ``sequence`` | a sequence classifier over ``context`` windows (``FinetuneConfig.context``) | each window with its neighbours |
| ``night`` | a night classifier (``context="night"``: the whole record with the time of night), trained on crops | each window with its whole night |
| ``probe`` | logistic regression on the frozen encoder's features (Banville et al. 2021) | each window alone |

Methods:

| name | pretraining | arms |
|---|---|---|
| ``part``, ``part_grid``, ``mae``, ``mp3``, ``droppos``, ``part_windows``, ``rp``, ``ts`` | ``pretrain(method=name)`` on the pool (``rp``, ``ts``: relative positioning, temporal shuffling, with PART across windows' segments and budget) | window, sequence and night (``part_windows``: both its levels), probe |
| ``chambon2018``, ``deepsleepnet`` | none: braindecode's stagers from scratch (``FinetuneConfig.stager``) | window |
| ``usleep`` | none: braindecode's U-Sleep from scratch, reading whole nights | night |
| ``supervised`` | none: from scratch, with position embedding | window, sequence, night, probe (a random encoder) |
| ``supervised_no_pos`` | none: from scratch, without position embedding | window, probe |
| ``classical`` | none: YASA's features + LightGBM (:mod:`partnd.evaluation.classical`) | window (the epoch's features), sequence (with YASA's context) |
| ``yasa_pretrained`` | YASA's shipped classifier, no labels | sequence |

Every neural cell uses the same protocol for every initialisation: a step budget, the EEG
augmentations, class weights, label smoothing, and the checkpoint chosen by Cohen's kappa on
validation subjects drawn from the fine-tuning pool (never a test subject); each cell records the
settings it used. The training budget may follow the label count: a scale's ``by_budget`` table
gives, per arm and number of labelled subjects, what changes (steps, batch, crops, EMA;
:func:`budget_settings`), and the cell records it.

A cell's labels are a *draw* (:func:`partnd.datasets.label_budget.draw_labels`): for a budget and
a seed, its labelled subjects (or windows per stage) and its validation subjects, drawn from the
fine-tuning pool; every row with the same budget and seed gets the same draw, so their
differences are paired. A labelled window's unlabelled neighbours stay as context (label -1) for
the arms that read context.
"""  # noqa: E501

from __future__ import annotations

import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from partnd._validation import InputError, check, renamed_arguments
from partnd.cohort.pc18_cohort import ensure_sample_cohort
from partnd.datasets.adapters import as_labelled_dataset
from partnd.datasets.channel_subset import store_with_channels
from partnd.datasets.label_budget import LabelBudget, LabelDraw, draw_labels
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.pools import pool_name
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.splits import SubjectSplit, make_subject_split
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_save
from partnd.engine.config import FinetuneConfig
from partnd.engine.run_dir import RunDir
from partnd.evaluation.metrics import ClassificationReport, classification_metrics
from partnd.evaluation.probes import linear_probe
from partnd.finetuning.sequence import EVALUATION_CROP, predict_nights
from partnd.finetuning.training import FinetuneResult, finetune
from partnd.inference import predict_logits
from partnd.models import NightClassifier, SequenceClassifier, ViTEncoder, create_encoder
from partnd.models.braindecode_stagers import STAGERS, NightStager
from partnd.models.serialization import ENCODER_FILE, load_encoder
from partnd.objectives import list_objectives
from partnd.pretraining import pretrain
from partnd.recipes.study_config import (
    ARMS,
    CLASSICAL_METHODS,
    SCRATCH_METHODS,
    StudyConfig,
    available_methods,
    method_arms,
)
from partnd.recipes.study_directory import claim_study_directory, exclusive
from partnd.recipes.study_pools import PoolStage, ingested_store, preprocessed
from partnd.recipes.study_scales import (
    DEMO_ENCODER_OVERRIDES,
    SCALES,
    STUDY_FRONTENDS,
    StudyScale,
    budget_settings,
)

__all__ = [
    "ARMS",
    "CLASSICAL_METHODS",
    "DEMO_ENCODER_OVERRIDES",
    "SCALES",
    "SCRATCH_METHODS",
    "STUDY_FRONTENDS",
    "CellResult",
    "SleepStudy",
    "StudyConfig",
    "available_methods",
    "budget_settings",
    "method_arms",
]


@dataclass(frozen=True)
class CellResult:
    """A finished cell: one method and arm, trained on a draw of ``budget`` labels with ``seed``.

    Attributes:
        method: Method name.
        arm: ``"window"``, ``"sequence"`` or ``"probe"``.
        budget: The label budget as written: a number of labelled subjects (``2``) or of
            windows per stage (``"w20"``).
        seed: Seed of the draw (labelled and validation subjects) and of training.
        subjects: The labelled subjects (those whose windows carry the labels; none for a row
            that uses no labels).
        report: Metrics on the test subjects.
        predictions: [n_test] predicted stage per test window.
        history: The fine-tuning run's logged records (empty without one).
        settings: What the cell used: steps, the selected step and its validation kappa,
            augmentations, context, probe regularisation, features...
        pool: The pretraining pool of a pretrained method's encoder (``None``: the split's
            pretraining records, or no pretraining).
        draw: The draw (:meth:`partnd.datasets.label_budget.LabelDraw.to_dict`: labelled and
            validation subjects, the windows per stage of a window budget); empty for a cell
            written before draws were recorded.
    """

    method: str
    arm: str
    budget: int | str
    seed: int
    subjects: tuple[str, ...]
    report: ClassificationReport
    predictions: np.ndarray
    history: list[dict[str, Any]]
    settings: dict[str, Any]
    pool: str | None = None
    draw: dict[str, Any] = field(default_factory=dict)

    @property
    def row(self) -> str:
        """``method`` for the window arm, ``method+seq`` / ``method+night`` / ``method probe`` for
        the others."""
        labels = {
            "window": self.method,
            "sequence": f"{self.method}+seq",
            "night": f"{self.method}+night",
        }
        return labels.get(self.arm, f"{self.method} {self.arm}")

    @property
    def label(self) -> str:
        """The row, and its pretraining pool when it has one (``part_windows+seq @24h``)."""
        return self.row if self.pool is None else f"{self.row} @{self.pool}"


def _selected(result: FinetuneResult) -> dict[str, Any]:
    """The selected checkpoint of a fine-tuning run: epoch, step and validation kappa."""
    epoch = result.best_metrics.get("epoch")
    val = [r for r in result.history if r.get("phase") == "val" and r.get("epoch") == epoch]
    return {
        "selected_step": val[-1]["step"] if val else None,
        "val_kappa": round(float(val[-1]["cohen_kappa"]), 4) if val else None,
    }


def _save_npy(array: np.ndarray, handle: IO[bytes]) -> None:
    """``np.save`` as an :func:`~partnd.engine.checkpoint.atomic_save` writer."""
    np.save(handle, array)


class SleepStudy:
    """Runs the stages of a sleep study in ``config.out`` (see the module docstring).

    Args:
        config: The study's settings.
        overwrite: Start the directory over (only a study directory is ever cleared).
    """

    def __init__(self, config: StudyConfig, overwrite: bool = False) -> None:
        self.config = config
        self.out = config.out
        self._draws: dict[tuple[str, int], LabelDraw] = {}
        self._claim(overwrite)

    def _claim(self, overwrite: bool) -> None:
        store = self.config.store
        if overwrite and store is not None and self.out.is_dir() and any(self.out.iterdir()):
            inside = store.resolve().is_relative_to(self.out.resolve())
            check(not inside, "--store", "a store outside --out with --overwrite", "inside")
        drawn = (self.out / "pools.json").exists() or (self.out / "pretrain_pools").exists()
        revisable = () if drawn else ("pools", "pool_overrides", "held_out_subjects")
        claim_study_directory(self.out, self.config.settings, overwrite, revisable)

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
        sizes = tuple(b.subjects for b in self.budgets if b.subjects is not None)
        split = make_subject_split(
            self.store,
            n_test_subjects=self.scale.n_test_subjects,
            finetune_sizes=sizes or (1,),
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
            self.store,
            records=self.split.records_of(subjects),
            labelled_only=True,
            normalize=self.config.normalization,
            progress=self.config.progress,
            labelled_windows=labelled_windows,
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
        return kind(
            self.store,
            records=self.split.records_of(subjects),
            context=context,
            normalize=self.config.normalization,
            progress=self.config.progress,
            labelled_windows=labelled_windows,
        )

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
    def pools(self) -> PoolStage:
        """The unlabelled axis: the pool store, the nested pools and their pretraining."""
        check(
            self.config.pools is not None,
            "pools",
            "pool sizes in hours (a study with pretraining pools)",
            "none",
        )
        return PoolStage(self)

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The pools of the study, smallest first (none without ``StudyConfig.pools``)."""
        if self.config.pools is None:
            return ()
        return tuple(pool_name(size) for size in self.config.pools)

    def pretrain_dir(self, method: str, pool: str | None = None) -> Path:
        """Run directory of ``method``'s pretraining (on ``pool``'s nights when given)."""
        if pool is not None:
            return self.pools.run_dir(method, pool)
        return self.out / "pretrain" / method

    def pretrained(self, method: str, pool: str | None = None) -> bool:
        """Whether ``method``'s pretraining (on ``pool``) has finished (a run stopped early by
        ``max_steps`` also writes ``encoder.pt``, but has not finished)."""
        if pool is not None:
            return self.pools.done(method, pool)
        run_dir = self.pretrain_dir(method)
        return (run_dir / ENCODER_FILE).is_file() and RunDir(run_dir).trained()

    def run_pretraining(self, method: str, pool: str | None = None) -> Path:
        """Pretrain ``method`` unless done (an interrupted run resumes): on the split's
        pretraining records for the scale's budget, or on ``pool``'s nights for a budget chosen
        on held-out nights (:class:`PoolStage`).

        Returns:
            The run directory (holding ``encoder.pt``).
        """
        check(
            method in list_objectives(),
            "method",
            f"a pretraining method {list_objectives()}",
            repr(method),
        )
        if pool is not None:
            return self.pools.run(method, pool)
        run_dir = self.pretrain_dir(method)
        if self.pretrained(method):
            return run_dir
        resume = RunDir(run_dir).resumable
        data = SleepWindowDataset(
            self.store, records=list(self.split.pretrain), normalize=self.config.normalization
        )
        if resume:  # continue the interrupted run to its end
            pretrain(data, out_dir=run_dir, resume=True, max_steps=None)
        else:
            config = self.config.pretrain_config(method)
            pretrain(data, out_dir=run_dir, config=config, overwrite=run_dir.exists())
        return run_dir

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

    def cell_dir(
        self,
        method: str,
        arm: str,
        budget: LabelBudget | int | str,
        seed: int,
        pool: str | None = None,
    ) -> Path:
        """Directory of one cell: ``b<budget>_s<seed>``, ``_p<pool>`` added for a pool's
        encoder."""
        name = f"b{LabelBudget.parse(budget, 'budgets')}_s{seed}"
        return self.out / "finetune" / method / arm / (name if pool is None else f"{name}_p{pool}")

    def cell_done(
        self,
        method: str,
        arm: str,
        budget: LabelBudget | int | str,
        seed: int,
        pool: str | None = None,
    ) -> bool:
        """Whether the cell has finished."""
        return RunDir(self.cell_dir(method, arm, budget, seed, pool)).finished()

    def load_cell(
        self,
        method: str,
        arm: str,
        budget: LabelBudget | int | str,
        seed: int,
        pool: str | None = None,
    ) -> CellResult:
        """Read a finished cell."""
        cell = self.cell_dir(method, arm, budget, seed, pool)
        data = RunDir(cell).read_result()
        report = ClassificationReport(
            **{
                **data["report"],
                "confusion_matrix": np.asarray(data["report"]["confusion_matrix"]),
            }
        )
        history = RunDir(cell / "run").history()
        return CellResult(
            method=method,
            arm=arm,
            budget=LabelBudget.parse(budget, "budgets").to_json(),
            seed=seed,
            subjects=tuple(data["subjects"]),
            report=report,
            predictions=np.load(cell / "predictions.npy"),
            history=history,
            settings=dict(data["settings"]),
            pool=data.get("pool"),
            draw=dict(data.get("draw", {})),
        )

    def _check_cell(self, method: str, arm: str, pool: str | None) -> None:
        check(method in available_methods(), "method", f"one of {available_methods()}", method)
        check(
            arm in method_arms(method),
            "arm",
            f"one of {method}'s arms {method_arms(method)}",
            repr(arm),
        )
        if pool is not None:
            check(
                method in list_objectives(),
                "pool",
                f"no pool for {method!r} (only pretrained methods have one)",
                repr(pool),
            )
            check(
                pool in self.pool_names,
                "pool",
                f"one of the study's pools {list(self.pool_names)}",
                repr(pool),
            )
        if method in list_objectives():
            check(
                self.pretrained(method, pool),
                "method",
                f"a finished pretraining of {method!r} (run the pretrain stage first)",
                f"no finished run in {self.pretrain_dir(method, pool)}",
            )

    def run_cell(
        self,
        method: str,
        arm: str,
        budget: LabelBudget | int | str,
        seed: int,
        pool: str | None = None,
    ) -> CellResult:
        """Train ``method``'s ``arm`` on the draw of ``budget`` for ``seed`` (on ``pool``'s
        encoder) and test it, unless done. A pretrained method's pretraining must have
        finished (:meth:`run_pretraining`). One process at a time writes a cell: another
        one writing it (a worker of a killed command finishing its cell) is refused."""
        self._check_cell(method, arm, pool)
        if self.cell_done(method, arm, budget, seed, pool):
            return self.load_cell(method, arm, budget, seed, pool)
        cell = self.cell_dir(method, arm, budget, seed, pool)
        name = ":".join(str(part) for part in (method, arm, budget, seed, pool) if part is not None)
        with exclusive(cell.with_name(f".{cell.name}.lock"), f"the cell {cell}"):
            try:
                return self._run_cell(method, arm, budget, seed, pool)  # done meanwhile: loaded
            except InputError as error:  # which cell, also from a worker of --jobs N
                if cell.is_dir() and not any(p.is_file() for p in cell.rglob("*")):
                    shutil.rmtree(cell)  # no empty cell folder is left
                raise InputError(f"{error} (in the cell {name})") from error

    def _run_cell(
        self,
        method: str,
        arm: str,
        budget: LabelBudget | int | str,
        seed: int,
        pool: str | None = None,
    ) -> CellResult:
        self._check_cell(method, arm, pool)
        if self.cell_done(method, arm, budget, seed, pool):
            return self.load_cell(method, arm, budget, seed, pool)
        draw = self.draw(budget, seed)
        cell = self.cell_dir(method, arm, budget, seed, pool)
        cell.mkdir(parents=True, exist_ok=True)
        if method in CLASSICAL_METHODS:
            predictions, settings = self._classical(method, arm, draw, seed)
            used = () if method == "yasa_pretrained" else draw.subjects
        elif arm == "probe":
            predictions, settings = self._probe(method, draw, seed, pool)
            used = draw.subjects
        else:
            run_dir = cell / "run"
            predictions, settings = self._finetune(method, arm, draw, seed, run_dir, pool)
            used = draw.subjects
        labels = self.test_set.labels.astype(np.int64)
        report = classification_metrics(
            labels, predictions, len(self.class_names), self.class_names
        )
        atomic_save(predictions.astype(np.int8), cell / "predictions.npy", save=_save_npy)
        RunDir(cell).write_result(
            {
                "method": method,
                "arm": arm,
                "budget": draw.budget.to_json(),
                "seed": seed,
                "pool": pool,
                "subjects": list(used),
                "draw": draw.to_dict() if used else {},
                "report": report.to_dict(),
                "settings": settings,
            }
        )
        return self.load_cell(method, arm, budget, seed, pool)

    def _classical(
        self, method: str, arm: str, draw: LabelDraw, seed: int
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A classical row: YASA's features + LightGBM, or YASA's pretrained classifier."""
        from partnd.evaluation.classical import (
            fit_classical_stager,
            predict_stages,
            pretrained_channel,
            yasa_pretrained_stages,
        )

        test_records = list(self.split.test_records)
        if method == "yasa_pretrained":  # no labels: one prediction shared by every cell
            path = self.out / "yasa_pretrained.npy"
            channel = pretrained_channel(self.store)
            if not path.is_file():
                staged = yasa_pretrained_stages(self.store, test_records, eeg_channel=channel)
                self._check_test_order(staged.labels)
                atomic_save(staged.predictions, path, save=_save_npy)
            return np.load(path), {
                "features": f"YASA's own ({channel}, rolling context, per-night z-scores)",
                "classifier": "YASA's shipped clf_eeg LightGBM, no labels from this data",
                "note": "out of domain on the generated sample cohort"
                if self.config.src is None
                else "",
            }
        table = self.classical_features
        if arm == "window":
            table = table.single_window()
        train = table.select(self.split.records_of(draw.subjects))
        if draw.labelled_windows is not None:  # the drawn windows; context columns keep the night
            train = train.keep_windows(draw.labelled_windows)
        test = table.select(test_records)
        self._check_test_order(test.labels)
        model = fit_classical_stager(train.features, train.labels, seed=seed)
        return predict_stages(model, test.features), {
            "features": f"YASA {'with' if arm == 'sequence' else 'without'} context, "
            f"{len(table.columns)} columns",
            "classifier": "LightGBM, YASA's hyper-parameters and class weights",
            "labelled_windows": len(train),
        }

    def _check_test_order(self, labels: np.ndarray) -> None:
        """Predictions of every row must follow the test set's windows."""
        check(
            np.array_equal(np.asarray(labels), self.test_set.labels.astype(np.int64)),
            "predictions",
            "one prediction per labelled test window, in the test set's order",
            "another order",
        )

    def window_encoder(self, method: str, seed: int, pool: str | None) -> ViTEncoder:
        """A pretrained method's window encoder, or a scratch method's random encoder."""
        if method not in SCRATCH_METHODS:
            return load_encoder(self.pretrain_dir(method, pool))
        config = self.config.finetune_config(method, seed)
        torch.manual_seed(seed)
        encoder = create_encoder(
            config.encoder,
            in_chans=len(self.store.channels),
            patch_size=config.patch_size,
            ndim=1,
            **config.encoder_overrides,
        )
        if SCRATCH_METHODS[method]:
            encoder.add_position_embedding(self.store.n_times // encoder.patch_size[0])
        return encoder.eval()

    def _probe(
        self, method: str, draw: LabelDraw, seed: int, pool: str | None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Logistic regression on the frozen encoder's [CLS] + mean patch token features."""
        train = self.windows(draw.subjects, draw.labelled_windows)
        result = linear_probe(
            self.window_encoder(method, seed, pool),
            train,
            self.test_set,
            num_classes=len(self.class_names),
            device=self.config.device if self.config.device != "auto" else None,
            seed=seed,
        )
        init = "random (seeded)" if method in SCRATCH_METHODS else f"{method} pretraining"
        return result.predictions, {
            "encoder": init if pool is None else f"{init} on pool {pool}",
            "features": "[CLS] + mean patch token, standardised",
            "frontend": self.config.frontend_name,
            "C": result.inverse_regularisation,
            "labelled_windows": len(train),
        }

    def _finetune(
        self,
        method: str,
        arm: str,
        draw: LabelDraw,
        seed: int,
        run_dir: Path,
        pool: str | None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Fine-tune the window, sequence or night classifier of ``method`` and predict the test
        set."""
        config = self.config.finetune_config(method, seed, arm, draw.budget)
        resume = RunDir(run_dir).resumable
        from_scratch = method in SCRATCH_METHODS or method in STAGERS
        encoder: Any = None if from_scratch else self.pretrain_dir(method, pool)
        night = config.context == "night"
        train = self.arm_data(arm, draw.subjects, config, draw.labelled_windows)
        if not resume and 0 < len(train) < config.batch_size:  # a scarce draw, a short record
            warnings.warn(
                f"the cell {method}:{arm}:{draw.budget}:{seed}"
                f"{'' if pool is None else ':' + pool}: {len(train)} training items cannot fill "
                f"a batch of {config.batch_size}; it trains with batches of {len(train)}",
                UserWarning,
                stacklevel=2,
            )
            config = config.replace(batch_size=len(train))  # recorded in the cell's settings
        val = None
        if draw.validation:
            val = self.arm_data(arm, draw.validation, config, evaluation=True)
        result = finetune(
            encoder,
            train,
            num_classes=len(self.class_names),
            val_dataset=val,
            out_dir=run_dir,
            config=None if resume else config,
            class_names=self.class_names,
            resume=resume,
            overwrite=not resume and run_dir.exists(),
            **({"max_steps": None} if resume else {}),
        )
        model = result.model
        if isinstance(model, SequenceClassifier | NightClassifier | NightStager):
            length = EVALUATION_CROP if night else int(config.context or 1)
            nights = predict_nights(
                model,
                self.sequences(self.split.test, length, night=night),
                device=self.config.device,
            )
            labels = np.concatenate([night.labels for night in nights])
            probabilities = np.concatenate([night.probabilities for night in nights])
            scored = labels >= 0
            self._check_test_order(labels[scored])
            predictions = probabilities[scored].argmax(axis=1)
        else:
            test, _ = as_labelled_dataset(self.test_set)
            logits = predict_logits(model, test.signals, device=self.config.device)
            predictions = logits.argmax(dim=1).numpy()
        meta = RunDir(run_dir).resolved()
        init = "scratch" if from_scratch else f"{method} pretraining"
        settings = {
            "init": init if pool is None else f"{init} on pool {pool}",
            "steps": meta["total_steps"],
            **_selected(result),
            "batch_size": config.batch_size,
            "lr": meta["peak_lr"],
            "layer_decay": config.layer_decay,
            "label_smoothing": config.label_smoothing,
            "augmentations": list(config.augmentations or ()),
            "context": config.context,
            "frontend": self.config.frontend_name,
            "ema_decay": config.ema_decay,
            "budget_settings": budget_settings(self.scale, arm, draw.budget),
            "validation_subjects": list(draw.validation),
        }
        if night:
            settings["night_crop"] = config.night_crop
        return predictions, settings
