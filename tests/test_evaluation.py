"""Tests of frozen-feature evaluation: features, linear probe, kNN and the pretraining monitor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.real_images import load_sklearn_digits, low_label_split
from partnd.engine.config import PretrainConfig
from partnd.evaluation.probes import (
    KNNMonitor,
    extract_features,
    knn_eval,
    knn_predict,
    linear_probe,
    logistic_regression_probe,
)
from partnd.models import create_encoder
from partnd.pretraining import pretrain


def tiny_encoder(**kwargs: object):
    torch.manual_seed(0)
    return create_encoder("vit_test", in_chans=1, patch_size=4, ndim=2, **kwargs)


def test_features_are_cls_and_mean_patch_token_on_the_grid() -> None:
    encoder = tiny_encoder().train()
    x = torch.randn(5, 1, 8, 8)
    features, labels = extract_features(encoder, x, [0, 1, 2, 3, 4], batch_size=2)
    assert features.shape == (5, 64) and features.dtype == np.float32
    assert labels.tolist() == [0, 1, 2, 3, 4]
    assert encoder.training  # mode restored
    with torch.no_grad():
        tiles = x.unfold(2, 4, 4).unfold(3, 4, 4).reshape(5, 1, 4, 4, 4).permute(0, 2, 1, 3, 4)
        tokens = encoder.eval().forward_features(tiles)
    expected = torch.cat([tokens[:, 0], tokens[:, 1:].mean(1)], dim=1)
    np.testing.assert_allclose(features, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_features_use_the_position_embedding_an_encoder_has() -> None:
    encoder = tiny_encoder(num_positions=4)
    x = torch.randn(3, 1, 8, 8)
    with_positions, _ = extract_features(encoder, x, [0, 0, 0])
    encoder.pos_embed.data.add_(1.0)  # type: ignore[union-attr]
    shifted, _ = extract_features(encoder, x, [0, 0, 0])
    assert not np.allclose(with_positions, shifted)
    with pytest.raises(InputError, match="data"):
        extract_features(encoder, torch.randn(3, 2, 8, 8), [0, 0, 0])


def test_logistic_regression_probe_on_separable_features() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 20)
    features = np.eye(3)[labels] * 5 + 0.1 * rng.standard_normal((60, 3))
    result = logistic_regression_probe(features[::2], labels[::2], features[1::2], labels[1::2])
    assert result.report.accuracy == 1.0
    assert result.inverse_regularisation in (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
    assert result.predictions.tolist() == labels[1::2].tolist()  # the test predictions, in order
    noise = rng.standard_normal((60, 3))
    chance = logistic_regression_probe(noise[::2], labels[::2], noise[1::2], labels[1::2])
    assert chance.report.accuracy < 0.6


def test_a_probe_needs_two_classes_and_says_so() -> None:
    features = np.random.default_rng(0).standard_normal((18, 3))
    with pytest.raises(InputError, match=r"^train_labels: .*at least two classes.*18 example"):
        logistic_regression_probe(features, np.full(18, 3), features, np.full(18, 3))
    encoder = create_encoder("vit_test", in_chans=2, patch_size=20, ndim=1)
    signals = np.random.default_rng(1).standard_normal((18, 2, 40)).astype(np.float32)
    with pytest.raises(InputError, match=r"^train: .*of class 0 only"):
        linear_probe(encoder, [(x, 0) for x in signals], [(x, 1) for x in signals])


def test_knn_votes_are_weighted_by_similarity() -> None:
    bank = np.array([[1.0, 0.0], [0.0, 1.0], [0.05, 1.0], [0.1, 1.0]])
    bank_labels = np.array([0, 1, 1, 1])
    query = np.array([[1.0, 0.02], [0.0, 2.0]])
    assert knn_predict(bank, bank_labels, query, num_classes=2, k=1).tolist() == [0, 1]
    # k=4 with three class-1 votes: a sharp temperature lets the one close class-0 vote win
    assert knn_predict(bank, bank_labels, query[:1], num_classes=2, k=4, temperature=0.01)[0] == 0
    assert knn_predict(bank, bank_labels, query[:1], num_classes=2, k=4, temperature=100)[0] == 1
    with pytest.raises(InputError, match="k"):
        knn_predict(bank, bank_labels, query, num_classes=2, k=0)


def test_probe_and_knn_on_real_digits_beat_chance() -> None:
    images, labels = load_sklearn_digits()
    split = low_label_split(labels, test_per_class=30, per_class=30, seed=0)
    encoder = tiny_encoder()
    train, test = images[split.labelled], images[split.test]
    probe = linear_probe(
        encoder, train, test, train_labels=labels[split.labelled], test_labels=labels[split.test]
    )
    knn = knn_eval(
        encoder, train, test, train_labels=labels[split.labelled], test_labels=labels[split.test]
    )
    assert probe.report.accuracy > 0.5 and knn.accuracy > 0.3  # random features of real digits
    assert probe.report.n == knn.n == 300


def test_low_label_split_is_stratified_disjoint_and_seeded() -> None:
    labels = np.repeat(np.arange(4), 25)
    split = low_label_split(labels, test_per_class=5, per_class=3, seed=1)
    assert len(split.test) == 20 and len(split.labelled) == 12 and len(split.pool) == 80
    assert set(split.labelled) <= set(split.pool) and not set(split.pool) & set(split.test)
    assert np.bincount(labels[split.labelled]).tolist() == [3, 3, 3, 3]
    other = low_label_split(labels, test_per_class=5, per_class=3, seed=2)
    assert np.array_equal(other.test, split.test)  # fixed test set across seeds
    assert not np.array_equal(other.labelled, split.labelled)
    with pytest.raises(InputError, match="labels"):
        low_label_split(labels, test_per_class=20, per_class=10, seed=0)


def test_knn_monitor_is_logged_during_pretraining(tmp_path: Path) -> None:
    images, labels = load_sklearn_digits()
    monitor = KNNMonitor(
        images[:100], images[100:160], train_labels=labels[:100], test_labels=labels[100:160]
    )
    config = PretrainConfig.preset("test", epochs=2, batch_size=16, num_pairs=16)
    result = pretrain(images[:64], out_dir=tmp_path / "run", config=config, monitor=monitor)
    val = [r for r in result.history if r["phase"] == "val"]
    assert [r["epoch"] for r in val] == [0, 1]
    assert all(0.0 <= r["knn_accuracy"] <= 1.0 and "knn_kappa" in r for r in val)
    sparse = KNNMonitor(
        images[:50],
        images[50:80],
        train_labels=labels[:50],
        test_labels=labels[50:80],
        every_epochs=2,
    )
    assert sparse(result.model, 0) == {} and "knn_accuracy" in sparse(result.model, 1)
