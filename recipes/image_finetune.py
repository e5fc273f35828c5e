"""DeiT fine-tuning of a (pretrained) ViT on images: :func:`partnd.finetune` with DeiT's task hook.

The paper fine-tunes "adher[ing] strictly to the supervised training protocols recommended in DeiT"
(appendix, "Implementation details"), 400 epochs on CIFAR-100 and 300 on ImageNet-1k at lr 5e-4.
DeiT's recipe (Touvron et al. 2021, ``facebookresearch/deit`` ``main.py`` defaults) is:

| setting | DeiT | here |
|---|---|---|
| per-sample augmentation | RandomResizedCrop (``RandomCrop(32, padding=4)`` at 32 px), flip, RandAugment ``rand-m9-mstd0.5-inc1``, RandomErasing 0.25 | the same with torchvision v2 (:mod:`partnd.recipes.image_data`) |
| batch augmentation | Mixup 0.8 / CutMix 1.0, one of them per batch (``switch_prob`` 0.5, ``mixup_prob`` 1) | ``RandomChoice([MixUp(0.8), CutMix(1.0)])`` |
| loss | soft-target cross-entropy, label smoothing 0.1 folded into the mixed target | :func:`soft_target_cross_entropy`, :func:`smooth_targets` |
| stochastic depth | 0.1 | :func:`set_drop_path` |
| optimiser | AdamW, betas (0.9, 0.999), weight decay 0.05, no gradient clipping | :data:`DEIT_OPTIMISATION` |
| schedule | cosine, 5 warm-up epochs, lr 5e-4 x batch / 512, min lr 1e-5 | the same (engine schedule) |

Added for pretrained encoders as in MAE/BEiT fine-tuning: layer-wise lr decay 0.75; a fresh
position embedding for encoders pretrained without one (the paper's protocol). Not reproduced:
DeiT's repeated augmentation and its EMA of the weights (DeiT reports the raw model).

Mixup/CutMix draw from torch's global generator, which the engine's checkpoints restore, so an
interrupted run resumes exactly (with ``num_workers=0``; per-sample transforms in worker processes
are seeded by the DataLoader).
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from partnd._validation import check
from partnd.datasets.adapters import as_labelled_dataset, data_fingerprint
from partnd.engine.checkpoint import atomic_write_json
from partnd.engine.config import FinetuneConfig
from partnd.engine.distributed import resolve_device
from partnd.engine.run_dir import RunDir
from partnd.finetuning.training import WindowTask, finetune
from partnd.models import PatchClassifier, ViTEncoder
from partnd.models.vit import DropPath

__all__ = [
    "DEIT_OPTIMISATION",
    "DEIT_SETTINGS_FILE",
    "DeiTResult",
    "DeiTSettings",
    "DeiTTask",
    "build_mixer",
    "deit_finetune",
    "deit_task",
    "set_drop_path",
    "smooth_targets",
    "soft_target_cross_entropy",
    "topk_accuracy",
]

DEIT_SETTINGS_FILE = "deit.json"

#: DeiT's optimisation as :class:`FinetuneConfig` fields (``main.py`` defaults; lr 5e-4 at batch
#: 512 is the paper's and DeiT's rule ``lr * batch / 512``; label smoothing 0.1).
DEIT_OPTIMISATION: dict[str, Any] = {
    "lr": 5e-4,
    "lr_reference_batch": 512,
    "min_lr": 1e-5,
    "weight_decay": 0.05,
    "betas": (0.9, 0.999),
    "warmup_epochs": 5.0,
    "grad_clip": None,
    "label_smoothing": 0.1,
    "ema_decay": None,
    "augmentations": None,
    "global_pool": "token",
}


@dataclass(frozen=True)
class DeiTSettings:
    """DeiT's augmentation and regularisation beyond :class:`FinetuneConfig`.

    Attributes:
        crop: Crop policy of :func:`partnd.recipes.image_data.deit_train_transform`
            (``"auto"``: DeiT's).
        rand_augment: ``(num_ops, magnitude)`` of RandAugment, ``None`` for none.
        reprob: Random-erasing probability.
        mixup_alpha: Beta parameter of MixUp (0 disables it).
        cutmix_alpha: Beta parameter of CutMix (0 disables it).
        drop_path: Stochastic depth of the last block (linear from 0).
        eval_crop_ratio: Centre-crop ratio of the evaluation resize (inputs above 32 px).
    """

    crop: str = "auto"
    rand_augment: tuple[int, int] | None = (2, 9)
    reprob: float = 0.25
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    drop_path: float = 0.1
    eval_crop_ratio: float = 0.875

    def __post_init__(self) -> None:
        check(
            self.crop in ("auto", "random_resized_crop", "random_crop"),
            "DeiTSettings.crop",
            "'auto', 'random_resized_crop' or 'random_crop'",
            repr(self.crop),
        )
        if self.rand_augment is not None:
            object.__setattr__(self, "rand_augment", tuple(int(v) for v in self.rand_augment))
        check(0 <= self.reprob <= 1, "DeiTSettings.reprob", "a probability", repr(self.reprob))
        for name in ("mixup_alpha", "cutmix_alpha"):
            value = getattr(self, name)
            check(value >= 0, f"DeiTSettings.{name}", "a number >= 0", repr(value))
        check(0 <= self.drop_path < 1, "DeiTSettings.drop_path", "a rate in [0, 1)", self.drop_path)
        check(
            0 < self.eval_crop_ratio <= 1,
            "DeiTSettings.eval_crop_ratio",
            "a ratio in (0, 1]",
            repr(self.eval_crop_ratio),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form (tuples become lists)."""
        return dict(json.loads(json.dumps(dataclasses.asdict(self))))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DeiTSettings:
        """Inverse of :meth:`to_dict` (unknown keys are refused)."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        check(not unknown, "DeiTSettings", f"fields from {sorted(known)}", ", ".join(unknown))
        return cls(**values)


def soft_target_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """Cross-entropy with soft targets (timm's ``SoftTargetCrossEntropy``).

    Args:
        logits: [B, K] scores.
        target: [B, K] target distributions (rows sum to 1).

    Returns:
        The mean over the batch of ``-sum_k target_k log softmax(logits)_k``.
    """
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def smooth_targets(target: Tensor, smoothing: float) -> Tensor:
    """Label smoothing of (mixed) target distributions: ``(1 - eps) y + eps / K``.

    Smoothing is affine with weights summing to 1, so smoothing a mixed target equals mixing the
    smoothed one-hot targets (what timm's ``mixup_target`` does).

    Args:
        target: [B, K] distributions.
        smoothing: eps in [0, 1).
    """
    if smoothing == 0.0:
        return target
    return target * (1.0 - smoothing) + smoothing / target.shape[-1]


def build_mixer(
    num_classes: int, mixup_alpha: float, cutmix_alpha: float
) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None:
    """DeiT's batch mixing with torchvision: MixUp or CutMix, chosen with equal probability per
    batch when both are on (timm's ``switch_prob=0.5``, ``mixup_prob=1``).

    Args:
        num_classes: K.
        mixup_alpha: MixUp's Beta parameter (0: off).
        cutmix_alpha: CutMix's Beta parameter (0: off).

    Returns:
        ``mix(images [B, C, H, W], labels [B]) -> (images, soft labels [B, K])``, or ``None``
        when both are off.
    """
    from torchvision.transforms import v2

    mixers: list[Any] = []
    if mixup_alpha > 0:
        mixers.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        mixers.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    if not mixers:
        return None
    return cast(
        Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
        mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers),
    )


class DeiTTask:
    """DeiT's loss: Mixup/CutMix on the batch, smoothed soft targets, soft cross-entropy.

    Args:
        num_classes: K.
        label_smoothing: eps of :func:`smooth_targets`.
        mixup_alpha: See :func:`build_mixer`.
        cutmix_alpha: See :func:`build_mixer`.
    """

    def __init__(
        self, num_classes: int, label_smoothing: float, mixup_alpha: float, cutmix_alpha: float
    ) -> None:
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing
        self.mix = build_mixer(num_classes, mixup_alpha, cutmix_alpha)

    def targets(self, x: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Mixed inputs and smoothed soft targets.

        Args:
            x: [B, C, H, W] images.
            labels: [B] int64 labels.

        Returns:
            ``(x [B, C, H, W], target [B, K])``.
        """
        if self.mix is not None:
            x, soft = self.mix(x, labels)
        else:
            soft = F.one_hot(labels, self.num_classes).to(x.dtype)
        return x, smooth_targets(soft.float(), self.label_smoothing)

    def compute_loss(
        self, model: nn.Module, batch: tuple[Tensor, Tensor], generator: torch.Generator
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Args: batch: (x [B, C, H, W], labels [B]). Returns: soft cross-entropy, no metrics."""
        x, labels = batch
        x, target = self.targets(x, labels)
        logits = model(x)
        return soft_target_cross_entropy(logits.float(), target), {}


def set_drop_path(encoder: ViTEncoder, rate: float) -> None:
    """Set the stochastic depth of ``encoder``'s blocks in place: linear from 0 to ``rate``
    (timm/DeiT), recorded in ``encoder.architecture`` so saved models rebuild with it."""
    depth = len(encoder.blocks)
    for block, value in zip(encoder.blocks, torch.linspace(0.0, rate, depth).tolist(), strict=True):
        block.drop_path = DropPath(value)  # type: ignore[union-attr]
    encoder.architecture["drop_path_rate"] = rate


@torch.no_grad()
def topk_accuracy(
    model: nn.Module,
    dataset: Dataset[Any],
    *,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    num_workers: int = 0,
) -> dict[str, float]:
    """Top-1 (and top-5 when there are at least 5 classes) accuracy and cross-entropy.

    The model runs in eval mode on ``device`` and is put back in its previous mode.

    Args:
        model: Maps ``[B, C, H, W]`` to logits ``[B, K]``.
        dataset: ``(x, label)`` items (already evaluation-transformed).
        batch_size: Batch size.
        device: Where to run.
        num_workers: DataLoader workers.

    Returns:
        ``{"top1", "top5" (K >= 5), "loss", "n"}``; accuracies in percent, as the paper's tables.
    """
    was_training = model.training
    model.eval()
    device = torch.device(device)
    parameter = next(model.parameters())
    original = parameter.device
    model.to(device)
    hits1 = hits5 = 0
    loss_sum = 0.0
    count = 0
    num_classes = 0
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    try:
        for x, labels in loader:
            logits = model(x.to(device)).float()
            labels = labels.to(device)
            num_classes = int(logits.shape[-1])
            top = logits.topk(min(5, num_classes), dim=-1).indices
            hits1 += int((top[:, 0] == labels).sum())
            hits5 += int((top == labels[:, None]).any(dim=-1).sum())
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            count += int(labels.shape[0])
    finally:
        model.to(original)
        model.train(was_training)
    check(count > 0, "dataset", "a non-empty test set", "0 items")
    metrics = {"top1": 100.0 * hits1 / count, "loss": loss_sum / count, "n": float(count)}
    if num_classes >= 5:
        metrics["top5"] = 100.0 * hits5 / count
    return metrics


@dataclass
class DeiTResult:
    """Outcome of :func:`deit_finetune`.

    Attributes:
        model: The fine-tuned classifier (CPU, eval mode; the final weights).
        history: The engine's logged records.
        metrics: :func:`topk_accuracy` on the test set, with ``epochs`` trained.
        run_dir: The run directory.
        config: The resolved fine-tuning configuration.
        settings: The DeiT settings.
    """

    model: PatchClassifier
    history: list[dict[str, Any]]
    metrics: dict[str, float]
    run_dir: Path
    config: FinetuneConfig
    settings: DeiTSettings


def _check_resumed(run: RunDir, settings: DeiTSettings, test_fingerprint: dict[str, Any]) -> None:
    """Refuse resuming a run with other DeiT settings or another test set than it started with
    (both recorded in its ``meta.json``)."""
    if not run.meta_path.is_file():
        return
    stored = run.resolved()
    if "deit" in stored:
        before = DeiTSettings.from_dict(stored["deit"])
        check(
            before == settings,
            "settings",
            f"the interrupted run's DeiT settings ({run.meta_path})",
            f"{settings.to_dict()} instead of {before.to_dict()}",
        )
    if "test_dataset" in stored:
        check(
            stored["test_dataset"] == test_fingerprint,
            "test_dataset",
            f"the data the interrupted run in {run.root} was to be tested on when resume=True",
            f"other data ({test_fingerprint} instead of {stored['test_dataset']})",
        )


def deit_task(num_classes: int, settings: DeiTSettings) -> WindowTask:
    """The task hook of :func:`partnd.finetune` for DeiT's recipe: refuses the engine's EEG batch
    augmentations (DeiT's augmentation is per sample, in the dataset), sets the classifier's
    stochastic depth and trains with :class:`DeiTTask`."""

    def build(model: nn.Module, config: FinetuneConfig) -> DeiTTask:
        check(
            isinstance(model, PatchClassifier),
            "FinetuneConfig.stager",
            "None (DeiT fine-tunes a ViT's [CLS] classifier)",
            type(model).__name__,
        )
        assert isinstance(model, PatchClassifier)
        check(
            not config.augmentations,
            "FinetuneConfig.augmentations",
            "None (DeiT's augmentation is per sample, in the dataset)",
            repr(config.augmentations),
        )
        set_drop_path(model.encoder, settings.drop_path)
        return DeiTTask(
            num_classes, config.label_smoothing, settings.mixup_alpha, settings.cutmix_alpha
        )

    return build


def deit_finetune(
    encoder: ViTEncoder | None,
    train_dataset: Dataset[Any],
    test_dataset: Dataset[Any],
    *,
    num_classes: int,
    out_dir: str | Path,
    config: FinetuneConfig | None = None,
    settings: DeiTSettings | None = None,
    class_names: Sequence[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    **overrides: Any,
) -> DeiTResult:
    """Fine-tune ``encoder`` (``None``: train ``config.encoder`` from scratch) with DeiT's recipe
    and report top-1 accuracy on ``test_dataset``.

    The run is :func:`partnd.finetune` with DeiT's task hook (:func:`deit_task`): the on-grid
    [CLS] classifier (:class:`~partnd.models.PatchClassifier`: fresh position embedding unless
    the encoder brings one of the grid's size; ``pos_embed=False`` for none), no validation set;
    the test set is evaluated once, with the final weights (no selection on it).

    Args:
        encoder: A pretrained 2D encoder (copied) or ``None``.
        train_dataset: ``(x [3, S, S], label)`` items, DeiT-augmented per sample.
        test_dataset: ``(x [3, S, S], label)`` items, evaluation-transformed.
        num_classes: K.
        out_dir: Run directory (engine layout plus ``deit.json`` and ``metrics.json``).
        config: Fine-tuning configuration (``None`` on resume: the stored one).
        settings: DeiT settings (default :class:`DeiTSettings`); must match on resume.
        class_names: K names saved with the classifier.
        resume: Continue the interrupted run in ``out_dir``.
        overwrite: Clear ``out_dir`` first.
        **overrides: :class:`FinetuneConfig` field values (``max_steps=None`` on resume...).

    Returns:
        A :class:`DeiTResult`; ``classifier.pt`` and ``metrics.json`` are in the run directory.
    """
    settings = settings or DeiTSettings()
    _, spec = as_labelled_dataset(train_dataset, None, "train_dataset")
    test_set, test_spec = as_labelled_dataset(test_dataset, None, "test_dataset")
    check(
        spec.ndim == 2 and test_spec == spec,
        "test_dataset",
        f"images of the training shape {spec.item_shape}",
        f"{test_spec.item_shape}",
    )
    check(
        encoder is None or isinstance(encoder, ViTEncoder),
        "encoder",
        "a ViTEncoder or None",
        type(encoder),
    )
    test_fingerprint = data_fingerprint(test_set)
    if resume:
        _check_resumed(RunDir(Path(out_dir)), settings, test_fingerprint)
    result = finetune(
        encoder,
        train_dataset,
        num_classes=num_classes,
        out_dir=out_dir,
        config=config,
        class_names=class_names,
        resume=resume,
        overwrite=overwrite,
        task=deit_task(num_classes, settings),
        record={
            "num_test_items": len(test_set),
            "deit": settings.to_dict(),
            "test_dataset": test_fingerprint,
        },
        **overrides,
    )
    final = cast(PatchClassifier, result.model)
    metrics = topk_accuracy(
        final,
        test_set,
        batch_size=result.config.eval_batch_size,
        device=resolve_device(result.config.device),
        num_workers=result.config.num_workers,
    )
    epochs = [int(r["epoch"]) for r in result.history if r.get("phase") == "epoch"]
    metrics["epochs"] = float(max(epochs) + 1 if epochs else 0)
    atomic_write_json(settings.to_dict(), result.run_dir / DEIT_SETTINGS_FILE)
    atomic_write_json(metrics, result.run_dir / "metrics.json")
    return DeiTResult(
        model=final,
        history=result.history,
        metrics=metrics,
        run_dir=result.run_dir,
        config=result.config,
        settings=settings,
    )
