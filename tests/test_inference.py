"""Tests of reloading encoders and classifiers, inference, and hypnogram export."""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest
import torch

import partnd
from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.models import create_encoder
from partnd.models.serialization import load_classifier, load_encoder


def windows(n: int = 24, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """[n, 2, 400] signals whose class (0, 1, 2) sets the amplitude."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    signals = rng.standard_normal((n, 2, 400)) * (1 + labels[:, None, None])
    return signals.astype(np.float32), labels.tolist()


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory: pytest.TempPathFactory) -> partnd.FinetuneResult:
    x, y = windows()
    out = tmp_path_factory.mktemp("ft") / "run"
    return partnd.finetune(
        None,
        x,
        train_labels=y,
        num_classes=3,
        class_names=["W", "N2", "N3"],
        out_dir=out,
        config=FinetuneConfig.preset("test", patch_size=20, epochs=1),
    )


def test_classifier_round_trip_with_class_names(finetuned: partnd.FinetuneResult) -> None:
    assert (finetuned.run_dir / "classifier.pt").is_file()
    model = load_classifier(finetuned.run_dir)
    assert model.class_names == ["W", "N2", "N3"] and not model.training
    x = torch.from_numpy(windows(5, seed=1)[0])
    with torch.no_grad():
        torch.testing.assert_close(model(x), finetuned.model(x))
    backbone = load_encoder(finetuned.run_dir / "classifier.pt")
    assert backbone.num_classes == 0 and backbone.pos_embed is not None
    with pytest.raises(InputError, match=r"classifier\.pt"):
        load_classifier(finetuned.run_dir / "checkpoints")


def test_predict_and_export_the_hypnogram(finetuned: partnd.FinetuneResult, tmp_path: Path) -> None:
    model = load_classifier(finetuned.run_dir)
    x, _ = windows(6, seed=2)
    prediction = partnd.predict(model, x, onsets=[30.0 * k + 15 for k in range(6)])
    assert prediction.labels.shape == (6,) and prediction.probabilities.shape == (6, 3)
    np.testing.assert_allclose(prediction.probabilities.sum(1), 1.0, rtol=1e-5)
    assert prediction.labels.tolist() == prediction.probabilities.argmax(1).tolist()
    assert prediction.class_names == ["W", "N2", "N3"]
    annotations = prediction.to_annotations()
    assert list(annotations.onset) == [15.0, 45.0, 75.0, 105.0, 135.0, 165.0]
    assert set(annotations.duration) == {30.0}
    assert list(annotations.description) == [f"Sleep stage {s}" for s in prediction.stage_names]
    prediction.write_csv(tmp_path / "hypnogram.csv")
    lines = (tmp_path / "hypnogram.csv").read_text().splitlines()
    assert lines[0] == "onset,duration,description,stage,onset_s,p_W,p_N2,p_N3"
    assert len(lines) == 7
    row = lines[1].split(",")
    assert row[1:5] == ["30.0", annotations.description[0], prediction.stage_names[0], "15.0"]
    from_csv = mne.read_annotations(tmp_path / "hypnogram.csv")  # MNE's annotation CSV
    assert list(from_csv.description) == list(annotations.description)
    prediction.write_edf(tmp_path / "hypnogram.edf")
    read = mne.read_annotations(tmp_path / "hypnogram.edf")
    np.testing.assert_allclose(read.onset, annotations.onset)
    assert list(read.description) == list(annotations.description)
    with pytest.raises(InputError, match="onsets"):
        partnd.predict(model, x, onsets=[0.0])


def test_predict_accepts_a_npy_path_and_labelled_datasets(
    finetuned: partnd.FinetuneResult, tmp_path: Path
) -> None:
    x, y = windows(4, seed=3)
    np.save(tmp_path / "x.npy", x)
    from_path = partnd.predict(finetuned.model, tmp_path / "x.npy")
    labelled = partnd.predict(
        finetuned.model, [(torch.from_numpy(a), b) for a, b in zip(x, y, strict=True)]
    )
    assert from_path.labels.tolist() == labelled.labels.tolist()
    report = partnd.evaluate(finetuned.model, tmp_path / "x.npy", labels=y)
    assert report.n == 4 and report.loss is not None and report.loss > 0


def test_load_encoder_from_a_training_checkpoint_takes_the_ema_weights(tmp_path: Path) -> None:
    x, _ = windows(16)
    config = PretrainConfig.preset(
        "test", patch_size=20, num_patches=6, num_pairs=12, epochs=1, batch_size=4, ema_decay=0.5
    )
    result = partnd.pretrain(x, out_dir=tmp_path / "run", config=config)
    from_checkpoint = load_encoder(tmp_path / "run" / "checkpoints" / "last.pt")
    from_file = load_encoder(tmp_path / "run")
    for name, value in from_file.state_dict().items():
        assert torch.equal(value, from_checkpoint.state_dict()[name]), name
        assert torch.equal(value, result.encoder.state_dict()[name]), name


def test_pretrain_accepts_a_npy_path(tmp_path: Path) -> None:
    x, _ = windows(8)
    np.save(tmp_path / "x.npy", x)
    config = PretrainConfig.preset(
        "test", patch_size=20, num_patches=6, num_pairs=12, epochs=1, batch_size=4
    )
    from_path = partnd.pretrain(tmp_path / "x.npy", out_dir=tmp_path / "a", config=config)
    from_array = partnd.pretrain(x, out_dir=tmp_path / "b", config=config)
    assert torch.equal(from_path.encoder.patch_embed.weight, from_array.encoder.patch_embed.weight)
    with pytest.raises(InputError, match=r"\.npy file"):
        partnd.pretrain(str(tmp_path / "missing.npy"), out_dir=tmp_path / "c", config=config)


def test_embed_tiles_on_the_grid_and_returns_one_vector_per_input() -> None:
    encoder = create_encoder("vit_test", in_chans=2, patch_size=20, ndim=1).eval()
    x = torch.randn(3, 2, 400)
    with torch.no_grad():
        embedding = encoder.embed(x)
        tokens = encoder.embed_tokens(x)
        tiles = x.unfold(2, 20, 20).permute(0, 2, 1, 3)  # [B, 20, C, 20]
        reference = encoder.forward_features(tiles)
    assert embedding.shape == (3, 32) and tokens.shape == (3, 20, 32)
    torch.testing.assert_close(embedding, reference[:, 0])
    torch.testing.assert_close(tokens, reference[:, 1:])
    encoder.add_position_embedding(20)
    with pytest.raises(InputError, match="20"):
        encoder.embed(torch.randn(1, 2, 300))  # 15 tiles for a 20-slot embedding


def test_unreadable_files_are_refused_naming_the_argument(tmp_path: Path) -> None:
    truncated = tmp_path / "encoder.pt"
    truncated.write_bytes(b"PK\x03\x04 not a whole zip")
    with pytest.raises(InputError, match=r"^path: expected a file saved by partnd"):
        load_encoder(truncated)
    with pytest.raises(InputError, match=r"^path: expected"):
        load_classifier(tmp_path / "nothing-here")
    x, _ = windows(8)
    with pytest.raises(InputError, match=r"^init_weights: expected a file saved by partnd"):
        partnd.pretrain(
            x,
            out_dir=tmp_path / "run",
            config=PretrainConfig.preset("test", patch_size=20, num_patches=6, epochs=1),
            init_weights=truncated,
        )


class WindowIdentity(torch.nn.Module):
    """Logits [B, 9] peaking at the window index the gappy store writes in each window's first
    sample (``1000 * record + window``): the predicted label of a window is its index."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = x[:, 0, 0] % 1000
        return -(index[:, None] - torch.arange(9.0)).abs()


def test_predictions_of_a_subset_land_at_their_own_windows(gappy_store: Path) -> None:
    """Each item of a Subset (permuted, sliced, nested, of a multi-record dataset) is written at
    its own window's onset; store windows whose order cannot be traced are refused."""
    from torch.utils.data import ConcatDataset, Subset

    from partnd.datasets import SleepWindowDataset
    from partnd.datasets.sleep_windows import InMemoryWindows

    model = WindowIdentity()
    onsets_b = 5.0 + 30.0 * np.array([0, 1, 2, 3, 6, 7])  # record b: a gap after window 3
    b = SleepWindowDataset(gappy_store, records=["b"], normalize=False)
    in_memory = InMemoryWindows(gappy_store, records=["b"], normalize=False, progress=False)
    perm = [4, 0, 5, 2, 1, 3]
    cases = {
        "permuted": (Subset(b, perm), perm),
        "sliced": (Subset(b, range(2, 5)), [2, 3, 4]),
        "nested": (Subset(Subset(b, perm), [2, 0]), [5, 4]),
        "negative": (Subset(b, [-1, 0]), [5, 0]),
        "in memory": (Subset(in_memory, perm), perm),
    }
    for name, (data, windows_read) in cases.items():
        prediction = partnd.predict(model, data, device="cpu")
        assert prediction.labels.tolist() == windows_read, name
        np.testing.assert_allclose(prediction.window_onsets(), onsets_b[windows_read])
    every = SleepWindowDataset(gappy_store, normalize=False)  # a: 9 windows, b, c
    of_b = partnd.predict(model, Subset(every, [13, 9]), device="cpu")  # b's windows 4 and 0
    assert of_b.labels.tolist() == [4, 0] and of_b.window_onsets().tolist() == [185.0, 5.0]
    with pytest.raises(InputError, match="windows of 2 records"):
        partnd.predict(model, Subset(every, [0, 9]), device="cpu")
    with pytest.raises(InputError, match=r"data: expected a SleepWindowDataset or .*Subset"):
        partnd.predict(model, ConcatDataset([b, b]), device="cpu")


def test_arguments_of_the_wrong_kind_are_refused_not_tracebacks(
    finetuned: partnd.FinetuneResult,
) -> None:
    with pytest.raises(InputError, match=r"data: expected a torch Dataset .*got \{'a': 1\}"):
        partnd.predict(finetuned.model, {"a": 1})  # a mapping has __getitem__: was a KeyError
    with pytest.raises(InputError, match=r"path: expected a path to a classifier\.pt .*got int"):
        load_classifier(3)  # type: ignore[arg-type]  # was a TypeError
