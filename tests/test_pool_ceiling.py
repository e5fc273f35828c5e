"""The pool axis's oracle ceiling (``supervised_pool``): a supervised pretraining on a pool's own
stage labels, fine-tuned as every pretrained encoder and reported as a reference row."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.datasets.store import SleepStore
from partnd.models.serialization import load_encoder
from partnd.recipes import sample_efficiency, study_ceiling
from partnd.recipes.sample_efficiency_report import ceiling_rows, mark_references, room_taken
from partnd.recipes.sleep_study import CellResult, SleepStudy, StudyConfig
from tests.finetune_helpers import TINY

PRETRAIN = {**TINY, "epochs": 1, "min_steps": 6, "num_pairs": 16}
POOL = {"eval_every_steps": 2, "patience": 2}
FINETUNE = {**TINY, "epochs": 1, "min_steps": 4, "eval_every_steps": 2, "batch_size": 8}
ROWS = [
    ("supervised_pool", "window"),
    ("supervised_pool", "probe"),
    ("supervised", "window"),
    ("supervised", "probe"),
    ("mae", "probe"),
]


def ceiling_study(out: Path, src: Path, pool_src: Path) -> SleepStudy:
    config = StudyConfig(
        out=out,
        src=src,
        progress=False,
        device="cpu",
        pretrain_overrides=PRETRAIN,
        finetune_overrides=FINETUNE,
        budgets=("w3",),
        seeds=(0, 1),
        pools=(0.9,),
        pool_src=pool_src,
        held_out_subjects=1,
        pool_overrides=POOL,
    )
    config.check_settings([method for method, _ in ROWS])
    return SleepStudy(config)


@pytest.mark.slow
def test_the_ceiling_reads_only_pool_labels_fine_tunes_like_a_pretrained_encoder_and_is_a_reference_row(  # noqa: E501
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_pc18_cohort(tmp_path / "study", n_records=10, hours=0.5, seed=1, progress=False)
    pool_src = make_pc18_cohort(
        tmp_path / "pool", n_records=5, hours=0.5, seed=2, test_fraction=0.0, progress=False
    )
    out = tmp_path / "study_out"
    study = ceiling_study(out, src.root, pool_src.root)
    read: list[dict[str, Any]] = []
    real_finetune = study_ceiling.finetune

    def spy(encoder: Any, train: Any, **kwargs: Any) -> Any:
        read.append(
            {
                "train": study_ceiling.records_read(train),
                "held_out": study_ceiling.records_read(kwargs["val_dataset"]),
                "labels": train.labels,
            }
        )
        return real_finetune(encoder, train, **kwargs)

    monkeypatch.setattr(study_ceiling, "finetune", spy)
    cells = sample_efficiency.cell_list(study, ROWS)
    ceiling_cells = [cell for cell in cells if cell[0] == "supervised_pool"]
    assert {cell[4] for cell in ceiling_cells} == {"0.9h"} and len(ceiling_cells) == 2 * 2
    sample_efficiency.run_cells(study, cells, jobs=1)
    assert len(read) == 1  # one pretraining, shared by its cells

    # the labels read: the pool's records and its held-out nights, no study subject's
    plan = study.pools.plan
    (trained,) = read
    assert trained["train"] and set(trained["train"]) <= set(plan.records("0.9h"))
    assert trained["held_out"] and set(trained["held_out"]) <= set(plan.held_out)
    assert (trained["labels"] >= 0).all()  # labelled windows only
    pool_store = SleepStore(out / "pool_store.zarr")
    subjects = {
        str(pool_store.record_attrs(record)["subject_id"])
        for record in [*trained["train"], *trained["held_out"]]
    }
    split = study.split
    labelled = {s for seed in (0, 1) for s in (*study.draw("w3", seed).subjects,)}
    validation = {s for seed in (0, 1) for s in study.draw("w3", seed).validation}
    assert subjects.isdisjoint({*split.test, *split.finetune_pool, *labelled, *validation})
    chosen = study.pools.selection("supervised_pool", "0.9h")
    assert chosen["records"] == trained["train"]
    assert chosen["held_out_records"] == trained["held_out"]
    assert chosen["selected"]["metric"] == "cohen_kappa"
    assert chosen["selected"]["step"] <= chosen["selected"]["steps"] <= chosen["cap"]
    assert chosen["cap"] >= 6  # the pools' step cap

    # its encoder has the shape of the pools' other pretrained encoders
    ceiling = load_encoder(study.pretrain_dir("supervised_pool", "0.9h"))
    mae = load_encoder(study.pretrain_dir("mae", "0.9h"))
    assert ceiling.architecture == mae.architecture
    shapes = {name: tuple(value.shape) for name, value in mae.state_dict().items()}
    for name, value in ceiling.state_dict().items():
        if name in shapes:
            assert tuple(value.shape) == shapes[name], name
    window = study.load_cell("supervised_pool", "window", "w3", 0, "0.9h")
    assert window.settings["init"] == "supervised_pool pretraining on pool 0.9h"
    assert window.settings["note"].startswith("reference (oracle)")
    assert window.draw == study.load_cell("supervised", "window", "w3", 0).draw

    # the report: a reference (oracle) row, and ceiling - scratch per budget, per draw
    sample_efficiency.aggregate(study, ROWS)
    printed = capsys.readouterr().out
    assert "The room for pretraining: ceiling - scratch" in printed
    markdown = (out / "kappa_by_budget.md").read_text()
    assert "supervised_pool @0.9h (oracle)" in markdown
    assert "supervised_pool probe @0.9h (oracle)" in markdown
    with open(out / "difference_to_reference.csv") as handle:  # a user's row, not the oracle
        assert "supervised_pool @0.9h - supervised" in next(csv.DictReader(handle))
    with open(out / "ceiling_minus_scratch.csv") as handle:
        room = list(csv.DictReader(handle))
    assert [(r["budget"], r["ceiling"], r["scratch"]) for r in room] == [
        ("w3", "supervised_pool @0.9h", "supervised"),
        ("w3", "supervised_pool probe @0.9h", "supervised probe"),
    ]
    for row, arm in zip(room, ("window", "probe"), strict=True):
        differences = [
            study.load_cell("supervised_pool", arm, "w3", seed, "0.9h").report.cohen_kappa
            - study.load_cell("supervised", arm, "w3", seed).report.cohen_kappa
            for seed in (0, 1)
        ]
        assert row["per draw"] == ", ".join(
            f"s{seed} {round(value, 4):+.3f}" for seed, value in enumerate(differences)
        )
        assert row["ceiling - scratch"].startswith(f"{sum(differences) / 2:.3f} ± ")
        assert row["ceiling - scratch"] in printed
    with open(out / "room_taken.csv") as handle:  # MAE's probe against the ceiling's probe
        (taken,) = list(csv.DictReader(handle))
    gains = [
        study.load_cell(method, "probe", "w3", seed, "0.9h").report.cohen_kappa
        - study.load_cell("supervised", "probe", "w3", seed).report.cohen_kappa
        for method in ("mae", "supervised_pool")
        for seed in (0, 1)
    ]
    mae_gain, room = sum(gains[:2]) / 2, sum(gains[2:]) / 2
    assert taken["row"] == "mae probe @0.9h" and taken["ceiling"] == "supervised_pool probe @0.9h"
    assert taken["draws"] == "2" and float(taken["gain"]) == pytest.approx(mae_gain, abs=1e-4)
    assert float(taken["room"]) == pytest.approx(room, abs=1e-4)
    assert taken["share"] == (f"{mae_gain / room:.2f}" if room > 0 else "no room")
    assert "The share of that room each pretrained row takes" in printed
    with open(out / "difference_to_scratch.csv") as handle:
        summary = next(csv.DictReader(handle))
    assert "supervised_pool @0.9h - supervised (oracle)" in summary
    with open(out / "pool_pretraining.csv") as handle:
        pools = {row["method"]: row for row in csv.DictReader(handle)}
    assert float(pools["supervised_pool"]["heldout_kappa"]) == pytest.approx(
        chosen["selected"]["value"]
    )
    assert pools["supervised_pool"]["heldout_error"] == "" and pools["mae"]["heldout_kappa"] == ""

    # resume: nothing is pretrained or fine-tuned again
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished stage was recomputed")

    monkeypatch.setattr(study_ceiling, "finetune", refuse)
    for name in ("finetune", "linear_probe"):
        monkeypatch.setattr(f"partnd.recipes.study_cells.{name}", refuse)
    monkeypatch.setattr("partnd.recipes.study_pools.pretrain", refuse)
    again = ceiling_study(out, src.root, pool_src.root)
    sample_efficiency.run_cells(again, cells, jobs=1)
    assert f"{len(cells)} of {len(cells)} cells already finished" in capsys.readouterr().out
    assert again.run_pretraining("supervised_pool", "0.9h") == study.pretrain_dir(
        "supervised_pool", "0.9h"
    )

    # stopped after its training, before selection.json: it resumes, and trains no step more
    run_dir = study.pretrain_dir("supervised_pool", "0.9h")
    (run_dir / "selection.json").unlink()
    resumed: list[bool] = []

    def resume_only(encoder: Any, train: Any, **kwargs: Any) -> Any:
        resumed.append(kwargs["resume"])
        return real_finetune(encoder, train, **kwargs)

    monkeypatch.setattr(study_ceiling, "finetune", resume_only)
    again.run_pretraining("supervised_pool", "0.9h")
    assert resumed == [True]
    assert again.pools.selection("supervised_pool", "0.9h")["selected"] == chosen["selected"]


def test_the_ceiling_needs_pools_and_trains_with_the_pools_budget(tmp_path: Path) -> None:
    """No data is read: the settings and the cells' list."""
    with pytest.raises(InputError, match="supervised_pool only with pretraining pools"):
        StudyConfig(out=tmp_path / "none").check_settings(["supervised_pool"])
    config = StudyConfig(
        out=tmp_path / "s", pools=(0.4, 1.2), pool_overrides={"patience": 3, "eval_every_steps": 7}
    )
    config.check_settings(["supervised_pool"])
    ceiling = config.pool_ceiling_config()
    pool = config.pretrain_config("mae", pool=True)
    for name in ("encoder", "encoder_overrides", "patch_size", "batch_size", "lr", "min_steps"):
        assert getattr(ceiling, name) == getattr(pool, name), name
    assert (ceiling.eval_every_steps, ceiling.patience, ceiling.patience_start) == (7, 3, None)
    assert ceiling.encoder_overrides["frontend"] == "spectral"  # the study's front-end
    assert ceiling.class_weights == "balanced" and ceiling.augmentations  # the study's loss
    assert ceiling.layer_decay is None and ceiling.pos_embed
    argv = ["cells", "--out", str(tmp_path / "cli"), "--src", str(tmp_path / "pc18")]
    argv += ["--pool-src", str(tmp_path / "nights"), "--pools", "0.4", "1.2", "--no-progress"]
    argv += ["--budgets", "w20", "1", "--seeds", "0", "--rows", "supervised_pool:night"]
    study = SleepStudy(config)
    assert sample_efficiency.cell_list(study, [("supervised_pool", "night")]) == [
        ("supervised_pool", "night", budget, seed, pool_name)
        for budget in (2, 4, 8)
        for seed in (0, 1, 2)
        for pool_name in ("0.4h", "1.2h")
    ]
    assert sample_efficiency.main(argv) == 0
    with pytest.raises(InputError, match="pool"):
        study.run_cell("supervised_pool", "night", 2, 0)
    with pytest.raises(InputError, match="pool"):
        study.run_pretraining("supervised_pool")


def test_the_ceiling_tables_mark_the_oracle_and_pair_it_with_scratch() -> None:
    differences = [
        {"budget": "w20", "seed": s, "row": "supervised_pool+night @16h", "reference": "oracle",
         "baseline": "supervised+night", "difference": d}
        for s, d in ((0, 0.05), (1, -0.01), (2, 0.02))
    ] + [
        {"budget": "w20", "seed": 0, "row": "mae probe @16h", "reference": "",
         "baseline": "supervised probe", "difference": 0.3},
    ]  # fmt: skip
    (row,) = ceiling_rows(differences)
    assert row == {
        "budget": "w20",
        "ceiling": "supervised_pool+night @16h",
        "scratch": "supervised+night",
        "ceiling - scratch": "0.020 ± 0.030 (n=3)",
        "positive": "2/3",
        "per draw": "s0 +0.050, s1 -0.010, s2 +0.020",
    }
    marked = mark_references([{"budget": 1, "supervised_pool+night @16h": "x", "mae @16h": "y"}])
    assert marked == [{"budget": 1, "supervised_pool+night @16h (oracle)": "x", "mae @16h": "y"}]


def planted_cell(method: str, budget: int | str, seed: int, pool: str | None, kappa: float) -> Any:
    """A night cell whose report holds ``kappa``, the only field the report reads."""
    report = SimpleNamespace(cohen_kappa=kappa)
    return CellResult(
        method=method,
        arm="night",
        budget=budget,
        seed=seed,
        subjects=(),
        report=report,  # type: ignore[arg-type]
        predictions=np.zeros(0, dtype=np.int64),
        history=[],
        settings={},
        pool=pool,
        draw={},
    )


def test_the_share_of_the_room_is_the_rows_mean_gain_over_the_ceilings_on_the_same_draws() -> None:
    """Half the ceiling's gain is a share of 0.50; a pool or draw the ceiling did not run is
    left out; a ceiling not above scratch leaves no room (no share)."""
    kappas = {  # (method, budget, seed, pool) -> kappa
        **{("supervised", b, s, None): 0.5 for b in ("w20", 1) for s in (0, 1, 2)},
        **{("supervised_pool", "w20", s, "16h"): 0.5 + g for s, g in enumerate((0.1, 0.2, 0.3))},
        **{("supervised_pool", 1, s, "16h"): 0.45 for s in (0, 1)},
        **{("part_windows", "w20", s, "16h"): 0.5 + g for s, g in enumerate((0.1, 0.1, 0.1))},
        ("part_windows", "w20", 0, "320h"): 0.9,  # no ceiling at 320 h
        ("mae", "w20", 3, "16h"): 0.9,  # no ceiling (nor scratch) on draw 3
        **{("part_windows", 1, s, "16h"): 0.55 for s in (0, 1, 2)},
    }
    cells = [
        planted_cell(method, budget, seed, pool, kappa)
        for (method, budget, seed, pool), kappa in kappas.items()
    ]
    rows = room_taken(cells)
    assert [(r["budget"], r["row"], r["ceiling"], r["draws"]) for r in rows] == [
        ("w20", "part_windows+night @16h", "supervised_pool+night @16h", 3),
        (1, "part_windows+night @16h", "supervised_pool+night @16h", 2),
    ]
    assert rows[0]["gain"] == pytest.approx(0.1) and rows[0]["room"] == pytest.approx(0.2)
    assert rows[0]["share"] == "0.50"
    assert rows[1]["room"] == pytest.approx(-0.05) and rows[1]["share"] == "no room"
    assert room_taken([c for c in cells if c.method != "supervised_pool"]) == []
