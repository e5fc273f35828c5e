"""The unlabelled axis: nested pretraining pools in hours, held-out nights, no test subject."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.pools import PretrainingPools, make_pretraining_pools, pool_name
from partnd.datasets.store import STAGE_NAMES, create_store, write_record

#: Record lengths in windows of 30 s: 2 h nights and 8 h nights.
TWO_HOURS, EIGHT_HOURS = 240, 960


def write_nights(path: Path, nights: list[tuple[str, int]]) -> Path:
    """A store of one record per ``(subject, windows)`` night, named n00, n01...; windows of 2
    samples (the pools read no signal)."""
    create_store(
        path,
        sfreq=1 / 15.0,
        channels=["C4-M1"],
        window_seconds=30.0,
        stage_names=STAGE_NAMES,
        metadata={},
    )
    for index, (subject, windows) in enumerate(nights):
        write_record(
            path,
            f"n{index:02d}",
            np.zeros((windows, 1, 2), dtype=np.float32),
            np.full(windows, -1, dtype=np.int8),
            30.0 * np.arange(windows),
            attrs={"subject_id": subject, "split": "test"},
        )
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """12 subjects: s00-s05 one 2-h night each, s06-s11 one 8-h night each, s11 a second 8-h
    night."""
    nights = [(f"s{i:02d}", TWO_HOURS) for i in range(6)]
    nights += [(f"s{i:02d}", EIGHT_HOURS) for i in range(6, 12)] + [("s11", EIGHT_HOURS)]
    return write_nights(tmp_path / "pool.zarr", nights)


def test_pools_are_nested_sized_in_hours_and_never_hold_an_excluded_or_held_out_night(
    store: Path, tmp_path: Path
) -> None:
    excluded = {"s00", "s07"}
    pools = make_pretraining_pools(
        store, [4, 20, 40], exclude_subjects=excluded, held_out_subjects=2, seed=3
    )
    assert pools.names == ("4h", "20h", "40h") == tuple(pool_name(h) for h in (4, 20, 40))
    hours = [pools.hours(name) for name in pools.names]
    for size, actual, name in zip((4, 20, 40), hours, pools.names, strict=True):
        nights = pools.records(name)
        last = pools.record_hours[nights[-1]]
        assert abs(actual - size) <= last / 2  # the prefix closest to the size asked for
        assert abs(actual - last - size) >= abs(actual - size)  # one night fewer is not closer
    assert hours[-1] / hours[0] >= 5
    small, medium, large = (set(pools.records(name)) for name in pools.names)
    assert small < medium < large
    assert list(pools.records("40h")[: len(pools.records("4h"))]) == list(pools.records("4h"))
    subject_of = pools.record_subjects
    for name in pools.names:
        assert {subject_of[r] for r in pools.records(name)}.isdisjoint(excluded)
    held = set(pools.held_out)
    assert held.isdisjoint(large) and {subject_of[r] for r in held}.isdisjoint(excluded)
    held_subjects = {subject_of[r] for r in held}
    assert len(held_subjects) == 2
    assert held_subjects.isdisjoint(subject_of[r] for r in large)  # whole subjects held out
    assert pools.held_out_hours == pytest.approx(sum(pools.record_hours[r] for r in held))
    assert pools.excluded_subjects == ("s00", "s07")
    summary = pools.summary()
    assert [row["pool"] for row in summary] == ["4h", "20h", "40h"]
    assert summary[-1]["longest_night_hours"] == 8.0
    # saved and read back unchanged; the same inputs give the same pools, another seed others
    pools.save(tmp_path / "pools.json")
    assert PretrainingPools.load(tmp_path / "pools.json") == pools
    again = make_pretraining_pools(
        store, [4, 20, 40], exclude_subjects=excluded, held_out_subjects=2, seed=3
    )
    assert again == pools
    other = make_pretraining_pools(store, [4, 20, 40], exclude_subjects=excluded, seed=4)
    assert other.pools != pools.pools


def test_a_pool_is_the_prefix_closest_to_its_size(tmp_path: Path) -> None:
    """Generated 8-h nights store a little less than 8 h (here 950 windows, 7.92 h): a pool of 8 h
    is one of them, not two."""
    path = write_nights(tmp_path / "short.zarr", [(f"s{i}", 950) for i in range(5)])
    pools = make_pretraining_pools(path, [8, 16, 24], held_out_subjects=1)
    assert [len(pools.records(name)) for name in pools.names] == [1, 2, 3]
    assert pools.hours("8h") == pytest.approx(950 / 120)
    assert make_pretraining_pools(path, [33], held_out_subjects=1).hours("33h") == pytest.approx(
        4 * 950 / 120
    )  # within half a night of the 31.7 h there are
    with pytest.raises(InputError, match=r"at most the 31.7 h .* got 36 h"):
        make_pretraining_pools(path, [36], held_out_subjects=1)
    with pytest.raises(InputError, match="more nights than the previous"):
        make_pretraining_pools(path, [8, 11], held_out_subjects=1)


def test_pool_sizes_are_checked(store: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="increasing positive"):
        make_pretraining_pools(store, [20, 4])
    with pytest.raises(InputError, match="at most the"):
        make_pretraining_pools(store, [4, 500])
    with pytest.raises(InputError, match="present in the store"):
        make_pretraining_pools(store, [4], records=["nope"])
    with pytest.raises(InputError, match="held_out_subjects"):
        make_pretraining_pools(store, [4], records=["n06", "n07"], held_out_subjects=2)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match="partnd-pretraining-pools"):
        PretrainingPools.load(tmp_path / "bad.json")
