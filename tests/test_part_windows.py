"""PART across windows: sampling and normalisation of whole windows, the floor on white noise,
learning from planted cross-window structure, pretraining from a store, the two saved encoders."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.datasets.store import create_store, write_record
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.normalization import instance_normalize
from partnd.finetuning.training import finetune
from partnd.models.frontends import list_frontends
from partnd.models.sequence import HierarchicalEncoder
from partnd.models.serialization import load_encoder, load_hierarchical_encoder
from partnd.objectives import CrossWindowPART, build_objective
from partnd.objectives.part_windows import ScaledHead, isolated_windows, sincos_positions
from partnd.pretraining import pretrain
from partnd.signal_info import SignalSpec
from tests.training_loops import objective_steps

WINDOW, SEGMENT = 40, 8  # windows of 40 samples (4 tiles of 10), segments of 8 windows
CHANNELS = ["C3-M2", "C4-M1"]


pytestmark = pytest.mark.usefixtures("one_thread")


def config(**overrides: object) -> PretrainConfig:
    settings = {
        "method": "part_windows",
        "patch_size": 10,
        "window_samples": WINDOW,
        "segment_windows": SEGMENT,
        "num_windows": 6,
        "num_pairs": 32,
        "temporal_encoder": "temporal_test",
        "pos_embed": True,
        "pos_mask_ratio": 0.5,
    }
    return PretrainConfig.preset("test", **{**settings, **overrides})


def build(in_chans: int = 1, **overrides: object) -> CrossWindowPART:
    model = build_objective(config(**overrides), SignalSpec(in_chans, (SEGMENT * WINDOW,)))
    assert isinstance(model, CrossWindowPART)
    return model


def white_noise(batch: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(batch, 1, SEGMENT * WINDOW, generator=generator)


def drifting_rhythm(batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, 1, S*T]: a rhythm whose frequency drifts slowly over the segment (from a random start,
    0.05 to 0.12 cycles per sample, rising by 0.2 across the segment), random amplitude and
    phase, plus noise: a window's frequency says where it sits relative to the others, and its
    own normalisation keeps that."""
    t = torch.arange(SEGMENT * WINDOW, dtype=torch.float32)
    start = 0.05 + 0.07 * torch.rand(batch, 1, 1, generator=generator)
    frequency = start + 0.2 * t / (2 * SEGMENT * WINDOW)
    phase = 2 * torch.pi * (frequency * t + torch.rand(batch, 1, 1, generator=generator))
    amplitude = 1 + 4 * torch.rand(batch, 1, 1, generator=generator)
    noise = 0.2 * torch.randn(batch, 1, SEGMENT * WINDOW, generator=generator)
    return amplitude * torch.sin(phase) + noise


def train(
    make_batch: Callable[[int, torch.Generator], torch.Tensor], **overrides: object
) -> tuple[float, float]:
    """Mean ``nmse`` and ``nmse_isolated`` (against the objective's content-free floor) over the
    last 30 of 150 steps."""
    torch.manual_seed(0)
    metrics = objective_steps(
        build(**overrides),
        make_batch,
        150,
        lr=2e-3,
        record=lambda out: (float(out.metrics["nmse"]), float(out.metrics["nmse_isolated"])),
    )
    nmse, isolated = zip(*metrics[-30:], strict=True)
    return sum(nmse) / 30, sum(isolated) / 30


def test_windows_are_normalised_exact_slices_placed_on_the_segment_slots() -> None:
    model = build(in_chans=2)
    x = 50.0 * torch.randn(3, 2, SEGMENT * WINDOW) + 7.0
    windows = model.sample(x, torch.Generator().manual_seed(1))
    assert windows.patches.shape == (3, 6, 2, WINDOW)
    starts = windows.starts[..., 0]
    assert torch.equal(starts, starts.round())  # integer (off-grid) starts
    assert bool((starts % WINDOW != 0).any())
    for b in range(3):
        for n in range(6):
            start = int(starts[b, n])
            expected = instance_normalize(x[b, :, start : start + WINDOW])
            torch.testing.assert_close(windows.patches[b, n], expected)
    slots = torch.div(windows.centers[..., 0], WINDOW, rounding_mode="floor").long()
    assert torch.equal(windows.grid_index, slots)
    out = model(x, generator=torch.Generator().manual_seed(1))
    assert bool(out.patches.grid_index.lt(SEGMENT).all())
    assert out.pred.shape == (3, 32, 1)  # per-segment pairs, Δt in window lengths
    hidden = model.hierarchical.temporal.pos_mask_ratio
    assert hidden == 0.5 and model.anchored


def test_record_normalisation_removes_only_each_drawn_window_mean() -> None:
    model = build(in_chans=2, normalize="record")
    x = 3.0 * torch.randn(2, 2, SEGMENT * WINDOW) + 7.0  # a segment already scaled per night
    windows = model.sample(x, torch.Generator().manual_seed(1))
    for b in range(2):
        for n in range(6):
            start = int(windows.starts[b, n, 0])
            raw = x[b, :, start : start + WINDOW]
            torch.testing.assert_close(windows.patches[b, n], raw - raw.mean(-1, keepdim=True))


def test_head_output_scale_and_slot_embedding_initialisation() -> None:
    model = build()
    head = model.head
    assert isinstance(head, ScaledHead) and head.scale == pytest.approx(7 / math.sqrt(6))
    tokens = torch.randn(2, 6, model.hierarchical.embed_dim)
    ref, tgt = torch.tensor([0, 3]), torch.tensor([5, 1])
    torch.testing.assert_close(head(tokens, ref, tgt), head.scale * head.head(tokens, ref, tgt))
    table = sincos_positions(SEGMENT, model.hierarchical.embed_dim)
    assert model.hierarchical.pos_embed is not None
    torch.testing.assert_close(model.hierarchical.pos_embed.detach(), 0.1 * table)
    expected = torch.tensor([math.sin(2.0), math.sin(0.02), math.cos(2.0), math.cos(0.02)])
    torch.testing.assert_close(sincos_positions(3, 4)[2], expected)  # ω = 1, 10000^(-1/2)


def test_the_objective_checks_its_inputs() -> None:
    model = build()
    with pytest.raises(InputError, match=r"x: expected segments \[B, 1, 320\]"):
        model(torch.randn(2, 1, SEGMENT * WINDOW + 1))
    spec = SignalSpec(1, (7 * WINDOW,))
    with pytest.raises(InputError, match="segment_windows=8 x window_samples=40"):
        build_objective(config(), spec)
    with pytest.raises(InputError, match="temporal_overrides"):
        build(temporal_overrides={"width": 8})
    with pytest.raises(InputError, match="temporal_encoder"):
        build(temporal_encoder="temporal_huge")
    with pytest.raises(InputError, match="pair_radius"):
        build(pair_radius=1.0)
    with pytest.raises(InputError, match="num_windows"):
        config(num_windows=1)


def test_plain_mode_has_no_temporal_position_embedding() -> None:
    model = build(pos_embed=False)
    assert not model.anchored and model.hierarchical.pos_embed is None
    assert model.hierarchical.window.pos_embed is not None  # tiles keep their place in a window
    out = model(torch.randn(4, 1, SEGMENT * WINDOW), torch.Generator().manual_seed(0))
    assert out.ref.shape == (32,)  # pairs shared by the batch, any pair counts


@pytest.mark.parametrize("frontend", list_frontends())
def test_on_white_noise_the_anchored_objective_stays_at_its_floor(frontend: str) -> None:
    """Nothing in noise says where a window sits: the hidden windows' shifts cannot be predicted
    better than by the predictor that knows the anchors' slots, whatever the window encoder's
    front-end (overlapping windows share samples, but a small model does not learn to match
    waveforms across windows in this budget)."""
    nmse, isolated = train(white_noise, encoder_overrides={"frontend": frontend})
    assert nmse > 0.85 and isolated > 0.85


@pytest.mark.parametrize("anchored", [True, False], ids=["anchored", "plain"])
def test_planted_cross_window_structure_falls_below_the_floor(anchored: bool) -> None:
    """The planted rhythm places every window, overlapping another one or not."""
    nmse, isolated = train(drifting_rhythm, pos_embed=anchored)
    assert nmse < 0.6 and isolated < 0.6


def test_a_held_window_encoder_takes_no_step_while_the_temporal_level_learns() -> None:
    """``trained_levels="temporal"``: the window encoder keeps its seeded random weights, the
    temporal level and the head learn the planted rhythm from its features."""
    torch.manual_seed(0)
    model = build(trained_levels="temporal")
    window = {name: p.detach().clone() for name, p in model.hierarchical.window.named_parameters()}
    temporal = {
        name: p.detach().clone() for name, p in model.hierarchical.temporal.named_parameters()
    }
    assert not any(p.requires_grad for p in model.hierarchical.window.parameters())
    assert all(p.requires_grad for p in model.hierarchical.temporal.parameters())
    metrics = objective_steps(
        model, drifting_rhythm, 150, lr=2e-3, record=lambda out: float(out.metrics["nmse"])
    )
    for name, p in model.hierarchical.window.named_parameters():
        assert torch.equal(p, window[name]), name
    moved = [
        not torch.equal(p, temporal[name])
        for name, p in model.hierarchical.temporal.named_parameters()
    ]
    assert all(moved)
    assert sum(metrics[-30:]) / 30 < 0.75  # white noise stays above 0.85 (below)


def test_held_window_encoder_on_white_noise_stays_at_the_floor() -> None:
    nmse, isolated = train(white_noise, trained_levels="temporal")
    assert nmse > 0.85 and isolated > 0.85


def test_trained_levels_is_checked() -> None:
    with pytest.raises(InputError, match="trained_levels"):
        config(trained_levels="window")
    with pytest.raises(InputError, match="method='mae'"):
        PretrainConfig.preset("test", method="mae", trained_levels="temporal")
    with pytest.raises(InputError, match="anti-collapse"):
        config(trained_levels="temporal", variance_weight=1.0)


def test_isolated_windows_share_no_sample_with_another() -> None:
    centers = torch.tensor([[20.0, 50.0, 150.0, 250.0], [0.0, 100.0, 200.0, 299.0]])
    expected = [[False, False, True, True], [True, True, False, False]]
    assert isolated_windows(centers, 100).tolist() == expected  # 100 apart: touching, no overlap


@pytest.mark.parametrize("anchored", [True, False], ids=["anchored", "plain"])
def test_nmse_isolated_is_the_floor_ratio_over_pairs_of_isolated_windows(anchored: bool) -> None:
    torch.manual_seed(0)
    model = build(pos_embed=anchored, num_windows=3)
    generator = torch.Generator().manual_seed(1)
    out = model(drifting_rhythm(64, generator), generator=generator)
    alone = isolated_windows(out.patches.centers[..., 0], WINDOW)
    ref, tgt = out.ref, out.tgt
    if ref.dim() == 1:
        ref, tgt = ref.expand(64, -1), tgt.expand(64, -1)
    keep = alone.gather(1, ref) & alone.gather(1, tgt)
    assert 0 < keep.sum() < keep.numel()
    pred, target = out.pred[..., 0][keep].float(), out.target[..., 0][keep].float()
    floor = out.baseline[..., 0][keep] if anchored else target.mean()
    expected = (pred - target).square().sum() / (floor - target).square().sum()
    assert out.metrics["nmse_isolated"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.metrics["isolated_share"].item() == pytest.approx(keep.float().mean().item())
    assert (out.baseline is None) is not anchored


# --------------------------------------------------------------------------------------------
# pretrain: from a store, the saved encoders
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two records at 1 Hz with 40 s windows (40 samples), one with a gap, one unlabelled."""
    path = tmp_path_factory.mktemp("part_windows") / "store.zarr"
    create_store(path, sfreq=1.0, channels=CHANNELS, window_seconds=40.0, metadata={})
    rng = np.random.default_rng(0)
    for record_id, subject, split, slots in [
        ("tr01", "s1", "training", [*range(12), *range(13, 23)]),
        ("te01", "s2", "test", list(range(14))),
    ]:
        signal = rng.standard_normal((len(slots), 2, WINDOW)).astype(np.float32) * 20
        stage = np.full(len(slots), 2 if split == "training" else -1, dtype=np.int8)
        write_record(
            path,
            record_id,
            signal,
            stage,
            40.0 * np.asarray(slots, dtype=np.float64),
            attrs={"subject_id": subject, "split": split},
            chunk_windows=8,
        )
    return path


def test_pretrain_saves_the_window_and_the_temporal_encoder(store: Path, tmp_path: Path) -> None:
    segments = SleepSegmentDataset(store, segment_windows=SEGMENT)
    settings = config(ema_decay=0.9, epochs=1, batch_size=4)
    result = pretrain(segments, out_dir=tmp_path, config=settings)
    assert isinstance(result.model, CrossWindowPART)
    assert result.temporal_encoder is result.model.hierarchical.temporal
    assert result.encoder is result.model.hierarchical.window
    info = result.encoder.signal_info
    assert info is not None
    assert info.spatial_shape == (WINDOW,) and info.ch_names == tuple(CHANNELS)
    assert info.sfreq == 1.0
    # encoder.pt is the window encoder, for every single-window tool
    window = load_encoder(tmp_path)
    assert window.signal_info == info and window.num_positions == WINDOW // 10
    for name, value in result.encoder.state_dict().items():
        assert torch.equal(value, window.state_dict()[name]), name
    # both encoders round-trip, with the temporal slot and mask embeddings
    loaded = load_hierarchical_encoder(tmp_path)
    assert isinstance(loaded, HierarchicalEncoder) and not loaded.training
    assert loaded.trained_levels == "all"
    assert loaded.window_samples == WINDOW and loaded.num_positions == SEGMENT
    assert loaded.pos_mask_ratio == 0.5 and loaded.pos_mask_token is not None
    expected = result.model.hierarchical.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    again = load_hierarchical_encoder(tmp_path / "temporal_encoder.pt")
    torch.testing.assert_close(again.state_dict(), expected)
    # the window encoder of an interrupted run is read from its checkpoint (EMA weights)
    from_checkpoint = load_encoder(tmp_path / "checkpoints" / "last.pt")
    for name, value in window.state_dict().items():
        assert torch.equal(value, from_checkpoint.state_dict()[name]), name
    with pytest.raises(InputError, match=r"temporal_encoder\.pt"):
        load_hierarchical_encoder(tmp_path / "checkpoints")
    # a file saved before the trained levels were recorded trained them all
    payload = torch.load(tmp_path / "temporal_encoder.pt", weights_only=False)
    del payload["trained_levels"]
    torch.save(payload, tmp_path / "temporal_encoder.pt")
    assert load_hierarchical_encoder(tmp_path).trained_levels == "all"


def test_pretrain_with_a_held_window_encoder_saves_its_seeded_initialisation(
    store: Path, tmp_path: Path
) -> None:
    segments = SleepSegmentDataset(store, segment_windows=SEGMENT)
    settings = config(epochs=2, batch_size=4, trained_levels="temporal")
    result = pretrain(segments, out_dir=tmp_path / "pretrain", config=settings)
    torch.manual_seed(settings.seed)  # as pretrain seeds the objective's initialisation
    initial = build_objective(settings, SignalSpec(2, (SEGMENT * WINDOW,)))
    assert isinstance(initial, CrossWindowPART)
    saved = load_hierarchical_encoder(tmp_path / "pretrain")
    assert initial.hierarchical.trained_levels == saved.trained_levels == "temporal"
    for name, value in initial.hierarchical.window.named_parameters():
        assert torch.equal(value, saved.window.state_dict()[name]), name
    changed = [
        name
        for name, value in initial.hierarchical.temporal.named_parameters()
        if not torch.equal(value, saved.temporal.state_dict()[name])
    ]
    assert changed
    written = json.loads((tmp_path / "pretrain" / "config.json").read_text())
    assert written["trained_levels"] == "temporal"
    # fine-tuning the returned window encoder trains it: the hold was the pretext's only
    tuned = finetune(
        result.encoder,
        SleepWindowDataset(store, records=["tr01"]),
        num_classes=5,
        out_dir=tmp_path / "finetune",
        config=FinetuneConfig.preset("test", batch_size=4, max_steps=2),
    )
    weights = dict(tuned.model.encoder.named_parameters())
    assert all(
        not torch.equal(weights[name], value)
        for name, value in result.encoder.named_parameters()
        if name.startswith("blocks.")
    )


def test_pretrain_reads_other_sleep_data_as_segments(store: Path, tmp_path: Path) -> None:
    windows = SleepWindowDataset(store, records=["tr01"], channels=["C4-M1"])
    settings = config(batch_size=2, max_steps=1)
    result = pretrain(windows, out_dir=tmp_path / "windows", config=settings)
    meta = (tmp_path / "windows" / "meta.json").read_text()
    assert '"num_items": 5' in meta  # tr01's runs of 12 and 10 windows: 3 + 2 segments
    assert result.encoder.in_chans == 1
    from_path = pretrain(store, out_dir=tmp_path / "path", config=settings)
    assert from_path.encoder.signal_info is not None
    assert from_path.encoder.signal_info.ch_names == tuple(CHANNELS)
    with pytest.raises(InputError, match="segment_windows=4"):
        pretrain(
            SleepSegmentDataset(store, segment_windows=SEGMENT),
            out_dir=tmp_path / "other",
            config=config(segment_windows=4),
        )


def test_worker_processes_read_the_same_segments_in_their_own_order(
    store: Path, tmp_path: Path
) -> None:
    """Loader workers (a study's ``--loader-workers``) read every segment once per epoch as the
    training process would, in an order of their own (each worker keeps its storage chunks),
    so a run's numbers follow the worker count, as they follow the device."""
    from partnd.engine.sampler import epoch_order

    segments = SleepSegmentDataset(store, segment_windows=SEGMENT)
    orders = {}
    for workers in (0, 2):
        order = epoch_order(
            segments, seed=0, rank=0, world_size=1, batch_size=2, num_workers=workers
        )
        order.set_epoch(0)
        orders[workers] = list(order)
    assert sorted(orders[0]) == sorted(orders[2]) == list(range(len(segments)))
    settings = config(epochs=1, batch_size=2, num_workers=2)
    result = pretrain(segments, out_dir=tmp_path, config=settings)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["num_workers"] == 2 and result.model.segment_windows == SEGMENT


def test_an_interrupted_run_resumes_exactly(tmp_path: Path) -> None:
    data = drifting_rhythm(16, torch.Generator().manual_seed(0)).numpy()
    settings = config(ema_decay=0.9, epochs=2, batch_size=4)
    full = pretrain(data, out_dir=tmp_path / "full", config=settings)
    pretrain(data, out_dir=tmp_path / "cut", config=settings, max_steps=5)
    resumed = pretrain(data, out_dir=tmp_path / "cut", config=settings, resume=True)
    for name, value in full.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    losses = [r["loss"] for r in full.history if r["phase"] == "train"]
    assert losses == [r["loss"] for r in resumed.history if r["phase"] == "train"]
