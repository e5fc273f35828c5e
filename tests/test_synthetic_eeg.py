"""Physiological and statistical checks of the synthetic polysomnography signals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import scipy.signal

from partnd._validation import InputError
from partnd.cohort.hypnogram import SleepStage, make_hypnogram
from partnd.cohort.pc18_format import CHANNEL_NAMES, FS, physical_to_digital
from partnd.cohort.synthetic_eeg import (
    RecordingFaults,
    SubjectProfile,
    apply_recording_faults,
    draw_recording_faults,
    draw_subject_profile,
    synthesize_psg,
)

EPOCH = 30 * FS
HOURS = 2.0
N_RECORDS = 8
F3, F4, C3, C4, O1, O2, E1, CHIN, ABD = range(9)
BANDS = ((0.5, 2.0), (2.0, 4.0), (4.0, 7.0), (8.0, 12.0), (12.0, 15.0), (15.0, 30.0))


@dataclass
class Recording:
    signals: np.ndarray  # [13, n]
    epochs: np.ndarray  # [n_epochs, 13, 6000] scored epochs
    stages: np.ndarray  # [n_epochs]
    profile: SubjectProfile
    events: list
    event_counts: dict
    scoring_start: int
    envelopes: dict


def _synthesize(seed: int, hours: float = HOURS) -> Recording:
    rng = np.random.default_rng(seed)
    n_samples = int(hours * 3600 * FS)
    scoring_start = int(rng.uniform(60, 400) * FS) + 7
    n_prefix_epochs = -(-scoring_start // EPOCH)
    n_after = -(-(n_samples - scoring_start) // EPOCH)
    hypnogram = make_hypnogram(n_after, rng)
    profile = draw_subject_profile(rng)
    result = synthesize_psg(
        np.concatenate([np.zeros(n_prefix_epochs, dtype=np.int8), hypnogram]),
        grid_start=scoring_start - n_prefix_epochs * EPOCH,
        n_samples=n_samples,
        scoring_start=scoring_start,
        profile=profile,
        rng=rng,
    )
    n_full = (n_samples - scoring_start) // EPOCH
    scored = result.signals[:, scoring_start : scoring_start + n_full * EPOCH]
    epochs = scored.reshape(13, n_full, EPOCH).transpose(1, 0, 2)
    return Recording(
        result.signals,
        epochs,
        hypnogram[:n_full],
        profile,
        result.events,
        result.event_counts,
        scoring_start,
        result.envelopes,
    )


@pytest.fixture(scope="module")
def recordings() -> list[Recording]:
    return [_synthesize(seed) for seed in range(N_RECORDS)]


def _band_power(epochs: np.ndarray, low: float, high: float) -> np.ndarray:
    """Mean Welch power in [low, high) Hz, ``[n_epochs, channels]``."""
    freqs, power = scipy.signal.welch(epochs, fs=FS, nperseg=2 * FS, axis=-1)
    band = (freqs >= low) & (freqs < high)
    return power[..., band].mean(axis=-1)


def _stage_median(rec: Recording, stage: int, channel: int, low: float, high: float) -> float:
    return float(np.median(_band_power(rec.epochs[rec.stages == stage, channel], low, high)))


def test_signals_are_finite_and_in_channel_units(recordings: list[Recording]) -> None:
    rec = recordings[0]
    assert rec.signals.shape == (13, int(HOURS * 3600 * FS)) and rec.signals.dtype == np.float32
    assert np.isfinite(rec.signals).all()
    eeg_rms = rec.epochs[:, :6].std(axis=-1)
    assert 5.0 < np.median(eeg_rms) < 80.0  # µV
    sao2 = rec.signals[11]
    assert sao2.min() >= 70.0 and sao2.max() <= 100.0 and np.median(sao2) >= 93.0
    np.testing.assert_array_equal(sao2, np.round(sao2))  # oximeter reports whole percent


def test_ecg_and_breathing_rates_follow_the_profile(recordings: list[Recording]) -> None:
    for rec in recordings[:3]:
        ecg = rec.signals[12]
        peaks, _ = scipy.signal.find_peaks(ecg, height=0.5, distance=int(0.3 * FS))
        minutes = len(ecg) / FS / 60
        assert abs(len(peaks) - rec.event_counts["heart_beats"]) <= 5
        assert 45.0 <= len(peaks) / minutes <= 90.0
        assert abs(len(peaks) / minutes - rec.profile.heart_rate) < 10.0
        freqs, power = scipy.signal.welch(rec.signals[ABD], fs=FS, nperseg=120 * FS)
        breathing_hz = freqs[np.argmax(power)]
        assert abs(breathing_hz - rec.profile.breathing_rate / 60.0) < 0.05
        assert 0.15 <= breathing_hz <= 0.35


def test_alpha_is_occipital_in_wake(recordings: list[Recording]) -> None:
    for rec in recordings:
        wake = rec.epochs[rec.stages == SleepStage.WAKE]
        occipital = _band_power(wake[:, [O1, O2]], 8.0, 12.0).mean(axis=1)
        frontal = _band_power(wake[:, [F3, F4]], 8.0, 12.0).mean(axis=1)
        assert occipital.mean() > 1.5 * frontal.mean()
        assert np.median(occipital / frontal) > 1.1  # eyes-open epochs have little alpha


def test_delta_dominates_n3(recordings: list[Recording]) -> None:
    for rec in recordings:
        n3 = _stage_median(rec, SleepStage.N3, F3, 0.5, 2.0)
        assert n3 > 4.0 * _stage_median(rec, SleepStage.WAKE, F3, 0.5, 2.0)
        assert n3 > 4.0 * _stage_median(rec, SleepStage.REM, F3, 0.5, 2.0)
        assert n3 > _stage_median(rec, SleepStage.N3, O1, 0.5, 2.0)  # frontal maximum


def test_n3_has_high_amplitude_delta_over_a_fifth_of_the_epoch(recordings: list[Recording]) -> None:
    b, a = scipy.signal.butter(2, [0.5, 2.0], btype="band", fs=FS)
    for rec in recordings[:4]:
        frontal = rec.epochs[rec.stages == SleepStage.N3, F3]
        envelope = np.abs(scipy.signal.hilbert(scipy.signal.filtfilt(b, a, frontal, axis=-1)))
        coverage = (envelope > 37.5).mean(axis=-1)  # peak-to-peak above 75 µV
        assert np.median(coverage) > 0.2
        wake = rec.epochs[rec.stages == SleepStage.REM, F3]
        wake_env = np.abs(scipy.signal.hilbert(scipy.signal.filtfilt(b, a, wake, axis=-1)))
        assert np.median((wake_env > 37.5).mean(axis=-1)) < 0.05


def test_spindles_raise_sigma_in_n2(recordings: list[Recording]) -> None:
    for rec in recordings:
        n2 = _stage_median(rec, SleepStage.N2, C3, 12.0, 15.0)
        assert n2 > 1.2 * _stage_median(rec, SleepStage.N1, C3, 12.0, 15.0)
        assert n2 > 1.2 * _stage_median(rec, SleepStage.REM, C3, 12.0, 15.0)
        assert rec.event_counts["spindles"] > 60 and rec.event_counts["kcomplexes"] > 20


def test_n1_holds_no_spindles_or_k_complexes() -> None:
    # AASM: an epoch with a spindle or a K-complex (not after an arousal) is N2, not N1.
    stages = np.array([SleepStage.WAKE] + [SleepStage.N1] * 19, dtype=np.int8)
    result = synthesize_psg(
        stages,
        grid_start=0,
        n_samples=len(stages) * EPOCH,
        scoring_start=0,
        profile=draw_subject_profile(np.random.default_rng(1)),
        rng=np.random.default_rng(2),
    )
    assert result.event_counts["spindles"] == 0 and result.event_counts["kcomplexes"] == 0
    assert result.event_counts["vertex_waves"] > 10  # vertex sharp waves do mark N1


def test_rem_atonia_and_rapid_eye_movements(recordings: list[Recording]) -> None:
    for rec in recordings:
        emg = rec.epochs[:, CHIN].std(axis=-1)
        assert np.median(emg[rec.stages == SleepStage.REM]) < 0.5 * np.median(
            emg[rec.stages == SleepStage.WAKE]
        )
        assert np.median(emg[rec.stages == SleepStage.N2]) < np.median(
            emg[rec.stages == SleepStage.WAKE]
        )
        eye = scipy.signal.filtfilt(
            *scipy.signal.butter(2, [0.3, 10.0], "band", fs=FS), rec.epochs[:, E1]
        )
        eye_slope = np.abs(np.diff(eye, axis=-1)).max(axis=-1)  # saccades are steep
        rem, n2 = eye_slope[rec.stages == SleepStage.REM], eye_slope[rec.stages == SleepStage.N2]
        assert np.median(rem) > 2.0 * np.median(n2)


def test_hypopneas_reduce_breathing_and_arousals_raise_emg(recordings: list[Recording]) -> None:
    ratios, emg_ratios = [], []
    for rec in recordings:
        for event in rec.events:
            if event.label == "resp_hypopnea" and event.start > 60 * FS:
                inside = rec.signals[ABD, event.start : event.stop].std()
                before = rec.signals[ABD, event.start - 40 * FS : event.start - 10 * FS].std()
                ratios.append(inside / before)
            if event.label == "arousal_spontaneous" and event.start > 60 * FS:
                inside = rec.signals[CHIN, event.start + FS : event.stop].std()
                before = rec.signals[CHIN, event.start - 20 * FS : event.start - 5 * FS].std()
                emg_ratios.append(inside / before)
    assert len(ratios) > 5 and np.median(ratios) < 0.7
    assert len(emg_ratios) > 10 and np.median(emg_ratios) > 1.2


def test_stage_changes_cross_fade_without_jumps(recordings: list[Recording]) -> None:
    """Stage envelopes change over seconds, not in one step at epoch borders.

    Without the cross-fade the largest one-second step of the background (delta) envelope is about
    half (the full range) of its 95th percentile; with it, about a fifth (a third).
    """
    largest_steps: dict[str, list[float]] = {"background": [], "delta": []}
    for rec in recordings:
        n_seconds = -(-rec.signals.shape[1] // FS)
        for name, steps in largest_steps.items():
            envelope = rec.envelopes[name]
            assert envelope.shape == (n_seconds,) and np.all(envelope > 0)
            steps.append(float(np.abs(np.diff(envelope)).max() / np.percentile(envelope, 95)))
    assert np.median(largest_steps["background"]) < 0.3
    assert np.median(largest_steps["delta"]) < 0.5


def test_hemispheres_similar_but_not_identical(recordings: list[Recording]) -> None:
    rec = recordings[1]
    n2 = rec.epochs[rec.stages == SleepStage.N2]
    for left, right in ((F3, F4), (C3, C4), (O1, O2)):
        corr = np.corrcoef(n2[:, left].ravel(), n2[:, right].ravel())[0, 1]
        assert 0.3 < corr < 0.98


def _log_band_features(rec: Recording) -> np.ndarray:
    freqs, power = scipy.signal.welch(rec.epochs[:, :6], fs=FS, nperseg=2 * FS, axis=-1)
    columns = [
        np.log(power[..., (freqs >= low) & (freqs < high)].mean(axis=-1)) for low, high in BANDS
    ]
    return np.concatenate(columns, axis=1)  # [n_epochs, 6 bands x 6 channels]


def test_staging_is_learnable_but_not_trivial(recordings: list[Recording]) -> None:
    """A nearest-centroid classifier on log band powers of held-out records is 50–95 % right."""
    features = [_log_band_features(rec) for rec in recordings]
    accuracies = []
    for held_out in range(0, N_RECORDS, 2):
        train = [i for i in range(N_RECORDS) if i not in (held_out, held_out + 1)]
        x_train = np.concatenate([features[i] for i in train])
        y_train = np.concatenate([recordings[i].stages for i in train])
        mean, std = x_train.mean(axis=0), x_train.std(axis=0)
        centroids = np.stack(
            [((x_train - mean) / std)[y_train == stage].mean(axis=0) for stage in SleepStage]
        )
        for index in (held_out, held_out + 1):
            z = (features[index] - mean) / std
            predicted = np.argmin(((z[:, None] - centroids[None]) ** 2).sum(axis=-1), axis=1)
            accuracies.append(float(np.mean(predicted == recordings[index].stages)))
    mean_accuracy = float(np.mean(accuracies))
    print(f"nearest-centroid held-out accuracy {mean_accuracy:.3f} per record {accuracies}")
    assert 0.5 <= mean_accuracy <= 0.95
    assert min(accuracies) < 0.95


def test_seed_reproduces_and_different_seeds_differ() -> None:
    a, b, c = (_synthesize(seed, hours=0.25) for seed in (11, 11, 12))
    np.testing.assert_array_equal(a.signals, b.signals)
    assert not np.array_equal(a.signals[:, : c.signals.shape[1]], c.signals)


def test_recording_faults_are_injected_where_declared() -> None:
    rng = np.random.default_rng(5)
    n = 10 * 60 * FS
    signals = np.zeros((13, n), dtype=np.float32)
    faults = draw_recording_faults(rng, n, line_noise=True, flat_channel=True, clipped_channel=True)
    assert faults.flat_channel != faults.clipped_channel
    signals[:6] = rng.standard_normal((6, n)).astype(np.float32) * 10
    signals[CHANNEL_NAMES.index("SaO2")] = 97.0  # 0 % would sit below the SaO2 ADC range
    apply_recording_faults(signals, faults, rng)
    flat = CHANNEL_NAMES.index(faults.flat_channel)
    assert np.all(signals[flat] == 0.0)
    clipped = CHANNEL_NAMES.index(faults.clipped_channel)
    digital, n_clipped = physical_to_digital(signals)
    saturated = np.flatnonzero(np.abs(np.rint(signals[clipped])) > 32767)
    assert n_clipped[clipped] == len(saturated) > 0
    assert set(np.unique(digital[clipped, saturated])) <= {-32767, 32767}
    assert faults.clipped_start <= saturated.min() and saturated.max() < faults.clipped_stop
    assert n_clipped.sum() == n_clipped[clipped]
    live = next(i for i in range(6) if i not in (flat, clipped))
    freqs, power = scipy.signal.welch(signals[live], fs=FS, nperseg=4 * FS)
    assert freqs[np.argmax(power)] == pytest.approx(60.0, abs=0.3)
    assert faults.line_noise_uv is not None and 2.0 <= faults.line_noise_uv <= 20.0
    none = draw_recording_faults(
        rng, n, line_noise=False, flat_channel=False, clipped_channel=False
    )
    assert none == RecordingFaults()


def test_bad_input_is_rejected() -> None:
    profile = draw_subject_profile(np.random.default_rng(0))
    rng = np.random.default_rng(0)
    good = np.zeros(4, dtype=np.int8)
    with pytest.raises(InputError, match="epoch_stages"):
        synthesize_psg(
            np.array([0, 7]),
            grid_start=0,
            n_samples=EPOCH,
            scoring_start=0,
            profile=profile,
            rng=rng,
        )
    with pytest.raises(InputError, match="grid_start"):
        synthesize_psg(
            good, grid_start=5, n_samples=EPOCH, scoring_start=0, profile=profile, rng=rng
        )
    with pytest.raises(InputError, match="epoch_stages"):
        synthesize_psg(
            good, grid_start=0, n_samples=5 * EPOCH, scoring_start=0, profile=profile, rng=rng
        )
    with pytest.raises(InputError, match="signals"):
        apply_recording_faults(np.zeros((3, 10), dtype=np.float32), RecordingFaults(), rng)
