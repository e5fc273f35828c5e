"""One contract for every registered pretraining objective, plus each baseline's pinned details.

The shared contract (parametrised over :func:`partnd.objectives.list_objectives` and the
encoder's front-ends, :func:`partnd.models.frontends.list_frontends`): outputs for ndim 1, 2, 3
(1 only for PART across windows, whose items are 1-D segments of whole windows, and for the
spectral front-end, a power spectrum per 1-D patch); every parameter gets a gradient in one step
(DDP runs without ``find_unused_parameters``); same generator seed, same loss; float32 loss under
bf16 autocast; no host synchronisation in ``forward``; a short run on data whose content reveals
position beats the objective's content-free floor, and one on white noise stays at it; and an
interrupted ``pretrain`` resumes to the same weights. Then, per baseline, masks, targets and
labels pinned on small hand-checked cases (MAE, MP3, DropPos).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from partnd.engine import compilation
from partnd.engine.config import PretrainConfig
from partnd.models.frontends import list_frontends
from partnd.models.sequence import HierarchicalEncoder
from partnd.models.vit import ViTEncoder
from partnd.objectives import (
    DropPosModel,
    MAEModel,
    MP3Model,
    Objective,
    build_objective,
    list_objectives,
)
from partnd.objectives.base import draws_first
from partnd.objectives.droppos import grid_coordinates, position_smoothing, smoothed_labels
from partnd.objectives.mae import decoder_width, masked_count, normalized_patch_targets
from partnd.pretraining import pretrain
from partnd.signal_info import SignalSpec

METHODS = list_objectives()
BASELINES = ["mae", "mp3", "droppos"]
SHAPES = {1: (32,), 2: (16, 12), 3: (8, 8, 8)}
#: Objectives over 1-D segments of whole windows (PART across windows, relative positioning,
#: temporal shuffling): they read ndim 1 only, and learn from content that survives each
#: window's own normalisation.
WINDOW_METHODS = ("part_joint", "part_windows", "rp", "ts")
#: Binary objectives (relative positioning, temporal shuffling): a content-free predictor is
#: right half of the time.
BINARY_METHODS = ("rp", "ts")
#: The contexts (in windows) of the binary objectives on segments of 4 windows: RP's pairs are
#: neighbours (positive) or 2-3 windows apart; TS's anchors are 2 apart, the third window between
#: them or on the far side of one.
CONTEXTS = {"rp": (1, 2), "ts": (2, 1)}


def method_settings(method: str, spatial: tuple[int, ...]) -> dict[str, object]:
    """Settings beyond the ``test`` preset: the objectives on segments cut a 1-D item into a
    segment of 4 whole windows (PART across windows: 3 drawn per segment, anchored with half of
    them hidden, tiles of 4; RP and TS: their contexts of :data:`CONTEXTS`, 3 pairs or 2
    triplets per segment)."""
    if method in BINARY_METHODS:
        tau_pos, tau_neg = CONTEXTS[method]
        return {
            "window_samples": spatial[0] // 4,
            "segment_windows": 4,
            "num_windows": 6,
            "tau_pos_windows": tau_pos,
            "tau_neg_windows": tau_neg,
        }
    if method not in WINDOW_METHODS:
        return {}
    return {
        "window_samples": spatial[0] // 4,
        "segment_windows": 4,
        "num_windows": 3,
        "temporal_encoder": "temporal_test",
        "pos_embed": True,
        "pos_mask_ratio": 0.5,
        **({"num_patches": 3, "within_pairs": 4} if method == "part_joint" else {}),
    }


#: Front-end cases beyond the registered names: case -> (front-end, its options). The channel-set
#: front-end tokenises each channel with ``linear`` and is laid out in derivations named by
#: :func:`frontend_overrides` (its items may lack channels: NaN); ``channel_set_attention`` pools
#: its channel tokens by attention instead of the mean.
FRONTEND_VARIANTS = {
    "spectral_std": ("spectral", {"standardize": True}),
    "channel_set": ("channel_set", {}),
    "channel_set_attention": ("channel_set", {"channel_pool": "attention"}),
}
#: Derivations of the channel-set front-end's layout, the first ``in_chans`` of them.
DERIVATIONS = ("C4-M1", "O2-M1", "F3-M2")
#: Front-ends that read 1-D patches only.
ONE_D_FRONTENDS = ("spectral", "spectral_std")
#: Patch length per front-end (default 4): a spectrum needs a few bins (5 of 8 samples, not 3).
PATCH_SIZES = {"spectral": 8, "spectral_std": 8}


def frontend_cases() -> list[str]:
    """Every registered front-end, then the variants with options of their own."""
    return [*list_frontends(), *FRONTEND_VARIANTS]


def frontend_overrides(case: str, in_chans: int = 2) -> dict[str, object]:
    """The encoder overrides of a front-end case for items of ``in_chans`` channels."""
    name, options = FRONTEND_VARIANTS.get(case, (case, {}))
    if name == "channel_set":
        options = {**options, "channels": list(DERIVATIONS[:in_chans])}
    return {"frontend": name, "frontend_options": options}


def method_ndims(ndims: tuple[int, ...]) -> list[tuple[str, int, str]]:
    """(method, ndim, front-end) for every method, each of ``ndims`` it reads and every front-end
    that reads that ndim."""
    return [
        (m, n, f)
        for m in METHODS
        for n in ndims
        for f in frontend_cases()
        if n == 1 or (m not in WINDOW_METHODS and f not in ONE_D_FRONTENDS)
    ]


def method_frontends() -> list[tuple[str, str]]:
    """(method, front-end) for every method and front-end."""
    return [(m, f) for m in METHODS for f in frontend_cases()]


def shape_of(ndim: int, frontend: str = "linear") -> tuple[int, ...]:
    """The test shape of ``ndim``, scaled as ``frontend``'s patches (as many patches)."""
    scale = PATCH_SIZES.get(frontend, 4) // 4
    return tuple(scale * length for length in SHAPES[ndim])


def widest_shape(method: str, frontend: str = "linear") -> tuple[int, ...]:
    """The test shape of the highest ndim ``method`` reads with ``frontend``."""
    return shape_of(1 if method in WINDOW_METHODS or frontend in ONE_D_FRONTENDS else 3, frontend)


pytestmark = pytest.mark.usefixtures("one_thread")


def build(
    method: str,
    spatial: tuple[int, ...],
    in_chans: int = 2,
    frontend: str = "linear",
    **overrides: object,
):
    settings = {
        "patch_size": PATCH_SIZES.get(frontend, 4),
        **method_settings(method, spatial),
        "encoder_overrides": frontend_overrides(frontend, in_chans),
        **overrides,
    }
    config = PretrainConfig.preset("test", method=method, **settings)
    return build_objective(config, SignalSpec(in_chans, spatial))


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def position_signal(batch: int, generator: torch.Generator, length: int = 64) -> torch.Tensor:
    """[B, 1, L]: a ramp plus a slow sine, a small random per-example offset and noise: each
    patch's content reveals where it lies, never exactly (the offset)."""
    t = torch.arange(length, dtype=torch.float32) / length
    offset = (torch.rand(batch, 1, 1, generator=generator) - 0.5) * 0.2
    noise = 0.01 * torch.randn(batch, 1, length, generator=generator)
    return 2 * t + 0.5 * torch.sin(2 * math.pi * 3 * t) + offset + noise


def position_chirp(batch: int, generator: torch.Generator, length: int = 64) -> torch.Tensor:
    """[B, 1, L]: a chirp (0.02 to 0.25 cycles per sample) with a random phase plus noise: the
    frequency of a whole window reveals where it lies even after its own normalisation (which
    removes position_signal's ramp)."""
    t = torch.arange(length, dtype=torch.float32)
    phase = 2 * math.pi * (0.02 * t + 0.23 * t.square() / (2 * length))
    shift = 2 * math.pi * torch.rand(batch, 1, 1, generator=generator)
    noise = 0.05 * torch.randn(batch, 1, length, generator=generator)
    return torch.sin(phase + shift) + noise


def position_field(batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, 1, 16, 16]: ``2 row + 4 col^2`` (in units of the side) plus noise: the patch mean
    and the horizontal slope together reveal the row and the column."""
    rows = torch.arange(16, dtype=torch.float32)[:, None] / 16
    columns = torch.arange(16, dtype=torch.float32)[None, :] / 16
    clean = 2 * rows + 4 * columns**2
    return clean + 0.02 * torch.randn(batch, 1, 16, 16, generator=generator)


# --------------------------------------------------------------------------------------------
# The shared contract
# --------------------------------------------------------------------------------------------


def test_registry_lists_the_paper_baselines() -> None:
    assert {
        "part",
        "part_grid",
        "mae",
        "mp3",
        "droppos",
        "part_windows",
        "part_joint",
        "rp",
        "ts",
    } <= set(METHODS)


@pytest.mark.parametrize(("method", "ndim", "frontend"), method_ndims((1, 2, 3)))
def test_outputs_and_every_parameter_gets_a_gradient(method: str, ndim: int, frontend: str) -> None:
    model = build(method, shape_of(ndim, frontend), frontend=frontend)
    assert isinstance(model, Objective)
    assert isinstance(model.encoder, ViTEncoder | HierarchicalEncoder)
    assert model.encoder.ndim == ndim
    out = model(torch.randn(3, 2, *shape_of(ndim, frontend)), generator=seeded())
    assert out.loss.dim() == 0 and out.loss.dtype == torch.float32
    assert torch.isfinite(out.loss)
    assert out.metrics
    for name, value in out.metrics.items():
        assert value.dim() == 0 and not value.requires_grad, name
    out.loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} has no gradient"
        assert parameter.grad.abs().sum() > 0, f"{name} has a zero gradient"


@pytest.mark.parametrize(("method", "frontend"), method_frontends())
def test_same_seed_same_loss_other_seed_other_loss(method: str, frontend: str) -> None:
    shape = widest_shape(method, frontend)
    torch.manual_seed(3)
    first = build(method, shape, frontend=frontend)
    torch.manual_seed(3)
    second = build(method, shape, frontend=frontend)
    x = torch.randn(4, 2, *shape)
    # from the same state: a standardized front-end's running estimates move in training
    again, other = copy.deepcopy(first), copy.deepcopy(first)
    loss = first(x, generator=seeded(7)).loss
    assert torch.equal(loss, again(x, generator=seeded(7)).loss)
    assert torch.equal(loss, second(x, generator=seeded(7)).loss)
    assert not torch.equal(loss, other(x, generator=seeded(8)).loss)


def compiled_and_eager_steps(
    method: str, backend: str, monkeypatch: pytest.MonkeyPatch, frontend: str = "linear"
) -> tuple[list[dict[str, torch.Tensor]], list[torch.Generator], int]:
    """Loss, diagnostics and gradients of one step of an eager objective and of two steps of its
    compiled copy (``torch.compile`` with ``backend``) on the same batch and seed, their
    generators, and the graphs compiled for the second compiled step (an objective whose
    behaviour changes over the run, DropPos, is at another point of it in the first)."""
    monkeypatch.setattr(compilation, "BACKEND", backend)
    torch._dynamo.reset()
    torch.manual_seed(3)
    shape = widest_shape(method, frontend)
    eager = build(method, shape, frontend=frontend)
    compiled = copy.deepcopy(eager)
    compilation.compile_module(compiled, "default")
    x = torch.randn(4, 2, *shape)
    results, generators, graphs = [], [], 0
    for model, progress in ((eager, 0.5), (compiled, 0.25), (compiled, 0.5)):
        if hasattr(model, "set_training_progress"):
            model.set_training_progress(progress)
        generator = seeded(7)
        model.zero_grad(set_to_none=True)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        if draws_first(model):  # as the engine: draw, then forward
            out = model(x, draws=model.draw(x, generator))
        else:
            out = model(x, generator=generator)
        out.loss.backward()
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
        values = {"loss": out.loss.detach(), **out.metrics}
        values.update({name: p.grad for name, p in model.named_parameters()})
        results.append(values)
        generators.append(generator)
    return results, generators, graphs


@pytest.mark.parametrize(
    ("method", "frontend"),
    [(m, "linear") for m in METHODS] + [("part", f) for f in frontend_cases() if f != "linear"],
)
def test_compiled_step_equals_the_eager_step(
    method: str, frontend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TrainConfig.compile``: the compiled forward on the step's pre-drawn boxes, masks and
    pairs (the generator's draws run eagerly before it, as in the engine) gives the same loss,
    diagnostics and gradients, and compiles nothing new on the next step (``aot_eager``: the
    engine's tracing and autograd without code generation; the generated kernels are pinned for
    PART below). Every objective with the linear front-end, and PART with each other one (the
    front-end is the encoder's, the same under every objective)."""
    results, generators, graphs = compiled_and_eager_steps(
        method, "aot_eager", monkeypatch, frontend
    )
    eager, compiled = results[0], results[2]
    assert graphs == 0
    assert torch.equal(generators[2].get_state(), generators[0].get_state())  # the same draws
    assert compiled.keys() == eager.keys()
    for name, value in eager.items():
        torch.testing.assert_close(compiled[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_every_objective_draws_before_its_forward() -> None:
    assert [m for m in METHODS if not draws_first(build(m, widest_shape(m)))] == []


@pytest.mark.parametrize("method", METHODS)
def test_the_predrawn_step_compiles_as_one_graph(method: str) -> None:
    """Given its draws, every objective's forward (patching, encoder, head or decoder, loss and
    diagnostics) is one graph without a break, and its backward with it (one compiled region:
    on a GPU one launch of CUDA graphs per step with ``"reduce-overhead"``). Before the draws
    were split out, the generator's draws broke PART's test step into 6 graphs, anchored PART's
    into 9, MAE's and MP3's into 3, DropPos's into 4, PART across windows' into 11, relative
    positioning's into 5 and temporal shuffling's into 11."""
    torch._dynamo.reset()
    shape = widest_shape(method)
    model = build(method, shape)
    x = torch.randn(4, 2, *shape)
    draws = model.draw(x, seeded(7))
    explained = torch._dynamo.explain(lambda x, draws: model(x, draws=draws).loss)(x, draws)
    assert explained.break_reasons == []
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


@pytest.mark.slow
def test_compiled_kernels_give_parts_loss_and_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated kernels (inductor, C++ on the CPU) compute PART's step within float
    rounding of the eager step."""
    results, _, _ = compiled_and_eager_steps("part", "inductor", monkeypatch)
    for name, value in results[0].items():
        torch.testing.assert_close(results[2][name], value, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize(("method", "frontend"), method_frontends())
def test_bf16_autocast_gives_a_float32_loss(method: str, frontend: str) -> None:
    model = build(method, shape_of(1, frontend), frontend=frontend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(3, 2, *shape_of(1, frontend)), generator=seeded())
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    out.loss.backward()


@pytest.mark.parametrize(("method", "frontend"), method_frontends())
def test_forward_reads_nothing_back_to_the_host(method: str, frontend: str, host_syncs) -> None:
    model = build(method, widest_shape(method, frontend), frontend=frontend)
    x = torch.randn(3, 2, *widest_shape(method, frontend))
    generator = seeded()
    with host_syncs:
        model(x, generator=generator)
    assert host_syncs.calls == []


def short_run(
    method: str, frontend: str, spatial: tuple[int, ...], signal, steps: int = 120
) -> dict[str, float]:
    """Train ``steps`` Adam steps on batches of ``signal(32, generator)``; the mean of every
    metric over the last 10 steps."""
    torch.manual_seed(0)
    model = build(method, spatial, in_chans=1, frontend=frontend)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data, masks = seeded(1), seeded(2)
    history: list[dict[str, float]] = []
    for _ in range(steps):
        out = model(signal(32, data), generator=masks)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        history.append({name: float(value) for name, value in out.metrics.items()})
    return {name: float(np.mean([record[name] for record in history[-10:]])) for name in history[0]}


@pytest.mark.parametrize(("method", "ndim", "frontend"), method_ndims((1, 2)))
def test_short_run_beats_the_content_free_floor(method: str, ndim: int, frontend: str) -> None:
    if ndim == 2:
        spatial, signal = (16, 16), position_field
    elif method in WINDOW_METHODS or (frontend in ONE_D_FRONTENDS and method != "mae"):
        # a spectrum reads the chirp's frequency, not the ramp's sign; MAE reconstructs values,
        # which the chirp's random phase hides from any encoder
        spatial, signal = (64,), position_chirp
    else:
        spatial, signal = (64,), position_signal
    last = short_run(method, frontend, spatial, signal)
    if method in BINARY_METHODS:  # close or far, in order or not: chance is 1 / 2
        assert last["accuracy"] > last["accuracy_chance"] + 0.15, last
    elif "accuracy" in last:  # classification (MP3, DropPos): chance is 1 / N
        assert last["accuracy"] > 4 * last["accuracy_chance"], last
        assert last["accuracy"] > 4 * last.get("accuracy_floor", 0.0), last
    elif "recon_nmse" in last:  # MAE: 1.0 = predicting each normalised patch's mean
        assert last["recon_nmse"] < 0.5, last
    else:  # PART: 1.0 = the best constant predictor
        assert last["nmse"] < 0.7, last


def white_noise(batch: int, generator: torch.Generator) -> torch.Tensor:
    """[B, 1, 64] white noise: no content says where a patch lies."""
    return torch.randn(batch, 1, 64, generator=generator)


@pytest.mark.parametrize(("method", "frontend"), method_frontends())
def test_on_white_noise_every_objective_stays_at_its_floor(method: str, frontend: str) -> None:
    """No front-end tells a token where its patch lies: on noise the position objectives stay
    at their content-free floors (PART's nmse near 1, MP3 / DropPos accuracy near chance) and
    MAE cannot reconstruct the masked noise (recon_nmse near 1)."""
    last = short_run(method, frontend, (64,), white_noise, steps=60)
    if method in BINARY_METHODS:  # the best constant on the batch's labels, about 0.5
        assert abs(last["accuracy_chance"] - 0.5) < 0.1, last
        assert last["accuracy"] < last["accuracy_chance"] + 0.08, last
    elif "accuracy" in last:
        floor = max(last["accuracy_chance"], last.get("accuracy_floor", 0.0))
        assert last["accuracy"] < 2 * floor, last
    elif "recon_nmse" in last:
        assert last["recon_nmse"] > 0.9, last
    else:
        assert last["nmse"] > 0.85, last


@pytest.mark.parametrize("frontend", ["channel_set", "channel_set_attention"])
@pytest.mark.parametrize(("method", "ndim"), [(m, n) for m in METHODS for n in (1, 2)])
def test_items_with_different_channel_sets_train_with_the_channel_set_encoder(
    method: str, ndim: int, frontend: str
) -> None:
    """Items of one batch hold different channel sets (NaN marks a channel an item lacks): the
    loss and every gradient stay finite, with either pooling over channels."""
    if method in WINDOW_METHODS and ndim > 1:
        pytest.skip("PART across windows reads 1-D segments")
    spatial = shape_of(ndim)
    model = build(method, spatial, in_chans=3, frontend=frontend)
    x = torch.randn(4, 3, *spatial, generator=seeded(5))
    x[0, 2] = float("nan")
    x[1, :2] = float("nan")
    out = model(x, generator=seeded())
    assert bool(torch.isfinite(out.loss)), out.loss
    out.loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and bool(torch.isfinite(parameter.grad).all()), name


@pytest.mark.parametrize("method", BASELINES)
def test_pretrain_runs_the_baseline_end_to_end(method: str, tmp_path: Path) -> None:
    data = position_signal(16, seeded()).numpy()
    result = pretrain(
        data, out_dir=tmp_path, method=method, config=PretrainConfig.preset("test"), epochs=2
    )
    assert isinstance(
        result.model, {"mae": MAEModel, "mp3": MP3Model, "droppos": DropPosModel}[method]
    )
    train = [record for record in result.history if record["phase"] == "train"]
    assert len(train) == 4 and all(math.isfinite(record["loss"]) for record in train)
    if method == "droppos":  # sigma decays linearly with the step: 1, 0.75, 0.5, 0.25
        sigmas = [record["smoothing_sigma"] for record in train]
        np.testing.assert_allclose(sigmas, [1.0, 0.75, 0.5, 0.25], atol=1e-6)


# --------------------------------------------------------------------------------------------
# Shared masking helpers and decoder size
# --------------------------------------------------------------------------------------------


def test_masked_count_rounds_and_keeps_one_on_each_side() -> None:
    assert masked_count(0.75, 8) == 6
    assert masked_count(0.75, 196) == 147  # MAE / DropPos on 14 x 14: 49 kept
    assert masked_count(0.75, 30) == 22  # round(22.5) -> 22 (halves to even)
    assert masked_count(0.99, 8) == 7  # at least one kept
    assert masked_count(0.01, 8) == 1  # at least one masked


def test_decoder_width_rule() -> None:
    def encoder(dim: int, heads: int) -> ViTEncoder:
        return ViTEncoder(in_chans=1, patch_size=4, ndim=1, embed_dim=dim, depth=1, num_heads=heads)

    assert decoder_width(encoder(512, 8), None) == (256, 8)  # vit_eeg_12m
    assert decoder_width(encoder(768, 12), None) == (384, 12)  # ViT-B
    assert decoder_width(encoder(384, 6), None) == (192, 6)  # ViT-S
    assert decoder_width(encoder(32, 2), None) == (16, 2)  # vit_test
    assert decoder_width(encoder(768, 12), 512) == (512, 8)  # 12 does not divide 512


# --------------------------------------------------------------------------------------------
# MAE
# --------------------------------------------------------------------------------------------


def test_mae_masks_round_ratio_n_patches_per_example() -> None:
    model = build("mae", (32,))  # 8 slots
    assert isinstance(model, MAEModel)
    out = model(torch.randn(16, 2, 32), generator=seeded())
    assert out.mask.shape == (16, 8)
    assert out.mask.sum(dim=1).tolist() == [6] * 16
    assert out.masked.shape == (16, 6) and out.visible.shape == (16, 2)
    for b in range(16):
        assert sorted(out.masked[b].tolist() + out.visible[b].tolist()) == list(range(8))
        assert set(out.mask[b].nonzero().flatten().tolist()) == set(out.masked[b].tolist())
    assert len({tuple(row) for row in out.masked.tolist()}) > 1  # per-example masks


def test_mae_normalised_targets_by_hand() -> None:
    # One patch of 4 values: mean 2.5, unbiased variance 5/3 (MAE's ``target.var``).
    patch = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(5 / 3 + 1e-6)
    torch.testing.assert_close(normalized_patch_targets(patch)[0, 0], expected)
    # Two channels of a 2-sample patch are normalised together: [0, 0, 2, 2] -> mean 1, var 4/3.
    patch = torch.tensor([[0.0, 0.0], [2.0, 2.0]]).view(1, 1, 2, 2)
    expected = torch.tensor([-1.0, -1.0, 1.0, 1.0]) / math.sqrt(4 / 3 + 1e-6)
    torch.testing.assert_close(normalized_patch_targets(patch)[0, 0], expected)
    torch.testing.assert_close(
        normalized_patch_targets(patch, normalize=False)[0, 0], torch.tensor([0.0, 0.0, 2.0, 2.0])
    )


def test_mae_loss_is_the_mse_on_masked_patches_only() -> None:
    model = build("mae", (16, 12))
    x = torch.randn(3, 2, 16, 12)
    out = model(x, generator=seeded(4))
    patches = x.reshape(3, 2, 4, 4, 3, 4).permute(0, 2, 4, 1, 3, 5).reshape(3, 12, 2, 4, 4)
    torch.testing.assert_close(out.target, normalized_patch_targets(patches))
    squared = (out.pred - out.target).square().mean(dim=-1)
    torch.testing.assert_close(out.loss, squared[out.mask].mean())
    raw = build("mae", (16, 12), norm_pix_loss=False)
    torch.testing.assert_close(raw(x, generator=seeded(4)).target, patches.flatten(2))


def test_mae_encoder_sees_only_the_visible_patches() -> None:
    model = build("mae", (32,))
    x = torch.randn(2, 2, 32)
    out = model(x, generator=seeded(5))
    changed = x.clone().view(2, 2, 8, 4)
    changed[out.mask.unsqueeze(1).expand(-1, 2, -1)] += 10.0  # perturb every masked patch
    again = model(changed.view(2, 2, 32), generator=seeded(5))
    torch.testing.assert_close(again.pred, out.pred)  # the reconstruction ignores them
    assert not torch.allclose(again.target, out.target)


# --------------------------------------------------------------------------------------------
# MP3
# --------------------------------------------------------------------------------------------


def test_mp3_labels_are_slot_indices_and_keys_are_masked_per_example() -> None:
    model = build("mp3", (16, 12))  # 4 x 3 = 12 slots
    assert isinstance(model, MP3Model) and model.encoder.pos_embed is None
    out = model(torch.randn(8, 2, 16, 12), generator=seeded())
    assert out.logits.shape == (8, 12, 12)
    assert torch.equal(out.labels, torch.arange(12).expand(8, -1))
    assert out.key_mask.sum(dim=1).tolist() == [9] * 8  # round(0.75 * 12)
    expected = F.cross_entropy(out.logits.flatten(0, 1), out.labels.flatten())
    torch.testing.assert_close(out.loss, expected)  # every token carries the loss


def test_mp3_masked_patches_are_no_keys() -> None:
    model = build("mp3", (32,))
    x = torch.randn(2, 2, 32)
    out = model(x, generator=seeded(6))
    changed = x.clone().view(2, 2, 8, 4)
    changed[out.key_mask.unsqueeze(1).expand(-1, 2, -1)] += 10.0
    again = model(changed.view(2, 2, 32), generator=seeded(6))
    keep = ~out.key_mask
    torch.testing.assert_close(again.logits[keep], out.logits[keep])  # context unaffected
    assert not torch.allclose(again.logits[out.key_mask], out.logits[out.key_mask])


# --------------------------------------------------------------------------------------------
# DropPos
# --------------------------------------------------------------------------------------------


def test_droppos_smoothing_on_a_1d_grid_of_5_slots_by_hand() -> None:
    e = math.exp
    row0 = torch.tensor([1.0, e(-1), e(-4), e(-9), e(-16)])
    row2 = torch.tensor([e(-4), e(-1), 1.0, e(-1), e(-4)])
    smoothing = position_smoothing((5,), sigma=1.0)
    torch.testing.assert_close(smoothing[0], row0 / row0.sum())
    torch.testing.assert_close(smoothing[2], row2 / row2.sum())
    torch.testing.assert_close(smoothing.sum(dim=1), torch.ones(5))
    # sigma = 2: exp(-d^2 / 4)
    row1 = torch.tensor([e(-1 / 4), 1.0, e(-1 / 4), e(-4 / 4), e(-9 / 4)])
    torch.testing.assert_close(position_smoothing((5,), sigma=2.0)[1], row1 / row1.sum())
    torch.testing.assert_close(position_smoothing((5,), sigma=0.0), torch.eye(5))


def test_droppos_smoothing_on_a_2x3_grid_by_hand() -> None:
    # Slots row-major: 0 (0,0) 1 (0,1) 2 (0,2) / 3 (1,0) 4 (1,1) 5 (1,2).
    assert grid_coordinates((2, 3)).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    e = math.exp
    row4 = torch.tensor([e(-2), e(-1), e(-2), e(-1), 1.0, e(-1)])  # squared distances 2 1 2 1 0 1
    row0 = torch.tensor([1.0, e(-1), e(-4), e(-1), e(-2), e(-5)])
    smoothing = position_smoothing((2, 3), sigma=1.0)
    torch.testing.assert_close(smoothing[4], row4 / row4.sum())
    torch.testing.assert_close(smoothing[0], row0 / row0.sum())
    labels = torch.tensor([[4, 0]])
    torch.testing.assert_close(
        smoothed_labels(grid_coordinates((2, 3)), labels, 1.0), smoothing[labels]
    )


def test_droppos_drops_patches_and_positions_and_labels_the_kept_slots() -> None:
    model = build("droppos", (16, 16))  # 16 slots, 4 kept, 3 of them without position
    assert isinstance(model, DropPosModel)
    out = model(torch.randn(8, 2, 16, 16), generator=seeded())
    assert out.logits.shape == (8, 4, 16) and out.labels.shape == (8, 4)
    assert (out.labels.diff(dim=1) > 0).all()  # distinct slots, ascending
    assert out.position_mask.sum(dim=1).tolist() == [3] * 8  # round(0.75 * 4)
    assert (out.weights[~out.position_mask] == 0).all()
    assert (out.weights[out.position_mask] > 0).all()
    assert len({tuple(row) for row in out.labels.tolist()}) > 1
    torch.testing.assert_close(out.soft_labels, position_smoothing((4, 4), 1.0)[out.labels])
    cross_entropy = -(out.soft_labels * F.log_softmax(out.logits, dim=-1)).sum(dim=-1)
    expected = (cross_entropy * out.weights).sum() / out.weights.sum()
    torch.testing.assert_close(out.loss, expected)
    assert out.metrics["accuracy_chance"] == pytest.approx(1 / 16)
    assert out.metrics["accuracy_floor"] == pytest.approx(1 / 15)  # one anchor slot is known


def test_droppos_attentive_weights_follow_cls_similarity() -> None:
    model = build("droppos", (32,))
    assert isinstance(model, DropPosModel)
    x = torch.randn(4, 2, 32)
    out = model(x, generator=seeded(2))
    similarity = model.patch_similarity(x.view(4, 2, 8, 4).transpose(1, 2))
    assert similarity.shape == (4, 8)
    torch.testing.assert_close(similarity.sum(dim=1), torch.ones(4))
    kept = similarity.gather(1, out.labels)
    expected = out.position_mask.float() * kept / kept.sum(dim=1, keepdim=True)
    torch.testing.assert_close(out.weights, expected)
    model.attentive = False
    plain = model(x, generator=seeded(2))
    torch.testing.assert_close(plain.weights, plain.position_mask.float())


def test_droppos_sigma_decays_linearly_to_one_hot() -> None:
    model = build("droppos", (32,), smoothing_sigma=2.0)
    assert isinstance(model, DropPosModel)
    x = torch.randn(2, 2, 32)
    assert model.sigma == 2.0
    model.set_training_progress(0.5)
    assert model.sigma == 1.0
    out = model(x, generator=seeded())
    torch.testing.assert_close(out.soft_labels, position_smoothing((8,), 1.0)[out.labels])
    assert float(out.metrics["smoothing_sigma"]) == 1.0
    model.set_training_progress(1.0)
    out = model(x, generator=seeded())
    torch.testing.assert_close(out.soft_labels, F.one_hot(out.labels, 8).float())


def test_objectives_are_listed_by_what_they_train_on() -> None:
    from partnd.objectives.registry import register_objective

    segments = ["part_joint", "part_windows", "rp", "ts"]
    assert list_objectives(data="segments") == segments
    assert set(list_objectives(data="items")) == set(METHODS) - set(segments)
    with pytest.raises(ValueError, match="data"):
        register_objective("nope", lambda config, spec: None, "", data="images")  # type: ignore[arg-type,return-value]
    assert "nope" not in list_objectives()
