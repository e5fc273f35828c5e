"""Tests of the fine-tuning augmentations and of the fine-tuning step budget."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.engine.augment import (
    AUGMENTATIONS,
    build_augmentation,
    hflip,
    random_resized_crop,
    time_shift,
)
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.training import finetune


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("shape", [(4, 2, 50), (4, 3, 12, 10), (2, 1, 6, 6, 6)])
def test_random_resized_crop_keeps_shape_constants_and_ramps(shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    out = random_resized_crop(x, generator())
    assert out.shape == x.shape
    assert torch.equal(out, random_resized_crop(x, generator()))  # seeded
    assert not torch.equal(out, random_resized_crop(x, generator(1)))
    constant = torch.full(shape, 3.0)
    torch.testing.assert_close(random_resized_crop(constant, generator()), constant)
    ramp = torch.arange(shape[-1], dtype=torch.float32).expand(shape).contiguous()
    cropped = random_resized_crop(ramp, generator(2))
    assert bool((cropped.diff(dim=-1) >= -1e-5).all())  # a zoom of a ramp is still rising
    assert bool((cropped.min() >= 0) & (cropped.max() <= shape[-1] - 1))


def test_hflip_mirrors_the_drawn_examples_only() -> None:
    x = torch.randn(64, 1, 4, 5)
    out = hflip(x, generator())
    flipped = [bool(torch.equal(out[i], x[i].flip(-1))) for i in range(64)]
    kept = [bool(torch.equal(out[i], x[i])) for i in range(64)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 16 < sum(flipped) < 48


def test_time_shift_moves_each_example_with_edge_repetition() -> None:
    x = torch.arange(100, dtype=torch.float32).expand(8, 2, 100).contiguous()
    out = time_shift(x, generator())
    for i in range(8):
        shift = int(out[i, 0, 50] - 50)
        assert abs(shift) <= 10
        expected = (torch.arange(100) + shift).clamp(0, 99).float()
        assert torch.equal(out[i, 0], expected) and torch.equal(out[i, 1], expected)


def test_braindecode_signal_transforms_keep_shape() -> None:
    np.random.seed(0)
    x = torch.ones(32, 6, 50)
    augment = build_augmentation(["amplitude_scale", "channel_dropout"], ndim=1)
    assert augment is not None
    out = augment(x, generator())
    assert out.shape == x.shape
    assert not torch.equal(out, x)
    assert bool((out.abs().amax(dim=-1) == 0).any())  # some channels dropped


def test_channel_dropout_marks_dropped_channels_absent_for_a_channel_set_model() -> None:
    """Set mode: a dropped channel becomes NaN (absent) and the others stay as they were; an
    already absent channel stays absent; an item never loses every channel it has."""
    x = torch.arange(1.0, 1.0 + 400 * 2 * 50).view(400, 2, 50)
    x[:, 1] = torch.nan  # the second channel is absent from every item: one channel left
    x = torch.cat([x, torch.arange(1.0, 1.0 + 400 * 2 * 50).view(400, 2, 50)])
    np.random.seed(0)
    zeroed = build_augmentation(["channel_dropout"], ndim=1)
    np.random.seed(0)
    absent = build_augmentation(["channel_dropout"], ndim=1, absent_channels=True)
    assert zeroed is not None and absent is not None
    np.random.seed(1)
    reference = zeroed(x, generator())
    np.random.seed(1)
    out = absent(x, generator())
    dropped = (reference == 0).all(dim=-1)  # [B, C]: what braindecode zeroed
    single, double = slice(0, 400), slice(400, 800)
    # items with both channels: each dropped channel is NaN unless it was the item's last
    both_dropped = dropped[double].all(dim=1)
    marked = out[double].isnan().all(dim=-1)
    assert bool(dropped[double].any()) and bool(both_dropped.any())
    assert torch.equal(marked, dropped[double] & ~both_dropped[:, None])
    kept = ~marked
    assert torch.equal(out[double][kept], x[double][kept])
    # items with one channel left: never dropped, the absent one stays absent
    assert torch.equal(out[single][:, 0], x[single][:, 0])
    assert bool(out[single][:, 1].isnan().all())
    # a fixed-channel model's dropout still zeroes
    assert torch.equal(
        reference[double][dropped[double]], torch.zeros_like(x[double][dropped[double]])
    )


def test_build_augmentation_checks_names_and_data_kind() -> None:
    assert build_augmentation([], ndim=2) is None
    assert set(AUGMENTATIONS) == {
        "random_resized_crop",
        "hflip",
        "time_shift",
        "amplitude_scale",
        "channel_dropout",
    }
    with pytest.raises(InputError, match="augmentations"):
        build_augmentation(["mixup"], ndim=2)
    with pytest.raises(InputError, match="1D signal"):
        build_augmentation(["time_shift"], ndim=2)
    with pytest.raises(InputError, match="image"):
        build_augmentation(["hflip"], ndim=1)


def blobs(n: int, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    images = rng.standard_normal((n, 1, 8, 8)).astype(np.float32) * 0.3
    images[labels == 1, :, 2:6, 2:6] += 1.0
    return images, labels.tolist()


def test_finetune_with_augmentation_resumes_exactly(tmp_path: Path) -> None:
    images, labels = blobs(32)
    config = FinetuneConfig.preset(
        "test", epochs=2, batch_size=8, augmentations=("random_resized_crop", "hflip")
    )
    run = partial(finetune, None, images, train_labels=labels, num_classes=2, config=config)
    full = run(out_dir=tmp_path / "a")
    run(out_dir=tmp_path / "b", max_steps=5)
    resumed = run(out_dir=tmp_path / "b", resume=True)
    for name, value in full.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    assert all("accuracy" in r for r in full.history if r["phase"] == "train")


def test_min_steps_gives_a_small_labelled_set_enough_steps(tmp_path: Path) -> None:
    images, labels = blobs(16)
    config = FinetuneConfig.preset("test", epochs=2, batch_size=8, min_steps=15)
    result = finetune(
        None, images, train_labels=labels, num_classes=2, out_dir=tmp_path / "a", config=config
    )
    epochs = [r for r in result.history if r["phase"] == "epoch"]
    assert len(epochs) == 8 and epochs[-1]["step"] == 16  # ceil(15 / 2 steps per epoch) epochs


@pytest.mark.parametrize(
    ("labels", "argument"),
    [([0] * 15 + [-100], "train_labels"), ([0] * 15 + [2], "train_labels")],
)
def test_labels_outside_the_classes_are_refused_before_the_run(
    tmp_path: Path, labels: list[int], argument: str
) -> None:
    images, _ = blobs(16)
    with pytest.raises(InputError, match=argument):
        finetune(
            None,
            images,
            train_labels=labels,
            num_classes=2,
            out_dir=tmp_path / "a",
            config=FinetuneConfig.preset("test"),
        )
    assert not (tmp_path / "a").exists()
    good = [0, 1] * 8
    with pytest.raises(InputError, match="val_labels"):
        finetune(
            None,
            images,
            train_labels=good,
            num_classes=2,
            val_dataset=images,
            val_labels=[0] * 15 + [5],
            out_dir=tmp_path / "b",
            config=FinetuneConfig.preset("test"),
        )
    assert not (tmp_path / "b").exists()
