"""Tests of the band-pass design and its application, resampling, and the window plan."""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest
import scipy.signal

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.preprocessing.errors import ALL_UNDEFINED, TOO_SHORT, RecordError
from partnd.preprocessing.pc18_reader import PC18Record, read_eeg, read_sample_stages
from partnd.preprocessing.pipeline import PreprocessingConfig, WindowedRecord, preprocess_continuous
from partnd.preprocessing.signal_processing import (
    BandpassFilter,
    bandpass_resample,
    resampling_factors,
    resampling_method,
)
from partnd.preprocessing.windowing import plan_windows

SFREQ = 200.0
# Stored windows equal the reference (MNE's filter_data at the source rate, then decimation or
# resample_poly) within float32 rounding: measured 1.5e-7 to 2.9e-7 of the largest magnitude.
AGREEMENT = 1e-6


def _amplitude(signal: np.ndarray, frequency: float, sfreq: float) -> float:
    """Least-squares amplitude of a sinusoid of ``frequency`` in ``signal``."""
    time = np.arange(len(signal)) / sfreq
    basis = np.stack([np.sin(2 * np.pi * frequency * time), np.cos(2 * np.pi * frequency * time)])
    coefficients, *_ = np.linalg.lstsq(basis.T, signal, rcond=None)
    return float(np.hypot(*coefficients))


def _filtered_amplitudes(frequencies, seconds, to_sfreq=100.0):
    """Amplitude ratio of unit sinusoids after the real filter + resampler (edges excluded)."""
    time = np.arange(round(seconds * SFREQ)) / SFREQ
    data = np.stack([np.sin(2 * np.pi * frequency * time + 0.3) for frequency in frequencies])
    output = bandpass_resample(data, SFREQ, BandpassFilter(), to_sfreq)
    margin = round(40 * to_sfreq)
    return [
        _amplitude(channel[margin:-margin].astype(np.float64), frequency, to_sfreq)
        for channel, frequency in zip(output, frequencies, strict=True)
    ]


def test_design_matches_mne_defaults_for_raw_filter_0p1_30():
    design = BandpassFilter()
    taps = design.coefficients(SFREQ)
    assert design.numtaps(SFREQ) == 6601 == len(taps)
    np.testing.assert_allclose(taps, taps[::-1], atol=1e-15)
    assert design.numtaps(100.0) == 3301
    metadata = design.metadata(SFREQ)
    assert metadata["numtaps"] == 6601 and metadata["phase"] == "zero"
    assert metadata["minus_6db_freqs"] == [0.05, 33.75]
    assert metadata["stop_band_edges"] == [0.0, 37.5]


def test_design_frequency_response():
    design = BandpassFilter()
    freqs = np.array([0.0, 0.05, 0.1, 1.0, 10.0, 30.0, 33.75, 37.5, 45.0, 60.0, 90.0])
    gain = dict(zip(freqs.tolist(), design.frequency_response_db(freqs, SFREQ), strict=True))
    assert gain[0.0] < -50
    assert gain[0.05] == pytest.approx(-6.02, abs=0.1)
    for passband in (0.1, 1.0, 10.0, 30.0):
        assert abs(gain[passband]) < 0.05
    assert gain[33.75] == pytest.approx(-6.02, abs=0.1)
    for stopband in (37.5, 45.0, 60.0, 90.0):
        assert gain[stopband] < -50


def test_applied_filter_is_the_design():
    design = BandpassFilter()
    impulse = np.zeros(20001)
    impulse[10000] = 1.0
    response = design.apply(impulse, SFREQ)
    assert response.dtype == np.float32 and response.shape == impulse.shape
    taps = design.coefficients(SFREQ)
    half = len(taps) // 2
    np.testing.assert_allclose(response[10000 - half : 10000 + half + 1], taps, atol=1e-6)
    assert np.abs(response[: 10000 - half]).max() < 1e-6


def test_applied_filter_equals_mne_filter_data_including_edges():
    rng = np.random.default_rng(0)
    for n_samples in (40_000, 3_000):
        signal = np.cumsum(rng.standard_normal(n_samples)) + 20.0 * rng.standard_normal(n_samples)
        expected = mne.filter.filter_data(
            signal[None], SFREQ, 0.1, 30.0, pad="reflect_limited", verbose="error"
        )[0]
        ours = BandpassFilter().apply(signal, SFREQ)
        scale = np.abs(expected).max()
        np.testing.assert_allclose(ours, expected, atol=2e-5 * scale)


def test_filter_applied_to_sinusoids_matches_design():
    frequencies = [0.05, 0.1, 5.0, 10.0, 30.0, 33.75, 40.0, 60.0, 80.0]
    ratio = dict(zip(frequencies, _filtered_amplitudes(frequencies, 600.0), strict=True))
    assert ratio[0.05] == pytest.approx(0.5, abs=0.02)
    for passband in (0.1, 5.0, 10.0, 30.0):
        assert ratio[passband] == pytest.approx(1.0, abs=0.01)
    assert ratio[33.75] == pytest.approx(0.5, abs=0.02)
    assert ratio[40.0] < 3e-3
    assert ratio[60.0] < 3e-3
    assert ratio[80.0] < 3e-3


def test_stop_band_above_new_nyquist_does_not_alias():
    """60 Hz would alias to 40 Hz at 100 Hz: no 40 Hz component may appear after resampling."""
    time = np.arange(round(300 * SFREQ)) / SFREQ
    output = bandpass_resample(
        np.sin(2 * np.pi * 60.0 * time)[None], SFREQ, BandpassFilter(), 100.0
    )
    assert _amplitude(output[0, 4000:-4000].astype(np.float64), 40.0, 100.0) < 3e-3


def test_resampling_keeps_a_5hz_sinusoid_and_its_timing():
    time = np.arange(round(120 * SFREQ)) / SFREQ
    data = (50.0 * np.sin(2 * np.pi * 5.0 * time))[None]
    for offset in (0, 1):
        output = bandpass_resample(data, SFREQ, BandpassFilter(), 100.0, offset=offset)
        assert output.dtype == np.float32
        assert output.shape == (1, -(-(len(time) - offset) // 2))
        output_time = (offset + 2 * np.arange(output.shape[1])) / SFREQ
        expected = 50.0 * np.sin(2 * np.pi * 5.0 * output_time)
        np.testing.assert_allclose(output[0, 4000:-4000], expected[4000:-4000], atol=0.05)


def _reference_windows(data: np.ndarray, sfreq: float, record: WindowedRecord) -> np.ndarray:
    """The record's windows computed the documented way with MNE: ``mne.filter.filter_data`` (the
    same design, float64) over the whole night at ``sfreq``, then every ``down``-th sample from
    the grid offset (or ``scipy.signal.resample_poly``), then the same window starts."""
    config = PreprocessingConfig()
    design = config.bandpass
    up, down = resampling_factors(sfreq, config.sfreq)
    offset = record.first_window_sample % down
    filtered = mne.filter.filter_data(
        data.astype(np.float64),
        sfreq,
        design.l_freq,
        design.h_freq,
        filter_length=design.numtaps(sfreq),
        l_trans_bandwidth=design.l_trans_bandwidth,
        h_trans_bandwidth=design.h_trans_bandwidth,
        method="fir",
        phase="zero",
        fir_window=design.fir_window,
        fir_design="firwin",
        pad="reflect_limited",
        verbose="error",
    )[:, offset:]
    if up == 1:
        resampled = filtered[:, ::down]
    else:
        resampled = scipy.signal.resample_poly(filtered, up, down, axis=1, window=("kaiser", 5.0))
    starts = np.rint((record.start_time * sfreq - offset) * up / down).astype(int)
    return np.stack([resampled[:, start : start + config.n_times] for start in starts])


def _assert_agrees(record: WindowedRecord, reference: np.ndarray) -> None:
    assert record.signal.dtype == np.float32 and record.signal.shape == reference.shape
    scale = float(np.abs(reference).max())
    np.testing.assert_allclose(record.signal, reference, rtol=0, atol=AGREEMENT * scale)


def test_windows_agree_with_mne_filter_then_decimate_on_generated_pc18_records(tmp_path):
    cohort = make_pc18_cohort(
        tmp_path / "cohort", n_records=2, hours=0.5, seed=3, test_fraction=0.5, progress=False
    )
    (training,), (test,) = cohort.training_records, cohort.test_records
    first_samples = []
    for record in (
        PC18Record(training.name, "training", training),
        PC18Record(test.name, "test", test),
    ):
        eeg = read_eeg(record)
        stages = (
            read_sample_stages(record.arousal_path, eeg.data.shape[1]) if record.labelled else None
        )
        windowed = preprocess_continuous(eeg.data, eeg.sfreq, stages, PreprocessingConfig())
        _assert_agrees(windowed, _reference_windows(eeg.data, eeg.sfreq, windowed))
        first_samples.append(windowed.first_window_sample)
    # both grid offsets (odd first scored sample, test record from sample 0 at the edge)
    assert sorted(sample % 2 for sample in first_samples) == [0, 1] and 0 in first_samples


def test_windows_agree_with_mne_filter_then_resample_poly_on_a_real_edf():
    path = Path(__import__("pyedflib").__file__).parent / "tests" / "data" / "test_subsecond.edf"
    if not path.is_file():
        pytest.skip("this pyedflib wheel ships no test_subsecond.edf")
    raw = mne.io.read_raw_edf(path, preload=True, verbose="error")  # real Fp1 EEG at 128 Hz
    data = (raw.get_data() * 1e6).astype(np.float32)
    windowed = preprocess_continuous(data, raw.info["sfreq"], None, PreprocessingConfig())
    assert len(windowed.stage) == 23
    _assert_agrees(windowed, _reference_windows(data, raw.info["sfreq"], windowed))


def test_resampling_factors():
    assert resampling_factors(200.0, 100.0) == (1, 2)
    assert resampling_factors(256.0, 100.0) == (25, 64)
    assert resampling_factors(100.0, 100.0) == (1, 1)
    with pytest.raises(InputError, match="from_sfreq"):
        resampling_factors(-1.0, 100.0)
    with pytest.raises(InputError, match="from_sfreq"):
        resampling_factors(100.0 * np.pi, 100.0)


def test_resampling_method_and_rational_resampling_keeps_amplitude_and_timing():
    design = BandpassFilter()
    assert resampling_method(design, 200.0, 100.0) == "decimation"
    assert resampling_method(design, 100.0, 100.0) == "none"
    assert resampling_method(design, 256.0, 100.0) == "resample_poly"
    assert resampling_method(design, 150.0, 75.0) == "decimation"
    assert resampling_method(design, 140.0, 70.0) == "resample_poly"
    sfreq = 256.0
    time = np.arange(round(120 * sfreq)) / sfreq
    data = (50.0 * np.sin(2 * np.pi * 5.0 * time))[None]
    offset = 37
    output = bandpass_resample(data, sfreq, design, 100.0, offset=offset)
    assert output.shape == (1, -(-(len(time) - offset) * 25 // 64))
    output_time = (offset + np.arange(output.shape[1]) * 64 / 25) / sfreq
    expected = 50.0 * np.sin(2 * np.pi * 5.0 * output_time)
    # resample_poly's Kaiser (beta 5) pass band ripples by about 0.15 %
    np.testing.assert_allclose(output[0, 4000:-4000], expected[4000:-4000], atol=0.1)


def test_bandpass_rejects_a_too_low_sampling_rate():
    with pytest.raises(InputError, match="sfreq"):
        BandpassFilter().numtaps(64.0)
    with pytest.raises(InputError, match="h_freq"):
        BandpassFilter(l_freq=10.0, h_freq=5.0)


def _codes(*runs):
    return np.concatenate([np.full(length, code, dtype=np.int8) for code, length in runs])


def test_plan_windows_aligns_to_first_scored_sample_and_counts_drops():
    codes = _codes(
        (-1, 3),  # unscored prefix: grid starts at sample 3
        (0, 4),  # window 0: W -> kept
        (2, 4),  # window 1: N2 -> kept
        (2, 2),
        (3, 2),  # window 2: N2 + N3 -> mixed
        (-1, 4),  # window 3: undefined
        (4, 1),
        (-1, 3),  # window 4: partly undefined
        (1, 2),
        (-2, 1),
        (1, 1),  # window 5: conflicting
        (4, 4),  # window 6: REM -> kept
        (4, 3),  # tail of 3 < 4 -> incomplete
    )
    plan = plan_windows(len(codes), 4, codes)
    assert plan.first_sample == 3
    np.testing.assert_array_equal(plan.starts, [3, 7, 27])
    np.testing.assert_array_equal(plan.stages, [0, 2, 4])
    assert plan.dropped == {
        "mixed": 1,
        "undefined": 1,
        "partly_undefined": 1,
        "conflicting": 1,
        "incomplete": 1,
    }
    plan.drop(np.array([True, False, True]), "flat")
    np.testing.assert_array_equal(plan.starts, [3, 27])
    assert plan.dropped["flat"] == 1


def test_plan_windows_unlabelled_starts_at_zero():
    plan = plan_windows(10, 4)
    np.testing.assert_array_equal(plan.starts, [0, 4])
    np.testing.assert_array_equal(plan.stages, [-1, -1])
    assert plan.dropped == {"incomplete": 1}
    assert plan_windows(8, 4).dropped == {}


def test_plan_windows_errors():
    with pytest.raises(RecordError) as error:
        plan_windows(8, 4, np.full(8, -1, dtype=np.int8))
    assert error.value.reason == ALL_UNDEFINED
    with pytest.raises(RecordError) as error:
        plan_windows(8, 4, _codes((-1, 6), (1, 2)))
    assert error.value.reason == TOO_SHORT
    with pytest.raises(InputError, match="sample_stages"):
        plan_windows(8, 4, np.zeros(7, dtype=np.int8))
