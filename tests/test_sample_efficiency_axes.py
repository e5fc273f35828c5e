"""The sample-efficiency study's two axes end to end: label budgets down to windows per stage,
subject draws per seed, and pretraining pools of growing size chosen on held-out nights."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.datasets.pools import PretrainingPools
from partnd.datasets.store import SleepStore
from partnd.recipes import sample_efficiency
from partnd.recipes.sleep_study import SleepStudy, StudyConfig
from partnd.recipes.study_directory import run_recipe
from partnd.recipes.study_pretraining import StudyPretraining
from tests.finetune_helpers import TINY

#: pretraining: a 6-step cap, the held-out error every 2 steps, stopped after 2 without a better
PRETRAIN = {
    **TINY,
    "epochs": 1,
    "min_steps": 6,
    "num_pairs": 16,
    "segment_windows": 20,
    "num_windows": 8,
    "temporal_encoder": "temporal_test",
}
POOL = {"eval_every_steps": 2, "patience": 2}
FINETUNE = {**TINY, "epochs": 1, "min_steps": 4, "eval_every_steps": 2, "batch_size": 16}
SEQUENCE = {"context": 5, "batch_size": 16, "temporal_encoder": "temporal_test", "min_steps": 4}
NIGHT = {**SEQUENCE, "context": "night", "night_crop": 20, "batch_size": 4}
ROWS = [
    ("part_windows", "sequence"),
    ("part_windows", "night"),
    ("mae", "probe"),
    ("supervised", "sequence"),
    ("classical", "window"),
]


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The study's cohort (10 labelled-or-not nights of 0.5 h) and another generated cohort of 7
    nights of 0.5 h as the unlabelled pool source."""
    root = tmp_path_factory.mktemp("axes")
    study = make_pc18_cohort(root / "study", n_records=10, hours=0.5, seed=1, progress=False)
    pool = make_pc18_cohort(root / "pool", n_records=7, hours=0.5, seed=2, progress=False)
    return study.root, pool.root


def axes_study(out: Path, cohorts: tuple[Path, Path], **changes: object) -> SleepStudy:
    src, pool_src = cohorts
    settings: dict[str, object] = {
        "out": out,
        "src": src,
        "progress": False,
        "device": "cpu",
        "pretrain_overrides": PRETRAIN,
        "finetune_overrides": FINETUNE,
        "sequence_overrides": SEQUENCE,
        "night_overrides": NIGHT,
        "budgets": ("w3",),
        "seeds": (0, 1),
        "pools": (0.4, 0.9),
        "pool_src": pool_src,
        "held_out_subjects": 1,
        "pool_overrides": POOL,
        **changes,
    }
    return SleepStudy(StudyConfig(**settings))  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["rp", "ts"])
def test_the_field_s_objectives_on_segments_choose_their_pool_budget_on_held_out_segments(
    cohorts: tuple[Path, Path], tmp_path: Path, method: str
) -> None:
    context = {"tau_pos_windows": 2, "tau_neg_windows": 5}  # within 20-window segments
    study = axes_study(
        tmp_path / method, cohorts, pools=(0.4,), pretrain_overrides={**PRETRAIN, **context}
    )
    config = study.config.pretrain_config(method, pool=True)
    held = study.pools.held_out(config)
    assert held[0].shape[-1] == config.segment_windows * config.window_samples  # segments
    study.run_pretraining(method, "0.4h")
    chosen = study.pools.selection(method, "0.4h")
    assert chosen["unit"] == "segments"
    curves = study.pools.curves(method, "0.4h")
    assert curves["heldout"] and chosen["selected"]["value"] == min(
        value for _, value in curves["heldout"]
    )
    history = [
        json.loads(line) for line in (study.pools.run_dir(method, "0.4h") / "metrics.jsonl").open()
    ]
    held_out = [record for record in history if record.get("phase") == "val"]
    for record in held_out:  # the error over the floor: a classifier's misses over the majority's
        error = (1 - record["heldout_accuracy"]) / (1 - record["heldout_accuracy_chance"])
        assert record["heldout_error"] == pytest.approx(error)


@pytest.mark.slow
def test_label_budgets_draws_and_pools_end_to_end(
    cohorts: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    drawn_figures: dict,
) -> None:
    out = tmp_path / "axes"
    study = axes_study(out, cohorts)
    cells = sample_efficiency.cell_list(study, ROWS)
    pooled = [cell for cell in cells if cell[4] is not None]
    assert {cell[0] for cell in pooled} == {"part_windows", "mae"}
    assert {cell[4] for cell in pooled} == {"0.4h", "0.9h"}
    assert all(cell[4] is None for cell in cells if cell[0] in ("supervised", "classical"))
    assert len(cells) == 2 * (3 * 2 + 2)  # seeds x (pooled rows x pools + others)
    assert ("part_windows", "night", "w3", 1, "0.9h") in cells
    # two processes: the four pool pretrainings side by side, then their cells
    sample_efficiency.run_cells(study, cells, jobs=2)
    printed = capsys.readouterr().out
    assert "0 of 16 cells already finished" in printed
    for name in ("pretrain part_windows on 0.4h", "pretrain mae on 0.9h", "classical:window:w3:0"):
        assert printed.count(f"finished {name}") == 1

    # the pools: nested, sized in hours, no labelled study subject, held-out nights in none
    plan = study.pools.plan
    small, large = (set(plan.records(name)) for name in plan.names)
    assert small < large and len(small) == 1 and len(large) == 2  # closest to 0.4 h and 0.9 h
    pool_store = SleepStore(out / "pool_store.zarr")
    subject_of = {r: str(pool_store.record_attrs(r)["subject_id"]) for r in large}
    split = study.split
    assert set(subject_of.values()).isdisjoint({*split.test, *split.finetune_pool})
    assert set(plan.held_out).isdisjoint(large) and len(plan.held_out) == 1
    # held-out segments start every S // 16 windows: a night a few segments long gives many
    held = study.pools.held_out(study.config.pretrain_config("part_windows", pool=True))
    night_windows = pool_store.n_windows(plan.held_out[0])
    assert held.stride == 1 and len(held) > 3 * (night_windows // 20)  # 3: strided by S
    # each pool's pretraining: the held-out error evaluated, the best kept, the budget recorded
    for method in ("part_windows", "mae"):
        for pool in plan.names:
            chosen = study.pools.selection(method, pool)
            selected = chosen["selected"]
            assert selected["step"] <= selected["steps"] <= chosen["cap"]
            assert chosen["cap"] >= 6  # the step cap, rounded up to whole epochs
            curves = study.pools.curves(method, pool)
            assert curves["train"] and curves["heldout"]
            assert selected["value"] == min(value for _, value in curves["heldout"])
            assert chosen["items_per_s"] > 0 and chosen["eeg_hours_per_s"] > 0
            assert chosen["unit"] == ("segments" if method == "part_windows" else "windows")
    # the window budget: 3 windows per stage (all of a stage that has fewer), never a
    # validation or test subject, and the classical rows train on exactly those windows
    cell = study.load_cell("classical", "window", "w3", 0)
    windows = cell.draw["windows"]
    assert all(n <= 3 for n in windows["counts"].values()) and sum(windows["counts"].values()) > 5
    assert cell.settings["labelled_windows"] == sum(windows["counts"].values())
    assert set(cell.subjects).isdisjoint(cell.draw["validation"])
    assert set(cell.subjects).isdisjoint(split.test)
    probe = study.load_cell("mae", "probe", "w3", 0, "0.9h")
    assert probe.draw == cell.draw  # every row of a budget and seed gets the same draw
    assert probe.settings["labelled_windows"] == cell.settings["labelled_windows"]
    assert study.draw("w3", 1).to_dict() != study.draw("w3", 0).to_dict()  # draws per seed
    sequence = study.load_cell("supervised", "sequence", "w3", 1)
    assert sequence.settings["validation_subjects"] == sequence.draw["validation"]
    assert sequence.draw == study.load_cell("classical", "window", "w3", 1).draw
    assert (out / "finetune/part_windows/sequence/bw3_s0_p0.4h/result.json").is_file()
    # the night arm on a pool's encoder and a window budget: the same draw, whole nights tested
    night = study.load_cell("part_windows", "night", "w3", 0, "0.9h")
    assert night.draw == cell.draw and night.settings["night_crop"] == 20
    assert night.settings["init"] == "part_windows pretraining on pool 0.9h"
    assert night.settings["budget_settings"] == {}  # windows per stage: below any subjects
    assert len(night.predictions) == len(cell.predictions)

    sample_efficiency.aggregate(study, ROWS)
    with open(out / "kappa_by_budget.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [row["budget"] for row in table] == ["w3"]
    assert {"part_windows+seq @0.4h", "part_windows+seq @0.9h", "supervised+seq"} <= set(table[0])
    assert table[0]["mae probe @0.9h"].endswith("(n=2)")
    with open(out / "paired_differences.csv") as handle:
        differences = list(csv.DictReader(handle))
    seq = [r for r in differences if r["row"] == "part_windows+seq @0.9h" and r["budget"] == "w3"]
    assert [r["seed"] for r in seq] == ["0", "1"] and seq[0]["baseline"] == "supervised+seq"
    for row in seq:
        assert float(row["difference"]) == pytest.approx(
            float(row["kappa"]) - float(row["baseline_kappa"]), abs=2e-4
        )
    with open(out / "difference_to_scratch.csv") as handle:
        summary = next(csv.DictReader(handle))
    assert "/2 > 0" in summary["part_windows+seq @0.9h - supervised+seq"]
    assert PretrainingPools.load(out / "pools.json").pools == plan.pools  # not overwritten
    with open(out / "pool_pretraining.csv") as handle:
        pools = list(csv.DictReader(handle))
    assert [(r["pool"], r["method"]) for r in pools] == [
        ("0.4h", "part_windows"), ("0.4h", "mae"), ("0.9h", "part_windows"), ("0.9h", "mae")
    ]  # fmt: skip
    assert [float(r["hours"]) for r in pools[::2]] == [
        pytest.approx(plan.hours(name), abs=0.01) for name in plan.names
    ]
    with open(out / "draws.csv") as handle:
        draws = list(csv.DictReader(handle))
    assert [(r["budget"], r["seed"]) for r in draws] == [("w3", "0"), ("w3", "1")]
    assert draws[0]["labelled_windows"] == str(sum(windows["counts"].values()))
    for figure in ("sample_efficiency.png", "kappa_by_pool.png", "pool_pretext.png"):
        assert (out / figure).stat().st_size > 1000
    # the figures plot the aggregated table: each row's (and pool's) mean over the draws
    panels = drawn_figures["sample_efficiency.png"]
    rows = {column for column in table[0] if column != "budget" and "paper_" not in column}
    assert {label for panel in panels.values() for label in panel["lines"]} == rows
    for panel in panels.values():
        for label, (_, ys) in panel["lines"].items():
            assert table[0][label].startswith(f"{ys[0]:.3f} ± ")
    (by_pool,) = drawn_figures["kappa_by_pool.png"].values()
    for row in ("part_windows+seq", "mae probe"):
        xs, ys = by_pool["lines"][row]
        assert xs == [plan.hours(name) for name in plan.names]
        for name, y in zip(plan.names, ys, strict=True):
            assert table[0][f"{row} @{name}"].startswith(f"{y:.3f} ± ")
    _, ys = by_pool["lines"]["supervised+seq (no pool)"]
    assert table[0]["supervised+seq"].startswith(f"{ys[0]:.3f} ± ")
    assert "part_windows+seq @0.9h - supervised+seq" in capsys.readouterr().out

    # a second run recomputes nothing; the cells' keys name their pool
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished stage was recomputed")

    for module in ("study_pretraining", "study_pools"):
        monkeypatch.setattr(f"partnd.recipes.{module}.pretrain", refuse)
    for name in ("finetune", "linear_probe"):
        monkeypatch.setattr(f"partnd.recipes.study_cells.{name}", refuse)
    again = axes_study(out, cohorts)
    sample_efficiency.run_cells(again, cells, jobs=1)
    assert sample_efficiency.format_cell(pooled[0]) == "part_windows:sequence:w3:0:0.4h"
    with pytest.raises(InputError, match="same settings"):
        axes_study(out, cohorts, pools=(0.4, 2.0))
    with pytest.raises(InputError, match="pool"):
        again.run_cell("supervised", "sequence", "w3", 0, "0.4h")
    with pytest.raises(InputError, match="pools"):
        again.run_cell("part_windows", "sequence", "w3", 0, "9h")
    np.testing.assert_array_equal(
        again.load_cell("mae", "probe", "w3", 0, "0.4h").predictions,
        study.load_cell("mae", "probe", "w3", 0, "0.4h").predictions,
    )


def test_the_command_line_of_the_axes(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the cells reads no data (the sources are not even there)."""
    src, pool_src = tmp_path / "pc18", tmp_path / "unlabelled"
    out = tmp_path / "cli"
    argv = ["cells", "--out", str(out), "--src", str(src), "--no-progress"]
    argv += ["--pool-src", str(pool_src), "--pools", "0.4", "1.2", "--budgets", "2", "w20", "1"]
    argv += ["--rows", "part_windows:sequence", "supervised:night", "--seeds", "0"]
    argv += ["--pool-segment-windows", "480", "--pool-patience", "3"]
    assert sample_efficiency.main(argv) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [
        "part_windows:sequence:w20:0:0.4h",
        "part_windows:sequence:w20:0:1.2h",
        "part_windows:sequence:1:0:0.4h",
        "part_windows:sequence:1:0:1.2h",
        "part_windows:sequence:2:0:0.4h",
        "part_windows:sequence:2:0:1.2h",
        "supervised:night:w20:0",
        "supervised:night:1:0",
        "supervised:night:2:0",
    ]
    for line in listed:  # every key parses back to its cell, the night arm's too
        assert sample_efficiency.format_cell(sample_efficiency.parse_cell(line)) == line
    assert sample_efficiency.parse_cell("supervised:night:w20:0")[1:3] == ("night", "w20")
    settings = json.loads((out / "study.json").read_text())
    assert settings["budgets"] == ["w20", 1, 2] and settings["pools"] == [0.4, 1.2]
    assert settings["pool_overrides"] == {"patience": 3, "segment_windows": 480}
    assert "loader_workers" not in settings  # a run setting, as the device
    study = SleepStudy(
        StudyConfig(out=tmp_path / "s", pools=(0.4,), pool_overrides={"segment_windows": 480})
    )
    assert study.config.pretrain_config("part_windows", pool=True).segment_windows == 480
    assert study.config.pretrain_config("part_windows").segment_windows == 120  # the scale's
    assert study.config.pretrain_config("mae", pool=True).num_workers == 0
    workers = StudyConfig(out=tmp_path / "w", pools=(0.4,), loader_workers=3)
    assert workers.pretrain_config("part_windows", pool=True).num_workers == 3
    assert workers.pretrain_config("mae").num_workers == 3
    pretrained: list[tuple[str, str | None]] = []
    monkeypatch.setattr(
        StudyPretraining,
        "run_pretraining",
        lambda self, method, pool=None: pretrained.append((method, pool)),
    )
    one_pool = ["pretrain", *argv[1:], "--loader-workers", "2"]
    one_pool += ["--rows", "part_windows:probe", "mae:night", "--pool"]
    assert sample_efficiency.main([*one_pool, "1.2h"]) == 0
    assert pretrained == [("part_windows", "1.2h"), ("mae", "1.2h")]  # that pool's, no other
    assert run_recipe("se", lambda: sample_efficiency.main([*one_pool, "9h"])) == 2
    assert "se: error: --pool: expected one of the study's pools ['0.4h', '1.2h']" in (
        capsys.readouterr().err
    )
    for bad, option in (
        (["--pool", "1.2h"], "--pool"),  # the cells command does not pretrain
        (["--pools", "20", "4"], "--pools"),
        (["--budgets", "w0"], "--budgets"),
        (["--budgets", "2", "2"], "--budgets"),
        (["--pool-src", str(pool_src)], "--pool-src"),
        (["--pool-segment-windows", "1"], "--pool-segment-windows"),
        (["--loader-workers", "-1"], "--loader-workers"),
    ):
        command = ["cells", "--out", str(tmp_path / "bad"), *bad]
        assert run_recipe("se", lambda command=command: sample_efficiency.main(command)) == 2
        assert f"se: error: {option}: expected" in capsys.readouterr().err
        assert not (tmp_path / "bad").exists()


def test_a_float16_study_stores_its_nights_and_its_pools_nights_in_float16(
    tmp_path: Path,
) -> None:
    """``--dtype float16`` reaches both stores the study creates (half the bytes, values within
    float16 rounding of the float32 store's) and is part of the study's settings."""
    src = make_pc18_cohort(tmp_path / "src", n_records=2, hours=0.25, seed=1, progress=False).root
    unlabelled = make_pc18_cohort(tmp_path / "u", n_records=1, hours=0.25, seed=2, progress=False)
    common = {"src": src, "progress": False, "pools": (0.2,), "pool_src": unlabelled.root}
    half = SleepStudy(StudyConfig(out=tmp_path / "half", signal_dtype="float16", **common))
    full = SleepStudy(StudyConfig(out=tmp_path / "full", **common))
    assert half.config.settings["signal_dtype"] == "float16"
    assert "signal_dtype" not in full.config.settings  # a float32 study keeps its old settings
    for low, high in ((half.store, full.store), (half.pools.store, full.pools.store)):
        assert low.attrs["signal_dtype"] == "float16" and high.attrs["signal_dtype"] == "float32"
        record = low.record_ids()[0]
        assert low.signal_array(record).dtype == np.float16
        assert low.signal_array(record).nbytes * 2 == high.signal_array(record).nbytes
        x16, x32 = (s.read_windows(record, 0, s.n_windows(record)) for s in (low, high))
        assert x16.dtype == np.float32  # reads are float32 whatever the store holds
        np.testing.assert_array_equal(x16, x32.astype(np.float16).astype(np.float32))
    with pytest.raises(InputError, match="signal_dtype"):
        StudyConfig(out=tmp_path / "bad", signal_dtype="int8")
