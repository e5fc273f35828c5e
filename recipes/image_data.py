"""Image data for the image recipes: CIFAR-100 and ImageNet-1k from local copies, and their
per-sample transforms (pretraining, DeiT fine-tuning, evaluation), all torchvision components.

* **CIFAR-100** is read by ``torchvision.datasets.CIFAR100`` from ``ROOT/cifar-100-python/``
  (``train``, ``test``, ``meta``: the extracted ``cifar-100-python.tar.gz`` of
  https://www.cs.toronto.edu/~kriz/cifar.html). torchvision checks every file against its published
  MD5 checksum; a missing or different file is refused with :class:`InputError`. Nothing is
  downloaded. A copy you made yourself in the same format (other images, the same pickles) has
  other checksums: read it with ``verify_checksums=False`` (:class:`UnverifiedCIFAR100`), which
  still refuses missing or unreadable files.
* **ImageNet-1k** is read by ``torchvision.datasets.ImageFolder`` from ``ROOT/train/<class>/*``
  and ``ROOT/val/<class>/*`` (the usual layout after sorting the validation images into class
  folders). Any ImageFolder tree works.

Transforms (``torchvision.transforms.v2``; inputs are PIL images, outputs float tensors
``[3, S, S]`` normalised with the ImageNet mean and standard deviation, as DeiT and MAE do for
both datasets):

* :func:`pretrain_transform`: MAE's pretraining augmentation (``main_pretrain.py``):
  ``RandomResizedCrop(S, scale=(0.2, 1), bicubic)`` and a horizontal flip;
* :func:`deit_train_transform`: DeiT's fine-tuning augmentation (``datasets.build_transform`` with
  timm's ``create_transform``): the crop (``RandomResizedCrop(S, scale=(0.08, 1), bicubic)``, or for
  inputs of at most 32 px DeiT's ``RandomCrop(S, padding=4)``), a horizontal flip, RandAugment
  ``rand-m9-mstd0.5-inc1`` as ``RandAugment(num_ops=2, magnitude=9)``, normalisation and
  ``RandomErasing(p=0.25)`` with per-pixel random values (timm's ``mode="pixel"``);
* :func:`eval_transform`: DeiT's evaluation: ``Resize(S / 0.875, bicubic)`` and ``CenterCrop(S)``
  for inputs above 32 px, nothing for 32 px.

Known differences to timm's RandAugment (torchvision has its own implementation): no magnitude
noise (``mstd0.5`` draws each op's magnitude from N(9, 0.5)), and every chosen op is applied
(timm applies each with probability 0.5). torchvision's magnitudes of Posterize/Solarize already
increase in severity (``inc1``).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from torchvision import datasets
from torchvision.transforms import v2

from partnd._validation import InputError, check

__all__ = [
    "CIFAR100",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MEAN_PIXEL",
    "CropPolicy",
    "UnverifiedCIFAR100",
    "class_names",
    "deit_train_transform",
    "eval_transform",
    "load_image_dataset",
    "pretrain_transform",
    "subset",
    "targets_of",
]

#: The dataset class the CIFAR-100 loader uses (torchvision's; it checks the published MD5 sums).
CIFAR100 = datasets.CIFAR100

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: timm's RandAugment fill colour: the ImageNet mean pixel (``_HPARAMS_DEFAULT["img_mean"]``).
MEAN_PIXEL = (124, 116, 104)


class UnverifiedCIFAR100(datasets.CIFAR100):
    """torchvision's CIFAR-100 reader without the MD5 checks (for copies made in its format).

    The files must exist and unpickle; their contents are not compared with the published
    release.
    """

    train_list: ClassVar[list[list[str | None]]] = [
        [name, None] for name, _ in datasets.CIFAR100.train_list
    ]
    test_list: ClassVar[list[list[str | None]]] = [
        [name, None] for name, _ in datasets.CIFAR100.test_list
    ]
    meta: ClassVar[dict[str, str | None]] = {**datasets.CIFAR100.meta, "md5": None}


CropPolicy = Literal["auto", "random_resized_crop", "random_crop"]
_BICUBIC = v2.InterpolationMode.BICUBIC


def _to_normalised_tensor() -> list[Any]:
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]


def pretrain_transform(image_size: int) -> v2.Compose:
    """MAE's pretraining augmentation at ``image_size`` (see the module docstring).

    Returns:
        PIL image -> float tensor ``[3, image_size, image_size]``.
    """
    return v2.Compose(
        [
            v2.RandomResizedCrop(
                image_size, scale=(0.2, 1.0), interpolation=_BICUBIC, antialias=True
            ),
            v2.RandomHorizontalFlip(),
            *_to_normalised_tensor(),
            v2.ToPureTensor(),
        ]
    )


def deit_train_transform(
    image_size: int,
    *,
    crop: CropPolicy = "auto",
    rand_augment: Sequence[int] | None = (2, 9),
    reprob: float = 0.25,
) -> v2.Compose:
    """DeiT's per-sample fine-tuning augmentation (see the module docstring).

    Args:
        image_size: Output side S.
        crop: ``"random_resized_crop"`` (scale 0.08-1, ratio 3/4-4/3, bicubic),
            ``"random_crop"`` (``RandomCrop(S, padding=4)``) or ``"auto"``: DeiT's rule, the
            padded random crop for inputs of at most 32 px (``resize_im = input_size > 32``).
        rand_augment: ``(num_ops, magnitude)`` of RandAugment, ``None`` for none.
        reprob: Probability of random erasing (0 for none).

    Returns:
        PIL image -> float tensor ``[3, S, S]``.
    """
    check(
        crop in ("auto", "random_resized_crop", "random_crop"),
        "crop",
        "'auto', 'random_resized_crop' or 'random_crop'",
        repr(crop),
    )
    check(0.0 <= reprob <= 1.0, "reprob", "a probability in [0, 1]", repr(reprob))
    if crop == "auto":
        crop = "random_crop" if image_size <= 32 else "random_resized_crop"
    steps: list[Any] = [
        v2.RandomCrop(image_size, padding=4)
        if crop == "random_crop"
        else v2.RandomResizedCrop(
            image_size, scale=(0.08, 1.0), interpolation=_BICUBIC, antialias=True
        ),
        v2.RandomHorizontalFlip(),
    ]
    if rand_augment is not None:
        num_ops, magnitude = (int(value) for value in rand_augment)
        steps.append(
            v2.RandAugment(
                num_ops=num_ops, magnitude=magnitude, interpolation=_BICUBIC, fill=MEAN_PIXEL
            )
        )
    steps += _to_normalised_tensor()
    if reprob > 0:
        steps.append(v2.RandomErasing(p=reprob, value="random"))  # type: ignore[arg-type]
    steps.append(v2.ToPureTensor())
    return v2.Compose(steps)


def eval_transform(image_size: int, crop_ratio: float = 0.875) -> v2.Compose:
    """DeiT's evaluation transform: resize to ``S / crop_ratio`` and centre-crop S (inputs above
    32 px), then normalise.

    Returns:
        PIL image -> float tensor ``[3, S, S]``.
    """
    steps: list[Any] = []
    if image_size > 32:
        steps += [
            v2.Resize(int(image_size / crop_ratio), interpolation=_BICUBIC, antialias=True),
            v2.CenterCrop(image_size),
        ]
    return v2.Compose([*steps, *_to_normalised_tensor(), v2.ToPureTensor()])


def load_image_dataset(
    name: str, root: str | Path, *, train: bool, transform: Any, verify_checksums: bool = True
) -> Dataset[Any]:
    """A local image dataset yielding ``(transform(image), label)``.

    Args:
        name: ``"cifar100"`` (torchvision's ``CIFAR100`` under ``root``; train or test split) or
            ``"imagenet"`` (``ImageFolder(root / "train")`` or ``root / "val"``).
        root: The dataset root (see the module docstring).
        train: The training split (else the test / validation split).
        transform: Per-sample transform of the PIL image.
        verify_checksums: CIFAR-100: check the files' published MD5 sums (``False``: any copy in
            the same format, :class:`UnverifiedCIFAR100`).

    Returns:
        The dataset; it has ``classes`` and ``targets``.

    Raises:
        InputError: If the files are missing or unreadable, or (CIFAR-100) fail their
            checksums.
    """
    root = Path(root)
    if name == "cifar100":
        reader = CIFAR100 if verify_checksums else UnverifiedCIFAR100
        try:
            return reader(str(root), train=train, transform=transform, download=False)
        except (
            RuntimeError,
            OSError,
            EOFError,
            ValueError,
            KeyError,
            pickle.UnpicklingError,
        ) as error:
            checksums = (
                "with their published MD5 checksums: extract cifar-100-python.tar.gz from "
                "https://www.cs.toronto.edu/~kriz/cifar.html there; a copy of your own in the "
                "same format needs --no-verify-checksums"
                if verify_checksums
                else "readable pickles in torchvision's CIFAR-100 format"
            )
            raise InputError(
                f"--root: expected a directory holding torchvision's CIFAR-100 files "
                f"({root}/cifar-100-python/train, test and meta, {checksums}), got {root} "
                f"({type(error).__name__}: {error})"
            ) from None
    check(name == "imagenet", "--dataset", "'cifar100' or 'imagenet'", repr(name))
    folder = root / ("train" if train else "val")
    check(
        folder.is_dir(),
        "--root",
        "an ImageFolder tree with train/<class>/ and val/<class>/ image folders",
        f"{root} (no {folder.name}/ folder)",
    )
    try:
        return datasets.ImageFolder(str(folder), transform=transform)
    except (FileNotFoundError, RuntimeError) as error:
        raise InputError(
            f"--root: expected class folders of images in {folder} ({error})"
        ) from None


def targets_of(dataset: Dataset[Any]) -> np.ndarray:
    """Every label of a dataset made by :func:`load_image_dataset` or :func:`subset`, without
    reading (or transforming) the images.

    Returns:
        [N] int64 labels.
    """
    if isinstance(dataset, Subset):
        return targets_of(dataset.dataset)[np.asarray(dataset.indices, dtype=np.int64)]
    targets = getattr(dataset, "targets", None)
    check(targets is not None, "dataset", "a dataset with targets", type(dataset).__name__)
    return np.asarray(targets, dtype=np.int64)


def class_names(dataset: Dataset[Any]) -> list[str]:
    """The class names of a dataset made by :func:`load_image_dataset` (or a subset of one)."""
    if isinstance(dataset, Subset):
        return class_names(dataset.dataset)
    return [str(name) for name in dataset.classes]  # type: ignore[attr-defined]


def subset(dataset: Dataset[Any], size: int | None, seed: int) -> Dataset[Any]:
    """A seeded random subset of ``size`` items (``None`` or ``size >= len``: the whole set).

    The indices are sorted, and the subset of a given ``(len, size, seed)`` is always the same, so
    pretraining and fine-tuning see the same images.
    """
    total = len(dataset)  # type: ignore[arg-type]
    if size is None or size >= total:
        return dataset
    check(size >= 1, "subset size", "a positive number of items", repr(size))
    indices = np.sort(np.random.default_rng(seed).permutation(total)[:size])
    return Subset(dataset, indices.tolist())
