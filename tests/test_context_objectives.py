"""Relative positioning and temporal shuffling (Banville et al. 2021) on segments of stored
windows: the sampling rules (braindecode's for RP), the windows they embed, the heads, the checks,
a planted slow drift they must learn, and pretraining from a sleep store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.store import create_store, write_record
from partnd.engine.config import PretrainConfig
from partnd.engine.normalization import instance_normalize
from partnd.models.serialization import load_encoder
from partnd.objectives import RelativePositioning, TemporalShuffling, build_objective
from partnd.objectives.relative_positioning import relative_positioning_pairs
from partnd.objectives.temporal_shuffling import anchor_pairs, temporal_shuffling_triplets
from partnd.pretraining import pretrain
from partnd.signal_info import SignalSpec
from tests.training_loops import objective_steps

WINDOW, SEGMENT = 20, 12  # windows of 20 samples (2 tiles of 10), segments of 12 windows
CHANNELS = ["C3-M2", "C4-M1"]


pytestmark = pytest.mark.usefixtures("one_thread")


def config(method: str, **overrides: object) -> PretrainConfig:
    settings = {
        "method": method,
        "patch_size": 10,
        "window_samples": WINDOW,
        "segment_windows": SEGMENT,
        "num_windows": 12,
        "tau_pos_windows": 2,
        "tau_neg_windows": 5,
    }
    return PretrainConfig.preset("test", **{**settings, **overrides})


def build(method: str, in_chans: int = 1, **overrides: object):
    return build_objective(config(method, **overrides), SignalSpec(in_chans, (SEGMENT * WINDOW,)))


def test_rp_pairs_follow_braindecodes_rule() -> None:
    """Positives within tau_pos (never the same window), negatives at least tau_neg apart, half
    of the pairs positive, every allowed partner drawn about equally often."""
    first, second, labels = relative_positioning_pairs(
        20000, 8, 60, 2, 30, torch.Generator().manual_seed(0)
    )
    distance = (first - second).abs()
    assert bool(((distance >= 1) & (distance <= 2))[labels].all())
    assert bool((distance >= 30)[~labels].all())
    assert abs(labels.float().mean().item() - 0.5) < 0.01
    assert abs(first.float().mean().item() - 29.5) < 0.3  # the first window uniform on 0..59
    # from slot 10: positives 8, 9, 11, 12 and negatives 40..59, each uniform among its kind
    from_ten = first == 10
    positives = torch.bincount(second[from_ten & labels], minlength=60)[[8, 9, 11, 12]]
    negatives = torch.bincount(second[from_ten & ~labels], minlength=60)[40:]
    for counts in (positives, negatives):
        assert counts.min() > 0.6 * counts.float().mean()
    assert set(second[from_ten & ~labels].tolist()) == set(range(40, 60))


def test_ts_triplets_are_in_order_or_shuffled_far_away() -> None:
    pairs, shuffleable = anchor_pairs(8, 3, 3)
    assert pairs.tolist() == [[a, a + d] for a in range(8) for d in (2, 3) if a + d < 8]
    # a far window (<= t1 - 3 or >= t3 + 3) fits in 0..7 unless the anchors sit in the middle
    expected = [(a >= 3) or (c <= 4) for a, c in pairs.tolist()]
    assert shuffleable.tolist() == expected
    triplets, labels = temporal_shuffling_triplets(
        3000, 6, 40, 2, 15, torch.Generator().manual_seed(0)
    )
    t1, t2, t3 = triplets.unbind(-1)
    assert bool((t3 - t1 == 2).all())  # tau_pos of 2 windows: anchors two apart
    assert bool((t2 == t1 + 1)[labels].all())  # the window between them, in order
    far = (t2 <= t1 - 15) | (t2 >= t3 + 15)
    assert bool(far[~labels].all())
    assert abs(labels.float().mean().item() - 0.5) < 0.02


def test_the_embedded_windows_are_the_stored_windows_normalised() -> None:
    model = build("rp", in_chans=2)
    assert isinstance(model, RelativePositioning)
    x = 40.0 * torch.randn(3, 2, SEGMENT * WINDOW) + 5.0
    slots = torch.tensor([[0, 11, 4], [3, 3, 7], [10, 1, 2]])
    windows = model.windows(x, slots)
    for b in range(3):
        for m in range(3):
            s = int(slots[b, m])
            expected = instance_normalize(x[b, :, s * WINDOW : (s + 1) * WINDOW])
            torch.testing.assert_close(windows[b, m], expected)
    record = build("rp", in_chans=2, normalize="record")
    raw = x[1, :, 7 * WINDOW : 8 * WINDOW]
    torch.testing.assert_close(record.windows(x, slots)[1, 2], raw - raw.mean(-1, keepdim=True))


def test_the_heads_read_absolute_differences_of_the_window_embeddings() -> None:
    """RP's logit is a linear function of |z1 - z2|: swapping the two windows changes nothing;
    TS's reads [|z1 - z2|, |z2 - z3|]: reversing a triplet changes nothing."""
    torch.manual_seed(0)
    rp = build("rp")
    assert rp.head.in_features == rp.encoder.embed_dim and rp.num_pairs == 6
    ts = build("ts")
    assert isinstance(ts, TemporalShuffling)
    assert ts.head.in_features == 2 * ts.encoder.embed_dim and ts.num_triplets == 4
    x = torch.randn(2, 1, SEGMENT * WINDOW)
    rp.eval()
    z = rp.embed(x, torch.tensor([[1, 6], [2, 9]]))
    swapped = rp.embed(x, torch.tensor([[6, 1], [9, 2]]))
    torch.testing.assert_close(
        rp.head((z[:, 0] - z[:, 1]).abs()), rp.head((swapped[:, 0] - swapped[:, 1]).abs())
    )
    out = rp(x, generator=torch.Generator().manual_seed(1))
    assert set(out.metrics) == {"accuracy", "accuracy_chance", "positive_share"}
    share = float(out.metrics["positive_share"])
    assert float(out.metrics["accuracy_chance"]) == pytest.approx(max(share, 1 - share))


def test_the_objectives_check_their_contexts_and_inputs() -> None:
    with pytest.raises(InputError, match="segment_windows"):
        build("rp", tau_neg_windows=7)  # 12 windows cannot hold 2 * 7
    with pytest.raises(InputError, match="tau_neg_windows"):
        build("rp", tau_pos_windows=6, tau_neg_windows=5)
    with pytest.raises(InputError, match="tau_pos_windows"):
        build("ts", tau_pos_windows=1)
    with pytest.raises(InputError, match="segment_windows"):
        build("ts", tau_neg_windows=10)
    with pytest.raises(InputError, match="tau_pos_windows"):
        config("rp", tau_pos_windows=0)
    with pytest.raises(InputError, match=r"segment_windows=12 x window_samples=20"):
        build_objective(config("ts"), SignalSpec(1, (11 * WINDOW,)))
    with pytest.raises(InputError, match=r"x: expected segments \[B, 1, 240\]"):
        build("ts")(torch.randn(2, 1, SEGMENT * WINDOW + 1))


def slow_drift(batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, 1, S*T]: a rhythm whose frequency drifts slowly and steadily over the segment (from a
    random start), random amplitude and phase, plus noise: windows close in time look alike, far
    ones do not, and the order of three is readable."""
    t = torch.arange(SEGMENT * WINDOW, dtype=torch.float32)
    start = 0.04 + 0.05 * torch.rand(batch, 1, 1, generator=generator)
    frequency = start + 0.3 * t / (2 * SEGMENT * WINDOW)
    phase = 2 * torch.pi * (frequency * t + torch.rand(batch, 1, 1, generator=generator))
    amplitude = 1 + 4 * torch.rand(batch, 1, 1, generator=generator)
    return amplitude * torch.sin(phase) + 0.2 * torch.randn(
        batch, 1, t.numel(), generator=generator
    )


def white_noise(batch: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(batch, 1, SEGMENT * WINDOW, generator=generator)


def train(method: str, make_batch, steps: int = 100) -> tuple[float, float]:
    """Mean accuracy and content-free floor over the last 20 of ``steps`` Adam steps."""
    torch.manual_seed(0)
    metrics = objective_steps(
        build(method),
        make_batch,
        steps,
        lr=2e-3,
        record=lambda out: (float(out.metrics["accuracy"]), float(out.metrics["accuracy_chance"])),
    )
    accuracy, chance = np.mean(metrics[-20:], axis=0)
    return float(accuracy), float(chance)


@pytest.mark.parametrize("method", ["rp", "ts"])
def test_a_planted_slow_drift_is_learned_and_noise_is_not(method: str) -> None:
    accuracy, chance = train(method, slow_drift)
    assert accuracy > chance + 0.2, (accuracy, chance)
    accuracy, chance = train(method, white_noise, steps=60)
    assert abs(chance - 0.5) < 0.08 and accuracy < chance + 0.08, (accuracy, chance)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One training record of 30 windows of 20 samples at 1 Hz whose rhythm drifts slowly."""
    path = tmp_path_factory.mktemp("context") / "store.zarr"
    create_store(path, sfreq=1.0, channels=CHANNELS, window_seconds=20.0, metadata={})
    t = np.arange(30 * WINDOW, dtype=np.float64)
    frequency = 0.05 + 0.3 * t / (2 * t.size)
    signal = np.sin(2 * np.pi * frequency * t)[None, :].repeat(2, 0)
    windows = signal.reshape(2, 30, WINDOW).transpose(1, 0, 2).astype(np.float32)
    write_record(
        path,
        "tr01",
        windows * 30,
        np.full(30, 2, dtype=np.int8),
        20.0 * np.arange(30, dtype=np.float64),
        attrs={"subject_id": "s1", "split": "training"},
        chunk_windows=8,
    )
    return path


@pytest.mark.parametrize("method", ["rp", "ts"])
def test_pretrain_from_a_store_saves_the_window_encoder(
    method: str, store: Path, tmp_path: Path
) -> None:
    result = pretrain(store, out_dir=tmp_path, config=config(method, epochs=2, batch_size=2))
    assert isinstance(result.model, RelativePositioning | TemporalShuffling)
    assert result.encoder is result.model.encoder and result.temporal_encoder is None
    info = result.encoder.signal_info
    assert info is not None and info.spatial_shape == (WINDOW,)
    assert info.ch_names == tuple(CHANNELS) and info.normalization == "window"
    loaded = load_encoder(tmp_path)
    for name, value in result.encoder.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    segments = SleepSegmentDataset(store, segment_windows=SEGMENT)
    train_records = [r for r in result.history if r["phase"] == "train"]
    assert len(train_records) == 2 * (len(segments) // 2)  # full batches of segments
    assert all("accuracy_chance" in r for r in train_records)
