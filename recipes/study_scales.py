"""The protocol sizes of a sleep study (``--scale``), as typed, frozen settings.

A :class:`StudyScale` says what every method and arm of a study trains with at one size: ``demo``
fits a 2-core CPU and the 24-record sample cohort (a narrow ViT, budgets of 2/4/8 subjects);
``paper`` is the paper's protocol (12.9 M ViT, 1000 pretraining and 100 fine-tuning epochs, 200
test subjects, budgets 10/50/100/657, 5 seeds). The measurements behind each ``demo`` setting
(validation kappas on validation subjects, never test subjects) are in ``docs/results/scales.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from partnd._validation import check
from partnd.datasets.label_budget import LabelBudget
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.preprocessing.pipeline import PreprocessingConfig

__all__ = [
    "DEMO_ENCODER_OVERRIDES",
    "EEG_AUGMENTATIONS",
    "SCALES",
    "STUDY_FRONTENDS",
    "StudyScale",
    "budget_settings",
]

#: The EEG batch augmentations of every neural cell (``FinetuneConfig.augmentations``).
EEG_AUGMENTATIONS = ("time_shift", "amplitude_scale", "channel_dropout")

#: The demo scale's window ViT: ``vit_eeg_12m``'s shape narrowed to 128 wide, 4 blocks (0.87 M
#: parameters), so the demo fits 15 minutes on two cores (docs/results/scales.md).
DEMO_ENCODER_OVERRIDES: dict[str, Any] = {"embed_dim": 128, "depth": 4, "num_heads": 4}

_STORE = PreprocessingConfig()
_SPECTRAL_OPTIONS = {"max_frequency": _STORE.bandpass.h_freq / _STORE.sfreq}
#: How the window encoder of every learned method turns a 1 s patch into a token
#: (``StudyConfig.frontend``; :mod:`partnd.models.frontends`): encoder overrides added to the
#: scale's. ``spectral`` keeps the bins of the study store's pass band (0-30 Hz at 100 Hz), since
#: bins the band-pass emptied swamp the token (:class:`~partnd.models.SpectralPatchEmbed`);
#: ``spectral_std`` also centres and scales every log-power by running estimates, which removes
#: the common 1/f part that leaves raw log-power tokens nearly parallel; ``spectral_std_raw``
#: adds the waveform (a linear projection of the raw patch) to that token.
STUDY_FRONTENDS: dict[str, dict[str, Any]] = {
    "linear": {},
    "spectral": {"frontend": "spectral", "frontend_options": {**_SPECTRAL_OPTIONS}},
    "spectral_std": {
        "frontend": "spectral",
        "frontend_options": {**_SPECTRAL_OPTIONS, "standardize": True},
    },
    "spectral_std_raw": {
        "frontend": "spectral",
        "frontend_options": {**_SPECTRAL_OPTIONS, "standardize": True, "raw": True},
    },
    "conv": {"frontend": "conv"},
}

#: Windows per training crop of the demo's night arm (an hour), and per pretraining segment of
#: PART across windows, so that its temporal level is pretrained on the span the night
#: classifier trains on.
_DEMO_NIGHT_CROP = 120


def _read_only(values: Mapping[Any, Any], depth: int = 1) -> Mapping[Any, Any]:
    """``values`` as a read-only mapping, and its values too down to ``depth`` levels (the
    configuration values themselves, such as ``encoder_overrides``, stay as given)."""
    if depth > 1:
        values = {key: _read_only(value, depth - 1) for key, value in values.items()}
    return MappingProxyType(dict(values))


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class StudyScale:
    """One protocol size of a sleep study.

    Attributes:
        normalize: How windows are normalised for every method (``"window"``, ``"record"``).
        frontend: The window encoder's patch tokenizer (one of :data:`STUDY_FRONTENDS`).
        n_test_subjects: Test subjects (a count, or a fraction of the cohort's subjects).
        budgets: Label budgets (subjects, or ``"wK"`` windows per stage), scarcest first.
        val_subjects: Validation subjects drawn with every label budget.
        seeds: Seeds of the sample-efficiency cells (one draw of labels each).
        held_out_subjects: Subjects whose nights are held out of every pretraining pool.
        pretrain: :class:`PretrainConfig` fields of every method's pretraining.
        pretrain_methods: Per method, :class:`PretrainConfig` fields added to ``pretrain``.
        pool_pretrain: What a pool's pretraining changes (a step cap, held-out evaluations every
            ``eval_every_steps``, ``patience``).
        finetune: :class:`FinetuneConfig` fields of the single-window protocol of every method.
        sequence: What the sequence arm changes.
        night: What the night arm changes.
        by_budget: Per arm and number of labelled subjects, what the arm changes
            (:func:`budget_settings`).
    """

    normalize: str
    frontend: str
    n_test_subjects: int | float
    budgets: tuple[int | str, ...]
    val_subjects: int
    seeds: tuple[int, ...]
    held_out_subjects: int
    pretrain: Mapping[str, Any] = field(default_factory=_empty)
    pretrain_methods: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    pool_pretrain: Mapping[str, Any] = field(default_factory=_empty)
    finetune: Mapping[str, Any] = field(default_factory=_empty)
    sequence: Mapping[str, Any] = field(default_factory=_empty)
    night: Mapping[str, Any] = field(default_factory=_empty)
    by_budget: Mapping[str, Mapping[int, Mapping[str, Any]]] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        for name in ("pretrain", "pool_pretrain", "finetune", "sequence", "night"):
            object.__setattr__(self, name, _read_only(getattr(self, name)))
        object.__setattr__(self, "pretrain_methods", _read_only(self.pretrain_methods, 2))
        object.__setattr__(self, "by_budget", _read_only(self.by_budget, 3))
        object.__setattr__(self, "budgets", tuple(self.budgets))
        object.__setattr__(self, "seeds", tuple(self.seeds))
        check(
            self.frontend in STUDY_FRONTENDS,
            "StudyScale.frontend",
            f"one of {sorted(STUDY_FRONTENDS)}",
            repr(self.frontend),
        )
        for name in ("pretrain", "pool_pretrain"):
            PretrainConfig.check_field_names(dict(getattr(self, name)), f"StudyScale.{name}")
        for method, values in self.pretrain_methods.items():
            PretrainConfig.check_field_names(dict(values), f"StudyScale.pretrain_methods[{method}]")
        for name in ("finetune", "sequence", "night"):
            FinetuneConfig.check_field_names(dict(getattr(self, name)), f"StudyScale.{name}")
        for arm, table in self.by_budget.items():
            for subjects, values in table.items():
                FinetuneConfig.check_field_names(
                    dict(values), f"StudyScale.by_budget[{arm}][{subjects}]"
                )

    def arm(self, arm: str) -> Mapping[str, Any]:
        """What ``arm`` changes on top of :attr:`finetune` (nothing for the window arm)."""
        return {"sequence": self.sequence, "night": self.night}.get(arm, _empty())

    def replace(self, **changes: Any) -> StudyScale:
        """A copy with ``changes`` (a study's own budgets, seeds or held-out subjects)."""
        return dataclasses.replace(self, **changes)


#: The scales by name; the evidence behind each ``demo`` setting is in docs/results/scales.md.
SCALES: dict[str, StudyScale] = {
    "demo": StudyScale(
        normalize="record",
        frontend="spectral_std",
        n_test_subjects=0.34,
        budgets=(2, 4, 8),
        val_subjects=2,
        seeds=(0, 1, 2),
        held_out_subjects=2,
        pool_pretrain={
            "epochs": 1,
            "min_steps": 2000,
            "warmup_steps": 50,
            "eval_every_steps": 100,
            "patience": 4,
            "patience_start": 0.98,
        },
        pretrain={
            "encoder_overrides": DEMO_ENCODER_OVERRIDES,
            "epochs": 8,
            "warmup_epochs": 1.0,
            "batch_size": 64,
            "lr": 5e-4,
            "lr_reference_batch": None,
            "num_pairs": 512,
            "ema_decay": None,
            "precision": "auto",
            "log_every_steps": 5,
        },
        pretrain_methods={
            "part_windows": {
                "segment_windows": _DEMO_NIGHT_CROP,
                "batch_size": 8,
                "num_pairs": 256,
                "epochs": 1,
                "min_steps": 200,
                "warmup_epochs": 0.0,
                "warmup_steps": 50,
                "lr": 1e-3,
                "log_every_steps": 25,
            }
        },
        finetune={
            "encoder_overrides": DEMO_ENCODER_OVERRIDES,
            "epochs": 1,
            "min_steps": 800,
            "warmup_epochs": 0.0,
            "warmup_steps": 40,
            "eval_every_steps": 40,
            "batch_size": 64,
            "lr": 5e-4,
            "lr_reference_batch": None,
            "class_weights": "balanced",
            "label_smoothing": 0.1,
            "augmentations": EEG_AUGMENTATIONS,
            "log_every_steps": 20,
            "ema_decay": 0.99,
        },
        sequence={
            "context": 21,
            "batch_size": 8,
            "min_steps": 800,
            "warmup_steps": 20,
            "eval_every_steps": 50,
        },
        night={
            "context": "night",
            "night_crop": _DEMO_NIGHT_CROP,
            "batch_size": 2,
            "min_steps": 800,
            "warmup_steps": 20,
            "eval_every_steps": 50,
        },
        by_budget={
            "window": {4: {"min_steps": 2400}, 8: {"min_steps": 2400}},
            "night": {
                2: {"min_steps": 400},
                4: {"min_steps": 1200, "ema_decay": 0.995},
                8: {"min_steps": 1600, "ema_decay": 0.995},
            },
        },
    ),
    "paper": StudyScale(
        normalize="window",
        frontend="linear",
        n_test_subjects=200,
        budgets=(10, 50, 100, 657),
        val_subjects=10,
        seeds=(0, 1, 2, 3, 4),
        held_out_subjects=20,
        pool_pretrain={"eval_every_steps": 2000, "patience": 5, "patience_start": 0.98},
        finetune={
            "class_weights": "balanced",
            "augmentations": EEG_AUGMENTATIONS,
            "eval_every_steps": 200,
        },
        sequence={"context": 21, "batch_size": 32, "lr_reference_batch": None, "lr": 5e-4},
        night={
            "context": "night",
            "night_crop": 240,
            "batch_size": 8,
            "lr_reference_batch": None,
            "lr": 5e-4,
        },
    ),
}


def budget_settings(
    scale: StudyScale, arm: str, budget: LabelBudget | int | str | None
) -> dict[str, Any]:
    """What ``arm`` changes when trained on ``budget`` labelled subjects: the entry of the
    scale's ``by_budget[arm]`` table at the largest budget not above ``budget`` (none below the
    table's smallest, without a budget, or for a budget of windows per stage, which is scarcer
    than any number of subjects).

    Args:
        scale: A scale (:data:`SCALES`).
        arm: The arm.
        budget: A label budget (``2``, ``"w20"``, :class:`LabelBudget`), or ``None``.

    Returns:
        :class:`FinetuneConfig` field values.
    """
    table = scale.by_budget.get(arm, {})
    subjects = None if budget is None else LabelBudget.parse(budget, "budgets").subjects
    reached = [key for key in table if subjects is not None and key <= subjects]
    return dict(table[max(reached)]) if reached else {}
