"""The transfer study (issue 41): night budgets, its target draws and pools, which never hold a
target test subject, its refusals, and a tiny study end to end with every row, resumed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.cohort.profiles import PROFILES, plan_profile_cohort
from partnd.datasets.label_budget import LabelBudget
from partnd.engine.trainer import START_EPOCH
from partnd.evaluation.bootstrap import bootstrap_metric, kappa_metric
from partnd.finetuning.sequence import EVALUATION_CROP
from partnd.recipes import transfer_study
from partnd.recipes.study_directory import run_recipe
from partnd.recipes.transfer_data import TransferConfig, cohort_seeds
from partnd.recipes.transfer_report import CHOSEN_ROW, write_report
from partnd.recipes.transfer_study import (
    SOURCE_SUPERVISED,
    ZERO_SHOT,
    TransferStudy,
    transfer_cells,
    transfer_rows,
)
from tests.test_sample_efficiency_axes import FINETUNE, NIGHT, PRETRAIN, SEQUENCE


def tiny_config(out: Path, **changes: object) -> TransferConfig:
    """A transfer study of 0.25 h nights and a few steps per training (the sample-efficiency
    study's tiny settings)."""
    settings: dict[str, object] = {
        "out": out,
        "target": "headband",
        "sources": ("sleep_edf", "pc18"),
        "target_records": 16,
        "source_records": 3,
        "hours": 0.25,
        "budgets": ("1n", "2n", "4n"),
        "draws": 3,
        "progress": False,
        "device": "cpu",
        "pretrain_overrides": PRETRAIN,
        "finetune_overrides": FINETUNE,
        "sequence_overrides": SEQUENCE,
        "night_overrides": NIGHT,
        **changes,
    }
    return TransferConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def headband_study(tmp_path_factory: pytest.TempPathFactory) -> TransferStudy:
    """A headband target (two nights per subject: 8 subjects) with Sleep-EDF-like and PC18
    sources, its stores built."""
    study = TransferStudy(tiny_config(tmp_path_factory.mktemp("transfer") / "study"))
    _ = study.profile_stores
    return study


def test_night_budgets_parse_order_and_refusals() -> None:
    budget = LabelBudget.parse("2n")
    assert (budget.nights, budget.subjects, budget.windows_per_stage) == (2, None, None)
    assert str(budget) == "2n" and budget.to_json() == "2n"
    ordered = sorted(map(LabelBudget.parse, [4, "4n", "w20", "1n", 1]), key=lambda b: b.sort_key)
    assert [b.to_json() for b in ordered] == ["w20", "1n", "4n", 1, 4]
    for bad in ("0n", "n", "1.5n", "2nights"):
        with pytest.raises(InputError, match="budgets: expected a number of labelled subjects"):
            LabelBudget.parse(bad, "budgets")


def _subjects(study: TransferStudy, profile: str, records: list[str]) -> set[str]:
    store = study.profile_stores[profile]
    return {store.record_attrs(record)["subject_id"] for record in records}


def test_target_test_subjects_are_in_no_pool_and_no_source(headband_study: TransferStudy) -> None:
    study = headband_study
    test = set(study.split.test)
    assert test and _subjects(study, "headband", list(study.split.test_records)) == test
    pools = study.pretraining
    for pool in ("mixed", "target"):
        nights = pools.pool_nights(pool)
        assert set(nights) == (
            {"headband", "sleep_edf", "pc18"} if pool == "mixed" else {"headband"}
        )
        assert not _subjects(study, "headband", nights["headband"]) & test
        assert not set(nights["headband"]) & set(study.split.test_records)
    # the mixed pool holds every source night, the target pool every non-test target night
    assert len(pools.pool_nights("mixed")["sleep_edf"]) == 3
    target_nights = study.store.record_ids()
    assert sorted(pools.pool_nights("target")["headband"]) == sorted(
        r for r in target_nights if r not in study.split.test_records
    )
    for profile in ("sleep_edf", "pc18"):
        store = study.profile_stores[profile]
        assert not _subjects(study, profile, store.record_ids()) & test
    # other cohort seeds: no source night is synthesised from a target night's seed
    seeds = cohort_seeds(study.config)
    assert len(set(seeds.values())) == 3
    config = study.config

    def night_seeds(profile: str) -> set[int]:
        records = config.target_records if profile == config.target else config.source_records
        plan = plan_profile_cohort(PROFILES[profile], records, config.hours, seeds[profile])
        return {record.spec.seed for record in plan}

    assert not night_seeds("headband") & night_seeds("sleep_edf")
    # every label draw is of non-test subjects
    for budget in study.budgets:
        for seed in study.scale.seeds:
            draw = study.draw(budget, seed)
            assert not (set(draw.subjects) | set(draw.validation)) & test


def _source_nights(study: TransferStudy) -> dict[str, tuple[list[str], list[str]]]:
    """``{source: (training records, validation records)}`` of the source-supervised model's
    nights, each checked to be read from that source's own store."""
    source = study.pretraining.source
    train = source.nights(int(source.finetune_config().night_crop), validation=False)
    val = source.nights(EVALUATION_CROP, validation=True)
    profiles = list(source.stores)
    for part, crops in ((train, int(source.finetune_config().night_crop)), (val, EVALUATION_CROP)):
        assert [d.store_path for d in part] == [study.profile_stores[p].path for p in profiles]
        assert all(d.context == crops for d in part)
    return {
        p: (list(t.records), list(v.records)) for p, t, v in zip(profiles, train, val, strict=True)
    }


def test_source_model_reads_every_sources_labelled_nights_validated_on_its_own_subjects(
    headband_study: TransferStudy,
) -> None:
    study = headband_study
    assert study.config.labelled_sources == ("sleep_edf", "pc18")
    nights = _source_nights(study)
    assert list(nights) == ["sleep_edf", "pc18"]
    target = _subjects(study, "headband", study.store.record_ids())
    for profile, (train, val) in nights.items():
        store = study.profile_stores[profile]
        assert train and val and not set(train) & set(val)
        assert sorted(train + val) == sorted(store.record_ids(labelled_only=True))
        held_out = _subjects(study, profile, val)
        assert 1 <= len(held_out) <= study.scale.val_subjects  # scaled down on tiny sources
        assert not held_out & _subjects(study, profile, train)  # held out by subject
        assert not (held_out | _subjects(study, profile, train)) & target
    # seeded: a new view of the same study draws the same validation subjects
    again = TransferStudy(study.config)
    again.profile_stores = study.profile_stores  # the same stores, not built again
    assert _source_nights(again) == nights


def test_source_model_restricted_to_one_source(
    headband_study: TransferStudy, tmp_path: Path
) -> None:
    config = tiny_config(tmp_path / "one", labelled_sources=["pc18"])
    assert config.labelled_sources == ("pc18",)
    study = TransferStudy(config)
    study.profile_stores = headband_study.profile_stores  # the same stores, not built again
    nights = _source_nights(study)
    assert list(nights) == ["pc18"]
    assert nights["pc18"] == _source_nights(headband_study)["pc18"]
    assert json.loads((config.out / "study.json").read_text())["labelled_sources"] == ["pc18"]


def test_night_draws_are_nested_nights_one_per_subject_first(headband_study: TransferStudy) -> None:
    study = headband_study
    subject_of = {r: info.subject_id for r, info in study.split.records.items()}
    assert [str(b) for b in study.budgets] == ["1n", "2n", "4n"]
    for seed in study.scale.seeds:
        draws = [study.draw(budget, seed) for budget in study.budgets]
        nights = [set(draw.labelled_windows or {}) for draw in draws]
        assert [len(n) for n in nights] == [1, 2, 4]
        assert nights[0] <= nights[1] <= nights[2]  # nested within a seed
        assert len({subject_of[r] for r in nights[1]}) == 2  # a night of two subjects first
        for draw, drawn in zip(draws, nights, strict=True):
            assert set(draw.subjects) == {subject_of[r] for r in drawn}
            assert not set(draw.subjects) & set(draw.validation)
            assert draw.validation == draws[0].validation
            for record in drawn:  # every labelled window of the night
                labelled = np.flatnonzero(study.store.stages(record) >= 0)
                assert np.array_equal((draw.labelled_windows or {})[record], labelled)
            assert draw.to_dict()["nights"] == sorted(drawn)
    # a subject's other night is not read as a labelled (or empty) night of the draw
    draw = study.draw("1n", 0)
    (subject,) = draw.subjects
    assert len(study.split.records_of([subject])) == 2
    assert list(study.windows(draw.subjects, draw.labelled_windows).records) == sorted(
        draw.labelled_windows or {}
    )
    with pytest.raises(InputError, match="budgets: expected at most"):
        study.draw("9n", 0)


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="target: expected one of"):
        tiny_config(tmp_path / "a", target="sleepedf2")
    with pytest.raises(InputError, match="sources: expected profiles other than the target"):
        tiny_config(tmp_path / "a", target="sleep-edf", sources=("pc18", "sleep_edf"))
    with pytest.raises(InputError, match="sources: expected one or more distinct"):
        tiny_config(tmp_path / "a", sources=("pc18", "pc18"))
    with pytest.raises(InputError, match="labelled_sources: expected one of"):
        tiny_config(tmp_path / "a", labelled_sources=("pc19",))
    with pytest.raises(InputError, match=r"labelled_sources: expected sources among \['sleep_edf'"):
        tiny_config(tmp_path / "a", labelled_sources=("nsrr",))
    with pytest.raises(InputError, match="labelled_sources: expected one or more distinct"):
        tiny_config(tmp_path / "a", labelled_sources=())
    with pytest.raises(InputError, match="labelled_sources: expected a sequence"):
        tiny_config(tmp_path / "a", labelled_sources="pc18")
    assert tiny_config(tmp_path / "a", labelled_sources=("PC18",)).labelled_sources == ("pc18",)
    with pytest.raises(InputError, match="draws: expected an int >= 1"):
        tiny_config(tmp_path / "a", draws=0)
    with pytest.raises(InputError, match="src: expected no --src"):
        tiny_config(tmp_path / "a", src=tmp_path)
    with pytest.raises(InputError, match="budgets: expected"):
        tiny_config(tmp_path / "a", budgets=("1x",))
    assert tiny_config(tmp_path / "a", target="sleep-edf", sources=("nsrr",)).target == "sleep_edf"
    # the command line: one line naming the option, and no directory left behind
    for command in (
        ["--target", "nope"],
        ["--sources", "sleep-edf"],
        ["--sources", "pc18", "nsrr", "--labelled-sources", "headband"],
    ):
        out = tmp_path / "cli"
        argv = ["cells", "--out", str(out), *command]
        assert (
            run_recipe("ts", lambda argv=argv: transfer_study.main(argv), transfer_study.OPTIONS)
            == 2
        )
        assert not out.exists()


def test_cells_command_lists_every_row_budget_and_draw(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["cells", "--out", str(tmp_path / "s"), "--budgets", "w20", "1n", "--draws", "5"]
    assert transfer_study.main(argv) == 0
    lines = capsys.readouterr().out.split()
    assert len(lines) == 10 * 2 * 5  # rows x budgets x draws
    assert "source_supervised:zeroshot:w20:4" in lines
    assert "part_windows:night:1n:0:mixed" in lines and "mae:night:1n:4:target" in lines
    assert lines.index("supervised:night:w20:0") < lines.index("supervised:night:1n:0")


def test_pools_and_night_set_options_choose_rows_and_night_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "s"
    argv = ["cells", "--out", str(out), "--budgets", "1n", "--draws", "2", "--methods", "mae"]
    argv += ["--pools", "mixed", "--night-set", "min_steps=150", "--night-set", "probe_steps=5"]
    argv += ["--pretrain-set", "variance_weight=25"]
    assert transfer_study.main(argv) == 0
    lines = capsys.readouterr().out.split()
    assert len(lines) == 7 * 2  # six label rows and MAE on the mixed pool, two draws
    assert "mae:night:1n:1:mixed" in lines and not any(line.endswith(":target") for line in lines)
    settings = json.loads((out / "study.json").read_text())
    assert settings["night_overrides"] == {"min_steps": 150, "probe_steps": 5}
    assert settings["pretrain_overrides"]["variance_weight"] == 25
    study = TransferStudy(
        transfer_study.config_from_args(transfer_study.build_parser().parse_args(argv))
    )
    assert study.config.pretrain_config("part_windows", pool=True).variance_weight == 25
    held = [*argv[:-2], "--pretrain-set", "trained_levels=temporal"]
    config = transfer_study.config_from_args(transfer_study.build_parser().parse_args(held))
    assert config.pretrain_config("part_windows", pool=True).trained_levels == "temporal"
    assert config.pretrain_config("mae", pool=True).trained_levels == "all"
    night = study.config.finetune_config("mae", 0, "night", study.budgets[0])
    assert night.min_steps == 150 and night.probe_steps == 5
    scratch = study.config.finetune_config("supervised", 0, "night", study.budgets[0])
    assert scratch.min_steps == 150 and scratch.probe_steps == 0  # nothing pretrained to hold
    assert transfer_rows(["mae"], ["target"])[-1] == ("mae", "night", "target")
    bare = ["cells", "--out", str(tmp_path / "bare"), "--budgets", "1n", "--draws", "1"]
    assert transfer_study.main([*bare, "--methods"]) == 0  # nothing pretrained
    assert capsys.readouterr().out.split() == [
        f"{row}:1n:0"
        for row in (
            "supervised:night",
            "classical:window",
            "classical:sequence",
            "yasa_pretrained:sequence",
            "source_supervised:zeroshot",
            "source_supervised:night",
        )
    ]
    with pytest.raises(InputError, match=r"pools: expected pools among \('mixed', 'target'\)"):
        transfer_rows(["mae"], ["both"])
    for bad in (["--pools", "both"], ["--night-set", "probe_steps"], ["--pretrain-set", "lr"]):
        command = ["cells", "--out", str(tmp_path / "bad"), *bad]
        status = run_recipe(
            "ts", lambda argv=command: transfer_study.main(argv), transfer_study.OPTIONS
        )
        assert status == 2 and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_tiny_transfer_study_end_to_end_and_resumed(tmp_path: Path) -> None:
    """Every row on a Sleep-EDF-like target from PC18 and headband sources, interrupted after
    some cells and continued without recomputing them."""
    config = tiny_config(
        tmp_path / "study",
        target="sleep-edf",
        sources=("pc18", "headband"),
        target_records=8,
        source_records=4,
        budgets=("1n",),
        draws=2,
    )
    study = TransferStudy(config)
    rows = transfer_rows()
    cells = transfer_cells(study, rows)
    assert len(cells) == 10 * 2
    first = [cell for cell in cells if cell[0] in ("supervised", SOURCE_SUPERVISED)]
    study.run_cells(first)  # interrupted: the rest still to run
    done = {cell: study.cell_dir(*cell) / "result.json" for cell in first}
    stamps = {cell: os.stat(path).st_mtime_ns for cell, path in done.items()}
    study = TransferStudy(config)  # reopened, as a later command does
    study.run_cells(cells)
    assert {cell: os.stat(path).st_mtime_ns for cell, path in done.items()} == stamps
    assert all(study.cell_done(*cell) for cell in cells)
    # every row with target labels used the same draw of each seed; the others used none
    for seed in (0, 1):
        draws = {
            json.dumps(study.load_cell(*cell).draw, sort_keys=True)
            for cell in cells
            if cell[3] == seed and cell[1] != ZERO_SHOT and cell[0] != "yasa_pretrained"
        }
        assert len(draws) == 1
    zero_shot = [study.load_cell(*cell) for cell in cells if cell[1] == ZERO_SHOT]
    assert all(cell.subjects == () for cell in zero_shot)
    # the source model trained on both sources, validated on each one's held-out nights
    validation = zero_shot[0].settings["validation_records"]
    assert zero_shot[0].settings["sources"] == list(validation) == ["pc18", "headband"]
    scored = sum(
        int((study.profile_stores[profile].stages(record) >= 0).sum())
        for profile, records in validation.items()
        for record in records
    )
    run = json.loads((study.out / SOURCE_SUPERVISED / "run" / "metrics.json").read_text())
    assert run["n"] == scored
    assert np.array_equal(zero_shot[0].predictions, zero_shot[1].predictions)
    # the fine-tuned source cells start from the whole source classifier, evaluated at step 0
    for cell in cells:
        if cell[0] == SOURCE_SUPERVISED and cell[1] == "night":
            tuned = study.load_cell(*cell)
            assert tuned.settings["init"] == "source-supervised night classifier, whole"
            first = next(r for r in tuned.history if r["phase"] == "val")
            assert (first["epoch"], first["step"]) == (START_EPOCH, 0)
    write_report(study, rows, cells)
    table = json.loads((study.out / "transfer_kappa.json").read_text())
    labels = {row["row"] for row in table}
    assert labels == {
        "supervised+night",
        "classical",
        "classical+seq",
        "yasa_pretrained+seq",
        "source_supervised zeroshot",
        "source_supervised+night",
        "part_windows+night @mixed",
        "mae+night @mixed",
        "part_windows+night @target",
        "mae+night @target",
        CHOSEN_ROW,
    }
    assert all(row["missing"] == 0 for row in table)
    # the interval of a row whose draws agree is the bootstrap interval of its one prediction
    (shared,) = [row for row in table if row["row"] == "source_supervised zeroshot"]
    interval = bootstrap_metric(
        study.test_set.labels,
        zero_shot[0].predictions,
        study.test_subjects,
        kappa_metric(len(study.class_names)),
    )
    assert shared["ci95"] == f"[{interval.low:.3f}, {interval.high:.3f}]"
    # validation kappa: the selected checkpoints', blank for the rows that select none
    loaded = {(c.label, c.seed): c for c in (study.load_cell(*cell) for cell in cells)}
    for row in table:
        picked = [
            c.settings.get("val_kappa") for (label, _), c in loaded.items() if label == row["row"]
        ]
        if row["row"] in ("source_supervised zeroshot", "yasa_pretrained+seq"):
            assert picked == [None, None] and row["val_kappa"] == ""
        if row["row"] in ("supervised+night", "source_supervised+night", "mae+night @target"):
            assert None not in picked
            assert row["val_kappa"].startswith(f"{np.mean(picked):.3f} ± ")
    differences = json.loads((study.out / "transfer_differences.json").read_text())
    assert len(differences) == len(cells) + 2  # and the row chosen on validation, per draw
    for seed in (0, 1):
        pretrained = [c for (_, s), c in loaded.items() if s == seed and c.pool is not None]
        best = max(pretrained, key=lambda c: c.settings["val_kappa"])
        (chosen,) = [r for r in differences if r["row"] == CHOSEN_ROW and r["seed"] == seed]
        assert chosen["kappa"] == round(best.report.cohen_kappa, 4)
        assert chosen["val_kappa"] == pytest.approx(best.settings["val_kappa"], abs=1e-4)
    for row in differences:
        if row["row"] == CHOSEN_ROW:
            continue
        selected = loaded[(row["row"], row["seed"])].settings.get("val_kappa")
        assert row["val_kappa"] == ("" if selected is None else pytest.approx(selected, abs=1e-4))
    scratch = {r["seed"]: r["kappa"] for r in differences if r["row"] == "supervised+night"}
    for row in differences:
        if row["row"] != "supervised+night":
            expected = round(row["kappa"] - scratch[row["seed"]], 4)
            assert row["minus supervised+night"] == pytest.approx(expected, abs=2e-4)
    summary = {
        row["row"]: row
        for row in json.loads((study.out / "transfer_difference_summary.json").read_text())
    }
    assert summary["source_supervised zeroshot"]["labelled_sets"] == 0
    nights = {r["labelled"] for r in differences if r["row"] == "mae+night @mixed"}
    assert summary["mae+night @mixed"]["labelled_sets"] == len(nights) >= 1
    assert (study.out / "transfer.png").stat().st_size > 0
    resolved = json.loads((study.out / "config.json").read_text())
    assert resolved["target"] == "sleep_edf" and resolved["sources"] == ["pc18", "headband"]


def test_scratch_reads_the_target_channels_every_other_row_a_channel_set(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "s")
    assert config.finetune_config("supervised", 0, "night", "1n").channel_mode == "fixed"
    for method in ("part_windows", "mae", SOURCE_SUPERVISED):
        assert config.finetune_config(method, 0, "night", "1n").channel_mode == "set"
    for method in ("part_windows", "mae"):
        assert config.pretrain_config(method).channel_mode == "set"
    source = TransferStudy(config).pretraining.source
    assert source.finetune_config().channel_mode == "set"
    assert source.finetune_config().context == "night"


def test_the_source_row_starts_from_the_whole_source_classifier_and_may_keep_it(
    tmp_path: Path,
) -> None:
    config = tiny_config(tmp_path / "s")
    source = config.finetune_config(SOURCE_SUPERVISED, 0, "night", "1n")
    assert source.evaluate_start  # the trained start is a candidate of the selection
    for method in ("supervised", "part_windows", "mae"):
        assert not config.finetune_config(method, 0, "night", "1n").evaluate_start
    study = TransferStudy(config)
    pretraining = study.pretraining
    assert pretraining.pretrain_dir(SOURCE_SUPERVISED) == study.out / SOURCE_SUPERVISED / "run"
    assert not pretraining.pretrained(SOURCE_SUPERVISED)  # no classifier.pt yet
    assert not pretraining.source.finetune_config().evaluate_start  # trained from scratch
