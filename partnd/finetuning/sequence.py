"""Training and scoring a classifier that reads context: the pieces ``finetune(...,
context=L)`` and ``finetune(..., context="night")`` use.

* :func:`as_sequence_dataset`: the sequences of ``L`` consecutive windows a store-backed dataset
  holds (a store path, a ``SleepWindowDataset``, ``InMemoryWindows`` or ``SleepSequenceDataset``),
  or, with ``night=True``, the crops of whole records with their time of night
  (:class:`~partnd.datasets.nights.SleepNightDataset`); a list of them is read as one
  :class:`~partnd.datasets.MontageUnion` of their sequences, on the union of their channels.
* :class:`SequenceClassificationTask`: cross-entropy over every labelled window of a batch of
  sequences (padding and unscored windows carry label ``-1`` and no loss); EEG augmentations
  apply window by window.
* :func:`build_sequence_classifier`: a :class:`~partnd.models.SequenceClassifier` (or, for
  ``context="night"``, a :class:`~partnd.models.NightClassifier`) from scratch, on a pretrained
  window encoder (fresh temporal encoder), or on a pretrained hierarchical encoder (window and
  temporal encoders, e.g. PART across windows; ``FinetuneConfig.pretrained_levels`` keeps one
  of its levels only).
* :func:`predict_nights`: every window of every night of a selection predicted with its context
  (each run of consecutive windows whole, see
  :meth:`~partnd.models.SequenceClassifier.predict_night`; a night classifier reads each record
  whole, :meth:`~partnd.models.NightClassifier.predict_night`), and :func:`evaluate_sequences`,
  its report on the labelled windows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import check, check_batch_size, describe
from partnd.datasets.adapters import source_attribute
from partnd.datasets.montage_union import (
    MontageUnion,
    check_one_montage,
    is_dataset_list,
    union_of,
)
from partnd.datasets.nights import SleepNightDataset, time_of_night
from partnd.datasets.sequences import Night, SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.engine.config import FinetuneConfig
from partnd.engine.distributed import resolve_device
from partnd.evaluation.metrics import ClassificationReport, classification_metrics
from partnd.finetuning.pretrained_levels import check_pretrained_levels, keep_pretrained_levels
from partnd.finetuning.tasks import ClassificationTask
from partnd.models import create_encoder
from partnd.models.braindecode_stagers import NightStager
from partnd.models.channel_vote import check_vote, vote_night
from partnd.models.montage import channel_set_overrides, read_data_channels
from partnd.models.night import ContextClassifier, NightClassifier
from partnd.models.sequence import HierarchicalEncoder, SequenceClassifier, hierarchical_from_window
from partnd.models.vit import ViTEncoder, check_tiles
from partnd.signal_info import SignalInfo, match_signal

__all__ = [
    "EVALUATION_CROP",
    "NightPrediction",
    "SequenceClassificationTask",
    "SequenceData",
    "as_sequence_dataset",
    "backbone_signal",
    "build_sequence_classifier",
    "check_stage_codes",
    "evaluate_sequences",
    "fit_to_signal",
    "predict_nights",
    "sequence_fingerprint",
    "sequence_signal_info",
]


#: The sequences (or night crops) a sequence (night) classifier reads: those of one store, or those
#: of several stores laid out on one channel layout (a :class:`MontageUnion` of sequence parts).
SequenceData = SleepSequenceDataset | MontageUnion

#: Windows per crop when a night classifier's data are adapted without a crop length (for
#: prediction and evaluation, where every record is read whole and the crops are not used).
EVALUATION_CROP = 1


def as_sequence_dataset(
    data: Any,
    context: int | None,
    argument: str = "dataset",
    *,
    progress: bool = False,
    night: bool = False,
    normalize: bool | str | None = None,
    channels: Sequence[str] | None = None,
    absent_channels: bool = False,
) -> SequenceData:
    """The sequences of ``context`` consecutive windows held by a store-backed dataset, or (with
    ``night``) the crops of ``context`` windows of its whole records.

    Args:
        data: A :class:`SleepSequenceDataset` (a :class:`SleepNightDataset` with ``night``) whose
            context is ``context``, another of them or a :class:`SleepWindowDataset` or
            :class:`InMemoryWindows` (the same records, channels and normalisation), or a sleep
            store path (all its records); or a list of these (stores of different montages), read
            as one :class:`MontageUnion` of their sequences, or such a union.
        context: Windows per sequence or crop; ``None`` takes a given dataset of the right kind
            as it is (else crops of :data:`EVALUATION_CROP`: for reading whole nights).
        argument: Name of the caller's argument for messages.
        progress: Show a progress bar while loading.
        night: Crops of whole records with their time of night (a night classifier's data).
        normalize: How a store given by path is read (a model's recorded normalisation;
            ``None``: the store reader's default); a dataset keeps its own.
        channels: The channel layout of a list (default the union of its parts' channels).
        absent_channels: The reader reads absent channels (a channel-set model); otherwise every
            part of a union must hold every channel of its layout (or of ``channels``).

    Returns:
        The dataset (sequences with at least one labelled window), or the union of the parts'.
    """
    kind = SleepNightDataset if night else SleepSequenceDataset
    if is_dataset_list(data) or isinstance(data, MontageUnion):
        return _sequence_union(
            data,
            context,
            argument,
            channels=channels,
            absent_channels=absent_channels,
            progress=progress,
            night=night,
            normalize=normalize,
        )
    if type(data) is kind:
        check(
            context is None or data.context == context,
            argument,
            f"sequences of {context} windows (the classifier's context)",
            f"sequences of {data.context}",
        )
        return data
    length = context if context is not None else EVALUATION_CROP
    if isinstance(data, SleepWindowDataset | InMemoryWindows | SleepSequenceDataset):
        return kind(
            data.store_path,
            records=data.records,
            context=length,
            normalize=data.normalize,
            channels=data.ch_names,
            progress=progress,
        )
    check(
        isinstance(data, str | Path) and (Path(data) / "zarr.json").is_file(),
        argument,
        "a sleep store or a dataset of its windows (SleepWindowDataset, InMemoryWindows, "
        + (
            "SleepNightDataset): a night classifier reads whole records with their time of night"
            if night
            else "SleepSequenceDataset): a sequence classifier reads consecutive windows of a "
            "record"
        ),
        repr(data)
        if isinstance(data, str | Path)
        else describe(data)
        if isinstance(data, np.ndarray | torch.Tensor)
        else type(data).__name__,
    )
    normalization = True if normalize is None else normalize  # the store reader's default
    return kind(Path(data), context=length, progress=progress, normalize=normalization)


def _sequence_union(
    data: Sequence[Any] | MontageUnion,
    context: int | None,
    argument: str,
    *,
    channels: Sequence[str] | None,
    absent_channels: bool,
    **options: Any,
) -> MontageUnion:
    """The :class:`MontageUnion` of the sequences of every part of a list (or a union given),
    checked against its reader (see :func:`as_sequence_dataset`)."""
    reader = None if absent_channels else "a model of fixed channels"
    if isinstance(data, MontageUnion):
        wanted = "night" if options["night"] else "sequence"
        check(
            data.kind == wanted,
            argument,
            f"a MontageUnion of {wanted} datasets (the classifier's items)",
            f"a MontageUnion of {data.kind} datasets",
        )
        check(
            context is None or data.context == context,
            argument,
            f"sequences of {context} windows (the classifier's context)",
            f"sequences of {data.context}",
        )
        if reader is not None:
            check_one_montage(data, argument, reader, channels)
        return data

    def part_sequences(part: Any, name: str) -> SequenceData:
        return as_sequence_dataset(part, context, name, **options)

    parts = [
        part if isinstance(part, str | Path) else part_sequences(part, f"{argument}[{k}]")
        for k, part in enumerate(data)
    ]
    return union_of(parts, argument, part_sequences, channels=channels, one_montage=reader)


def sequence_signal_info(data: SequenceData) -> SignalInfo:
    """The signal of one window of ``data`` (channels with names, rate, samples)."""
    return SignalInfo(
        data.n_chans, (data.n_times,), tuple(data.ch_names), data.sfreq, data.normalize
    )


def backbone_signal(encoder: ViTEncoder | HierarchicalEncoder) -> SignalInfo | None:
    """The signal a (window or hierarchical) encoder was trained on, when it recorded one."""
    window = encoder.window if isinstance(encoder, HierarchicalEncoder) else encoder
    return window.signal_info


def fit_to_signal(
    data: SequenceData,
    expected: SignalInfo | None,
    argument: str,
    *,
    reference: str = "the model was trained on",
) -> SequenceData:
    """``data``, or the same sequences with the model's channels picked by name (a union laid
    out on them), after checking that they fit ``expected`` (see
    :func:`partnd.signal_info.match_signal`)."""
    if expected is None:
        return data
    picked = match_signal(
        expected, sequence_signal_info(data), argument, same_shape=False, reference=reference
    )
    if picked is None:
        return data
    assert expected.ch_names is not None
    if isinstance(data, MontageUnion):
        return MontageUnion(data.datasets, list(expected.ch_names))
    return type(data)(
        data.store_path,
        records=data.records,
        context=data.context,
        stride=data.stride,
        normalize=data.normalize,
        channels=list(expected.ch_names),
        progress=False,
    )


def check_stage_codes(labels: np.ndarray, num_classes: int, argument: str) -> None:
    """Refuse window labels outside ``[-1, num_classes)`` (``-1``: unscored)."""
    scored = labels[labels >= 0]
    check(bool(scored.size), argument, "at least one labelled window", "none")
    check(
        int(labels.min()) >= -1 and int(scored.max()) < num_classes,
        argument,
        f"stage codes in [0, num_classes={num_classes}) (-1 for unscored windows)",
        f"codes in [{int(labels.min())}, {int(labels.max())}]",
    )


def sequence_fingerprint(data: SequenceData) -> dict[str, Any]:
    """What identifies the sequences of a run (records, channels, context, stride, sampling rate
    and how windows are normalised: the same records read another way are other data; and the
    stores of a union), to refuse resuming it on other data."""
    stores = {}
    if isinstance(data, MontageUnion):
        stores = {"stores": [str(source_attribute(part, "store_path")) for part in data.datasets]}
    return {
        **stores,
        "num_items": len(data),
        "item_shape": [data.context, data.n_chans, data.n_times],
        "ch_names": list(data.ch_names),
        "records": list(data.records or ()),
        "stride": data.stride,
        "sfreq": data.sfreq,
        "normalization": data.normalize,
    }


class SequenceClassificationTask(ClassificationTask):
    """Cross-entropy over the labelled windows of a batch of sequences (or night crops).

    Args:
        num_classes: Number of classes K.
        class_weights: ``[K]`` weights or ``None``.
        label_smoothing: Label smoothing in ``[0, 1)``.
        augment: Batch augmentation of windows ``[M, C, T]`` (applied to every window of every
            sequence, padding included) or ``None``.
    """

    def compute_loss(
        self, model: nn.Module, batch: tuple[Tensor, ...], generator: torch.Generator
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Args: batch: (x [B, L, C, T], labels [B, L] with -1 for no label, valid [B, L], and
        what else the model reads after ``valid``, e.g. a night crop's time [B, L, 2]).
        Returns: the mean cross-entropy over labelled windows and the training accuracy."""
        x, labels, valid, *extra = batch
        if self.augment is not None:
            x = self.augment(x.flatten(0, 1), generator).view_as(x)
        logits = model(x, valid, *extra).float().flatten(0, 1)  # [B * L, K]
        flat = labels.flatten()
        loss = F.cross_entropy(
            logits,
            flat,
            weight=self.loss_weight(logits.device),
            ignore_index=-1,
            label_smoothing=self.label_smoothing,
        )
        scored = (flat >= 0).float()
        correct = (logits.detach().argmax(dim=-1) == flat).float() * scored
        accuracy = correct.sum() / scored.sum().clamp(min=1.0)
        chance = accuracy.new_tensor(1.0 / self.num_classes)
        return loss, {"accuracy": accuracy, "accuracy_chance": chance}


def build_sequence_classifier(
    encoder: ViTEncoder | HierarchicalEncoder | None,
    config: FinetuneConfig,
    *,
    num_classes: int,
    in_chans: int,
    window_samples: int,
    ch_names: Sequence[str] | None = None,
) -> ContextClassifier:
    """The classifier ``finetune`` trains with ``config.context``: a sequence classifier over
    that many windows, or a night classifier for ``"night"``.

    Args:
        encoder: ``None`` (from scratch: ``config.encoder`` with ``config.encoder_overrides`` and
            ``config.patch_size`` per window), a pretrained window encoder (a fresh
            ``config.temporal_encoder`` on top) or a pretrained hierarchical encoder (both
            levels kept); ``config.pretrained_levels`` chooses which of its levels are kept
            (:func:`~partnd.finetuning.pretrained_levels.keep_pretrained_levels`).
        config: The fine-tuning configuration (``context`` set).
        num_classes: Number of classes K.
        in_chans: Channels of the data.
        window_samples: Samples T of one window.
        ch_names: The data's channel names (a channel-set encoder, ``config.channel_mode ==
            "set"``, is laid out in them).

    Returns:
        The classifier (the encoder is copied).
    """
    context = config.context
    check(context is not None, "FinetuneConfig.context", "a number of windows or 'night'", "None")
    assert context is not None
    if encoder is not None:
        encoder = keep_pretrained_levels(encoder, config.pretrained_levels, config.seed)
    else:
        check_pretrained_levels(config.pretrained_levels, None, None)
    if encoder is not None and ch_names is not None:
        read_data_channels(encoder, SignalInfo(len(ch_names), (window_samples,), tuple(ch_names)))
    if isinstance(encoder, HierarchicalEncoder):
        check(
            encoder.in_chans == in_chans and encoder.window_samples == window_samples,
            "train_dataset",
            f"windows [{encoder.in_chans}, {encoder.window_samples}] (the encoder's input)",
            f"windows [{in_chans}, {window_samples}]",
        )
        if context == "night":
            return NightClassifier(encoder, num_classes)
        return SequenceClassifier(encoder, num_classes, context=context)
    window = encoder
    if window is None:
        window = create_encoder(
            config.encoder,
            in_chans=in_chans,
            patch_size=config.patch_size,
            ndim=1,
            **(
                channel_set_overrides(config.encoder_overrides, ch_names, config.channel_options)
                if config.channel_mode == "set"
                else config.encoder_overrides
            ),
        )
    check(
        window.in_chans == in_chans and window.ndim == 1,
        "train_dataset",
        f"windows [{window.in_chans}, T] of a 1D signal (the encoder's input)",
        f"windows [{in_chans}, {window_samples}]",
    )
    patch = "FinetuneConfig.patch_size" if encoder is None else "encoder"
    check_tiles((window_samples,), window.patch_size, patch)
    hierarchical = hierarchical_from_window(
        window, window_samples, config.temporal_encoder, config.temporal_overrides
    )
    if context == "night":
        return NightClassifier(hierarchical, num_classes, copy_encoder=False)
    return SequenceClassifier(hierarchical, num_classes, context=context, copy_encoder=False)


@dataclass(frozen=True)
class NightPrediction:
    """Predictions of every window of one run of consecutive windows.

    Attributes:
        record: Record id.
        first: Index of the run's first window in the record.
        probabilities: [N, K] probabilities (each window read with its context).
        labels: [N] true stages (``-1`` unscored).
        start_times: [N] window starts in seconds from the recording start.
        store: Path of the record's store (record ids may repeat across the stores of a
            :class:`MontageUnion`).
    """

    record: str
    first: int
    probabilities: np.ndarray
    labels: np.ndarray
    start_times: np.ndarray
    store: str | None = None


def _night_probabilities(
    model: ContextClassifier | NightStager,
    night: Night,
    window_seconds: float,
    batch_size: int,
    vote_channels: Sequence[str] | None = None,
    max_subsets: int = 1,
) -> np.ndarray:
    """[N, K] probabilities of one night's windows (a night classifier reads their time too),
    voted over subsets of the night's channels ``vote_channels`` when given
    (:func:`~partnd.models.channel_vote.vote_night`)."""
    if isinstance(model, NightClassifier | NightStager):
        time = time_of_night(night.start_times, window_seconds)
        stager = model

        def read(windows: torch.Tensor) -> torch.Tensor:
            return stager.predict_night(windows, time, batch_size=batch_size)
    else:
        sequence_model = model

        def read(windows: torch.Tensor) -> torch.Tensor:
            return sequence_model.predict_night(windows, batch_size=batch_size)

    if vote_channels is None:
        return read(night.windows).numpy()
    return vote_night(read, night.windows, vote_channels, max_subsets).numpy()


@torch.no_grad()
def predict_nights(
    model: ContextClassifier | NightStager,
    data: SequenceData,
    *,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> list[NightPrediction]:
    """Predict every window of every night of ``data`` with its context.

    The model runs in eval mode on ``device`` and is put back on its device and mode afterwards.

    Args:
        model: The sequence classifier, or a night classifier (or a braindecode night stager);
            a channel-set model is switched to the data's channels first.
        data: The nights (its :meth:`~SleepSequenceDataset.nights`: one per run of a record; a
            night classifier's data are a :class:`SleepNightDataset`, one night per record; or
            a :class:`MontageUnion` of them, every store's nights on its layout).
        batch_size: Windows (and sequences) per forward pass.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        vote: ``"subsets"``: a channel-set model reads every night once per subset of its
            channels and the probabilities are averaged (a soft vote; see
            :mod:`partnd.models.channel_vote`); ``None``: once, with all channels.
        max_subsets: The most subsets a night votes over.

    Returns:
        One :class:`NightPrediction` per run (per record for a night classifier), in the data's
        record order (store after store), each with its store.
    """
    check_batch_size(batch_size)
    voting = check_vote(vote, max_subsets, getattr(model, "signal_info", None))
    vote_channels = list(data.ch_names) if voting else None
    check(
        not isinstance(model, NightClassifier | NightStager)
        or isinstance(data, SleepNightDataset)
        or (isinstance(data, MontageUnion) and data.kind == "night"),
        "data",
        "a SleepNightDataset (or a MontageUnion of them) for a night classifier (it reads whole "
        "records with their time)",
        repr(data) if isinstance(data, MontageUnion) else type(data).__name__,
    )
    read_data_channels(model, sequence_signal_info(data))  # a channel-set model: any montage
    target = resolve_device(device)
    original = next(model.parameters()).device
    was_training = model.training
    model.to(target).eval()
    try:
        return [
            NightPrediction(
                record=night.record,
                first=night.first,
                probabilities=_night_probabilities(
                    model, night, data.window_seconds, batch_size, vote_channels, max_subsets
                ),
                labels=night.labels.numpy(),
                start_times=night.start_times,
                store=night.store,
            )
            for night in data.nights()
        ]
    finally:
        model.to(original).train(was_training)


def evaluate_sequences(
    model: ContextClassifier | NightStager,
    data: SequenceData,
    *,
    class_names: Sequence[str] | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> ClassificationReport:
    """Score whole-night predictions on the labelled windows of ``data`` (``vote`` and
    ``max_subsets`` as :func:`predict_nights`').

    Returns:
        Accuracy, Cohen's kappa, F1, the confusion matrix and the cross-entropy of the averaged
        probabilities (``loss``).
    """
    nights = predict_nights(
        model, data, batch_size=batch_size, device=device, vote=vote, max_subsets=max_subsets
    )
    probabilities = np.concatenate([night.probabilities for night in nights])
    labels = np.concatenate([night.labels for night in nights])
    scored = labels >= 0
    check(bool(scored.any()), "dataset", "at least one labelled window", "none")
    truth, probs = labels[scored], probabilities[scored]
    names = class_names if class_names is not None else model.class_names
    report = classification_metrics(truth, probs.argmax(axis=1), model.num_classes, names)
    loss = F.nll_loss(
        torch.from_numpy(probs).clamp(min=1e-12).log(), torch.from_numpy(truth).long()
    )
    return dataclasses.replace(report, loss=float(loss))
