"""Saving and reloading encoders and fine-tuned classifiers.

Files are written atomically (temporary file, then rename) and describe the architecture
(:attr:`ViTEncoder.architecture`, the position embedding and the pooling), so they can be rebuilt
without the config that produced them, and the signal the model was trained on (``"signal"``: a
:class:`~partnd.signal_info.SignalInfo` with channel names, sampling rate and item shape, read back
as ``model.signal_info``; files written before it was recorded load with what the architecture
tells: the channel count and, for a classifier, the item shape):

* ``encoder.pt`` (``partnd-encoder-v2``), written by ``pretrain``; :func:`load_encoder`;
* ``classifier.pt`` (``partnd-classifier-v1``; ``partnd-sequence-classifier-v1`` and
  ``partnd-night-classifier-v1`` for the classifiers that read context), written by ``finetune``;
  :func:`load_classifier`;
* ``classifier.pt`` of a braindecode stager (``partnd-braindecode-stager-v1``: its name, shapes,
  rate and options, :meth:`~partnd.models.braindecode_stagers.WindowStager.spec`);
* ``temporal_encoder.pt`` (``partnd-encoder-v2`` plus ``window_samples``), written with the window
  encoder's ``encoder.pt`` by PART across windows; :func:`load_hierarchical_encoder`.

:func:`load_encoder` also reads a run directory (its ``encoder.pt``, else its
``checkpoints/last.pt``), a training checkpoint (``last.pt``, ``epoch_XXXX.pt``: the EMA weights
when the run had EMA) and a ``classifier.pt`` (its backbone).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from partnd._validation import InputError, check
from partnd.engine.checkpoint import atomic_save, load_checkpoint
from partnd.models.braindecode_stagers import NightStager, WindowStager, build_stager
from partnd.models.classifier import PatchClassifier
from partnd.models.night import NightClassifier
from partnd.models.sequence import HierarchicalEncoder, SequenceClassifier
from partnd.models.vit import ViTEncoder
from partnd.signal_info import SignalInfo

__all__ = [
    "CLASSIFIER_FILE",
    "ENCODER_FILE",
    "TEMPORAL_ENCODER_FILE",
    "encoder_from_spec",
    "encoder_spec",
    "encoder_state_from",
    "load_classifier",
    "load_encoder",
    "load_hierarchical_encoder",
    "read_signal_info",
    "save_classifier",
    "save_encoder",
    "save_hierarchical_encoder",
    "save_model",
    "save_sequence_classifier",
    "save_stager",
]

ENCODER_FILE = "encoder.pt"
CLASSIFIER_FILE = "classifier.pt"
_ENCODER_FORMAT = "partnd-encoder-v2"
_CLASSIFIER_FORMAT = "partnd-classifier-v1"
_TRAIN_FORMAT = "partnd-train-v1"


def encoder_spec(encoder: ViTEncoder) -> dict[str, Any]:
    """What rebuilds ``encoder``'s architecture: constructor arguments, position embedding size
    and mask ratio, and the pooling of its head."""
    return {
        "architecture": dict(encoder.architecture),
        "num_positions": encoder.num_positions,
        "pos_mask_ratio": encoder.pos_mask_ratio,
        "global_pool": encoder.global_pool,
    }


def encoder_from_spec(spec: dict[str, Any]) -> ViTEncoder:
    """A freshly initialised encoder with the architecture of :func:`encoder_spec`'s output."""
    encoder = ViTEncoder(**spec["architecture"])
    if spec["num_positions"] is not None:
        encoder.add_position_embedding(spec["num_positions"], spec["pos_mask_ratio"])
    encoder.reset_classifier(0, spec.get("global_pool", "token"))
    return encoder


def read_signal_info(payload: dict[str, Any]) -> SignalInfo | None:
    """The :class:`SignalInfo` a saved model recorded (``payload["signal"]``), or ``None`` for a
    file written before it was recorded (or by a run that did not know it)."""
    values = payload.get("signal")
    return SignalInfo.from_dict(values) if isinstance(values, dict) else None


def _signal_entry(info: SignalInfo | None) -> dict[str, Any] | None:
    return None if info is None else info.to_dict()


def save_encoder(encoder: ViTEncoder, path: str | Path) -> None:
    """Save an encoder with what is needed to rebuild it (:func:`load_encoder`) and the signal it
    was trained on (``encoder.signal_info``), atomically.

    The classifier head, if any, is not saved.
    """
    state = {k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")}
    payload = {
        "format": _ENCODER_FORMAT,
        **encoder_spec(encoder),
        "signal": _signal_entry(encoder.signal_info),
        "state_dict": state,
    }
    atomic_save(payload, path)


def _resolve(path: str | Path, argument: str) -> Path:
    resolved = Path(path)
    if resolved.is_dir():
        for candidate in (ENCODER_FILE, CLASSIFIER_FILE, "checkpoints/last.pt"):
            if (resolved / candidate).is_file():
                return resolved / candidate
    check(
        resolved.is_file(),
        argument,
        f"an {ENCODER_FILE}, a {CLASSIFIER_FILE}, a training checkpoint (last.pt) or a run "
        "directory holding one",
        f"{path} (no such file)",
    )
    return resolved


def _prefixed(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def _encoder_payload(
    path: Path, argument: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor], SignalInfo | None]:
    """``(spec, encoder state dict, signal info)`` from any file :func:`load_encoder` accepts."""
    payload = load_checkpoint(path, argument)
    kind = payload.get("format")
    signal = read_signal_info(payload)
    if kind == _ENCODER_FORMAT:
        return payload, payload["state_dict"], signal
    if kind == _CLASSIFIER_FORMAT:
        state = _prefixed(payload["state_dict"], "encoder.")
        weights = {k: v for k, v in state.items() if not k.startswith("head.")}
        return payload["encoder"], weights, signal
    if kind == _TRAIN_FORMAT:
        check(
            "encoder" in payload,
            argument,
            "a training checkpoint that records its encoder (written by this partnd version)",
            str(path),
        )
        ema = payload.get("ema")
        model_state = ema["module"] if ema is not None else payload["model"]
        # PART across windows records its window encoder's place in the objective
        state = _prefixed(model_state, payload.get("encoder_prefix", "encoder."))
        weights = {k: v for k, v in state.items() if not k.startswith("head.")}
        return payload["encoder"], weights, signal
    raise InputError(
        f"{argument}: expected a partnd encoder.pt, classifier.pt or training checkpoint, got "
        f"{path} (format {kind!r})"
    )


def load_encoder(path: str | Path) -> ViTEncoder:
    """Rebuild a pretrained (or fine-tuned) encoder.

    Args:
        path: An ``encoder.pt``, a ``classifier.pt`` (its backbone), a training checkpoint
            (``last.pt``; EMA weights when present) or a run directory holding one of them.

    Returns:
        The encoder (no classifier head) on the CPU in eval mode; the signal it was trained on
        (when the file recorded it) is in ``encoder.signal_info``.
    """
    spec, state, signal = _encoder_payload(_resolve(path, "path"), "path")
    encoder = encoder_from_spec(spec)
    encoder.load_state_dict(state)
    encoder.signal_info = signal
    return encoder.eval()


def encoder_state_from(
    source: str | Path,
) -> tuple[dict[str, torch.Tensor], SignalInfo | None]:
    """Encoder weights from any file :func:`load_encoder` accepts, or a plain state dict file.

    Args:
        source: The file or run directory (named ``init_weights`` in error messages).

    Returns:
        The state dict and the signal the weights were trained on (``None`` when the file does
        not say: a plain state dict, or a file written before it was recorded).
    """
    path = _resolve(source, "init_weights")
    payload = load_checkpoint(path, "init_weights")
    if isinstance(payload, dict) and payload and "format" not in payload:
        check(
            all(isinstance(value, torch.Tensor) for value in payload.values()),
            "init_weights",
            "an encoder.pt, a classifier.pt, a training checkpoint or an encoder state dict",
            str(source),
        )
        return dict(payload), None
    _, state, signal = _encoder_payload(path, "init_weights")
    return state, signal


def save_classifier(
    model: PatchClassifier, path: str | Path, class_names: Sequence[str] | None = None
) -> None:
    """Save a fine-tuned classifier with its architecture, class names and the signal it was
    trained on (``model.signal_info``), atomically."""
    payload = {
        "format": _CLASSIFIER_FORMAT,
        "encoder": encoder_spec(model.encoder),
        "num_classes": model.num_classes,
        "spatial_shape": list(model.spatial_shape),
        "class_names": None if class_names is None else list(class_names),
        "signal": _signal_entry(model.signal_info),
        "state_dict": model.state_dict(),
    }
    atomic_save(payload, path)


_STAGER_FORMAT = "partnd-braindecode-stager-v1"


def save_stager(
    model: WindowStager | NightStager, path: str | Path, class_names: Sequence[str] | None = None
) -> None:
    """Save a trained braindecode stager (what rebuilds it, class names, the signal it was trained
    on and its weights), atomically; :func:`load_classifier` reads it."""
    payload = {
        "format": _STAGER_FORMAT,
        "stager": model.spec(),
        "class_names": None if class_names is None else list(class_names),
        "signal": _signal_entry(model.signal_info),
        "state_dict": model.state_dict(),
    }
    atomic_save(payload, path)


_Classifier = TypeVar(
    "_Classifier",
    bound=PatchClassifier | SequenceClassifier | NightClassifier | WindowStager | NightStager,
)


def _restored(model: _Classifier, payload: dict[str, Any]) -> _Classifier:
    """``model`` with the saved weights, class names and signal (when recorded), in eval mode."""
    model.load_state_dict(payload["state_dict"])
    model.class_names = payload["class_names"]
    signal = read_signal_info(payload)
    if signal is not None:
        model.signal_info = signal
    model.eval()
    return model


def _stager(payload: dict[str, Any]) -> WindowStager | NightStager:
    spec = payload["stager"]
    model = build_stager(
        spec["name"],
        n_chans=spec["n_chans"],
        n_outputs=spec["n_outputs"],
        n_times=spec["n_times"],
        sfreq=spec["sfreq"],
        options=spec["options"],
    )
    return _restored(model, payload)


def load_classifier(
    path: str | Path,
) -> PatchClassifier | SequenceClassifier | NightClassifier | WindowStager | NightStager:
    """Rebuild a classifier saved by ``finetune`` (``classifier.pt`` or its run directory).

    Args:
        path: A ``classifier.pt`` or a fine-tuning run directory.

    Returns:
        The :class:`PatchClassifier` (or :class:`SequenceClassifier`, for a run with ``context``;
        :class:`NightClassifier` for ``context="night"``; a braindecode stager for
        ``FinetuneConfig.stager``) on the CPU in eval mode; its class
        names (or ``None``) are
        in ``model.class_names``, the signal it was trained on in ``model.signal_info`` (channel
        names and rate unknown for a file written before they were recorded).
    """
    check(
        isinstance(path, str | Path),
        "path",
        f"a path to a {CLASSIFIER_FILE} or its run directory",
        type(path).__name__,
    )
    resolved = Path(path)
    if resolved.is_dir():
        resolved = resolved / CLASSIFIER_FILE
    check(
        resolved.is_file(),
        "path",
        f"a {CLASSIFIER_FILE} written by partnd.finetune, or its run directory",
        f"{path} (no {CLASSIFIER_FILE})",
    )
    payload = load_checkpoint(resolved)
    check(
        payload.get("format") in (_CLASSIFIER_FORMAT, _STAGER_FORMAT, *_CONTEXT_FORMATS),
        "path",
        f"a {CLASSIFIER_FILE} written by partnd.finetune",
        f"{resolved} (format {payload.get('format')!r})",
    )
    if payload["format"] in _CONTEXT_FORMATS:
        return _context_classifier(payload)
    if payload["format"] == _STAGER_FORMAT:
        return _stager(payload)
    spec = payload["encoder"]
    model = PatchClassifier(
        encoder_from_spec(spec),
        payload["num_classes"],
        spatial_shape=payload["spatial_shape"],
        pos_embed=spec["num_positions"] is not None,
        pos_mask_ratio=spec["pos_mask_ratio"],
        global_pool=spec.get("global_pool", "token"),
        copy_encoder=False,
    )
    return _restored(model, payload)


TEMPORAL_ENCODER_FILE = "temporal_encoder.pt"


def save_hierarchical_encoder(encoder: HierarchicalEncoder, directory: str | Path) -> None:
    """Save a hierarchical encoder as two files of ``directory``, atomically each.

    ``encoder.pt`` holds the window encoder (as :func:`save_encoder`: every single-window tool
    reads it) and ``temporal_encoder.pt`` the temporal encoder in the same format, plus the
    window length ``window_samples`` and the levels pretraining trained (``trained_levels``).
    :func:`load_hierarchical_encoder` reads both back.
    """
    directory = Path(directory)
    save_encoder(encoder.window, directory / ENCODER_FILE)
    payload = {
        "format": _ENCODER_FORMAT,
        **encoder_spec(encoder.temporal),
        "signal": None,
        "window_samples": encoder.window_samples,
        "trained_levels": encoder.trained_levels,
        "state_dict": encoder.temporal.state_dict(),
    }
    atomic_save(payload, directory / TEMPORAL_ENCODER_FILE)


def load_hierarchical_encoder(path: str | Path) -> HierarchicalEncoder:
    """Rebuild the window and temporal encoders pretrained by PART across windows.

    Args:
        path: The run directory (or its ``temporal_encoder.pt``); the window encoder is the
            ``encoder.pt`` beside it.

    Returns:
        The :class:`HierarchicalEncoder` on the CPU in eval mode (the window encoder's training
        signal in ``encoder.window.signal_info``).
    """
    resolved = Path(path)
    directory = resolved if resolved.is_dir() else resolved.parent
    temporal_file, window_file = directory / TEMPORAL_ENCODER_FILE, directory / ENCODER_FILE
    missing = [file.name for file in (temporal_file, window_file) if not file.is_file()]
    check(
        not missing,
        "path",
        f"a run directory of method 'part_windows' holding {TEMPORAL_ENCODER_FILE} and "
        f"{ENCODER_FILE}, or its {TEMPORAL_ENCODER_FILE}",
        f"{path} (missing {', '.join(missing)})",
    )
    payload = load_checkpoint(temporal_file, "path")
    check(
        payload.get("format") == _ENCODER_FORMAT and "window_samples" in payload,
        "path",
        f"a {TEMPORAL_ENCODER_FILE} written by partnd.pretrain",
        f"{temporal_file} (format {payload.get('format')!r})",
    )
    temporal = encoder_from_spec(payload)
    temporal.load_state_dict(payload["state_dict"])
    window = load_encoder(window_file)
    trained_levels = payload.get("trained_levels", "all")  # files before it was recorded: "all"
    return HierarchicalEncoder(
        window, temporal, int(payload["window_samples"]), trained_levels=trained_levels
    ).eval()


_SEQUENCE_CLASSIFIER_FORMAT = "partnd-sequence-classifier-v1"
_NIGHT_CLASSIFIER_FORMAT = "partnd-night-classifier-v1"
_CONTEXT_FORMATS = (_SEQUENCE_CLASSIFIER_FORMAT, _NIGHT_CLASSIFIER_FORMAT)


def save_sequence_classifier(
    model: SequenceClassifier | NightClassifier,
    path: str | Path,
    class_names: Sequence[str] | None = None,
) -> None:
    """Save a fine-tuned sequence classifier (both encoders' architectures, the context, class
    names and the signal it was trained on), or a night classifier (the same without a context),
    atomically; :func:`load_classifier` reads it."""
    night = isinstance(model, NightClassifier)
    payload = {
        "format": _NIGHT_CLASSIFIER_FORMAT if night else _SEQUENCE_CLASSIFIER_FORMAT,
        "window_encoder": encoder_spec(model.encoder.window),
        "temporal_encoder": encoder_spec(model.encoder.temporal),
        "window_samples": model.encoder.window_samples,
        "context": "night" if isinstance(model, NightClassifier) else model.context,
        "num_classes": model.num_classes,
        "class_names": None if class_names is None else list(class_names),
        "signal": _signal_entry(model.signal_info),
        "state_dict": model.state_dict(),
    }
    atomic_save(payload, path)


def save_model(
    model: PatchClassifier | SequenceClassifier | NightClassifier | WindowStager | NightStager,
    path: str | Path,
    class_names: Sequence[str] | None = None,
) -> None:
    """Save any kind of fine-tuned classifier as ``classifier.pt`` (see
    :func:`save_classifier`, :func:`save_sequence_classifier`, :func:`save_stager`)."""
    if isinstance(model, WindowStager | NightStager):
        save_stager(model, path, class_names)
    elif isinstance(model, SequenceClassifier | NightClassifier):
        save_sequence_classifier(model, path, class_names)
    else:
        save_classifier(model, path, class_names)


def _context_classifier(payload: dict[str, Any]) -> SequenceClassifier | NightClassifier:
    window = encoder_from_spec(payload["window_encoder"])
    temporal = encoder_from_spec(payload["temporal_encoder"])
    encoder = HierarchicalEncoder(window, temporal, int(payload["window_samples"]))
    model: SequenceClassifier | NightClassifier
    if payload["format"] == _NIGHT_CLASSIFIER_FORMAT:
        model = NightClassifier(encoder, payload["num_classes"], copy_encoder=False)
    else:
        model = SequenceClassifier(
            encoder, payload["num_classes"], context=payload["context"], copy_encoder=False
        )
    return _restored(model, payload)
