"""SleepSequenceDataset: sequences of consecutive windows that never cross a record or a gap."""

from __future__ import annotations

import pickle

import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.engine.normalization import instance_normalize

N_TIMES = 50


@pytest.fixture
def store(gappy_store):
    return gappy_store


def _ids(x, valid):
    """(record, window) of every valid place of a sequence, from the encoded first sample."""
    codes = x[:, 0, 0][valid].round().long().tolist()
    return [(code // 1000, code % 1000) for code in codes]


def test_sequences_cover_every_window_without_crossing_records_or_gaps(store):
    data = SleepSequenceDataset(
        store, context=4, stride=2, labelled_only=False, normalize=False, progress=False
    )
    assert data.records == ("a", "b", "c")
    seen = set()
    for index in range(len(data)):
        x, labels, valid = data[index]
        assert x.shape == (4, 3, N_TIMES) and labels.shape == (4,) and valid.dtype == torch.bool
        ids = _ids(x, valid)
        records = {r for r, _ in ids}
        assert len(records) == 1  # never two records
        windows = [w for _, w in ids]
        assert windows == list(
            range(windows[0], windows[0] + len(windows))
        )  # consecutive, in order
        if records == {1}:  # record b: never across its gap (stored windows 3 and 4)
            assert not {3, 4} <= set(windows)
        seen.update(ids)
    assert seen == {(0, i) for i in range(9)} | {(1, i) for i in range(6)} | {(2, 0), (2, 1)}
    # run starts: a 0,2,4 + last 5; b run 0-3: 0 (and 0 again is the end), run 4-5: one short run
    assert [data.locate(i) for i in range(len(data))] == [
        ("a", 0, 4), ("a", 2, 4), ("a", 4, 4), ("a", 5, 4),
        ("b", 0, 4), ("b", 4, 2),
        ("c", 0, 2),
    ]  # fmt: skip


def test_padding_and_unscored_windows_are_masked(store):
    data = SleepSequenceDataset(store, context=4, normalize=False, progress=False)
    x, labels, valid = data[data.num_sequences - 1]  # record c: 2 windows, padded to 4
    assert valid.tolist() == [True, True, False, False]
    assert labels.tolist() == [0, 1, -1, -1]
    assert torch.all(x[2:] == 0)
    first, labels_a, _ = data[0]  # record a starts unscored: labels -1 but windows kept
    assert labels_a.tolist() == [-1, -1, -1, 3]
    assert _ids(first, torch.ones(4, dtype=torch.bool)) == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_labelled_only_drops_sequences_without_a_scored_window(store):
    everything = SleepSequenceDataset(store, context=2, labelled_only=False, progress=False)
    labelled = SleepSequenceDataset(store, context=2, labelled_only=True, progress=False)
    assert ("a", 0, 2) in [everything.locate(i) for i in range(len(everything))]
    assert ("a", 0, 2) not in [labelled.locate(i) for i in range(len(labelled))]
    assert len(labelled) == len(everything) - 2  # windows 0-1 and 1-2 of record a


def test_values_match_the_store_normalised_or_not(store):
    from partnd.datasets.store import SleepStore

    raw = SleepStore(store).read_windows("b", 4, 6)
    lazy = SleepSequenceDataset(store, context=3, in_memory=False, progress=False)
    eager = SleepSequenceDataset(store, context=3, in_memory=True, progress=False)
    index = [lazy.locate(i)[:2] for i in range(len(lazy))].index(("b", 4))
    for data in (lazy, eager):
        x, _, valid = data[index]
        torch.testing.assert_close(x[valid], instance_normalize(torch.from_numpy(raw)))
    picked = SleepSequenceDataset(store, context=3, channels=["O1-M2", "F3-M2"], progress=False)
    assert picked.ch_names == ["O1-M2", "F3-M2"] and picked[0][0].shape[1] == 2
    clone = pickle.loads(pickle.dumps(lazy))
    torch.testing.assert_close(clone[index][0], lazy[index][0])


def test_nights_are_every_run_whole(store):
    data = SleepSequenceDataset(store, context=4, normalize=False, progress=False)
    nights = list(data.nights())
    assert [(n.record, n.first, len(n.windows)) for n in nights] == [
        ("a", 0, 9), ("b", 0, 4), ("b", 4, 2), ("c", 0, 2),
    ]  # fmt: skip
    assert nights[2].start_times.tolist() == [185.0, 215.0]
    assert nights[0].labels[:4].tolist() == [-1, -1, -1, 3]
    assert len(data.window_labels()) == 9 + 6 + 2


def test_bad_arguments_are_refused(store):
    with pytest.raises(InputError, match="context"):
        SleepSequenceDataset(store, context=0)
    with pytest.raises(InputError, match="stride"):
        SleepSequenceDataset(store, stride=0)
    with pytest.raises(InputError, match="records"):
        SleepSequenceDataset(store, records=["nope"])
