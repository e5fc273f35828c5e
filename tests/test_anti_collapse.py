"""The anti-collapse option of PART (VICReg's variance and covariance terms): the terms by hand,
how they enter PART's and PART across windows' loss, and that training with them spreads the
features."""

from __future__ import annotations

import math

import pytest
import torch

from partnd._validation import InputError
from partnd.engine.config import PretrainConfig
from partnd.objectives import build_objective
from partnd.objectives.anti_collapse import VARIANCE_EPS, variance_covariance_terms
from partnd.signal_info import SignalSpec
from tests.training_loops import objective_steps

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_terms_by_hand() -> None:
    # dimension 0 varies (unbiased variance 4/3: std above 1, no hinge), dimension 1 is constant
    z = torch.tensor([[1.0, 3.0], [-1.0, 3.0], [1.0, 3.0], [-1.0, 3.0]])
    variance, covariance = variance_covariance_terms(z)
    assert variance.item() == pytest.approx((1 - math.sqrt(VARIANCE_EPS)) / 2)
    assert covariance.item() == pytest.approx(0.0)
    # two identical dimensions of variance 2: covariance 2 off the diagonal, twice, over D = 2
    z = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    variance, covariance = variance_covariance_terms(z)
    assert variance.item() == pytest.approx(0.0)
    assert covariance.item() == pytest.approx(2 * 2.0**2 / 2)
    with pytest.raises(InputError, match="features"):
        variance_covariance_terms(torch.ones(1, 4))


def config(method: str, **overrides: object) -> PretrainConfig:
    settings: dict[str, object] = {"method": method, "patch_size": 4}
    if method == "part_windows":
        settings.update(
            window_samples=16, segment_windows=4, num_windows=3, temporal_encoder="temporal_test"
        )
    return PretrainConfig.preset("test", **{**settings, **overrides})


@pytest.mark.parametrize("method", ["part", "part_windows"])
def test_the_weighted_terms_are_added_to_the_loss(method: str) -> None:
    x = torch.randn(4, 2, 64)
    torch.manual_seed(0)
    plain = build_objective(config(method), SignalSpec(2, (64,)))
    torch.manual_seed(0)
    weighted = build_objective(
        config(method, variance_weight=2.0, covariance_weight=0.5), SignalSpec(2, (64,))
    )
    base = plain(x, generator=torch.Generator().manual_seed(3))
    out = weighted(x, generator=torch.Generator().manual_seed(3))
    assert "variance_term" not in base.metrics
    variance, covariance = out.metrics["variance_term"], out.metrics["covariance_term"]
    expected = base.loss + 2.0 * variance + 0.5 * covariance
    torch.testing.assert_close(out.loss, expected)
    # across windows, the terms read the window embeddings (width 32), not the temporal tokens
    _, features = weighted.encode(out.patches)
    width = 32
    assert features.shape[-1] == width
    torch.testing.assert_close(
        torch.stack(variance_covariance_terms(features.flatten(0, 1))),
        torch.stack([variance, covariance]),
    )
    with pytest.raises(InputError, match="variance_weight"):
        config(method, variance_weight=-1.0)


def test_training_with_the_variance_term_spreads_the_features() -> None:
    torch.manual_seed(0)
    model = build_objective(config("part", variance_weight=5.0), SignalSpec(1, (64,)))
    terms = objective_steps(
        model,
        lambda batch, generator: torch.randn(batch, 1, 64, generator=generator),
        40,
        lr=1e-3,
        record=lambda out: float(out.metrics["variance_term"]),
    )
    assert sum(terms[-5:]) / 5 < 0.5 * sum(terms[:5]) / 5, terms
