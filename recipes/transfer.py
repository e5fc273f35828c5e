"""Pretrain anywhere, fine-tune on your montage: one call for the common transfer case.

:func:`transfer` pretrains a channel-set encoder (``channel_mode="set"``) on a mixed pool of sleep
stores of any montages, read as one :class:`~partnd.datasets.MontageUnion` on the union of their
derivations. It then fine-tunes a classifier on a few labelled subjects of a target store, which
may be of another montage. It tests the classifier on the target's test subjects (Cohen's kappa
with a subject-bootstrap interval) and writes a hypnogram for every target record it did not
train or validate on::

    >>> result = partnd.transfer(["shhs.zarr", "pc18.zarr"], "edf.zarr", out_dir="runs/t", labels=1)
    >>> result.kappa, result.kappa_interval    # 0.71, (0.64, 0.77)
    >>> result.predictions["SC4001"]           # runs/t/predictions/SC4001.csv

``partnd transfer --pool shhs.zarr,pc18.zarr --target edf.zarr --labels 1 --out runs/t`` is the
same on the command line.

**Supervised transfer.** With ``method="supervised"`` the pool's labels are used instead of its
windows alone: a classifier (the fine-tuning configuration: a night classifier with
``context="night"``) is trained on the labelled nights of every pool store, its checkpoint chosen
on ``validation_subjects`` held-out subjects of each pool store. The target's fine-tuning then
starts from that whole classifier (:mod:`partnd.finetuning.classifier_start`), and a sequence or
night classifier's starting weights are a candidate of its checkpoint selection
(``evaluate_start``): validation on the target keeps the pool's classifier when no step on the
target's labels does better. The pool stores must be scored in the target's stages. In the
transfer study this is the row that pays (``docs/results/channel_sets.md``).

The run directory::

    config.json             the resolved run: stores, subjects, both configurations (first)
    pretrain/run/           the pretraining run (encoder.pt), or with method="supervised" the
                            classifier trained on the pool's labels (classifier.pt);
                            pretrain/result.json when finished
    finetune/run/           the fine-tuning run (classifier.pt); finetune/result.json when finished
    predictions/<record>.csv (and .edf)   hypnograms of the target's other records
    result.json             the test kappa, its interval and the subjects (written last)

A finished stage is never redone. With ``resume=True`` an interrupted stage continues from its
checkpoint, and a finished run is read back. The subjects are fixed by ``seed`` and written to
``config.json`` before anything trains; a resumed run with other arguments is refused.

**Subjects.** The target's test subjects are ``test_subjects``, or half of its labelled subjects
not named in ``labelled_subjects``, drawn with ``seed``
(:func:`~partnd.datasets.make_subject_split`). The labels come from the other labelled subjects,
drawn as the sample-efficiency studies draw them (:func:`~partnd.datasets.draw_labels` on that
split, with ``seed``): a budget ``labels`` of any :class:`~partnd.datasets.LabelBudget` form
(``1``: every labelled night of one subject; ``"1n"``: one labelled night; ``"w20"``: 20 windows
of each stage), or ``labelled_subjects`` by name (:func:`~partnd.datasets.draw_named_labels`).
``validation_subjects`` more of them (at most those the budget leaves) select the checkpoint. No
test subject may appear in a pool store.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from partnd._validation import check, renamed_arguments
from partnd.datasets import SleepNightDataset, SleepSequenceDataset
from partnd.datasets.label_budget import LabelBudget, LabelDraw, draw_labels, draw_named_labels
from partnd.datasets.montage_union import MontageUnion
from partnd.datasets.segments import as_segment_dataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.splits import SubjectSplit, make_subject_split, records_from_store
from partnd.datasets.store import SleepStore
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.evaluation.bootstrap import bootstrap_metric, kappa_metric
from partnd.evaluation.metrics import cohen_kappa, confusion_matrix
from partnd.finetuning.sequence import EVALUATION_CROP
from partnd.finetuning.training import finetune
from partnd.inference import Prediction, predict_records
from partnd.models.channel_vote import VOTES
from partnd.models.serialization import load_classifier
from partnd.objectives.registry import registered
from partnd.pretraining import pretrain
from partnd.recipes.set_options import pretrain_fields_for

__all__ = ["SUPERVISED", "TransferResult", "transfer"]

#: Channel sampling of both stages: a model that has seen every subset of its channels.
CHANNEL_OPTIONS: dict[str, Any] = {"subset_sampling": True}

#: The ``method`` that trains a classifier on the pool's labelled nights instead of pretraining.
SUPERVISED = "supervised"

#: Fields left out of the comparison of a resumed run's arguments (they change no result).
_VOLATILE = ("progress", "device")


@dataclass(frozen=True)
class TransferResult:
    """What :func:`transfer` gives.

    Attributes:
        run_dir: The run directory.
        pretrain_dir: The pretraining run (its ``encoder.pt``), or the run of the classifier
            trained on the pool's labels (its ``classifier.pt``) with ``method="supervised"``.
        finetune_dir: The fine-tuning run (its ``classifier.pt``).
        model: The fine-tuned classifier.
        kappa: Cohen's kappa on the scored windows of the test subjects' records.
        kappa_interval: Its 95% bootstrap interval over test subjects (``None`` with one test
            subject: there is nothing to resample).
        n_test_windows: Scored test windows.
        labelled_subjects: Target subjects whose labels trained the classifier.
        validation_subjects: Target subjects that selected its checkpoint.
        test_subjects: Target subjects it was tested on.
        predictions: ``{record: hypnogram CSV}`` of every target record but the labelled and
            validation subjects'.
    """

    run_dir: Path
    pretrain_dir: Path
    finetune_dir: Path
    model: nn.Module
    kappa: float
    kappa_interval: tuple[float, float] | None
    n_test_windows: int
    labelled_subjects: tuple[str, ...]
    validation_subjects: tuple[str, ...]
    test_subjects: tuple[str, ...]
    predictions: dict[str, Path]


def _store(path: str | Path, argument: str) -> Path:
    """An existing sleep store path (absolute), refused by ``argument`` otherwise."""
    resolved = Path(path).expanduser().resolve()
    check(
        (resolved / "zarr.json").is_file(),
        argument,
        "sleep store directories (partnd ingest, partnd preprocess or partnd cohort make them)",
        repr(str(path)),
    )
    return resolved


def _names(values: Sequence[str] | None, argument: str) -> list[str] | None:
    if values is None:
        return None
    check(not isinstance(values, str), argument, "a sequence of subject ids", repr(values))
    names = [str(value) for value in values]
    check(len(set(names)) == len(names), argument, "distinct subject ids", names)
    return names


def _draw_labels(
    target: Path,
    *,
    labels: LabelBudget,
    labelled_subjects: list[str] | None,
    test_subjects: list[str] | None,
    validation_subjects: int,
    seed: int,
) -> tuple[SubjectSplit, LabelDraw]:
    """The target's subject split (its test subjects) and the draw of its labelled and
    validation subjects, as the studies draw them (see the module docstring)."""
    infos = records_from_store(target)
    labelled_pool = sorted({info.subject_id for info in infos if info.labelled})
    for argument, names in (
        ("test_subjects", test_subjects),
        ("labelled_subjects", labelled_subjects),
    ):
        unknown = sorted(set(names or ()) - set(labelled_pool))
        check(
            not unknown,
            argument,
            f"subjects with labelled records in {target} ({', '.join(labelled_pool)})",
            unknown,
        )
    check(
        len(labelled_pool) >= 2,
        "target",
        "a store with at least 2 labelled subjects (one to label, one to test)",
        f"{len(labelled_pool)} in {target}",
    )
    named = set(labelled_subjects or ())
    overlap = sorted(named & set(test_subjects or ()))
    check(not overlap, "labelled_subjects", "subjects that are not test subjects", overlap)
    if test_subjects is None:
        left = [subject for subject in labelled_pool if subject not in named]
        check(
            bool(left),
            "test_subjects",
            "target subjects left to test on (after the labelled subjects)",
            "none",
        )
        if len(left) > 1:
            others = [info for info in infos if info.subject_id not in named]
            left = list(
                make_subject_split(others, n_test_subjects=0.5, finetune_sizes=(1,), seed=seed).test
            )
        test_subjects = left
    split = make_subject_split(infos, test_subjects=test_subjects, finetune_sizes=(1,), seed=seed)
    pool = len(split.finetune_pool)
    if labelled_subjects is not None:
        n_validation = min(validation_subjects, pool - len(labelled_subjects))
        with renamed_arguments({"subjects": "labelled_subjects"}):
            return split, draw_named_labels(
                split, labelled_subjects, seed, n_validation=n_validation
            )
    if labels.subjects is not None:
        check(
            labels.subjects <= pool,
            "labels",
            f"at most {pool} labelled subjects (the target's labelled subjects that are not "
            f"test subjects: {', '.join(split.finetune_pool)})",
            str(labels),
        )
    n_validation = min(validation_subjects, pool - (labels.subjects or 1))
    with renamed_arguments({"budgets": "labels", "budget": "labels"}):
        return split, draw_labels(split, target, labels, seed, n_validation=n_validation)


def _refuse_test_subjects_in_the_pool(pool: list[Path], test: Sequence[str]) -> None:
    """No test subject may be pretrained on: refuse a pool store holding one, naming both."""
    for path in pool:
        shared = sorted({info.subject_id for info in records_from_store(path)} & set(test))
        check(
            not shared,
            "pool",
            "stores without the target's test subjects (pretraining on them would leak the test "
            "nights into the encoder)",
            f"{path} holding test subjects {shared}",
        )


def _pretraining_data(pool: list[Path], config: PretrainConfig) -> MontageUnion:
    """The pool's stores as one dataset on the union of their channels: windows, or segments
    for the objectives that read them."""
    entry = registered(config.method)
    if entry is not None and entry.data == "segments":
        parts = [
            as_segment_dataset(
                str(path), config.segment_windows, config.window_samples, config.normalize
            )
            for path in pool
        ]
    else:
        parts = [SleepWindowDataset(path, normalize=config.normalize) for path in pool]
    with renamed_arguments({"datasets": "pool"}):
        return MontageUnion(parts)


def _check_pool_labels(pool: list[Path], stage_names: list[str], validation_subjects: int) -> None:
    """Refuse, before anything is written, a pool that ``method="supervised"`` cannot train on:
    a store scored in other stages than the target, or without labelled nights of more subjects
    than the ``validation_subjects`` it holds out."""
    for path in pool:
        source = SleepStore(path)
        check(
            list(source.stage_names) == stage_names,
            "pool",
            f"stores scored in the target's stages {stage_names} (method='supervised')",
            f"{path}: {list(source.stage_names)}",
        )
        labelled = source.record_ids(labelled_only=True)
        subjects = {str(source.record_attrs(record)["subject_id"]) for record in labelled}
        check(
            len(subjects) > validation_subjects,
            "pool",
            f"stores with labelled nights of more than {validation_subjects} subject(s) "
            "(method='supervised' trains on the pool's labels and holds out "
            "validation_subjects of each store)",
            f"{path} with {len(subjects)}",
        )


def _train_on_pool_labels(
    pool: list[Path],
    config: FinetuneConfig,
    normalize: str,
    *,
    validation_subjects: int,
    seed: int,
    run_dir: Path,
    stage_names: list[str],
) -> dict[str, Any]:
    """Train ``config``'s classifier on the labelled nights of every pool store (one dataset per
    store, read as one :class:`MontageUnion`), choosing its checkpoint on
    ``validation_subjects`` held-out subjects of each store (drawn with ``seed``); an
    interrupted run resumes.

    Returns:
        ``pretrain/result.json``'s content: the held-out records of each store, the selected
        checkpoint's validation report and the configuration.
    """
    train, val, held_out = [], [], {}
    for path in pool:
        source = SleepStore(path)
        labelled = source.record_ids(labelled_only=True)
        records: list[str] = []
        if validation_subjects:
            split = make_subject_split(
                source, n_test_subjects=validation_subjects, finetune_sizes=(1,), seed=seed
            )
            records = list(split.test_records)
            val.append(_labelled_data(path, records, config, normalize, evaluation=True))
        held_out[str(path)] = records
        kept = [record for record in labelled if record not in records]
        train.append(_labelled_data(path, kept, config, normalize))
    resumable = RunDir(run_dir).resumable
    resumed: dict[str, Any] = {"progress": config.progress} if resumable else {}
    result = finetune(
        None,
        train,
        num_classes=len(stage_names),
        val_dataset=val or None,
        out_dir=run_dir,
        config=None if resumable else config,
        class_names=stage_names,
        resume=resumable,
        overwrite=not resumable and run_dir.exists(),
        **resumed,
    )
    return {
        "validation_records": held_out,
        "best_metrics": result.best_metrics,
        "config": result.config.to_dict(),
    }


def _labelled_data(
    target: Path,
    records: list[str],
    config: FinetuneConfig,
    normalize: str,
    *,
    windows: Mapping[str, np.ndarray] | None = None,
    evaluation: bool = False,
    progress: bool = False,
) -> Any:
    """What the classifier trains (or validates) on: windows, sequences of ``context`` windows,
    or crops of whole nights, of ``records``."""
    reading: dict[str, Any] = {
        "records": records,
        "normalize": normalize,
        "progress": progress,
        "labelled_windows": windows,
    }
    if config.context == "night":
        crop = EVALUATION_CROP if evaluation else int(config.night_crop)
        return SleepNightDataset(target, context=crop, **reading)
    if config.context is not None:
        return SleepSequenceDataset(target, context=int(config.context), **reading)
    return InMemoryWindows(target, labelled_only=True, **reading)


def _comparable(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config.json`` without the fields that change no result."""
    return {
        key: {k: v for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, dict) and key.endswith("_config")
        else value
        for key, value in config.items()
    }


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"partnd transfer: {message}", file=sys.stderr, flush=True)


def transfer(
    pool: Sequence[str | Path],
    target: str | Path,
    *,
    out_dir: str | Path,
    labels: int | str | None = None,
    labelled_subjects: Sequence[str] | None = None,
    test_subjects: Sequence[str] | None = None,
    validation_subjects: int = 1,
    method: str = "part_windows",
    preset: str = "eeg_sleep",
    pretrain_overrides: Mapping[str, Any] | None = None,
    finetune_overrides: Mapping[str, Any] | None = None,
    seed: int = 0,
    vote: str | None = None,
    edf: bool = False,
    device: str = "auto",
    progress: bool = True,
    resume: bool = False,
    overwrite: bool = False,
) -> TransferResult:
    """Pretrain on a mixed pool of stores, fine-tune and predict on a target store.

    Both stages read channel sets (``channel_mode="set"`` with ``subset_sampling``), so the pool
    stores, and the target, may each have their own montage. See the module docstring for the run
    directory and how subjects are chosen.

    Args:
        pool: Sleep stores to pretrain on (every window, labelled or not), of any montages;
            with ``method="supervised"``, stores whose labelled nights train a classifier.
        target: The sleep store to fine-tune, test and predict on.
        out_dir: The run directory.
        labels: The label budget (instead of ``labelled_subjects``), any
            :class:`~partnd.datasets.LabelBudget` form: a number of target subjects (their
            labelled nights; default 1), ``"1n"`` (one labelled night) or ``"w20"`` (20 windows
            of each stage).
        labelled_subjects: The target subjects to label, by name.
        test_subjects: The target subjects to test on (default: half of its labelled subjects
            not in ``labelled_subjects``, drawn with ``seed``).
        validation_subjects: Further target subjects that select the checkpoint (as many as are
            left, up to this; 0: the last weights are kept); with ``method="supervised"`` also
            the held-out subjects of each pool store that select the pool classifier's.
        method: The pretraining objective (``"part_windows"``, ``"part"``, ``"mae"``, ...), or
            :data:`SUPERVISED` (``"supervised"``): train a classifier on the pool's labelled
            nights, then fine-tune it whole on the target (module docstring).
        preset: The preset of both configurations (:meth:`PretrainConfig.preset`).
        pretrain_overrides: Pretraining config fields over the preset's (none with
            ``method="supervised"``).
        finetune_overrides: Fine-tuning config fields over the preset's (``context=21`` or
            ``"night"`` for a sequence or night classifier).
        seed: Seed of the subject draws and of both trainings.
        vote: ``"subsets"``: the predictions vote over channel subsets
            (:func:`partnd.inference.predict`).
        edf: Also write the hypnograms as EDF+ annotations.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        progress: Print each stage and show the trainings' progress bars.
        resume: Continue the run in ``out_dir``: finished stages are kept, an interrupted one
            resumes from its checkpoint.
        overwrite: Clear ``out_dir`` (a partnd run) first.

    Returns:
        A :class:`TransferResult`.

    Raises:
        InputError: A path that is not a sleep store, unknown subjects, a test subject in a pool
            store, fewer target subjects than the budget asks for, a resumed run given other
            arguments; with ``method="supervised"``, pretraining overrides, or a pool store
            without labelled nights, scored in other stages or with too few subjects to hold
            some out.
    """
    check(
        isinstance(pool, Sequence) and not isinstance(pool, str | Path) and len(pool) > 0,
        "pool",
        "a non-empty list of sleep stores",
        repr(pool),
    )
    stores = [_store(path, "pool") for path in pool]
    check(len(set(stores)) == len(stores), "pool", "distinct stores", [str(p) for p in stores])
    target_path = _store(target, "target")
    check(
        labels is None or labelled_subjects is None,
        "labels",
        "no label budget when labelled_subjects names the labelled subjects",
        f"{labels!r} and {labelled_subjects!r}",
    )
    budget = LabelBudget.parse(1 if labels is None else labels, "labels")
    check(
        isinstance(validation_subjects, int) and validation_subjects >= 0,
        "validation_subjects",
        "an int >= 0",
        repr(validation_subjects),
    )
    check(isinstance(seed, int) and not isinstance(seed, bool), "seed", "an int", repr(seed))
    check(vote in VOTES, "vote", f"one of {list(VOTES)}", repr(vote))
    supervised = method == SUPERVISED
    check(
        not (supervised and pretrain_overrides),
        "pretrain_overrides",
        "none with method='supervised' (the pool's labels train a classifier configured by "
        "finetune_overrides)",
        repr(pretrain_overrides),
    )
    run = RunDir.check(out_dir, resume=resume, overwrite=overwrite)
    split, draw = _draw_labels(
        target_path,
        labels=budget,
        labelled_subjects=_names(labelled_subjects, "labelled_subjects"),
        test_subjects=_names(test_subjects, "test_subjects"),
        validation_subjects=validation_subjects,
        seed=seed,
    )
    _refuse_test_subjects_in_the_pool(stores, split.test)
    store = SleepStore(target_path)
    if supervised:
        _check_pool_labels(stores, list(store.stage_names), validation_subjects)
    settings = {
        "channel_mode": "set",
        "channel_options": CHANNEL_OPTIONS,
        "progress": progress,
        "device": device,
        "seed": seed,
    }
    pretrain_fields = {
        **settings,
        "method": method,
        **pretrain_fields_for(method, pretrain_overrides or {}),
    }
    finetune_fields = {**settings, **dict(finetune_overrides or {})}
    for argument, fields in (
        ("pretrain_overrides", pretrain_fields),
        ("finetune_overrides", finetune_fields),
    ):
        check(
            fields["channel_mode"] == "set",
            argument,
            "channel_mode 'set' (both stages read channel sets: the pool and the target have "
            "different montages)",
            repr(fields["channel_mode"]),
        )
    pretrain_config = None if supervised else PretrainConfig.preset(preset, **pretrain_fields)
    finetune_config = FinetuneConfig.preset(preset, **finetune_fields)
    source_config = None
    if supervised:
        source_config = finetune_config
        if finetune_config.context is not None and "evaluate_start" not in finetune_fields:
            finetune_config = finetune_config.replace(evaluate_start=True)
    resolved = {
        "pool": [str(path) for path in stores],
        "target": str(target_path),
        "labels": None if labelled_subjects is not None else budget.to_json(),
        "labelled_subjects": list(draw.subjects),
        "labelled_windows": None if draw.sample is None else draw.sample.to_dict()["windows"],
        "labelled_nights": None if draw.nights is None else sorted(draw.nights),
        "validation_subjects": list(draw.validation),
        "test_subjects": list(split.test),
        "seed": seed,
        "vote": vote,
        "preset": preset,
        "method": method,
        "pretrain_config": None if pretrain_config is None else pretrain_config.to_dict(),
        "source_config": None if source_config is None else source_config.to_dict(),
        "finetune_config": finetune_config.to_dict(),
    }
    if resume:
        stored = run.read_config()
        changed = sorted(
            key
            for key in set(stored) | set(resolved)
            if _comparable(stored).get(key) != _comparable(resolved).get(key)
        )
        check(
            not changed,
            "resume",
            f"the arguments of the run in {run.root} (or overwrite=True to start again)",
            f"other {', '.join(changed)}",
        )
    else:
        if overwrite:
            run.clear()
        run.root.mkdir(parents=True, exist_ok=True)
        run.write_config(resolved)
    pretrain_dir = run.root / "pretrain" / "run"
    finetune_dir = run.root / "finetune" / "run"
    if run.finished():
        _say(progress, f"finished earlier; reading {run.root / 'result.json'}")
        return _result(run, pretrain_dir, finetune_dir)

    normalize = (pretrain_config or PretrainConfig.preset(preset)).normalize
    if RunDir(pretrain_dir.parent).finished():
        _say(progress, f"pretraining finished earlier ({pretrain_dir})")
    elif source_config is not None:
        _say(progress, f"training on the labels of {len(stores)} store(s) -> {pretrain_dir}")
        summary = _train_on_pool_labels(
            stores,
            source_config,
            normalize,
            validation_subjects=validation_subjects,
            seed=seed,
            run_dir=pretrain_dir,
            stage_names=list(store.stage_names),
        )
        RunDir(pretrain_dir.parent).write_result(summary)
    else:
        assert pretrain_config is not None
        _say(progress, f"pretraining ({method}) on {len(stores)} store(s) -> {pretrain_dir}")
        data = _pretraining_data(stores, pretrain_config)
        if RunDir(pretrain_dir).resumable:
            pretrained = pretrain(data, out_dir=pretrain_dir, resume=True, progress=progress)
        else:
            pretrained = pretrain(
                data, out_dir=pretrain_dir, config=pretrain_config, overwrite=pretrain_dir.exists()
            )
        RunDir(pretrain_dir.parent).write_result(
            {"channels": list(data.ch_names), "config": pretrained.config.to_dict()}
        )

    if RunDir(finetune_dir.parent).finished():
        _say(progress, f"fine-tuning finished earlier ({finetune_dir})")
    else:
        _say(
            progress,
            f"fine-tuning on {len(draw.subjects)} labelled subject(s) of {target_path.name} "
            f"-> {finetune_dir}",
        )
        windows = draw.labelled_windows
        train = _labelled_data(
            target_path,
            [r for r in split.records_of(draw.subjects) if windows is None or r in windows],
            finetune_config,
            normalize,
            windows=windows,
            progress=progress,
        )
        val = None
        if draw.validation:
            val = _labelled_data(
                target_path,
                split.records_of(draw.validation),
                finetune_config,
                normalize,
                evaluation=True,
                progress=progress,
            )
        resumable = RunDir(finetune_dir).resumable
        resumed: dict[str, Any] = {"progress": progress} if resumable else {}
        finetuned = finetune(
            pretrain_dir,
            train,
            num_classes=len(store.stage_names),
            val_dataset=val,
            out_dir=finetune_dir,
            config=None if resumable else finetune_config,
            class_names=list(store.stage_names),
            resume=resumable,
            overwrite=not resumable and finetune_dir.exists(),
            **resumed,
        )
        RunDir(finetune_dir.parent).write_result(
            {"best_metrics": finetuned.best_metrics, "config": finetuned.config.to_dict()}
        )

    model = load_classifier(finetune_dir)
    trained = set(draw.subjects) | set(draw.validation)
    records = [
        record
        for record in store.record_ids()
        if str(store.record_attrs(record)["subject_id"]) not in trained
    ]
    _say(progress, f"predicting {len(records)} record(s) -> {run.root / 'predictions'}")
    predictions = predict_records(
        model, store, records, normalize=normalize, device=device, vote=vote
    )
    folder = run.root / "predictions"
    folder.mkdir(exist_ok=True)
    for record, prediction in predictions.items():
        prediction.write_csv(folder / f"{record}.csv")
        if edf:
            prediction.write_edf(folder / f"{record}.edf")
    run.write_result(_test_report(store, predictions, draw, split.test, seed, folder))
    return _result(run, pretrain_dir, finetune_dir)


def _test_report(
    store: SleepStore,
    predictions: Mapping[str, Prediction],
    draw: LabelDraw,
    test: Sequence[str],
    seed: int,
    folder: Path,
) -> dict[str, Any]:
    """``result.json``: the test kappa over the scored windows of the test subjects' records,
    its subject-bootstrap interval, the subjects and the hypnograms written."""
    truth, predicted, groups = [], [], []
    for record, prediction in predictions.items():
        subject = str(store.record_attrs(record)["subject_id"])
        if subject not in set(test):
            continue
        stages = store.stages(record).astype(np.int64)
        scored = stages >= 0
        truth.append(stages[scored])
        predicted.append(np.asarray(prediction.labels)[scored])
        groups.extend([subject] * int(scored.sum()))
    check(bool(truth), "test_subjects", "test subjects with scored windows", "none")
    y_true, y_pred = np.concatenate(truth), np.concatenate(predicted)
    classes = len(store.stage_names)
    kappa = float(cohen_kappa(confusion_matrix(y_true, y_pred, classes)))
    interval = None
    if len(set(groups)) >= 2:
        boot = bootstrap_metric(y_true, y_pred, groups, kappa_metric(classes), seed=seed)
        interval = [boot.low, boot.high]
    return {
        "kappa": kappa,
        "kappa_interval": interval,
        "n_test_windows": len(y_true),
        "labelled_subjects": list(draw.subjects),
        "validation_subjects": list(draw.validation),
        "test_subjects": list(test),
        "predictions": {record: f"{folder.name}/{record}.csv" for record in predictions},
    }


def _result(run: RunDir, pretrain_dir: Path, finetune_dir: Path) -> TransferResult:
    """The :class:`TransferResult` of a finished run."""
    values = run.read_result()
    interval = values["kappa_interval"]
    return TransferResult(
        run_dir=run.root,
        pretrain_dir=pretrain_dir,
        finetune_dir=finetune_dir,
        model=load_classifier(finetune_dir),
        kappa=float(values["kappa"]),
        kappa_interval=None if interval is None else (float(interval[0]), float(interval[1])),
        n_test_windows=int(values["n_test_windows"]),
        labelled_subjects=tuple(values["labelled_subjects"]),
        validation_subjects=tuple(values["validation_subjects"]),
        test_subjects=tuple(values["test_subjects"]),
        predictions={record: run.root / path for record, path in values["predictions"].items()},
    )
