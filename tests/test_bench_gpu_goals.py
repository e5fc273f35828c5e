"""The GPU goals script (``benchmarks/gpu_goals.py``) and the utilisation it prints: the FLOPs of a
step counted on known products, the peak it divides by, and a smoke run of every goal."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch):
    """The benchmarks import each other by name, as when run as scripts."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_objective_step
    import gpu_goals

    yield bench_objective_step, gpu_goals
    for name in ("gpu_goals", "bench_objective_step"):
        sys.modules.pop(name, None)


def test_step_flops_counts_forward_and_backward_products(benchmarks) -> None:
    bench, _ = benchmarks
    model = torch.nn.Linear(8, 4, bias=False)
    x = torch.randn(5, 8)
    # forward x @ W^T: 2 * 5 * 8 * 4; backward: the weight's gradient only (x needs none)
    assert bench.step_flops(model, lambda: model(x).square().sum()) == 2 * (2 * 5 * 8 * 4)
    assert model.weight.grad is None  # cleared after counting
    hidden = torch.nn.Sequential(torch.nn.Linear(8, 6, bias=False), torch.nn.Linear(6, 4))
    # two products forward; backward: both weights' gradients and the input gradient of the second
    expected = 2 * 5 * 8 * 6 + 2 * 5 * 6 * 4 + (2 * 5 * 8 * 6 + 2 * 2 * 5 * 6 * 4)
    assert bench.step_flops(hidden, lambda: hidden(x).sum()) == expected


def test_peak_is_the_given_one_else_the_data_sheet_else_measured(benchmarks) -> None:
    bench, _ = benchmarks
    assert bench.peak_tflops(torch.device("cpu"), 5.0) == (5.0, "given")
    measured, source = bench.peak_tflops(torch.device("cpu"))
    assert source == "measured bf16 matmul, wall clock" and 0 < measured < 100
    assert bench.PEAK_BF16_TFLOPS["H100"] == bench.PEAK_BF16_TFLOPS["H200"] == 989.0
    assert bench.PEAK_BF16_TFLOPS["A100"] == 312.0
    assert next(k for k in bench.PEAK_BF16_TFLOPS if k in "NVIDIA H100 PCIe") == "H100 PCIe"


@pytest.mark.slow
def test_the_smoke_run_prints_every_goal(benchmarks, capsys: pytest.CaptureFixture) -> None:
    _, goals = benchmarks
    # a given peak (a GPU data sheet's): the MFU is then a fraction whatever the load; a
    # matrix product measured at the start of a loaded run can be slower than the steps after it
    summary = goals.main(["--smoke", "--device", "cpu", "--peak-tflops", "989"])
    assert set(goals.GOALS) <= set(summary)
    for name in ("eeg_part_mfu", "eeg_bare_mfu", "eeg_mae_mfu", "part_windows_mfu"):
        assert 0 < summary[name] < 1, name
    assert all(math.isfinite(value) and value > 0 for value in summary.values())
    out = capsys.readouterr().out
    for section in (
        "1. EEG preset",
        "2. CIFAR preset",
        "3. PART across windows",
        "4. The segment",
        "6. The compile modes",
    ):
        assert section in out
    assert summary["engine_off_samples_per_s"] > 0
    assert "a repeated run: equal" in out
    assert "error" in out and out.count("n/a (smoke)") == len(goals.GOALS)
