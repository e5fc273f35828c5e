"""A store with a planted staging task, for the tests that train a stager on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from partnd.datasets.store import STAGE_NAMES, create_store, write_record

__all__ = ["write_staged_store"]


def write_staged_store(
    path: Path, channels: list[str], seed: int = 0, records: int = 3, nights: int = 1
) -> Path:
    """Records of 48 windows (300 samples at 10 Hz) whose stage sets the frequency of a noisy
    oscillation, on every channel (each its own phase), in bouts of 4 to 8 windows as in a
    hypnogram; records ``r0``, ``r1``, ... of subjects ``s{seed}-0``, ``s{seed}-1``, ..., each
    subject ``nights`` consecutive records."""
    create_store(
        path,
        sfreq=10.0,
        channels=channels,
        window_seconds=30.0,
        stage_names=STAGE_NAMES,
        metadata={},
    )
    rng = np.random.default_rng(seed)
    for index in range(records):
        stages = np.concatenate(
            [np.full(rng.integers(4, 9), rng.integers(0, 5)) for _ in range(12)]
        )[:48]
        frequency = np.array([0.3, 0.8, 1.5, 2.5, 4.0])[stages][:, None, None]
        phase = rng.uniform(0, 2 * np.pi, (48, len(channels), 1))
        signal = np.sin(2 * np.pi * frequency * np.arange(300) / 10.0 + phase)
        signal += 0.1 * rng.standard_normal(signal.shape)
        write_record(
            path,
            f"r{index}",
            signal.astype(np.float32),
            stages.astype(np.int8),
            np.arange(48) * 30.0,
            attrs={"subject_id": f"s{seed}-{index // nights}", "split": "training"},
        )
    return path
