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

import json
import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
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
from partnd.datasets.store import SIGNAL_DTYPES, SleepStore
from partnd.engine.checkpoint import atomic_save
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.normalization import resolve_normalization
from partnd.engine.run_dir import RunDir
from partnd.evaluation.metrics import ClassificationReport, classification_metrics
from partnd.evaluation.probes import linear_probe
from partnd.finetuning.sequence import EVALUATION_CROP, predict_nights
from partnd.finetuning.training import FinetuneResult, finetune
from partnd.inference import predict_logits
from partnd.models import NightClassifier, SequenceClassifier, ViTEncoder, create_encoder
from partnd.models.braindecode_stagers import NIGHT_STAGERS, STAGERS, NightStager
from partnd.models.serialization import ENCODER_FILE, load_encoder
from partnd.objectives import list_objectives
from partnd.objectives.registry import registered
from partnd.pretraining import pretrain
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

#: How a method's labelled subjects are used (see the module docstring).
ARMS = ("window", "sequence", "night", "probe")

#: Methods trained from scratch (no pretraining): name -> whether they get a position embedding.
SCRATCH_METHODS: dict[str, bool] = {"supervised": True, "supervised_no_pos": False}

#: Classical reference rows (no neural network): name -> its arms.
CLASSICAL_METHODS: dict[str, tuple[str, ...]] = {
    "classical": ("window", "sequence"),
    "yasa_pretrained": ("sequence",),
}


def available_methods() -> list[str]:
    """Every method name a study accepts: the registered objectives, the scratch baselines,
    braindecode's stagers and the classical rows."""
    return [*list_objectives(), *SCRATCH_METHODS, *STAGERS, *CLASSICAL_METHODS]


def method_arms(method: str) -> tuple[str, ...]:
    """The arms a method has (see the module docstring)."""
    if method in CLASSICAL_METHODS:
        return CLASSICAL_METHODS[method]
    if method in STAGERS:  # U-Sleep reads whole nights, the others one window
        return ("night",) if method in NIGHT_STAGERS else ("window",)
    if method == "supervised_no_pos":
        return ("window", "probe")
    return ARMS


@dataclass(frozen=True)
class StudyConfig:
    """Settings of a sleep study (saved as ``study.json``).

    Attributes:
        out: Study directory.
        src: Local PhysioNet 2018 root (``training/``, ``test/``); ``None`` uses the built-in
            PC18-format sample cohort, generated on first use into ``cohort_dir``.
        store: Preprocessed store to use or create; default ``<out>/store.zarr``.
        cohort_dir: Where the sample cohort is cached (default ``$PARTND_CACHE`` or
            ``~/.cache/partnd``).
        scale: ``"demo"`` or ``"paper"`` (see :data:`SCALES`).
        n_jobs: Preprocessing and feature-extraction workers (MNE semantics).
        loader_workers: DataLoader worker processes of every pretraining (``num_workers``;
            0 loads in the training process). A run setting like ``device``, not one of the
            study's settings: every epoch reads the same items, but each worker reads its own
            storage chunks, so the batch order, and a run's numbers, follow the worker count
            as they follow the device; each pretraining's ``config.json`` records it.
        seed: Seed of the subject split (and of the single cell of the sleep-staging table).
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        progress: Show progress bars.
        pretrain_overrides: :class:`PretrainConfig` fields replacing the scale's, every method.
        finetune_overrides: :class:`FinetuneConfig` fields replacing the scale's, every method
            and arm.
        sequence_overrides: :class:`FinetuneConfig` fields of the sequence arm (e.g.
            ``{"context": 41}``), applied last.
        night_overrides: :class:`FinetuneConfig` fields of the night arm (e.g.
            ``{"night_crop": 240}``), applied last.
        normalize: How windows are normalised for every method (``"window"``, ``"record"``,
            see :class:`~partnd.datasets.SleepWindowDataset`); ``None``: the scale's.
        frontend: The window encoder's patch tokenizer for every learned method, pretrained or
            not (one of :data:`STUDY_FRONTENDS`); ``None``: the scale's.
        budgets: Label budgets replacing the scale's, as written on the command line: subject
            counts (``2``: every labelled window of 2 subjects) and windows per stage
            (``"w20"``), see :class:`~partnd.datasets.label_budget.LabelBudget`; kept scarcest
            first.
        seeds: Seeds of the sample-efficiency cells replacing the scale's; each seed is a draw of
            labelled and validation subjects.
        pools: Pretraining pool sizes in hours (the unlabelled axis, increasing); ``None``: one
            pretraining per method on the split's pretraining records, a fixed step budget.
        pool_src: PC18-format root of the unlabelled nights the pools are drawn from (e.g. a
            cohort generated with ``partnd cohort``), preprocessed into ``pool_store``;
            ``None``: the study's own store, its nights of unlabelled subjects.
        pool_store: The store of ``pool_src``; default ``<out>/pool_store.zarr``.
        held_out_subjects: Subjects whose nights are held out of every pool to choose each
            pool's pretraining budget on; ``None``: the scale's.
        pool_overrides: :class:`PretrainConfig` fields of a pool's pretraining (e.g.
            ``{"patience": 6, "eval_every_steps": 200}``), applied last.
        signal_dtype: On-disk signal dtype of the stores the study creates (``"float32"`` or
            ``"float16"``, half the disk; reads return float32).
        channels: The store channels the study reads, in this order (e.g. ``("Fpz-Cz",
            "Pz-Oz")``); ``None``: every channel of the store. A subset is copied once into
            ``<out>/store-<channels>.zarr`` (:mod:`partnd.datasets.channel_subset`).
    """

    out: Path
    src: Path | None = None
    store: Path | None = None
    cohort_dir: Path | None = None
    scale: str = "demo"
    n_jobs: int = 1
    loader_workers: int = 0
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    finetune_overrides: dict[str, Any] = field(default_factory=dict)
    sequence_overrides: dict[str, Any] = field(default_factory=dict)
    night_overrides: dict[str, Any] = field(default_factory=dict)
    normalize: str | None = None
    frontend: str | None = None
    budgets: tuple[int | str, ...] | None = None
    seeds: tuple[int, ...] | None = None
    pools: tuple[float, ...] | None = None
    pool_src: Path | None = None
    pool_store: Path | None = None
    held_out_subjects: int | None = None
    pool_overrides: dict[str, Any] = field(default_factory=dict)
    signal_dtype: str = "float32"
    channels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check(self.scale in SCALES, "scale", f"one of {sorted(SCALES)}", repr(self.scale))
        if self.budgets is not None:
            parsed = [LabelBudget.parse(budget, "budgets") for budget in self.budgets]
            check(
                len(parsed) > 0 and len(set(parsed)) == len(parsed),
                "budgets",
                "distinct label budgets",
                repr(self.budgets),
            )
            ordered = tuple(b.to_json() for b in sorted(parsed, key=lambda b: b.sort_key))
            object.__setattr__(self, "budgets", ordered)
        if self.pools is not None:
            check(
                len(self.pools) > 0
                and all(size > 0 for size in self.pools)
                and list(self.pools) == sorted(set(self.pools)),
                "pools",
                "increasing positive pool sizes in hours",
                repr(self.pools),
            )
        check(
            self.pools is not None or (self.pool_src is None and self.pool_store is None),
            "pool_src",
            "no pool source or store without pools (give the pool sizes)",
            str(self.pool_src or self.pool_store),
        )
        for name, unset in (("held_out_subjects", None), ("pool_overrides", {})):
            check(  # they only set the pools' pretraining: ignored without pools
                self.pools is not None or getattr(self, name) == unset,
                name,
                f"{unset!r} without pools (it sets the pools' pretraining; give the pool sizes)",
                repr(getattr(self, name)),
            )
        check(
            self.held_out_subjects is None or self.held_out_subjects >= 1,
            "held_out_subjects",
            "an int >= 1",
            repr(self.held_out_subjects),
        )
        check(
            self.signal_dtype in SIGNAL_DTYPES,
            "signal_dtype",
            f"one of {SIGNAL_DTYPES}",
            repr(self.signal_dtype),
        )
        if self.normalize is not None:
            resolve_normalization(self.normalize, "normalize")
        check(
            self.frontend is None or self.frontend in STUDY_FRONTENDS,
            "frontend",
            f"one of {sorted(STUDY_FRONTENDS)}",
            repr(self.frontend),
        )
        check(self.seed >= 0, "seed", "an int >= 0", repr(self.seed))
        check(
            self.loader_workers >= 0,
            "loader_workers",
            "an int >= 0 (0: load in the training process)",
            repr(self.loader_workers),
        )
        if self.seeds is not None:
            check(
                len(self.seeds) > 0
                and all(seed >= 0 for seed in self.seeds)
                and len(set(self.seeds)) == len(self.seeds),
                "seeds",
                "distinct ints >= 0",
                repr(self.seeds),
            )
        PretrainConfig.check_field_names(self.pretrain_overrides, "pretrain_overrides")
        PretrainConfig.check_field_names(self.pool_overrides, "pool_overrides")
        FinetuneConfig.check_field_names(self.finetune_overrides, "finetune_overrides")
        FinetuneConfig.check_field_names(self.sequence_overrides, "sequence_overrides")
        FinetuneConfig.check_field_names(self.night_overrides, "night_overrides")

    def check_settings(self, methods: Sequence[str] = ()) -> None:
        """Build the configurations the study trains with (every arm's fine-tuning, for every
        seed and budget; the pretraining of ``methods``, on the pools too), so that a bad setting
        (``context=0``, ``night_crop=0``, a step budget of 0, a pool's ``patience=0``...) is
        refused before anything is written, not when its row trains.

        Raises:
            InputError: Naming the configuration field (``FinetuneConfig.context``...).
        """
        for method in dict.fromkeys(["part", *methods]):
            if method in list_objectives():
                self.pretrain_config(method)
                if self.pools is not None:  # its pools' pretraining (the pool options)
                    self.pretrain_config(method, pool=True)
        budgets = self.budgets or SCALES[self.scale].budgets
        for seed in sorted({self.seed, *(self.seeds or SCALES[self.scale].seeds)}):
            for method in ("part", *SCRATCH_METHODS):
                for arm in ("window", "sequence", "night"):
                    if arm in method_arms(method):
                        for budget in budgets:
                            self.finetune_config(method, seed, arm, budget)

    @property
    def normalization(self) -> str:
        """How every method's windows are normalised: the config's, else the scale's."""
        return str(self.normalize or SCALES[self.scale].normalize)

    @property
    def frontend_name(self) -> str:
        """The window encoder's front-end for every learned method: the config's, else the
        scale's."""
        return str(self.frontend or SCALES[self.scale].frontend)

    def _with_frontend(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with the study's front-end added to its encoder overrides."""
        encoder = {**values.get("encoder_overrides", {}), **STUDY_FRONTENDS[self.frontend_name]}
        return {**values, "encoder_overrides": encoder}

    @property
    def store_path(self) -> Path:
        """The preprocessed store of this study."""
        return self.store if self.store is not None else self.out / "store.zarr"

    @property
    def pool_store_path(self) -> Path:
        """The store the pools are drawn from: the pool source's, else the study's own."""
        if self.pool_src is None:
            return self.store_path
        return self.pool_store if self.pool_store is not None else self.out / "pool_store.zarr"

    @property
    def settings(self) -> dict[str, Any]:
        """What must agree between commands run on the same study directory (settings added
        after studies were made, ``night_overrides`` and those of the unlabelled axis, only when
        set, and the front-end only when not ``linear``: those studies stay valid)."""
        keep = (
            "src",
            "store",
            "scale",
            "seed",
            "pretrain_overrides",
            "finetune_overrides",
            "sequence_overrides",
            "normalize",
            "budgets",
        )
        values = asdict(self)
        chosen = {k: str(values[k]) if isinstance(values[k], Path) else values[k] for k in keep}
        defaults: dict[str, Any] = {"pools": None, "pool_src": None, "pool_store": None}
        defaults.update(held_out_subjects=None, pool_overrides={}, signal_dtype="float32")
        defaults["night_overrides"] = {}
        defaults["channels"] = None
        for key, default in defaults.items():
            if values[key] != default:
                chosen[key] = str(values[key]) if isinstance(values[key], Path) else values[key]
        if self.frontend_name != "linear":  # every study before the setting used ``linear``
            chosen["frontend"] = self.frontend_name
        return dict(json.loads(json.dumps(chosen)))  # the form study.json holds

    def pretrain_config(self, method: str, pool: bool = False) -> PretrainConfig:
        """The pretraining configuration of ``method`` (the scale's budget for every method;
        PART across windows starts from its own preset, ``eeg_sleep_windows``); for a pool's
        pretraining the scale's ``pool_pretrain`` comes before the study's overrides (its step
        budget is a cap, ``--pretrain-steps`` sets it) and ``pool_overrides`` after them."""
        scale = SCALES[self.scale]
        entry = registered(method)
        segments = entry is not None and entry.data == "segments"
        # the objectives on segments (rp, ts) share PART across windows' segments and budget
        budget = scale.pretrain_methods.get("part_windows", {}) if segments else {}
        values = {
            **scale.pretrain,
            **scale.pretrain_methods.get(method, budget),
            **(scale.pool_pretrain if pool else {}),
            **self.pretrain_overrides,
            **(self.pool_overrides if pool else {}),
        }
        values = self._with_frontend(values)
        preset = "eeg_sleep_windows" if segments else "eeg_sleep"
        if segments:  # drawn windows normalised as the fine-tuning windows
            values = {"normalize": self.normalization, **values}
        return PretrainConfig.preset(
            preset,
            method=method,
            seed=self.seed,
            device=self.device,
            progress=self.progress,
            **{"num_workers": self.loader_workers, **values},
        )

    def finetune_config(
        self,
        method: str,
        seed: int,
        arm: str = "window",
        budget: LabelBudget | int | str | None = None,
    ) -> FinetuneConfig:
        """The fine-tuning configuration of ``method``'s ``arm`` on the label ``budget``:
        the ``eeg_sleep`` preset and the scale's protocol for everyone (the sequence or night
        arm's changes on top, then what the arm changes at this budget, :func:`budget_settings`),
        then the study's overrides (every arm's, then the sequence or night arm's); from-scratch
        baselines get no layer-wise decay and their own position-embedding choice."""
        scale = SCALES[self.scale]
        arm_overrides = {"sequence": self.sequence_overrides, "night": self.night_overrides}
        values = {
            **scale.finetune,
            **scale.arm(arm),
            **budget_settings(scale, arm, budget),
            **self.finetune_overrides,
            **arm_overrides.get(arm, {}),
        }
        values = self._with_frontend(values)
        if method in SCRATCH_METHODS:
            values["layer_decay"] = None
            values["pos_embed"] = SCRATCH_METHODS[method]
        if method in STAGERS:  # the same protocol; the architecture is braindecode's
            values["layer_decay"] = None
            values["stager"] = method
        return FinetuneConfig.preset(
            "eeg_sleep", seed=seed, device=self.device, progress=self.progress, **values
        )


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
