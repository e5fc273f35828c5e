"""SignalInfo: the record of what a model was trained on, and the check of data against it."""

from __future__ import annotations

import pytest

from partnd._validation import InputError
from partnd.signal_info import SignalInfo, match_signal

STORE = SignalInfo(3, (50,), ("F3-M2", "C4-M1", "O1-M2"), 100.0, "record")


def test_round_trip_and_description() -> None:
    assert SignalInfo.from_dict(STORE.to_dict()) == STORE
    old = {"in_chans": 2, "spatial_shape": [30], "ch_names": None, "sfreq": None}
    assert SignalInfo.from_dict(old).normalization is None  # files written before it existed
    assert STORE.describe() == (
        "3 channels (F3-M2, C4-M1, O1-M2) at 100 Hz, items of 50 samples (0.5 s), "
        "record normalisation"
    )


def test_channels_are_picked_by_name_and_a_mismatch_is_refused() -> None:
    data = SignalInfo(4, (50,), ("O1-M2", "X", "C4-M1", "F3-M2"), 100.0, "record")
    assert match_signal(STORE, data, "data") == (3, 2, 0)
    assert match_signal(STORE, STORE, "data") is None
    with pytest.raises(InputError, match=r"data: expected the channels .*missing \['F3-M2'\]"):
        match_signal(STORE, SignalInfo(2, (50,), ("C4-M1", "O1-M2"), 100.0), "data")
    with pytest.raises(InputError, match="sampled at 100 Hz"):
        match_signal(STORE, SignalInfo(3, (50,), STORE.ch_names, 200.0), "data")


def test_windows_must_be_normalised_as_the_model_was_trained() -> None:
    window = SignalInfo(3, (50,), STORE.ch_names, 100.0, "window")
    with pytest.raises(InputError, match="data: expected windows with record normalisation"):
        match_signal(STORE, window, "data")
    unknown = SignalInfo(3, (50,), STORE.ch_names, 100.0)  # an array: used as given
    assert match_signal(STORE, unknown, "data") is None
