"""Sleep-staging recipe: PART pretraining, low-label fine-tuning and kappa on held-out subjects.

The recipe follows the paper's PhysioNet 2018 protocol (DESIGN.md §4-§5): preprocess the recordings
into a zarr store (6 EEG channels, 0.1-30 Hz, 100 Hz, 30 s windows), split by subject (held-out test
subjects, a pretraining pool of every other record including the unlabelled ``test/`` partition,
nested fine-tuning subsets), pretrain PART on the pool, fine-tune on a few labelled subjects, and
report Cohen's kappa, accuracy and F1 on the test subjects next to a supervised baseline trained
from scratch on the same subjects.

``python -m recipes.sleep_staging --out runs/demo`` runs it on the built-in PC18-format sample
cohort (generated on first use) at a CPU-sized ``demo`` scale; ``--src /data/physionet2018 --scale
paper`` runs the paper-scale protocol on a local copy of the challenge data.

Everything lands in the run directory: ``split.json``, ``pretrain/`` and ``finetune_<method>/``
engine runs (config, logs, TensorBoard, checkpoints), ``results.{csv,md,json}`` and the figures
``pretrain_loss.png``, ``finetune_validation.png``, ``confusion_matrices.png`` and
``hypnogram_<record>.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from partnd._validation import check
from partnd.datasets.pc18_cohort import ensure_sample_cohort
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.splits import SubjectSplit, make_subject_split
from partnd.datasets.store import SleepStore
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.finetuning import evaluate, finetune
from partnd.metrics import ClassificationReport
from partnd.pretraining import pretrain
from preprocessing.physionet2018 import preprocess_physionet2018
from recipes.sleep_report import (
    MethodResult,
    plot_confusion_matrices,
    plot_finetune_validation,
    plot_hypnogram,
    plot_pretrain_loss,
    write_results_table,
)

__all__ = ["SCALES", "RecipeConfig", "RecipeResult", "main", "run"]

Scale = Literal["demo", "paper"]

#: Per-scale settings. ``demo`` is sized for a 2-core CPU and the 24-record sample cohort (a
#: narrower 1D ViT, few epochs); ``paper`` is the protocol of the paper (12.9 M ViT, 1000
#: pretraining and 100 fine-tuning epochs, 200 test subjects, 10 fine-tuning subjects).
SCALES: dict[str, dict[str, Any]] = {
    "demo": {
        "n_test_subjects": 0.34,
        "finetune_subjects": 4,
        "val_subjects": 2,
        "pretrain": {
            "encoder_overrides": {"embed_dim": 192, "depth": 4, "num_heads": 4},
            "epochs": 10,
            "warmup_epochs": 1.0,
            "batch_size": 64,
            "lr": 5e-4,
            "lr_reference_batch": None,
            "num_pairs": 512,
            "ema_decay": None,
            "precision": "bf16",
            "log_every_steps": 5,
        },
        "finetune": {
            "encoder_overrides": {"embed_dim": 192, "depth": 4, "num_heads": 4},
            "epochs": 12,
            "warmup_epochs": 1.0,
            "batch_size": 64,
            "lr": 5e-4,
            "lr_reference_batch": None,
            "class_weights": "balanced",
            "log_every_steps": 5,
        },
    },
    "paper": {
        "n_test_subjects": 200,
        "finetune_subjects": 10,
        "val_subjects": 10,
        "pretrain": {},
        "finetune": {"class_weights": "balanced"},
    },
}

METHODS = ("part", "supervised")

#: What a recipe run writes first; ``--overwrite`` clears only directories holding one of them.
RUN_MARKERS = ("recipe.json", "split.json", "store.zarr", "pretrain", "results.md")


@dataclass(frozen=True)
class RecipeConfig:
    """Settings of one sleep-staging run.

    Attributes:
        out: Run directory.
        src: Local PhysioNet 2018 root (``training/``, ``test/``); ``None`` uses the built-in
            PC18-format sample cohort, generated on first use into ``cohort_dir``.
        store: Preprocessed store to use or create; default ``<out>/store.zarr``.
        cohort_dir: Where the sample cohort is cached (default ``$PARTND_CACHE`` or
            ``~/.cache/partnd``).
        scale: ``"demo"`` (CPU-sized) or ``"paper"`` (the paper's protocol), see :data:`SCALES`.
        methods: Methods to compare: ``"part"`` (pretrain + fine-tune) and ``"supervised"``
            (the same classifier trained from scratch on the same subjects).
        n_jobs: Preprocessing workers (MNE semantics).
        seed: Seed of the split, the fine-tuning subset and all training.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        progress: Show progress bars.
        pretrain_overrides: :class:`PretrainConfig` fields replacing the scale's.
        finetune_overrides: :class:`FinetuneConfig` fields replacing the scale's.
    """

    out: Path
    src: Path | None = None
    store: Path | None = None
    cohort_dir: Path | None = None
    scale: Scale = "demo"
    methods: tuple[str, ...] = METHODS
    n_jobs: int = 1
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    finetune_overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(self.scale in SCALES, "scale", f"one of {sorted(SCALES)}", repr(self.scale))
        unknown = sorted(set(self.methods) - set(METHODS))
        check(
            bool(self.methods) and not unknown,
            "methods",
            f"a non-empty subset of {METHODS}",
            repr(self.methods),
        )
        PretrainConfig.check_field_names(self.pretrain_overrides, "pretrain_overrides")
        FinetuneConfig.check_field_names(self.finetune_overrides, "finetune_overrides")

    @property
    def store_path(self) -> Path:
        """The preprocessed store of this run."""
        return self.store if self.store is not None else self.out / "store.zarr"

    def pretrain_config(self) -> PretrainConfig:
        """The resolved PART pretraining configuration."""
        values = {**SCALES[self.scale]["pretrain"], **self.pretrain_overrides}
        return PretrainConfig.preset(
            "eeg_sleep", seed=self.seed, device=self.device, progress=self.progress, **values
        )

    def finetune_config(self, method: str) -> FinetuneConfig:
        """The resolved fine-tuning configuration of ``method``.

        Both methods share the ``eeg_sleep`` fine-tuning preset and the scale's settings; the
        supervised baseline trains from scratch, so it gets no layer-wise learning-rate decay.
        """
        values = {**SCALES[self.scale]["finetune"], **self.finetune_overrides}
        if method == "supervised":
            values["layer_decay"] = None
        return FinetuneConfig.preset(
            "eeg_sleep", seed=self.seed, device=self.device, progress=self.progress, **values
        )


@dataclass
class RecipeResult:
    """Outcome of :func:`run`.

    Attributes:
        results: One entry per method, in the order run.
        split: The subject split used.
        run_dir: The run directory.
    """

    results: list[MethodResult]
    split: SubjectSplit
    run_dir: Path


def prepare_store(config: RecipeConfig) -> SleepStore:
    """Preprocess the source recordings into the run's store (resuming a partial one).

    Records that fail preprocessing (unreadable, flat or NaN channels...) are left out with a
    warning; their reasons are in the store's ``manifest.json``.

    Returns:
        The opened store.
    """
    src = config.src
    if src is None:
        src = ensure_sample_cohort(config.cohort_dir, progress=config.progress).root
    report = preprocess_physionet2018(
        src, config.store_path, n_jobs=config.n_jobs, progress=config.progress
    )
    print(report.summary())
    if report.failed:
        warnings.warn(
            f"{len(report.failed)} record(s) failed preprocessing and are left out: "
            f"{', '.join(report.failed[:10])}; reasons in {config.store_path / 'manifest.json'}",
            stacklevel=2,
        )
    return SleepStore(config.store_path)


def make_split(config: RecipeConfig, store: SleepStore) -> SubjectSplit:
    """Split the store by subject (saved as ``split.json``, reused when it exists)."""
    path = config.out / "split.json"
    if path.exists():
        return SubjectSplit.load(path)
    scale = SCALES[config.scale]
    split = make_subject_split(
        store,
        n_test_subjects=scale["n_test_subjects"],
        finetune_sizes=(scale["finetune_subjects"],),
        seed=config.seed,
    )
    split.save(path)
    return split


def validation_subjects(split: SubjectSplit, finetune_subjects: Sequence[str], n: int) -> list[str]:
    """Labelled non-test subjects outside the fine-tuning set, for epoch selection.

    Args:
        split: The subject split.
        finetune_subjects: Subjects used for fine-tuning.
        n: Number of validation subjects wanted.

    Returns:
        Up to ``n`` subjects, chosen deterministically from the split's seed.
    """
    rest = sorted(set(split.finetune_pool) - set(finetune_subjects))
    order = np.random.default_rng(split.seed).permutation(len(rest))
    return sorted(rest[i] for i in order[:n])


def _finetune_and_test(
    method: str,
    encoder: Any,
    config: RecipeConfig,
    train_set: InMemoryWindows,
    val_set: InMemoryWindows | None,
    test_set: InMemoryWindows,
    class_names: list[str],
) -> MethodResult:
    run = finetune(
        encoder,
        train_set,
        num_classes=len(class_names),
        val_dataset=val_set,
        out_dir=config.out / f"finetune_{method}",
        config=config.finetune_config(method),
        class_names=class_names,
        overwrite=True,
    )
    report: ClassificationReport = evaluate(
        run.model, test_set, class_names=class_names, device=config.device
    )
    predictions = _predict(run.model, test_set, config.device)
    (run.run_dir / "test_metrics.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return MethodResult(name=method, report=report, history=run.history, predictions=predictions)


def _predict(model: torch.nn.Module, dataset: InMemoryWindows, device: str) -> np.ndarray:
    target = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else "cpu")
    if device not in ("auto", "cpu"):
        target = torch.device(device)
    model = model.to(target).eval()
    outputs = []
    with torch.no_grad():
        for batch in torch.split(dataset.windows, 256):
            outputs.append(model(batch.to(target)).argmax(dim=-1).cpu())
    model.cpu()
    return torch.cat(outputs).numpy()


def run(config: RecipeConfig) -> RecipeResult:
    """Run the whole recipe (preprocess, split, pretrain, fine-tune, test, report).

    Args:
        config: The run's settings.

    Returns:
        The per-method test results, the split and the run directory.
    """
    config.out.mkdir(parents=True, exist_ok=True)
    store = prepare_store(config)
    split = make_split(config, store)
    class_names = list(store.stage_names)
    scale = SCALES[config.scale]
    finetune_subjects = split.finetune[scale["finetune_subjects"]]
    val_subjects = validation_subjects(split, finetune_subjects, scale["val_subjects"])
    (config.out / "recipe.json").write_text(
        json.dumps(
            {
                **{k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
                "finetune_subjects": list(finetune_subjects),
                "val_subjects": val_subjects,
                "test_subjects": list(split.test),
            },
            indent=2,
        )
        + "\n"
    )

    def windows(subjects: Sequence[str]) -> InMemoryWindows:
        return InMemoryWindows(
            store,
            records=split.records_of(subjects),
            labelled_only=True,
            normalize=True,
            progress=config.progress,
        )

    train_set = windows(finetune_subjects)
    val_set = windows(val_subjects) if val_subjects else None
    test_set = windows(split.test)

    results: list[MethodResult] = []
    pretrain_history: list[dict[str, Any]] = []
    if "part" in config.methods:
        pool = SleepWindowDataset(store, records=list(split.pretrain), normalize=True)
        part = pretrain(
            pool, out_dir=config.out / "pretrain", config=config.pretrain_config(), overwrite=True
        )
        pretrain_history = part.history
        results.append(
            _finetune_and_test(
                "part", part.encoder, config, train_set, val_set, test_set, class_names
            )
        )
    if "supervised" in config.methods:
        results.append(
            _finetune_and_test(
                "supervised", None, config, train_set, val_set, test_set, class_names
            )
        )

    write_results_table(results, config.out, class_names)
    if pretrain_history:
        plot_pretrain_loss(pretrain_history, config.out / "pretrain_loss.png")
    plot_finetune_validation(results, config.out / "finetune_validation.png")
    plot_confusion_matrices(results, class_names, config.out / "confusion_matrices.png")
    first_record = split.test_records[0]
    in_record = np.array([test_set.record_of(i) == first_record for i in range(len(test_set))])
    plot_hypnogram(
        test_set.labels[in_record],
        {result.name: result.predictions[in_record] for result in results},
        class_names,
        config.out / f"hypnogram_{first_record}.png",
        title=f"Test record {first_record}",
    )
    return RecipeResult(results=results, split=split, run_dir=config.out)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of the recipe."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes.sleep_staging",
        description="PART sleep staging: pretrain, fine-tune on few subjects, kappa on held-out "
        "subjects, compared with a supervised baseline.",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="run directory")
    parser.add_argument(
        "--src", type=Path, default=None, help="local PhysioNet 2018 root (default: sample cohort)"
    )
    parser.add_argument("--store", type=Path, default=None, help="zarr store to use or create")
    parser.add_argument("--cohort-dir", type=Path, default=None, help="sample cohort cache")
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--n-jobs", type=int, default=1, help="preprocessing workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--pretrain-epochs", type=int, default=None)
    parser.add_argument("--finetune-epochs", type=int, default=None)
    parser.add_argument("--overwrite", action="store_true", help="clear the run directory first")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recipe from the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.overwrite and args.out.is_dir() and any(args.out.iterdir()):
        keep = args.store is not None and args.store.resolve().is_relative_to(args.out.resolve())
        check(not keep, "--store", "a store outside --out when --overwrite is given", args.store)
        check(
            any((args.out / name).exists() for name in RUN_MARKERS),
            "--out",
            f"a recipe run directory to overwrite (holding one of {list(RUN_MARKERS)}); "
            "--overwrite never deletes other folders",
            f"the non-empty directory {args.out}",
        )
        shutil.rmtree(args.out)
    config = RecipeConfig(
        out=args.out,
        src=args.src,
        store=args.store,
        cohort_dir=args.cohort_dir,
        scale=args.scale,
        methods=tuple(args.methods),
        n_jobs=args.n_jobs,
        seed=args.seed,
        device=args.device,
        progress=not args.no_progress,
        pretrain_overrides={} if args.pretrain_epochs is None else {"epochs": args.pretrain_epochs},
        finetune_overrides={} if args.finetune_epochs is None else {"epochs": args.finetune_epochs},
    )
    result = run(config)
    print((result.run_dir / "results.md").read_text())
    print(f"Run directory: {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
