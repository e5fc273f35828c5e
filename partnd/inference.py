"""Inference with a fine-tuned classifier: per-window predictions and hypnogram export.

>>> model = partnd.load_classifier("runs/ft")            # classifier.pt of a finetune run
>>> prediction = partnd.predict(model, windows)           # windows: [N, 6, 3000], a store, ...
>>> prediction.labels[:5], prediction.probabilities.shape  # (array([2, 2, 3, ...]), (N, 5))
>>> annotations = prediction.to_annotations()             # mne.Annotations, one per 30 s window
>>> prediction.write_csv("hypnogram.csv"); prediction.write_edf("hypnogram.edf")

Stages are named by the classifier's ``class_names`` (recorded by ``finetune``, e.g. the store's
``W, N1, N2, N3, R``), or ``"0"...``. Windows are placed back to back from ``onset`` 0 unless
``onsets`` (seconds from the recording start) are given, as the sleep store's ``start_time``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from partnd._validation import check
from partnd.data import as_signal_dataset
from partnd.engine.checkpoint import atomic_write_text
from partnd.engine.distributed import resolve_device

__all__ = ["Prediction", "predict", "predict_logits"]


def predict_logits(
    model: nn.Module, dataset: Dataset[Any], *, batch_size: int = 256, device: str = "auto"
) -> torch.Tensor:
    """Run ``model`` over a dataset of signals without gradient, in eval mode.

    The model is put back on its original device and mode afterwards.

    Args:
        model: Maps ``x: [B, C, *spatial]`` to logits ``[B, K]``.
        dataset: Items ``x [C, *spatial]`` (already checked, e.g. a
            :class:`~partnd.data.SignalDataset`).
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.

    Returns:
        [N, K] float32 logits on the CPU.
    """
    check(batch_size >= 1, "batch_size", "a positive int", repr(batch_size))
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
    """Per-window predictions.

    Attributes:
        labels: [N] predicted class indices.
        probabilities: [N, K] softmax probabilities.
        class_names: K names (``"0"``... when the classifier recorded none).
        epoch_seconds: Duration of one window in seconds (30 for sleep staging).
        onsets: [N] window starts in seconds from the recording start, or ``None`` (back to
            back from 0).
    """

    labels: np.ndarray
    probabilities: np.ndarray
    class_names: list[str]
    epoch_seconds: float = 30.0
    onsets: np.ndarray | None = None

    @property
    def stage_names(self) -> list[str]:
        """The predicted class name of every window."""
        return [self.class_names[int(label)] for label in self.labels]

    def window_onsets(self) -> np.ndarray:
        """[N] window starts in seconds."""
        if self.onsets is not None:
            return np.asarray(self.onsets, dtype=np.float64)
        return np.arange(len(self.labels), dtype=np.float64) * self.epoch_seconds

    def to_annotations(self, orig_time: Any = None, prefix: str = "Sleep stage ") -> Any:
        """The hypnogram as ``mne.Annotations`` (one per window, ``"Sleep stage N2"``...).

        Args:
            orig_time: ``meas_date`` of the recording the onsets refer to (see MNE).
            prefix: Text before each class name (MNE's sleep tutorials use "Sleep stage ").
        """
        import mne

        return mne.Annotations(
            onset=self.window_onsets(),
            duration=np.full(len(self.labels), self.epoch_seconds),
            description=[prefix + name for name in self.stage_names],
            orig_time=orig_time,
        )

    def write_csv(self, path: str | Path) -> None:
        """Write ``onset, duration, stage, p_<class>...`` rows (atomically)."""
        header = ["onset", "duration", "stage", *[f"p_{name}" for name in self.class_names]]
        rows = [",".join(header)]
        for onset, name, probs in zip(
            self.window_onsets(), self.stage_names, self.probabilities, strict=True
        ):
            values = [f"{onset:g}", f"{self.epoch_seconds:g}", name, *[f"{p:.6f}" for p in probs]]
            rows.append(",".join(values))
        atomic_write_text("\n".join(rows) + "\n", path)

    def write_edf(self, path: str | Path, prefix: str = "Sleep stage ") -> None:
        """Write the hypnogram as an annotation-only EDF+ file (pyedflib), readable by
        ``mne.read_annotations`` and EDF viewers next to the recording."""
        import pyedflib

        path = Path(path)
        partial = path.with_name(f".{path.name}.partial")
        writer = pyedflib.EdfWriter(str(partial), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
        try:
            for onset, name in zip(self.window_onsets(), self.stage_names, strict=True):
                writer.writeAnnotation(float(onset), float(self.epoch_seconds), prefix + name)
        finally:
            writer.close()
        partial.replace(path)


def predict(
    model: nn.Module,
    data: Dataset[Any] | np.ndarray | torch.Tensor | str | Path,
    *,
    class_names: Sequence[str] | None = None,
    epoch_seconds: float = 30.0,
    onsets: Sequence[float] | np.ndarray | None = None,
    batch_size: int = 256,
    device: str = "auto",
) -> Prediction:
    """Classify every window of ``data``.

    Args:
        model: A classifier (e.g. :func:`partnd.load_classifier`'s) mapping ``[B, C, *spatial]``
            to logits.
        data: Windows ``[N, C, *spatial]`` (array, tensor, ``.npy`` path or sleep store path),
            or a dataset of windows or ``(window, label)`` items (labels ignored).
        class_names: K names; default the classifier's recorded ``class_names``, else ``"0"``...
        epoch_seconds: Window duration for the hypnogram export.
        onsets: [N] window starts in seconds (default back to back from 0).
        batch_size: Batch size.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.

    Returns:
        A :class:`Prediction`.
    """
    dataset, _ = as_signal_dataset(data, "data")
    logits = predict_logits(model, dataset, batch_size=batch_size, device=device)
    num_classes = int(logits.shape[1])
    names = class_names if class_names is not None else getattr(model, "class_names", None)
    names = [str(k) for k in range(num_classes)] if names is None else list(names)
    check(len(names) == num_classes, "class_names", f"{num_classes} names", repr(names))
    if onsets is not None:
        check(len(onsets) == len(dataset), "onsets", f"{len(dataset)} onsets", len(onsets))
    return Prediction(
        labels=logits.argmax(dim=1).numpy(),
        probabilities=torch.softmax(logits, dim=1).numpy(),
        class_names=names,
        epoch_seconds=epoch_seconds,
        onsets=None if onsets is None else np.asarray(onsets, dtype=np.float64),
    )
