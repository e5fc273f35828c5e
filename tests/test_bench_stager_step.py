"""``benchmarks/bench_stager_step.py``: the models it times and the table it prints."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def bench(import_benchmark):
    """The benchmark script as a module."""
    return import_benchmark("bench_stager_step")


def test_it_times_partnds_classifier_and_braindecodes_stager_on_the_same_windows(
    bench, capsys: pytest.CaptureFixture[str]
) -> None:
    built = bench.models("spectral_std", ["chambon2018"])
    assert list(built) == ["partnd", "chambon2018"]
    assert type(built["chambon2018"].model).__name__ == "SleepStagerChambon2018"
    x = torch.randn(2, bench.CHANNELS, bench.SAMPLES)
    for model in built.values():
        assert model.eval()(x).shape == (2, bench.CLASSES)
    assert bench.WINDOW_STAGERS == ["chambon2018", "deepsleepnet"]  # U-Sleep reads nights

    bench.main(["--stagers", "chambon2018", "--batch-size", "2", "--steps", "1", "--warmup", "0"])
    printed = capsys.readouterr().out.splitlines()  # braindecode's import may log first
    lines = printed[next(i for i, line in enumerate(printed) if line.startswith("CPU, ")) :]
    assert lines[0].startswith("CPU, ") and "batch 2 windows [6, 3000]" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert list(rows) == ["partnd", "chambon2018"]
    assert rows["partnd"][-1] == "1.00"
    assert int(rows["chambon2018"][1].replace(",", "")) == sum(
        p.numel() for p in built["chambon2018"].parameters()
    )
