"""Image recipes: CIFAR-100 and ImageNet-1k, every method and ablation of the paper, stage by stage.

Protocol (DESIGN.md §2-§4): pretrain each method on the training images (CIFAR-100: ViT-S with
4 x 4 patches on 32 x 32, preset ``images_cifar``; ImageNet-1k: ViT-B/16 on 224 x 224, preset
``images_imagenet``), fine-tune each encoder with DeiT's recipe (:mod:`partnd.recipes.image_finetune`)
on the same training images, and report top-1 on the test (validation) split; the from-scratch
baselines are trained with the same DeiT recipe, with and without position embedding.

One command per stage, and one for the whole chain (each skips what is finished)::

    python -m partnd.recipes.images pretrain --dataset cifar100 --root ~/data/cifar --out runs/c100
    python -m partnd.recipes.images finetune --dataset cifar100 --root ~/data/cifar --out runs/c100
    python -m partnd.recipes.images report   --dataset cifar100 --root ~/data/cifar --out runs/c100
    python -m partnd.recipes.images all --dataset cifar100 --root ~/data/cifar --out runs/c100 \\
        --variants main heads pairs scale
    python -m partnd.recipes.images all --dataset imagenet --root ~/data/imagenet --out runs/in1k \\
        --scale-boxes

A study lives in one output directory::

    OUT/
      study.json                        the settings (a later command must agree with them)
      pretrain/<variant>/run/           the engine's pretraining run (encoder.pt)
      pretrain/<variant>/result.json    written last: the pretraining is finished
      finetune/<variant>/run/           the DeiT fine-tuning run (classifier.pt, metrics.json)
      finetune/<variant>/result.json    written last: the variant is finished
      results.{csv,md,json}, ablation_{sampling,heads,pairs,scale}.{csv,md,json}, ablation_pairs.png

A finished variant (its ``result.json``) is never recomputed, an interrupted run resumes from its
last checkpoint, and a directory made with other settings is refused (``--overwrite`` starts
over). ``--variants`` takes variant names or groups:

| group | variants | table |
|---|---|---|
| ``main`` | ``part``, ``part_grid``, ``mae``, ``mp3``, ``droppos``, ``supervised``, ``supervised_no_pos`` | ``results`` |
| ``sampling`` | ``part``, ``part_grid`` | ``ablation_sampling`` |
| ``heads`` | ``part_head-mlp``, ``part_head-pairwise_mlp``, ``part`` (cross-attention) | ``ablation_heads`` |
| ``pairs`` | ``part_pairs-<n>`` for the scale's sweep (``part`` at its own number) | ``ablation_pairs`` (+ plot) |
| ``scale`` | ``part_boxes-fixed``, ``part_boxes-scale`` (Δw, Δh targets) | ``ablation_scale`` |

A variant whose pretraining configuration equals ``part``'s is ``part`` (computed once).
``--scale toy`` is a smoke-test size (a 2-block encoder, one epoch of each); ``--scale paper`` is
the paper's protocol (1000 / 200 pretraining and 400 / 300 fine-tuning epochs). ``--set``,
``--epochs`` and ``--subset`` override either.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from partnd._validation import check
from partnd.cli.errors import OptionNames
from partnd.cli.options import add_switch
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.models.serialization import load_encoder
from partnd.objectives import list_objectives
from partnd.pretraining import pretrain
from partnd.recipes.baselines import SCRATCH_METHODS
from partnd.recipes.image_data import (
    class_names,
    deit_train_transform,
    eval_transform,
    load_image_dataset,
    pretrain_transform,
    subset,
)
from partnd.recipes.image_finetune import DEIT_OPTIMISATION, DeiTSettings, deit_finetune
from partnd.recipes.image_report import (
    VariantResult,
    heads_table,
    pairs_table,
    plot_pairs,
    results_table,
    sampling_table,
    scale_table,
)
from partnd.recipes.report_files import write_table
from partnd.recipes.study_directory import (
    RECIPE_OPTIONS,
    add_run_arguments,
    claim_study_directory,
    released_on_failure,
    run_recipe,
)

__all__ = [
    "DATASETS",
    "GROUPS",
    "IMAGE_OPTIONS",
    "PAPER_ORDER",
    "SCALES",
    "SCALE_BOXES",
    "SCRATCH_METHODS",
    "STAGES",
    "ImageStudy",
    "ImageStudyConfig",
    "Variant",
    "build_parser",
    "main",
    "report",
    "run",
    "study_from_args",
]

STAGES = ("pretrain", "finetune", "report", "all")

#: The recipe's options for the configuration fields its messages name: ``--set FIELD=VALUE``
#: assigns both configurations' fields, ``--pretrain-set``/``--finetune-set`` one's.
IMAGE_OPTIONS = OptionNames(
    RECIPE_OPTIONS.options,
    config_assignments={
        "PretrainConfig": "--set/--pretrain-set",
        "FinetuneConfig": "--set/--finetune-set",
    },
)


#: The order of the paper's results tables (after the from-scratch baselines); other registered
#: objectives follow.
PAPER_ORDER = ("mae", "mp3", "droppos", "part_grid", "part")

#: The scale/aspect extension: box sides in [P/2, 2P], Δw and Δh predicted too.
SCALE_BOXES: dict[str, Any] = {"scale_range": (0.5, 2.0), "scale_targets": True}

#: ImageNet-1k fine-tuning (the appendix: 300 epochs at lr 5e-4, DeiT's protocol) for ViT-B/16.
_IMAGENET_FINETUNE: dict[str, Any] = {
    "encoder": "vit_base",
    "patch_size": 16,
    "pos_embed": True,
    "epochs": 300,
    "batch_size": 256,
    "layer_decay": 0.75,
    "precision": "auto",
}

#: Per dataset: the pretraining preset, the input side, and the fine-tuning configuration.
DATASETS: dict[str, dict[str, Any]] = {
    "cifar100": {"preset": "images_cifar", "image_size": 32},
    "imagenet": {"preset": "images_imagenet", "image_size": 224},
}

_TOY_ENCODER: dict[str, Any] = {"encoder": "vit_test", "encoder_overrides": {}}
_TOY_TRAINING: dict[str, Any] = {
    **_TOY_ENCODER,
    "epochs": 1,
    "batch_size": 32,
    "lr": 1e-3,
    "lr_reference_batch": None,
    "warmup_epochs": 0.0,
    "precision": "fp32",
    "log_every_steps": 5,
}

#: Per-scale settings: ``toy`` checks the pipeline on a CPU in seconds (a 2-block, 32-wide
#: encoder, one epoch, 128 pairs); ``paper`` is the presets' protocol and the paper's pairs sweep.
SCALES: dict[str, dict[str, Any]] = {
    "toy": {
        "pretrain": {**_TOY_TRAINING, "num_patches": None, "num_pairs": 128, "ema_decay": None},
        "finetune": {**_TOY_TRAINING, "eval_batch_size": 64},
        "pairs": (64, 128, 256),
    },
    "paper": {"pretrain": {}, "finetune": {}, "pairs": (512, 1024, 2048, 4096)},
}


@dataclass(frozen=True)
class Variant:
    """One row of a table: a pretraining (or none) followed by DeiT fine-tuning.

    Attributes:
        name: Directory and row name (``part``, ``part_head-mlp``, ``supervised``...).
        method: An objective of :func:`partnd.objectives.list_objectives`, or one of
            :data:`SCRATCH_METHODS`.
        pretrain: :class:`PretrainConfig` fields of this variant (over the study's).
    """

    name: str
    method: str
    pretrain: dict[str, Any] = field(default_factory=dict)

    @property
    def pretrained(self) -> bool:
        """Whether the variant has a pretraining stage."""
        return self.method not in SCRATCH_METHODS


#: The groups of ``--variants`` and the table each one feeds.
GROUPS: dict[str, str] = {
    "main": "results",
    "sampling": "ablation_sampling",
    "heads": "ablation_heads",
    "pairs": "ablation_pairs",
    "scale": "ablation_scale",
}


@dataclass(frozen=True)
class ImageStudyConfig:
    """Settings of an image study (saved as ``study.json``).

    Attributes:
        out: Study directory.
        dataset: ``"cifar100"`` or ``"imagenet"`` (see :data:`DATASETS`).
        root: The local dataset root (:func:`partnd.recipes.image_data.load_image_dataset`).
        scale: ``"toy"`` or ``"paper"`` (see :data:`SCALES`).
        image_size: Input side (default: the dataset's, 32 or 224).
        subset: Training images used (a seeded subset; ``None``: all), for pretraining and
            fine-tuning alike.
        test_subset: Test images used (``None``: all).
        scale_boxes: PART's own boxes use the scale/aspect extension (:data:`SCALE_BOXES`).
        seed: Subset and training seed.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        progress: Show progress bars.
        verify_checksums: Check the CIFAR-100 files against the published MD5 sums (turn off
            only for a copy made by yourself in the same format).
        pretrain_overrides: :class:`PretrainConfig` fields replacing the scale's, every variant.
        finetune_overrides: :class:`FinetuneConfig` fields replacing the scale's, every variant.
    """

    out: Path
    dataset: str
    root: Path
    scale: str = "toy"
    image_size: int | None = None
    subset: int | None = None
    test_subset: int | None = None
    scale_boxes: bool = False
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    verify_checksums: bool = True
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    finetune_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(self.dataset in DATASETS, "--dataset", f"one of {sorted(DATASETS)}", self.dataset)
        check(self.scale in SCALES, "--scale", f"one of {sorted(SCALES)}", repr(self.scale))
        for name in ("image_size", "subset", "test_subset"):
            value = getattr(self, name)
            check(value is None or value >= 1, f"--{name.replace('_', '-')}", "a size >= 1", value)
        check(self.seed >= 0, "--seed", "an int >= 0", self.seed)
        PretrainConfig.check_field_names(self.pretrain_overrides, "pretrain_overrides")
        FinetuneConfig.check_field_names(self.finetune_overrides, "finetune_overrides")

    @property
    def size(self) -> int:
        """The input side S."""
        return int(self.image_size or DATASETS[self.dataset]["image_size"])

    def check_settings(self) -> None:
        """Build every variant's pretraining and fine-tuning configuration, so that a bad
        ``--set``/``--epochs``/``--seed`` or an ``--image-size`` the patches do not tile is
        refused before the study directory is written, not when the variant trains.

        Raises:
            InputError: Naming the configuration field or ``--image-size``.
        """
        for variant in self.variants().values():
            configs: list[PretrainConfig | FinetuneConfig] = [self.finetune_config(variant)]
            if variant.pretrained:
                configs.append(self.pretrain_config(variant))
            for config in configs:
                patch = config.patch_size
                sides = (patch, patch) if isinstance(patch, int) else tuple(patch)
                check(
                    all(self.size % side == 0 for side in sides),
                    "--image-size",
                    f"a multiple of the patch size {patch} (the images are tiled into patches)",
                    self.size,
                )

    @property
    def settings(self) -> dict[str, Any]:
        """What must agree between commands run on the same study directory."""
        keep = (
            "dataset",
            "root",
            "scale",
            "image_size",
            "subset",
            "test_subset",
            "scale_boxes",
            "seed",
            "pretrain_overrides",
            "finetune_overrides",
        )
        values = asdict(self)
        values["root"] = str(Path(values["root"]).expanduser().resolve())
        values["image_size"] = self.size
        return dict(json.loads(json.dumps({key: values[key] for key in keep})))

    def variants(self) -> dict[str, Variant]:
        """Every variant this study can run, by name (see the module docstring)."""
        part_boxes = dict(SCALE_BOXES) if self.scale_boxes else {}
        variants = [
            Variant(method, method, part_boxes if method == "part" else {})
            for method in [*list_objectives(data="items"), *SCRATCH_METHODS]
        ]
        variants += [
            Variant(f"part_head-{head}", "part", {**part_boxes, "head": head})
            for head in ("mlp", "pairwise_mlp")
        ]
        variants += [
            Variant(f"part_pairs-{pairs}", "part", {**part_boxes, "num_pairs": pairs})
            for pairs in SCALES[self.scale]["pairs"]
        ]
        variants += [
            Variant("part_boxes-fixed", "part", {"scale_range": None, "scale_targets": False}),
            Variant("part_boxes-scale", "part", dict(SCALE_BOXES)),
        ]
        return {variant.name: variant for variant in variants}

    def groups(self) -> dict[str, list[str]]:
        """The variant names of every group, ``part`` standing in for its duplicates."""
        names = self.variants()
        main = [*SCRATCH_METHODS, *PAPER_ORDER]
        main += [method for method in list_objectives(data="items") if method not in main]
        members = {
            "main": main,
            "sampling": ["part", "part_grid"],
            "heads": ["part_head-mlp", "part_head-pairwise_mlp", "part"],
            "pairs": [name for name in names if name.startswith("part_pairs-")],
            "scale": ["part_boxes-fixed", "part_boxes-scale"],
        }
        return {
            group: list(dict.fromkeys(self.canonical(name) for name in chosen))
            for group, chosen in members.items()
        }

    def canonical(self, name: str) -> str:
        """``"part"`` for a variant whose pretraining configuration equals ``part``'s (so it runs
        once), else ``name``."""
        variant = self.variants()[name]
        if variant.method != "part":  # from-scratch variants have no pretraining configuration
            return name
        same = self.pretrain_config(variant) == self.pretrain_config(self.variants()["part"])
        return "part" if same else name

    def pretrain_config(self, variant: Variant) -> PretrainConfig:
        """The pretraining configuration of ``variant``: the dataset's preset, the scale's
        settings, the variant's fields, then the user's overrides."""
        values = {**SCALES[self.scale]["pretrain"], **variant.pretrain, **self.pretrain_overrides}
        return PretrainConfig.preset(
            DATASETS[self.dataset]["preset"],
            method=variant.method,
            seed=self.seed,
            device=self.device,
            progress=self.progress,
            **values,
        )

    def finetune_config(self, variant: Variant) -> FinetuneConfig:
        """The DeiT fine-tuning configuration of ``variant``: the dataset's fine-tuning settings,
        DeiT's optimisation, the scale's settings and the user's overrides; from-scratch
        baselines get no layer-wise decay and their own position-embedding choice."""
        values = {**DEIT_OPTIMISATION, **SCALES[self.scale]["finetune"], **self.finetune_overrides}
        if not variant.pretrained:
            values["layer_decay"] = None
            values["pos_embed"] = SCRATCH_METHODS[variant.method]
        common = {"seed": self.seed, "device": self.device, "progress": self.progress}
        if self.dataset == "cifar100":
            return FinetuneConfig.preset("images_cifar", **common, **values)
        return FinetuneConfig(**{**_IMAGENET_FINETUNE, **common, **values})


class ImageStudy:
    """Runs the stages of an image study in ``config.out`` (see the module docstring).

    Args:
        config: The study's settings (checked, with :meth:`ImageStudyConfig.check_settings`,
            before the directory is claimed).
        overwrite: Start the directory over (only a study directory is ever cleared).
        read_data: Read both splits before the directory is claimed (the stages that train).
    """

    def __init__(
        self, config: ImageStudyConfig, overwrite: bool = False, read_data: bool = False
    ) -> None:
        self.config = config
        self.out = config.out
        config.check_settings()
        if read_data:  # a bad --root, --subset or --test-subset is refused before the claim
            _ = self.class_names
        self._claim(overwrite)

    def _claim(self, overwrite: bool) -> None:
        claim_study_directory(self.out, self.config.settings, overwrite)

    def resolve(self, names: Sequence[str]) -> list[str]:
        """Variant names from ``--variants`` (names and groups), ``part`` for its duplicates, in
        order and without repeats."""
        groups = self.config.groups()
        known = sorted({*self.config.variants(), *groups})
        unknown = sorted(set(names) - set(known))
        check(not unknown, "--variants", f"variants or groups from {known}", ", ".join(unknown))
        chosen: list[str] = []
        for name in names:
            chosen += groups[name] if name in groups else [self.config.canonical(name)]
        return list(dict.fromkeys(chosen))

    def _dataset(self, train: bool, transform: Any, size: int | None) -> Dataset[Any]:
        data = load_image_dataset(
            self.config.dataset,
            self.config.root,
            train=train,
            transform=transform,
            verify_checksums=self.config.verify_checksums,
        )
        total = len(data)
        check(  # more would silently be all of them, recorded as the larger number
            size is None or size <= total,
            "--subset" if train else "--test-subset",
            f"at most the {total} images of the {'training' if train else 'test'} split",
            size,
        )
        return subset(data, size, self.config.seed)

    @cached_property
    def pretrain_set(self) -> Dataset[Any]:
        """Training images with MAE's pretraining augmentation (labels are ignored)."""
        return self._dataset(True, pretrain_transform(self.config.size), self.config.subset)

    @cached_property
    def train_set(self) -> Dataset[Any]:
        """Training images with DeiT's augmentation (the same images as :attr:`pretrain_set`)."""
        transform = deit_train_transform(self.config.size, **self._deit_transform_options())
        return self._dataset(True, transform, self.config.subset)

    @cached_property
    def test_set(self) -> Dataset[Any]:
        """Test (validation) images with DeiT's evaluation transform."""
        transform = eval_transform(self.config.size, self.deit.eval_crop_ratio)
        return self._dataset(False, transform, self.config.test_subset)

    @property
    def deit(self) -> DeiTSettings:
        """DeiT's augmentation and regularisation (the defaults: DeiT's)."""
        return DeiTSettings()

    def _deit_transform_options(self) -> dict[str, Any]:
        deit = self.deit
        return {"crop": deit.crop, "rand_augment": deit.rand_augment, "reprob": deit.reprob}

    @property
    def class_names(self) -> list[str]:
        """The dataset's class names (the training and test splits must have the same)."""
        names = class_names(self.train_set)
        check(
            class_names(self.test_set) == names,
            "--root",
            "the same classes in the training and test splits",
            f"{len(names)} training and {len(class_names(self.test_set))} test classes",
        )
        return names

    def pretrain_dir(self, name: str) -> Path:
        """Directory of a variant's pretraining."""
        return self.out / "pretrain" / name

    def finetune_dir(self, name: str) -> Path:
        """Directory of a variant's fine-tuning."""
        return self.out / "finetune" / name

    def pretrained(self, name: str) -> bool:
        """Whether the variant's pretraining has finished."""
        return RunDir(self.pretrain_dir(name)).finished()

    def finished(self, name: str) -> bool:
        """Whether the variant has finished (fine-tuned and tested)."""
        return RunDir(self.finetune_dir(name)).finished()

    def run_pretraining(self, name: str) -> Path:
        """Pretrain a variant unless done (an interrupted run resumes); writes ``result.json``
        (the configuration, the last epoch's pretext record, the head's size) last.

        Returns:
            The pretraining run directory (holding ``encoder.pt``).
        """
        variant = self.config.variants()[name]
        check(variant.pretrained, "variant", "a variant with a pretraining stage", name)
        run_dir = self.pretrain_dir(name) / "run"
        if self.pretrained(name):
            return run_dir
        if RunDir(run_dir).resumable:  # continue to its end
            result = pretrain(self.pretrain_set, out_dir=run_dir, resume=True, max_steps=None)
        else:
            config = self.config.pretrain_config(variant)
            result = pretrain(
                self.pretrain_set, out_dir=run_dir, config=config, overwrite=run_dir.exists()
            )
        epochs = [record for record in result.history if record.get("phase") == "epoch"]
        head = getattr(result.model, "head", None)
        RunDir(self.pretrain_dir(name)).write_result(
            {
                "variant": name,
                "method": variant.method,
                "config": result.config.to_dict(),
                "epochs": int(epochs[-1]["epoch"]) + 1 if epochs else 0,
                "pretext": epochs[-1] if epochs else {},
                "pos_embed": result.encoder.pos_embed is not None,
                "head_parameters": None
                if not isinstance(head, torch.nn.Module)
                else sum(parameter.numel() for parameter in head.parameters()),
            }
        )
        return run_dir

    def run_finetuning(self, name: str) -> VariantResult:
        """Fine-tune a variant with DeiT's recipe and test it, unless done; writes
        ``result.json`` last. A pretrained variant's pretraining must have finished."""
        variant = self.config.variants()[name]
        if self.finished(name):
            return self.load(name)
        encoder = None
        if variant.pretrained:
            check(
                self.pretrained(name),
                "variant",
                f"a finished pretraining of {name!r} (run the pretrain stage first)",
                f"no {self.pretrain_dir(name) / 'result.json'}",
            )
            encoder = load_encoder(self.pretrain_dir(name) / "run")
        run_dir = self.finetune_dir(name) / "run"
        resume = RunDir(run_dir).resumable
        result = deit_finetune(
            encoder,
            self.train_set,
            self.test_set,
            num_classes=len(self.class_names),
            out_dir=run_dir,
            config=None if resume else self.config.finetune_config(variant),
            settings=self.deit,
            class_names=self.class_names,
            resume=resume,
            overwrite=not resume and run_dir.exists(),
            **({"max_steps": None} if resume else {}),
        )
        RunDir(self.finetune_dir(name)).write_result(
            {
                "variant": name,
                "method": variant.method,
                "metrics": result.metrics,
                "config": result.config.to_dict(),
                "deit": result.settings.to_dict(),
            }
        )
        return self.load(name)

    def load(self, name: str) -> VariantResult:
        """A finished variant's numbers."""
        variant = self.config.variants()[name]
        data = RunDir(self.finetune_dir(name)).read_result()
        metrics = data["metrics"]
        pretraining: dict[str, Any] = {}
        if variant.pretrained:
            pretraining = RunDir(self.pretrain_dir(name)).read_result()
        return VariantResult(
            name=name,
            method=variant.method,
            pretrain_epochs=int(pretraining.get("epochs", 0)),
            finetune_epochs=int(metrics["epochs"]),
            pos_embed=bool(pretraining.get("pos_embed", SCRATCH_METHODS.get(variant.method))),
            top1=float(metrics["top1"]),
            top5=None if "top5" not in metrics else float(metrics["top5"]),
            n_test=int(metrics["n"]),
            pretext=pretraining.get("pretext", {}),
            pretrain_config=pretraining.get("config"),
            head_parameters=pretraining.get("head_parameters"),
        )


def report(study: ImageStudy, requested: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Write every table whose variants are among ``requested`` (names and groups, as
    ``--variants``) and finished: ``results`` from every finished variant of the ``main`` group
    (requested or finished before), each ablation when all of its variants are requested; the
    pairs plot with the pairs table.

    Returns:
        The rows of every table written, by table name.
    """
    names = study.resolve(requested)
    for name in names:
        check(
            study.finished(name),
            "--variants",
            f"variants whose fine-tuning finished (run the finetune stage for {name!r})",
            name,
        )
    results = {name: study.load(name) for name in names}
    groups = study.config.groups()
    dataset = study.config.dataset
    tables: dict[str, list[dict[str, Any]]] = {}
    # every finished variant of the main group: a table of only those requested would replace
    # the study's results by fewer rows
    main_rows = [
        results[name] if name in results else study.load(name)
        for name in groups["main"]
        if name in results or study.finished(name)
    ]
    if main_rows:
        tables["results"] = results_table(main_rows, dataset)
    builders = {
        "sampling": lambda rows: sampling_table(rows, dataset),
        "heads": heads_table,
        "pairs": pairs_table,
        "scale": lambda rows: scale_table(rows, dataset),
    }
    for group, build in builders.items():
        if all(name in results for name in groups[group]):
            tables[GROUPS[group]] = build([results[name] for name in groups[group]])
    for table, rows in tables.items():
        write_table(rows, study.out, table)
    if "ablation_pairs" in tables:
        plot_pairs(
            tables["ablation_pairs"],
            study.out / "ablation_pairs.png",
            f"#pairs ablation ({dataset}, {study.config.scale} scale)",
        )
    return tables


def run(study: ImageStudy, stage: str, requested: Sequence[str]) -> None:
    """Run one stage (or ``all``) of the recipe for the ``requested`` variants and groups."""
    check(stage in STAGES, "stage", f"one of {STAGES}", stage)
    names = study.resolve(requested)
    variants = study.config.variants()
    if stage in ("pretrain", "all"):
        for name in names:
            if variants[name].pretrained:
                study.run_pretraining(name)
    if stage in ("finetune", "all"):
        for name in names:
            study.run_finetuning(name)
    if stage in ("report", "all"):
        for table in report(study, requested):
            print(f"## {table}\n\n{(study.out / f'{table}.md').read_text()}")
        if study.config.scale == "toy":
            print(
                "Note: toy scale (a tiny encoder, one epoch): these numbers check the pipeline, "
                "they do not rank the methods."
            )


def _assignments(items: Sequence[str], argument: str) -> dict[str, str]:
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        check(bool(sep) and bool(key.strip()), argument, "FIELD=VALUE", repr(item))
        values[key.strip()] = text
    return values


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(pretrain, finetune)`` overrides from ``--set`` (each field to the configurations that
    have it), ``--pretrain-set``, ``--finetune-set`` and the epoch options."""
    pretrain_fields = set(PretrainConfig.field_names())
    finetune_fields = set(FinetuneConfig.field_names())
    both = _assignments(args.set, "--set")
    unknown = sorted(set(both) - pretrain_fields - finetune_fields)
    check(not unknown, "--set", "PretrainConfig or FinetuneConfig fields", ", ".join(unknown))
    texts = (
        {k: v for k, v in both.items() if k in pretrain_fields}
        | _assignments(args.pretrain_set, "--pretrain-set"),
        {k: v for k, v in both.items() if k in finetune_fields}
        | _assignments(args.finetune_set, "--finetune-set"),
    )
    parsed: list[dict[str, Any]] = []
    for config_cls, values, epochs, stage in (
        (PretrainConfig, texts[0], args.pretrain_epochs, "pretrain"),
        (FinetuneConfig, texts[1], args.finetune_epochs, "finetune"),
    ):
        config_cls.check_field_names(values, "--set")
        overrides = {k: config_cls.parse_value(k, v) for k, v in values.items()}
        chosen = epochs if epochs is not None else args.epochs
        for option, value in (("--epochs", args.epochs), (f"--{stage}-epochs", epochs)):
            check(value is None or value >= 1, option, "a number of epochs >= 1", value)
        if chosen is not None:
            overrides["epochs"] = chosen
        parsed.append(overrides)
    return parsed[0], parsed[1]


def build_parser() -> argparse.ArgumentParser:
    """The command line of the recipe."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.recipes.images",
        description="CIFAR-100 / ImageNet-1k: pretrain every method and ablation, fine-tune with "
        "DeiT's recipe, and write the paper's image tables.",
    )
    parser.add_argument("stage", nargs="?", default="all", choices=STAGES, help="stage to run")
    parser.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    parser.add_argument("--root", type=Path, required=True, help="local dataset root")
    parser.add_argument("--out", type=Path, required=True, help="study directory")
    parser.add_argument("--scale", choices=sorted(SCALES), default="toy", help="protocol size")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["main"],
        help=f"variants or groups ({' '.join(GROUPS)}; default main)",
    )
    parser.add_argument("--image-size", type=int, default=None, help="input side (32 / 224)")
    parser.add_argument("--subset", type=int, default=None, help="training images used")
    parser.add_argument("--test-subset", type=int, default=None, help="test images used")
    add_switch(
        parser,
        "--scale-boxes",
        default=False,
        help="PART boxes with sides in [P/2, 2P] and Δw, Δh targets",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="both configurations"
    )
    parser.add_argument("--pretrain-set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--finetune-set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--epochs", type=int, default=None, help="PT and FT epochs")
    parser.add_argument("--pretrain-epochs", type=int, default=None)
    parser.add_argument("--finetune-epochs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="subset and training seed")
    add_switch(
        parser,
        "--verify-checksums",
        default=True,
        help="check the CIFAR-100 files' published MD5 sums (off only for a copy of your own)",
    )
    add_run_arguments(parser)
    return parser


def study_from_args(args: argparse.Namespace) -> ImageStudy:
    """The study a parsed command line describes."""
    pretrain_overrides, finetune_overrides = _overrides(args)
    config = ImageStudyConfig(
        out=args.out,
        dataset=args.dataset,
        root=args.root,
        scale=args.scale,
        image_size=args.image_size,
        subset=args.subset,
        test_subset=args.test_subset,
        scale_boxes=args.scale_boxes,
        seed=args.seed,
        device=args.device,
        progress=args.progress,
        verify_checksums=args.verify_checksums,
        pretrain_overrides=pretrain_overrides,
        finetune_overrides=finetune_overrides,
    )
    return ImageStudy(config, overwrite=args.overwrite, read_data=args.stage != "report")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recipe from the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    with released_on_failure(args.out):  # a new --out is not left behind by a refused command
        run(study_from_args(args), args.stage, args.variants)
    return 0


if __name__ == "__main__":  # one line and an exit status instead of a traceback
    sys.exit(run_recipe("python -m partnd.recipes.images", main, IMAGE_OPTIONS))
