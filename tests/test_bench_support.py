"""The benchmarks' shared timing and data helpers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd.recipes.bench_support import (
    SYNTHETIC_CHANNELS,
    build_synthetic_store,
    interleaved_samples,
    mean_std,
    ratio_spread,
)


def test_mean_std_formats_the_sample_spread() -> None:
    assert mean_std([0.5, 0.7]) == "0.600 ± 0.141"
    assert mean_std([0.5]) == "0.500 ± 0.000"
    assert mean_std([0.61, 0.65], scale=100, digits=1) == "63.0 ± 2.8"
    assert mean_std([]) == "—"


def test_interleaved_samples_time_every_step_in_turns() -> None:
    calls: list[str] = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    samples = interleaved_samples(steps, repeats=3, warmup=1, device=torch.device("cpu"))
    assert calls == ["a", "b"] * 4  # one warm-up turn, then three timed turns
    assert {name: len(values) for name, values in samples.items()} == {"a": 3, "b": 3}
    assert ratio_spread([2.0, 6.0, 3.0], [1.0, 2.0, 3.0]) == (1.0, 3.0)


def test_synthetic_store_holds_band_limited_eeg_like_windows(tmp_path: Path) -> None:
    store = build_synthetic_store(tmp_path / "store.zarr", 2, 4, progress=False)
    assert list(store.channels) == list(SYNTHETIC_CHANNELS) and len(store.record_ids()) == 2
    windows = store.read_windows(store.record_ids()[0], 0, 4)
    assert windows.shape == (4, len(SYNTHETIC_CHANNELS), 3000)
    assert float(windows.std()) == pytest.approx(20.0, rel=0.05)  # about 20 µV RMS
    spectrum = np.abs(np.fft.rfft(windows[0, 0])) ** 2
    assert spectrum[np.fft.rfftfreq(3000, 0.01) > 40].sum() < 0.01 * spectrum.sum()
