"""A training step's draws build no tensor from host values once warm: on CUDA each such build is
a copy that waits for the device to finish its queued work, which stalls the host-bound step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from partnd.engine.config import PretrainConfig
from partnd.objectives import build_objective
from partnd.patches.sampling import GridSampler, OffGridSampler
from partnd.signal_info import SignalSpec

SHAPES = {"eeg_sleep": SignalSpec(6, (3000,)), "images_cifar": SignalSpec(3, (32, 32))}


@pytest.fixture
def host_builds(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``torch.tensor`` / ``torch.as_tensor`` call made while the fixture is active."""
    calls: list[Any] = []
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> torch.Tensor:
            calls.append(args[0] if args else kwargs)
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, counting)
    return calls


@pytest.mark.parametrize("preset", sorted(SHAPES))
@pytest.mark.parametrize("method", ["part", "part_grid", "mae", "mp3", "droppos"])
def test_a_warm_draw_builds_no_tensor_from_host_values(
    preset: str, method: str, host_builds: list[Any]
) -> None:
    spec = SHAPES[preset]
    model = build_objective(PretrainConfig.preset(preset, method=method), spec)
    x = torch.randn(4, spec.in_chans, *spec.spatial_shape)
    generator = torch.Generator().manual_seed(0)
    model.draw(x, generator)  # the first draw may build its constants
    host_builds.clear()
    model.draw(x, generator)
    assert host_builds == []


def test_the_shared_constants_are_never_modified_by_the_boxes(host_builds: list[Any]) -> None:
    """The samplers' cached lengths and patch sizes back no box a caller could change."""
    for sampler in (OffGridSampler(1, 10, num_patches=1), GridSampler(1, 10)):
        boxes = sampler.draw((1, 1, 10))
        boxes.sizes.add_(1.0)
        boxes.starts.add_(1.0)
        again = sampler.draw((1, 1, 10))
        assert again.sizes.tolist() == [[[10.0]]] and again.starts.tolist() == [[[0.0]]]
