"""Inference with a fine-tuned classifier: per-window predictions and hypnogram export.

>>> model = partnd.load_classifier("runs/ft")              # classifier.pt of a finetune run
>>> hypnograms = partnd.predict_records(model, "my.zarr")   # {record id: Prediction}, one a record
>>> prediction = hypnograms["night1"]
>>> prediction.labels[:5], prediction.probabilities.shape   # (array([2, 2, 3, ...]), (N, 5))
>>> annotations = prediction.to_annotations()               # mne.Annotations, one per 30 s window
>>> prediction.write_csv("night1.csv"); prediction.write_edf("night1.edf")
>>> partnd.predict(model, windows)                          # an array [N, 6, 3000], a dataset...

A :class:`Prediction` is the hypnogram of one recording: window onsets in seconds from the
recording start (a sleep store's ``start_time``) and, when known, the recording's start date
(``meas_date``), which the exports use as their time origin. Stages are named by the classifier's
``class_names`` (recorded by ``finetune``, e.g. the store's ``W, N1, N2, N3, REM``), or ``"0"``...;
annotation descriptions follow :mod:`partnd.datasets.stages` (``"Sleep stage R"`` for REM), so
``partnd ingest`` and :func:`mne.read_annotations` read the exports back to the same stages.

The data are checked against the signal the model was trained on (``model.signal_info``:
channel names, sampling rate, window length): a mismatch is refused, and the model's channels are
picked by name when the data hold them in another order or among others.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from partnd._disk import DiskFullError, is_disk_full
from partnd._validation import InputError, check, check_batch_size, renamed_arguments
from partnd.datasets.adapters import as_signal_dataset, source_positions
from partnd.datasets.hypnogram_formats import EDF_UNKNOWN_START
from partnd.datasets.nights import SleepNightDataset, time_of_night
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.stages import ANNOTATION_PREFIX, stage_description
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_write_text
from partnd.engine.distributed import resolve_device
from partnd.finetuning.sequence import EVALUATION_CROP, predict_nights
from partnd.models.braindecode_stagers import NightStager
from partnd.models.channel_vote import SubsetVote, check_vote, vote_night
from partnd.models.montage import read_data_channels
from partnd.models.night import NightClassifier
from partnd.models.sequence import SequenceClassifier

__all__ = [
    "EDF_UNKNOWN_START",
    "Prediction",
    "RecordingPrediction",
    "predict",
    "predict_logits",
    "predict_recording",
    "predict_records",
]


def predict_logits(
    model: nn.Module, dataset: Dataset[Any], *, batch_size: int = 256, device: str = "auto"
) -> torch.Tensor:
    """Run ``model`` over a dataset of signals without gradient, in eval mode.

    The model is put back on its original device and mode afterwards.

    Args:
        model: Maps ``x: [B, C, *spatial]`` to logits ``[B, K]``.
        dataset: Items ``x [C, *spatial]`` (already checked, e.g. a
            :class:`~partnd.datasets.adapters.SignalDataset`).
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.

    Returns:
        [N, K] float32 logits on the CPU.
    """
    check_batch_size(batch_size)
    target = resolve_device(device)
    first = next(iter(model.parameters()), None)
    original = first.device if first is not None else target
    was_training = model.training
    model.to(target).eval()
    outputs: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for x in DataLoader(dataset, batch_size=batch_size, shuffle=False):
                outputs.append(model(x.to(target)).float().cpu())
    finally:
        model.to(original).train(was_training)
    return torch.cat(outputs)


@dataclass(frozen=True)
class Prediction:
    """The predicted hypnogram of one recording.

    Attributes:
        labels: [N] predicted class indices.
        probabilities: [N, K] softmax probabilities.
        class_names: K names (``"0"``... when the classifier recorded none).
        epoch_seconds: Duration of one window in seconds (30 for sleep staging).
        onsets: [N] window starts in seconds from the recording start, or ``None`` (back to
            back from 0).
        start: The recording's start date and time (``meas_date``; timezone-aware, UTC), or
            ``None`` when unknown.
    """

    labels: np.ndarray
    probabilities: np.ndarray
    class_names: list[str]
    epoch_seconds: float = 30.0
    onsets: np.ndarray | None = None
    start: datetime | None = None

    def __post_init__(self) -> None:
        """Refuse a hypnogram its exports would write distorted (negative or non-finite times,
        labels without a class name), naming the field."""
        labels, probabilities = np.asarray(self.labels), np.asarray(self.probabilities)
        n, k = len(labels), len(self.class_names)
        check(labels.ndim == 1, "labels", "[N] class indices", labels)
        check(
            probabilities.shape == (n, k),
            "probabilities",
            f"[N, K] = [{n}, {k}] probabilities (one row per label, one column per class name)",
            probabilities,
        )
        check(
            labels.dtype.kind in "iu" and (n == 0 or 0 <= labels.min() <= labels.max() < k),
            "labels",
            f"class indices in [0, {k}) (one of class_names)",
            labels,
        )
        check(
            math.isfinite(self.epoch_seconds) and self.epoch_seconds > 0,
            "epoch_seconds",
            "a window duration > 0 in seconds",
            repr(self.epoch_seconds),
        )
        if self.onsets is not None:
            onsets = np.asarray(self.onsets, dtype=np.float64)
            check(
                onsets.shape == (n,) and bool(np.all(np.isfinite(onsets) & (onsets >= 0))),
                "onsets",
                f"{n} finite window starts >= 0 in seconds from the recording start",
                onsets,
            )
        check(
            self.start is None
            or (isinstance(self.start, datetime) and self.start.tzinfo is not None),
            "start",
            "None or a timezone-aware datetime (MNE's meas_date is in UTC)",
            repr(self.start),
        )

    @property
    def stage_names(self) -> list[str]:
        """The predicted class name of every window."""
        return [self.class_names[int(label)] for label in self.labels]

    def window_onsets(self) -> np.ndarray:
        """[N] window starts in seconds."""
        if self.onsets is not None:
            return np.asarray(self.onsets, dtype=np.float64)
        return np.arange(len(self.labels), dtype=np.float64) * self.epoch_seconds

    def descriptions(self, prefix: str = ANNOTATION_PREFIX) -> list[str]:
        """The annotation description of every window (``"Sleep stage R"`` for REM...; see
        :func:`partnd.datasets.stages.stage_description`)."""
        return [stage_description(name, prefix) for name in self.stage_names]

    def to_annotations(self, orig_time: Any = None, prefix: str = ANNOTATION_PREFIX) -> Any:
        """The hypnogram as ``mne.Annotations`` (one per window, ``"Sleep stage N2"``...).

        Args:
            orig_time: ``meas_date`` of the recording the onsets refer to (see MNE); default the
                recording start :attr:`start` (``None`` when unknown).
            prefix: Text before each stage's annotation name.
        """
        import mne

        return mne.Annotations(
            onset=self.window_onsets(),
            duration=np.full(len(self.labels), self.epoch_seconds),
            description=self.descriptions(prefix),
            orig_time=self.start if orig_time is None else orig_time,
        )

    def write_csv(self, path: str | Path) -> None:
        """Write the hypnogram as MNE's annotation CSV (atomically), with the probabilities.

        Columns: ``onset`` (date and time: the recording start plus the window's onset; from
        1970-01-01 when the start is unknown, as MNE writes it), ``duration``, ``description``
        (``"Sleep stage N2"``), then ``stage`` (class name), ``onset_s`` (seconds from the
        recording start) and ``p_<class>`` per class. :func:`mne.read_annotations` reads it (the
        extra columns as ``extras``); so does ``partnd ingest`` as a hypnogram.
        """
        frame = self.to_annotations().to_data_frame()
        frame["stage"] = self.stage_names
        frame["onset_s"] = self.window_onsets()
        for index, name in enumerate(self.class_names):
            frame[f"p_{name}"] = np.round(self.probabilities[:, index], 6)
        buffer = io.StringIO()
        frame.to_csv(buffer, index=False)
        atomic_write_text(buffer.getvalue(), path)

    def write_edf(self, path: str | Path, prefix: str = ANNOTATION_PREFIX) -> None:
        """Write the hypnogram as an annotation-only EDF+ file (pyedflib), readable by
        ``mne.read_annotations``, ``partnd ingest`` and EDF viewers next to the recording.

        The header's start date is the recording's (:attr:`start`), or
        :data:`EDF_UNKNOWN_START` when unknown.
        """
        import pyedflib

        path = Path(path)
        start = (self.start or EDF_UNKNOWN_START).astimezone(timezone.utc).replace(tzinfo=None)
        partial = path.with_name(f".{path.name}.partial")
        try:
            writer = pyedflib.EdfWriter(str(partial), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
            try:
                writer.setStartdatetime(start)
                for onset, description in zip(
                    self.window_onsets(), self.descriptions(prefix), strict=True
                ):
                    writer.writeAnnotation(float(onset), float(self.epoch_seconds), description)
            finally:
                writer.close()
            partial.replace(path)
        except BaseException as error:  # nothing half-written is kept
            partial.unlink(missing_ok=True)
            if is_disk_full(error):
                raise DiskFullError(path) from error
            raise


_StoreWindows = SleepWindowDataset | InMemoryWindows


def _store_windows(dataset: Dataset[Any]) -> tuple[_StoreWindows, np.ndarray] | None:
    """The store windows ``dataset`` reads and, per item, its position in them (a ``Subset``'s
    order kept), or ``None`` for data that are not a store's windows.

    Raises:
        InputError: For windows of several records (a hypnogram is one record's), or store
            windows under a wrapper whose item order is unknown.
    """
    located = source_positions(dataset, (SleepWindowDataset, InMemoryWindows), "data")
    if located is None:
        return None
    source, positions = cast(_StoreWindows, located[0]), located[1]
    records = sorted({source.records[i] for i in source.record_index[positions]})
    check(
        len(records) == 1,
        "data",
        "the windows of one record (a Prediction is one recording's hypnogram; "
        "partnd.predict_records gives one per record)",
        f"windows of {len(records)} records of {source.store_path}",
    )
    return source, positions


def _record_timing(
    source: _StoreWindows, positions: np.ndarray
) -> tuple[np.ndarray, float, datetime | None]:
    """``(onsets, window seconds, recording start)`` of the store windows at ``positions``."""
    store = SleepStore(source.store_path)
    record = source.records[int(source.record_index[positions[0]])]
    onsets = store.start_times(record)[source.window_index[positions]]
    return onsets, source.n_times / source.sfreq, store.record_start(record)


def _window_probabilities(
    model: nn.Module,
    dataset: Dataset[Any],
    located: tuple[_StoreWindows, np.ndarray] | None,
    *,
    onsets: np.ndarray | None,
    epoch_seconds: float,
    batch_size: int,
    device: str,
    vote_channels: Sequence[str] | None = None,
    max_subsets: int = 1,
) -> torch.Tensor:
    """[N, K] probabilities of every window of ``dataset``. A sequence classifier reads store
    windows (``located``) within their record, each run of consecutive windows whole, and other
    windows as one night in their order; a night classifier reads store windows within their
    whole record, and other windows as one night with their time of night (from ``onsets``, else
    back to back every ``epoch_seconds``). With ``vote_channels`` (the data's channel names), a
    soft vote over at most ``max_subsets`` subsets of the present channels
    (:mod:`partnd.models.channel_vote`)."""
    vote = None if vote_channels is None else "subsets"
    if not isinstance(model, SequenceClassifier | NightClassifier | NightStager):
        reader = model if vote_channels is None else SubsetVote(model, vote_channels, max_subsets)
        logits = predict_logits(reader, dataset, batch_size=batch_size, device=device)
        return torch.softmax(logits, dim=1)
    if located is None:
        windows = torch.stack([dataset[i] for i in range(len(dataset))])  # type: ignore[arg-type]
        target = resolve_device(device)
        original, was_training = next(model.parameters()).device, model.training
        try:
            model.to(target).eval()
            if isinstance(model, SequenceClassifier):
                sequence_model = model

                def read(night: torch.Tensor) -> torch.Tensor:
                    return sequence_model.predict_night(night, batch_size=batch_size)
            else:
                starts = np.arange(len(windows)) * epoch_seconds if onsets is None else onsets
                with renamed_arguments({"start_times": "onsets"}):
                    time = time_of_night(starts, epoch_seconds)
                night_model = model

                def read(night: torch.Tensor) -> torch.Tensor:
                    return night_model.predict_night(night, time, batch_size=batch_size)

            with torch.no_grad():
                if vote_channels is None:
                    return read(windows)
                return vote_night(read, windows, vote_channels, max_subsets)
        finally:
            model.to(original).train(was_training)
    source, positions = located
    record = source.records[int(source.record_index[positions[0]])]
    kind = SleepSequenceDataset if isinstance(model, SequenceClassifier) else SleepNightDataset
    nights = kind(
        source.store_path,
        records=[record],
        context=model.context if isinstance(model, SequenceClassifier) else EVALUATION_CROP,
        labelled_only=False,
        normalize=source.normalize,
        channels=list(
            source.ch_names
            if model.signal_info.channel_mode == "set"
            else model.signal_info.ch_names or source.ch_names
        ),
        progress=False,
    )
    by_window = np.full((len(nights.window_labels()), model.num_classes), np.nan, np.float32)
    for night in predict_nights(
        model, nights, batch_size=batch_size, device=device, vote=vote, max_subsets=max_subsets
    ):
        by_window[night.first : night.first + len(night.probabilities)] = night.probabilities
    return torch.from_numpy(by_window[source.window_index[positions]])


def predict(
    model: nn.Module,
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path,
    *,
    class_names: Sequence[str] | None = None,
    epoch_seconds: float | None = None,
    onsets: Sequence[float] | np.ndarray | None = None,
    start: datetime | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> Prediction:
    """Classify every window of ``data``: the hypnogram of one recording.

    Args:
        model: A classifier (e.g. :func:`partnd.load_classifier`'s) mapping ``[B, C, *spatial]``
            to logits; its ``signal_info`` (when it has one) is checked against the data.
        data: Windows ``[N, C, *spatial]`` (array, tensor, ``.npy`` path), a dataset of windows
            or ``(window, label)`` items (labels ignored), or windows of one record of a sleep
            store (a store path holding one record, a
            :class:`~partnd.datasets.SleepWindowDataset` or ``InMemoryWindows``, or a
            ``torch.utils.data.Subset`` of one, nested or in any order): their onsets, window
            length and start date then come from the store, item by item. Store windows under
            another wrapper (a ``ConcatDataset``...) are refused: their onsets are unknown. Use
            :func:`predict_records` for a store of several records. A
            :class:`~partnd.models.SequenceClassifier` reads store windows within their night
            (each run of consecutive windows whole, so a Subset's windows get the
            probabilities they have in the whole night), and other data as one night's
            consecutive windows in the order given; a :class:`~partnd.models.NightClassifier` (or
            braindecode's U-Sleep, :class:`~partnd.models.braindecode_stagers.NightStager`)
            reads store windows within their whole record, and other data as one night with
            its time from ``onsets`` (increasing; default back to back).
        class_names: K names; default the classifier's recorded ``class_names``, else ``"0"``...
        epoch_seconds: Window duration; default the store's, else the model's recorded window
            length, else 30 s.
        onsets: [N] window starts in seconds; default the store's, else back to back from 0.
        start: The recording's start date (default the store record's, else unknown).
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        vote: ``"subsets"``: a channel-set model (``channel_mode="set"``) is run once per subset
            of each window's (a sequence or night classifier: each night's) present channels,
            the others absent, and the class probabilities are averaged (a soft vote, U-Sleep's
            vote over channel combinations; see :mod:`partnd.models.channel_vote`). A
            fixed-channel model refuses it. ``None`` (default): one run with every channel.
        max_subsets: The most subsets per item: all non-empty subsets when there are at most
            this many, else the full set and subsets drawn with a fixed seed. 1 gives the plain
            prediction.

    Returns:
        A :class:`Prediction`.
    """
    check_batch_size(batch_size)
    expected = getattr(model, "signal_info", None)
    voting = check_vote(vote, max_subsets, expected)
    dataset, _ = as_signal_dataset(data, "data", expected=expected)
    read_data_channels(model, dataset.info)
    vote_channels = None
    if voting:
        check(
            dataset.info.ch_names is not None,
            "data",
            "data with channel names to vote over channel subsets",
            "unnamed channels",
        )
        vote_channels = list(dataset.info.ch_names or ())
    located = _store_windows(dataset)
    if located is not None:
        timing = _record_timing(*located)
        onsets = timing[0] if onsets is None else onsets
        epoch_seconds = timing[1] if epoch_seconds is None else epoch_seconds
        start = timing[2] if start is None else start
    if epoch_seconds is None:
        recorded = None if expected is None else expected.window_seconds
        epoch_seconds = 30.0 if recorded is None else recorded
    check(
        math.isfinite(epoch_seconds) and epoch_seconds > 0,
        "epoch_seconds",
        "a window duration > 0 in seconds",
        repr(epoch_seconds),
    )
    check(
        start is None or (isinstance(start, datetime) and start.tzinfo is not None),
        "start",
        "None or a timezone-aware datetime (MNE's meas_date is in UTC)",
        repr(start),
    )
    if onsets is not None:
        check(len(onsets) == len(dataset), "onsets", f"{len(dataset)} onsets", len(onsets))
        onsets = np.asarray(onsets, dtype=np.float64)
        check(
            bool(np.all(np.isfinite(onsets) & (onsets >= 0))),
            "onsets",
            "finite window starts >= 0 in seconds from the recording start",
            onsets,
        )
        check(
            located is not None
            or not isinstance(model, SequenceClassifier | NightClassifier | NightStager)
            or bool(np.all(np.diff(onsets) > 0)),
            "onsets",
            "increasing window starts (a sequence or night classifier reads the windows as one "
            "night, in their order)",
            onsets,
        )
    probabilities = _window_probabilities(
        model,
        dataset,
        located,
        onsets=onsets,
        epoch_seconds=float(epoch_seconds),
        batch_size=batch_size,
        device=device,
        vote_channels=vote_channels,
        max_subsets=max_subsets,
    )
    num_classes = int(probabilities.shape[1])
    names = class_names if class_names is not None else getattr(model, "class_names", None)
    names = [str(k) for k in range(num_classes)] if names is None else list(names)
    check(len(names) == num_classes, "class_names", f"{num_classes} names", repr(names))
    return Prediction(
        labels=probabilities.argmax(dim=1).numpy(),
        probabilities=probabilities.numpy(),
        class_names=names,
        epoch_seconds=float(epoch_seconds),
        onsets=onsets,
        start=None if start is None else start.astimezone(timezone.utc),
    )


@overload
def predict_records(
    model: nn.Module,
    store: str | Path | SleepStore,
    records: Sequence[str] | None = None,
    *,
    class_names: Sequence[str] | None = None,
    normalize: bool | str | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> dict[str, Prediction]: ...


@overload
def predict_records(
    model: nn.Module,
    store: list[str | Path | SleepStore] | tuple[str | Path | SleepStore, ...],
    records: None = None,
    *,
    class_names: Sequence[str] | None = None,
    normalize: bool | str | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> dict[str, dict[str, Prediction]]: ...


def predict_records(
    model: nn.Module,
    store: str
    | Path
    | SleepStore
    | list[str | Path | SleepStore]
    | tuple[str | Path | SleepStore, ...],
    records: Sequence[str] | None = None,
    *,
    class_names: Sequence[str] | None = None,
    normalize: bool | str | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> dict[str, Prediction] | dict[str, dict[str, Prediction]]:
    """One hypnogram per record of a sleep store: every window of each record, classified.

    Several stores (of different montages, for a channel-set model) give one such dictionary per
    store, keyed by the store's path as given (record ids may repeat across stores: a record is
    told apart by its store's key).

    Args:
        model: A classifier (see :func:`predict`).
        store: A sleep store (path or :class:`~partnd.datasets.SleepStore`), or a list of them
            (distinct paths).
        records: Record ids (default: every record of the store; ``None`` for several stores).
        class_names: As :func:`predict`'s.
        normalize: How to normalise the windows (see
            :class:`~partnd.datasets.SleepWindowDataset`); default the model's recorded
            ``signal_info.normalization``, else instance normalisation.
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        vote: ``"subsets"``: a soft vote over channel subsets (see :func:`predict`).
        max_subsets: The most subsets per item (see :func:`predict`).

    Returns:
        ``{record id: Prediction}`` in record order, each with the store's window onsets and the
        recording's start date; for several stores ``{store path: {record id: Prediction}}`` in
        the order given.
    """
    check_batch_size(batch_size)
    check_vote(vote, max_subsets, getattr(model, "signal_info", None))
    if isinstance(store, list | tuple):
        check(bool(store), "store", "a sleep store or a non-empty list of them", "[]")
        check(
            records is None,
            "records",
            "None with several stores (record ids select the records of one store)",
            repr(records),
        )
        keys = [str(part.path if isinstance(part, SleepStore) else part) for part in store]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        check(not repeated, "store", "distinct sleep stores", f"{repeated} more than once")
        return {
            key: predict_records(
                model,
                part,
                class_names=class_names,
                normalize=normalize,
                batch_size=batch_size,
                device=device,
                vote=vote,
                max_subsets=max_subsets,
            )
            for key, part in zip(keys, store, strict=True)
        }
    opened = store if isinstance(store, SleepStore) else SleepStore(store)
    check(
        records is None or not isinstance(records, str),
        "records",
        "None or a sequence of record ids",
        repr(records),
    )
    selected = list(opened.record_ids() if records is None else records)
    check(bool(selected), "store", "a store with at least one record", str(opened.path))
    unknown = sorted(set(selected) - set(opened.record_ids()))
    check(not unknown, "records", f"record ids of {opened.path}", unknown)
    if normalize is None:
        info = getattr(model, "signal_info", None)
        normalize = info.normalization if info is not None and info.normalization else True
    return {
        record: predict(
            model,
            SleepWindowDataset(opened, records=[record], normalize=normalize),
            class_names=class_names,
            batch_size=batch_size,
            device=device,
            vote=vote,
            max_subsets=max_subsets,
        )
        for record in selected
    }


@dataclass(frozen=True)
class RecordingPrediction:
    """What :func:`predict_recording` gives.

    Attributes:
        prediction: The hypnogram of the recording's windows.
        kappa: Cohen's kappa against the recording's own hypnogram, or None without one.
        n_scored: Windows the own hypnogram scores (the windows predicted), or None.
        store: The kept store of the preprocessed recording, or None (nothing kept).
    """

    prediction: Prediction
    kappa: float | None = None
    n_scored: int | None = None
    store: Path | None = None


def predict_recording(
    model: nn.Module,
    recording: str | Path,
    *,
    hypnogram: str | Path | None = None,
    channels: Any = None,
    keep_store: str | Path | None = None,
    batch_size: int = 256,
    device: str = "auto",
    vote: str | None = None,
    max_subsets: int = 16,
) -> RecordingPrediction:
    """Stage a recording file MNE reads (EDF, BDF, FIF, BrainVision, ...) directly.

    The file goes through :func:`partnd.preprocessing.ingest.ingest_file`, the code path of
    ``partnd ingest`` (same channel map, filter, resampling and window grid), into a temporary
    store that is deleted afterwards (or kept at ``keep_store``); then every window is classified
    as :func:`predict_records` does. The result equals ingesting the file and predicting the
    store, window by window.

    Args:
        model: A classifier (see :func:`predict`).
        recording: The recording file.
        hypnogram: The recording's own hypnogram (any format ``partnd ingest`` reads): the
            windows it scores are predicted and Cohen's kappa is computed; without it, every
            window from the first sample.
        channels: Channel map (see :func:`partnd.preprocessing.ingest.ingest_raw`'s
            ``channels``); default: the model's channels when the file holds them all, else the
            EEG channels with 10-20 names.
        keep_store: Keep the preprocessed recording as this store (default: nothing is kept).
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        vote: ``"subsets"``: a soft vote over channel subsets (see :func:`predict`).
        max_subsets: The most subsets per item (see :func:`predict`).

    Returns:
        The hypnogram, and kappa against ``hypnogram`` when given.
    """
    import tempfile

    import mne

    from partnd.datasets.stages import STAGE_NAMES
    from partnd.evaluation.metrics import cohen_kappa, confusion_matrix
    from partnd.preprocessing.errors import RecordError
    from partnd.preprocessing.ingest import ingest_file

    check_vote(vote, max_subsets, getattr(model, "signal_info", None))
    recording = Path(recording)
    check(recording.is_file(), "recording", "an existing recording file", str(recording))
    eeg_channels = None
    info = getattr(model, "signal_info", None)
    if channels is None and info is not None and info.ch_names is not None:
        names = mne.io.read_raw(recording, preload=False, verbose="error").ch_names
        if set(info.ch_names) <= set(names):
            eeg_channels = list(info.ch_names)
    with tempfile.TemporaryDirectory(prefix="partnd-predict-") as scratch:
        store = Path(keep_store) if keep_store is not None else Path(scratch) / "night.zarr"
        record = recording.stem
        try:
            ingest_file(
                recording, hypnogram, store, record, channels=channels, eeg_channels=eeg_channels
            )
        except InputError as error:  # ingest_file calls the recording "path"
            message = str(error)
            if message.startswith("path:"):
                raise InputError("recording:" + message[len("path:") :]) from None
            raise
        except RecordError as error:
            raise InputError(
                f"recording: expected a recording partnd ingest can preprocess, got "
                f"{str(recording)!r} ({error.reason}: {error.detail})"
            ) from None
        prediction = predict_records(
            model,
            store,
            [record],
            batch_size=batch_size,
            device=device,
            vote=vote,
            max_subsets=max_subsets,
        )[record]
        if hypnogram is None:
            return RecordingPrediction(prediction, store=Path(keep_store) if keep_store else None)
        truth = SleepStore(store).stages(record)
    check(
        set(prediction.class_names) <= set(STAGE_NAMES),
        "hypnogram",
        f"a model whose classes are sleep stages {list(STAGE_NAMES)} to compare with it",
        f"classes {prediction.class_names}",
    )
    codes = np.array([STAGE_NAMES.index(name) for name in prediction.stage_names])
    confusion = confusion_matrix(truth, codes, len(STAGE_NAMES))
    return RecordingPrediction(
        prediction,
        kappa=float(cohen_kappa(confusion)),
        n_scored=len(truth),
        store=Path(keep_store) if keep_store is not None else None,
    )
