"""Which fixed-length windows of a recording are kept, with which stage, and why others are dropped.

Labels arrive per sample (``int8`` codes ``0..n_stages-1``, :data:`UNDEFINED_SAMPLE` for unscored
samples, :data:`CONFLICTING_SAMPLE` where a one-hot encoding marks several stages). Windows are
aligned to the first scored sample; a window is kept only when all its samples carry one single
defined stage. Dropped windows are counted per reason:

- ``"undefined"``: every sample is unscored;
- ``"partly_undefined"``: scored and unscored samples mixed;
- ``"mixed"``: two or more defined stages;
- ``"conflicting"``: some sample has several stages at once;
- ``"incomplete"``: the tail after the last full window (at most one per record);
- ``"flat"``: a kept-looking window in which some channel is flat (decided by the caller).

Unlabelled recordings keep every full window from the first sample, with stage
:data:`partnd.datasets.store.UNLABELLED`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from partnd._validation import check
from partnd.datasets.store import UNLABELLED

from .errors import ALL_UNDEFINED, TOO_SHORT, RecordError

__all__ = [
    "CONFLICTING_SAMPLE",
    "DROP_CONFLICTING",
    "DROP_FLAT",
    "DROP_INCOMPLETE",
    "DROP_MIXED",
    "DROP_PARTLY_UNDEFINED",
    "DROP_UNDEFINED",
    "UNDEFINED_SAMPLE",
    "WindowPlan",
    "plan_windows",
]

UNDEFINED_SAMPLE = -1
CONFLICTING_SAMPLE = -2
DROP_UNDEFINED = "undefined"
DROP_PARTLY_UNDEFINED = "partly_undefined"
DROP_MIXED = "mixed"
DROP_CONFLICTING = "conflicting"
DROP_INCOMPLETE = "incomplete"
DROP_FLAT = "flat"


@dataclass
class WindowPlan:
    """Kept windows of one recording, in source samples.

    Attributes:
        starts: ``[W]`` int64 first source sample of each kept window.
        stages: ``[W]`` int8 stage code of each kept window (``-1`` when unlabelled).
        window_samples: Window length in source samples.
        first_sample: Sample the window grid is aligned to (first scored sample; 0 if unlabelled).
        dropped: Number of dropped windows per reason (only reasons that occurred).
    """

    starts: np.ndarray
    stages: np.ndarray
    window_samples: int
    first_sample: int
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, keep: np.ndarray, reason: str) -> None:
        """Drop the windows where ``keep`` (``[W]`` bool) is False, counted under ``reason``."""
        check(keep.shape == self.starts.shape, "keep", f"a bool array [W={len(self.starts)}]", keep)
        n_dropped = int(np.count_nonzero(~keep))
        if n_dropped:
            self.dropped[reason] = self.dropped.get(reason, 0) + n_dropped
            self.starts = self.starts[keep]
            self.stages = self.stages[keep]


def _count(dropped: dict[str, int], reason: str, mask: np.ndarray) -> None:
    count = int(np.count_nonzero(mask))
    if count:
        dropped[reason] = count


def plan_windows(
    n_samples: int, window_samples: int, sample_stages: np.ndarray | None = None
) -> WindowPlan:
    """Lay out the window grid of a recording and label each window.

    Args:
        n_samples: Length of the recording in samples.
        window_samples: Window length in samples.
        sample_stages: ``[n_samples]`` int8 per-sample stage codes, or None for an unlabelled
            recording.

    Returns:
        The kept windows and the drop counts.

    Raises:
        RecordError: ``"all_undefined"`` when no sample is scored, ``"too_short"`` when not one full
            window fits after the first scored sample.
    """
    check(window_samples > 0, "window_samples", "a positive number of samples", window_samples)
    if sample_stages is None:
        first_sample = 0
    else:
        check(
            sample_stages.shape == (n_samples,),
            "sample_stages",
            f"an array [n_samples={n_samples}]",
            sample_stages,
        )
        scored = np.flatnonzero(sample_stages >= 0)
        if scored.size == 0:
            raise RecordError(ALL_UNDEFINED, f"none of the {n_samples} samples has a sleep stage")
        first_sample = int(scored[0])
    n_windows, tail = divmod(n_samples - first_sample, window_samples)
    if n_windows == 0:
        raise RecordError(
            TOO_SHORT,
            f"{n_samples - first_sample} samples from sample {first_sample} on, "
            f"fewer than one window of {window_samples}",
        )
    starts = first_sample + window_samples * np.arange(n_windows, dtype=np.int64)
    dropped: dict[str, int] = {}
    if tail:
        dropped[DROP_INCOMPLETE] = 1
    if sample_stages is None:
        stages = np.full(n_windows, UNLABELLED, dtype=np.int8)
        return WindowPlan(starts, stages, window_samples, first_sample, dropped)
    grid = sample_stages[first_sample : first_sample + n_windows * window_samples]
    grid = grid.reshape(n_windows, window_samples)
    lowest = grid.min(axis=1)
    highest = grid.max(axis=1)
    single = (lowest == highest) & (lowest >= 0)
    _count(dropped, DROP_CONFLICTING, lowest == CONFLICTING_SAMPLE)
    _count(dropped, DROP_UNDEFINED, (lowest == UNDEFINED_SAMPLE) & (highest == UNDEFINED_SAMPLE))
    _count(dropped, DROP_PARTLY_UNDEFINED, (lowest == UNDEFINED_SAMPLE) & (highest >= 0))
    _count(dropped, DROP_MIXED, (lowest >= 0) & (lowest != highest))
    return WindowPlan(
        starts[single], lowest[single].astype(np.int8), window_samples, first_sample, dropped
    )
