"""Channel-set encoders: any order, any subset, unseen derivations read by electrode positions,
refusals naming the channel, and models that carry their montage through save and load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig
from partnd.models import create_encoder
from partnd.models.channel_set import ChannelSetPatchEmbed, channel_features
from partnd.models.electrodes import derivation_ends, derivation_positions, electrode_position
from partnd.signal_info import SignalInfo, match_signal
from tests.staged_stores import write_staged_store

PC18 = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
SPECTRAL = {"tokenizer": "spectral", "tokenizer_options": {"standardize": True}}


def set_encoder(channels: list[str], **options: object):
    torch.manual_seed(0)
    return create_encoder(
        "vit_test",
        in_chans=len(channels),
        patch_size=10,
        ndim=1,
        frontend="channel_set",
        frontend_options={"channels": channels, **SPECTRAL, **options},
    )


def test_derivations_are_split_and_located_in_the_10_05_montage() -> None:
    assert derivation_ends("F3-M2") == ("F3", "M2")
    assert derivation_ends("EEG Fpz-Cz") == ("Fpz", "Cz")
    assert derivation_ends("Cz") == ("Cz", None)
    positions = derivation_positions(["EEG Fpz-Cz", "c4-a1", "Oz"])
    assert positions.shape == (3, 2, 3)
    np.testing.assert_array_equal(positions[0, 0], electrode_position("Fpz"))
    np.testing.assert_array_equal(positions[2, 1], 0.0)  # a single electrode
    # right (x > 0), front (y > 0), up: head coordinates
    assert positions[1, 0, 0] > 0.03 and positions[0, 0, 1] > 0.07 and positions[0, 1, 2] > 0.08
    with pytest.raises(InputError, match=r"got \['EEG', 'EOG\(L\)'\] among"):
        derivation_positions(["EEG", "C4-M1", "EOG(L)"])
    with pytest.raises(InputError, match="'A-B' or 'A'"):
        derivation_ends("F3-M2-Cz")


def test_position_features_place_an_unseen_derivation_near_its_neighbours() -> None:
    features = channel_features(["C4-M1", "C4-A1", "O1-M2", "Fpz-Cz", "EEG Fpz-Cz"], 4)
    distance = torch.cdist(features, features)
    assert distance[0, 1] < 0.5 * distance[0, 2]  # the earlobe A1 sits next to the mastoid M1
    assert torch.equal(features[3], features[4])  # the signal-type prefix is ignored


def test_any_order_of_channels_gives_the_same_output() -> None:
    encoder = set_encoder(PC18).eval()
    x = torch.randn(4, 6, 100)
    order = [4, 0, 5, 2, 1, 3]
    with torch.no_grad():
        expected = encoder.embed(x)
        encoder.read_channels([PC18[i] for i in order])
        permuted = encoder.embed(x[:, order])
    torch.testing.assert_close(permuted, expected, atol=1e-5, rtol=1e-5)


def test_a_subset_is_read_alike_as_its_own_layout_or_as_nan_channels() -> None:
    encoder = set_encoder(PC18).eval()
    x = torch.randn(3, 6, 100)
    subset = [3, 5]  # C4-M1, O2-M1
    padded = x.clone()
    padded[0, [0, 1, 2, 4]] = float("nan")  # item 0 holds only C4-M1 and O2-M1
    with torch.no_grad():
        full = encoder.embed(x)
        mixed = encoder.embed(padded)
        encoder.read_channels([PC18[i] for i in subset])
        alone = encoder.embed(x[:, subset])
    torch.testing.assert_close(mixed[0], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed[1:], full[1:], atol=1e-5, rtol=1e-5)  # others unchanged
    assert not torch.allclose(alone[0], full[0], atol=1e-3)
    assert encoder.in_chans == 2 and encoder.architecture["frontend_options"]["channels"] == [
        "C4-M1",
        "O2-M1",
    ]


def test_an_unseen_derivation_is_read_and_unknown_electrodes_are_refused() -> None:
    encoder = set_encoder(PC18).eval()
    encoder.read_channels(["Fpz-Cz", "Pz-Oz"])  # Sleep-EDF's montage, never named in training
    with torch.no_grad():
        out = encoder.embed(torch.randn(2, 2, 100))
    assert out.shape == (2, 32) and bool(torch.isfinite(out).all())
    with pytest.raises(InputError, match=r"got \['EEG\(sec\)'\]"):
        encoder.read_channels(["C4-A1", "EEG(sec)"])
    fixed = create_encoder("vit_test", in_chans=2, patch_size=10, ndim=1)
    assert fixed.channel_mode == "fixed"
    with pytest.raises(InputError, match="channels: expected the encoder's own 2 channels"):
        fixed.read_channels(["C4-M1", "O2-M1"])


def test_training_time_sampling_keeps_at_least_one_present_channel() -> None:
    front = ChannelSetPatchEmbed(6, (10,), 8, channels=PC18, subset_sampling=True)
    present = torch.ones(2000, 6, dtype=torch.bool)
    present[:1000, 3:] = False
    kept = front.train()._keep(present)
    assert bool((kept <= present).all()) and bool((kept.sum(1) >= 1).all())
    sizes = kept[1000:].sum(1)  # a uniform number of 1..6 channels
    counts = torch.bincount(sizes, minlength=7)[1:].float() / 1000
    assert float((counts - 1 / 6).abs().max()) < 0.05
    assert bool((front.eval()._keep(present) == present).all())
    dropout = ChannelSetPatchEmbed(6, (10,), 8, channels=PC18, channel_dropout=0.5).train()
    kept = dropout._keep(torch.ones(4000, 6, dtype=torch.bool))
    # one channel always kept, each of the other five with probability 0.5: 3.5 of 6
    assert bool((kept.sum(1) >= 1).all()) and abs(float(kept.float().mean()) - 7 / 12) < 0.02


def test_every_parameter_gets_a_finite_gradient_with_absent_channels() -> None:
    encoder = set_encoder(PC18[:3], subset_sampling=True).train()
    x = torch.randn(4, 3, 100)
    x[1, 2] = float("nan")
    x[2, :2] = float("nan")
    encoder.forward_grid(x).sum().backward()
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None and bool(torch.isfinite(parameter.grad).all()), name


def test_match_signal_reads_any_known_derivations_for_a_set_model() -> None:
    seen = SignalInfo(6, (3000,), tuple(PC18), 100.0, "window", channel_mode="set")
    assert SignalInfo.from_dict(seen.to_dict()) == seen
    assert "any channel set" in seen.describe()
    assert match_signal(seen, SignalInfo(1, (3000,), ("EEG Fpz-Cz",), 100.0, "window"), "x") is None
    with pytest.raises(InputError, match=r"x: expected EEG derivations .*got \['EEG'\]"):
        match_signal(seen, SignalInfo(2, (3000,), ("EEG", "C4-M1"), 100.0), "x")
    with pytest.raises(InputError, match="x: expected named channels"):
        match_signal(seen, SignalInfo(2, (3000,)), "x")
    with pytest.raises(InputError, match="sampled at 100 Hz"):
        match_signal(seen, SignalInfo(1, (3000,), ("C4-M1",), 200.0), "x")


def config(**overrides: object) -> FinetuneConfig:
    values: dict[str, object] = {
        "patch_size": 30,
        "batch_size": 16,
        "epochs": 1,
        "min_steps": 60,
        "lr": 2e-3,
        "encoder_overrides": {"frontend": "spectral", "frontend_options": {"standardize": True}},
    }
    return FinetuneConfig.preset("test", **{**values, **overrides})


@pytest.mark.slow
def test_a_saved_set_model_carries_its_montage_and_reads_another_store(tmp_path: Path) -> None:
    from partnd.finetuning.training import evaluate, finetune
    from partnd.inference import predict_records
    from partnd.models.serialization import load_classifier

    train = write_staged_store(tmp_path / "train.zarr", ["F3-M2", "C4-M1", "O2-M1"])
    other = write_staged_store(tmp_path / "other.zarr", ["O2-M1", "Fpz-Cz"], seed=1, records=1)
    result = finetune(
        None,
        str(train),
        num_classes=5,
        out_dir=tmp_path / "set",
        config=config(channel_mode="set", channel_options={"subset_sampling": True}),
    )
    model = load_classifier(tmp_path / "set" / "classifier.pt")
    assert model.signal_info.channel_mode == "set"
    assert model.signal_info.ch_names == ("F3-M2", "C4-M1", "O2-M1")
    assert model.encoder.channel_mode == "set"
    report = evaluate(model, str(other), device="cpu")
    assert report.cohen_kappa > 0.6, report
    assert model.encoder.in_chans == 2  # it now reads the other store's layout
    predictions = predict_records(model, str(other), device="cpu")
    assert list(predictions) == ["r0"] and len(predictions["r0"].labels) == 48
    assert result.model.signal_info == model.signal_info

    fixed = finetune(
        None, str(train), num_classes=5, out_dir=tmp_path / "fixed", config=config(max_steps=1)
    ).model
    assert fixed.signal_info.channel_mode == "fixed"
    with pytest.raises(InputError, match=r"missing \['F3-M2', 'C4-M1'\]"):
        evaluate(fixed, str(other), device="cpu")
    unknown = write_staged_store(tmp_path / "unknown.zarr", ["EEG", "C4-M1"], records=1)
    with pytest.raises(InputError, match=r"got \['EEG'\] among \['EEG', 'C4-M1'\]"):
        evaluate(model, str(unknown), device="cpu")


@pytest.mark.parametrize(
    "channel_pool", ["mean", "attention"], ids=["mean pooling", "attention pooling"]
)
def test_a_set_night_classifier_reads_a_subset_of_its_channels(
    tmp_path: Path, channel_pool: str
) -> None:
    from partnd.datasets.nights import SleepNightDataset
    from partnd.finetuning.training import evaluate, finetune
    from partnd.models import NightClassifier

    train = write_staged_store(tmp_path / "train.zarr", ["F3-M2", "C4-M1", "O2-M1"])
    subset = write_staged_store(tmp_path / "subset.zarr", ["O2-M1", "C4-M1"], seed=1, records=1)
    result = finetune(
        None,
        SleepNightDataset(train, context=16, progress=False),
        num_classes=5,
        out_dir=tmp_path / "night",
        config=config(
            context="night",
            night_crop=16,
            batch_size=4,
            temporal_encoder="temporal_test",
            max_steps=4,
            channel_mode="set",
            channel_options={"channel_dropout": 0.3, "channel_pool": channel_pool},
        ),
    )
    model = result.model
    assert isinstance(model, NightClassifier) and model.signal_info.channel_mode == "set"
    front = model.encoder.window.patch_embed
    assert isinstance(front, ChannelSetPatchEmbed) and (front.pool is None) == (
        channel_pool == "mean"
    )
    assert model.signal_info.ch_names == ("F3-M2", "C4-M1", "O2-M1")
    report = evaluate(model, SleepNightDataset(subset, context=1, progress=False), device="cpu")
    assert report.n == 48 and model.encoder.in_chans == 2
    assert model.encoder.window.architecture["frontend_options"]["channels"] == ["O2-M1", "C4-M1"]


@pytest.mark.slow
def test_a_set_encoder_pretrained_on_one_montage_is_fine_tuned_on_another(tmp_path: Path) -> None:
    from partnd.engine.config import PretrainConfig
    from partnd.finetuning.training import finetune
    from partnd.models.serialization import load_encoder
    from partnd.pretraining import pretrain

    source = write_staged_store(tmp_path / "source.zarr", ["F3-M2", "C4-M1", "O2-M1"], records=1)
    target = write_staged_store(tmp_path / "target.zarr", ["Fpz-Cz", "Pz-Oz"], seed=1, records=2)
    pretrain_config = PretrainConfig.preset(
        "test",
        patch_size=30,
        num_patches=10,
        max_steps=2,
        channel_mode="set",
        channel_options={"subset_sampling": True},
        encoder_overrides={"frontend": "spectral", "frontend_options": {"standardize": True}},
    )
    pretrain(str(source), out_dir=tmp_path / "pretrain", config=pretrain_config)
    encoder = load_encoder(tmp_path / "pretrain")
    assert encoder.channel_mode == "set" and encoder.signal_info is not None
    assert encoder.signal_info.channel_mode == "set"
    assert encoder.signal_info.ch_names == ("F3-M2", "C4-M1", "O2-M1")
    result = finetune(
        tmp_path / "pretrain",
        str(target),
        num_classes=5,
        out_dir=tmp_path / "finetune",
        config=config(max_steps=2),
    )
    # the montage record grows by the derivations fine-tuning saw
    assert result.model.signal_info.ch_names == ("F3-M2", "C4-M1", "O2-M1", "Fpz-Cz", "Pz-Oz")
    assert result.model.encoder.in_chans == 2
    fixed = PretrainConfig.preset("test", patch_size=30, num_patches=10, max_steps=1)
    pretrain(str(source), out_dir=tmp_path / "fixed", config=fixed)
    with pytest.raises(InputError, match=r"missing \['F3-M2', 'C4-M1', 'O2-M1'\]"):
        finetune(
            tmp_path / "fixed",
            str(target),
            num_classes=5,
            out_dir=tmp_path / "refused",
            config=config(max_steps=1),
        )


def test_frozen_features_of_a_set_encoder_follow_the_data_channels(tmp_path: Path) -> None:
    from partnd.datasets import InMemoryWindows
    from partnd.evaluation.probes import extract_features

    store = write_staged_store(tmp_path / "store.zarr", ["O2-M1", "Fpz-Cz"], records=1)
    encoder = set_encoder(PC18)
    windows = InMemoryWindows(store, labelled_only=True, progress=False)
    features, labels = extract_features(encoder, windows, device="cpu")
    assert features.shape == (48, 64) and labels.shape == (48,)
    assert encoder.architecture["frontend_options"]["channels"] == ["O2-M1", "Fpz-Cz"]


@pytest.mark.parametrize("channel_mode", ["set", "fixed"])
def test_channel_dropout_marks_channels_absent_only_for_a_set_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, channel_mode: str
) -> None:
    """A set model's channel dropout makes channels absent (NaN), and it trains on them with a
    finite loss; a fixed model's still zeroes them."""
    from partnd.engine import augment
    from partnd.finetuning import training

    flags: list[bool] = []

    def spy(names: list[str], ndim: int, absent_channels: bool = False) -> object:
        flags.append(absent_channels)
        return augment.build_augmentation(names, ndim, absent_channels)

    monkeypatch.setattr(training, "build_augmentation", spy)
    train = write_staged_store(tmp_path / "train.zarr", ["F3-M2", "C4-M1", "O2-M1"])
    result = training.finetune(
        None,
        str(train),
        num_classes=5,
        out_dir=tmp_path / "run",
        config=config(channel_mode=channel_mode, augmentations=("channel_dropout",), max_steps=3),
    )
    assert flags == [channel_mode == "set"]
    losses = [record["loss"] for record in result.history if record["phase"] == "train"]
    assert losses and all(np.isfinite(losses))
