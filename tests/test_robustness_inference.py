"""Inference refuses what it cannot do and reads a store the model's way (issue 43)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GAPPY_CHANNELS, GAPPY_N_TIMES

from partnd._validation import InputError
from partnd.datasets import SleepWindowDataset
from partnd.datasets.store import STAGE_NAMES, create_store, write_record
from partnd.finetuning.training import evaluate
from partnd.inference import predict, predict_records
from partnd.models import PatchClassifier, create_encoder
from partnd.models.night import NightClassifier
from partnd.signal_info import SignalInfo

pytestmark = pytest.mark.usefixtures("one_thread")


def _night_model() -> NightClassifier:
    window = create_encoder("vit_test", in_chans=3, patch_size=10, ndim=1)
    model = NightClassifier.from_window_encoder(
        window, 5, window_samples=GAPPY_N_TIMES, temporal="temporal_test"
    )
    return model.eval()


@pytest.mark.parametrize("batch_size", [0, -5])
def test_a_batch_size_below_one_is_refused_naming_it(gappy_store: Path, batch_size: int) -> None:
    """A night model with batch_size 0 or -5 raised torch's 'split_size can only be 0'."""
    model = _night_model()
    windows = SleepWindowDataset(gappy_store, records=["a"])
    for call in (
        lambda: predict(model, windows, batch_size=batch_size),
        lambda: predict(model, torch.zeros(4, 3, GAPPY_N_TIMES), batch_size=batch_size),
        lambda: predict_records(model, gappy_store, batch_size=batch_size),
        lambda: evaluate(model, str(gappy_store), batch_size=batch_size),
        lambda: model.predict_night(
            torch.zeros(4, 3, GAPPY_N_TIMES), torch.zeros(4, 2), batch_size=batch_size
        ),
    ):
        with pytest.raises(InputError, match="batch_size: expected an int >= 1"):
            call()


def _record_normalised_classifier() -> PatchClassifier:
    encoder = create_encoder("vit_test", in_chans=3, patch_size=10, ndim=1)
    model = PatchClassifier(encoder, num_classes=5, spatial_shape=(GAPPY_N_TIMES,)).eval()
    model.signal_info = SignalInfo(
        3, (GAPPY_N_TIMES,), tuple(GAPPY_CHANNELS), 100.0 / 60.0, "record"
    )
    return model


def test_a_store_given_by_path_is_read_the_models_way(gappy_store: Path, tmp_path: Path) -> None:
    """predict/evaluate(model, "store.zarr") with a record-normalised model read the store's
    windows window-normalised and then refused them."""
    model = _record_normalised_classifier()
    one = tmp_path / "one.zarr"
    create_store(
        one,
        sfreq=100.0 / 60.0,
        channels=GAPPY_CHANNELS,
        window_seconds=30.0,
        stage_names=STAGE_NAMES,
        metadata={},
    )
    signal = np.random.default_rng(1).standard_normal((4, 3, GAPPY_N_TIMES)).astype(np.float32)
    stages = np.arange(4, dtype=np.int8)
    write_record(
        one,
        "r",
        signal,
        stages,
        30.0 * np.arange(4),
        attrs={"subject_id": "s", "split": "training"},
    )
    by_path = predict(model, str(one))
    by_dataset = predict(model, SleepWindowDataset(one, normalize="record"))
    np.testing.assert_array_equal(by_path.probabilities, by_dataset.probabilities)
    report = evaluate(model, str(gappy_store))
    windows = SleepWindowDataset(gappy_store, labelled_only=True, normalize="record")
    expected = evaluate(model, windows)
    assert report.cohen_kappa == expected.cohen_kappa and report.loss == expected.loss
