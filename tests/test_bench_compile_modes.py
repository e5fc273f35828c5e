"""``benchmarks/bench_compile_modes.py``: the nest comparison behind its resume check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    """The benchmarks import each other by name, as when run as scripts."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_compile_modes

    yield bench_compile_modes
    for name in ("bench_compile_modes", "bench_cost_model"):
        sys.modules.pop(name, None)


def test_largest_difference_walks_nests_of_tensors_and_values(bench) -> None:
    state = {"w": torch.tensor([1.0, 2.0]), "step": 3, "groups": [{"lr": 0.1}]}
    same = {"w": torch.tensor([1.0, 2.0]), "step": 3, "groups": [{"lr": 0.1}]}
    assert bench.largest_difference(state, same) == (True, 0.0)
    nudged = {**same, "w": torch.tensor([1.0, 2.5])}
    assert bench.largest_difference(state, nudged) == (False, 0.5)
    assert bench.largest_difference(state, {**same, "step": 4}) == (False, 0.0)
    assert bench.largest_difference(state, {**same, "groups": []}) == (False, float("inf"))
    assert bench.largest_difference(state, {"w": state["w"]}) == (False, float("inf"))
    counts = torch.tensor([1, 2])
    assert bench.largest_difference(counts, torch.tensor([1, 3])) == (False, 0.0)
