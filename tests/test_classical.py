"""Classical sleep-staging rows (:mod:`partnd.evaluation.classical`): YASA's features against
hand-computed
values, their alignment with ``InMemoryWindows``, the LightGBM stager and YASA's pretrained path."""

from __future__ import annotations

import warnings
from pathlib import Path

import mne
import numpy as np
import pytest
import scipy.signal
from scipy.integrate import simpson, trapezoid

from partnd._validation import InputError
from partnd.cohort.hypnogram import hypnogram_from_string
from partnd.cohort.pc18_cohort import plan_cohort, synthesize_record
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.datasets.store import create_store, write_record
from partnd.evaluation.classical import (
    YASA_CLASS_WEIGHT,
    YASA_LGBM_PARAMS,
    FeatureTable,
    classical_staging,
    fit_classical_stager,
    predict_stage_proba,
    predict_stages,
    pretrained_channel,
    sleep_features,
    yasa_pretrained_stages,
)
from partnd.evaluation.metrics import classification_metrics

SFREQ = 100.0
T = 3000
SECONDS = np.arange(T) / SFREQ
EEG = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
PER_EPOCH = sorted(
    f"eeg_{name}"
    for name in [
        *("std", "iqr", "skew", "kurt", "nzc", "hmob", "hcomp", "abspow"),
        *("sdelta", "fdelta", "theta", "alpha", "sigma", "beta", "dt", "ds", "db", "at"),
        *("perm", "higuchi", "petrosian"),
    ]
)
BANDS = {
    "sdelta": (0.4, 1),
    "fdelta": (1, 4),
    "theta": (4, 8),
    "alpha": (8, 12),
    "sigma": (12, 16),
    "beta": (16, 30),
}
#: A frequency inside each stage's band, so the stage is readable from one window's spectrum.
STAGE_HZ = {0: 10.0, 1: 6.0, 2: 13.5, 3: 2.0, 4: 22.0}


def _store(path: Path, records: dict, channels: list[str], **kwargs: float) -> Path:
    """Store of ``{record: (signal [W, C, T], stages [W])}`` (one subject per record)."""
    create_store(
        path,
        sfreq=kwargs.get("sfreq", SFREQ),
        channels=channels,
        window_seconds=kwargs.get("window_seconds", 30.0),
        metadata={},
    )
    for record, (signal, stages) in records.items():
        write_record(
            path,
            record,
            np.asarray(signal, dtype=np.float32),
            np.asarray(stages, dtype=np.int8),
            np.arange(len(stages)) * 30.0,
            attrs={"subject_id": record, "split": "training"},
        )
    return path


def _stage_coded(
    stages: np.ndarray, amplitudes: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``[W, 2, T]``: a sine at the stage's frequency (amplitude per window) + 2 µV noise, twice."""
    signal = np.empty((len(stages), 2, T))
    for w, (stage, amplitude) in enumerate(zip(stages, amplitudes, strict=True)):
        hz = STAGE_HZ[max(int(stage), 0)]
        signal[w] = amplitude * np.sin(2 * np.pi * hz * SECONDS + 0.3) + rng.normal(0, 2, (2, T))
    return signal


def _column(table, name: str) -> np.ndarray:
    return table.features[:, table.columns.index(name)].astype(np.float64)


def _robust_scale(x: np.ndarray) -> np.ndarray:
    """scikit-learn's robust_scale(quantile_range=(5, 95)) by hand."""
    return (x - np.median(x)) / (np.percentile(x, 95) - np.percentile(x, 5))


def _past_mean(x: np.ndarray, n: int = 4) -> np.ndarray:
    return np.array([x[max(0, i - n + 1) : i + 1].mean() for i in range(len(x))])


def _centred_triangle_mean(x: np.ndarray) -> np.ndarray:
    weights = scipy.signal.windows.triang(15)  # 0.125, 0.25, ..., 1, ..., 0.125
    out = np.empty(len(x))
    for i in range(len(x)):
        k = np.arange(i - 7, i + 8)
        inside = (k >= 0) & (k < len(x))
        out[i] = np.sum(weights[inside] * x[k[inside]]) / np.sum(weights[inside])
    return out


# ---------------------------------------------------------------- features: hand-computed values


@pytest.fixture(scope="module")
def sine_and_noise(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """C4-M1: a 40 µV 10.3 Hz sine (its samples take 1000 phases per window, so the sample
    quantiles are the sine's); O1-M2: white noise of 20 µV; 16 windows, all scored N2."""
    rng = np.random.default_rng(0)
    n = 16
    sine = 40.0 * np.sin(2 * np.pi * 10.3 * np.arange(n * T) / SFREQ + 0.3)
    noise = rng.normal(0.0, 20.0, n * T)
    signal = np.stack([sine, noise]).reshape(2, n, T).transpose(1, 0, 2)
    path = tmp_path_factory.mktemp("sine") / "store.zarr"
    return _store(path, {"r1": (signal, np.full(n, 2))}, ["C4-M1", "O1-M2"])


def test_a_10_hz_sine_lands_in_alpha_with_its_amplitude(sine_and_noise: Path) -> None:
    table = sleep_features(sine_and_noise, ["r1"], context=False)
    inner = slice(1, -1)  # the whole-record filter's edges aside
    relative = {b: _column(table, f"C4-M1_eeg_{b}")[inner] for b in BANDS}
    assert np.all(relative["alpha"] > 0.97)
    for band in ("sdelta", "fdelta", "theta", "sigma", "beta"):
        assert np.all(relative[band] < 0.02), band
    assert np.allclose(sum(relative.values()), 1.0, atol=0.02)
    amplitude = 40.0
    np.testing.assert_allclose(
        _column(table, "C4-M1_eeg_std")[inner], amplitude / 2**0.5, rtol=0.01
    )
    np.testing.assert_allclose(
        _column(table, "C4-M1_eeg_iqr")[inner], amplitude * 2**0.5, rtol=0.01
    )
    # Welch with median averaging (YASA's choice) divides by scipy's chi-square median bias
    # b(11 segments) = 1 + sum_k (1/(2k+1) - 1/(2k)), k = 1..5: unbiased for noise, but a pure
    # sine's power A^2/2 comes out as A^2/2 / b.
    bias = 1 + sum(1 / (2 * k + 1) - 1 / (2 * k) for k in range(1, 6))
    np.testing.assert_allclose(
        _column(table, "C4-M1_eeg_abspow")[inner], amplitude**2 / 2 / bias, rtol=0.01
    )
    np.testing.assert_allclose(_column(table, "C4-M1_eeg_nzc")[inner], 618, atol=2)  # 2 per cycle
    # Hjorth mobility of a sampled sine: std(diff) / std = 2 sin(pi f / fs); complexity 1.
    np.testing.assert_allclose(
        _column(table, "C4-M1_eeg_hmob")[inner], 2 * np.sin(np.pi * 10.3 / SFREQ), rtol=0.01
    )
    np.testing.assert_allclose(_column(table, "C4-M1_eeg_hcomp")[inner], 1.0, rtol=0.02)
    # The other channel's features are its own (no channel mix-up): noise, not a sine.
    assert np.all(_column(table, "O1-M2_eeg_alpha") < 0.3)


def test_relative_and_absolute_power_follow_yasas_definition(sine_and_noise: Path) -> None:
    table = sleep_features(sine_and_noise, ["r1"], context=False)
    noise = InMemoryWindows(sine_and_noise, records=["r1"], normalize=False, progress=False)
    continuous = noise.windows[:, 1].numpy().astype(np.float64).reshape(-1)
    # YASA: 0.4-30 Hz FIR over the whole record, 30 s epochs, Welch (5 s Hamming, median),
    # Simpson's rule per band (edges included) over the 0.4-30 Hz Simpson total.
    filtered = mne.filter.filter_data(continuous, SFREQ, 0.4, 30.0, verbose=False)
    freqs, psd = scipy.signal.welch(
        filtered.reshape(-1, T), SFREQ, window="hamming", nperseg=500, average="median"
    )
    broad = (freqs >= 0.4) & (freqs <= 30)
    total = simpson(psd[:, broad], dx=0.2, axis=-1)
    for band, (low, high) in BANDS.items():
        inside = (freqs >= low) & (freqs <= high)
        expected = simpson(psd[:, inside], dx=0.2, axis=-1) / total
        np.testing.assert_allclose(_column(table, f"O1-M2_eeg_{band}"), expected, rtol=1e-4)
    np.testing.assert_allclose(
        _column(table, "O1-M2_eeg_abspow"), trapezoid(psd[:, broad], dx=0.2), rtol=1e-4
    )
    relative_sum = sum(_column(table, f"O1-M2_eeg_{band}") for band in BANDS)
    assert np.allclose(relative_sum, 1.0, atol=0.05)  # shared edge bins: close to, not exactly, 1
    epochs = filtered.reshape(-1, T)
    np.testing.assert_allclose(
        _column(table, "O1-M2_eeg_std"), epochs.std(axis=1, ddof=1), rtol=1e-4
    )
    assert np.all(np.abs(_column(table, "O1-M2_eeg_std") - 20 * 0.8) < 1.5)  # µV, not V


def test_single_window_and_context_feature_sets(sine_and_noise: Path) -> None:
    single = sleep_features(sine_and_noise, ["r1"], context=False)
    full = sleep_features(sine_and_noise, ["r1"], context=True)
    channels = ["C4-M1", "O1-M2"]
    assert single.columns == tuple(f"{c}_{name}" for c in channels for name in PER_EPOCH)
    per_channel = sorted(
        [*PER_EPOCH, *(f"{n}{s}" for n in PER_EPOCH for s in ("_c7min_norm", "_p2min_norm"))]
    )
    expected = tuple(f"{c}_{name}" for c in channels for name in per_channel)
    assert full.columns == (*expected, "time_hour", "time_norm")
    assert not single.has_context and full.has_context
    np.testing.assert_array_equal(full.single_window().features, single.features)
    assert single.features.dtype == np.float32 and single.features.shape == (16, 42)
    np.testing.assert_allclose(_column(full, "time_hour"), np.arange(16) * 30 / 3600, rtol=1e-6)
    np.testing.assert_allclose(_column(full, "time_norm"), np.arange(16) / 15, rtol=1e-6)
    only_c4 = sleep_features(sine_and_noise, ["r1"], context=False, channels=["C4-M1"])
    np.testing.assert_array_equal(only_c4.features, single.features[:, :21])


# ------------------------------------------------------- alignment, unscored windows, record edges


@pytest.fixture(scope="module")
def three_records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Three 60-window records, stage-coded sines, an amplitude per window, unscored windows at
    the start, the middle (a 300 µV one) and the end; r2 ends with three loud scored windows."""
    rng = np.random.default_rng(1)
    records = {}
    for record in ("r1", "r2", "r3"):
        stages = rng.integers(0, 5, 60)
        amplitudes = rng.uniform(10.0, 60.0, 60)
        stages[[0, 9, 59]] = -1
        amplitudes[9] = 300.0
        if record == "r2":
            amplitudes[-4:-1] = 250.0
        records[record] = (_stage_coded(stages, amplitudes, rng), stages)
    path = tmp_path_factory.mktemp("three") / "store.zarr"
    return _store(path, records, ["C4-M1", "O1-M2"]), records


def test_rows_follow_in_memory_windows_and_drop_unscored_windows(
    three_records: tuple[Path, dict],
) -> None:
    path, _ = three_records
    order = ["r3", "r1"]
    table = sleep_features(path, order, context=True)
    windows = InMemoryWindows(
        path, records=order, labelled_only=True, normalize=False, progress=False
    )
    assert len(table) == len(windows) == 114
    np.testing.assert_array_equal(table.labels, windows.labels)
    np.testing.assert_array_equal(table.windows, windows.window_index)
    assert table.records.tolist() == [windows.record_of(i) for i in range(len(windows))]
    assert (table.labels >= 0).all()
    # Each window's own amplitude (10-60 µV, distinct) comes back in its row.
    own_std = windows.windows[:, 0].numpy().std(axis=-1, ddof=1)
    np.testing.assert_allclose(_column(table, "C4-M1_eeg_std"), own_std, rtol=0.03)
    every = sleep_features(path, order, context=False, labelled_only=False)
    assert len(every) == 120 and (every.labels == -1).sum() == 6
    np.testing.assert_array_equal(every.windows, np.tile(np.arange(60), 2))


def test_rolling_context_crosses_unscored_windows_but_never_records(
    three_records: tuple[Path, dict],
) -> None:
    path, _ = three_records
    together = sleep_features(path, ["r2", "r1"], context=True)
    alone = sleep_features(path, ["r1"], context=True)
    np.testing.assert_array_equal(together.select(["r1"]).features, alone.features)
    for record in ("r1", "r2"):
        per_window = sleep_features(path, [record], context=False, labelled_only=False)
        std = _column(per_window, "C4-M1_eeg_std")  # every window, the 300 µV unscored one too
        scored = per_window.labels >= 0
        rows = together.select([record])
        np.testing.assert_allclose(
            _column(rows, "C4-M1_eeg_std_p2min_norm"),
            _robust_scale(_past_mean(std))[scored],
            rtol=1e-4,
            atol=1e-5,
        )
        np.testing.assert_allclose(
            _column(rows, "C4-M1_eeg_std_c7min_norm"),
            _robust_scale(_centred_triangle_mean(std))[scored],
            rtol=1e-4,
            atol=1e-5,
        )
    # The loud unscored window 9 of r1 lifts the past-2-min mean of windows 10-12 only.
    r1 = alone.select(["r1"])
    past = dict(zip(r1.windows.tolist(), _column(r1, "C4-M1_eeg_std_p2min_norm"), strict=True))
    assert min(past[10], past[11], past[12]) > max(past[w] for w in (1, 2, 3, 4, 5, 6, 7, 8))


def test_invalid_inputs_say_what_was_expected(
    three_records: tuple[Path, dict], tmp_path: Path
) -> None:
    path, _ = three_records
    with pytest.raises(InputError, match="record ids present"):
        sleep_features(path, ["r1", "nope"], context=False)
    with pytest.raises(InputError, match="sequence of record ids"):
        sleep_features(path, "r1", context=False)
    with pytest.raises(InputError, match="channels of the store"):
        sleep_features(path, ["r1"], context=False, channels=["Cz"])
    one_window = np.zeros((1, 2, T))
    rng = np.random.default_rng(2)
    short = _store(
        tmp_path / "short.zarr",
        {"s": (_stage_coded(np.zeros(10, int), np.full(10, 20.0), rng), np.zeros(10))},
        ["C4-M1", "O1-M2"],
    )
    with pytest.raises(InputError, match="at least 15 windows"):
        sleep_features(short, ["s"], context=True)
    assert len(sleep_features(short, ["s"], context=False)) == 10
    with pytest.raises(InputError, match="at least 15 windows"):
        yasa_pretrained_stages(short, ["s"])
    slow = _store(
        tmp_path / "slow.zarr", {"s": (np.zeros((1, 2, 1500)), [0])}, ["C4-M1", "O1-M2"], sfreq=50.0
    )
    with pytest.raises(InputError, match="above 80 Hz"):
        sleep_features(slow, ["s"], context=False)
    twenty = _store(
        tmp_path / "twenty.zarr", {"s": (one_window[..., :2000], [0])}, EEG[:2], window_seconds=20
    )
    with pytest.raises(InputError, match="30 s windows"):
        sleep_features(twenty, ["s"], context=False)


# ------------------------------------------------------------------------------- the classifier


def _clusters(n: int, seed: int, stages: tuple[int, ...] = (0, 1, 2, 3, 4)):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(0, 4, (5, 8))
    labels = rng.choice(stages, n)
    return (centres[labels] + rng.normal(0, 1, (n, 8))).astype(np.float32), labels


def test_the_stager_separates_synthetic_stages_reproducibly() -> None:
    x, y = _clusters(400, 0)
    x_test, y_test = _clusters(300, 1)
    model = fit_classical_stager(x, y, seed=3)
    params = model.get_params()
    assert {k: params[k] for k in YASA_LGBM_PARAMS} == YASA_LGBM_PARAMS
    assert params["class_weight"] == YASA_CLASS_WEIGHT and params["random_state"] == 3
    proba = predict_stage_proba(model, x_test)
    assert proba.shape == (300, 5)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    predictions = predict_stages(model, x_test)
    np.testing.assert_array_equal(predictions, proba.argmax(axis=1))
    assert (predictions == y_test).mean() > 0.95
    again = fit_classical_stager(x, y, seed=3)
    np.testing.assert_array_equal(predict_stage_proba(again, x_test), proba)


def test_a_stage_missing_from_training_gets_zero_probability() -> None:
    x, y = _clusters(300, 0, stages=(0, 1, 2, 4))
    model = fit_classical_stager(x, y, seed=0, class_weight="balanced", params={"n_estimators": 20})
    assert model.get_params()["class_weight"] == "balanced"
    x_test, _ = _clusters(100, 1)
    proba = predict_stage_proba(model, x_test)
    assert (proba[:, 3] == 0).all() and 3 not in set(predict_stages(model, x_test).tolist())
    assert fit_classical_stager(x, y, params={"n_estimators": 5}).get_params()["class_weight"] == {
        0: 1.0,
        1: 2.2,
        2: 1.0,
        4: 1.4,
    }


def test_the_stager_refuses_bad_inputs() -> None:
    x, y = _clusters(50, 0)
    with pytest.raises(InputError, match=r"stage codes in 0\.\.4"):
        fit_classical_stager(x, np.where(y == 0, -1, y))
    with pytest.raises(InputError, match="at least two distinct stages"):
        fit_classical_stager(x, np.zeros(50, dtype=int))
    with pytest.raises(InputError, match=r"\[N=50\] integer"):
        fit_classical_stager(x, y[:-1])
    with pytest.raises(InputError, match="class_weight"):
        fit_classical_stager(x, y, class_weight="inverse")  # type: ignore[arg-type]
    model = fit_classical_stager(x, y, params={"n_estimators": 5})
    with pytest.raises(InputError, match=r"\[N, 8\] features"):
        predict_stages(model, x[:, :7])


def test_classical_staging_end_to_end_on_stage_coded_windows(
    three_records: tuple[Path, dict],
) -> None:
    path, _ = three_records
    for context in (False, True):
        result = classical_staging(path, ["r1", "r2"], ["r3"], context=context, seed=0)
        windows = InMemoryWindows(path, records=["r3"], labelled_only=True, progress=False)
        np.testing.assert_array_equal(result.labels, windows.labels)
        np.testing.assert_array_equal(result.windows, windows.window_index)
        assert result.probabilities.shape == (57, 5)
        report = classification_metrics(result.labels, result.predictions, 5)
        assert report.accuracy > 0.9, (context, report.accuracy)
    with pytest.raises(InputError, match="disjoint"):
        classical_staging(path, ["r1", "r3"], ["r3"], context=False)


# ------------------------------------------------------------------- YASA's pretrained classifier


@pytest.fixture(scope="module")
def generated_night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One hour of the generated PC18 cohort, preprocessed as the store does (0.1-30 Hz over the
    whole recording, 100 Hz, 30 s windows from the first scored sample); two windows unscored."""
    record = synthesize_record(plan_cohort(1, 1.0, 3, 0.0)[0])
    eeg = mne.filter.filter_data(
        record.physical[:6].astype(np.float64), 200.0, 0.1, 30.0, verbose=False
    )[:, ::2]
    start = record.truth["scoring_start"] // 2
    stages = hypnogram_from_string(record.truth["hypnogram"]).astype(np.int64)
    n = min(len(stages), (eeg.shape[1] - start) // T)
    windows = eeg[:, start : start + n * T].reshape(6, n, T).transpose(1, 0, 2)
    stages = stages[:n].copy()
    stages[[5, 40]] = -1
    path = tmp_path_factory.mktemp("night") / "store.zarr"
    return _store(path, {"night": (windows, stages)}, EEG)


def test_yasa_pretrained_stages_a_generated_night(generated_night: Path) -> None:
    import yasa

    result = yasa_pretrained_stages(generated_night, ["night"])
    windows = InMemoryWindows(
        generated_night, records=["night"], labelled_only=True, normalize=False, progress=False
    )
    np.testing.assert_array_equal(result.labels, windows.labels)
    np.testing.assert_array_equal(result.windows, windows.window_index)
    np.testing.assert_allclose(result.probabilities.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(result.predictions, result.probabilities.argmax(axis=1))
    # The same as running YASA by hand on the whole stored night of C4-M1 (YASA's own int codes).
    every = InMemoryWindows(generated_night, records=["night"], normalize=False, progress=False)
    signal = every.windows[:, 3].numpy().astype(np.float64).reshape(1, -1) * 1e-6
    raw = mne.io.RawArray(signal, mne.create_info(["C4-M1"], SFREQ, "eeg"), verbose=False)
    with warnings.catch_warnings():  # the shipped model was pickled by scikit-learn 0.24
        warnings.simplefilter("ignore")
        by_hand = yasa.SleepStaging(raw, eeg_name="C4-M1").predict().as_int().to_numpy()
    np.testing.assert_array_equal(result.predictions, by_hand[windows.window_index])
    # Out of domain, yet far above chance on the generated cohort.
    assert classification_metrics(result.labels, result.predictions, 5).cohen_kappa > 0.3
    everything = yasa_pretrained_stages(generated_night, ["night"], labelled_only=False)
    assert len(everything) == len(every) and (everything.labels == -1).sum() == 2


def test_yasa_pretrained_needs_a_central_channel_or_a_named_one(
    three_records: tuple[Path, dict], tmp_path: Path
) -> None:
    path, records = three_records  # channels C4-M1, O1-M2
    assert len(yasa_pretrained_stages(path, ["r1"])) == 57
    signal, stages = records["r1"]
    no_central = _store(tmp_path / "occipital.zarr", {"r1": (signal, stages)}, ["O1-M2", "O2-M1"])
    with pytest.raises(InputError, match="C4-M1 or C3-M2"):
        yasa_pretrained_stages(no_central, ["r1"])
    assert len(yasa_pretrained_stages(no_central, ["r1"], eeg_channel="O2-M1")) == 57
    with pytest.raises(InputError, match="eeg_channel"):
        yasa_pretrained_stages(no_central, ["r1"], eeg_channel="C4-M1")
    c3 = _store(tmp_path / "c3.zarr", {"r1": (signal, stages)}, ["C3-M2", "O1-M2"])
    both = yasa_pretrained_stages(c3, ["r1"])
    named = yasa_pretrained_stages(c3, ["r1"], eeg_channel="C3-M2")
    np.testing.assert_array_equal(both.probabilities, named.probabilities)


def test_pretrained_channel_is_the_channel_yasa_stages(
    three_records: tuple[Path, dict], tmp_path: Path
) -> None:
    path, records = three_records  # channels C4-M1, O1-M2
    signal, stages = records["r1"]
    assert pretrained_channel(path) == "C4-M1"
    assert pretrained_channel(path, "O1-M2") == "O1-M2"
    stores = {
        "C3-M2": ["O1-M2", "C3-M2"],
        "C4-A1": ["Fpz-Cz", "C4-A1"],  # SHHS's central channel before Sleep-EDF's
        "Fpz-Cz": ["Pz-Oz", "Fpz-Cz"],
    }
    for expected, channels in stores.items():
        store = _store(tmp_path / f"{expected}.zarr", {"r1": (signal, stages)}, channels)
        assert pretrained_channel(store) == expected
    sleep_edf = tmp_path / "Fpz-Cz.zarr"
    by_default = yasa_pretrained_stages(sleep_edf, ["r1"])
    named = yasa_pretrained_stages(sleep_edf, ["r1"], eeg_channel="Fpz-Cz")
    np.testing.assert_array_equal(by_default.probabilities, named.probabilities)
    with pytest.raises(InputError, match="eeg_channel"):
        pretrained_channel(sleep_edf, "C4-M1")


def test_keep_windows_selects_the_labelled_windows_of_a_budget() -> None:
    table = FeatureTable(
        features=np.arange(12, dtype=np.float32).reshape(6, 2),
        labels=np.array([0, 1, 2, 0, 1, 2]),
        records=np.array(["a", "a", "a", "b", "b", "b"]),
        windows=np.array([3, 4, 5, 0, 1, 2]),
        columns=("x", "y"),
    )
    kept = table.keep_windows({"a": [4], "b": np.array([0, 2]), "c": [1]})
    assert kept.records.tolist() == ["a", "b", "b"] and kept.windows.tolist() == [4, 0, 2]
    assert kept.features[:, 0].tolist() == [2.0, 6.0, 10.0] and kept.labels.tolist() == [1, 0, 2]
    assert kept.columns == table.columns and len(table.keep_windows({})) == 0
