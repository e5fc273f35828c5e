"""The stages both sleep recipes share: data, split, pretraining per method, fine-tuning cells.

A *study* lives in one output directory::

    OUT/
      study.json                 the settings (a later command must agree with them)
      split.json                 subject split (test subjects, pretraining pool, nested chains)
      store.zarr/                the preprocessed store (unless --store points elsewhere)
      pretrain/<method>/         one engine run per self-supervised method (encoder.pt when done)
      finetune/<method>/b<B>_s<S>/   one fine-tuning cell: budget B subjects, seed S
          result.json            written last (atomically): the cell is finished
          predictions.npy        predicted stage per test window (test-set order)

Every stage is idempotent: a finished pretraining run (``encoder.pt``) or cell (``result.json``)
is never recomputed, an interrupted one resumes from its last checkpoint, and a directory made
with other settings is refused (``--overwrite`` starts over). Methods:

| name | pretraining | fine-tuning |
|---|---|---|
| ``part``, ``part_grid``, ``mae``, ``mp3``, ``droppos`` | ``pretrain(method=name)`` on the pool | from its encoder |
| ``supervised`` | none | from scratch, with position embedding |
| ``supervised_no_pos`` | none | from scratch, without position embedding |
"""  # noqa: E501

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import check
from partnd.cohort.pc18_cohort import ensure_sample_cohort
from partnd.data import as_labelled_dataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.splits import SubjectSplit, make_subject_split
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_write_json
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.finetuning import finetune
from partnd.inference import predict_logits
from partnd.metrics import ClassificationReport, classification_metrics
from partnd.models.serialization import ENCODER_FILE, load_encoder
from partnd.objectives import list_objectives
from partnd.preprocessing.physionet2018 import preprocess_physionet2018
from partnd.pretraining import pretrain
from partnd.recipes.study_directory import claim_study_directory

__all__ = [
    "SCALES",
    "SCRATCH_METHODS",
    "CellResult",
    "SleepStudy",
    "StudyConfig",
    "available_methods",
]

#: Methods trained from scratch (no pretraining): name -> whether they get a position embedding.
SCRATCH_METHODS: dict[str, bool] = {"supervised": True, "supervised_no_pos": False}

_DEMO_ENCODER = {"encoder_overrides": {"embed_dim": 192, "depth": 4, "num_heads": 4}}

#: Per-scale settings. ``demo`` fits a 2-core CPU and the 24-record sample cohort (a narrow ViT,
#: few epochs, budgets of 2/4/8 subjects); ``paper`` is the paper's protocol (12.9 M ViT, 1000
#: pretraining and 100 fine-tuning epochs, 200 test subjects, budgets 10/50/100/657, 5 seeds).
SCALES: dict[str, dict[str, Any]] = {
    "demo": {
        "n_test_subjects": 0.34,
        "budgets": (2, 4, 8),
        "val_subjects": 2,
        "seeds": (0, 1, 2),
        "pretrain": {
            **_DEMO_ENCODER,
            "epochs": 8,
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
            **_DEMO_ENCODER,
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
        "budgets": (10, 50, 100, 657),
        "val_subjects": 10,
        "seeds": (0, 1, 2, 3, 4),
        "pretrain": {},
        "finetune": {"class_weights": "balanced"},
    },
}


def available_methods() -> list[str]:
    """Every method name a study accepts: the registered objectives and the scratch baselines."""
    return [*list_objectives(), *SCRATCH_METHODS]


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
        n_jobs: Preprocessing workers (MNE semantics).
        seed: Seed of the subject split (and of the single cell of the sleep-staging table).
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        progress: Show progress bars.
        pretrain_overrides: :class:`PretrainConfig` fields replacing the scale's, every method.
        finetune_overrides: :class:`FinetuneConfig` fields replacing the scale's, every method.
        budgets: Fine-tuning subject counts replacing the scale's (nested, increasing).
        seeds: Seeds of the sample-efficiency cells replacing the scale's.
    """

    out: Path
    src: Path | None = None
    store: Path | None = None
    cohort_dir: Path | None = None
    scale: str = "demo"
    n_jobs: int = 1
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    pretrain_overrides: dict[str, Any] = field(default_factory=dict)
    finetune_overrides: dict[str, Any] = field(default_factory=dict)
    budgets: tuple[int, ...] | None = None
    seeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check(self.scale in SCALES, "scale", f"one of {sorted(SCALES)}", repr(self.scale))
        if self.budgets is not None:
            check(
                len(self.budgets) > 0
                and all(b >= 1 for b in self.budgets)
                and list(self.budgets) == sorted(set(self.budgets)),
                "budgets",
                "increasing positive subject counts",
                repr(self.budgets),
            )
        PretrainConfig.check_field_names(self.pretrain_overrides, "pretrain_overrides")
        FinetuneConfig.check_field_names(self.finetune_overrides, "finetune_overrides")

    @property
    def store_path(self) -> Path:
        """The preprocessed store of this study."""
        return self.store if self.store is not None else self.out / "store.zarr"

    @property
    def settings(self) -> dict[str, Any]:
        """What must agree between commands run on the same study directory."""
        keep = (
            "src",
            "store",
            "scale",
            "seed",
            "pretrain_overrides",
            "finetune_overrides",
            "budgets",
        )
        values = asdict(self)
        chosen = {k: str(values[k]) if isinstance(values[k], Path) else values[k] for k in keep}
        return dict(json.loads(json.dumps(chosen)))  # the form study.json holds

    def pretrain_config(self, method: str) -> PretrainConfig:
        """The pretraining configuration of ``method`` (the same budget for every method)."""
        values = {**SCALES[self.scale]["pretrain"], **self.pretrain_overrides}
        return PretrainConfig.preset(
            "eeg_sleep",
            method=method,
            seed=self.seed,
            device=self.device,
            progress=self.progress,
            **values,
        )

    def finetune_config(self, method: str, seed: int) -> FinetuneConfig:
        """The fine-tuning configuration of ``method``: the ``eeg_sleep`` preset and the scale's
        settings for everyone; from-scratch baselines get no layer-wise decay and their own
        position-embedding choice."""
        values = {**SCALES[self.scale]["finetune"], **self.finetune_overrides}
        if method in SCRATCH_METHODS:
            values["layer_decay"] = None
            values["pos_embed"] = SCRATCH_METHODS[method]
        return FinetuneConfig.preset(
            "eeg_sleep", seed=seed, device=self.device, progress=self.progress, **values
        )


@dataclass(frozen=True)
class CellResult:
    """A finished fine-tuning cell.

    Attributes:
        method: Method name.
        budget: Number of fine-tuning subjects.
        seed: Seed of the subject draw and of training.
        subjects: The fine-tuning subjects.
        report: Metrics on the test subjects.
        predictions: [n_test] predicted stage per test window.
        history: The fine-tuning run's logged records.
        finetune_epochs: Epochs trained.
    """

    method: str
    budget: int
    seed: int
    subjects: tuple[str, ...]
    report: ClassificationReport
    predictions: np.ndarray
    history: list[dict[str, Any]]
    finetune_epochs: int


class SleepStudy:
    """Runs the stages of a sleep study in ``config.out`` (see the module docstring).

    Args:
        config: The study's settings.
        overwrite: Start the directory over (only a study directory is ever cleared).
    """

    def __init__(self, config: StudyConfig, overwrite: bool = False) -> None:
        self.config = config
        self.out = config.out
        self._claim(overwrite)

    def _claim(self, overwrite: bool) -> None:
        store = self.config.store
        if overwrite and store is not None and self.out.is_dir() and any(self.out.iterdir()):
            inside = store.resolve().is_relative_to(self.out.resolve())
            check(not inside, "--store", "a store outside --out with --overwrite", "inside")
        claim_study_directory(self.out, self.config.settings, overwrite)

    @property
    def scale(self) -> dict[str, Any]:
        """The scale's settings, with the config's budgets and seeds when given."""
        settings = dict(SCALES[self.config.scale])
        if self.config.budgets is not None:
            settings["budgets"] = tuple(self.config.budgets)
        if self.config.seeds is not None:
            settings["seeds"] = tuple(self.config.seeds)
        return settings

    @cached_property
    def store(self) -> SleepStore:
        """The preprocessed store (created or completed on first use)."""
        config = self.config
        src = config.src
        if src is None:
            src = ensure_sample_cohort(config.cohort_dir, progress=config.progress).root
        report = preprocess_physionet2018(
            src, config.store_path, n_jobs=config.n_jobs, progress=config.progress
        )
        unexpected = report.unexpected_failures
        if unexpected:
            manifest = config.store_path / "manifest.json"
            warnings.warn(
                f"{len(unexpected)} record(s) failed preprocessing and are left out: "
                f"{', '.join(unexpected[:10])}; reasons in {manifest}",
                stacklevel=2,
            )
        return SleepStore(config.store_path)

    @cached_property
    def split(self) -> SubjectSplit:
        """The subject split (``split.json``, made once)."""
        path = self.out / "split.json"
        if path.exists():
            return SubjectSplit.load(path)
        split = make_subject_split(
            self.store,
            n_test_subjects=self.scale["n_test_subjects"],
            finetune_sizes=tuple(self.scale["budgets"]),
            seed=self.config.seed,
        )
        split.save(path)
        return split

    @property
    def class_names(self) -> list[str]:
        """Stage names from the store."""
        return list(self.store.stage_names)

    def windows(self, subjects: Sequence[str]) -> InMemoryWindows:
        """Labelled, instance-normalised windows of ``subjects`` in memory."""
        return InMemoryWindows(
            self.store,
            records=self.split.records_of(subjects),
            labelled_only=True,
            normalize=True,
            progress=self.config.progress,
        )

    @cached_property
    def test_set(self) -> InMemoryWindows:
        """The held-out test subjects' windows (one fixed order for every method)."""
        return self.windows(self.split.test)

    @cached_property
    def test_subjects(self) -> np.ndarray:
        """[n_test] subject of every test window."""
        subject_of = {r: info.subject_id for r, info in self.split.records.items()}
        return np.array([subject_of[self.test_set.record_of(i)] for i in range(len(self.test_set))])

    def subjects(self, budget: int, seed: int) -> tuple[str, ...]:
        """Fine-tuning subjects of a budget: the split's nested chain for ``seed``."""
        check(
            budget in self.split.finetune_sizes,
            "budget",
            f"one of the split's budgets {self.split.finetune_sizes}",
            repr(budget),
        )
        return self.split.finetune_subsets(seed)[budget]

    def validation_subjects(self, training: Sequence[str], seed: int) -> list[str]:
        """Labelled non-test subjects outside ``training`` for epoch selection (seeded)."""
        rest = sorted(set(self.split.finetune_pool) - set(training))
        order = np.random.default_rng([self.split.seed, seed]).permutation(len(rest))
        return sorted(rest[i] for i in order[: self.scale["val_subjects"]])

    def pretrain_dir(self, method: str) -> Path:
        """Run directory of ``method``'s pretraining."""
        return self.out / "pretrain" / method

    def pretrained(self, method: str) -> bool:
        """Whether ``method``'s pretraining ran all its epochs (a run stopped early by
        ``max_steps`` also writes ``encoder.pt``, but has not finished)."""
        run_dir = self.pretrain_dir(method)
        if not (run_dir / ENCODER_FILE).is_file() or not (run_dir / "metrics.jsonl").is_file():
            return False
        epochs = json.loads((run_dir / "meta.json").read_text())["resolved"]["epochs"]
        with open(run_dir / "metrics.jsonl") as handle:
            done = [json.loads(line)["epoch"] for line in handle if '"phase": "epoch"' in line]
        return bool(done) and max(done) + 1 >= epochs

    def run_pretraining(self, method: str) -> Path:
        """Pretrain ``method`` on the pool unless done (an interrupted run resumes).

        Returns:
            The run directory (holding ``encoder.pt``).
        """
        check(
            method in list_objectives(),
            "method",
            f"a pretraining method {list_objectives()}",
            repr(method),
        )
        run_dir = self.pretrain_dir(method)
        if self.pretrained(method):
            return run_dir
        resume = (run_dir / "checkpoints" / "last.pt").is_file()
        pool = SleepWindowDataset(self.store, records=list(self.split.pretrain), normalize=True)
        if resume:  # continue the interrupted run to its end
            pretrain(pool, out_dir=run_dir, resume=True, max_steps=None)
        else:
            config = self.config.pretrain_config(method)
            pretrain(pool, out_dir=run_dir, config=config, overwrite=run_dir.exists())
        return run_dir

    def cell_dir(self, method: str, budget: int, seed: int) -> Path:
        """Directory of one fine-tuning cell."""
        return self.out / "finetune" / method / f"b{budget}_s{seed}"

    def cell_done(self, method: str, budget: int, seed: int) -> bool:
        """Whether the cell has finished."""
        return (self.cell_dir(method, budget, seed) / "result.json").is_file()

    def load_cell(self, method: str, budget: int, seed: int) -> CellResult:
        """Read a finished cell."""
        cell = self.cell_dir(method, budget, seed)
        data = json.loads((cell / "result.json").read_text())
        report = ClassificationReport(
            **{
                **data["report"],
                "confusion_matrix": np.asarray(data["report"]["confusion_matrix"]),
            }
        )
        history = [json.loads(line) for line in (cell / "run" / "metrics.jsonl").open()]
        return CellResult(
            method=method,
            budget=budget,
            seed=seed,
            subjects=tuple(data["subjects"]),
            report=report,
            predictions=np.load(cell / "predictions.npy"),
            history=history,
            finetune_epochs=int(data["finetune_epochs"]),
        )

    def run_cell(self, method: str, budget: int, seed: int) -> CellResult:
        """Fine-tune ``method`` on ``budget`` subjects with ``seed`` and test it, unless done.

        A pretrained method's pretraining must have finished (:meth:`run_pretraining`).
        """
        check(method in available_methods(), "method", f"one of {available_methods()}", method)
        if self.cell_done(method, budget, seed):
            return self.load_cell(method, budget, seed)
        encoder = None
        if method not in SCRATCH_METHODS:
            check(
                self.pretrained(method),
                "method",
                f"a finished pretraining of {method!r} (run the pretrain stage first)",
                f"no {self.pretrain_dir(method) / ENCODER_FILE}",
            )
            encoder = load_encoder(self.pretrain_dir(method))
        subjects = self.subjects(budget, seed)
        config = self.config.finetune_config(method, seed)
        cell = self.cell_dir(method, budget, seed)
        run_dir = cell / "run"
        resume = (run_dir / "checkpoints" / "last.pt").is_file()
        val_subjects = self.validation_subjects(subjects, seed)
        result = finetune(
            encoder,
            self.windows(subjects),
            num_classes=len(self.class_names),
            val_dataset=self.windows(val_subjects) if val_subjects else None,
            out_dir=run_dir,
            config=None if resume else config,
            class_names=self.class_names,
            resume=resume,
            overwrite=not resume and run_dir.exists(),
            **({"max_steps": None} if resume else {}),
        )
        test, _ = as_labelled_dataset(self.test_set)
        logits = predict_logits(result.model, test.signals, device=self.config.device)
        predictions = logits.argmax(dim=1).numpy().astype(np.int8)
        labels = self.test_set.labels.astype(np.int64)
        report = classification_metrics(
            labels, predictions, len(self.class_names), self.class_names
        )
        np.save(cell / "predictions.npy", predictions)
        epochs = max((r["epoch"] for r in result.history if r.get("phase") == "epoch"), default=-1)
        atomic_write_json(
            {
                "method": method,
                "budget": budget,
                "seed": seed,
                "subjects": list(subjects),
                "validation_subjects": val_subjects,
                "report": report.to_dict(),
                "finetune_epochs": epochs + 1,
            },
            cell / "result.json",
        )
        return self.load_cell(method, budget, seed)
