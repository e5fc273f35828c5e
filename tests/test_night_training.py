"""Night classifier data and training: crops with time of night, finetune, evaluate, predict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Subset

from partnd._validation import InputError
from partnd.datasets.nights import SleepNightDataset, time_of_night
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.sequence import build_sequence_classifier, predict_nights
from partnd.models import NightClassifier
from tests.staged_stores import write_staged_store

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["W", "N1", "N2", "N3", "R"]


def _config(**overrides):
    values = {
        "patch_size": 10,
        "context": "night",
        "night_crop": 4,
        "temporal_encoder": "temporal_test",
    }
    return FinetuneConfig.preset("test", **{**values, **overrides})


def test_time_of_night_counts_from_the_first_window() -> None:
    time = time_of_night(np.array([5.0, 35.0, 65.0, 185.0]), 30.0)
    hours = np.array([0.0, 30.0, 60.0, 180.0]) / 3600.0
    np.testing.assert_allclose(time[:, 0].numpy(), hours, rtol=1e-6)
    np.testing.assert_allclose(time[:, 1].numpy(), np.array([0, 30, 60, 180]) / 210.0, rtol=1e-6)
    with pytest.raises(InputError, match="increasing"):
        time_of_night(np.array([5.0, 5.0]), 30.0)


def test_crops_run_across_gaps_and_carry_their_time(gappy_store) -> None:
    data = SleepNightDataset(gappy_store, context=4, normalize=False, progress=False)
    crops = [data.locate(i) for i in range(len(data))]
    # record b (6 windows, a gap after the 4th) is cropped as one run; c (2 windows) is padded
    assert [crop for crop in crops if crop[0] == "b"] == [("b", 0, 4), ("b", 1, 4), ("b", 2, 4)]
    assert [crop for crop in crops if crop[0] == "c"] == [("c", 0, 2)]
    x, labels, valid, time = data[crops.index(("b", 2, 4))]
    assert x[:, 0, 0].tolist() == [1002.0, 1003.0, 1004.0, 1005.0]  # record 1, windows 2-5
    onsets = np.array([65.0, 95.0, 185.0, 215.0]) - 5.0  # across the gap
    np.testing.assert_allclose(time[:, 0].numpy(), onsets / 3600.0, rtol=1e-6)
    np.testing.assert_allclose(time[:, 1].numpy(), onsets / 240.0, rtol=1e-6)
    assert valid.all() and labels.tolist() == [2, 3, 4, 0]
    x, labels, valid, time = data[crops.index(("c", 0, 2))]
    assert valid.tolist() == [True, True, False, False] and labels.tolist() == [0, 1, -1, -1]
    assert time[2:].abs().sum() == 0
    nights = list(data.nights())  # one per record, whole
    assert [(n.record, n.first, len(n.windows)) for n in nights] == [
        ("a", 0, 9), ("b", 0, 6), ("c", 0, 2),
    ]  # fmt: skip


def test_whole_nights_shorter_and_longer_than_the_crop_are_predicted_exactly(gappy_store) -> None:
    torch.manual_seed(0)
    model = build_sequence_classifier(
        None, _config(), num_classes=5, in_chans=3, window_samples=50
    ).eval()
    assert isinstance(model, NightClassifier)
    data = SleepNightDataset(gappy_store, context=4, progress=False)
    nights = predict_nights(model, data, batch_size=3, device="cpu")
    # every window of every record once, in order: a (9 > crop), b (6, a gap), c (2 < crop)
    assert [(n.record, n.first, len(n.probabilities)) for n in nights] == [
        ("a", 0, 9), ("b", 0, 6), ("c", 0, 2),
    ]  # fmt: skip
    assert nights[1].start_times.tolist() == [5.0, 35.0, 65.0, 95.0, 185.0, 215.0]
    assert nights[0].labels.tolist() == [-1, -1, -1, 3, 4, 0, 1, 2, 3]
    b = next(n for n in data.nights() if n.record == "b")
    with torch.no_grad():
        whole = model(b.windows[None], None, data.record_time("b")[None])[0].softmax(-1)
    torch.testing.assert_close(torch.from_numpy(nights[1].probabilities), whole)
    with pytest.raises(InputError, match="SleepNightDataset"):
        from partnd.datasets.sequences import SleepSequenceDataset

        predict_nights(model, SleepSequenceDataset(gappy_store, context=4, progress=False))


def test_save_load_and_predict_give_the_same_nights(gappy_store, tmp_path: Path) -> None:
    from partnd.inference import predict, predict_records
    from partnd.models.serialization import load_classifier, save_model

    torch.manual_seed(0)
    model = build_sequence_classifier(
        None, _config(), num_classes=5, in_chans=3, window_samples=50
    ).eval()
    with torch.no_grad():  # weights away from their initial values (the time embedding is 0)
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    save_model(model, tmp_path / "classifier.pt", NAMES)
    reloaded = load_classifier(tmp_path)
    assert isinstance(reloaded, NightClassifier) and reloaded.class_names == NAMES
    for name, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], value)
    data = SleepNightDataset(gappy_store, records=["b"], context=1, progress=False)
    night = next(data.nights())
    direct = model.predict_night(night.windows, data.record_time("b"))
    records = predict_records(reloaded, gappy_store, ["b"], device="cpu")
    torch.testing.assert_close(torch.from_numpy(records["b"].probabilities), direct)
    assert records["b"].onsets.tolist() == [5.0, 35.0, 65.0, 95.0, 185.0, 215.0]
    # an array of the same windows with the same onsets is the same night; back to back it is not
    onsets = records["b"].onsets
    array = predict(reloaded, night.windows.numpy(), onsets=onsets, device="cpu")
    torch.testing.assert_close(torch.from_numpy(array.probabilities), direct)
    back_to_back = predict(reloaded, night.windows.numpy(), device="cpu").probabilities
    assert np.abs(back_to_back - direct.numpy()).max() > 1e-4
    # store windows under a Subset (of every record's windows) are read within their whole night
    every = SleepWindowDataset(gappy_store)  # a: 9 windows, b, c
    of_b = predict(reloaded, Subset(every, [13, 9]), device="cpu")  # b's windows 4 and 0
    torch.testing.assert_close(torch.from_numpy(of_b.probabilities), direct[[4, 0]])
    assert of_b.window_onsets().tolist() == [185.0, 5.0]
    with pytest.raises(InputError, match="onsets"):
        predict(reloaded, night.windows.numpy()[:3], onsets=[0.0, 30.0, 30.0], device="cpu")


def test_finetune_learns_a_planted_task_and_evaluates_whole_nights(tmp_path: Path) -> None:
    from partnd.finetuning.training import evaluate, finetune

    store = write_staged_store(tmp_path / "store.zarr", ["C3", "C4"], records=4)
    train = InMemoryWindows(store, records=["r0", "r1", "r2"], progress=False)
    config = _config(
        patch_size=30,
        night_crop=16,
        batch_size=4,
        epochs=1,
        min_steps=120,
        lr=2e-3,
        eval_every_steps=40,
    )
    untrained = build_sequence_classifier(
        None, config, num_classes=5, in_chans=2, window_samples=300
    )
    held_out = SleepNightDataset(store, records=["r3"], context=1, progress=False)
    result = finetune(
        None,
        train,
        num_classes=5,
        val_dataset=held_out,
        out_dir=tmp_path / "run",
        config=config,
        class_names=NAMES,
    )
    model = result.model
    assert isinstance(model, NightClassifier) and model.signal_info.ch_names == ("C3", "C4")
    before = evaluate(untrained, held_out, device="cpu").cohen_kappa
    after = evaluate(model, held_out, device="cpu")
    assert after.cohen_kappa > 0.6 and after.cohen_kappa > before + 0.4, (before, after)
    assert after.n == 48 and result.best_metrics["cohen_kappa"] == pytest.approx(after.cohen_kappa)


def test_part_across_windows_initialises_both_levels_from_its_run_directory(
    gappy_store, tmp_path: Path
) -> None:
    from partnd.finetuning.training import finetune
    from partnd.models import HierarchicalEncoder, create_encoder, create_temporal_encoder
    from partnd.models.serialization import save_hierarchical_encoder

    window = create_encoder("vit_test", in_chans=3, patch_size=10, ndim=1)
    temporal = create_temporal_encoder(
        window.embed_dim, "temporal_test", num_positions=4, pos_mask_ratio=0.5
    )
    pretrained = HierarchicalEncoder(window, temporal, 50)
    save_hierarchical_encoder(pretrained, tmp_path / "pretrain")  # as part_windows writes it
    config = _config(lr=1e-12, min_lr=0.0, max_steps=1, epochs=1)
    model = finetune(
        tmp_path / "pretrain",
        str(gappy_store),
        num_classes=5,
        out_dir=tmp_path / "ft",
        config=config,
    ).model
    assert isinstance(model, NightClassifier)
    with torch.no_grad():  # one step at a learning rate of 1e-12: the initial weights
        for name, value in window.state_dict().items():
            torch.testing.assert_close(model.encoder.window.state_dict()[name], value)
        night = model.encoder.temporal.state_dict()
        assert "pos_embed" not in night and "pos_mask_token" not in night
        for name, value in temporal.state_dict().items():
            if name == "patch_embed.bias":  # windows enter as hidden ones
                value = value + temporal.pos_mask_token
            if name not in ("pos_embed", "pos_mask_token"):
                torch.testing.assert_close(night[name], value)
