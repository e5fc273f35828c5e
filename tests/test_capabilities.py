"""Tests for the paper's capabilities: off-grid reconstruction, patch uncertainty, negative
symmetry and scale prediction (known values with oracle heads, shapes, figures, real data)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import partnd
from partnd._validation import InputError
from partnd.evaluation.capabilities import (
    antisymmetry_score,
    negative_symmetry,
    offgrid_reconstruction,
    patch_uncertainty,
    scale_prediction,
)
from partnd.models.heads import build_head
from partnd.models.registry import create_encoder
from partnd.objectives import PARTModel
from partnd.patches.sampling import OffGridSampler, PatchBatch
from partnd.patches.targets import all_pairs, relative_targets

# (ndim, spatial shape, patch size, patches per example, channels)
SETTINGS = {1: ((64,), 8, 10, 2), 2: ((16, 12), 4, 12, 3)}


pytestmark = pytest.mark.usefixtures("one_thread")


class OracleModel(PARTModel):
    """Predicts the true relative targets of the sampled boxes (optionally transformed)."""

    transform: Callable[[Tensor], Tensor] = staticmethod(lambda targets: targets)

    def predict_all_pairs(self, patches: PatchBatch) -> Tensor:
        num = patches.num_patches
        ref, tgt = all_pairs(num, device=patches.centers.device)
        targets = relative_targets(
            patches.centers, patches.sizes, ref, tgt, scale=self.scale_targets
        )
        return self.transform(targets).view(patches.batch_size, num, num, -1)


class SymmetricOracle(OracleModel):
    """|Δ|: a symmetric prediction matrix for equal-size boxes."""

    transform = staticmethod(torch.abs)


class ZeroHead(nn.Module):
    """Predicts 0 for every pair; records the mode it ran in."""

    def __init__(self, out_dim: int, embed_dim: int = 32) -> None:
        super().__init__()
        self.out_dim, self.embed_dim = out_dim, embed_dim
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, tokens: Tensor, ref: Tensor, tgt: Tensor) -> Tensor:
        self.seen.append((self.training, torch.is_grad_enabled()))
        return tokens.new_zeros(tokens.shape[0], ref.shape[-1], self.out_dim)


def make_model(
    ndim: int,
    *,
    scale: bool = False,
    head: str = "cross_attention",
    model_class: type[PARTModel] = PARTModel,
) -> PARTModel:
    _, patch, num, channels = SETTINGS[ndim]
    encoder = create_encoder("vit_test", in_chans=channels, patch_size=patch, ndim=ndim)
    out_dim = ndim * (2 if scale else 1)
    relative: nn.Module
    if head == "zero":
        relative = ZeroHead(out_dim)
    else:
        relative = build_head(head, embed_dim=32, out_dim=out_dim, num_patches=num)
    sampler = OffGridSampler(ndim, patch, num, scale_range=(0.5, 2.0) if scale else None)
    return model_class(encoder, relative, sampler, num_pairs=8, scale_targets=scale)


def make_input(ndim: int, batch: int = 3, seed: int = 0) -> Tensor:
    spatial, _, _, channels = SETTINGS[ndim]
    return torch.randn(batch, channels, *spatial, generator=torch.Generator().manual_seed(seed))


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Known values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ndim", [1, 2])
def test_oracle_places_every_patch_exactly(ndim: int) -> None:
    model = make_model(ndim, model_class=OracleModel)
    x = make_input(ndim)
    rec = offgrid_reconstruction(model, x, reference=3, generator=seeded())
    # integer boxes of a power-of-two extent: every step is exact in float32
    assert rec.mean_error == rec.median_error == rec.mean_error_patches == 0.0
    assert rec.mean_error_floor > 1.0
    torch.testing.assert_close(rec.predicted_centers, rec.centers, rtol=0, atol=0)
    torch.testing.assert_close(rec.predicted_sizes, rec.sizes, rtol=0, atol=0)

    unc = patch_uncertainty(model, x, target=5, generator=seeded())
    assert unc.std == (0.0,) * ndim
    assert unc.spread == unc.mean_error == unc.consensus_error == 0.0

    sym = negative_symmetry(model, x, generator=seeded())
    assert sym.score == pytest.approx(1.0, abs=1e-12)
    assert sym.score_truth == pytest.approx(1.0, abs=1e-12)
    assert sym.score_per_dim == pytest.approx((1.0,) * ndim, abs=1e-12)
    assert sym.correlation == pytest.approx(1.0, abs=1e-12)
    assert sym.correlation_truth == pytest.approx(1.0, abs=1e-12)
    assert sym.truth_correlation == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(sym.pred, sym.truth)


@pytest.mark.parametrize("ndim", [1, 2])
def test_oracle_with_scale_boxes(ndim: int) -> None:
    model = make_model(ndim, scale=True, model_class=OracleModel)
    x = make_input(ndim)
    rec = offgrid_reconstruction(model, x, reference=1, generator=seeded(1))
    assert rec.mean_error == pytest.approx(0.0, abs=1e-5)
    assert rec.mean_error_patches == pytest.approx(0.0, abs=1e-5)
    torch.testing.assert_close(rec.predicted_sizes, rec.sizes, rtol=1e-6, atol=1e-5)
    assert not torch.equal(rec.sizes, rec.sizes[:, :1].expand_as(rec.sizes))  # sizes vary

    unc = patch_uncertainty(model, x, target=2, generator=seeded(1))
    assert unc.spread == pytest.approx(0.0, abs=1e-5)

    sym = negative_symmetry(model, x, generator=seeded(1))
    # unequal extents: Δ_ji = -Δ_ij * s_i / s_j, so the truth is not exactly antisymmetric
    assert 0.0 < sym.score_truth < 1.0
    assert sym.score == pytest.approx(sym.score_truth, abs=1e-6)

    scale = scale_prediction(model, x, generator=seeded(1))
    assert scale.names == (("st",) if ndim == 1 else ("sy", "sx"))
    assert scale.mse == pytest.approx((0.0,) * ndim, abs=1e-10)
    assert scale.r2 == pytest.approx((1.0,) * ndim, abs=1e-6)
    assert scale.nmse == pytest.approx(0.0, abs=1e-8)
    assert all(floor > 0.01 for floor in scale.mse_floor)


@pytest.mark.parametrize("ndim", [1, 2])
def test_zero_head_error_is_the_distance_to_the_reference(ndim: int) -> None:
    model = make_model(ndim, head="zero")
    x = make_input(ndim)
    reference = 4
    rec = offgrid_reconstruction(model, x, reference=reference, generator=seeded(2))
    boxes = model.sample(x, seeded(2))  # the same draw, cut independently
    centres = boxes.centers.double().numpy()
    patch = SETTINGS[ndim][1]
    distances = [
        np.linalg.norm(centres[b, j] - centres[b, reference])
        for b in range(centres.shape[0])
        for j in range(centres.shape[1])
        if j != reference
    ]
    assert rec.mean_error == pytest.approx(float(np.mean(distances)), rel=1e-12)
    assert rec.median_error == pytest.approx(float(np.median(distances)), rel=1e-12)
    assert rec.mean_error_patches == pytest.approx(float(np.mean(distances)) / patch, rel=1e-12)
    assert rec.mean_error == pytest.approx(rec.mean_error_floor, rel=1e-12)
    assert rec.mean_error_patches == pytest.approx(rec.mean_error_floor_patches, rel=1e-12)
    expected = np.broadcast_to(centres[:, reference : reference + 1], centres.shape)
    np.testing.assert_array_equal(rec.predicted_centers.numpy(), expected)

    # zero translation: every reference places the target on itself
    target = 2
    unc = patch_uncertainty(model, x, target=target, generator=seeded(2))
    others = [i for i in range(centres.shape[1]) if i != target]
    std = centres[:, others].std(axis=1).mean(axis=0)
    assert unc.std == pytest.approx(tuple(std), rel=1e-10)
    consensus = np.linalg.norm(centres[:, others].mean(axis=1) - centres[:, target], axis=-1)
    assert unc.consensus_error == pytest.approx(float(consensus.mean()), rel=1e-10)
    assert unc.references.tolist() == others

    sym = negative_symmetry(model, x, generator=seeded(2))
    assert math.isnan(sym.score) and math.isnan(sym.correlation)
    assert sym.score_truth == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("ndim", [1, 2])
def test_zero_head_scale_error_is_the_mean_square_ratio(ndim: int) -> None:
    model = make_model(ndim, scale=True, head="zero")
    x = make_input(ndim)
    result = scale_prediction(model, x, generator=seeded(3))
    sizes = model.sample(x, seeded(3)).sizes.double()
    num = sizes.shape[1]
    mask = ~torch.eye(num, dtype=torch.bool)
    ratios = (sizes[:, None, :, :] / sizes[:, :, None, :])[:, mask]  # [B, N(N-1), ndim]
    flat = ratios.reshape(-1, ndim)
    assert result.mse == pytest.approx(tuple(flat.square().mean(0).tolist()), rel=1e-5)
    assert result.mse_floor == pytest.approx(tuple(flat.var(0, correction=0).tolist()), rel=1e-5)
    assert all(r2 < 0 for r2 in result.r2)


@pytest.mark.parametrize("ndim", [1, 2])
def test_symmetric_prediction_scores_zero(ndim: int) -> None:
    sym = negative_symmetry(make_model(ndim, model_class=SymmetricOracle), make_input(ndim))
    assert sym.score == pytest.approx(0.0, abs=1e-12)  # documented: 0 for a symmetric matrix
    assert sym.correlation == pytest.approx(-1.0, abs=1e-12)
    assert sym.score_truth == pytest.approx(1.0, abs=1e-12)


def test_antisymmetry_score_known_values() -> None:
    generator = seeded(4)
    base = torch.randn(3, 6, 6, generator=generator, dtype=torch.float64)
    antisymmetric = base - base.transpose(-1, -2)
    symmetric = base + base.transpose(-1, -2)
    off = ~torch.eye(6, dtype=torch.bool)
    symmetric = symmetric * (antisymmetric[..., off].norm() / symmetric[..., off].norm())
    assert antisymmetry_score(antisymmetric) == pytest.approx(1.0, abs=1e-12)
    assert antisymmetry_score(symmetric) == pytest.approx(0.0, abs=1e-12)
    # equal-norm (orthogonal) parts: 1 - ||S|| / sqrt(||A||^2 + ||S||^2) = 1 - 1/sqrt(2)
    mixed = antisymmetric + symmetric
    assert antisymmetry_score(mixed) == pytest.approx(1 - 1 / math.sqrt(2), abs=1e-12)
    # the diagonal is ignored
    assert antisymmetry_score(antisymmetric + torch.eye(6)) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(antisymmetry_score(torch.zeros(4, 4)))
    for bad in (torch.zeros(3, 4), torch.zeros(1, 1), torch.zeros(5), np.zeros((3, 3))):
        with pytest.raises(InputError, match=r"^matrix: "):
            antisymmetry_score(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Shapes, reproducibility, modes, validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ndim", [1, 2])
def test_shapes_and_single_example(ndim: int) -> None:
    model = make_model(ndim, scale=True)
    x = make_input(ndim, batch=2)
    num = SETTINGS[ndim][2]
    rec = offgrid_reconstruction(model, x, generator=seeded())
    for tensor in (rec.centers, rec.sizes, rec.predicted_centers, rec.predicted_sizes):
        assert tensor.shape == (2, num, ndim) and tensor.dtype == torch.float64
    unc = patch_uncertainty(model, x, target=num - 1, generator=seeded())
    assert unc.predicted_centers.shape == (2, num - 1, ndim)
    assert unc.true_center.shape == unc.true_size.shape == (2, ndim)
    assert len(unc.std) == ndim and unc.references.tolist() == list(range(num - 1))
    sym = negative_symmetry(model, x, generator=seeded())
    assert sym.pred.shape == sym.truth.shape == (2, ndim, num, num)
    assert sym.order.shape == (2, num)
    for b in range(2):  # the order sorts by the first dimension
        first = rec.centers[b, sym.order[b], 0]
        assert bool((first[1:] >= first[:-1]).all())
        assert sorted(sym.order[b].tolist()) == list(range(num))
    scale = scale_prediction(model, x, generator=seeded())
    assert scale.pred.shape == scale.truth.shape == (2, num, num, ndim)
    assert len(scale.mse) == len(scale.mse_floor) == len(scale.r2) == ndim
    numbers = [rec.mean_error, rec.median_error, unc.spread, sym.score, scale.nmse]
    assert all(math.isfinite(v) for v in numbers)

    # one example [C, *spatial] is a batch of one; numpy input works too
    single = offgrid_reconstruction(model, x[0], generator=seeded())
    batch_of_one = offgrid_reconstruction(model, x[:1], generator=seeded())
    from_numpy = offgrid_reconstruction(model, x[0].numpy(), generator=seeded())
    assert single.centers.shape == (1, num, ndim)
    assert single.mean_error == batch_of_one.mean_error == from_numpy.mean_error


def test_three_dimensional_numbers_without_figures(tmp_path: Path) -> None:
    encoder = create_encoder("vit_test", in_chans=1, patch_size=2, ndim=3)
    head = build_head("pairwise_mlp", embed_dim=32, out_dim=3, num_patches=5)
    model = OracleModel(encoder, head, OffGridSampler(3, 2, 5), num_pairs=4)
    x = torch.randn(2, 1, 6, 6, 6)
    assert offgrid_reconstruction(model, x).mean_error == 0.0
    assert negative_symmetry(model, x).score == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(InputError, match=r"^path: "):
        offgrid_reconstruction(model, x, path=tmp_path / "volume.png")


@pytest.mark.parametrize("ndim", [1, 2])
def test_generator_makes_draws_reproducible(ndim: int) -> None:
    model = make_model(ndim)
    x = make_input(ndim)
    first = offgrid_reconstruction(model, x, generator=seeded(7))
    second = offgrid_reconstruction(model, x, generator=seeded(7))
    other = offgrid_reconstruction(model, x, generator=seeded(8))
    assert torch.equal(first.centers, second.centers)
    assert torch.equal(first.predicted_centers, second.predicted_centers)
    assert first.mean_error == second.mean_error
    assert not torch.equal(first.centers, other.centers)
    a = negative_symmetry(model, x, generator=seeded(7))
    b = negative_symmetry(model, x, generator=seeded(7))
    assert torch.equal(a.pred, b.pred) and a.score == b.score


def test_mode_restored_and_eval_without_grad() -> None:
    model = make_model(2, scale=True, head="zero")
    head = model.head
    assert isinstance(head, ZeroHead)
    x = make_input(2, batch=1)
    functions: list[Callable[..., object]] = [
        offgrid_reconstruction,
        patch_uncertainty,
        negative_symmetry,
        scale_prediction,
    ]
    model.train()
    model.encoder.blocks[0].eval()  # a mixed state must survive too
    before = {name: module.training for name, module in model.named_modules()}
    for function in functions:
        function(model, x)
        assert {name: m.training for name, m in model.named_modules()} == before
    model.eval()
    offgrid_reconstruction(model, x)
    assert not any(module.training for module in model.modules())
    assert head.seen and all(seen == (False, False) for seen in head.seen)


def test_bad_inputs_are_named() -> None:
    model = make_model(2)
    x = make_input(2)
    num = SETTINGS[2][2]
    with pytest.raises(InputError, match=r"^model: "):
        offgrid_reconstruction(nn.Linear(2, 2), x)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^x: "):
        offgrid_reconstruction(model, torch.randn(3, 2, 16, 12))  # wrong channel count
    with pytest.raises(InputError, match=r"^x: "):
        offgrid_reconstruction(model, torch.randn(3, 64))  # wrong number of dimensions
    with pytest.raises(InputError, match=r"^x: "):
        offgrid_reconstruction(model, torch.randn(1, 3, 3, 12))  # smaller than a patch
    with pytest.raises(InputError, match=r"^x: "):
        offgrid_reconstruction(model, torch.zeros(3, 16, 12, dtype=torch.long))
    with pytest.raises(InputError, match=r"^x: "):
        offgrid_reconstruction(model, torch.full((3, 16, 12), float("nan")))
    for reference in (-1, num, True, 1.0):
        with pytest.raises(InputError, match=r"^reference: "):
            offgrid_reconstruction(model, x, reference=reference)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^target: "):
        patch_uncertainty(model, x, target=num)
    with pytest.raises(InputError, match=r"^generator: "):
        negative_symmetry(model, x, generator=0)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^path: "):
        negative_symmetry(model, x, path=3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^model: .*scale targets"):
        scale_prediction(model, x)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ndim", [1, 2])
def test_figures_are_written(ndim: int, tmp_path: Path) -> None:
    model = make_model(ndim, scale=True)
    x = make_input(ndim, batch=2)
    calls: dict[str, Callable[[Path], object]] = {
        "reconstruction": lambda p: offgrid_reconstruction(model, x, reference=1, path=p),
        "uncertainty": lambda p: patch_uncertainty(model, x, target=2, path=p),
        "symmetry": lambda p: negative_symmetry(model, x, path=str(p)),
        "scale": lambda p: scale_prediction(model, x, path=p),
    }
    for name, call in calls.items():
        path = tmp_path / f"{name}_{ndim}d.png"
        call(path)
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1024, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}_{ndim}d.png" for name in calls
    )  # no temporary files left behind


# ---------------------------------------------------------------------------------------------
# Real data
# ---------------------------------------------------------------------------------------------


def test_pretraining_on_digits_improves_placement(tmp_path: Path) -> None:
    from partnd.datasets.real_images import load_sklearn_digits
    from partnd.objectives import build_objective
    from partnd.signal_info import SignalSpec

    images, _ = load_sklearn_digits()
    config = partnd.PretrainConfig.preset(
        "test", patch_size=2, epochs=6, batch_size=32, num_pairs=128, log_every_steps=50, seed=0
    )
    torch.manual_seed(0)
    untrained = build_objective(config, SignalSpec(1, (8, 8)))
    result = partnd.pretrain(images[:1024], out_dir=tmp_path / "run", config=config)
    trained = result.model
    assert isinstance(trained, PARTModel) and isinstance(untrained, PARTModel)
    held_out = torch.from_numpy(images[-64:])

    def placement(model: PARTModel) -> float:
        errors = [
            offgrid_reconstruction(model, held_out, reference=r, generator=seeded(1)).mean_error
            for r in range(4)
        ]
        return float(np.mean(errors))

    trained_error, untrained_error = placement(trained), placement(untrained)
    floor = offgrid_reconstruction(trained, held_out, generator=seeded(1)).mean_error_floor
    assert trained_error < 0.95 * untrained_error, (trained_error, untrained_error, floor)
    symmetry = negative_symmetry(trained, held_out, generator=seeded(1))
    assert symmetry.score > negative_symmetry(untrained, held_out, generator=seeded(1)).score
