"""Tests of ``partnd.finetuning.training`` and ``partnd.evaluate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.finetuning.training import balanced_class_weights, evaluate, finetune
from partnd.models import create_encoder
from partnd.pretraining import pretrain

FREQUENCIES = (2, 6, 15)  # cycles per window: the class is the frequency content


def tones(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, 1, 200] noisy sines of random phase whose frequency is given by the label."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(FREQUENCIES), n)
    time = np.arange(200) / 200
    phases = rng.uniform(0, 2 * np.pi, n)
    clean = np.sin(2 * np.pi * np.array(FREQUENCIES)[labels, None] * time + phases[:, None])
    signals = clean[:, None] + 0.3 * rng.standard_normal((n, 1, 200))
    return signals.astype(np.float32), labels


def ft_config(**overrides: object) -> FinetuneConfig:
    base = {"patch_size": 20, "epochs": 8, "batch_size": 16, "lr": 3e-3}
    return FinetuneConfig.preset("test", **{**base, **overrides})


def test_finetune_from_scratch_beats_chance_and_writes_reports(tmp_path: Path) -> None:
    x, y = tones(96, seed=0)
    xv, yv = tones(48, seed=1)
    names = ["slow", "mid", "fast"]
    result = finetune(
        "vit_test",
        list(zip(torch.from_numpy(x), y.tolist(), strict=True)),
        num_classes=3,
        val_dataset=xv,
        val_labels=yv.tolist(),
        out_dir=tmp_path / "run",
        config=ft_config(),
        class_names=names,
    )
    assert result.best_metrics["accuracy"] > 0.8  # chance is 1/3
    val = [r for r in result.history if r["phase"] == "val"]
    best = max(val, key=lambda record: record["cohen_kappa"])
    assert result.best_metrics["epoch"] == best["epoch"]
    assert result.best_metrics["cohen_kappa"] == pytest.approx(best["cohen_kappa"])
    report = evaluate(result.model, xv, labels=yv.tolist(), class_names=names)
    assert report.cohen_kappa == pytest.approx(result.best_metrics["cohen_kappa"])
    stored = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert stored == json.loads(json.dumps(result.best_metrics))
    assert set(stored["per_class_f1"]) == set(names)
    png = (tmp_path / "run" / "confusion_matrix.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert (tmp_path / "run" / "checkpoints" / "best.pt").is_file()
    assert result.model.encoder.pos_embed is not None
    assert result.model.encoder.pos_embed.shape[0] == 10  # 200 / 20 on-grid slots


class PredictionInInput(nn.Module):
    """A 'model' whose prediction is written in the input: ``x[:, 0, 0]`` is the class."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(x[:, 0, 0].long(), 3).float()


def test_evaluate_matches_hand_computed_metrics() -> None:
    truth = [0, 0, 1, 1, 2, 2]
    predicted = [0, 1, 1, 1, 2, 0]
    x = torch.zeros(6, 1, 4)
    x[:, 0, 0] = torch.tensor(predicted, dtype=torch.float32)
    report = evaluate(PredictionInInput(), list(zip(x, truth, strict=True)), batch_size=4)
    assert report.accuracy == pytest.approx(4 / 6)
    observed, chance = 4 / 6, (2 * 2 + 2 * 3 + 2 * 1) / 36
    assert report.cohen_kappa == pytest.approx((observed - chance) / (1 - chance))  # 0.5
    assert report.per_class_f1 == pytest.approx({"0": 0.5, "1": 0.8, "2": 2 / 3})
    assert report.macro_f1 == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert report.confusion_matrix.tolist() == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]


def test_evaluate_restores_mode_and_rejects_nan() -> None:
    model = PredictionInInput().train()
    x = torch.zeros(5, 1, 4)
    evaluate(model, x, labels=[0] * 5)
    assert model.training
    x[3, 0, 1] = float("inf")
    with pytest.raises(InputError, match=r"dataset\[3\]: expected only finite values"):
        evaluate(model, x, labels=[0] * 5, batch_size=2)


def test_finetune_a_pretrained_encoder_without_modifying_it(tmp_path: Path) -> None:
    x, y = tones(32, seed=0)
    pretrained = pretrain(
        x,
        out_dir=tmp_path / "pre",
        config=PretrainConfig.preset(
            "test", patch_size=20, num_patches=6, num_pairs=12, epochs=1, batch_size=8
        ),
    ).encoder
    original = {k: v.clone() for k, v in pretrained.state_dict().items()}
    result = finetune(
        pretrained,
        x,
        train_labels=y.tolist(),
        num_classes=3,
        out_dir=tmp_path / "ft",
        config=ft_config(epochs=1, lr=1e-9, min_lr=0.0, weight_decay=0.0),
    )
    for name, value in pretrained.state_dict().items():
        assert torch.equal(value, original[name]), name
    tuned = result.model.encoder.state_dict()
    assert torch.allclose(tuned["blocks.0.attn.qkv.weight"], original["blocks.0.attn.qkv.weight"])
    assert result.best_metrics["epoch"] == 0 and result.best_metrics["loss"] > 0
    from_dir = finetune(
        tmp_path / "pre",
        x,
        train_labels=y.tolist(),
        num_classes=3,
        out_dir=tmp_path / "ft2",
        config=ft_config(epochs=1, lr=1e-9, min_lr=0.0, weight_decay=0.0),
    )
    assert torch.allclose(
        from_dir.model.encoder.patch_embed.weight, result.model.encoder.patch_embed.weight
    )


def test_finetune_resume_equals_uninterrupted(tmp_path: Path) -> None:
    x, y = tones(32, seed=0)
    xv, yv = tones(16, seed=1)
    kwargs = {
        "train_labels": y.tolist(),
        "val_dataset": xv,
        "val_labels": yv.tolist(),
        "num_classes": 3,
        "config": ft_config(epochs=3, batch_size=8, layer_decay=0.8, label_smoothing=0.1),
    }
    full = finetune(None, x, out_dir=tmp_path / "full", **kwargs)  # type: ignore[arg-type]
    finetune(None, x, out_dir=tmp_path / "cut", max_steps=6, **kwargs)  # type: ignore[arg-type]
    resumed = finetune(
        None,
        x,
        out_dir=tmp_path / "cut",
        resume=True,
        max_steps=None,
        **{k: v for k, v in kwargs.items() if k != "config"},  # type: ignore[arg-type]
    )
    for name, value in full.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    assert resumed.best_metrics == full.best_metrics


def test_balanced_class_weights() -> None:
    weights = balanced_class_weights(np.array([0] * 6 + [1] * 2), 3)
    assert weights.tolist() == pytest.approx([8 / (3 * 6), 8 / (3 * 2), 0.0])


def test_class_weights_change_the_loss(tmp_path: Path) -> None:
    x, y = tones(16, seed=0)
    y = np.array([0] * 12 + [1] * 4)
    plain = finetune(
        None,
        x,
        train_labels=y.tolist(),
        num_classes=2,
        out_dir=tmp_path / "a",
        config=ft_config(epochs=1),
    )
    weighted = finetune(
        None,
        x,
        train_labels=y.tolist(),
        num_classes=2,
        out_dir=tmp_path / "b",
        config=ft_config(epochs=1, class_weights="balanced"),
    )
    assert plain.history[0]["loss"] != pytest.approx(weighted.history[0]["loss"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, "num_classes: expected an int >= 2"),
        ({"num_classes": 3, "class_names": ["a", "b"]}, "class_names: expected 3 names"),
        ({"num_classes": 2}, r"labels: expected class labels in \[0, num_classes=2\)"),
        (
            {
                "num_classes": 3,
                "val_dataset": np.zeros((4, 1, 100), np.float32),
                "val_labels": [0] * 4,
            },
            "val_dataset: expected items of spatial shape",
        ),
        (
            {"num_classes": 3, "encoder": "vit_nope"},
            r"encoder: expected an encoder preset \[.*\] or an",
        ),
    ],
)
def test_bad_input(tmp_path: Path, kwargs: dict, message: str) -> None:
    x, y = tones(16, seed=0)
    encoder = kwargs.pop("encoder", None)
    with pytest.raises(InputError, match=message):
        finetune(
            encoder,
            x,
            train_labels=y.tolist(),
            out_dir=tmp_path / "run",
            config=ft_config(),
            **kwargs,
        )


def test_encoder_with_other_channels_is_rejected(tmp_path: Path) -> None:
    x, y = tones(16, seed=0)
    encoder = create_encoder("vit_test", in_chans=3, patch_size=20, ndim=1)
    with pytest.raises(InputError, match=r"train_dataset: expected items \[3, \*spatial\]"):
        finetune(encoder, x, train_labels=y.tolist(), num_classes=3, out_dir=tmp_path / "r")


def test_the_encoder_field_is_a_keyword_beside_the_positional_encoder(tmp_path: Path) -> None:
    """``encoder`` (the weights or a preset name) is positional, so the config field of the same
    name can be set as a keyword; settings that would be ignored are refused."""
    x, y = tones(16, seed=0)
    common = {"train_labels": y.tolist(), "num_classes": 3, "config": ft_config(epochs=1)}
    result = finetune(None, x, out_dir=tmp_path / "a", encoder="vit_test_wide", **common)
    assert result.config.encoder == "vit_test_wide" and result.model.encoder.embed_dim == 64
    conflict = r"encoder: expected the encoder preset given as the first argument \('vit_test'\)"
    with pytest.raises(InputError, match=conflict + " or none, got 'vit_mini'"):
        finetune("vit_test", x, out_dir=tmp_path / "b", encoder="vit_mini", **common)
    with pytest.raises(InputError, match=r"FinetuneConfig\.patch_size: expected a patch size that"):
        finetune(None, x, out_dir=tmp_path / "b", patch_size=30, **common)
    pretrained = result.model.encoder
    with pytest.raises(InputError, match=r"FinetuneConfig\.encoder_overrides: expected no arch"):
        finetune(pretrained, x, out_dir=tmp_path / "b", encoder_overrides={"depth": 1}, **common)
    assert not (tmp_path / "b").exists()


def test_validation_windows_must_not_be_training_windows(gappy_store: Path, tmp_path: Path) -> None:
    """Validation on windows of the training set (same store) is a leak: refused, for window
    Subsets traced to their windows and for sequences by record; disjoint windows pass."""
    from torch.utils.data import Subset

    from partnd.datasets import SleepWindowDataset
    from partnd.datasets.sequences import SleepSequenceDataset

    windows = SleepWindowDataset(gappy_store, labelled_only=True)
    config = FinetuneConfig.preset("test", patch_size=10, epochs=1, batch_size=2, max_steps=1)
    common = {"num_classes": 5, "config": config}
    with pytest.raises(InputError, match=r"val_dataset: expected windows other than those of "
                       r"train_dataset .* got windows of record\(s\) b in both"):  # fmt: skip
        finetune(None, Subset(windows, range(0, 9)), val_dataset=Subset(windows, [8, 9]),
                 out_dir=tmp_path / "leak", **common)  # fmt: skip
    finetune(None, Subset(windows, range(0, 8)), val_dataset=Subset(windows, [8, 9]),
             out_dir=tmp_path / "disjoint", **common)  # fmt: skip
    nights = SleepSequenceDataset(gappy_store, records=["a", "b"], context=2, progress=False)
    with pytest.raises(InputError, match=r"val_dataset: .* got windows of record\(s\) a, b in"):
        finetune(None, nights, val_dataset=nights, out_dir=tmp_path / "seq", context=2,
                 temporal_encoder="temporal_test", **common)  # fmt: skip
    assert not (tmp_path / "leak").exists() and not (tmp_path / "seq").exists()


def test_complex_signals_are_refused_not_cast(tmp_path: Path) -> None:
    x, y = tones(8, seed=0)
    with pytest.raises(InputError, match=r"train_dataset: expected real numbers .*complex64"):
        finetune(None, x.astype(np.complex64), train_labels=y.tolist(), num_classes=3,
                 out_dir=tmp_path / "r", config=ft_config())  # fmt: skip
    items = [(value.astype(np.complex64), label) for value, label in zip(x, y, strict=True)]
    with pytest.raises(InputError, match=r"train_dataset\[0\]: expected a real-valued signal"):
        finetune(None, items, num_classes=3, out_dir=tmp_path / "r", config=ft_config())


def test_resume_refuses_another_subset_of_the_same_size(gappy_store: Path, tmp_path: Path) -> None:
    """Two Subsets of one dataset with as many items had the same fingerprint: resuming on the
    other one went on silently."""
    from torch.utils.data import Subset

    from partnd.datasets import SleepWindowDataset

    windows = SleepWindowDataset(gappy_store, labelled_only=True)
    config = FinetuneConfig.preset("test", patch_size=10, epochs=2, batch_size=2, max_steps=1)
    out = tmp_path / "run"
    finetune(None, Subset(windows, range(0, 6)), num_classes=5, out_dir=out, config=config)
    with pytest.raises(InputError, match=r"another selection of items \(Subset indices\)"):
        finetune(None, Subset(windows, range(6, 12)), num_classes=5, out_dir=out, resume=True)
    finetune(None, Subset(windows, range(0, 6)), num_classes=5, out_dir=out, resume=True)


class CountingItems(torch.utils.data.Dataset):
    """``(x, label)`` items with torchvision's ``targets``; counts the items read."""

    def __init__(self, signals: np.ndarray, labels: np.ndarray) -> None:
        self.signals, self.targets, self.reads = signals, labels.tolist(), 0
        self.target_transform = None

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.reads += 1
        return torch.from_numpy(self.signals[index]), self.targets[index]


class ShiftedLabelsTask:
    """Cross-entropy against ``(label + 1) % K``: a loss ``finetune``'s default never uses."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes

    def compute_loss(
        self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, labels = batch
        shifted = (labels + 1) % self.num_classes
        return nn.functional.cross_entropy(model(x).float(), shifted), {}


def test_a_task_hook_replaces_the_loss_and_records_its_settings(tmp_path: Path) -> None:
    x, y = tones(96, seed=0)
    xv, yv = tones(48, seed=1)
    built: list[tuple[object, FinetuneConfig]] = []

    def task(model: nn.Module, config: FinetuneConfig) -> ShiftedLabelsTask:
        built.append((model, config))
        return ShiftedLabelsTask(3)

    items = torch.utils.data.Subset(CountingItems(x, y), list(range(96)))
    result = finetune("vit_test", items, num_classes=3, out_dir=tmp_path / "run",
                      config=ft_config(), task=task, record={"task": "shifted"})  # fmt: skip
    assert len(built) == 1 and built[0][1] == result.config
    assert items.dataset.reads == 1 + result.config.epochs * 96  # the labels were not read
    predictions = result.model(torch.from_numpy(xv)).argmax(dim=1).numpy()
    assert (predictions == (yv + 1) % 3).mean() > 0.8  # it learned the hook's labels
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["resolved"]["task"] == "shifted"
    with pytest.raises(InputError, match="task: expected None for a sequence or night"):
        finetune(None, x, train_labels=y.tolist(), num_classes=3, out_dir=tmp_path / "seq",
                 config=ft_config(context=2), task=task)  # fmt: skip
