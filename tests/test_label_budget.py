"""The label axis: budgets of subjects or windows per stage, their draws and the label masks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.label_budget import (
    LabelBudget,
    draw_labels,
    draw_named_labels,
    sample_windows_per_stage,
)
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.splits import make_subject_split
from partnd.datasets.store import STAGE_NAMES, create_store, write_record

N_TIMES = 20


def make_store(path: Path, n_subjects: int = 10, n_windows: int = 40) -> Path:
    """Subjects s00.. with one record each; stage of window i is i % 5 except that N1 (1) is
    relabelled N2 (2) after the first 3 N1 windows of a record and the first 3 windows are
    unscored (per record of 40: W 7, N1 2, N2 12, N3 8, REM 8 labelled windows); the first sample
    encodes (record, window)."""
    create_store(
        path,
        sfreq=N_TIMES / 30.0,
        channels=["C4-M1", "O2-M1"],
        window_seconds=30.0,
        stage_names=STAGE_NAMES,
        metadata={},
    )
    rng = np.random.default_rng(0)
    for r in range(n_subjects):
        stage = (np.arange(n_windows) % 5).astype(np.int8)
        n1 = np.flatnonzero(stage == 1)
        stage[n1[3:]] = 2
        stage[:3] = -1
        signal = rng.standard_normal((n_windows, 2, N_TIMES)).astype(np.float32)
        signal[:, :, 0] = (1000 * r + np.arange(n_windows))[:, None]
        write_record(
            path,
            f"r{r:02d}",
            signal,
            stage,
            30.0 * np.arange(n_windows),
            attrs={"subject_id": f"s{r:02d}", "split": "training"},
        )
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return make_store(tmp_path / "store.zarr")


def test_budgets_are_written_as_subject_counts_or_windows_per_stage() -> None:
    assert LabelBudget.parse("2") == LabelBudget(subjects=2) == LabelBudget.parse(2)
    assert LabelBudget.parse("w20") == LabelBudget(windows_per_stage=20)
    assert [str(b) for b in (LabelBudget(subjects=8), LabelBudget(windows_per_stage=5))] == [
        "8",
        "w5",
    ]
    assert LabelBudget.parse("w20").to_json() == "w20" and LabelBudget(subjects=3).to_json() == 3
    budgets = [LabelBudget.parse(text) for text in ("8", "w50", "1", "w20", "2")]
    assert [str(b) for b in sorted(budgets, key=lambda b: b.sort_key)] == [
        "w20",
        "w50",
        "1",
        "2",
        "8",
    ]
    for bad in ("0", "w0", "x20", "-1", "2.5", "", "20w"):
        with pytest.raises(InputError, match="--budgets"):
            LabelBudget.parse(bad, "--budgets")
    with pytest.raises(InputError, match="exactly one"):
        LabelBudget(subjects=2, windows_per_stage=3)


def test_per_stage_sampler_counts_shortfall_and_determinism(store: Path) -> None:
    records = [f"r{r:02d}" for r in range(4)]
    sample = sample_windows_per_stage(store, records, 5, seed=3)
    assert sample.counts == (5, 5, 5, 5, 5) and sample.total == 25
    # N1: 2 per record x 4 records
    assert sample.available == (28, 8, 48, 32, 32)
    from partnd.datasets.store import SleepStore

    opened = SleepStore(store)
    drawn = np.concatenate([opened.stages(r)[w] for r, w in sample.windows.items()])
    assert np.bincount(drawn, minlength=5).tolist() == [5, 5, 5, 5, 5]
    for record, windows in sample.windows.items():
        assert record in records and len(set(windows.tolist())) == len(windows)
    # the same records (in any order) and seed give the same windows; another seed others
    again = sample_windows_per_stage(store, records[::-1], 5, seed=3)
    assert {r: w.tolist() for r, w in again.windows.items()} == {
        r: w.tolist() for r, w in sample.windows.items()
    }
    other = sample_windows_per_stage(store, records, 5, seed=4)
    assert {r: w.tolist() for r, w in other.windows.items()} != {
        r: w.tolist() for r, w in sample.windows.items()
    }
    # a stage with fewer windows than asked gives all of them, with a warning naming it
    with pytest.warns(UserWarning, match=r"N1 \(8\)"):
        short = sample_windows_per_stage(store, records, 10, seed=0)
    assert short.counts == (10, 8, 10, 10, 10) and short.short_stages == ("N1",)
    assert short.to_dict()["counts"] == {"W": 10, "N1": 8, "N2": 10, "N3": 10, "REM": 10}
    with pytest.raises(InputError, match="per_stage"):
        sample_windows_per_stage(store, records, 0, seed=0)
    with pytest.raises(InputError, match="distinct"):
        sample_windows_per_stage(store, ["r00", "r00"], 1, seed=0)
    with pytest.raises(InputError, match="present in the store"):
        sample_windows_per_stage(store, ["nope"], 1, seed=0)


def test_draws_never_share_subjects_with_validation_or_test(store: Path) -> None:
    split = make_subject_split(store, n_test_subjects=0.3, finetune_sizes=(1, 2, 4), seed=0)
    test = set(split.test)
    for seed in range(5):
        previous: set[str] = set()
        for budget in ("1", "2", "4"):
            draw = draw_labels(split, store, budget, seed, n_validation=2)
            assert len(draw.subjects) == int(budget) and len(draw.validation) == 2
            assert set(draw.subjects).isdisjoint(draw.validation)
            assert (set(draw.subjects) | set(draw.validation)).isdisjoint(test)
            assert previous <= set(draw.subjects)  # nested within a seed
            assert draw.labelled_windows is None
            previous = set(draw.subjects)
        draw = draw_labels(split, store, "w3", seed, n_validation=2)
        assert draw.sample is not None and draw.sample.counts == (3, 3, 3, 3, 3)
        assert set(draw.subjects).isdisjoint(draw.validation)
        assert (set(draw.subjects) | set(draw.validation)).isdisjoint(test)
        held = {r for r in draw.sample.windows}
        assert held <= set(split.records_of(draw.subjects))
        assert draw.to_dict()["windows"]["counts"]["W"] == 3
    # subject budgets keep the split's nested chains, and each seed draws its own subjects
    assert draw_labels(split, store, 2, 0, n_validation=2).subjects == split.finetune_subsets(0)[2]
    draws = {draw_labels(split, store, 2, seed, n_validation=2).subjects for seed in range(5)}
    assert len(draws) > 1
    # deterministic per seed
    a = draw_labels(split, store, "w3", 1, n_validation=2)
    b = draw_labels(split, store, "w3", 1, n_validation=2)
    assert a.to_dict() == b.to_dict()


def test_labelled_windows_mask_the_other_labels_in_every_dataset(store: Path) -> None:
    keep = {"r01": np.array([3, 9]), "r02": np.array([20])}
    records = ["r01", "r02"]
    windows = InMemoryWindows(
        store,
        records=records,
        labelled_only=True,
        labelled_windows=keep,
        normalize=False,
        progress=False,
    )
    assert len(windows) == 3
    firsts = sorted(int(windows[i][0][0, 0]) for i in range(3))
    assert firsts == [1003, 1009, 2020]
    lazy = SleepWindowDataset(store, records=records, labelled_windows=keep, normalize=False)
    assert (lazy.labels >= 0).sum() == 3 and len(lazy) == 80
    sequences = SleepSequenceDataset(
        store,
        records=records,
        context=5,
        labelled_only=True,
        labelled_windows=keep,
        normalize=False,
        progress=False,
    )
    # every sequence holds a kept window; its neighbours stay as unlabelled context
    for index in range(len(sequences)):
        x, labels, valid = sequences[index]
        labelled = labels >= 0
        assert labelled.sum() >= 1 and bool(valid.all())
        codes = x[labelled, 0, 0].to(torch.int64).tolist()
        assert set(codes) <= {1003, 1009, 2020}
    assert len(sequences) == 4 + 5 + 5  # window 3 of r01 starts 4 sequences, the others 5
    with pytest.raises(InputError, match="labelled_windows"):
        InMemoryWindows(store, records=["r01"], labelled_windows={"r05": [4]}, progress=False)
    with pytest.raises(InputError, match="unlabelled windows"):
        InMemoryWindows(store, records=["r01"], labelled_windows={"r01": [0]}, progress=False)
    with pytest.raises(InputError, match=r"window indices in \[0, 40\)"):
        SleepSequenceDataset(store, records=["r01"], labelled_windows={"r01": [40]})


def test_a_budget_the_pool_cannot_hold_beside_its_validation_subjects_is_refused(
    store: Path,
) -> None:
    """`--budgets 4 99` on a 5-subject pool: the "99" cell labelled all 5 subjects with no
    validation subject, the "4" cell got 1 validation subject instead of 2."""
    split = make_subject_split(store, n_test_subjects=0.3, finetune_sizes=(1,), seed=0)
    pool = len(split.finetune_pool)
    largest = draw_labels(split, store, pool - 2, 0, n_validation=2)
    assert len(largest.subjects) == pool - 2 and len(largest.validation) == 2
    for budget in (pool - 1, pool, 99):
        with pytest.raises(InputError) as error:
            draw_labels(split, store, budget, 0, n_validation=2)
        assert str(error.value) == (
            f"budgets: expected at most {pool - 2} labelled subjects (the fine-tuning pool of "
            f"{pool} keeps 2 validation subjects), got {budget}"
        )


def test_named_labelled_subjects_get_the_validation_draw_of_their_subject_budget(
    store: Path,
) -> None:
    split = make_subject_split(store, n_test_subjects=0.3, finetune_sizes=(1,), seed=0)
    for seed in range(3):
        for size in (1, 3):
            first = split.finetune_order(seed)[:size]
            named = draw_named_labels(split, list(reversed(first)), seed, n_validation=2)
            assert named == draw_labels(split, store, size, seed, n_validation=2)
    chosen = [split.finetune_pool[-1], split.finetune_pool[0]]
    draw = draw_named_labels(split, chosen, 4, n_validation=2)
    assert draw.subjects == tuple(sorted(chosen)) and str(draw.budget) == "2"
    assert len(draw.validation) == 2 and set(draw.validation) <= set(split.finetune_pool)
    assert not set(draw.validation) & set(chosen) and draw.labelled_windows is None
    pool = len(split.finetune_pool)
    for subjects, message in (
        ([split.test[0]], r"subjects: expected subjects of the fine-tuning pool \(no test"),
        ([chosen[0], chosen[0]], "subjects: expected at least one subject, each once"),
        ([], "subjects: expected at least one subject, each once"),
        (
            list(split.finetune_pool[:-1]),
            f"budgets: expected at most {pool - 2} labelled subjects",
        ),
    ):
        with pytest.raises(InputError, match=message):
            draw_named_labels(split, subjects, 0, n_validation=2)
