"""Stage-dependent synthesis of the 13 PC18 polysomnography signals.

The six EEG derivations (and the EOG and chin EMG, which share sources with them) are a linear
mixture ``A @ Z`` of a few latent sources ``Z`` plus independent amplifier noise per channel:

- continuous sources, drawn in the frequency domain in one batched inverse FFT: an aperiodic
  background with a knee (three spatial patterns; :func:`_aperiodic`), alpha around the subject's
  alpha frequency, beta, theta, delta, chin EMG, slow eye movements and a brown-noise movement
  source;
- event sources, rendered sample-exactly from per-event parameters: sleep spindles (slow frontal and
  fast central, waxing–waning 0.5–2 s), K-complexes (biphasic, frontal maximum), vertex waves
  (central), REM sawtooth bursts, rapid eye movements, blinks and ECG beats.

Each continuous source is modulated by an amplitude envelope whose mean depends on the epoch's stage
(see ``_STAGE_TEMPLATES``), jittered per epoch and per second, occasionally blended with a
confusable neighbouring stage (so W, N1 and REM overlap as they do in real recordings) and
cross-faded over about five seconds, so nothing jumps at epoch borders. Event rates follow the same
per-second stage sequence. The mixing matrix ``A`` holds per-subject topographies (alpha occipital,
delta and K-complexes frontal, spindles fronto-central, ...), jittered per channel so left and right
are similar but not identical. Arousals (alpha/beta/EMG bursts), hypopneas (reduced breathing,
delayed SaO2 dips, often ending in an arousal) and movement bursts (mostly in wake and around
stage transitions) are drawn and returned as ground truth.

Where the stage templates come from (generator version 4; measured with
:mod:`partnd.cohort.realism`, which prints the per-stage spectra of C4-M1 beside these ranges):

- the AASM scoring manual (Berry et al., v2.6, 2020): W is posterior alpha on eye closure, N1 alpha
  replaced by low-amplitude mixed 4–7 Hz activity for more than half the epoch (with vertex waves
  and slow eye movements), N2 spindles and K-complexes, N3 20 % or more of 0.5–2 Hz waves above
  75 µV, REM low-amplitude mixed frequency with sawtooth waves, rapid eye movements and atonia; an
  arousal that interrupts N2 is followed by N1 (here: an arousal precedes every shift to N1);
- real recordings that install offline: PhysioNet EEGMMIDB S001R02 (eyes-closed wake: central
  alpha 0.23 and beta 0.09 of the 0.4–30 Hz power, slow delta 0.18) and openspindlenet's sleep EEG
  sample (N2-like: sigma 0.06, slow delta 0.12, 15 µV). Version 3 had three to four times too
  little sigma, alpha and beta and twice too much 0.4–1 Hz power outside N3 (its 1/f background had
  no knee), and too much theta in N1 and REM (0.33 and 0.36 of the power);
- REM alpha 1–2 Hz slower than wake alpha (Cantero & Atienza 2000, Clin Neurophysiol 111:1681);
  EMG contaminating scalp EEG above 15 Hz (Goncharova et al. 2003, Clin Neurophysiol 114:1580);
  the aperiodic knee (Donoghue et al. 2020, Nat Neurosci 23:1655); slow-wave decay across the night
  (Borbély 1982; Daan, Beersma & Borbély 1984); the age effects of :func:`draw_subject_profile`.

Version 5 changed two things, each where generated N1 and wake departed from what a scorer reads:

- N1 holds no sleep spindles and no K-complexes (version 4 drew them at a tenth and a seventh of
  the N2 rate): by the AASM rules an epoch with a spindle, or a K-complex not tied to an arousal, in
  its first half is N2, so scored N1 has neither. Vertex sharp waves stay (3 per minute).
- Eyes-closed wake carries as much beta as eyes-open wake (template 1.0, was 0.7): version 4's wake
  had a relative beta of 0.04–0.06 on C4-M1, below the real eyes-closed 0.09 (EEGMMIDB S001R02)
  and below its own REM, while beta (16–40 Hz) falls across sleep onset (Marzano et al. 2013,
  Sleep Med 14:1112: a generalised reduction of the highest frequencies from wake to sleep).

Version 6 mixes the sources into electrode potentials (:mod:`partnd.cohort.electrodes`) and takes
every derivation as a difference of two of them, so Sleep-EDF's Fpz-Cz / Pz-Oz, SHHS's C4-A1 /
C3-A2 or a headband's AF7-Fpz follow from the same sources as PC18's six; the PC18 derivations keep
version 5's mixtures and random stream (their sites are anchored to their mastoid).

Everything is vectorised over samples: a two-hour record takes about half a second to a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.fft
import scipy.signal

from partnd._validation import check
from partnd.cohort.electrodes import (
    ANCHORED_REFERENCES,
    COMPONENTS,
    ELECTRODES,
    FREE_TOPOGRAPHIES,
    LOCAL_COMPONENTS,
    MASTOID_TOPOGRAPHY,
    PC18_DERIVATIONS,
    SITE_LAYOUT,
    ScalpField,
    derivation_electrodes,
)
from partnd.cohort.hypnogram import EPOCH_SECONDS, SleepStage
from partnd.cohort.pc18_format import (
    CHANNEL_NAMES,
    EEG_CHANNEL_NAMES,
    FS,
    N_CHANNELS,
    AnnotatedEvent,
)

__all__ = [
    "RecordingFaults",
    "SubjectProfile",
    "SynthesisResult",
    "apply_recording_faults",
    "draw_recording_faults",
    "draw_subject_profile",
    "synthesize_psg",
]

# Internal states: the five sleep stages plus eyes-open wake (index 5). The stage contrasts follow
# the AASM definitions and the real recordings cited in the module docstring.
_EYES_OPEN = 5
_EPOCH_SAMPLES = EPOCH_SECONDS * FS

# Envelope means per state (columns W eyes-closed, N1, N2, N3, REM, W eyes-open), relative to the
# subject's amplitude of that component.
_STAGE_TEMPLATES: dict[str, tuple[float, ...]] = {
    #            W     N1    N2    N3    REM   Wopen
    "background": (1.0, 0.95, 1.25, 1.35, 0.85, 1.0),
    "alpha": (1.0, 0.2, 0.07, 0.05, 0.2, 0.2),
    "beta": (1.0, 0.55, 0.35, 0.25, 0.7, 1.0),
    "theta": (0.35, 0.8, 0.6, 0.5, 0.6, 0.3),
    "delta": (0.12, 0.12, 0.22, 1.0, 0.14, 0.12),
    "emg": (0.75, 0.55, 0.4, 0.35, 0.1, 1.0),
    "sem": (0.35, 1.0, 0.15, 0.0, 0.05, 0.1),
}
# Event rates per minute in each state (same column order); spindles and K-complexes are scaled by
# the subject's own N2 density, so their rows are relative.
_EVENT_RATES: dict[str, tuple[float, ...]] = {
    "spindle": (0.0, 0.0, 1.0, 0.45, 0.02, 0.0),
    "kcomplex": (0.0, 0.0, 1.0, 0.4, 0.03, 0.0),
    "vertex": (0.0, 3.0, 0.6, 0.0, 0.2, 0.0),
    "sawtooth": (0.0, 0.15, 0.0, 0.0, 1.6, 0.0),
    "rapid_eye": (0.2, 0.3, 0.0, 0.0, 9.0, 1.5),
    "blink": (2.0, 0.5, 0.0, 0.0, 0.0, 14.0),
    "twitch": (0.0, 0.0, 0.0, 0.0, 6.0, 0.0),
    "movement": (0.12, 0.05, 0.005, 0.002, 0.01, 0.3),
}
# Confusable neighbours for blended epochs (state -> candidates).
_CONFUSABLE = {0: (1, 5), 1: (0, 4, 2), 2: (1, 3), 3: (2,), 4: (1, 5), 5: (0, 4)}

# Row order of the mixed channels: the six EEG, E1-M2, Chin1-Chin2 (the chin EMG is recorded
# between two submental electrodes, not from the scalp: its row is mixed directly).
_MIXED_CHANNELS = 8
_CHIN_ROW = 7
# Columns of the mixing matrix per component (background 3 patterns; alpha, theta, delta 2 lateral
# sources), in the order of ``COMPONENTS``; and the continuous source rows of ``_source_shapes``
# that free electrodes draw their own activity from.
_COMPONENT_COLUMNS = dict(zip(COMPONENTS, (3, 2, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1), strict=True))
_LOCAL_SHAPE_ROWS = {"background": 0, "alpha": 3, "beta": 5, "theta": 6, "delta": 8}
_SHARED_FRACTION = 0.8
"""Amplitude share of a free electrode's continuous rhythms that is common to the whole scalp;
the rest (``sqrt(1 - 0.8^2) = 0.6``) is its own (coherence about 0.6 to the PC18 sites)."""
# Mixing weights per component (ECG in µV per mV, the rest relative to the component amplitude).
_TOPOGRAPHIES: dict[str, tuple[float, ...]] = {
    #                F3    F4    C3    C4    O1    O2    E1    Chin
    "background": (1.0, 1.0, 1.0, 1.0, 0.9, 0.9, 0.55, 0.05),
    "alpha": (0.3, 0.3, 0.55, 0.55, 1.0, 1.0, 0.1, 0.0),
    "beta": (1.0, 1.0, 0.8, 0.8, 0.6, 0.6, 0.3, 0.0),
    "theta": (0.9, 0.9, 1.0, 1.0, 0.7, 0.7, 0.4, 0.0),
    "delta": (1.0, 1.0, 0.8, 0.8, 0.55, 0.55, 0.7, 0.0),
    "spindle_slow": (1.0, 1.0, 0.7, 0.7, 0.3, 0.3, 0.3, 0.0),
    "spindle_fast": (0.6, 0.6, 1.0, 1.0, 0.6, 0.6, 0.15, 0.0),
    "kcomplex": (1.0, 1.0, 0.85, 0.85, 0.45, 0.45, 0.6, 0.0),
    "vertex": (0.7, 0.7, 1.0, 1.0, 0.45, 0.45, 0.3, 0.0),
    "sawtooth": (0.8, 0.8, 1.0, 1.0, 0.55, 0.55, 0.3, 0.0),
    "emg": (0.15, 0.15, 0.08, 0.08, 0.1, 0.1, 0.15, 1.0),
    "eye": (0.15, 0.15, 0.04, 0.04, 0.01, 0.01, 1.0, 0.02),
    "ecg": (3.0, -3.0, 2.5, -2.5, 3.0, -3.0, 3.0, 6.0),
    "movement": (1.0, 1.0, 0.8, 0.8, 0.9, 0.9, 1.2, 1.5),
}
_LATERAL_MIX = np.array([[0.9, 0.45], [0.45, 0.9]])
_MIN_DELTA_AMPLITUDE = 30.0
"""Smallest N3 delta amplitude (µV RMS at F3/F4): the median N3 epoch of such a subject holds
0.5–2 Hz waves above 75 µV peak to peak for about a fifth of its length, the AASM criterion."""


@dataclass(frozen=True)
class SubjectProfile:
    """Per-subject physiology (amplitudes are µV RMS of the component at its strongest channel).

    Attributes:
        alpha_freq: Posterior dominant rhythm (Hz).
        alpha_amplitude: Alpha in relaxed eyes-closed wake.
        background_amplitude: 1/f background.
        beta_amplitude: Beta (15–28 Hz) in eyes-open wake.
        theta_amplitude: Theta (4–7 Hz) in N1.
        delta_amplitude: Delta (0.5–2 Hz) in N3.
        spindle_density: Spindles per minute of N2.
        spindle_freq_slow: Frontal (slow) spindle frequency (Hz).
        spindle_freq_fast: Central (fast) spindle frequency (Hz).
        spindle_amplitude: Spindle peak amplitude (µV).
        kcomplex_rate: K-complexes per minute of N2.
        kcomplex_amplitude: K-complex negative peak (µV).
        emg_amplitude: Chin EMG in eyes-open wake.
        noise_level: Amplifier white noise per channel.
        heart_rate: Resting heart rate (beats/min).
        breathing_rate: Breaths per minute.
        sao2_baseline: Baseline oxygen saturation (%).
        hypopnea_rate: Hypopneas per hour of sleep.
        arousal_rate: Spontaneous arousals per hour of sleep.
        blend_prob: Probability that an epoch is blended with a confusable neighbouring stage.
    """

    alpha_freq: float
    alpha_amplitude: float
    background_amplitude: float
    beta_amplitude: float
    theta_amplitude: float
    delta_amplitude: float
    spindle_density: float
    spindle_freq_slow: float
    spindle_freq_fast: float
    spindle_amplitude: float
    kcomplex_rate: float
    kcomplex_amplitude: float
    emg_amplitude: float
    noise_level: float
    heart_rate: float
    breathing_rate: float
    sao2_baseline: float
    hypopnea_rate: float
    arousal_rate: float
    blend_prob: float


def draw_subject_profile(rng: np.random.Generator, age: float | None = None) -> SubjectProfile:
    """Draw one subject's physiology from adult ranges, shifted by age.

    Every EEG amplitude shares a per-subject gain (lognormal, spread 0.2: skull and scalp
    conductance make the same rhythm 0.7–1.4 times as large between adults). Alpha peaks at
    10 ± 0.9 Hz and slows by 0.1 Hz per decade above 45 (Klimesch 1999, Brain Res Rev 29:169).
    Slow-wave amplitude falls by 8 % and spindle density by 0.3 per minute per decade (Carrier et
    al. 2011, Eur J Neurosci 33:758; Purcell et al. 2017, Nat Commun 8:15930), down to
    :data:`_MIN_DELTA_AMPLITUDE`: every subject's hypnogram holds N3, and an epoch is N3 only if
    slow waves above 75 µV fill a fifth of it (AASM), so fewer N3 epochs with age come from the
    hypnogram, not from N3 epochs too small to be scored N3 (version 5; version 4 let a small,
    old subject's N3 fall below the criterion).

    Args:
        rng: Source of randomness.
        age: Age in years; None draws a 45-year-old.
    """
    decades = 0.0 if age is None else (float(age) - 45.0) / 10.0
    gain = float(np.clip(rng.lognormal(0.0, 0.2), 0.6, 1.6))
    return SubjectProfile(
        alpha_freq=float(np.clip(rng.normal(10.0 - 0.1 * decades, 0.9), 8.0, 12.5)),
        alpha_amplitude=gain * float(np.clip(rng.lognormal(np.log(24.0), 0.35), 10.0, 60.0)),
        background_amplitude=gain * float(rng.uniform(9.0, 16.0)),
        beta_amplitude=gain * float(rng.uniform(5.0, 9.0)),
        theta_amplitude=gain * float(rng.uniform(6.0, 10.0)),
        delta_amplitude=max(
            gain * float(np.clip(1.0 - 0.08 * decades, 0.5, 1.4)) * float(rng.uniform(30.0, 45.0)),
            _MIN_DELTA_AMPLITUDE,
        ),
        spindle_density=float(np.clip(rng.uniform(3.0, 7.0) - 0.3 * decades, 1.0, 8.0)),
        spindle_freq_slow=float(rng.uniform(11.0, 12.8)),
        spindle_freq_fast=float(rng.uniform(13.0, 15.0)),
        spindle_amplitude=gain * float(rng.uniform(20.0, 40.0)),
        kcomplex_rate=float(rng.uniform(1.0, 3.0)),
        kcomplex_amplitude=gain * float(rng.uniform(70.0, 160.0)),
        emg_amplitude=float(rng.uniform(8.0, 25.0)),
        noise_level=float(rng.uniform(1.0, 3.0)),
        heart_rate=float(rng.uniform(52.0, 78.0)),
        breathing_rate=float(rng.uniform(12.0, 17.0)),
        sao2_baseline=float(rng.uniform(95.0, 98.0)),
        hypopnea_rate=float(rng.uniform(1.0, 10.0)),
        arousal_rate=float(rng.uniform(5.0, 18.0)),
        blend_prob=float(rng.uniform(0.1, 0.25)),
    )


@dataclass
class SynthesisResult:
    """Signals and ground truth of one synthesised recording.

    Attributes:
        signals: ``float32 [13, n_samples]`` in the channel units of
            :data:`partnd.cohort.pc18_format.CHANNELS` (µV; SaO2 in %; ECG in mV).
        events: Arousals (``arousal_rera`` after a hypopnea, else ``arousal_spontaneous``) and
            hypopneas (``resp_hypopnea``), sorted by start.
        movements: ``[start, stop)`` sample ranges of movement artefacts.
        event_counts: Number of spindles, K-complexes, vertex waves, sawtooth bursts, rapid eye
            movements and heart beats.
        envelopes: Per-second amplitude (µV RMS) of each continuous component after the
            cross-fade, ``[n_seconds]`` each: the stage modulation the sources were multiplied by.
        scalp: The noise-free electrode potentials the EEG and EOG derivations were taken from.
        derivations: The further derivations asked for, ``float32 [n_samples]`` µV each (with
            their own amplifier noise, no recording faults).
    """

    signals: np.ndarray
    events: list[AnnotatedEvent]
    movements: list[tuple[int, int]]
    event_counts: dict[str, int] = field(default_factory=dict)
    envelopes: dict[str, np.ndarray] = field(default_factory=dict)
    scalp: ScalpField | None = None
    derivations: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordingFaults:
    """Recording problems to inject into one record (each optional).

    Attributes:
        line_noise_uv: Amplitude of 60 Hz mains interference on the EEG, EOG and EMG (µV), or None.
        flat_channel: Name of an EEG channel that is flat (disconnected) all night, or None.
        clipped_channel: EEG channel with an electrode pop that saturates the ADC, or None.
        clipped_start: First sample of the saturated segment.
        clipped_stop: Sample one past the saturated segment.
    """

    line_noise_uv: float | None = None
    flat_channel: str | None = None
    clipped_channel: str | None = None
    clipped_start: int = 0
    clipped_stop: int = 0


def _ar1(rng: np.random.Generator, shape: tuple[int, int], rho: float, sigma: float) -> np.ndarray:
    """Stationary AR(1) series along the last axis with marginal std ``sigma``."""
    innovations = rng.standard_normal(shape) * sigma * np.sqrt(1.0 - rho**2)
    innovations[..., 0] = rng.standard_normal(shape[:-1]) * sigma
    return scipy.signal.lfilter([1.0], [1.0, -rho], innovations, axis=-1)


SpectralShape = tuple[Callable[[np.ndarray], np.ndarray], float, float]
"""An amplitude spectrum ``f -> |X(f)|`` and the band ``(low Hz, high Hz)`` that holds it."""


def _spectral_sources(
    rng: np.random.Generator, n_samples: int, shapes: list[SpectralShape]
) -> np.ndarray:
    """Gaussian noise sources with given amplitude spectra and unit variance, ``float32 [S, n]``.

    Coefficients are drawn only inside each shape's band (narrowband sources are cheap) and scaled
    so that the expected variance ``4 / N^2 * sum |shape|^2`` of the inverse FFT is one.
    """
    n_fft = scipy.fft.next_fast_len(n_samples, real=True)
    n_fft += n_fft % 2
    n_freq = n_fft // 2 + 1
    resolution = FS / n_fft
    coefficients = np.zeros((len(shapes), n_freq), dtype=np.complex64)
    for row, (shape, low_hz, high_hz) in enumerate(shapes):
        lo = max(int(low_hz / resolution), 1)
        hi = min(int(np.ceil(high_hz / resolution)) + 1, n_freq - 1)
        amplitude = shape(np.arange(lo, hi, dtype=np.float32) * np.float32(resolution))
        amplitude *= n_fft / (2.0 * np.sqrt(np.sum(amplitude.astype(np.float64) ** 2)))
        draws = rng.standard_normal((2, hi - lo), dtype=np.float32)
        coefficients[row, lo:hi].real = draws[0] * amplitude
        coefficients[row, lo:hi].imag = draws[1] * amplitude
    sources = scipy.fft.irfft(coefficients, n=n_fft, axis=-1, workers=1)
    return sources[:, :n_samples]


def _bump(freqs: np.ndarray, centre: float, width: float) -> np.ndarray:
    """Gaussian spectral peak."""
    return np.exp(-0.5 * ((freqs - centre) / width) ** 2)


def _band(freqs: np.ndarray, low: float, high: float, order: int = 4) -> np.ndarray:
    """Butterworth-like band-pass magnitude (|H| of a high-pass at ``low`` times a low-pass)."""
    safe = np.maximum(freqs, 1e-6)
    return 1.0 / np.sqrt((1.0 + (low / safe) ** (2 * order)) * (1.0 + (safe / high) ** (2 * order)))


def _power_law(
    freqs: np.ndarray, low: float, high: float, order: int, exponent: float
) -> np.ndarray:
    """Band-limited ``1 / f^exponent`` amplitude spectrum (flat below ``low``)."""
    return _band(freqs, low, high, order) / np.maximum(freqs, low) ** exponent


def _aperiodic(freqs: np.ndarray, knee: float, exponent: float) -> np.ndarray:
    """Aperiodic amplitude spectrum with a knee: power ``1 / (knee^exponent + f^exponent)``.

    The Lorentzian form of Donoghue et al. (2020, Nat Neurosci 23:1655): flat below ``knee`` Hz,
    ``1 / f^exponent`` power above, band-limited to 0.2–40 Hz.
    """
    return _band(freqs, 0.2, 40.0, 2) / np.sqrt(knee**exponent + np.maximum(freqs, 0.0) ** exponent)


def _source_shapes(profile: SubjectProfile) -> list[SpectralShape]:
    """Spectra of the continuous sources, in the row order used by :func:`synthesize_psg`."""
    pink: SpectralShape = (partial(_aperiodic, knee=2.0, exponent=2.0), 0, 100)
    alpha: SpectralShape = (
        partial(_bump, centre=profile.alpha_freq, width=0.6),
        profile.alpha_freq - 3.0,
        profile.alpha_freq + 3.0,
    )
    theta: SpectralShape = (partial(_bump, centre=5.5, width=1.1), 1.0, 10.0)
    delta: SpectralShape = (partial(_power_law, low=0.4, high=2.2, order=3, exponent=1.0), 0, 8)
    return [
        pink,
        pink,
        pink,
        alpha,
        alpha,
        (partial(_band, low=15.0, high=28.0), 6.0, 60.0),
        theta,
        theta,
        delta,
        delta,
        (partial(_band, low=15.0, high=90.0, order=3), 4.0, 100.0),
        (partial(_band, low=0.1, high=0.6, order=3), 0.0, 3.0),
        (partial(_power_law, low=0.1, high=20.0, order=1, exponent=1.0), 0.0, 60.0),
    ]


def _upsample(per_second: np.ndarray, n_samples: int) -> np.ndarray:
    """Linearly interpolate ``[K, n_seconds]`` values (at second centres) to ``[K, n_samples]``."""
    padded = np.concatenate([per_second[:, :1], per_second, per_second[:, -1:]], axis=1)
    fraction = (np.arange(FS, dtype=np.float32) + 0.5) / FS
    left = padded[:, :-1, None].astype(np.float32)
    right = padded[:, 1:, None].astype(np.float32)
    halves = left + (right - left) * fraction[None, None, :]
    # Shift by half a second so that value i sits at the centre of second i.
    flat = halves.reshape(per_second.shape[0], -1)[:, FS // 2 :]
    return flat[:, :n_samples]


def _smooth_seconds(values: np.ndarray, seconds: int) -> np.ndarray:
    """Hann-window smoothing along the last axis (cross-fades over ``seconds``)."""
    window = np.hanning(seconds + 2)[1:-1]
    window /= window.sum()
    padded = np.pad(values, ((0, 0), (seconds, seconds)), mode="edge")
    smoothed = scipy.signal.fftconvolve(padded, window[None, :], mode="same", axes=-1)
    return smoothed[:, seconds:-seconds]


def _event_grid(
    starts: np.ndarray, lengths: np.ndarray, n_samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flattened (event index, offset within event, sample index) for variable-length events."""
    lengths = lengths.astype(np.int64)
    event = np.repeat(np.arange(len(starts)), lengths)
    first = np.cumsum(lengths) - lengths
    offset = np.arange(int(lengths.sum())) - np.repeat(first, lengths)
    sample = starts.astype(np.int64)[event] + offset
    inside = (sample >= 0) & (sample < n_samples)
    return event[inside], offset[inside], sample[inside]


def _render(sample: np.ndarray, values: np.ndarray, n_samples: int) -> np.ndarray:
    return np.bincount(sample, weights=values, minlength=n_samples)[:n_samples].astype(np.float32)


def _transients(
    n_samples: int,
    onsets: np.ndarray,
    amplitude: np.ndarray,
    waves: tuple[tuple[float, float, float], ...],
    length_s: float,
) -> np.ndarray:
    """Render transients shaped as sums of Gaussians ``(centre s, relative amplitude, width s)``."""
    length = np.full(len(onsets), int(length_s * FS))
    event, offset, sample = _event_grid(onsets, length, n_samples)
    t = offset / FS
    shape = np.zeros(len(t))
    for centre, relative, width in waves:
        shape += relative * np.exp(-0.5 * ((t - centre) / width) ** 2)
    return _render(sample, amplitude[event] * shape, n_samples)


def _draw_event_times(
    rng: np.random.Generator, rate_per_second: np.ndarray, modulation: np.ndarray | None = None
) -> np.ndarray:
    """Poisson event onsets (in samples) from a per-second rate."""
    rates = rate_per_second if modulation is None else rate_per_second * modulation
    counts = rng.poisson(np.maximum(rates, 0.0))
    seconds = np.repeat(np.arange(len(counts)), counts)
    return ((seconds + rng.random(len(seconds))) * FS).astype(np.int64)


def _intervals(
    rng: np.random.Generator,
    eligible: np.ndarray,
    rate_per_hour: float,
    min_s: float,
    max_s: float,
) -> list[tuple[int, int]]:
    """Non-overlapping ``[start, stop)`` second intervals starting in eligible seconds."""
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return []
    n_events = rng.poisson(rate_per_hour * len(candidates) / 3600.0)
    onsets = np.sort(rng.choice(candidates, size=min(n_events, len(candidates)), replace=False))
    intervals: list[tuple[int, int]] = []
    for onset in onsets:
        stop = int(onset + rng.uniform(min_s, max_s))
        if (not intervals or onset > intervals[-1][1] + 10) and stop < len(eligible):
            intervals.append((int(onset), stop))
    return intervals


def _state_per_second(
    epoch_stages: np.ndarray,
    grid_start: int,
    n_seconds: int,
    scoring_start: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-second internal state (stage, or eyes-open wake) and per-second epoch index."""
    centres = np.arange(n_seconds) * FS + FS // 2
    epoch_index = np.clip((centres - grid_start) // _EPOCH_SAMPLES, 0, len(epoch_stages) - 1)
    # Eyes open/closed in wake: a persistent two-state chain over epochs, open in about 30 % of the
    # wake epochs after lights-off (lying in the dark, eyes mostly closed) and mostly open before.
    draws = rng.random(len(epoch_stages))
    closed = np.empty(len(epoch_stages), dtype=bool)
    state_closed = True
    for index, draw in enumerate(draws):
        state_closed = draw >= 0.3 if state_closed else draw < 0.7
        closed[index] = state_closed
    epoch_start = grid_start + np.arange(len(epoch_stages)) * _EPOCH_SAMPLES
    closed &= ~((epoch_start < scoring_start) & (rng.random(len(epoch_stages)) < 0.7))
    states = epoch_stages.astype(np.int64).copy()
    states[(epoch_stages == SleepStage.WAKE) & ~closed] = _EYES_OPEN
    return states, epoch_index


def _slow_wave_decay(n_seconds: int, scoring_start: int) -> np.ndarray:
    """Per-second factor on slow-wave (delta) amplitude: homeostatic decay across the night.

    Slow-wave activity falls across successive NREM episodes as sleep pressure (process S)
    dissipates exponentially with a time constant of about 4.2 h (Borbély 1982, Hum Neurobiol
    1:195; Daan, Beersma & Borbély 1984, Am J Physiol 246:R161). The factor is
    ``0.8 + 0.4 exp(-t / 4.2 h)`` with ``t`` the time since lights-off: 1.2 at lights-off, 1.05
    after two hours, 0.86 after eight (the amount of N3 falls through the hypnogram as well).

    Returns:
        ``[n_seconds]`` factors.
    """
    hours = np.maximum(np.arange(n_seconds) - scoring_start / FS, 0.0) / 3600.0
    return 0.8 + 0.4 * np.exp(-hours / 4.2)


def _envelopes(
    rng: np.random.Generator,
    states: np.ndarray,
    epoch_index: np.ndarray,
    profile: SubjectProfile,
) -> dict[str, np.ndarray]:
    """Per-second amplitude envelopes (µV RMS) of the continuous components."""
    n_epochs = len(states)
    names = list(_STAGE_TEMPLATES)
    templates = np.array([_STAGE_TEMPLATES[name] for name in names])  # [K, 6]
    epoch_weights = templates[:, states]  # [K, n_epochs]
    blended = rng.random(n_epochs) < profile.blend_prob
    partner = np.array([rng.choice(_CONFUSABLE[int(state)]) for state in states])
    share = rng.uniform(0.15, 0.45, n_epochs) * blended
    epoch_weights = (1.0 - share) * epoch_weights + share * templates[:, partner]
    epoch_jitter = _ar1(rng, (len(names), n_epochs), rho=0.5, sigma=0.2)
    n_seconds = len(epoch_index)
    second_jitter = _ar1(rng, (len(names), n_seconds), rho=0.92, sigma=0.25)
    per_second = epoch_weights[:, epoch_index] * np.exp(
        epoch_jitter[:, epoch_index] + second_jitter
    )
    scale = {
        "background": profile.background_amplitude,
        "alpha": profile.alpha_amplitude,
        "beta": profile.beta_amplitude,
        "theta": profile.theta_amplitude,
        "delta": profile.delta_amplitude,
        "emg": profile.emg_amplitude,
        "sem": 60.0,
    }
    return {name: per_second[row] * scale[name] for row, name in enumerate(names)}


def _topography(
    rng: np.random.Generator, name: str, n_sources: int = 1, jitter: float = 0.12
) -> np.ndarray:
    """Mixing columns ``[8, n_sources]`` of one component, jittered per subject and channel."""
    base = np.array(_TOPOGRAPHIES[name]) * rng.lognormal(0.0, jitter, _MIXED_CHANNELS)
    if n_sources == 1:
        return base[:, None]
    lateral = np.ones((_MIXED_CHANNELS, 2)) * np.sqrt(0.5)
    lateral[[0, 2, 4]] = _LATERAL_MIX[0] / np.linalg.norm(_LATERAL_MIX[0])
    lateral[[1, 3, 5]] = _LATERAL_MIX[1] / np.linalg.norm(_LATERAL_MIX[1])
    return base[:, None] * lateral


def _background_mixing(rng: np.random.Generator) -> np.ndarray:
    """Three background patterns (global, left–right, anterior–posterior) ``[8, 3]``."""
    patterns = np.array(
        [
            [0.85] * 8,
            [0.35, -0.35, 0.35, -0.35, 0.35, -0.35, 0.2, 0.0],
            [0.4, 0.4, 0.0, 0.0, -0.4, -0.4, 0.35, 0.0],
        ]
    ).T
    patterns = patterns + 0.1 * rng.standard_normal(patterns.shape)
    base = np.array(_TOPOGRAPHIES["background"]) * rng.lognormal(0.0, 0.1, _MIXED_CHANNELS)
    return base[:, None] * patterns / np.linalg.norm(patterns, axis=1, keepdims=True)


def _mix(weights: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """``float32 [rows, n]``: ``weights [rows, S] @ sources [S, n]`` summed source by source.

    An explicit sum over the sources, not a BLAS product: the generated bytes must not depend on
    how many threads BLAS uses (a joblib worker gets one, the parent process all cores).
    """
    mixed = np.zeros((weights.shape[0], sources.shape[1]), dtype=np.float32)
    for column, source in zip(weights.T.astype(np.float32), sources, strict=True):
        mixed += column[:, None] * source
    return mixed


def _site_columns(
    rng: np.random.Generator, topography: dict[str, float], site: str
) -> tuple[np.ndarray, np.ndarray]:
    """Mixing row ``[19]`` of a mastoid or free electrode and its jittered weight per component.

    Returns:
        ``(row, weights)``: the weights on the shared sources and ``[len(COMPONENTS)]`` jittered
        component weights (for the electrode's own activity).
    """
    side, pattern = SITE_LAYOUT[site]
    weights = np.array([topography[name] for name in COMPONENTS])
    weights = weights * rng.lognormal(0.0, 0.12, len(COMPONENTS))
    lateral = {-1: _LATERAL_MIX[0], 0: np.ones(2), 1: _LATERAL_MIX[1]}[side]
    lateral = lateral / np.linalg.norm(lateral)
    background = np.array(pattern) + 0.1 * rng.standard_normal(3)
    parts = []
    for index, name in enumerate(COMPONENTS):
        if name == "background":
            parts.append(weights[index] * background / np.linalg.norm(background))
        elif _COMPONENT_COLUMNS[name] == 2:
            parts.append(weights[index] * lateral)
        else:
            parts.append(weights[index : index + 1])
    return np.concatenate(parts), weights


def _scalp_field(
    derivation_weights: np.ndarray,
    sources: np.ndarray,
    electrodes: Sequence[str],
    rng: np.random.Generator,
    envelopes: dict[str, np.ndarray],
    shapes: list[SpectralShape],
) -> ScalpField:
    """Potentials of ``electrodes`` from the shared ``sources`` ``[19, n]`` (and own activity).

    PC18 sites are anchored (their row of ``derivation_weights`` ``[8, 19]`` plus their mastoid);
    the mastoids and free electrodes take :data:`MASTOID_TOPOGRAPHY` / :data:`FREE_TOPOGRAPHIES`
    (free ones relative to the linked mastoids) and free electrodes add their own continuous
    rhythms, drawn from one child stream per electrode. Every site's weights are drawn whether it
    is asked for or not, so a site's potential does not depend on which others are.
    """
    mastoid_ecg = {"M1": 1.0, "M2": -1.0}
    rows: dict[str, np.ndarray] = {}
    own: dict[str, np.ndarray] = {}
    for site in ("M1", "M2", *FREE_TOPOGRAPHIES):
        if site in mastoid_ecg:
            topography = {**MASTOID_TOPOGRAPHY}
            topography["ecg"] *= mastoid_ecg[site]
        else:
            topography = FREE_TOPOGRAPHIES[site]
        rows[site], own[site] = _site_columns(rng, topography, site)
    linked = 0.5 * (rows["M1"] + rows["M2"])
    shared = np.ones(len(linked))
    start = 0
    for name in COMPONENTS:
        if name in LOCAL_COMPONENTS:
            shared[start : start + _COMPONENT_COLUMNS[name]] = _SHARED_FRACTION
        start += _COMPONENT_COLUMNS[name]
    for site in FREE_TOPOGRAPHIES:
        rows[site] = rows[site] * shared + linked
    for site, reference in ANCHORED_REFERENCES.items():
        index = PC18_DERIVATIONS.index(f"{site}-{reference}")
        rows[site] = derivation_weights[index] + rows[reference]
    site_rngs = dict(zip(ELECTRODES, rng.spawn(len(ELECTRODES)), strict=True))
    potentials = _mix(np.stack([rows[site] for site in electrodes]), sources)
    own_share = np.sqrt(1.0 - _SHARED_FRACTION**2)
    for row, site in enumerate(electrodes):
        if site not in FREE_TOPOGRAPHIES:
            continue
        local = _spectral_sources(
            site_rngs[site],
            sources.shape[1],
            [shapes[_LOCAL_SHAPE_ROWS[n]] for n in LOCAL_COMPONENTS],
        )
        for name, activity in zip(LOCAL_COMPONENTS, local, strict=True):
            weight = np.float32(own_share * own[site][COMPONENTS.index(name)])
            potentials[row] += weight * envelopes[name] * activity
    return ScalpField(tuple(electrodes), potentials)


def _ecg(
    rng: np.random.Generator, heart_rate: np.ndarray, n_samples: int
) -> tuple[np.ndarray, int]:
    """ECG in mV from a per-sample heart rate: a PQRST template train plus wander and noise."""
    beats = np.cumsum(heart_rate / 60.0 / FS)
    onsets = np.flatnonzero(np.diff(np.floor(beats), prepend=0.0) > 0)
    t = np.arange(-0.3, 0.5, 1.0 / FS)
    waves = ((-0.2, 0.15, 0.025), (-0.03, -0.1, 0.01), (0.0, 1.0, 0.012), (0.03, -0.25, 0.012))
    template = sum(amp * np.exp(-0.5 * ((t - centre) / width) ** 2) for centre, amp, width in waves)
    template = template + 0.3 * np.exp(-0.5 * ((t - 0.25) / 0.045) ** 2)
    r_amplitude = rng.uniform(0.8, 1.6)
    lengths = np.full(len(onsets), len(t))
    event, offset, sample = _event_grid(onsets - int(0.3 * FS), lengths, n_samples)
    beat_scale = r_amplitude * (1.0 + 0.03 * rng.standard_normal(len(onsets)))
    ecg = _render(sample, template[offset] * beat_scale[event], n_samples)
    ecg += 0.02 * rng.standard_normal(n_samples).astype(np.float32)
    return ecg, len(onsets)


def synthesize_psg(
    epoch_stages: np.ndarray,
    *,
    grid_start: int,
    n_samples: int,
    scoring_start: int,
    profile: SubjectProfile,
    rng: np.random.Generator,
    derivations: Sequence[str] = (),
) -> SynthesisResult:
    """Synthesise the 13 PC18 signals of one recording from its hypnogram, and other derivations.

    The EEG and EOG are differences of electrode potentials (:mod:`partnd.cohort.electrodes`)
    plus each recorded channel's own amplifier noise. The PC18 signals use the main random stream
    exactly as generator version 5 did; the other electrodes and derivations draw from a child
    stream (``rng.spawn``), so asking for them leaves the PC18 signals unchanged.

    Args:
        epoch_stages: ``[n_grid_epochs]`` :class:`SleepStage` codes on a 30-s grid; epoch ``i``
            covers samples ``[grid_start + 6000 i, grid_start + 6000 (i + 1))`` and the grid must
            cover ``[0, n_samples)``.
        grid_start: First sample of epoch 0 (``<= 0``; the recording may start inside it).
        n_samples: Number of samples at 200 Hz.
        scoring_start: First scored sample (lights-off); wake before it is mostly eyes-open and
            restless.
        profile: The subject's physiology.
        rng: Source of randomness.
        derivations: Further derivations ``"A-B"`` of :data:`partnd.cohort.electrodes.ELECTRODES`
            to record (e.g. ``"Fpz-Cz"``, ``"C4-A1"``), returned in ``derivations``.

    Returns:
        A :class:`SynthesisResult` with ``signals`` ``float32 [13, n_samples]``.
    """
    for name in derivations:
        derivation_electrodes(name)
    epoch_stages = np.asarray(epoch_stages)
    check(
        epoch_stages.ndim == 1 and bool(np.isin(epoch_stages, list(SleepStage)).all()),
        "epoch_stages",
        "a 1-D array of sleep stage codes 0..4",
        epoch_stages,
    )
    check(grid_start <= 0, "grid_start", "a sample index <= 0", grid_start)
    check(n_samples >= 60 * FS, "n_samples", f"at least one minute ({60 * FS})", n_samples)
    grid_end = grid_start + len(epoch_stages) * _EPOCH_SAMPLES
    check(grid_end >= n_samples, "epoch_stages", f"epochs covering {n_samples} samples", grid_end)

    n_seconds = -(-n_samples // FS)
    states_epoch, epoch_index = _state_per_second(
        epoch_stages, grid_start, n_seconds, scoring_start, rng
    )
    state = states_epoch[epoch_index]
    envelope = _envelopes(rng, states_epoch, epoch_index, profile)
    envelope["delta"] *= _slow_wave_decay(n_seconds, scoring_start)
    events, hypopneas, arousal_mask = _respiratory_events(rng, state, profile, n_samples)
    envelope["alpha"] += arousal_mask * profile.alpha_amplitude * 0.8
    envelope["beta"] += arousal_mask * profile.beta_amplitude * 1.2
    envelope["emg"] += arousal_mask * profile.emg_amplitude * 0.8
    names = list(envelope)
    smoothed = _smooth_seconds(np.stack([envelope[name] for name in names]), 5)
    env = dict(zip(names, _upsample(smoothed, n_samples), strict=True))

    src = _spectral_sources(rng, n_samples, _source_shapes(profile))
    rates = {name: np.array(values)[state] / 60.0 for name, values in _EVENT_RATES.items()}
    counts: dict[str, int] = {}
    graphoelements = _graphoelements(rng, rates, profile, n_samples, counts)
    phasic = np.exp(_ar1(rng, (1, n_seconds), rho=0.95, sigma=1.0)[0] - 0.5)
    eye = _eye_movements(rng, rates, phasic, n_samples, counts) + env["sem"] * src[11]
    movements = _movement_intervals(rng, state, rates["movement"], scoring_start, n_samples)
    movement_env = np.zeros(n_samples, dtype=np.float32)
    for start, stop in movements:
        movement_env[start:stop] = rng.uniform(80.0, 400.0) * np.hanning(stop - start)
    twitch_onsets = _draw_event_times(rng, rates["twitch"], phasic)
    twitch_amp = rng.uniform(0.4, 0.9, len(twitch_onsets)) * profile.emg_amplitude
    twitches = _transients(n_samples, twitch_onsets, twitch_amp, ((0.15, 1.0, 0.06),), 0.3)
    emg_env = env["emg"] + twitches + movement_env * 0.4

    # Mix the EEG, EOG and chin EMG rows from modulated sources (built in place, float32).
    sources = np.empty((19, n_samples), dtype=np.float32)
    modulated = ("background",) * 3 + ("alpha",) * 2 + ("beta",) + ("theta",) * 2 + ("delta",) * 2
    for row, name in enumerate(modulated):
        np.multiply(env[name], src[row], out=sources[row])
    sources[10:15] = graphoelements
    np.multiply(emg_env, src[10], out=sources[15])
    sources[16] = eye
    cardiorespiratory, counts["heart_beats"] = _cardiorespiratory(
        rng, state, profile, hypopneas, arousal_mask, n_samples
    )
    sources[17] = cardiorespiratory[4]
    np.multiply(movement_env, src[12], out=sources[18])
    mixing = _mixing_matrix(rng)
    montage_rng = rng.spawn(1)[0]  # a child stream: the main stream (PC18's) is not advanced
    needed = [derivation_electrodes(name) for name in (*PC18_DERIVATIONS, *derivations)]
    scalp = _scalp_field(
        mixing,
        sources,
        sorted({site for pair in needed for site in pair}, key=ELECTRODES.index),
        montage_rng,
        env,
        _source_shapes(profile),
    )
    mixed = np.empty((_MIXED_CHANNELS, n_samples), dtype=np.float32)
    for row, name in enumerate(PC18_DERIVATIONS):
        mixed[row] = scalp.derivation(name)
    mixed[_CHIN_ROW] = _mix(mixing[_CHIN_ROW : _CHIN_ROW + 1], sources)[0]
    mixed += profile.noise_level * rng.standard_normal(mixed.shape, dtype=np.float32)
    noise_rng = montage_rng.spawn(1)[0]
    recorded = {
        name: scalp.derivation(name)
        + profile.noise_level * noise_rng.standard_normal(n_samples, dtype=np.float32)
        for name in derivations
    }

    signals = np.empty((N_CHANNELS, n_samples), dtype=np.float32)
    signals[:_MIXED_CHANNELS] = mixed
    signals[_MIXED_CHANNELS:] = cardiorespiratory
    signals[8:11] *= 1.0 + movement_env / 200.0
    signals[8:11] += sources[18] * 0.5
    return SynthesisResult(
        signals=signals,
        events=events,
        movements=movements,
        event_counts=counts,
        envelopes=dict(zip(names, smoothed, strict=True)),
        scalp=scalp,
        derivations=recorded,
    )


def _respiratory_events(
    rng: np.random.Generator, state: np.ndarray, profile: SubjectProfile, n_samples: int
) -> tuple[list[AnnotatedEvent], list[tuple[int, int]], np.ndarray]:
    """Hypopneas (sleep, not N3; often ending in an arousal) and spontaneous arousals elsewhere.

    Every shift from N2, N3 or REM to N1 is preceded by an arousal ending within a few seconds of
    the border: the AASM manual scores N1 after an arousal interrupts N2 (or REM), so N1 inside
    sleep follows an arousal (Berry et al., AASM Manual v2.6, rules for N1/N2/R).

    Returns:
        ``(events, hypopneas, arousal_mask)``: annotated events in samples, hypopnea intervals in
        seconds and a per-second 0/1 arousal indicator.
    """
    n_seconds = len(state)
    asleep = (state != SleepStage.WAKE) & (state != _EYES_OPEN)
    hypopneas = _intervals(rng, asleep & (state != SleepStage.N3), profile.hypopnea_rate, 12, 35)
    respiratory = np.zeros(n_seconds, dtype=bool)
    for start, stop in hypopneas:
        respiratory[max(start - 10, 0) : stop + 20] = True
    rera = [
        (stop, stop + int(rng.uniform(3, 8)))
        for start, stop in hypopneas
        if rng.random() < 0.6 and stop + 8 < n_seconds
    ]
    spontaneous = _intervals(rng, asleep & ~respiratory, profile.arousal_rate, 3, 15)
    deeper = np.isin(state, (SleepStage.N2, SleepStage.N3, SleepStage.REM))
    shifts = np.flatnonzero(deeper[:-1] & (state[1:] == SleepStage.N1)) + 1
    taken = np.concatenate([respiratory, np.zeros(20, dtype=bool)])
    for start, stop in rera + spontaneous:
        taken[max(start - 5, 0) : stop + 5] = True
    for border in shifts:
        start = int(border - rng.uniform(2.0, 8.0))
        stop = start + int(rng.uniform(3.0, 10.0))
        if start >= 0 and stop < n_seconds and not taken[start:stop].any():
            spontaneous.append((start, stop))
            taken[max(start - 5, 0) : stop + 5] = True
    spontaneous.sort()
    labelled = (
        ("resp_hypopnea", hypopneas),
        ("arousal_rera", rera),
        ("arousal_spontaneous", spontaneous),
    )
    events = sorted(
        (
            AnnotatedEvent(label, start * FS, min(stop * FS, n_samples))
            for label, intervals in labelled
            for start, stop in intervals
        ),
        key=lambda event: event.start,
    )
    arousal_mask = np.zeros(n_seconds)
    for start, stop in rera + spontaneous:
        arousal_mask[start:stop] = 1.0
    return events, hypopneas, arousal_mask


def _graphoelements(
    rng: np.random.Generator,
    rates: dict[str, np.ndarray],
    profile: SubjectProfile,
    n_samples: int,
    counts: dict[str, int],
) -> np.ndarray:
    """Slow spindles, fast spindles, K-complexes, vertex waves and sawtooth bursts ``[5, n]``."""
    onsets = _draw_event_times(rng, rates["spindle"] * profile.spindle_density)
    length = (rng.uniform(0.5, 2.0, len(onsets)) * FS).astype(np.int64)
    is_fast = rng.random(len(onsets)) < 0.65
    freq = np.where(is_fast, profile.spindle_freq_fast, profile.spindle_freq_slow)
    freq = freq + rng.normal(0.0, 0.3, len(freq))
    amp = profile.spindle_amplitude * rng.lognormal(0.0, 0.25, len(freq))
    phase = rng.uniform(0, 2 * np.pi, len(freq))
    event, offset, sample = _event_grid(onsets, length, n_samples)
    spindle = (
        amp[event]
        * np.sin(np.pi * offset / length[event]) ** 2
        * np.sin(2 * np.pi * freq[event] * offset / FS + phase[event])
    )
    counts["spindles"] = len(onsets)

    kc_onsets = _draw_event_times(rng, rates["kcomplex"] * profile.kcomplex_rate)
    kc_amp = profile.kcomplex_amplitude * rng.lognormal(0.0, 0.25, len(kc_onsets))
    counts["kcomplexes"] = len(kc_onsets)
    vertex_onsets = _draw_event_times(rng, rates["vertex"])
    vertex_amp = rng.uniform(40.0, 100.0, len(vertex_onsets))
    counts["vertex_waves"] = len(vertex_onsets)

    saw_onsets = _draw_event_times(rng, rates["sawtooth"])
    saw_len = (rng.uniform(2.0, 6.0, len(saw_onsets)) * FS).astype(np.int64)
    saw_freq = rng.uniform(2.0, 5.0, len(saw_onsets))
    saw_amp = rng.uniform(15.0, 40.0, len(saw_onsets))
    saw_event, saw_offset, saw_sample = _event_grid(saw_onsets, saw_len, n_samples)
    saw_wave = scipy.signal.sawtooth(2 * np.pi * saw_freq[saw_event] * saw_offset / FS, width=0.8)
    saw_env = saw_amp[saw_event] * np.sin(np.pi * saw_offset / saw_len[saw_event])
    counts["sawtooth_bursts"] = len(saw_onsets)

    kc_waves = ((0.35, -1.0, 0.1), (0.8, 0.55, 0.2))
    vertex_waves = ((0.12, -1.0, 0.05), (0.3, 0.35, 0.08))
    return np.stack(
        [
            _render(sample, spindle * ~is_fast[event], n_samples),
            _render(sample, spindle * is_fast[event], n_samples),
            _transients(n_samples, kc_onsets, kc_amp, kc_waves, 1.6),
            _transients(n_samples, vertex_onsets, vertex_amp, vertex_waves, 0.6),
            _render(saw_sample, saw_env * saw_wave, n_samples),
        ]
    )


def _eye_movements(
    rng: np.random.Generator,
    rates: dict[str, np.ndarray],
    phasic: np.ndarray,
    n_samples: int,
    counts: dict[str, int],
) -> np.ndarray:
    """Rapid eye movements (clustered by ``phasic``) and blinks at the eyes, ``[n]`` µV."""
    onsets = _draw_event_times(rng, rates["rapid_eye"], phasic)
    amp = rng.choice([-1.0, 1.0], len(onsets)) * rng.uniform(60.0, 250.0, len(onsets))
    event, offset, sample = _event_grid(onsets, np.full(len(onsets), 2 * FS), n_samples)
    t = offset / FS
    saccade = 1.0 / (1.0 + np.exp(-(t - 0.05) / 0.012)) * np.exp(-t / 0.8)
    counts["rapid_eye_movements"] = len(onsets)
    blinks = _draw_event_times(rng, rates["blink"])
    blink_amp = rng.uniform(80.0, 200.0, len(blinks))
    eye = _render(sample, amp[event] * saccade, n_samples)
    return eye + _transients(n_samples, blinks, blink_amp, ((0.2, -1.0, 0.07),), 0.5)


def _movement_intervals(
    rng: np.random.Generator,
    state: np.ndarray,
    rate: np.ndarray,
    scoring_start: int,
    n_samples: int,
) -> list[tuple[int, int]]:
    """Movement bursts ``[start, stop)``: mostly in wake, at transitions, before lights-off."""
    near_transition = np.zeros(len(state))
    for change in np.flatnonzero(np.diff(state) != 0):
        near_transition[max(change - 15, 0) : change + 15] = 1.0
    rate = rate * (1.0 + 4.0 * near_transition)
    rate[: scoring_start // FS] *= 3.0
    onsets = rng.choice(len(state), size=rng.poisson(rate.sum()), p=rate / rate.sum())
    movements: list[tuple[int, int]] = []
    for onset in np.sort(onsets):
        start, stop = int(onset) * FS, min(int(onset + rng.uniform(2, 20)) * FS, n_samples)
        if movements and start <= movements[-1][1]:
            movements[-1] = (movements[-1][0], max(stop, movements[-1][1]))
        elif start < n_samples:
            movements.append((start, stop))
    return movements


def _cardiorespiratory(
    rng: np.random.Generator,
    state: np.ndarray,
    profile: SubjectProfile,
    hypopneas: list[tuple[int, int]],
    arousal_mask: np.ndarray,
    n_samples: int,
) -> tuple[np.ndarray, int]:
    """ABD, CHEST, AIRFLOW (µV), SaO2 (%) and ECG (mV) ``[5, n]`` and the number of heart beats.

    Breathing is regular in N3 and irregular in REM, shallower during hypopneas, which are followed
    by SaO2 dips; the heart rate follows stage, arousals and respiration (sinus arrhythmia).
    """
    n_seconds = len(state)
    stage_hr = np.array([4.0, 1.0, -1.0, -3.0, 2.0, 6.0])[state]
    hr_jitter = np.array([0.04, 0.03, 0.02, 0.01, 0.06, 0.05])[state]
    breathing_jitter = np.array([0.1, 0.08, 0.05, 0.02, 0.15, 0.12])[state]
    drift = _ar1(rng, (3, n_seconds), rho=0.97, sigma=1.0)
    heart = profile.heart_rate + stage_hr + profile.heart_rate * hr_jitter * drift[0]
    heart += 15.0 * arousal_mask
    breathing = profile.breathing_rate / 60.0 * (1.0 + breathing_jitter * drift[1])
    depth = 1.0 + np.array([0.2, 0.15, 0.08, 0.03, 0.25, 0.2])[state] * drift[2]
    sao2 = profile.sao2_baseline + 0.4 * _ar1(rng, (1, n_seconds), rho=0.995, sigma=1.0)[0]
    for start, stop in hypopneas:
        depth[start:stop] *= rng.uniform(0.25, 0.55)
        dip_start = start + int(rng.uniform(15, 25))
        dip = np.concatenate([np.linspace(0, 1, max(stop - start, 5)), np.linspace(1, 0, 15)])
        dip = dip[: max(n_seconds - dip_start, 0)] * rng.uniform(3.0, 7.0)
        sao2[dip_start : dip_start + len(dip)] -= dip
    physiology = _upsample(_smooth_seconds(np.stack([heart, breathing, depth]), 3), n_samples)

    phase = 2 * np.pi * np.cumsum(physiology[1].astype(np.float64)) / FS
    out = np.empty((5, n_samples), dtype=np.float32)
    out[0] = np.sin(phase) + 0.25 * np.sin(2 * phase + 0.5)
    out[1] = np.sin(phase - 0.25)
    out[2] = np.cos(phase)
    out[:3] *= physiology[2] * rng.uniform((300.0, 200.0, 100.0), (800.0, 600.0, 400.0))[:, None]
    out[3] = np.repeat(np.round(np.clip(sao2, 70.0, 100.0)), FS)[:n_samples]
    out[4], n_beats = _ecg(rng, physiology[0] + 2.5 * np.sin(phase), n_samples)
    return out, n_beats


def _mixing_matrix(rng: np.random.Generator) -> np.ndarray:
    """Per-subject mixing ``[8, 19]`` from the sources of :func:`synthesize_psg` to EEG/EOG/EMG."""
    return np.concatenate(
        [
            _background_mixing(rng),
            _topography(rng, "alpha", 2),
            _topography(rng, "beta"),
            _topography(rng, "theta", 2),
            _topography(rng, "delta", 2),
            _topography(rng, "spindle_slow"),
            _topography(rng, "spindle_fast"),
            _topography(rng, "kcomplex"),
            _topography(rng, "vertex"),
            _topography(rng, "sawtooth"),
            _topography(rng, "emg"),
            _topography(rng, "eye"),
            _topography(rng, "ecg"),
            _topography(rng, "movement", jitter=0.3),
        ],
        axis=1,
    ).astype(np.float32)


def draw_recording_faults(
    rng: np.random.Generator,
    n_samples: int,
    *,
    line_noise: bool,
    flat_channel: bool,
    clipped_channel: bool,
) -> RecordingFaults:
    """Draw where and how strongly the requested recording faults occur.

    Args:
        rng: Source of randomness.
        n_samples: Length of the record.
        line_noise: Add 60 Hz mains interference (2–20 µV).
        flat_channel: Make one EEG channel flat all night.
        clipped_channel: Add a 0.5–3 minute electrode pop that saturates one EEG channel.
    """
    eeg = list(EEG_CHANNEL_NAMES)
    clip_len = int(rng.uniform(30, 180) * FS)
    clip_start = int(rng.integers(0, max(n_samples - clip_len, 1)))
    flat = str(rng.choice(eeg)) if flat_channel else None
    clipped = str(rng.choice([name for name in eeg if name != flat])) if clipped_channel else None
    return RecordingFaults(
        line_noise_uv=float(rng.uniform(2.0, 20.0)) if line_noise else None,
        flat_channel=flat,
        clipped_channel=clipped,
        clipped_start=clip_start if clipped_channel else 0,
        clipped_stop=min(clip_start + clip_len, n_samples) if clipped_channel else 0,
    )


def apply_recording_faults(
    signals: np.ndarray, faults: RecordingFaults, rng: np.random.Generator
) -> None:
    """Inject recording faults into physical signals ``[13, n]`` in place.

    Args:
        signals: ``float32 [13, n]`` physical signals from :func:`synthesize_psg`.
        faults: What to inject.
        rng: Source of randomness (line-noise phase, electrode-pop waveform).
    """
    check(
        signals.ndim == 2 and signals.shape[0] == N_CHANNELS,
        "signals",
        f"an array [{N_CHANNELS}, n_samples]",
        signals,
    )
    n_samples = signals.shape[1]
    if faults.line_noise_uv is not None:
        t = np.arange(n_samples, dtype=np.float64) / FS
        mains = np.sin(2 * np.pi * 60.0 * t + rng.uniform(0, 2 * np.pi)).astype(np.float32)
        coupling = rng.uniform(0.5, 1.0, 8).astype(np.float32)[:, None]
        signals[:8] += faults.line_noise_uv * coupling * mains[None, :]
    if faults.clipped_channel is not None:
        row = CHANNEL_NAMES.index(faults.clipped_channel)
        start, stop = faults.clipped_start, faults.clipped_stop
        ramp = np.sin(np.linspace(0.0, np.pi, stop - start)) ** 0.3
        polarity = rng.choice([-1.0, 1.0])
        signals[row, start:stop] += (polarity * 60000.0 * ramp).astype(np.float32)
    if faults.flat_channel is not None:
        signals[CHANNEL_NAMES.index(faults.flat_channel)] = 0.0
