"""The oracle ceiling of the pool axis: an encoder pretrained, supervised, on a pool's own stage
labels.

The pools of the sample-efficiency study (:mod:`partnd.recipes.study_pools`) are nights whose
stages no user of a pool would have, but the pool stores hold their hypnograms. The ceiling row
(:data:`~partnd.recipes.baselines.POOL_CEILING`, ``supervised_pool``) reads them: a window
classifier is trained by the engine's :func:`~partnd.finetuning.training.finetune` from scratch on
every labelled window of the pool's nights, its checkpoint chosen by Cohen's kappa on the labelled
windows of the pool's held-out nights (the nights that choose every pool pretraining's budget),
with the encoder, front-end, step cap, evaluation interval and patience of the pools' other
pretrainings (:meth:`~partnd.recipes.study_config.StudyConfig.pool_ceiling_config`). Its encoder
(``encoder.pt``) then enters every arm as a pretrained method's does, so ``ceiling - scratch``
says how much any pretraining on that pool could give at each label budget.

The run lives where the pool's other pretrainings do (``OUT/pretrain_pools/<pool>/supervised_pool``)
and ``selection.json``, written last, marks it finished: the step chosen and its held-out kappa,
the steps trained and the cap, and the records and subjects whose labels it read. The pools never
hold a night of a test or fine-tuning-pool subject
(:func:`partnd.datasets.pools.make_pretraining_pools`), so neither do its labels; an interrupted
run resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from partnd._validation import check
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.engine.run_dir import RunDir
from partnd.finetuning.training import FinetuneResult, finetune
from partnd.models import PatchClassifier
from partnd.models.serialization import ENCODER_FILE, save_encoder
from partnd.recipes.baselines import POOL_CEILING
from partnd.recipes.study_pools import SELECTION_FILE, throughput

if TYPE_CHECKING:
    from partnd.recipes.study_pools import PoolStage

__all__ = ["CEILING_METRIC", "records_read", "run_pool_ceiling"]

#: What the ceiling's checkpoint is chosen on: Cohen's kappa on the held-out nights.
CEILING_METRIC = "cohen_kappa"


def _labelled_windows(stage: PoolStage, records: tuple[str, ...], what: str) -> InMemoryWindows:
    """The labelled windows of ``records`` of the pool store, normalised as the study's."""
    windows = InMemoryWindows(
        stage.store,
        records=list(records),
        labelled_only=True,
        normalize=stage.config.normalization,
        progress=stage.config.progress,
    )
    check(
        len(windows) > 0,
        "pool_src",
        f"labelled nights in the pool store for {POOL_CEILING} (hypnograms of the {what}: a "
        "pool source with labels, e.g. partnd cohort --test-fraction 0)",
        f"no labelled window in the {len(records)} record(s) of the {what}",
    )
    return windows


def records_read(windows: InMemoryWindows) -> list[str]:
    """The records ``windows`` hold at least one window of (the labels the ceiling reads)."""
    return [windows.records[int(i)] for i in np.unique(windows.record_index)]


def run_pool_ceiling(stage: PoolStage, pool: str) -> Path:
    """Train the ceiling's encoder on ``pool``'s labelled windows unless done (an interrupted
    run resumes).

    Args:
        stage: The study's pools.
        pool: The pool's name.

    Returns:
        The run directory (``encoder.pt``: the window encoder of the best held-out kappa).

    Raises:
        InputError: The pool or its held-out nights hold no labelled window, or the pool store's
            stages are not the study's.
    """
    run_dir = stage.run_dir(POOL_CEILING, pool)
    if stage.done(POOL_CEILING, pool):
        return run_dir
    classes = list(stage.study.store.stage_names)
    check(
        list(stage.store.stage_names) == classes,
        "pool_src",
        f"a pool store with the study's stages {classes}",
        repr(list(stage.store.stage_names)),
    )
    run = RunDir(run_dir)
    resume = run.resumable
    if not stage.plan_path.is_file():
        stage.plan.save(stage.plan_path)
    train = _labelled_windows(stage, stage.plan.records(pool), f"pool {pool}")
    held_out = _labelled_windows(stage, stage.plan.held_out, "held-out nights")
    config = stage.config.pool_ceiling_config()
    result = finetune(
        None,
        train,
        num_classes=len(classes),
        val_dataset=held_out,
        out_dir=run_dir,
        config=None if resume else config,
        class_names=classes,
        resume=resume,
        overwrite=not resume and run_dir.exists(),
        **({"max_steps": None} if resume else {}),
    )
    classifier = result.model
    assert isinstance(classifier, PatchClassifier)  # a window classifier of the pools' encoder
    encoder = classifier.encoder
    encoder.signal_info = classifier.signal_info
    save_encoder(encoder, run_dir / ENCODER_FILE)
    window_hours = float(stage.store.window_seconds) / 3600.0
    subjects = stage.plan.record_subjects
    read, read_held_out = records_read(train), records_read(held_out)
    run.write_result(
        {
            "method": POOL_CEILING,
            **stage.pool_summary(pool),
            "labelled_windows": len(train),
            "held_out_labelled_windows": len(held_out),
            "records": read,
            "held_out_records": read_held_out,
            "subjects": sorted({subjects[record] for record in read}),
            "held_out_subjects": sorted({subjects[record] for record in read_held_out}),
            "cap": run.resolved()["total_steps"],
            "steps_per_epoch": run.resolved()["steps_per_epoch"],
            "selected": _selected(result),
            **throughput(result.history, window_hours, "windows"),
        },
        SELECTION_FILE,
    )
    return run_dir


def _selected(result: FinetuneResult) -> dict[str, Any]:
    """The evaluation whose weights were kept, as a pool pretraining records it: ``metric``,
    ``value`` (the held-out kappa), ``step``, ``epoch``, ``steps`` trained and
    ``stopped_early``."""
    epoch = result.best_metrics.get("epoch")
    history = result.history
    val = [r for r in history if r.get("phase") == "val" and r.get("epoch") == epoch]
    steps = [int(r["step"]) for r in history if "step" in r]
    return {
        "metric": CEILING_METRIC,
        "value": round(float(result.best_metrics[CEILING_METRIC]), 4),
        "step": val[-1]["step"] if val else None,
        "epoch": epoch,
        "steps": max(steps, default=0),
        "stopped_early": any(r.get("phase") == "early_stop" for r in history),
    }
