"""Pieces of sequence fine-tuning: data adaptation, the loss, the model builder, whole nights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.sequence import (
    SequenceClassificationTask,
    as_sequence_dataset,
    build_sequence_classifier,
    evaluate_sequences,
    predict_nights,
)
from partnd.models import HierarchicalEncoder, create_encoder, create_temporal_encoder

TILE = 10


def _config(**overrides):
    values = {"patch_size": TILE, "context": 4, "temporal_encoder": "temporal_test"}
    return FinetuneConfig.preset("test", **{**values, **overrides})


def test_window_datasets_become_their_sequences(gappy_store):
    windows = InMemoryWindows(gappy_store, records=["b", "a"], channels=["O1-M2"], progress=False)
    sequences = as_sequence_dataset(windows, 3)
    assert sequences.records == ("b", "a") and sequences.ch_names == ["O1-M2"]
    assert sequences.context == 3
    assert as_sequence_dataset(sequences, 3) is sequences
    with pytest.raises(InputError, match="sequences of 5"):
        as_sequence_dataset(sequences, 5)
    whole = as_sequence_dataset(str(gappy_store), 3)
    assert whole.records == ("a", "b", "c")
    with pytest.raises(InputError, match="consecutive windows"):
        as_sequence_dataset(np.zeros((4, 3, 50), dtype=np.float32), 3)


def test_the_loss_ignores_padding_and_unscored_windows() -> None:
    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, x, valid):
            return self.logits

    logits = torch.tensor([[[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [9.0, -9.0, 0.0]]])  # [1, 3, 3]
    labels = torch.tensor([[0, 2, -1]])
    valid = torch.tensor([[True, True, False]])
    task = SequenceClassificationTask(3, None, 0.0)
    x = torch.zeros(1, 3, 2, 5)
    loss, metrics = task.compute_loss(Fixed(logits), (x, labels, valid), torch.Generator())
    expected = torch.nn.functional.cross_entropy(logits[0, :2], labels[0, :2])
    torch.testing.assert_close(loss, expected)
    assert float(metrics["accuracy"]) == pytest.approx(0.5)  # 1 of the 2 scored windows
    weights = torch.tensor([1.0, 1.0, 3.0])
    weighted, _ = SequenceClassificationTask(3, weights, 0.0).compute_loss(
        Fixed(logits), (x, labels, valid), torch.Generator()
    )
    manual = torch.nn.functional.cross_entropy(logits[0, :2], labels[0, :2], weight=weights)
    torch.testing.assert_close(weighted, manual)


def test_augmentation_applies_window_by_window() -> None:
    seen = []

    def augment(x, generator):
        seen.append(tuple(x.shape))
        return x * 2

    class Echo(torch.nn.Module):
        def forward(self, x, valid):
            return x.mean(dim=(2, 3), keepdim=False)[..., None].expand(-1, -1, 3)

    task = SequenceClassificationTask(3, None, 0.0, augment)
    x = torch.ones(2, 4, 3, 5)
    task.compute_loss(
        Echo(), (x, torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4).bool()), None
    )
    assert seen == [(8, 3, 5)]


def test_builder_from_scratch_window_or_hierarchical_encoder() -> None:
    config = _config()
    scratch = build_sequence_classifier(None, config, num_classes=5, in_chans=3, window_samples=50)
    assert scratch.context == 4 and scratch.encoder.window.in_chans == 3
    assert scratch.encoder.window.num_positions == 5 and scratch.encoder.temporal.embed_dim == 16
    window = create_encoder("vit_test", in_chans=3, patch_size=TILE, ndim=1)
    on_window = build_sequence_classifier(
        window, config, num_classes=5, in_chans=3, window_samples=50
    )
    torch.testing.assert_close(
        on_window.encoder.window.patch_embed.weight, window.patch_embed.weight
    )
    temporal = create_temporal_encoder(window.embed_dim, "temporal_test", num_positions=9)
    hierarchical = HierarchicalEncoder(window, temporal, 50)
    kept = build_sequence_classifier(
        hierarchical, config, num_classes=5, in_chans=3, window_samples=50
    )
    torch.testing.assert_close(kept.encoder.temporal.blocks[0].attn.qkv.weight,
                               temporal.blocks[0].attn.qkv.weight)  # fmt: skip
    with pytest.raises(InputError, match="train_dataset"):
        build_sequence_classifier(window, config, num_classes=5, in_chans=2, window_samples=50)
    with pytest.raises(InputError, match=r"FinetuneConfig.patch_size: expected a patch size that "
                       r"divides the items' spatial size \(50,\)"):  # fmt: skip
        build_sequence_classifier(None, _config(patch_size=15), num_classes=5, in_chans=3,
                                  window_samples=50)  # fmt: skip
    with pytest.raises(InputError, match="encoder: expected a patch size that divides"):
        build_sequence_classifier(window, config, num_classes=5, in_chans=3, window_samples=55)


def test_whole_nights_are_predicted_and_scored_on_labelled_windows(gappy_store):
    torch.manual_seed(0)
    data = SleepSequenceDataset(gappy_store, context=4, progress=False)
    model = build_sequence_classifier(
        None, _config(), num_classes=5, in_chans=3, window_samples=50
    ).eval()
    nights = predict_nights(model, data, batch_size=3, device="cpu")
    assert [(n.record, n.first, len(n.probabilities)) for n in nights] == [
        ("a", 0, 9), ("b", 0, 4), ("b", 4, 2), ("c", 0, 2),
    ]  # fmt: skip
    torch.testing.assert_close(
        torch.from_numpy(nights[1].probabilities),
        model.predict_night(next(n for n in data.nights() if n.record == "b").windows),
    )
    report = evaluate_sequences(model, data, device="cpu")
    labels = np.concatenate([n.labels for n in nights])
    predicted = np.concatenate([n.probabilities for n in nights]).argmax(1)
    assert report.n == int((labels >= 0).sum()) == 17 - 3
    assert report.accuracy == pytest.approx(float((predicted == labels)[labels >= 0].mean()))
    assert report.loss is not None and report.loss > 0


def test_finetune_with_context_trains_saves_reloads_and_evaluates(gappy_store, tmp_path):
    from partnd.finetuning.training import evaluate, finetune
    from partnd.models import SequenceClassifier
    from partnd.models.serialization import load_classifier

    config = _config(epochs=2, batch_size=2, eval_every_steps=1)
    train = InMemoryWindows(gappy_store, records=["a", "b"], progress=False)
    result = finetune(
        None,
        train,
        num_classes=5,
        val_dataset=SleepSequenceDataset(gappy_store, records=["c"], context=4, progress=False),
        out_dir=tmp_path / "run",
        config=config,
        class_names=["W", "N1", "N2", "N3", "R"],
    )
    model = result.model
    assert isinstance(model, SequenceClassifier) and model.context == 4
    assert model.signal_info.ch_names == ("F3-M2", "C4-M1", "O1-M2")
    assert model.signal_info.sfreq == pytest.approx(100.0 / 60.0)
    assert [r["phase"] for r in result.history].count("val") == 2  # every epoch at this budget
    reloaded = load_classifier(tmp_path / "run")
    assert isinstance(reloaded, SequenceClassifier) and reloaded.class_names[4] == "R"
    for name, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], value)
    report = evaluate(reloaded, str(gappy_store), device="cpu")
    assert report.n == 17 - 3 and report.per_class_f1.keys() == {"W", "N1", "N2", "N3", "R"}
    # the model picks its channels by name from data that hold them in another order
    picked = SleepSequenceDataset(
        gappy_store, context=4, channels=["O1-M2", "C4-M1", "F3-M2"], progress=False
    )
    assert evaluate(reloaded, picked, device="cpu").cohen_kappa == pytest.approx(report.cohen_kappa)
    with pytest.raises(InputError, match="channel"):
        evaluate(
            reloaded,
            SleepSequenceDataset(gappy_store, context=4, channels=["F3-M2"], progress=False),
        )
    array = np.zeros((3, 3, 50), "float32")
    with pytest.raises(InputError, match="train_dataset: expected a sleep store"):
        finetune(None, array, num_classes=5, out_dir=tmp_path / "x", config=config,
                 train_labels=[0, 1, 2])  # the data's form, not the labels  # fmt: skip
    with pytest.raises(InputError, match="val_labels: expected None for a sequence classifier"):
        finetune(None, InMemoryWindows(gappy_store, records=["a", "b"], progress=False),
                 num_classes=5, out_dir=tmp_path / "x", config=config, val_labels=[0, 1],
                 val_dataset=InMemoryWindows(gappy_store, records=["c"],
                                             progress=False))  # fmt: skip
    with pytest.raises(InputError, match="train_dataset: expected a sleep store"):
        finetune(None, array, num_classes=5, out_dir=tmp_path / "x", config=config)
    assert not (tmp_path / "x").exists()  # nothing left behind by a refused run


def test_predict_gives_a_sequence_classifier_whole_nights(gappy_store):
    from partnd.inference import predict, predict_records

    torch.manual_seed(0)
    model = build_sequence_classifier(
        None, _config(), num_classes=5, in_chans=3, window_samples=50
    ).eval()
    model.class_names = ["W", "N1", "N2", "N3", "R"]
    night = SleepSequenceDataset(gappy_store, records=["b"], context=4, progress=False)
    runs = [torch.from_numpy(p.probabilities) for p in predict_nights(model, night, device="cpu")]
    records = predict_records(model, gappy_store, device="cpu")
    assert list(records) == ["a", "b", "c"]
    b = records["b"]  # two runs (a gap), each read whole, in window order
    torch.testing.assert_close(torch.from_numpy(b.probabilities), torch.cat(runs))
    assert b.onsets.tolist() == [5.0, 35.0, 65.0, 95.0, 185.0, 215.0]
    assert b.stage_names[0] in model.class_names
    # an array of consecutive windows is one night
    windows = night.nights().__next__().windows
    array = predict(model, windows.numpy(), device="cpu")
    torch.testing.assert_close(torch.from_numpy(array.probabilities), runs[0])


def test_a_sequence_classifier_predicts_a_subset_at_its_own_windows(gappy_store):
    """A Subset's windows get the probabilities they have in their whole night (read with their
    neighbours), at their own onsets: not the whole record in store order."""
    from torch.utils.data import Subset

    from partnd.datasets import SleepWindowDataset
    from partnd.inference import predict, predict_records

    torch.manual_seed(0)
    model = build_sequence_classifier(
        None, _config(), num_classes=5, in_chans=3, window_samples=50
    ).eval()
    whole = predict_records(model, gappy_store, ["b"], device="cpu")["b"]
    b = SleepWindowDataset(gappy_store, records=["b"])
    for order in ([4, 0, 5, 2, 1, 3], [5, 1], [3]):
        subset = predict(model, Subset(b, order), device="cpu")
        assert len(subset.labels) == len(order)
        np.testing.assert_allclose(subset.window_onsets(), whole.window_onsets()[order])
        np.testing.assert_allclose(subset.probabilities, whole.probabilities[order], atol=1e-6)
    windows = torch.randn(4, 3, 50)
    with pytest.raises(InputError, match="onsets: expected increasing window starts"):
        predict(model, windows, onsets=[0.0, 60.0, 30.0, 90.0], device="cpu")
