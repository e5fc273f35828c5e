"""The settings of a sleep study (``study.json``) and the methods and arms it knows.

:class:`StudyConfig` holds what a study is run with: its data (``src``, ``store``, channels), its
scale (:mod:`partnd.recipes.study_scales`) and the overrides of every pretraining and fine-tuning,
its label budgets and seeds, and its pretraining pools. It builds the configuration each
pretraining and each arm's fine-tuning trains with (:meth:`StudyConfig.pretrain_config`,
:meth:`StudyConfig.finetune_config`), and :attr:`StudyConfig.settings`, what must agree between
commands run on one study directory. The methods and their arms are described in
:mod:`partnd.recipes.sleep_study`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from partnd._validation import check
from partnd.datasets.label_budget import LabelBudget
from partnd.datasets.store import SIGNAL_DTYPES
from partnd.engine.config import FinetuneConfig, PretrainConfig, TrainConfig
from partnd.engine.normalization import resolve_normalization
from partnd.models.braindecode_stagers import NIGHT_STAGERS, STAGERS
from partnd.objectives import list_objectives
from partnd.objectives.registry import registered
from partnd.recipes.baselines import POOL_CEILING, SCRATCH_METHODS
from partnd.recipes.set_options import is_grid_values, pretrain_fields_for
from partnd.recipes.study_scales import SCALES, STUDY_FRONTENDS, budget_settings

__all__ = [
    "ARMS",
    "CLASSICAL_METHODS",
    "POOL_CEILING",
    "SCRATCH_METHODS",
    "TEMPORAL_LEVEL_METHODS",
    "StudyConfig",
    "available_methods",
    "method_arms",
    "pretrained_methods",
]

#: How a method's labelled subjects are used (see :mod:`partnd.recipes.sleep_study`).
ARMS = ("window", "sequence", "night", "probe")


#: Classical reference rows (no neural network): name -> its arms.
CLASSICAL_METHODS: dict[str, tuple[str, ...]] = {
    "classical": ("window", "sequence"),
    "yasa_pretrained": ("sequence",),
}

#: The methods whose pretraining gives a temporal level too (a hierarchical encoder: PART across
#: windows, alone or with PART within windows), the only ones a sequence or night row keeps with
#: ``pretrained_levels="temporal"``; their held-out nights are read as segments.
TEMPORAL_LEVEL_METHODS = ("part_windows", "part_joint")


def available_methods() -> list[str]:
    """Every method name a study accepts: the registered objectives, the pool axis's oracle
    ceiling, the scratch baselines, braindecode's stagers and the classical rows."""
    return [*pretrained_methods(), *SCRATCH_METHODS, *STAGERS, *CLASSICAL_METHODS]


def pretrained_methods() -> list[str]:
    """The methods whose cells start from an encoder the study pretrains (once per pool with
    pools): the registered objectives and the oracle ceiling :data:`POOL_CEILING`."""
    return [*list_objectives(), POOL_CEILING]


def method_arms(method: str) -> tuple[str, ...]:
    """The arms a method has (see :mod:`partnd.recipes.sleep_study`)."""
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
        night_grid: :class:`FinetuneConfig` fields of the night arm, each with two or more
            values (e.g. ``{"layer_decay": [1.0, 0.3]}``): every night cell trains once per
            combination (:attr:`night_grid_points`) and keeps the one its draw's validation
            subjects choose. Not a field of ``night_overrides``.
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
    night_grid: dict[str, list[Any]] = field(default_factory=dict)
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
        FinetuneConfig.check_field_names(self.night_grid, "night_grid")
        for name, values in self.night_grid.items():
            check(
                is_grid_values(values),
                "night_grid",
                f"{name}: a list of two or more distinct values",
                repr(values),
            )
            check(
                name not in self.night_overrides,
                "night_grid",
                f"fields other than those of night_overrides ({name} is set there to "
                f"{self.night_overrides.get(name)!r})",
                repr(name),
            )
        object.__setattr__(
            self, "night_grid", {name: list(values) for name, values in self.night_grid.items()}
        )

    def check_settings(
        self, methods: Sequence[str] = (), rows: Sequence[tuple[str, str]] = ()
    ) -> None:
        """Build the configurations the study trains with (every arm's fine-tuning, for every
        seed and budget; the pretraining of ``methods``, on the pools too), so that a bad setting
        (``context=0``, ``night_crop=0``, a step budget of 0, a pool's ``patience=0``...) is
        refused before anything is written, not when its row trains; and refuse what
        :meth:`check_pretrained_levels` refuses for ``rows`` (``(method, arm)`` pairs).

        Raises:
            InputError: Naming the configuration field (``FinetuneConfig.context``...).
        """
        self.check_pretrained_levels(rows)
        if POOL_CEILING in methods:
            check(
                self.pools is not None,
                "method",
                f"{POOL_CEILING} only with pretraining pools (give the pool sizes and a pool "
                "source whose nights are labelled: without pools every labelled night outside "
                "the test subjects belongs to the fine-tuning pool the draws label and validate "
                "on)",
                POOL_CEILING,
            )
            self.pool_ceiling_config()
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
                            for point in self.night_grid_points:
                                self.finetune_config(method, seed, arm, budget, grid=point)

    def check_pretrained_levels(self, rows: Sequence[tuple[str, str]]) -> None:
        """Refuse ``pretrained_levels="temporal"`` for a sequence or night row of ``rows``
        (``(method, arm)`` pairs) whose pretraining has no temporal level (not one of
        :data:`TEMPORAL_LEVEL_METHODS`), before its cells train.

        Raises:
            InputError: Naming ``FinetuneConfig.pretrained_levels`` and the row.
        """
        for method, arm in rows:
            if arm in ("sequence", "night") and method in pretrained_methods():
                levels = self.finetune_config(method, self.seed, arm).pretrained_levels
                check(
                    levels != "temporal" or method in TEMPORAL_LEVEL_METHODS,
                    "FinetuneConfig.pretrained_levels",
                    f"'all' or 'window' for the row {method}:{arm} (its pretraining has no "
                    "temporal level; 'temporal' keeps that of "
                    f"{', '.join(TEMPORAL_LEVEL_METHODS)})",
                    repr(levels),
                )

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
        after studies were made, ``night_overrides``, ``night_grid`` and those of the unlabelled
        axis, only when set, and the front-end only when not ``linear``: those studies stay
        valid)."""
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
        defaults["night_grid"] = {}
        defaults["channels"] = None
        for key, default in defaults.items():
            if values[key] != default:
                chosen[key] = str(values[key]) if isinstance(values[key], Path) else values[key]
        if self.frontend_name != "linear":  # every study before the setting used ``linear``
            chosen["frontend"] = self.frontend_name
        return dict(json.loads(json.dumps(chosen)))  # the form study.json holds

    @property
    def night_grid_points(self) -> list[dict[str, Any]]:
        """The combinations of :attr:`night_grid`'s values, the first field's slowest (``[{}]``
        without a grid): the night arm's fields each night cell tries."""
        names = list(self.night_grid)
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(self.night_grid[name] for name in names))
        ]

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
            **pretrain_fields_for(method, self.pretrain_overrides),
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

    def pool_ceiling_config(self) -> FinetuneConfig:
        """The supervised pretraining of the oracle ceiling (:data:`POOL_CEILING`) on a pool's
        labelled windows: the encoder (preset, shape, front-end) and every training setting of
        the pools' other pretrainings (batch, learning rate, schedule, step cap, held-out
        evaluations every ``eval_every_steps`` and ``patience``: :meth:`pretrain_config` of
        ``part`` on a pool, the objectives on single windows' settings), and the study's
        fine-tuning loss (class weights, label smoothing, augmentations) as a from-scratch
        encoder trains with it (a position embedding, no layer-wise decay, no linear-probe
        phase). ``patience_start`` is the pretext error's (a held-out kappa is maximised), so
        it is dropped."""
        pretraining = self.pretrain_config("part", pool=True)
        schedule = {
            item.name: getattr(pretraining, item.name)
            for item in fields(TrainConfig)
            if item.name != "patience_start"
        }
        protocol = self.finetune_config(POOL_CEILING, self.seed)
        return protocol.replace(
            **schedule,
            encoder=pretraining.encoder,
            encoder_overrides=pretraining.encoder_overrides,
            patch_size=pretraining.patch_size,
            channel_mode=pretraining.channel_mode,
            channel_options=pretraining.channel_options,
            pos_embed=True,
            pos_mask_ratio=0.0,
            layer_decay=None,
            decay_random_window=False,
            patience_start=None,
            probe_steps=0,
        )

    def finetune_config(
        self,
        method: str,
        seed: int,
        arm: str = "window",
        budget: LabelBudget | int | str | None = None,
        grid: Mapping[str, Any] | None = None,
    ) -> FinetuneConfig:
        """The fine-tuning configuration of ``method``'s ``arm`` on the label ``budget``:
        the ``eeg_sleep`` preset and the scale's protocol for everyone (the sequence or night
        arm's changes on top, then what the arm changes at this budget, :func:`budget_settings`),
        then the study's overrides (every arm's, then the sequence or night arm's, then the
        night arm's ``grid`` point, one of :attr:`night_grid_points`); from-scratch
        baselines get no layer-wise decay, no linear-probe phase (``probe_steps``: there is no
        pretrained encoder to hold fixed), every level (``pretrained_levels="all"``: none is
        pretrained) and their own position-embedding choice; with ``decay_random_window`` they
        keep the run's ``layer_decay``, as every random window encoder does then."""
        scale = SCALES[self.scale]
        arm_overrides = {"sequence": self.sequence_overrides, "night": self.night_overrides}
        values = {
            **scale.finetune,
            **scale.arm(arm),
            **budget_settings(scale, arm, budget),
            **self.finetune_overrides,
            **arm_overrides.get(arm, {}),
            **(dict(grid or {}) if arm == "night" else {}),
        }
        values = self._with_frontend(values)
        if method in SCRATCH_METHODS:
            if not values.get("decay_random_window"):
                values["layer_decay"] = None
            values["pos_embed"] = SCRATCH_METHODS[method]
            values["probe_steps"] = 0  # no pretrained encoder to hold: the study's LP-FT a no-op
            values["pretrained_levels"] = "all"  # nor pretrained levels to choose from
        if method in STAGERS:  # the same protocol; the architecture is braindecode's
            values["layer_decay"] = None
            values["decay_random_window"] = False  # no window encoder, nor blocks to decay
            values["probe_steps"] = 0
            values["pretrained_levels"] = "all"
            values["stager"] = method
        return FinetuneConfig.preset(
            "eeg_sleep", seed=seed, device=self.device, progress=self.progress, **values
        )
