"""``benchmarks/bench_compile_modes.py``: the nest comparison behind its resume check."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def bench(import_benchmark):
    """The benchmark script as a module."""
    return import_benchmark("bench_compile_modes")


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
