"""Tests of the subject-level splits (test / pretrain / nested fine-tuning subsets)."""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.datasets.splits import (
    PC18_LABELLED_SUBJECTS,
    RecordInfo,
    SubjectSplit,
    make_subject_split,
    records_from_store,
)
from partnd.datasets.store import create_store, write_record


def _cohort(n_labelled: int, n_unlabelled: int) -> list[RecordInfo]:
    """PC18-like cohort: one labelled record per subject, some with a second unlabelled record,
    plus unlabelled-only subjects."""
    infos = [RecordInfo(f"tr{i:04d}", f"L{i:04d}", True) for i in range(n_labelled)]
    infos += [RecordInfo(f"tx{i:04d}", f"L{i:04d}", False) for i in range(0, n_labelled, 3)]
    infos += [RecordInfo(f"te{i:04d}", f"U{i:04d}", False) for i in range(n_unlabelled)]
    return infos


def test_pc18_sized_split_is_disjoint_nested_and_complete() -> None:
    infos = _cohort(994, 989)
    split = make_subject_split(infos, seed=0)
    assert len(split.test) == 200 and len(set(split.test)) == 200
    assert len(split.finetune_pool) == 794
    subject_of = {i.record_id: i.subject_id for i in infos}
    test = set(split.test)
    assert all(s.startswith("L") for s in test)
    assert not test & {subject_of[r] for r in split.pretrain}
    assert not test & set(split.finetune_pool)
    every_record = {i.record_id for i in infos}
    test_subject_records = {r for r in every_record if subject_of[r] in test}
    assert set(split.pretrain) == every_record - test_subject_records
    assert set(split.test_records) == {r for r in test_subject_records if r.startswith("tr")}
    assert {f"te{i:04d}" for i in range(989)} <= set(split.pretrain)
    sizes = [10, 50, 100, 657]
    assert [len(split.finetune[s]) for s in sizes] == sizes
    for small, large in itertools.pairwise(sizes):
        assert set(split.finetune[small]) < set(split.finetune[large])
    assert set(split.finetune[657]) <= set(split.finetune_pool)


def test_split_is_reproducible_and_depends_on_seed_not_order() -> None:
    infos = _cohort(60, 10)
    first = make_subject_split(infos, n_test_subjects=12, finetune_sizes=(5, 20), seed=7)
    shuffled = [infos[i] for i in np.random.default_rng(1).permutation(len(infos))]
    again = make_subject_split(shuffled, n_test_subjects=12, finetune_sizes=(20, 5), seed=7)
    assert again == first
    other = make_subject_split(infos, n_test_subjects=12, finetune_sizes=(5, 20), seed=8)
    assert other.test != first.test


def test_finetune_subsets_per_seed_are_nested_and_differ() -> None:
    split = make_subject_split(_cohort(80, 0), n_test_subjects=16, finetune_sizes=(4, 16, 40))
    chains = [split.finetune_subsets(seed) for seed in range(5)]
    for chain in chains:
        assert set(chain[4]) < set(chain[16]) < set(chain[40]) <= set(split.finetune_pool)
        assert not set(chain[40]) & set(split.test)
    assert len({chain[4] for chain in chains}) == 5
    assert chains[0] == split.finetune == split.finetune_subsets(0)
    assert split.finetune_subsets(3) == split.finetune_subsets(3)


def test_small_cohort_scales_test_count_with_warning() -> None:
    with pytest.warns(UserWarning, match="scaled to 4"):
        split = make_subject_split(_cohort(20, 4), finetune_sizes=(2, 8))
    assert len(split.test) == round(20 * 200 / PC18_LABELLED_SUBJECTS) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fraction = make_subject_split(_cohort(20, 4), n_test_subjects=0.25, finetune_sizes=(2, 8))
    assert len(fraction.test) == 5 and len(fraction.finetune_pool) == 15


def test_oversized_finetune_sizes_are_capped_with_warning() -> None:
    with pytest.warns(UserWarning, match=r"finetune_sizes \[100, 657\]"):
        split = make_subject_split(
            _cohort(40, 0), n_test_subjects=10, finetune_sizes=(10, 100, 657)
        )
    assert len(split.finetune[10]) == 10
    assert split.finetune[100] == split.finetune[657] == split.finetune_pool


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"n_test_subjects": 0}, "n_test_subjects"),
        ({"n_test_subjects": 1.5}, "n_test_subjects"),
        ({"finetune_sizes": (5, 5)}, "finetune_sizes"),
        ({"finetune_sizes": (0,)}, "finetune_sizes"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, argument: str) -> None:
    with pytest.raises(InputError, match=f"^{argument}:"):
        make_subject_split(_cohort(30, 0), **kwargs)


def test_named_test_subjects_are_held_out_as_a_drawn_test_set_is() -> None:
    infos = _cohort(30, 4)
    drawn = make_subject_split(infos, n_test_subjects=6, finetune_sizes=(2, 5), seed=3)
    named = make_subject_split(
        infos, test_subjects=list(reversed(drawn.test)), finetune_sizes=(2, 5), seed=3
    )
    assert named == drawn  # naming the drawn subjects gives the drawn split
    chosen = make_subject_split(infos, test_subjects=["L0003", "L0001"], finetune_sizes=(2,))
    assert chosen.test == ("L0001", "L0003")
    assert chosen.test_records == ("tr0001", "tr0003")  # L0003's unlabelled tx0003: in neither
    assert not {"tr0001", "tr0003", "tx0003"} & set(chosen.pretrain)
    assert chosen.finetune_pool == tuple(f"L{i:04d}" for i in range(30) if i not in (1, 3))
    assert chosen.finetune[2] == chosen.finetune_subsets(0)[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"test_subjects": ["L0001", "L0001"]}, "test_subjects: expected distinct subject ids"),
        ({"test_subjects": ["U0000"]}, r"test_subjects: expected subjects with labelled .*U0000"),
        ({"test_subjects": []}, "test_subjects: expected between 1 and 4 of the 5 labelled"),
        (
            {"test_subjects": [f"L{i:04d}" for i in range(5)]},
            "test_subjects: expected between 1 and 4 of the 5 labelled",
        ),
        ({"test_subjects": "L0001"}, "test_subjects: expected a sequence of subject ids"),
        (
            {"test_subjects": ["L0001"], "n_test_subjects": 2},
            "n_test_subjects: expected no number of test subjects when test_subjects names",
        ),
    ],
)
def test_bad_named_test_subjects_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        make_subject_split(_cohort(5, 2), finetune_sizes=(1,), **kwargs)


def test_too_few_labelled_subjects_or_duplicates_raise() -> None:
    with pytest.raises(InputError, match="at least 2 labelled subjects"):
        make_subject_split([RecordInfo("a", "s", True), RecordInfo("b", "t", False)])
    with pytest.raises(InputError, match="unique record ids"):
        make_subject_split([RecordInfo("a", "s", True), RecordInfo("a", "t", True)])


def test_save_load_round_trip(tmp_path: Path) -> None:
    split = make_subject_split(_cohort(50, 5), n_test_subjects=0.2, finetune_sizes=(3, 10), seed=2)
    path = tmp_path / "nested" / "split.json"
    split.save(path)
    assert SubjectSplit.load(path) == split
    assert sorted(p.name for p in path.parent.iterdir()) == ["split.json"]
    assert json.loads(path.read_text())["format"] == "partnd-subject-split"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(InputError, match=r"^path:"):
        SubjectSplit.load(bad)


def test_split_from_store_sends_unlabelled_records_to_pretrain(tmp_path: Path) -> None:
    path = tmp_path / "store.zarr"
    create_store(path, sfreq=10.0, channels=["C3", "C4"], window_seconds=3.0, metadata={})
    rng = np.random.default_rng(0)
    layout = [
        ("tr1", "a", [0, 1]),
        ("tr2", "b", [2, -1]),
        ("tr3", "c", [3, 4]),
        ("te1", "d", [-1, -1]),
    ]
    for record_id, subject, stages in layout:
        write_record(
            path,
            record_id,
            rng.normal(size=(2, 2, 30)).astype(np.float32),
            np.array(stages),
            np.array([0.0, 3.0]),
            attrs={"subject_id": subject, "split": "test" if record_id == "te1" else "training"},
        )
    infos = records_from_store(path)
    assert [(i.record_id, i.subject_id, i.labelled) for i in infos] == [
        ("te1", "d", False),
        ("tr1", "a", True),
        ("tr2", "b", True),
        ("tr3", "c", True),
    ]
    split = make_subject_split(path, n_test_subjects=1, finetune_sizes=(1, 2))
    assert len(split.test) == 1 and "d" not in split.test
    assert "te1" in split.pretrain and len(split.pretrain) == 3
    assert split.records_of(split.finetune[2]) == sorted(
        r for r, s, _ in layout if s in split.finetune[2]
    )
    with pytest.raises(InputError, match=r"^subjects:"):
        split.records_of(["zz"])
