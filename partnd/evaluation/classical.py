"""Classical feature-based sleep staging: the reference rows a sleep researcher would trust.

Sleep researchers stage with hand-made features and a gradient-boosted classifier. This module
builds those reference rows on a ``partnd-sleep`` store with **YASA** itself (Vallat & Walker 2021,
"An open-source, high-performance tool for automated sleep staging", eLife 10:e70092,
doi:10.7554/eLife.70092) and LightGBM, so a learned pipeline can be compared with what the field
would do on the same labelled subjects and the same test windows. Three rows:

1. **Single-window features + LightGBM** (``context=False``). YASA's per-epoch features of every
   EEG channel, computed by :meth:`yasa.SleepStaging.get_features` on the record's continuous
   signal: standard deviation, interquartile range, skewness, kurtosis, number of zero crossings,
   Hjorth mobility and complexity, relative power in six bands (``sdelta`` 0.4–1, ``fdelta`` 1–4,
   ``theta`` 4–8, ``alpha`` 8–12, ``sigma`` 12–16, ``beta`` 16–30 Hz; Welch, 5 s Hamming segments,
   median average, Simpson's rule, divided by the 0.4–30 Hz power), the ratios delta/theta,
   delta/sigma, delta/beta and alpha/theta, absolute 0.4–30 Hz power, permutation entropy, Higuchi
   and Petrosian fractal dimensions: 21 columns per channel. Nothing about a window's neighbours
   enters these columns (but for the few seconds YASA's 0.4–30 Hz FIR filter reaches across a
   window edge, as the store's own whole-night band-pass does for every learned model).
2. **Features with context + LightGBM** (``context=True``). YASA's full set: the 21 columns above,
   each also smoothed by a centred triangular-weighted rolling mean over 15 epochs (7.5 min,
   ``*_c7min_norm``) and by a past rolling mean over 4 epochs (2 min, ``*_p2min_norm``), both
   robust-z-scored over the whole record (median, 5–95 % quantile range), plus ``time_hour`` and
   ``time_norm`` (the epoch's time from the first stored window, in hours and as a fraction of
   the record). The ``*_norm`` columns count as context: they use the neighbouring epochs *and*
   the whole night's distribution; so do the time columns. 63 columns per channel + 2.
3. **YASA's pretrained staging, zero labels** (:func:`yasa_pretrained_stages`): YASA's shipped
   EEG-only LightGBM classifier (``clf_eeg_lgb_0.5.0``, trained on ~3000 nights of the National
   Sleep Research Resource) on one central channel. On real PhysioNet 2018 data this is an
   off-the-shelf tool that needs no labels; **on partnd's generated PC18-format cohort it is out of
   domain** (synthetic EEG whose spectra only roughly follow real sleep): read its number there as
   "what an off-the-shelf tool makes of this data", not as YASA's accuracy.

YASA takes one EEG channel; every store channel (or the ``channels`` asked for) is run separately
and its columns are prefixed with the channel name (``"C4-M1_eeg_alpha"``); ``time_hour`` and
``time_norm`` appear once. Features are computed per record on the concatenation of the record's
stored windows (in volts for MNE, at the store's ``sfreq``; YASA resamples to 100 Hz), so the
rolling windows see unscored windows and never cross into another record; unscored windows are
dropped afterwards. Rows come in the order :class:`partnd.datasets.sleep_windows.InMemoryWindows`
gives for the same ``records`` (records as given, windows in record order). Windows a store dropped
during preprocessing (e.g. flat ones) are not in the signal: the rolling windows count stored
windows.

The classifier is LightGBM with the hyper-parameters of YASA's published classifiers
(:data:`YASA_LGBM_PARAMS`, read from the shipped ``clf_eeg_lgb_0.5.0.joblib``; the training code is
github.com/raphaelvallat/yasa_classifier) and YASA's class weights (:data:`YASA_CLASS_WEIGHT`:
N1 2.2, N3 1.2, REM 1.4, W and N2 1), seeded.

Needs the ``sleep`` extra: ``pip install "partnd[sleep]"`` (yasa, lightgbm).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.store import SleepStore

if TYPE_CHECKING:
    import pandas as pd
    from lightgbm import LGBMClassifier

__all__ = [
    "CONTEXT_SUFFIXES",
    "MIN_CONTEXT_WINDOWS",
    "MIN_SFREQ",
    "PRETRAINED_CHANNELS",
    "TIME_COLUMNS",
    "YASA_CLASS_WEIGHT",
    "YASA_LGBM_PARAMS",
    "FeatureTable",
    "StagePredictions",
    "classical_staging",
    "fit_classical_stager",
    "is_context_column",
    "predict_stage_proba",
    "predict_stages",
    "pretrained_channel",
    "sleep_features",
    "yasa_pretrained_stages",
]

NUM_STAGES = 5
"""Stage codes 0..4 = W, N1, N2, N3, REM (the store's ``stage_names``)."""

MIN_SFREQ = 80.0
"""YASA's minimum sampling frequency (it asserts ``sf > 80``; its bands reach 30 Hz)."""

MIN_CONTEXT_WINDOWS = 15
"""Windows a record needs for the context features: the centred rolling window's 15 epochs."""

WINDOW_SECONDS = 30.0
"""YASA stages 30 s epochs; the store's windows must be 30 s."""

CONTEXT_SUFFIXES: tuple[str, ...] = ("_c7min_norm", "_p2min_norm")
"""Suffixes of YASA's rolling, whole-night-normalised columns (context columns)."""

TIME_COLUMNS: tuple[str, ...] = ("time_hour", "time_norm")
"""YASA's position-in-the-night columns (context columns, one copy for all channels)."""

PRETRAINED_CHANNELS: tuple[str, ...] = ("C4-M1", "C3-M2", "C4-A1", "C3-A2", "Fpz-Cz")
"""Channels YASA's pretrained classifier is run on by default, in order of preference: the
central derivations it was made for (against a mastoid, or an ear as SHHS records them), then
Sleep-EDF's Fpz-Cz (the channel YASA's users stage Sleep-EDF with)."""

YASA_LGBM_PARAMS: dict[str, Any] = {
    "boosting_type": "gbdt",
    "n_estimators": 400,
    "max_depth": 5,
    "num_leaves": 90,
    "colsample_bytree": 0.5,
    "learning_rate": 0.1,
    "importance_type": "gain",
}
"""LightGBM settings of YASA's published classifiers (``clf_eeg_lgb_0.5.0.joblib``'s
``get_params()``; the other parameters are LightGBM's defaults there and here)."""

YASA_CLASS_WEIGHT: dict[int, float] = {0: 1.0, 1: 2.2, 2: 1.0, 3: 1.2, 4: 1.4}
"""YASA's class weights (``{'W': 1, 'N1': 2.2, 'N2': 1, 'N3': 1.2, 'R': 1.4}``) by stage code."""

_YASA_STAGE_CODES: dict[str, int] = {
    "W": 0,
    "WAKE": 0,
    "N1": 1,
    "N2": 2,
    "N3": 3,
    "R": 4,
    "REM": 4,
}


@dataclass(frozen=True)
class FeatureTable:
    """Per-window features of some records, one row per window.

    Attributes:
        features: ``[N, F]`` float32 feature matrix (NaN where YASA gives NaN, e.g. a flat epoch's
            skewness).
        labels: ``[N]`` int64 stage codes ``0..4`` (``-1`` only with ``labelled_only=False``).
        records: ``[N]`` record id of every row.
        windows: ``[N]`` int64 window index inside its record.
        columns: ``F`` column names (``"<channel>_<yasa name>"``, then ``time_hour``,
            ``time_norm`` when the table has context).
    """

    features: np.ndarray
    labels: np.ndarray
    records: np.ndarray
    windows: np.ndarray
    columns: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def has_context(self) -> bool:
        """Whether any column uses neighbouring windows or the whole night."""
        return any(is_context_column(name) for name in self.columns)

    def single_window(self) -> FeatureTable:
        """The same rows restricted to the single-window (per-epoch) columns."""
        keep = [i for i, name in enumerate(self.columns) if not is_context_column(name)]
        return FeatureTable(
            features=np.ascontiguousarray(self.features[:, keep]),
            labels=self.labels,
            records=self.records,
            windows=self.windows,
            columns=tuple(self.columns[i] for i in keep),
        )

    def _rows(self, rows: np.ndarray) -> FeatureTable:
        """The table restricted to ``rows`` (integer positions or a boolean mask), all columns."""
        return FeatureTable(
            features=self.features[rows],
            labels=self.labels[rows],
            records=self.records[rows],
            windows=self.windows[rows],
            columns=self.columns,
        )

    def select(self, records: Sequence[str]) -> FeatureTable:
        """The rows of ``records``, in the order given (each record's rows in window order).

        Raises:
            InputError: A record has no row in this table.
        """
        check(not isinstance(records, str), "records", "a sequence of record ids", records)
        wanted = list(dict.fromkeys(records))
        present = set(self.records.tolist())
        missing = [r for r in wanted if r not in present]
        check(not missing, "records", "records present in this feature table", missing)
        rows = np.concatenate([np.flatnonzero(self.records == r) for r in wanted])
        return self._rows(rows)

    def keep_windows(self, windows: Mapping[str, Sequence[int]]) -> FeatureTable:
        """The rows of the given windows only (e.g. a budget of labelled windows per stage); the
        context columns keep what the whole night gave them.

        Args:
            windows: ``{record: window indices}`` to keep; other records' rows are dropped.
        """
        kept = {(str(r), int(w)) for r, indices in windows.items() for w in indices}
        rows = np.array(
            [(str(r), int(w)) in kept for r, w in zip(self.records, self.windows, strict=True)],
            dtype=bool,
        )
        return self._rows(rows)


@dataclass(frozen=True)
class StagePredictions:
    """Predicted stages of some windows, aligned with :class:`InMemoryWindows` for the same records.

    Attributes:
        predictions: ``[N]`` int64 predicted stage codes ``0..4``.
        probabilities: ``[N, 5]`` float64 probability of W, N1, N2, N3, REM.
        labels: ``[N]`` int64 scored stage codes (``-1`` only with ``labelled_only=False``).
        records: ``[N]`` record id of every row.
        windows: ``[N]`` int64 window index inside its record.
    """

    predictions: np.ndarray
    probabilities: np.ndarray
    labels: np.ndarray
    records: np.ndarray
    windows: np.ndarray

    def __len__(self) -> int:
        return len(self.predictions)


def is_context_column(name: str) -> bool:
    """Whether a feature column uses neighbouring windows or the whole night (see module doc)."""
    return name in TIME_COLUMNS or name.endswith(CONTEXT_SUFFIXES)


def _import_yasa() -> Any:
    try:
        import yasa
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            'partnd.evaluation.classical needs YASA and LightGBM: pip install "partnd[sleep]"'
        ) from error
    return yasa


def _open_store(store: str | Path | SleepStore) -> SleepStore:
    opened = store if isinstance(store, SleepStore) else SleepStore(store)
    check(
        opened.sfreq > MIN_SFREQ,
        "store",
        f"a store sampled above {MIN_SFREQ:g} Hz (YASA's minimum: its bands reach 30 Hz and it "
        "resamples to 100 Hz)",
        f"sfreq={opened.sfreq:g} Hz",
    )
    check(
        abs(opened.window_seconds - WINDOW_SECONDS) < 1e-9,
        "store",
        f"a store of {WINDOW_SECONDS:g} s windows (YASA stages 30 s epochs)",
        f"window_seconds={opened.window_seconds:g}",
    )
    return opened


def _check_records(
    store: SleepStore, records: Sequence[str], argument: str, min_windows: int, why: str
) -> list[str]:
    check(
        not isinstance(records, str) and len(records) > 0,
        argument,
        "a non-empty sequence of record ids",
        records,
    )
    known = set(store.record_ids())
    unknown = [r for r in records if r not in known]
    check(not unknown, argument, f"record ids present in the store ({len(known)})", unknown)
    selected = list(dict.fromkeys(records))
    short = {r: store.n_windows(r) for r in selected if store.n_windows(r) < min_windows}
    check(
        not short,
        argument,
        f"records of at least {min_windows} windows ({why})",
        f"records with fewer windows: {short}",
    )
    return selected


def _check_channels(store: SleepStore, channels: Sequence[str] | None) -> list[str]:
    if channels is None:
        return list(store.channels)
    check(
        not isinstance(channels, str) and len(channels) > 0,
        "channels",
        "a non-empty sequence of channel names",
        channels,
    )
    unknown = [c for c in channels if c not in store.channels]
    check(not unknown, "channels", f"channels of the store {store.channels}", unknown)
    return list(dict.fromkeys(channels))


def _yasa_staging(signal_uv: np.ndarray, sfreq: float, channel: str) -> Any:
    """A :class:`yasa.SleepStaging` on one continuous EEG channel given in µV."""
    import mne

    yasa = _import_yasa()
    info = mne.create_info([channel], sfreq, "eeg")
    raw = mne.io.RawArray(signal_uv.astype(np.float64)[None] * 1e-6, info, verbose=False)
    return yasa.SleepStaging(raw, eeg_name=channel)


def _record_signal(store: SleepStore, record: str) -> np.ndarray:
    """The record's stored windows as one continuous ``[C, n_windows * T]`` signal in µV."""
    block = store.read_windows(record, 0, store.n_windows(record))
    return np.ascontiguousarray(block.transpose(1, 0, 2).reshape(block.shape[1], -1))


def _record_features(store_path: str, record: str, channels: Sequence[str]) -> pd.DataFrame:
    """YASA's full feature frame of every window of one record, columns prefixed by channel."""
    import pandas as pd

    store = SleepStore(store_path)
    signal = _record_signal(store, record)
    n_windows = store.n_windows(record)
    frames: list[pd.DataFrame] = []
    time: pd.DataFrame | None = None
    for channel in channels:
        staging = _yasa_staging(signal[store.channels.index(channel)], store.sfreq, channel)
        table = staging.get_features()
        if len(table) != n_windows:  # pragma: no cover - YASA's epoching of whole 30 s windows
            raise RuntimeError(
                f"YASA returned {len(table)} epochs for {n_windows} windows of {record!r}"
            )
        time = table[list(TIME_COLUMNS)]
        frames.append(table.drop(columns=list(TIME_COLUMNS)).add_prefix(f"{channel}_"))
    assert time is not None
    frames.append(time)
    return pd.concat(frames, axis=1).reset_index(drop=True).astype(np.float32)


def sleep_features(
    store: str | Path | SleepStore,
    records: Sequence[str],
    *,
    context: bool,
    channels: Sequence[str] | None = None,
    labelled_only: bool = True,
    n_jobs: int = 1,
) -> FeatureTable:
    """YASA's sleep-staging features of every window of ``records``, per EEG channel.

    Args:
        store: A ``partnd-sleep`` store (path or :class:`SleepStore`), 30 s windows, above 80 Hz.
        records: Record ids; rows follow this order (duplicates ignored), each record's windows in
            stored order: the order of ``InMemoryWindows(store, records=records,
            labelled_only=labelled_only)``.
        context: ``False``: the single-window columns (21 per channel); ``True``: YASA's full set
            (63 per channel + ``time_hour``, ``time_norm``). See the module docstring.
        channels: Channels to compute features on (default every store channel), in this order.
        labelled_only: Drop unscored windows (after the features are computed, so the rolling
            context still sees them).
        n_jobs: Records computed in parallel (joblib processes; ``-1`` = all cores).

    Returns:
        A :class:`FeatureTable` with ``N`` rows (labelled windows of ``records``) and
        ``F = 21·C`` (single window) or ``F = 63·C + 2`` (context) columns.

    Raises:
        InputError: Unknown records or channels, a store below 80 Hz or not of 30 s windows, a
            record shorter than 15 windows with ``context=True``, or no row at all.
    """
    opened = _open_store(store)
    min_windows = MIN_CONTEXT_WINDOWS if context else 1
    selected = _check_records(
        opened, records, "records", min_windows, "YASA's centred rolling window is 15 epochs"
    )
    chosen = _check_channels(opened, channels)
    check(isinstance(n_jobs, int) and n_jobs != 0, "n_jobs", "a non-zero int", n_jobs)
    path = str(opened.path)
    if n_jobs == 1 or len(selected) == 1:
        frames = [_record_features(path, record, chosen) for record in selected]
    else:
        from joblib import Parallel, delayed

        frames = Parallel(n_jobs=n_jobs)(
            delayed(_record_features)(path, record, chosen) for record in selected
        )
    parts: dict[str, list[np.ndarray]] = {"x": [], "y": [], "r": [], "w": []}
    columns = tuple(str(c) for c in frames[0].columns)
    for record, frame in zip(selected, frames, strict=True):
        stages = opened.stages(record).astype(np.int64)
        keep = np.flatnonzero(stages >= 0) if labelled_only else np.arange(len(stages))
        parts["x"].append(frame.to_numpy(dtype=np.float32)[keep])
        parts["y"].append(stages[keep])
        parts["r"].append(np.full(len(keep), record, dtype=object))
        parts["w"].append(keep.astype(np.int64))
    table = FeatureTable(
        features=np.concatenate(parts["x"]),
        labels=np.concatenate(parts["y"]),
        records=np.concatenate(parts["r"]),
        windows=np.concatenate(parts["w"]),
        columns=columns,
    )
    if len(table) == 0:
        raise InputError(
            f"records: expected at least one scored window, got none in {len(selected)} record(s)"
        )
    return table if context else table.single_window()


def _check_features(features: Any, argument: str) -> np.ndarray:
    array = np.asarray(features, dtype=np.float32)
    check(
        array.ndim == 2 and array.shape[0] > 0 and array.shape[1] > 0,
        argument,
        "a [N, F] feature matrix with N, F >= 1",
        features,
    )
    return array


def fit_classical_stager(
    features: Any,
    labels: Any,
    *,
    seed: int = 0,
    class_weight: str | Mapping[int, float] | None = "yasa",
    n_jobs: int = 1,
    params: Mapping[str, Any] | None = None,
) -> LGBMClassifier:
    """Train LightGBM on sleep features as YASA trains its classifiers.

    Args:
        features: ``[N, F]`` features (e.g. :attr:`FeatureTable.features`; NaN allowed).
        labels: ``[N]`` stage codes ``0..4``; at least two distinct stages.
        seed: LightGBM's ``random_state`` (column subsampling, ties).
        class_weight: ``"yasa"`` (:data:`YASA_CLASS_WEIGHT`), ``"balanced"``, a ``{code: weight}``
            mapping, or ``None``. Weights of stages absent from ``labels`` are ignored.
        n_jobs: LightGBM threads.
        params: LightGBM parameters replacing :data:`YASA_LGBM_PARAMS`' values.

    Returns:
        A fitted :class:`lightgbm.LGBMClassifier` (``classes_`` = the stage codes seen).

    Raises:
        InputError: Shapes disagree, a label is outside ``0..4``, only one stage is present, or
            ``class_weight`` is not one of the forms above.
    """
    from lightgbm import LGBMClassifier

    x = _check_features(features, "features")
    y = np.asarray(labels)
    check(
        y.ndim == 1 and len(y) == len(x) and np.issubdtype(y.dtype, np.integer),
        "labels",
        f"[N={len(x)}] integer stage codes",
        labels,
    )
    check(
        bool(((y >= 0) & (y < NUM_STAGES)).all()),
        "labels",
        f"stage codes in 0..{NUM_STAGES - 1} (drop unscored windows first)",
        f"values {sorted(set(y.tolist()) - set(range(NUM_STAGES)))}",
    )
    present = sorted(set(y.tolist()))
    check(len(present) >= 2, "labels", "at least two distinct stages", f"only {present}")
    weights: str | dict[int, float] | None
    if class_weight == "yasa":
        weights = {k: YASA_CLASS_WEIGHT[k] for k in present}
    elif class_weight is None or class_weight == "balanced":
        weights = class_weight
    elif isinstance(class_weight, Mapping):
        unknown = sorted(set(class_weight) - set(range(NUM_STAGES)))
        check(not unknown, "class_weight", "stage codes 0..4 as keys", unknown)
        weights = {int(k): float(class_weight.get(k, 1.0)) for k in present}
    else:
        raise InputError(
            f"class_weight: expected 'yasa', 'balanced', a mapping or None, got {class_weight!r}"
        )
    settings = {**YASA_LGBM_PARAMS, **(params or {})}
    model = LGBMClassifier(
        **settings, class_weight=weights, random_state=seed, n_jobs=n_jobs, verbose=-1
    )
    model.fit(x, y.astype(np.int64))
    return model


def predict_stage_proba(model: LGBMClassifier, features: Any) -> np.ndarray:
    """Stage probabilities ``[N, 5]`` (W, N1, N2, N3, REM); 0 for stages the model never saw."""
    x = _check_features(features, "features")
    expected = int(model.n_features_in_)
    check(x.shape[1] == expected, "features", f"[N, {expected}] features", features)
    proba = np.asarray(model.predict_proba(x), dtype=np.float64)
    full = np.zeros((len(x), NUM_STAGES), dtype=np.float64)
    full[:, np.asarray(model.classes_, dtype=np.int64)] = proba
    return full


def predict_stages(model: LGBMClassifier, features: Any) -> np.ndarray:
    """Predicted stage codes ``[N]`` int64 (the most probable stage)."""
    return predict_stage_proba(model, features).argmax(axis=1).astype(np.int64)


def classical_staging(
    store: str | Path | SleepStore,
    train_records: Sequence[str],
    test_records: Sequence[str],
    *,
    context: bool,
    seed: int = 0,
    channels: Sequence[str] | None = None,
    n_jobs: int = 1,
) -> StagePredictions:
    """Train YASA-feature LightGBM on ``train_records``, predict the labelled windows of
    ``test_records``.

    Args:
        store: A ``partnd-sleep`` store.
        train_records: Records whose scored windows train the classifier.
        test_records: Records to stage; rows follow ``InMemoryWindows(store,
            records=test_records, labelled_only=True)``.
        context: Single-window (``False``) or full YASA features with context (``True``).
        seed: LightGBM seed.
        channels: EEG channels to use (default all the store's).
        n_jobs: Feature-extraction processes and LightGBM threads.

    Returns:
        :class:`StagePredictions` of the test windows.

    Raises:
        InputError: As :func:`sleep_features`, or when a record is in both sets.
    """
    check(
        not isinstance(train_records, str) and not isinstance(test_records, str),
        "train_records, test_records",
        "sequences of record ids",
        f"{train_records!r}, {test_records!r}",
    )
    overlap = sorted(set(train_records) & set(test_records))
    check(not overlap, "test_records", "records disjoint from train_records", overlap)
    train = sleep_features(store, train_records, context=context, channels=channels, n_jobs=n_jobs)
    test = sleep_features(store, test_records, context=context, channels=channels, n_jobs=n_jobs)
    model = fit_classical_stager(train.features, train.labels, seed=seed, n_jobs=n_jobs)
    probabilities = predict_stage_proba(model, test.features)
    return StagePredictions(
        predictions=probabilities.argmax(axis=1).astype(np.int64),
        probabilities=probabilities,
        labels=test.labels,
        records=test.records,
        windows=test.windows,
    )


def pretrained_channel(store: str | Path | SleepStore, eeg_channel: str | None = None) -> str:
    """The channel :func:`yasa_pretrained_stages` stages ``store`` from.

    Args:
        store: A ``partnd-sleep`` store.
        eeg_channel: A channel named by the caller, or None for the first of
            :data:`PRETRAINED_CHANNELS` the store holds.

    Returns:
        ``eeg_channel`` when it is a store channel, else the preferred one (e.g. ``"Fpz-Cz"`` on a
        Sleep-EDF store).

    Raises:
        InputError: No channel of :data:`PRETRAINED_CHANNELS` and none named, or the named one is
            not a store channel.
    """
    store = _open_store(store)
    if eeg_channel is None:
        usable = [c for c in PRETRAINED_CHANNELS if c in store.channels]
        central = " or ".join(PRETRAINED_CHANNELS)
        check(
            bool(usable),
            "store",
            f"a central EEG channel for YASA's pretrained classifier ({central}; or name another "
            "channel with eeg_channel=)",
            f"channels {store.channels}",
        )
        return usable[0]
    check(
        isinstance(eeg_channel, str) and eeg_channel in store.channels,
        "eeg_channel",
        f"a channel of the store {store.channels} (preferably central: C4-M1 or C3-M2)",
        repr(eeg_channel),
    )
    return eeg_channel


def yasa_pretrained_stages(
    store: str | Path | SleepStore,
    records: Sequence[str],
    eeg_channel: str | None = None,
    *,
    labelled_only: bool = True,
) -> StagePredictions:
    """Stage ``records`` with YASA's pretrained EEG-only classifier: no labels used.

    YASA's ``clf_eeg`` LightGBM (trained on ~3000 NSRR nights, Vallat & Walker 2021) runs on one
    central EEG channel of each record's whole stored night (its rolling context and per-night
    normalisation included). On real PhysioNet 2018 data it is the off-the-shelf baseline a sleep
    researcher would run first. **On partnd's generated PC18-format cohort it is out of domain**:
    the synthetic EEG only roughly follows real sleep spectra, so its score there says what an
    off-the-shelf tool makes of the data, not how good YASA is.

    Args:
        store: A ``partnd-sleep`` store (above 80 Hz, 30 s windows).
        records: Records to stage; rows follow ``InMemoryWindows(store, records=records,
            labelled_only=labelled_only)``.
        eeg_channel: The channel to stage from; default the first of
            :data:`PRETRAINED_CHANNELS` the store holds (:func:`pretrained_channel`). Another
            store channel may be named (YASA recommends a central electrode referenced to a
            mastoid).
        labelled_only: Keep only scored windows (all windows are staged either way).

    Returns:
        :class:`StagePredictions`.

    Raises:
        InputError: The store has no channel of :data:`PRETRAINED_CHANNELS` and no
            ``eeg_channel`` was named, the
            named channel is not in the store, a record is unknown or shorter than 15 windows, or
            the store is below 80 Hz or not of 30 s windows.
    """
    opened = _open_store(store)
    channel = pretrained_channel(opened, eeg_channel)
    selected = _check_records(
        opened,
        records,
        "records",
        MIN_CONTEXT_WINDOWS,
        "YASA's classifier uses a 15-epoch centred rolling window",
    )
    parts: dict[str, list[np.ndarray]] = {"p": [], "q": [], "y": [], "r": [], "w": []}
    for record in selected:
        signal = _record_signal(opened, record)[opened.channels.index(channel)]
        staging = _yasa_staging(signal, opened.sfreq, channel)
        with warnings.catch_warnings():
            # The shipped classifier was pickled with scikit-learn 0.24 (a LabelEncoder inside).
            warnings.filterwarnings("ignore", message=".*Trying to unpickle estimator.*")
            hypnogram = staging.predict()
        codes = np.array([_YASA_STAGE_CODES[str(s)] for s in hypnogram.hypno], dtype=np.int64)
        proba = np.zeros((len(codes), NUM_STAGES), dtype=np.float64)
        for name in hypnogram.proba.columns:
            proba[:, _YASA_STAGE_CODES[str(name)]] = hypnogram.proba[name].to_numpy()
        stages = opened.stages(record).astype(np.int64)
        check(
            len(codes) == len(stages),
            "records",
            "records whose windows YASA epochs one to one",
            f"{len(codes)} epochs for {len(stages)} windows of {record!r}",
        )
        keep = np.flatnonzero(stages >= 0) if labelled_only else np.arange(len(stages))
        parts["p"].append(codes[keep])
        parts["q"].append(proba[keep])
        parts["y"].append(stages[keep])
        parts["r"].append(np.full(len(keep), record, dtype=object))
        parts["w"].append(keep.astype(np.int64))
    return StagePredictions(
        predictions=np.concatenate(parts["p"]),
        probabilities=np.concatenate(parts["q"]),
        labels=np.concatenate(parts["y"]),
        records=np.concatenate(parts["r"]),
        windows=np.concatenate(parts["w"]),
    )
