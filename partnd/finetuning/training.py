"""``partnd.finetuning.training`` and ``partnd.evaluate``: supervised classification on top of an
encoder.

Fine-tuning follows the paper (Sec. 3, "Finetuning"): the relative head is dropped, a fresh
learnable position embedding is added, inputs are tiled on the regular grid, and a linear layer
classifies the [CLS] token, trained with cross-entropy by the same engine as pretraining. Passing
``encoder=None`` (or an encoder preset name) trains from scratch: the supervised baseline.

Example:
    >>> config = partnd.FinetuneConfig.preset("eeg_sleep")
    >>> result = partnd.finetune(pretrained.encoder, train_set, num_classes=5,
    ...                          val_dataset=val_set, out_dir="runs/ft", config=config)
    >>> report = partnd.evaluate(result.model, test_set, class_names=["W", "N1", "N2", "N3", "R"])
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from partnd._validation import check, check_batch_size
from partnd.datasets.adapters import (
    LabelledDataset,
    as_labelled_dataset,
    data_fingerprint,
    source_attribute,
)
from partnd.datasets.montage_union import MontageUnion, as_union
from partnd.datasets.overlap import check_disjoint
from partnd.engine.augment import build_augmentation
from partnd.engine.checkpoint import atomic_save, atomic_write_json, load_checkpoint
from partnd.engine.config import FinetuneConfig
from partnd.engine.session import open_session
from partnd.engine.trainer import Trainer, TrainTask
from partnd.evaluation.metrics import ClassificationReport, classification_metrics
from partnd.finetuning.classifier_start import start_from_classifier, trained_classifier
from partnd.finetuning.pretrained_levels import (
    check_pretrained_levels,
    full_rate_parameter_names,
    kept_parameter_shapes,
)
from partnd.finetuning.pretrained_parameters import parameter_shapes, pretrained_parameter_names
from partnd.finetuning.sequence import (
    SequenceClassificationTask,
    as_sequence_dataset,
    backbone_signal,
    build_sequence_classifier,
    check_stage_codes,
    evaluate_sequences,
    fit_to_signal,
    sequence_fingerprint,
    sequence_signal_info,
)
from partnd.finetuning.tasks import ClassificationTask
from partnd.inference import predict_logits
from partnd.models import PatchClassifier, ViTEncoder, create_encoder, list_encoders
from partnd.models.braindecode_stagers import NightStager, WindowStager, build_stager
from partnd.models.channel_vote import SubsetVote, check_vote
from partnd.models.montage import channel_set_overrides, read_data_channels, seen_signal
from partnd.models.night import ContextClassifier, NightClassifier
from partnd.models.sequence import HierarchicalEncoder, SequenceClassifier
from partnd.models.serialization import (
    CLASSIFIER_FILE,
    TEMPORAL_ENCODER_FILE,
    encoder_spec,
    load_encoder,
    load_hierarchical_encoder,
    save_model,
)
from partnd.models.vit import check_tiles
from partnd.signal_info import SignalInfo, SignalSpec

__all__ = [
    "ClassificationTask",
    "FinetuneResult",
    "WindowTask",
    "balanced_class_weights",
    "check_labels",
    "evaluate",
    "finetune",
    "save_confusion_matrix",
]

SELECT_METRIC = "cohen_kappa"

#: ``(classifier, config) -> task``: builds the training loss of a single-window classifier (a
#: :class:`~partnd.models.PatchClassifier`, or a braindecode stager) in place of
#: :class:`ClassificationTask` (DeiT's Mixup/CutMix and soft targets, ...). It is called
#: once the classifier is built, before training, and may adjust the classifier (stochastic
#: depth); it raises ``InputError`` for a configuration it cannot train.
WindowTask = Callable[[nn.Module, FinetuneConfig], TrainTask]


@dataclass
class FinetuneResult:
    """Outcome of :func:`finetune`.

    Attributes:
        model: The classifier (a braindecode stager with ``FinetuneConfig.stager``) on the CPU in
            eval mode: the best validation epoch's weights when a validation set was given, else
            the final (EMA, when on) weights.
        history: Logged records (``phase`` "train", "epoch" and, with validation, "val").
        best_metrics: The selected epoch's validation report (``epoch``, ``accuracy``,
            ``cohen_kappa``, ``macro_f1``, ``per_class_f1``, ``confusion_matrix``, ``n``); without
            validation, ``epoch`` and the final training ``loss``.
        run_dir: The run directory (``metrics.json`` and ``confusion_matrix.png`` are in it).
        config: The resolved configuration.
    """

    model: PatchClassifier | SequenceClassifier | NightClassifier | WindowStager | NightStager
    history: list[dict[str, Any]]
    best_metrics: dict[str, Any]
    run_dir: Path
    config: FinetuneConfig


def check_labels(
    dataset: LabelledDataset,
    num_classes: int,
    argument: str,
    classes: str | None = None,
) -> np.ndarray:
    """Every label of ``dataset`` as an array, refusing any outside ``[0, num_classes)``.

    Reads ``dataset.labels`` when the source exposes it, else every item.

    Args:
        dataset: The adapted dataset.
        num_classes: Number of classes K.
        argument: Name of the caller's argument for the message (``train_labels``...).
        classes: What K is, for the message (``"the classifier's classes"``); default the
            caller's ``num_classes``, which can be raised.

    Returns:
        [N] int64 labels.
    """
    labels = np.asarray([dataset.label(i) for i in range(len(dataset))], dtype=np.int64)
    if labels.size:
        low, high = int(labels.min()), int(labels.max())
        expected = (
            f"class labels in [0, {num_classes}) ({classes})"
            if classes
            else f"class labels in [0, num_classes={num_classes}) (raise num_classes if the data "
            "have more classes)"
        )
        check(low >= 0 and high < num_classes, argument, expected, f"labels in [{low}, {high}]")
    return labels


def balanced_class_weights(labels: np.ndarray, num_classes: int) -> torch.Tensor:
    """``n / (K * n_c)`` per class (scikit-learn's "balanced"); absent classes get weight 0.

    Args:
        labels: [N] labels in ``[0, num_classes)``.
        num_classes: Number of classes K.
    """
    counts = np.bincount(labels, minlength=num_classes)
    weights = np.divide(
        counts.sum(), num_classes * counts, out=np.zeros(num_classes), where=counts > 0
    )
    return torch.tensor(weights, dtype=torch.float32)


def _load_backbone(
    encoder: ViTEncoder | HierarchicalEncoder | str | Path | None,
) -> ViTEncoder | HierarchicalEncoder | None:
    """The pretrained encoder ``finetune`` starts from (a copy whose every parameter takes a
    gradient), or ``None`` to build one.

    A run directory of PART across windows (``temporal_encoder.pt`` beside ``encoder.pt``) gives
    its hierarchical encoder: a sequence classifier keeps both levels, a single-window classifier
    its window encoder.
    """
    if encoder is None or (isinstance(encoder, str) and encoder in list_encoders()):
        return None
    if isinstance(encoder, str | Path):
        presets = f"an encoder preset {list_encoders()} or " if isinstance(encoder, str) else ""
        check(
            Path(encoder).exists(),
            "encoder",
            f"{presets}an existing pretrain run directory, encoder.pt or training checkpoint",
            f"{encoder} (no such file or directory)",
        )
        if (Path(encoder) / TEMPORAL_ENCODER_FILE).is_file():
            return load_hierarchical_encoder(encoder)
        return load_encoder(encoder)
    check(
        isinstance(encoder, ViTEncoder | HierarchicalEncoder),
        "encoder",
        "a ViTEncoder or a HierarchicalEncoder",
        type(encoder).__name__,
    )
    backbone = copy.deepcopy(encoder)
    backbone.requires_grad_(True)  # a level held in pretraining, or an EMA copy, trains here
    return backbone


def _check_architecture(
    backbone: ViTEncoder | HierarchicalEncoder | None,
    encoder: Any,
    overrides: dict[str, Any],
    *,
    temporal_kept: bool = True,
) -> None:
    """Refuse architecture fields of ``overrides`` that would be ignored: any with pretrained
    weights (they bring their own; a hierarchical encoder's temporal level unless it is not
    kept, ``temporal_kept=False``), a preset other than the positional ``encoder``'s name."""
    if backbone is None:
        named = encoder if isinstance(encoder, str) else None
        preset = overrides.get("encoder", named)
        check(
            named is None or preset == named,
            "FinetuneConfig.encoder",
            f"the encoder preset given as the first argument ({named!r}) or none",
            repr(preset),
        )
        return
    window = backbone.window if isinstance(backbone, HierarchicalEncoder) else backbone
    patch = overrides.get("patch_size", window.patch_size)
    patch = tuple(patch) if isinstance(patch, Sequence) else (patch,) * len(window.patch_size)
    fields = ["encoder", "encoder_overrides"]
    brings_temporal = isinstance(backbone, HierarchicalEncoder) and temporal_kept
    if brings_temporal:  # it brings its temporal transformer too
        fields += ["temporal_encoder", "temporal_overrides"]
    ignored: list[str] = [name for name in fields if name in overrides]
    ignored += [] if patch == tuple(window.patch_size) else ["patch_size"]
    check(
        not ignored,
        f"FinetuneConfig.{ignored[0]}" if ignored else "",
        "no architecture setting with pretrained weights (they bring their own encoder"
        f"{' and temporal transformer' if brings_temporal else ''} "
        f"and patch size {tuple(window.patch_size)})",
        ", ".join(repr(overrides[name]) for name in ignored),
    )


def _prepare_encoder(
    backbone: ViTEncoder | None,
    preset: str | None,
    config: FinetuneConfig,
    spec: SignalSpec,
    info: SignalInfo,
) -> ViTEncoder:
    if backbone is None:
        overrides = config.encoder_overrides
        if config.channel_mode == "set":
            overrides = channel_set_overrides(
                overrides, info.ch_names, config.channel_options, "FinetuneConfig.channel_options"
            )
        return create_encoder(
            preset or config.encoder,
            in_chans=spec.in_chans,
            patch_size=config.patch_size,
            ndim=spec.ndim,
            **overrides,
        )
    read_data_channels(backbone, info)
    check(
        backbone.in_chans == spec.in_chans and backbone.ndim == spec.ndim,
        "train_dataset",
        f"items [{backbone.in_chans}, *spatial] with {backbone.ndim} spatial dimension(s) "
        "(the encoder's input)",
        f"items of shape {spec.item_shape}",
    )
    return backbone


def _named_store_data(data: Any) -> bool:
    """Whether ``data`` is a store path or a dataset with named channels (not yet a list)."""
    if isinstance(data, str | Path):
        return Path(data).is_dir()
    return isinstance(data, Dataset) and source_attribute(data, "ch_names") is not None


def _check_fits(encoder: ViTEncoder, spec: SignalSpec, argument: str, patch: str) -> None:
    """Refuse items the encoder's grid of patches (named ``patch`` in messages) would not tile
    whole."""
    check(
        all(n >= p for n, p in zip(spec.spatial_shape, encoder.patch_size, strict=True)),
        argument,
        f"items whose spatial size is at least the patch size {encoder.patch_size}",
        f"items of shape {spec.item_shape}",
    )
    check_tiles(spec.spatial_shape, encoder.patch_size, patch)


def evaluate(
    model: nn.Module,
    dataset: Dataset[Any] | np.ndarray | torch.Tensor | str | Path | Sequence[Any],
    *,
    batch_size: int = 256,
    class_names: Sequence[str] | None = None,
    device: str = "auto",
    labels: Sequence[int] | None = None,
    vote: str | None = None,
    max_subsets: int = 16,
) -> ClassificationReport:
    """Classify ``dataset`` with ``model`` and report accuracy, Cohen's kappa, F1 and the
    cross-entropy loss.

    The model runs in eval mode without gradient on ``device`` and is put back on its original
    device and mode afterwards. Data that do not fit the signal the model was trained on
    (``model.signal_info``: channels, rate, window) are refused; its channels are picked by name
    when the data hold them in another order or among others.

    Args:
        model: Maps ``x: [B, C, *spatial]`` to logits ``[B, K]`` (e.g. a :class:`PatchClassifier`),
            or a :class:`~partnd.models.SequenceClassifier` or
            :class:`~partnd.models.NightClassifier` (every window of every night of the data
            predicted with its context, scored on the labelled windows).
        dataset: Items ``(x, label)``, an array ``[N, C, *spatial]`` together with ``labels``, a
            sleep store path (its labelled windows), or a list of store paths and datasets (a
            :class:`~partnd.datasets.MontageUnion`; a fixed-channel model's channels must be in
            every one); store-backed data for a sequence or night classifier (lists of them
            too: every store's nights scored together).
        batch_size: Evaluation batch size.
        class_names: K class names for the per-class F1 (default: the model's ``class_names``).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        labels: Labels ``[N]`` when ``dataset`` is an array.
        vote: ``"subsets"``: a channel-set model votes over subsets of the present channels
            (a soft vote, see :func:`partnd.inference.predict`); ``None``: every channel at once.
        max_subsets: The most subsets per item (see :func:`partnd.inference.predict`).

    Returns:
        A :class:`~partnd.evaluation.metrics.ClassificationReport` (with ``loss``).
    """
    check_batch_size(batch_size)
    voting = check_vote(vote, max_subsets, getattr(model, "signal_info", None))
    if isinstance(model, SequenceClassifier | NightClassifier | NightStager):  # data's form first
        night = isinstance(model, NightClassifier | NightStager)
        context = None if night else cast(SequenceClassifier, model).context
        info = model.signal_info
        normalize = None if info is None else info.normalization
        channel_set = info is not None and info.channel_mode == "set"
        sequences = fit_to_signal(
            as_sequence_dataset(
                dataset,
                context,
                "dataset",
                night=night,
                normalize=normalize,
                channels=None if info is None or channel_set else info.ch_names,
                absent_channels=channel_set,
            ),
            model.signal_info,
            "dataset",
        )
        read_data_channels(model, sequence_signal_info(sequences))
        check(labels is None, "labels", "None for a sequence classifier (store labels)", "labels")
        return evaluate_sequences(
            model,
            sequences,
            class_names=class_names,
            batch_size=batch_size,
            device=device,
            vote=vote,
            max_subsets=max_subsets,
        )
    expected = getattr(model, "signal_info", None)
    united = as_union(
        dataset,
        "dataset",
        expected=expected,
        absent_channels=expected is not None and expected.channel_mode == "set",
        labelled=labels is None,
    )
    data, _ = as_labelled_dataset(united, labels, expected=expected)
    read_data_channels(model, data.info)
    reader = model
    if voting:
        check(
            data.info.ch_names is not None,
            "dataset",
            "data with channel names to vote over channel subsets",
            "unnamed channels",
        )
        reader = SubsetVote(model, list(data.info.ch_names or ()), max_subsets)
    logits = predict_logits(reader, data.signals, batch_size=batch_size, device=device)
    num_classes = int(logits.shape[-1])
    truth = torch.as_tensor(check_labels(data, num_classes, "labels", "the classifier's classes"))
    names = class_names if class_names is not None else getattr(model, "class_names", None)
    report = classification_metrics(truth, logits.argmax(dim=-1), num_classes, names)
    return dataclasses.replace(report, loss=float(F.cross_entropy(logits, truth)))


def save_confusion_matrix(
    report: ClassificationReport, path: str | Path, class_names: Sequence[str] | None = None
) -> None:
    """Plot the row-normalised confusion matrix with counts to a PNG file (atomically)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    counts = report.confusion_matrix
    names = list(class_names) if class_names is not None else list(report.per_class_f1)
    rows = counts.sum(axis=1, keepdims=True)
    normalised = np.divide(counts, rows, out=np.zeros(counts.shape), where=rows > 0)
    size = 1.2 + 0.6 * len(names)
    figure, axes = plt.subplots(figsize=(size + 1.5, size))
    image = axes.imshow(normalised, cmap="Blues", vmin=0.0, vmax=1.0)
    for (row, column), count in np.ndenumerate(counts):
        colour = "white" if normalised[row, column] > 0.5 else "black"
        axes.text(column, row, str(count), ha="center", va="center", color=colour, fontsize=8)
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(f"kappa {report.cohen_kappa:.3f}, accuracy {report.accuracy:.3f}")
    figure.colorbar(image, ax=axes, label="fraction of true class")
    figure.tight_layout()
    atomic_save(figure, path, save=lambda fig, handle: fig.savefig(handle, format="png", dpi=120))
    plt.close(figure)


def _validator(
    report: Callable[[nn.Module], ClassificationReport],
) -> Callable[[nn.Module, int], dict[str, float]]:
    """Per-epoch validation returning the loss, accuracy, Cohen's kappa and macro-F1."""

    def validate(model: nn.Module, epoch: int) -> dict[str, float]:
        result = report(model)
        return {
            "loss": float(result.loss or 0.0),
            "accuracy": result.accuracy,
            "cohen_kappa": result.cohen_kappa,
            "macro_f1": result.macro_f1,
        }

    return validate


@dataclass
class _Setup:
    """What :func:`finetune` trains and how it checks it, for one kind of classifier.

    Attributes:
        model: The classifier to train.
        architecture: Its encoder's (or braindecode stager's) architecture, recorded in
            checkpoints.
        task: The loss.
        train_set: The training items.
        validate: Per-epoch validation (``None`` without a validation set).
        report: The full validation report of a model (after selection).
        signal: The signal the model is trained on.
        data_shape: ``in_chans`` and ``spatial_shape`` of one window.
        num_val_items: Validation items.
        fingerprints: What identifies the training and validation data (resume checks).
        pretrained_parameters: Names of the model's parameters that came from the pretrained
            encoder (:func:`~partnd.finetuning.pretrained_parameters.pretrained_parameter_names`;
            none from scratch): what ``FinetuneConfig.probe_steps`` holds fixed.
    """

    model: nn.Module
    architecture: dict[str, Any]
    task: Any
    train_set: Dataset[Any]
    validate: Callable[[nn.Module, int], dict[str, float]] | None
    report: Callable[[nn.Module], ClassificationReport]
    signal: SignalInfo
    data_shape: dict[str, Any]
    num_val_items: int
    fingerprints: dict[str, Any]
    pretrained_parameters: tuple[str, ...] = ()


def _build_stager(
    config: FinetuneConfig, num_classes: int, signal: SignalInfo
) -> WindowStager | NightStager:
    """The braindecode stager ``config.stager`` for windows of ``signal`` (its rate needed)."""
    assert config.stager is not None
    check(
        signal.sfreq is not None and len(signal.spatial_shape) == 1,
        "train_dataset",
        f"1-D windows with a known sampling rate for the stager {config.stager!r} (a sleep "
        "store's windows)",
        f"items of shape {(signal.in_chans, *signal.spatial_shape)} at sfreq {signal.sfreq}",
    )
    assert signal.sfreq is not None
    return build_stager(
        config.stager,
        n_chans=signal.in_chans,
        n_outputs=num_classes,
        n_times=signal.spatial_shape[0],
        sfreq=signal.sfreq,
        options=config.stager_overrides,
    )


def _window_setup(
    backbone: ViTEncoder | None,
    preset: str | None,
    train_dataset: Any,
    val_dataset: Any,
    train_labels: Sequence[int] | None,
    val_labels: Sequence[int] | None,
    num_classes: int,
    class_names: Sequence[str] | None,
    config: FinetuneConfig,
    device: str,
    task: WindowTask | None,
) -> _Setup:
    """The single-window [CLS] classifier (the paper's fine-tuning), trained with ``task``'s loss
    (default :class:`ClassificationTask`)."""
    expected = None if backbone is None else backbone.signal_info
    channel_sets = config.channel_mode == "set" or (
        expected is not None and expected.channel_mode == "set"
    )
    train_dataset = as_union(
        train_dataset,
        "train_dataset",
        expected=expected,
        absent_channels=channel_sets,
        labelled=train_labels is None,
    )
    train_set, spec = as_labelled_dataset(
        train_dataset,
        train_labels,
        "train_dataset",
        "train_labels",
        expected=expected,
        same_shape=False,
        absent_channels=channel_sets,
    )
    val_set = None
    if val_dataset is not None:
        if channel_sets and _named_store_data(val_dataset):
            val_dataset = [val_dataset]  # read on the training layout, its absent channels NaN
        val_dataset = as_union(
            val_dataset,
            "val_dataset",
            expected=train_set.info,
            absent_channels=channel_sets,
            labelled=val_labels is None,
        )
        val_set, _ = as_labelled_dataset(
            val_dataset,
            val_labels,
            "val_dataset",
            "val_labels",
            expected=train_set.info,
            reference="like train_dataset:",
            absent_channels=train_set.signals.absent_channels,
        )
        check_disjoint(train_set, val_set)
    train_label_array = check_labels(
        train_set, num_classes, "train_labels" if train_labels is not None else "train_dataset"
    )
    if val_set is not None:
        check_labels(
            val_set, num_classes, "val_labels" if val_labels is not None else "val_dataset"
        )
    model: PatchClassifier | WindowStager
    signal = train_set.info
    channel_set = False
    pretrained: tuple[str, ...] = ()
    if config.stager is not None:
        stager = _build_stager(config, num_classes, train_set.info)
        assert isinstance(stager, WindowStager)  # FinetuneConfig pairs stagers and contexts
        model, architecture = stager, {"stager": stager.spec()}
    else:
        patch = "FinetuneConfig.patch_size" if backbone is None else "encoder"
        shapes = None if backbone is None else parameter_shapes(backbone)
        backbone = _prepare_encoder(backbone, preset, config, spec, train_set.info)
        _check_fits(backbone, spec, "train_dataset", patch)
        model = PatchClassifier(
            backbone,
            num_classes,
            spatial_shape=spec.spatial_shape,
            pos_embed=config.pos_embed,
            pos_mask_ratio=config.pos_mask_ratio,
            global_pool=config.global_pool,
            copy_encoder=False,
        )
        if shapes is not None:
            pretrained = pretrained_parameter_names(model, model.encoder, shapes)
        architecture = encoder_spec(model.encoder)
        channel_set = backbone.channel_mode == "set"
        if channel_set:
            signal = seen_signal(signal, expected)
    model.signal_info = signal
    if task is not None:
        loss = task(model, config)
    else:
        weights = None
        if config.class_weights == "balanced":
            weights = balanced_class_weights(train_label_array, num_classes)
        augment = build_augmentation(config.augmentations or (), spec.ndim, channel_set)
        loss = ClassificationTask(num_classes, weights, config.label_smoothing, augment)

    def report(final: nn.Module) -> ClassificationReport:
        assert val_set is not None
        return evaluate(
            final,
            val_set,
            batch_size=config.eval_batch_size,
            class_names=class_names,
            device=device,
        )

    return _Setup(
        model=model,
        architecture=architecture,
        task=loss,
        train_set=train_set,
        validate=None if val_set is None else _validator(report),
        report=report,
        signal=signal,
        data_shape={"in_chans": spec.in_chans, "spatial_shape": list(spec.spatial_shape)},
        num_val_items=0 if val_set is None else len(val_set),
        fingerprints={
            "train_dataset": data_fingerprint(train_set),
            "val_dataset": None if val_set is None else data_fingerprint(val_set),
        },
        pretrained_parameters=pretrained,
    )


def _sequence_setup(
    backbone: ViTEncoder | HierarchicalEncoder | None,
    train_dataset: Any,
    val_dataset: Any,
    *,
    num_classes: int,
    class_names: Sequence[str] | None,
    config: FinetuneConfig,
    device: str,
    start: ContextClassifier | None = None,
) -> _Setup:
    """The sequence classifier: ``config.context`` consecutive windows of a store's records (or
    the night classifier: crops of ``config.night_crop`` windows, whole records to validate);
    with ``start`` (a trained classifier, ``backbone`` its encoder) every weight of it."""
    assert config.context is not None
    night = config.context == "night"
    context = config.night_crop if night else int(config.context)
    expected = None if backbone is None else backbone_signal(backbone)
    channel_sets = config.channel_mode == "set" or (
        expected is not None and expected.channel_mode == "set"
    )
    train_set = fit_to_signal(
        as_sequence_dataset(
            train_dataset,
            context,
            "train_dataset",
            progress=config.progress,
            night=night,
            channels=None if expected is None or channel_sets else expected.ch_names,
            absent_channels=channel_sets,
        ),
        expected,
        "train_dataset",
    )
    signal = sequence_signal_info(train_set)
    val_set = None
    if val_dataset is not None:
        if channel_sets and not isinstance(val_dataset, list | tuple | MontageUnion):
            val_dataset = [val_dataset]  # read on the training layout, its absent channels NaN
        val_set = fit_to_signal(
            as_sequence_dataset(
                val_dataset,
                None if night else context,
                "val_dataset",
                progress=config.progress,
                night=night,
                channels=train_set.ch_names if channel_sets else None,
                absent_channels=channel_sets,
            ),
            signal,
            "val_dataset",
            reference="like train_dataset:",
        )
        check_disjoint(train_set, val_set)
    labels = train_set.window_labels()
    check_stage_codes(labels, num_classes, "train_dataset")
    if val_set is not None:
        check_stage_codes(val_set.window_labels(), num_classes, "val_dataset")
    model: ContextClassifier | NightStager
    channel_set = False
    pretrained: tuple[str, ...] = ()
    if config.stager is not None:
        model = cast(NightStager, _build_stager(config, num_classes, signal))
        architecture = {"stager": model.spec()}
    else:
        shapes = None
        if backbone is not None:
            shapes = kept_parameter_shapes(backbone, config.pretrained_levels)
        model = build_sequence_classifier(
            backbone,
            config,
            num_classes=num_classes,
            in_chans=train_set.n_chans,
            window_samples=train_set.n_times,
            ch_names=train_set.ch_names,
        )
        if start is not None:
            start_from_classifier(
                model,
                start,
                num_classes=num_classes,
                pretrained_levels=config.pretrained_levels,
            )
        if shapes is not None:
            pretrained = pretrained_parameter_names(model, model.encoder, shapes)
        architecture = encoder_spec(model.encoder.window)
        channel_set = model.encoder.window.channel_mode == "set"
        if channel_set:
            signal = seen_signal(signal, expected)
    model.signal_info = signal
    weights = None
    if config.class_weights == "balanced":
        weights = balanced_class_weights(labels[labels >= 0], num_classes)
    augment = build_augmentation(config.augmentations or (), 1, channel_set)

    def report(final: nn.Module) -> ClassificationReport:
        assert val_set is not None
        return evaluate_sequences(
            cast(ContextClassifier | NightStager, final),
            val_set,
            class_names=class_names,
            batch_size=config.eval_batch_size,
            device=device,
        )

    return _Setup(
        model=model,
        architecture=architecture,
        task=SequenceClassificationTask(num_classes, weights, config.label_smoothing, augment),
        train_set=train_set,
        validate=None if val_set is None else _validator(report),
        report=report,
        signal=signal,
        data_shape={"in_chans": train_set.n_chans, "spatial_shape": [train_set.n_times]},
        num_val_items=0 if val_set is None else len(val_set),
        fingerprints={
            "train_dataset": sequence_fingerprint(train_set),
            "val_dataset": None if val_set is None else sequence_fingerprint(val_set),
        },
        pretrained_parameters=pretrained,
    )


def finetune(
    encoder: ViTEncoder | HierarchicalEncoder | ContextClassifier | str | Path | None,
    train_dataset: Dataset[Any] | np.ndarray | torch.Tensor | str | Path | Sequence[Any],
    /,
    *,
    num_classes: int,
    val_dataset: Dataset[Any]
    | np.ndarray
    | torch.Tensor
    | str
    | Path
    | Sequence[Any]
    | None = None,
    out_dir: str | Path,
    config: FinetuneConfig | None = None,
    class_names: Sequence[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    train_labels: Sequence[int] | None = None,
    val_labels: Sequence[int] | None = None,
    task: WindowTask | None = None,
    record: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> FinetuneResult:
    """Fine-tune ``encoder`` (or train from scratch) as an on-grid [CLS] classifier, or, with
    ``context=L`` (:attr:`FinetuneConfig.context`), as a sequence classifier: a temporal
    transformer over L consecutive windows classifies every one of them
    (:class:`~partnd.models.SequenceClassifier`); with ``context="night"`` as a night
    classifier, whose temporal transformer reads the whole record with the time of night
    (:class:`~partnd.models.NightClassifier`; trained on crops of ``night_crop`` windows).

    Args:
        encoder: A pretrained :class:`ViTEncoder` (copied, not modified), a pretrain run
            directory or ``encoder.pt``; ``None`` or an encoder preset name trains from scratch.
            A :class:`~partnd.models.HierarchicalEncoder` (or the run directory of PART across
            windows) gives a sequence or night classifier both its levels, a single-window one its
            window encoder. A trained :class:`~partnd.models.SequenceClassifier` or
            :class:`~partnd.models.NightClassifier` (or its run directory, or its
            ``classifier.pt``) starts a classifier of its own kind whole: both levels, the head
            and a night classifier's time-of-night embedding
            (:mod:`partnd.finetuning.classifier_start`; ``FinetuneConfig.evaluate_start`` makes
            it a candidate of the checkpoint selection); a single-window classifier gets its
            window encoder.
        train_dataset: Items ``(x [C, *spatial], label)``, or an array with ``train_labels``.
            A sequence or night classifier needs consecutive windows: a sleep store path, a
            ``SleepWindowDataset`` or ``InMemoryWindows`` (their records), or a
            ``SleepSequenceDataset`` (``SleepNightDataset``). Every classifier also takes a
            list of store paths (a single-window one: their labelled windows) and datasets, read
            as one :class:`~partnd.datasets.MontageUnion` on the union of their channels (a
            sequence or night classifier: of their sequences or night crops, each part's crops
            within its own records): stores of different montages need ``channel_mode="set"``
            (or a channel-set encoder).
        num_classes: Number of classes K.
        val_dataset: Optional validation set (same forms, ``val_labels`` for an array); the epoch
            with the best Cohen's kappa on it is selected. A channel-set classifier reads store
            data on the training data's channel layout (its channels outside it left out).
        out_dir: Run directory (new or empty unless ``overwrite``/``resume``).
        config: Configuration (default :class:`FinetuneConfig`; on resume, the stored one).
        class_names: K names for reports and the confusion-matrix figure.
        resume: Continue the interrupted run in ``out_dir``.
        overwrite: Clear ``out_dir`` first.
        train_labels: Labels when ``train_dataset`` is an array.
        val_labels: Labels when ``val_dataset`` is an array.
        task: Builds the training loss of a single-window classifier (:data:`WindowTask`;
            ``None``: cross-entropy with the configuration's class weights, label smoothing and
            augmentations, :class:`ClassificationTask`). Not for a sequence or night classifier.
        record: More entries for ``meta.json``'s ``resolved`` (what a caller's run depends on,
            e.g. its task's settings), so that a resumed run can be checked against them.
        **overrides: :class:`FinetuneConfig` field values (``encoder`` among them: the preset
            of a from-scratch encoder; ``encoder`` and ``train_dataset`` above are positional).
            Architecture fields (``encoder``, ``encoder_overrides``, another ``patch_size``)
            are refused with pretrained weights, which bring their own.

    Returns:
        A :class:`FinetuneResult`; ``classifier.pt``, ``metrics.json`` and (with validation)
        ``confusion_matrix.png`` are written to the run directory.
    """
    check(
        isinstance(num_classes, int) and num_classes >= 2,
        "num_classes",
        "an int >= 2",
        repr(num_classes),
    )
    if class_names is not None:
        check(
            len(class_names) == num_classes,
            "class_names",
            f"{num_classes} names (one per class of num_classes)",
            repr(class_names),
        )
    start = trained_classifier(encoder)
    backbone = (
        start.encoder
        if start is not None
        else _load_backbone(cast(ViTEncoder | HierarchicalEncoder | str | Path | None, encoder))
    )
    levels = overrides.get(
        "pretrained_levels", "all" if config is None else config.pretrained_levels
    )
    _check_architecture(backbone, encoder, overrides, temporal_kept=levels != "window")
    with open_session(
        FinetuneConfig, config, overrides, out_dir=out_dir, resume=resume, overwrite=overwrite
    ) as session:
        config = session.config
        check(
            config.stager is None or (backbone is None and not isinstance(encoder, str)),
            "encoder",
            f"None with FinetuneConfig.stager={config.stager!r} (a braindecode stager is "
            "trained from scratch)",
            repr(encoder),
        )
        check(
            config.probe_steps == 0 or backbone is not None,
            "FinetuneConfig.probe_steps",
            "0 when training from scratch (it holds a pretrained encoder fixed while the new "
            "parameters train; pass a pretrained encoder)",
            f"{config.probe_steps} with encoder={encoder!r}",
        )
        check_pretrained_levels(config.pretrained_levels, backbone, encoder)
        device = str(session.context.device)
        torch.manual_seed(config.seed)
        if config.context is None:
            preset = encoder if isinstance(encoder, str) and backbone is None else None
            setup = _window_setup(
                backbone.window if isinstance(backbone, HierarchicalEncoder) else backbone,
                preset,
                train_dataset,
                val_dataset,
                train_labels,
                val_labels,
                num_classes,
                class_names,
                config,
                device,
                task,
            )
        else:  # data a sequence classifier cannot read are refused first, naming them
            check(
                task is None,
                "task",
                "None for a sequence or night classifier (a task hook trains single windows)",
                repr(task),
            )
            setup = _sequence_setup(
                backbone,
                train_dataset,
                val_dataset,
                num_classes=num_classes,
                class_names=class_names,
                config=config,
                device=device,
                start=start,
            )
            for labels, argument in ((train_labels, "train_labels"), (val_labels, "val_labels")):
                check(
                    labels is None,
                    argument,
                    "None for a sequence classifier (labels come from the store)",
                    "labels",
                )
        model = setup.model
        trainer = Trainer(
            model,
            setup.task,
            setup.train_set,
            config,
            context=session.context,
            run_dir=session.run_dir,
            layer_decay=config.layer_decay,
            full_rate=() if config.decay_random_window else full_rate_parameter_names(model),
            freeze=setup.pretrained_parameters if config.probe_steps else (),
            freeze_steps=config.probe_steps,
            evaluate=setup.validate,
            select_metric=SELECT_METRIC if setup.validate is not None else None,
            checkpoint_extra={
                "num_classes": num_classes,
                "data": setup.data_shape,
                "encoder": setup.architecture,
                "signal": setup.signal.to_dict(),
            },
        )
        session.start(
            {
                **trainer.resolved,
                "num_classes": num_classes,
                "class_names": list(class_names) if class_names is not None else None,
                "data": setup.data_shape,
                "num_train_items": len(setup.train_set),  # type: ignore[arg-type]
                "num_val_items": setup.num_val_items,
                **(record or {}),
            },
            data=setup.fingerprints,
        )
        history = trainer.fit(resume_from=session.resume_from)
        final = cast(
            PatchClassifier | SequenceClassifier | NightClassifier | WindowStager | NightStager,
            copy.deepcopy(trainer.eval_model),
        )
        final.class_names = None if class_names is None else list(class_names)
        best_metrics: dict[str, Any]
        if setup.validate is not None:
            best_epoch = trainer.state.best_epoch
            if best_epoch is not None and trainer.checkpoints is not None:
                final.load_state_dict(load_checkpoint(trainer.checkpoints.best_path)["model"])
            report = setup.report(final)
            best_metrics = {"epoch": best_epoch, **report.to_dict()}
            if session.context.is_main:
                save_confusion_matrix(
                    report, session.run_dir.root / "confusion_matrix.png", class_names
                )
        else:
            epochs = [record for record in history if record.get("phase") == "epoch"]
            best_metrics = {
                "epoch": epochs[-1]["epoch"] if epochs else None,
                "loss": epochs[-1]["loss"] if epochs else None,
            }
        if session.context.is_main:
            atomic_write_json(best_metrics, session.run_dir.root / "metrics.json")
            save_model(final, session.run_dir.root / CLASSIFIER_FILE, class_names)
        session.context.barrier()
    return FinetuneResult(
        model=final.cpu().eval(),
        history=history,
        best_metrics=best_metrics,
        run_dir=session.run_dir.root,
        config=config,
    )
