"""partnd: PART (PAirwise Relative Translations) self-supervised pretraining for N-D signals.

The public API lives here; names are imported on first use so that light modules (the sleep store,
preprocessing workers) do not pay for torch.

- Sampling and targets: :class:`OffGridSampler`, :class:`GridSampler`, :class:`PatchBatch`,
  :func:`crop_and_resize`, :func:`relative_targets`, :func:`sample_pairs`, :func:`all_pairs`.
- Models: :class:`ViTEncoder`, :func:`create_encoder`, :func:`list_encoders`, :func:`build_head`,
  :class:`PatchClassifier`.
- Objectives: :class:`PARTModel`, :func:`list_objectives` (``pretrain(method=...)``).
- Training: :func:`pretrain`, :func:`finetune`, :func:`evaluate`, :class:`PretrainConfig`,
  :class:`FinetuneConfig`, :func:`load_encoder`.
- Inference: :func:`load_classifier`, :func:`predict` / :func:`predict_records` /
  :func:`predict_recording` (a recording file staged directly; per-window
  stages with probabilities, one hypnogram per recording, exported as ``mne.Annotations``, CSV
  and EDF+); :class:`SignalInfo` (what a model was trained on: channels, rate, window).
- Frozen-feature evaluation: :func:`linear_probe`, :func:`knn_eval`, :class:`KNNMonitor`,
  :func:`extract_features`; :class:`PretextMonitor` (held-out pretext error, to choose a
  pretraining budget).
- Metrics: :func:`classification_metrics`, :class:`ClassificationReport`.
- Transfer: :func:`transfer` (pretrain on a mixed pool of stores, fine-tune, test and predict on
  a store of another montage; :mod:`partnd.recipes.transfer`).
- Data: :mod:`partnd.datasets` (sample cohort, sleep store, window datasets, splits);
  :class:`MontageUnion` (stores of different montages on the union of their channels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partnd._lazy import lazy_exports

if TYPE_CHECKING:
    from partnd._validation import InputError
    from partnd.datasets.montage_union import MontageUnion
    from partnd.engine.config import FinetuneConfig, PretrainConfig
    from partnd.engine.trainer import NonFiniteLossError
    from partnd.evaluation.capabilities import (
        antisymmetry_score,
        negative_symmetry,
        offgrid_reconstruction,
        patch_uncertainty,
        scale_prediction,
    )
    from partnd.evaluation.metrics import ClassificationReport, classification_metrics
    from partnd.evaluation.probes import (
        KNNMonitor,
        PretextMonitor,
        extract_features,
        knn_eval,
        linear_probe,
    )
    from partnd.finetuning.training import FinetuneResult, evaluate, finetune
    from partnd.inference import Prediction, predict, predict_recording, predict_records
    from partnd.models import (
        PatchClassifier,
        ViTEncoder,
        build_head,
        create_encoder,
        list_encoders,
    )
    from partnd.models.serialization import load_classifier, load_encoder
    from partnd.objectives import PARTModel, list_objectives
    from partnd.patches.sampling import GridSampler, OffGridSampler, PatchBatch, crop_and_resize
    from partnd.patches.targets import all_pairs, relative_targets, sample_pairs
    from partnd.pretraining import PretrainResult, pretrain
    from partnd.recipes.transfer import TransferResult, transfer
    from partnd.signal_info import SignalInfo

from partnd._version import __version__

_EXPORTS: dict[str, str] = {
    "InputError": "partnd._validation",
    "OffGridSampler": "partnd.patches.sampling",
    "GridSampler": "partnd.patches.sampling",
    "PatchBatch": "partnd.patches.sampling",
    "crop_and_resize": "partnd.patches.sampling",
    "relative_targets": "partnd.patches.targets",
    "sample_pairs": "partnd.patches.targets",
    "all_pairs": "partnd.patches.targets",
    "ViTEncoder": "partnd.models",
    "create_encoder": "partnd.models",
    "list_encoders": "partnd.models",
    "build_head": "partnd.models",
    "PARTModel": "partnd.objectives",
    "list_objectives": "partnd.objectives",
    "linear_probe": "partnd.evaluation.probes",
    "knn_eval": "partnd.evaluation.probes",
    "KNNMonitor": "partnd.evaluation.probes",
    "PretextMonitor": "partnd.evaluation.probes",
    "extract_features": "partnd.evaluation.probes",
    "PatchClassifier": "partnd.models",
    "PretrainConfig": "partnd.engine.config",
    "FinetuneConfig": "partnd.engine.config",
    "NonFiniteLossError": "partnd.engine.trainer",
    "pretrain": "partnd.pretraining",
    "PretrainResult": "partnd.pretraining",
    "load_encoder": "partnd.models.serialization",
    "load_classifier": "partnd.models.serialization",
    "MontageUnion": "partnd.datasets.montage_union",
    "predict": "partnd.inference",
    "predict_records": "partnd.inference",
    "predict_recording": "partnd.inference",
    "Prediction": "partnd.inference",
    "SignalInfo": "partnd.signal_info",
    "finetune": "partnd.finetuning.training",
    "FinetuneResult": "partnd.finetuning.training",
    "evaluate": "partnd.finetuning.training",
    "classification_metrics": "partnd.evaluation.metrics",
    "ClassificationReport": "partnd.evaluation.metrics",
    "offgrid_reconstruction": "partnd.evaluation.capabilities",
    "patch_uncertainty": "partnd.evaluation.capabilities",
    "negative_symmetry": "partnd.evaluation.capabilities",
    "scale_prediction": "partnd.evaluation.capabilities",
    "antisymmetry_score": "partnd.evaluation.capabilities",
    "transfer": "partnd.recipes.transfer",
    "TransferResult": "partnd.recipes.transfer",
}

__all__ = [
    "ClassificationReport",
    "FinetuneConfig",
    "FinetuneResult",
    "GridSampler",
    "InputError",
    "KNNMonitor",
    "MontageUnion",
    "NonFiniteLossError",
    "OffGridSampler",
    "PARTModel",
    "PatchBatch",
    "PatchClassifier",
    "Prediction",
    "PretextMonitor",
    "PretrainConfig",
    "PretrainResult",
    "SignalInfo",
    "TransferResult",
    "ViTEncoder",
    "__version__",
    "all_pairs",
    "antisymmetry_score",
    "build_head",
    "classification_metrics",
    "create_encoder",
    "crop_and_resize",
    "evaluate",
    "extract_features",
    "finetune",
    "knn_eval",
    "linear_probe",
    "list_encoders",
    "list_objectives",
    "load_classifier",
    "load_encoder",
    "negative_symmetry",
    "offgrid_reconstruction",
    "patch_uncertainty",
    "predict",
    "predict_recording",
    "predict_records",
    "pretrain",
    "relative_targets",
    "sample_pairs",
    "scale_prediction",
    "transfer",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
