"""COCO detection transfer: a pretrained ViT in torchvision's Mask R-CNN (ViTDet), 1x schedule.

The paper fine-tunes "Mask R-CNN ... with 1x schedule (12 epochs) and 1024x1024 resolution ... the
configuration of ViTDet ... ViT-B/16" and reports AP^b, AP^b_50 and AP^b_75 (appendix, "Object
detection"). This recipe does that on a local COCO copy with :func:`partnd.models.vitdet.build_vitdet_mask_rcnn`:

* **data**: ``ROOT/annotations/instances_{train,val}2017.json`` and ``ROOT/{train,val}2017/``
  images, read by ``torchvision.datasets.CocoDetection`` wrapped for ``transforms.v2`` (boxes,
  labels and instance masks from polygons or RLE); category ids are mapped to contiguous labels
  ``1..K`` (0 is the background); crowd annotations are ignored in training and images without a
  usable annotation are skipped (detectron2's ``filter_empty_annotations``);
* **augmentation** (ViTDet): large-scale jitter (``ScaleJitter`` of a ``S x S`` target in
  ``[0.1, 2.0]``, then a ``S x S`` crop, padded when smaller) and a horizontal flip;
* **optimisation** (ViTDet's ``mask_rcnn_vitdet_b``): AdamW, lr 1e-4 at batch 64 (scaled
  linearly with the batch), betas (0.9, 0.999), weight decay 0.1 (none on norms, biases and the
  position embedding), layer-wise decay 0.7, drop path 0.1, 250 warm-up steps from 0.001 x lr,
  x0.1 at epochs 8 and 11 of 12 (the 1x schedule; scaled with ``epochs``);
* **evaluation**: ``pycocotools`` ``COCOeval`` on the validation split for boxes and masks.

Commands (each skips what is finished; an interrupted training resumes from its checkpoint)::

    python -m partnd.recipes.coco_detection train    --root ~/data/coco --out runs/coco_part \\
        --encoder runs/in1k/pretrain/part/run --name part
    python -m partnd.recipes.coco_detection evaluate --root ~/data/coco --out runs/coco_part --name part
    python -m partnd.recipes.coco_detection all      --root ~/data/coco --out runs/coco_part \\
        --encoder runs/in1k/pretrain/part/run --name part

Training runs on the engine's :class:`~partnd.engine.trainer.Trainer` (:class:`DetectionTask`,
the 1x schedule as its learning rate): its checkpoints carry the model, optimiser, schedule and
every RNG state, so an interrupted training resumes exactly; each epoch's last incomplete batch
is dropped. The run directory holds ``settings.json``, ``meta.json``, ``checkpoints/last.pt``,
``metrics.jsonl``/``metrics.csv``/``tb/`` (losses), ``model.pt`` and ``train_result.json``
(training finished), ``detections_{bbox,segm}.json``, ``metrics.json`` and the table
``detection.{csv,md,json}`` (measured next to the paper's numbers).
Without ``--encoder`` the backbone is a randomly initialised ``--set encoder=...`` (from scratch).
Not reproduced: ViTDet's relative position biases (see :mod:`partnd.models.vitdet`) and its 100-epoch
schedule; the per-sample augmentation of worker processes (``num_workers > 0``) is not restored
exactly on resume (with 0 workers it is).
"""  # noqa: E501

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from partnd._validation import check
from partnd.cli.options import add_switch
from partnd.engine.checkpoint import atomic_save, atomic_write_json, load_checkpoint
from partnd.engine.config import TrainConfig
from partnd.engine.distributed import DistributedContext, resolve_device
from partnd.engine.run_dir import RunDir, run_metadata
from partnd.engine.trainer import Trainer
from partnd.models import ViTEncoder, create_encoder
from partnd.models.serialization import encoder_from_spec, encoder_spec, load_encoder
from partnd.models.vitdet import build_vitdet_mask_rcnn
from partnd.recipes.report_files import write_table
from partnd.recipes.study_directory import run_recipe

__all__ = [
    "AP_KEYS",
    "PAPER_AP",
    "STAGES",
    "TABLE_KEYS",
    "TRAIN_RESULT_FILE",
    "CocoTrainTransform",
    "DetectionConfig",
    "DetectionTask",
    "build_parser",
    "coco_categories",
    "collate",
    "evaluate",
    "learning_rate",
    "load_coco_train",
    "load_coco_val",
    "main",
    "train",
    "train_config",
]

STAGES = ("train", "evaluate", "all")

#: Written last by :func:`train`: the training has finished (``RunDir.finished``).
TRAIN_RESULT_FILE = "train_result.json"

#: Keys of :func:`evaluate`'s metrics, in ``COCOeval.stats`` order, for boxes then masks.
AP_KEYS = (
    "ap_b",
    "ap_b50",
    "ap_b75",
    "ap_b_small",
    "ap_b_medium",
    "ap_b_large",
    "ap_m",
    "ap_m50",
    "ap_m75",
    "ap_m_small",
    "ap_m_medium",
    "ap_m_large",
)

#: The AP columns of the table: the paper's three for boxes, the same for masks.
TABLE_KEYS = ("ap_b", "ap_b50", "ap_b75", "ap_m", "ap_m50", "ap_m75")

#: The paper's COCO numbers (AP^b, AP^b_50, AP^b_75): the detection table (MAE from DropPos'
#: paper), PART-grid from the sampling ablation, PART with scale boxes from the extension table.
PAPER_AP: dict[str, tuple[float, float | None, float | None]] = {
    "mae": (40.1, 60.5, 44.1),
    "mp3": (41.8, 61.4, 46.0),
    "droppos": (42.1, 62.0, 46.4),
    "part": (42.4, 62.5, 46.8),
    "part_grid": (41.4, None, None),
    "part_scale": (42.0, 61.8, 46.3),
}


@dataclass(frozen=True)
class DetectionConfig:
    """Fine-tuning settings (ViTDet-B's 1x Mask R-CNN by default).

    Attributes:
        image_size: Side S of the (jittered, cropped, padded) inputs; evaluation resizes the
            longer side to S.
        epochs: Training epochs (12: the 1x schedule).
        decay_epochs: Epochs after which the rate is multiplied by ``decay_factor``; scaled by
            ``epochs / 12`` (8 and 11 of 12).
        decay_factor: Step decay factor.
        batch_size: Images per step.
        lr: Rate at ``lr_reference_batch`` images per step, scaled linearly with ``batch_size``.
        lr_reference_batch: Batch of ``lr`` (ViTDet: 64).
        weight_decay: AdamW decay of weight matrices.
        layer_decay: Layer-wise rate decay of the ViT blocks (the heads and pyramid get 1).
        betas: AdamW betas.
        warmup_steps: Linear warm-up steps.
        warmup_factor: Rate factor at step 0 of the warm-up.
        drop_path: Stochastic depth of the last block.
        window_size: Attention window (patches) of the non-global blocks; 0 for global only.
        pyramid_channels: Width of the feature pyramid and of the head convolutions (256).
        fc_dim: Width of the box head's fully connected layer (1024).
        rois_per_image: Sampled RoIs per training image for the box and mask heads (512).
        scale_jitter: Range of large-scale jitter (``None``: no jitter, only the flip).
        encoder: Encoder preset built when no pretrained encoder is given.
        patch_size: Patch size of that encoder.
        precision: ``"auto"`` (bf16 where the device runs it fast, else fp32; see
            :mod:`partnd.engine.precision`), ``"bf16"`` (autocast) or ``"fp32"``.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        num_workers: DataLoader workers.
        seed: Shuffling, initialisation and augmentation seed.
        train_subset: Training images used (the first ones of the seeded order; ``None``: all).
        val_subset: Validation images evaluated (the first ones by id; ``None``: all).
        checkpoint_every_steps: Also checkpoint every this many steps (every epoch regardless).
        log_every_steps: Steps between logged loss records.
        detections_per_image: Detections kept per image (COCO: 100).
    """

    image_size: int = 1024
    epochs: int = 12
    decay_epochs: tuple[float, ...] = (8.0, 11.0)
    decay_factor: float = 0.1
    batch_size: int = 16
    lr: float = 1e-4
    lr_reference_batch: int = 64
    weight_decay: float = 0.1
    layer_decay: float = 0.7
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 250
    warmup_factor: float = 0.001
    drop_path: float = 0.1
    window_size: int = 14
    pyramid_channels: int = 256
    fc_dim: int = 1024
    rois_per_image: int = 512
    scale_jitter: tuple[float, float] | None = (0.1, 2.0)
    encoder: str = "vit_base"
    patch_size: int = 16
    precision: str = "auto"
    device: str = "auto"
    num_workers: int = 0
    seed: int = 0
    train_subset: int | None = None
    val_subset: int | None = None
    checkpoint_every_steps: int = 1000
    log_every_steps: int = 20
    detections_per_image: int = 100

    def __post_init__(self) -> None:
        for name in ("decay_epochs", "betas", "scale_jitter"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
        positive = (
            "image_size",
            "epochs",
            "batch_size",
            "lr_reference_batch",
            "patch_size",
            "pyramid_channels",
            "fc_dim",
            "rois_per_image",
        )
        for name in positive:
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, name, "an int >= 1", repr(value))
        check(self.lr > 0, "lr", "a rate > 0", repr(self.lr))
        check(0 < self.layer_decay <= 1, "layer_decay", "a factor in (0, 1]", self.layer_decay)
        check(
            self.precision in ("auto", "bf16", "fp32"),
            "precision",
            "'auto', 'bf16' or 'fp32'",
            self.precision,
        )
        check(self.warmup_steps >= 0, "warmup_steps", "an int >= 0", repr(self.warmup_steps))
        if self.scale_jitter is not None:
            low, high = self.scale_jitter
            check(0 < low <= high, "scale_jitter", "(low, high) with 0 < low <= high", (low, high))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (tuples become lists)."""
        return dict(json.loads(json.dumps(dataclasses.asdict(self))))

    @classmethod
    def field_names(cls) -> list[str]:
        """Every field's name."""
        return [spec.name for spec in dataclasses.fields(cls)]


def coco_categories(annotation_file: str | Path) -> list[dict[str, Any]]:
    """The categories of a COCO annotation file, sorted by id (label ``k + 1`` is entry ``k``)."""
    data = json.loads(Path(annotation_file).read_text())
    check("categories" in data, "annotations", "a COCO file with categories", str(annotation_file))
    return sorted(data["categories"], key=lambda category: int(category["id"]))


def _split_paths(root: Path, split: str) -> tuple[Path, Path]:
    images = root / f"{split}2017"
    annotations = root / "annotations" / f"instances_{split}2017.json"
    check(
        images.is_dir() and annotations.is_file(),
        "--root",
        f"a COCO root with annotations/instances_{split}2017.json and {split}2017/",
        f"{root} (missing {images if not images.is_dir() else annotations})",
    )
    return images, annotations


class CocoTrainTransform:
    """Training transform of a wrapped COCO item: drop crowd objects, map category ids to labels
    ``1..K``, large-scale jitter, crop, flip, float image in [0, 1], drop degenerate boxes.

    Args:
        label_of: COCO category id -> contiguous label.
        image_size: Crop side S.
        scale_jitter: Jitter range of ``ScaleJitter`` (``None``: no jitter and no crop).
    """

    def __init__(
        self, label_of: dict[int, int], image_size: int, scale_jitter: tuple[float, float] | None
    ) -> None:
        from torchvision.transforms import v2

        self.label_of = label_of
        steps: list[Any] = [v2.ToImage()]
        if scale_jitter is not None:
            steps += [
                v2.ScaleJitter((image_size, image_size), scale_range=scale_jitter, antialias=True),
                v2.RandomCrop((image_size, image_size), pad_if_needed=True),
            ]
        steps += [
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.ClampBoundingBoxes(),
            v2.SanitizeBoundingBoxes(min_size=1.0),
        ]
        self.transform = v2.Compose(steps)

    def __call__(self, image: Any, target: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """Args: image: PIL image; target: ``boxes`` [n, 4] XYXY, ``labels`` [n] (category ids),
        ``masks`` [n, H, W], ``iscrowd`` [n]. Returns: ``(image [3, S, S], target)`` with
        ``boxes``, ``labels`` (1..K) and ``masks`` of the kept objects."""
        from torchvision import tv_tensors

        keep = torch.as_tensor(target["iscrowd"]) == 0
        labels = torch.tensor([self.label_of[int(c)] for c in target["labels"]], dtype=torch.long)
        kept = {
            "boxes": tv_tensors.wrap(target["boxes"][keep], like=target["boxes"]),
            "labels": labels[keep],
            "masks": tv_tensors.Mask(target["masks"][keep]),
        }
        image, result = self.transform(image, kept)
        return image, {key: value.as_subclass(Tensor) for key, value in result.items()}


def load_coco_train(root: str | Path, config: DetectionConfig) -> tuple[Dataset[Any], int]:
    """The training split, ready for Mask R-CNN.

    Args:
        root: COCO root (``annotations/instances_train2017.json``, ``train2017/``).
        config: Image size, jitter, subset and seed.

    Returns:
        ``(dataset, num_classes)``: items ``(image [3, S, S] in [0, 1], {"boxes" [n, 4] XYXY,
        "labels" [n] in 1..K, "masks" [n, S, S] uint8})``; ``num_classes = K + 1``.
    """
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    images, annotations = _split_paths(Path(root), "train")
    categories = coco_categories(annotations)
    label_of = {int(category["id"]): k + 1 for k, category in enumerate(categories)}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its index timings
        dataset = CocoDetection(
            str(images),
            str(annotations),
            transforms=CocoTrainTransform(label_of, config.image_size, config.scale_jitter),
        )
    usable = [
        image_id
        for image_id in dataset.ids
        if any(
            not annotation.get("iscrowd", 0) and min(annotation["bbox"][2:]) >= 1
            for annotation in dataset.coco.imgToAnns[image_id]
        )
    ]
    check(bool(usable), "--root", "training images with at least one object", "none")
    order = np.random.default_rng(config.seed).permutation(len(usable))
    if config.train_subset is not None:
        order = np.sort(order[: config.train_subset])
    dataset.ids = [usable[i] for i in order]
    wrapped = wrap_dataset_for_transforms_v2(
        dataset, target_keys={"boxes", "labels", "masks", "iscrowd"}
    )
    return wrapped, len(categories) + 1


class _CocoImages(Dataset[tuple[Tensor, int]]):
    """Validation images as float tensors in [0, 1] with their COCO image id."""

    def __init__(self, images: Path, coco: Any, ids: Sequence[int]) -> None:
        self.images = images
        self.coco = coco
        self.ids = list(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        from PIL import Image
        from torchvision.transforms.v2 import functional as TF

        image_id = self.ids[index]
        name = self.coco.loadImgs(image_id)[0]["file_name"]
        with Image.open(self.images / name) as image:
            tensor = TF.to_dtype(TF.to_image(image.convert("RGB")), torch.float32, scale=True)
        return tensor, image_id


def load_coco_val(root: str | Path, subset: int | None = None) -> tuple[Dataset[Any], Any]:
    """The validation split for evaluation.

    Returns:
        ``(dataset, coco)``: items ``(image [3, H, W] in [0, 1], image_id)`` (the first
        ``subset`` ids in order), and the ground truth as a ``pycocotools.coco.COCO``.
    """
    from pycocotools.coco import COCO

    images, annotations = _split_paths(Path(root), "val")
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(annotations))
    ids = sorted(coco.getImgIds())[:subset]
    check(bool(ids), "--root", "validation images", "none")
    return _CocoImages(images, coco, ids), coco


def collate(batch: Sequence[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Detection batches are lists (images of different sizes): ``[(x, y), ...] -> ([x...],
    [y...])``."""
    images, targets = zip(*batch, strict=True)
    return list(images), list(targets)


def learning_rate(step: int, steps_per_epoch: int, config: DetectionConfig) -> float:
    """The 1x schedule's rate at optimiser step ``step`` (0-based).

    ``lr * batch / lr_reference_batch``, times the linear warm-up factor (``warmup_factor`` at
    step 0, 1 at ``warmup_steps``), times ``decay_factor`` per passed milestone (the
    ``decay_epochs`` scaled by ``epochs / 12``).
    """
    base = config.lr * config.batch_size / config.lr_reference_batch
    if step < config.warmup_steps:
        fraction = step / config.warmup_steps
        base *= config.warmup_factor + (1.0 - config.warmup_factor) * fraction
    milestones = [round(e * config.epochs / 12 * steps_per_epoch) for e in config.decay_epochs]
    return base * config.decay_factor ** sum(step >= m for m in milestones)


def _build_model(encoder: ViTEncoder, num_classes: int, config: DetectionConfig) -> nn.Module:
    return build_vitdet_mask_rcnn(
        encoder,
        num_classes,
        image_size=config.image_size,
        out_channels=config.pyramid_channels,
        fc_dim=config.fc_dim,
        window_size=config.window_size or None,
        drop_path_rate=config.drop_path,
        box_detections_per_img=config.detections_per_image,
        box_batch_size_per_image=config.rois_per_image,
    )


class DetectionTask:
    """Mask R-CNN's training loss for :class:`~partnd.engine.trainer.Trainer`: the sum of the
    RPN, box and mask losses torchvision's model returns in training mode."""

    def compute_loss(
        self, model: nn.Module, batch: tuple[list[Tensor], list[dict[str, Tensor]]], generator: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Args: model: the (possibly DDP-wrapped) Mask R-CNN; batch: ``(images [3, S, S] each,
        targets)`` from :func:`collate`, on the device; generator: unused (the augmentation
        draws from torch's global generator, which the trainer's checkpoints restore).

        Returns:
            The summed loss and each loss term, detached (logged as diagnostics).
        """
        images, targets = batch
        losses: dict[str, Tensor] = model(list(images), list(targets))
        loss = torch.stack(list(losses.values())).sum()
        return loss, {name: value.detach() for name, value in losses.items()}


def train_config(config: DetectionConfig, *, progress: bool = True) -> TrainConfig:
    """The engine settings of a detection training: AdamW, no gradient clipping, no EMA, one
    kept epoch checkpoint (Mask R-CNN's are large); the schedule is :func:`learning_rate`."""
    return TrainConfig(
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        lr_reference_batch=config.lr_reference_batch,
        min_lr=0.0,
        weight_decay=config.weight_decay,
        betas=(config.betas[0], config.betas[1]),
        warmup_steps=config.warmup_steps or None,
        grad_clip=None,
        precision=config.precision,  # type: ignore[arg-type]
        device=config.device,
        compile="off",
        num_workers=config.num_workers,
        seed=config.seed,
        log_every_steps=config.log_every_steps,
        checkpoint_every_steps=config.checkpoint_every_steps,
        keep_checkpoints=1,
        progress=progress,
    )


def train(
    out: str | Path,
    root: str | Path,
    config: DetectionConfig,
    encoder: ViTEncoder | None = None,
    *,
    progress: bool = True,
) -> nn.Module:
    """Fine-tune Mask R-CNN on the COCO training split with the engine's
    :class:`~partnd.engine.trainer.Trainer` (resuming ``out/checkpoints/last.pt``).

    Args:
        out: Run directory.
        root: COCO root.
        config: Settings.
        encoder: The pretrained 2D encoder (``None``: ``config.encoder`` from scratch).
        progress: Show a progress bar.

    Returns:
        The trained model (CPU, eval mode); ``model.pt`` and ``train_result.json`` are written.
    """
    run = RunDir(Path(out))
    dataset, num_classes = load_coco_train(root, config)
    torch.manual_seed(config.seed)
    if encoder is None:
        encoder = create_encoder(config.encoder, in_chans=3, patch_size=config.patch_size, ndim=2)
    model = _build_model(encoder, num_classes, config)
    meta = {
        "num_classes": num_classes,
        "config": config.to_dict(),
        "encoder": encoder_spec(encoder),
    }
    trainer = Trainer(
        model,
        DetectionTask(),
        dataset,
        train_config(config, progress=progress),
        context=DistributedContext(device=resolve_device(config.device)),
        run_dir=run,
        layer_decay=config.layer_decay,
        checkpoint_extra=meta,
        collate_fn=collate,  # type: ignore[arg-type]
        learning_rate=lambda step, steps_per_epoch: learning_rate(step, steps_per_epoch, config),
    )
    resume = run.resumable
    run.write_meta(run_metadata(world_size=1, extra={"resolved": trainer.resolved}), resumed=resume)
    trainer.fit(resume_from=run.last_checkpoint if resume else None)
    model = trainer.model.cpu().eval()
    atomic_save({"model": model.state_dict(), **meta}, run.root / "model.pt")
    run.write_result(
        {"steps": trainer.total_steps, "epochs": config.epochs, **meta}, TRAIN_RESULT_FILE
    )
    return model


def _mask_rle(mask: np.ndarray) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return dict(rle)


def _cocoeval(coco: Any, results: list[dict[str, Any]], kind: str, ids: list[int]) -> list[float]:
    from pycocotools.cocoeval import COCOeval

    if not results:  # pycocotools cannot load an empty result list
        return [0.0] * 6
    with contextlib.redirect_stdout(io.StringIO()):
        detections = coco.loadRes(results)
        evaluator = COCOeval(coco, detections, kind)
        evaluator.params.imgIds = ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    # COCOeval reports -1 where a size range has no ground truth; report those as absent (nan)
    return [100.0 * float(v) if v >= 0 else float("nan") for v in evaluator.stats[:6]]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    root: str | Path,
    *,
    out: str | Path | None = None,
    subset: int | None = None,
    device: str = "auto",
    batch_size: int = 2,
) -> dict[str, float]:
    """COCO box and mask AP of ``model`` on the validation split.

    Args:
        model: A Mask R-CNN from :func:`partnd.models.vitdet.build_vitdet_mask_rcnn` whose labels
        are
            the contiguous ``1..K`` of :func:`coco_categories`.
        root: COCO root (``annotations/instances_val2017.json``, ``val2017/``).
        out: Where to write ``detections_bbox.json`` and ``detections_segm.json`` (``None``: no
            files).
        subset: Evaluate the first ``subset`` images (by id).
        device: Where to run.
        batch_size: Images per forward pass.

    The model is left on ``device``, in the training mode it had.

    Returns:
        :data:`AP_KEYS` in percent (``nan`` for a size range without ground truth), plus
        ``n_images`` and ``n_detections``.
    """
    dataset, coco = load_coco_val(root, subset)
    _, annotations = _split_paths(Path(root), "val")
    category_ids = [int(category["id"]) for category in coco_categories(annotations)]
    run_device = resolve_device(device)
    was_training = model.training
    model.eval().to(run_device)
    boxes: list[dict[str, Any]] = []
    segments: list[dict[str, Any]] = []
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate)
    for images, image_ids in loader:
        outputs = model([image.to(run_device) for image in images])
        for output, image_id in zip(outputs, image_ids, strict=True):
            masks = (output["masks"][:, 0] > 0.5).cpu().numpy()
            for box, label, score, mask in zip(
                output["boxes"].cpu().tolist(),
                output["labels"].cpu().tolist(),
                output["scores"].cpu().tolist(),
                masks,
                strict=True,
            ):
                common = {
                    "image_id": int(image_id),
                    "category_id": category_ids[int(label) - 1],
                    "score": float(score),
                }
                x0, y0, x1, y1 = box
                boxes.append({**common, "bbox": [x0, y0, x1 - x0, y1 - y0]})
                segments.append({**common, "segmentation": _mask_rle(mask)})
    model.train(was_training)
    if out is not None:
        atomic_write_json(boxes, Path(out) / "detections_bbox.json")
        atomic_write_json(segments, Path(out) / "detections_segm.json")
    ids = list(dataset.ids)  # type: ignore[attr-defined]
    stats = _cocoeval(coco, boxes, "bbox", ids) + _cocoeval(coco, segments, "segm", ids)
    metrics = dict(zip(AP_KEYS, stats, strict=True))
    return {**metrics, "n_images": float(len(ids)), "n_detections": float(len(boxes))}


def _table(name: str, metrics: dict[str, float], config: DetectionConfig) -> list[dict[str, Any]]:
    paper = PAPER_AP.get(name, (None, None, None))

    def cell(value: float | None) -> Any:
        return "" if value is None or not math.isfinite(value) else round(value, 2)

    return [
        {
            "method": name,
            "epochs": config.epochs,
            "image_size": config.image_size,
            "n_images": int(metrics["n_images"]),
            **{key: cell(metrics[key]) for key in TABLE_KEYS},
            "paper_ap_b": cell(paper[0]),
            "paper_ap_b50": cell(paper[1]),
            "paper_ap_b75": cell(paper[2]),
        }
    ]


def _load_trained(out: Path, config: DetectionConfig) -> nn.Module:
    """The trained model of ``out/model.pt`` (its encoder rebuilt from the saved spec)."""
    state = load_checkpoint(out / "model.pt", "model")
    model = _build_model(encoder_from_spec(state["encoder"]), int(state["num_classes"]), config)
    model.load_state_dict(state["model"])
    return model.eval()


def _settings(args: argparse.Namespace) -> DetectionConfig:
    values: dict[str, Any] = {}
    known = DetectionConfig.field_names()
    for item in args.set:
        key, sep, text = item.partition("=")
        key = key.strip()
        check(bool(sep) and key in known, "--set", f"FIELD=VALUE with a field of {known}", item)
        try:
            values[key] = json.loads(text)
        except json.JSONDecodeError:
            values[key] = text
    if args.epochs is not None:
        values["epochs"] = args.epochs
    return DetectionConfig(**values)


def build_parser() -> argparse.ArgumentParser:
    """The command line of the recipe."""
    parser = argparse.ArgumentParser(
        prog="python -m partnd.recipes.coco_detection",
        description="COCO detection transfer with a ViTDet Mask R-CNN (1x schedule) and COCO AP.",
    )
    parser.add_argument("stage", nargs="?", default="all", choices=STAGES)
    parser.add_argument("--root", type=Path, required=True, help="local COCO root")
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument(
        "--encoder",
        type=Path,
        default=None,
        help="pretrained encoder (encoder.pt or a pretraining run directory); default: none, "
        "the backbone is trained from scratch",
    )
    parser.add_argument("--name", default="part", help="row name (the paper's row it matches)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="DetectionConfig field"
    )
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (12)")
    add_switch(parser, "--progress", default=True, help="print losses")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recipe from the command line; returns the exit status (0 when it is skipped
    because ``pycocotools`` is not installed)."""
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("pycocotools") is None:
        print(
            "coco_detection skipped: it needs pycocotools (pip install 'partnd[vision]')",
            file=sys.stderr,
        )
        return 0
    config = _settings(args)
    out: Path = args.out
    splits = {"train": ["train"], "evaluate": ["val"], "all": ["train", "val"]}[args.stage]
    for split in splits:  # check the data before anything is written under --out
        _split_paths(Path(args.root), split)
    check(not out.exists() or out.is_dir(), "--out", "a run directory", f"the file {out}")
    check(
        args.encoder is None or args.encoder.expanduser().exists(),
        "--encoder",
        "an existing encoder.pt or pretrain run directory",
        f"{args.encoder} (no such file or directory)",
    )
    check(
        args.stage != "evaluate" or RunDir(out).finished(TRAIN_RESULT_FILE),
        "--out",
        "a finished training (run the train stage first)",
        f"none in {out}",
    )
    settings = {
        "config": config.to_dict(),
        "encoder": None if args.encoder is None else str(args.encoder.expanduser().resolve()),
    }
    marker = out / "settings.json"
    if marker.is_file():
        stored = json.loads(marker.read_text())
        check(
            stored == settings, "--out", f"a run made with the same settings ({marker})", settings
        )
    else:
        check(
            not out.exists() or not any(out.iterdir()),
            "--out",
            "a new or empty directory, or an earlier run of this recipe",
            str(out),
        )
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(settings, marker)
    model: nn.Module | None = None
    if args.stage in ("train", "all") and not RunDir(out).finished(TRAIN_RESULT_FILE):
        encoder = None if args.encoder is None else load_encoder(args.encoder)
        model = train(out, args.root, config, encoder, progress=args.progress)
    if args.stage in ("evaluate", "all") and not (out / "metrics.json").is_file():
        if model is None:
            model = _load_trained(out, config)
        metrics = evaluate(
            model, args.root, out=out, subset=config.val_subset, device=config.device
        )
        write_table(_table(args.name, metrics, config), out, "detection")
        atomic_write_json(metrics, out / "metrics.json")
    if (out / "detection.md").is_file():
        print((out / "detection.md").read_text())
    return 0


if __name__ == "__main__":  # one line and an exit status instead of a traceback
    sys.exit(run_recipe("python -m partnd.recipes.coco_detection", main))
