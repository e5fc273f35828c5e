"""Computing the cells of a sleep study: probing, fine-tuning, and the classical rows.

A cell is a method's arm trained on the draw of a label budget for a seed (on a pool's encoder
for a pretrained method with pools) and tested on the study's test subjects. :class:`StudyCells`
computes it unless it has finished, one process at a time per cell (a lock beside its
directory), and writes it through the :class:`~partnd.recipes.study_cell_store.CellStore`:

- ``window``, ``sequence``, ``night``: fine-tuning (:func:`partnd.finetune`) of the pretrained
  encoder, a scratch encoder or a braindecode stager, its checkpoint chosen on the draw's
  validation subjects; an interrupted run resumes. A night cell of a study with a night grid
  (``StudyConfig.night_grid``) trains once per distinct configuration of the grid
  (``run-0/``, ``run-1/``...) and keeps the run whose selected checkpoint scores the best
  validation kappa;
- ``probe``: logistic regression on the frozen encoder's features;
- the classical rows: YASA's features + LightGBM, or YASA's shipped classifier.

Every row predicts the test windows in one order, checked before its cell is written.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.adapters import as_labelled_dataset
from partnd.datasets.label_budget import LabelDraw
from partnd.engine.checkpoint import atomic_save
from partnd.engine.config import FinetuneConfig
from partnd.engine.run_dir import RunDir
from partnd.evaluation.metrics import classification_metrics
from partnd.evaluation.probes import linear_probe
from partnd.finetuning.sequence import EVALUATION_CROP, predict_nights
from partnd.finetuning.training import FinetuneResult, finetune
from partnd.inference import predict_logits
from partnd.models import NightClassifier, SequenceClassifier
from partnd.models.braindecode_stagers import STAGERS, NightStager
from partnd.recipes.study_cell_store import BudgetLike, CellResult, CellStore, save_npy
from partnd.recipes.study_config import (
    CLASSICAL_METHODS,
    POOL_CEILING,
    SCRATCH_METHODS,
    available_methods,
    method_arms,
    pretrained_methods,
)
from partnd.recipes.study_data import StudyData
from partnd.recipes.study_directory import exclusive
from partnd.recipes.study_pretraining import StudyPretraining
from partnd.recipes.study_scales import budget_settings

__all__ = ["StudyCells"]


class StudyCells:
    """Computes the cells of a study (see the module docstring).

    Args:
        data: The study's data (store, split, test set, draws).
        pretraining: The study's pretraining runs (the encoders of pretrained methods).
        cell_store: Where the cells are written.
    """

    def __init__(
        self, data: StudyData, pretraining: StudyPretraining, cell_store: CellStore
    ) -> None:
        self.data = data
        self.config = data.config
        self.pretraining = pretraining
        self.cell_store = cell_store

    def _check_cell(self, method: str, arm: str, pool: str | None) -> None:
        """Refuse a cell the study cannot run: an unknown method, an arm it lacks, a pool it
        cannot have, or a pretrained method whose pretraining has not finished."""
        check(method in available_methods(), "method", f"one of {available_methods()}", method)
        check(
            arm in method_arms(method),
            "arm",
            f"one of {method}'s arms {method_arms(method)}",
            repr(arm),
        )
        pretraining = self.pretraining
        if pool is not None:
            check(
                method in pretrained_methods(),
                "pool",
                f"no pool for {method!r} (only pretrained methods have one)",
                repr(pool),
            )
            check(
                pool in pretraining.pool_names,
                "pool",
                f"one of the study's pools {list(pretraining.pool_names)}",
                repr(pool),
            )
        check(
            method != POOL_CEILING or pool is not None,
            "pool",
            f"a pretraining pool for {POOL_CEILING} (it is pretrained on a pool's stage labels)",
            "none",
        )
        if method in pretrained_methods():
            check(
                pretraining.pretrained(method, pool),
                "method",
                f"a finished pretraining of {method!r} (run the pretrain stage first)",
                f"no finished run in {pretraining.pretrain_dir(method, pool)}",
            )

    def run_cell(
        self, method: str, arm: str, budget: BudgetLike, seed: int, pool: str | None = None
    ) -> CellResult:
        """Train ``method``'s ``arm`` on the draw of ``budget`` for ``seed`` (on ``pool``'s
        encoder) and test it, unless done. A pretrained method's pretraining must have
        finished (:meth:`StudyPretraining.run_pretraining`). One process at a time writes a
        cell: another one writing it (a worker of a killed command finishing its cell) is
        refused."""
        self._check_cell(method, arm, pool)
        if self.cell_store.cell_done(method, arm, budget, seed, pool):
            return self.cell_store.load_cell(method, arm, budget, seed, pool)
        cell = self.cell_store.cell_dir(method, arm, budget, seed, pool)
        name = ":".join(str(part) for part in (method, arm, budget, seed, pool) if part is not None)
        with exclusive(cell.with_name(f".{cell.name}.lock"), f"the cell {cell}"):
            try:
                return self._run_cell(method, arm, budget, seed, pool)  # done meanwhile: loaded
            except InputError as error:  # which cell, also from a worker of --jobs N
                if cell.is_dir() and not any(p.is_file() for p in cell.rglob("*")):
                    shutil.rmtree(cell)  # no empty cell folder is left
                raise InputError(f"{error} (in the cell {name})") from error

    def _run_cell(
        self, method: str, arm: str, budget: BudgetLike, seed: int, pool: str | None = None
    ) -> CellResult:
        """Compute and write a checked cell while holding its lock (or read it, when another
        process finished it meanwhile)."""
        cells = self.cell_store
        if cells.cell_done(method, arm, budget, seed, pool):
            return cells.load_cell(method, arm, budget, seed, pool)
        draw = self.data.draw(budget, seed)
        cell = cells.cell_dir(method, arm, budget, seed, pool)
        cell.mkdir(parents=True, exist_ok=True)
        predictions, settings, used = self._predict(method, arm, draw, seed, cell, pool)
        labels = self.data.test_set.labels.astype(np.int64)
        report = classification_metrics(
            labels, predictions, len(self.data.class_names), self.data.class_names
        )
        result = {
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
        cells.write_cell(cell, predictions, result)
        return cells.load_cell(method, arm, budget, seed, pool)

    def _predict(
        self, method: str, arm: str, draw: LabelDraw, seed: int, cell: Path, pool: str | None
    ) -> tuple[np.ndarray, dict[str, Any], tuple[str, ...]]:
        """Train the cell's row on ``draw`` and predict the test windows.

        Returns:
            ``(predictions [n_test], settings, labelled subjects used)``.
        """
        if method in CLASSICAL_METHODS:
            predictions, settings = self._classical(method, arm, draw, seed)
            return predictions, settings, () if method == "yasa_pretrained" else draw.subjects
        if arm == "probe":
            predictions, settings = self._probe(method, draw, seed, pool)
            return predictions, settings, draw.subjects
        predictions, settings = self._finetune(method, arm, draw, seed, cell, pool)
        return predictions, settings, draw.subjects

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

        test_records = list(self.data.split.test_records)
        if method == "yasa_pretrained":  # no labels: one prediction shared by every cell
            path = self.data.out / "yasa_pretrained.npy"
            channel = pretrained_channel(self.data.store)
            if not path.is_file():
                staged = yasa_pretrained_stages(self.data.store, test_records, eeg_channel=channel)
                self._check_test_order(staged.labels)
                atomic_save(staged.predictions, path, save=save_npy)
            return np.load(path), {
                "features": f"YASA's own ({channel}, rolling context, per-night z-scores)",
                "classifier": "YASA's shipped clf_eeg LightGBM, no labels from this data",
                "note": "out of domain on the generated sample cohort"
                if self.config.src is None
                else "",
            }
        table = self.data.classical_features
        if arm == "window":
            table = table.single_window()
        train = table.select(self.data.split.records_of(draw.subjects))
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
            np.array_equal(np.asarray(labels), self.data.test_set.labels.astype(np.int64)),
            "predictions",
            "one prediction per labelled test window, in the test set's order",
            "another order",
        )

    def _probe(
        self, method: str, draw: LabelDraw, seed: int, pool: str | None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Logistic regression on the frozen encoder's [CLS] + mean patch token features."""
        train = self.data.windows(draw.subjects, draw.labelled_windows)
        result = linear_probe(
            self.pretraining.window_encoder(method, seed, pool),
            train,
            self.data.test_set,
            num_classes=len(self.data.class_names),
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
            **_reference_note(method),
        }

    def _finetune(
        self,
        method: str,
        arm: str,
        draw: LabelDraw,
        seed: int,
        cell: Path,
        pool: str | None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Fine-tune the window, sequence or night classifier of ``method`` in ``cell`` (once per
        distinct configuration of the night grid, the best on validation kept) and predict the
        test set."""
        candidates = self._grid_candidates(method, arm, draw, seed)
        check(
            len(candidates) == 1 or bool(draw.validation),
            "night_grid",
            "validation subjects to choose among the grid's configurations",
            f"a draw of {draw.budget} without any",
        )
        tried: list[dict[str, Any]] = []
        best: tuple[float, FinetuneResult, FinetuneConfig, Path, dict[str, Any]] | None = None
        for index, (point, candidate) in enumerate(candidates):
            run = cell / ("run" if len(candidates) == 1 else f"run-{index}")
            trained, candidate = self._train(method, arm, draw, run, pool, candidate)
            selected = _selected(trained)
            tried.append({"values": point, "run": run.name, **selected})
            score = -np.inf if selected["val_kappa"] is None else selected["val_kappa"]
            if best is None or score > best[0]:  # the first of equal scores
                best = (score, trained, candidate, run, point)
            del trained  # a losing run's model is freed before the next one trains
        assert best is not None
        _, result, config, run_dir, chosen = best
        predictions = self.predict_test(result.model, config)
        meta = RunDir(run_dir).resolved()
        init = "scratch" if _from_scratch(method) else f"{method} pretraining"
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
            "budget_settings": budget_settings(self.data.scale, arm, draw.budget),
            "validation_subjects": list(draw.validation),
        }
        if config.context == "night":
            settings["night_crop"] = config.night_crop
        if config.probe_steps:
            settings["probe_steps"] = config.probe_steps
        if config.pretrained_levels != "all":
            settings["pretrained_levels"] = config.pretrained_levels
        if config.decay_random_window:
            settings["decay_random_window"] = True
        if arm == "night" and self.config.night_grid:  # {} chosen: the row ignores the grid
            chosen = chosen if len(candidates) > 1 else {}
            settings["night_grid"] = {"candidates": tried, "chosen": chosen, "run": run_dir.name}
        return predictions, {**settings, **_reference_note(method)}

    def _grid_candidates(
        self, method: str, arm: str, draw: LabelDraw, seed: int
    ) -> list[tuple[dict[str, Any], FinetuneConfig]]:
        """The night grid's points (one, ``{}``, without a grid or for another arm) whose
        configurations differ for this cell, each with its configuration: the first point of
        configurations a row makes equal (a from-scratch row ignores ``layer_decay`` without
        ``decay_random_window``)."""
        points = self.config.night_grid_points if arm == "night" else [{}]
        candidates: list[tuple[dict[str, Any], FinetuneConfig]] = []
        for point in points:
            config = self.config.finetune_config(method, seed, arm, draw.budget, grid=point)
            if all(config != other for _, other in candidates):
                candidates.append((point, config))
        return candidates

    def _train(
        self,
        method: str,
        arm: str,
        draw: LabelDraw,
        run_dir: Path,
        pool: str | None,
        config: FinetuneConfig,
    ) -> tuple[FinetuneResult, FinetuneConfig]:
        """Fine-tune ``method``'s ``arm`` with ``config`` in ``run_dir`` (resumed when
        interrupted) on ``draw``, its checkpoint chosen on the draw's validation subjects.

        Returns:
            The run's result, and the configuration it trained with (a batch no larger than
            the draw's training items).
        """
        resume = RunDir(run_dir).resumable
        encoder: Any = None
        if not _from_scratch(method):
            encoder = self.pretraining.pretrain_dir(method, pool)
        train = self.data.arm_data(arm, draw.subjects, config, draw.labelled_windows)
        if not resume and 0 < len(train) < config.batch_size:  # a scarce draw, a short record
            warnings.warn(
                f"the cell {method}:{arm}:{draw.budget}:{config.seed}"
                f"{'' if pool is None else ':' + pool}: {len(train)} training items cannot fill "
                f"a batch of {config.batch_size}; it trains with batches of {len(train)}",
                UserWarning,
                stacklevel=3,
            )
            config = config.replace(batch_size=len(train))  # recorded in the cell's settings
        val = None
        if draw.validation:
            val = self.data.arm_data(arm, draw.validation, config, evaluation=True)
        result = finetune(
            encoder,
            train,
            num_classes=len(self.data.class_names),
            val_dataset=val,
            out_dir=run_dir,
            config=None if resume else config,
            class_names=self.data.class_names,
            resume=resume,
            overwrite=not resume and run_dir.exists(),
            **({"max_steps": None} if resume else {}),
        )
        return result, config

    def predict_test(self, model: Any, config: FinetuneConfig) -> np.ndarray:
        """[n_test] predicted stage of every test window, in the test set's order, by a trained
        window, sequence or night classifier (``config``: the one it was trained with)."""
        if isinstance(model, SequenceClassifier | NightClassifier | NightStager):
            night = config.context == "night"
            length = EVALUATION_CROP if night else int(config.context or 1)
            nights = predict_nights(
                model,
                self.data.sequences(self.data.split.test, length, night=night),
                device=self.config.device,
            )
            labels = np.concatenate([night.labels for night in nights])
            probabilities = np.concatenate([night.probabilities for night in nights])
            scored = labels >= 0
            self._check_test_order(labels[scored])
            return np.asarray(probabilities[scored].argmax(axis=1))
        test, _ = as_labelled_dataset(self.data.test_set)
        logits = predict_logits(model, test.signals, device=self.config.device)
        return np.asarray(logits.argmax(dim=1).numpy())


def _from_scratch(method: str) -> bool:
    """Whether ``method``'s cells train from a random start (a scratch baseline or a
    braindecode stager), with no pretrained encoder."""
    return method in SCRATCH_METHODS or method in STAGERS


def _reference_note(method: str) -> dict[str, str]:
    """The ``note`` of an oracle ceiling's cell (none for another method's)."""
    if method != POOL_CEILING:
        return {}
    return {"note": "reference (oracle): encoder pretrained on the pool's own stage labels"}


def _selected(result: FinetuneResult) -> dict[str, Any]:
    """The selected checkpoint of a fine-tuning run: epoch, step and validation kappa."""
    epoch = result.best_metrics.get("epoch")
    val = [r for r in result.history if r.get("phase") == "val" and r.get("epoch") == epoch]
    return {
        "selected_step": val[-1]["step"] if val else None,
        "val_kappa": round(float(val[-1]["cohen_kappa"]), 4) if val else None,
    }
