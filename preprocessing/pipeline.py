"""The shared record pipeline: continuous µV signals + per-sample stages -> stored 30 s windows.

Both the PC18 command and generic MNE ingestion call :func:`preprocess_continuous` and
:func:`store_windowed_record`, so every store is produced by the same checks, filter, resampler and
window grid:

1. reject non-finite signals (``"nan"``);
2. lay out windows aligned to the first scored sample (``plan_windows``);
3. drop windows in which some channel is flat (raw standard deviation below ``flat_std_uv``) and
   reject the record (``"flat_channel"``) when a channel is flat in more than ``max_flat_fraction``
   of its windows;
4. band-pass the whole night and resample it so that the first window starts on an output sample;
5. cut the kept windows.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.store import STAGE_NAMES, SleepStore, create_store, write_record

from .errors import FLAT_CHANNEL, NO_WINDOWS, NON_FINITE, OUT_OF_RANGE, RecordError
from .signal_processing import (
    BandpassFilter,
    bandpass_resample,
    resampling_factors,
    resampling_method,
)
from .windowing import DROP_FLAT, plan_windows

__all__ = [
    "PreprocessingConfig",
    "WindowedRecord",
    "library_versions",
    "open_or_create_store",
    "preprocess_continuous",
    "store_windowed_record",
    "without_overwrite_remedy",
]

_VERSIONED_LIBRARIES = ("partnd", "numpy", "scipy", "mne", "wfdb", "h5py", "xarray", "zarr")


@dataclass(frozen=True)
class PreprocessingConfig:
    """Everything that determines the stored windows of a recording.

    Attributes:
        sfreq: Stored sampling frequency in Hz.
        window_seconds: Window length in seconds.
        bandpass: Band-pass applied to the whole recording at its source rate.
        flat_std_uv: A channel is flat in a window when its raw standard deviation is below this
            (µV).
        max_flat_fraction: A record fails when one channel is flat in more than this fraction of
            its otherwise kept windows.
    """

    sfreq: float = 100.0
    window_seconds: float = 30.0
    bandpass: BandpassFilter = field(default_factory=BandpassFilter)
    flat_std_uv: float = 1e-6
    max_flat_fraction: float = 0.5

    def __post_init__(self) -> None:
        check(self.sfreq > 0, "sfreq", "a positive sampling frequency in Hz", self.sfreq)
        check(self.window_seconds > 0, "window_seconds", "a positive duration", self.window_seconds)
        n_times = self.sfreq * self.window_seconds
        check(
            abs(n_times - round(n_times)) < 1e-9,
            "window_seconds",
            f"a whole number of samples at sfreq={self.sfreq}",
            self.window_seconds,
        )
        check(
            self.flat_std_uv >= 0, "flat_std_uv", "a non-negative threshold in µV", self.flat_std_uv
        )
        check(
            0 <= self.max_flat_fraction <= 1,
            "max_flat_fraction",
            "a fraction in [0, 1]",
            self.max_flat_fraction,
        )

    @property
    def n_times(self) -> int:
        """Samples per stored window."""
        return round(self.sfreq * self.window_seconds)

    def window_samples(self, source_sfreq: float) -> int:
        """Samples per window at ``source_sfreq`` (must be a whole number)."""
        samples = source_sfreq * self.window_seconds
        check(
            abs(samples - round(samples)) < 1e-9,
            "sfreq",
            f"a sampling frequency giving whole {self.window_seconds} s windows",
            source_sfreq,
        )
        return round(samples)

    def store_metadata(self, source: dict[str, Any], source_sfreq: float | None) -> dict[str, Any]:
        """Store attributes describing this configuration (``filter``, ``resample``, ...).

        Args:
            source: Description of the source data (``dataset``, ``root``, ...).
            source_sfreq: Common source sampling frequency, or None when records differ (each
                record then carries its own ``source_sfreq`` and ``filter_numtaps``).
        """
        rate_change: dict[str, Any] = {"from_sfreq": source_sfreq, "to_sfreq": self.sfreq}
        if source_sfreq is None:
            rate_change["method"] = "per record (record attribute resample_method)"
        else:
            rate_change["method"] = resampling_method(self.bandpass, source_sfreq, self.sfreq)
            rate_change["up_down"] = list(resampling_factors(source_sfreq, self.sfreq))
        rate_change["rule"] = (
            "after the band-pass; integer factors with the band-pass stop band below the new "
            "Nyquist frequency keep every down-th sample (the band-pass is the anti-alias filter), "
            "other ratios use scipy.signal.resample_poly with a Kaiser window (beta 5)"
        )
        return {
            "filter": self.bandpass.metadata(source_sfreq),
            "resample": rate_change,
            "windowing": {
                "alignment": "first scored sample (first sample when unlabelled)",
                "keep": "windows whose samples all carry one single defined stage",
                "flat_std_uv": self.flat_std_uv,
                "max_flat_fraction": self.max_flat_fraction,
            },
            "source": source,
            "library_versions": library_versions(),
        }


@dataclass
class WindowedRecord:
    """Windows of one recording, ready to be stored.

    Attributes:
        signal: ``[W, C, T]`` float32 windows in µV.
        stage: ``[W]`` int8 stage codes (``-1`` unlabelled).
        start_time: ``[W]`` float64 window starts in seconds from the recording start.
        dropped: Dropped windows per reason.
        first_window_sample: Source sample the window grid is aligned to.
        n_samples: Source length in samples.
        source_sfreq: Source sampling frequency in Hz.
    """

    signal: np.ndarray
    stage: np.ndarray
    start_time: np.ndarray
    dropped: dict[str, int]
    first_window_sample: int
    n_samples: int
    source_sfreq: float


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape the stored values."""
    versions = {}
    for name in _VERSIONED_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _flat_windows(
    data: np.ndarray, starts: np.ndarray, window_samples: int, threshold: float
) -> np.ndarray:
    """``[C, W]`` bool: channel ``c`` has raw std below ``threshold`` in window ``w``.

    A window's standard deviation is at least its range (max - min) divided by
    ``2 * sqrt(window_samples)``, so only windows with a smaller range can be flat; their float64
    standard deviation decides. The ranges come from one pass of ``np.maximum.reduceat`` /
    ``np.minimum.reduceat`` over each channel (the windows are sorted and do not overlap).
    """
    flat = np.zeros((data.shape[0], len(starts)), dtype=bool)
    bounds = np.stack([starts, starts + window_samples], axis=1).ravel()
    bounds = bounds[bounds < data.shape[1]]
    largest_flat_range = 2.0 * np.sqrt(window_samples) * threshold
    for index, channel in enumerate(data):
        high = np.maximum.reduceat(channel, bounds)[::2]
        low = np.minimum.reduceat(channel, bounds)[::2]
        spread = high.astype(np.float64) - low
        for window in np.flatnonzero(spread < largest_flat_range):
            samples = channel[starts[window] : starts[window] + window_samples]
            flat[index, window] = samples.std(dtype=np.float64) < threshold
    return flat


def preprocess_continuous(
    data: np.ndarray,
    sfreq: float,
    sample_stages: np.ndarray | None,
    config: PreprocessingConfig,
    *,
    channels: list[str] | None = None,
) -> WindowedRecord:
    """Turn one continuous recording into kept, filtered, resampled windows.

    Args:
        data: ``[C, N]`` signals in µV at ``sfreq`` (float32 or float64); not modified.
        sfreq: Source sampling frequency in Hz.
        sample_stages: ``[N]`` int8 per-sample stage codes (see
            :mod:`partnd.preprocessing.windowing`), or None for an unlabelled recording.
        config: Preprocessing configuration.
        channels: Channel names, only used in error messages.

    Returns:
        The windows, their stages and start times, and the drop counts.

    Raises:
        RecordError: ``"nan"``, ``"all_undefined"``, ``"too_short"``, ``"flat_channel"`` or
            ``"no_windows"``.
    """
    check(data.ndim == 2 and data.shape[1] > 0, "data", "an array [C, N] with N > 0", data)
    names = channels if channels is not None else [str(index) for index in range(data.shape[0])]
    n_non_finite = [int(data.shape[1] - np.count_nonzero(np.isfinite(channel))) for channel in data]
    if any(n_non_finite):
        bad = {name: count for name, count in zip(names, n_non_finite, strict=True) if count}
        raise RecordError(NON_FINITE, f"non-finite samples per channel: {bad}")
    window_samples = config.window_samples(sfreq)
    plan = plan_windows(data.shape[1], window_samples, sample_stages)
    flat = _flat_windows(data, plan.starts, window_samples, config.flat_std_uv)
    flat_fraction = flat.mean(axis=1)
    if (flat_fraction > config.max_flat_fraction).any():
        bad_channels = {
            names[index]: round(float(fraction), 3)
            for index, fraction in enumerate(flat_fraction)
            if fraction > config.max_flat_fraction
        }
        raise RecordError(
            FLAT_CHANNEL,
            f"fraction of flat windows (std < {config.flat_std_uv} µV) per channel: {bad_channels}",
        )
    plan.drop(np.asarray(~flat.any(axis=0)), DROP_FLAT)
    if len(plan.starts) == 0:
        raise RecordError(NO_WINDOWS, f"every window was dropped: {plan.dropped}")
    up, down = resampling_factors(sfreq, config.sfreq)
    offset = plan.first_sample % down
    output_starts = (plan.starts - offset) * up // down
    window_indices = output_starts[:, None] + np.arange(config.n_times)[None, :]
    signal = np.empty((len(output_starts), data.shape[0], config.n_times), dtype=np.float32)
    for index in range(data.shape[0]):
        resampled = bandpass_resample(
            data[index : index + 1], sfreq, config.bandpass, config.sfreq, offset=offset
        )
        signal[:, index, :] = resampled[0, window_indices]
    return WindowedRecord(
        signal=signal,
        stage=plan.stages.astype(np.int8),
        start_time=plan.starts / float(sfreq),
        dropped=dict(sorted(plan.dropped.items())),
        first_window_sample=plan.first_sample,
        n_samples=int(data.shape[1]),
        source_sfreq=float(sfreq),
    )


def without_overwrite_remedy(message: str, remedy: str) -> str:
    """``message`` with its suggestion to pass ``overwrite=True`` replaced by ``remedy``, for a
    caller that cannot replace the store (e.g. ``" (another store is needed)"``)."""
    for suggestion in (" (or overwrite=True)", " (pass overwrite=True to replace it)"):
        message = message.replace(suggestion, remedy)
    return message


def open_or_create_store(
    path: str | Path,
    config: PreprocessingConfig,
    channels: list[str],
    metadata: dict[str, Any],
    *,
    overwrite: bool = False,
    argument: str = "path",
    replaceable: bool = True,
) -> SleepStore:
    """Create the store for ``config`` or reopen a compatible existing one (to resume).

    Args:
        path: Store directory.
        config: Preprocessing configuration (rate and window length of the store).
        channels: Stored channel names.
        metadata: Further store attributes.
        overwrite: Delete an existing store first.
        argument: Name of ``path`` in the caller's signature, used in error messages (e.g.
            ``"store_path"``, ``"out"``).
        replaceable: Whether the caller can replace an existing store (``overwrite``); when not
            (``partnd ingest`` adds records to a store), a refusal does not suggest it.

    Raises:
        InputError: An existing store with another configuration, or a directory that is not a
            partnd-sleep store (message starting with ``argument``).
        FileExistsError: ``path`` exists and is not a zarr store.
    """
    try:
        return create_store(
            path,
            sfreq=config.sfreq,
            channels=channels,
            window_seconds=config.window_seconds,
            stage_names=STAGE_NAMES,
            metadata=metadata,
            overwrite=overwrite,
        )
    except (InputError, FileExistsError) as error:
        message = str(error)
        if not replaceable:
            message = without_overwrite_remedy(message, " (another store is needed)")
        if message.startswith("path:"):
            message = f"{argument}:{message[len('path:') :]}"
        if message == str(error):
            raise
        raise type(error)(message) from None


def store_windowed_record(
    store_path: str | Path,
    record_id: str,
    record: WindowedRecord,
    config: PreprocessingConfig,
    attrs: dict[str, Any],
    *,
    dtype: str = "float32",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a :class:`WindowedRecord` atomically and return its record attributes.

    Args:
        store_path: Target store.
        record_id: Record identifier.
        record: The windows.
        config: Configuration that produced them (its filter length is recorded).
        attrs: Further record attributes; must include ``subject_id`` and ``split``.
        dtype: On-disk dtype (``"float32"`` or ``"float16"``).
        overwrite: Replace an existing record.

    Returns:
        The attributes written (without those :func:`write_record` adds itself).

    Raises:
        RecordError: ``"out_of_range"`` when a filtered value does not fit ``dtype`` (float16
            holds magnitudes up to 65504 µV).
    """
    largest = float(np.abs(record.signal).max())
    if largest > float(np.finfo(dtype).max):
        raise RecordError(
            OUT_OF_RANGE,
            f"largest filtered magnitude {largest:g} µV exceeds the {dtype} range "
            f"(±{float(np.finfo(dtype).max):g}); store with dtype float32",
        )
    record_attrs = {
        **attrs,
        "dropped": record.dropped,
        "duration_s": record.n_samples / record.source_sfreq,
        "source_sfreq": record.source_sfreq,
        "first_window_sample": record.first_window_sample,
        "filter_numtaps": config.bandpass.numtaps(record.source_sfreq),
        "resample_method": resampling_method(config.bandpass, record.source_sfreq, config.sfreq),
    }
    write_record(
        store_path,
        record_id,
        record.signal,
        record.stage,
        record.start_time,
        attrs=record_attrs,
        dtype=dtype,
        overwrite=overwrite,
    )
    return record_attrs
