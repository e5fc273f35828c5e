"""The night grid of the sleep studies: each night cell trains once per distinct configuration
of ``--night-grid`` and keeps the one its validation subjects choose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.engine.config import FinetuneConfig
from partnd.engine.run_dir import RunDir
from partnd.recipes import sleep_staging, transfer_study
from partnd.recipes.sample_efficiency_report import cell_rows
from partnd.recipes.set_options import assigned_grid
from partnd.recipes.sleep_study import StudyConfig
from partnd.recipes.study_progress import training_run, training_steps
from tests.test_recipe_sleep_staging import tiny_study


@pytest.fixture(scope="module")
def cohort_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cohort")
    make_pc18_cohort(root, n_records=10, hours=0.5, seed=1, progress=False)
    return root


def test_the_grid_tries_every_combination_on_the_night_arm_only(tmp_path: Path) -> None:
    grid = {"layer_decay": [1.0, 0.3], "label_smoothing": [0.0, 0.1]}
    config = StudyConfig(out=tmp_path, night_grid=grid)
    assert config.night_grid_points == [
        {"layer_decay": 1.0, "label_smoothing": 0.0},
        {"layer_decay": 1.0, "label_smoothing": 0.1},
        {"layer_decay": 0.3, "label_smoothing": 0.0},
        {"layer_decay": 0.3, "label_smoothing": 0.1},
    ]  # the first field's slowest
    assert StudyConfig(out=tmp_path).night_grid_points == [{}]
    point = config.night_grid_points[3]
    night = config.finetune_config("part_windows", 0, "night", grid=point)
    assert (night.layer_decay, night.label_smoothing) == (0.3, 0.1)
    window = config.finetune_config("part_windows", 0, "window", grid=point)
    assert window == config.finetune_config("part_windows", 0, "window")  # night arm only
    scratch = config.finetune_config("supervised", 0, "night", grid=point)
    assert scratch.layer_decay is None  # no decay of a random window encoder unless asked
    decayed = StudyConfig(out=tmp_path, night_overrides={"decay_random_window": True})
    assert decayed.finetune_config("supervised", 0, "night", grid=point).layer_decay == 0.3
    assert config.settings["night_grid"] == grid
    assert "night_grid" not in StudyConfig(out=tmp_path).settings  # older studies stay valid


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"layer_decay": [0.3]}, r"^night_grid: expected layer_decay: a list of two or more"),
        ({"layer_decay": [0.3, 0.3]}, r"^night_grid: expected layer_decay: a list of two or more"),
        ({"layer_decay": 0.3}, r"^night_grid: expected layer_decay: a list of two or more"),
        ({"layer_dcay": [1.0, 0.3]}, r"^night_grid: expected FinetuneConfig field names"),
        ({"min_steps": [10, 20]}, r"^night_grid: expected fields other than those of night_ov"),
    ],
)
def test_a_grid_without_two_distinct_values_or_beside_an_override_is_refused(
    tmp_path: Path, grid: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        StudyConfig(out=tmp_path, night_overrides={"min_steps": 10}, night_grid=grid)


def test_the_command_line_reads_json_lists_and_refuses_before_claiming_the_directory(
    tmp_path: Path,
) -> None:
    assert assigned_grid(
        ["layer_decay=[1.0, 0.3]", "lr=[1e-3,3e-4]"], FinetuneConfig, "--night-grid"
    ) == {"layer_decay": [1.0, 0.3], "lr": [1e-3, 3e-4]}

    def study(out: str, *grid: str) -> StudyConfig:
        options = [item for value in grid for item in ("--night-grid", value)]
        args = sleep_staging.build_parser("t").parse_args(["all", "--out", out, *options])
        return sleep_staging.study_from_args(args).config

    config = study(str(tmp_path / "grid"), "layer_decay=[1.0,0.3]")
    assert config.night_grid == {"layer_decay": [1.0, 0.3]}
    refused = str(tmp_path / "refused")
    for grid, message in (
        ("layer_decay=0.3", r"^--night-grid: expected layer_decay=\[V1,V2,...\]"),
        ("layer_decay", r"^--night-grid: expected FIELD=VALUE"),
        ("layer_decay=[1.0,-2]", r"^FinetuneConfig\.layer_decay: expected"),  # each point built
    ):
        with pytest.raises(InputError, match=message):
            study(refused, grid)
    assert not Path(refused).exists()
    args = transfer_study.build_parser().parse_args(
        ["cells", "--out", str(tmp_path / "t"), "--night-grid", "layer_decay=[1.0,0.3]"]
    )
    assert transfer_study.config_from_args(args).night_grid == {"layer_decay": [1.0, 0.3]}


def test_progress_follows_the_run_a_grid_cell_trains_now(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    assert training_run(cell) == cell and training_steps(cell) == (None, None)
    for name, steps in (("run-0", 12), ("run-1", 4)):
        (cell / name).mkdir(parents=True)
        meta = {"resolved": {"total_steps": 12}}
        (cell / name / "meta.json").write_text(json.dumps(meta))
        (cell / name / "metrics.jsonl").write_text(json.dumps({"step": steps}) + "\n")
    assert training_run(cell) == cell / "run-1"  # the newest started
    assert training_steps(cell) == (4, 12)
    assert training_run(cell / "run-0") == cell / "run-0"


def test_a_night_cell_keeps_the_configuration_its_validation_subjects_choose(
    cohort_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from partnd.recipes import study_cells

    # planted validation kappas: the second learning rate wins although it comes second
    planted = {2e-3: 0.2, 1e-3: 0.6}
    real_finetune = study_cells.finetune

    def finetune(*args: Any, **kwargs: Any) -> Any:
        result = real_finetune(*args, **kwargs)
        for record in result.history:
            if record.get("phase") == "val":
                record["cohen_kappa"] = planted[result.config.lr]
        return result

    monkeypatch.setattr(study_cells, "finetune", finetune)
    study = tiny_study(tmp_path / "study", cohort_root, night_grid={"lr": [2e-3, 1e-3]})
    cell = study.run_cell("supervised", "night", 1, 0)
    grid = cell.settings["night_grid"]
    assert [c["values"] for c in grid["candidates"]] == [{"lr": 2e-3}, {"lr": 1e-3}]
    assert [c["val_kappa"] for c in grid["candidates"]] == [0.2, 0.6]
    assert grid["chosen"] == {"lr": 1e-3} and grid["run"] == "run-1"
    assert cell.settings["val_kappa"] == 0.6
    assert cell.settings["selected_step"] == grid["candidates"][1]["selected_step"]
    cell_dir = study.cell_dir("supervised", "night", 1, 0)
    assert cell.history == RunDir(cell_dir / "run-1").history()  # the chosen run's
    assert not (cell_dir / "run").exists()
    chosen = json.loads((cell_dir / "run-1" / "meta.json").read_text())["resolved"]
    assert cell.settings["lr"] == chosen["peak_lr"] == pytest.approx(1e-3)
    assert len(cell.predictions) == len(study.test_set.labels)
    (table,) = cell_rows([cell])  # the sample-efficiency study's cells.csv
    assert (table["val_kappa"], table["night_grid"]) == (0.6, "lr=0.001")

    # a tie keeps the first; a grid a row ignores trains once, in run/
    planted.update({2e-3: 0.5, 1e-3: 0.5})
    tied = tiny_study(tmp_path / "tied", cohort_root, night_grid={"lr": [2e-3, 1e-3]})
    assert tied.run_cell("supervised", "night", 1, 0).settings["night_grid"]["chosen"] == {
        "lr": 2e-3
    }
    ignored = tiny_study(tmp_path / "ignored", cohort_root, night_grid={"layer_decay": [1.0, 0.3]})
    once = ignored.run_cell("supervised", "night", 1, 0)
    assert cell_rows([once])[0]["night_grid"] == ""
    assert [c["run"] for c in once.settings["night_grid"]["candidates"]] == ["run"]
    assert once.settings["night_grid"]["chosen"] == {}  # nothing to choose
    assert once.settings["layer_decay"] is None

    # a finished cell is read back; nothing trains again
    monkeypatch.setattr(study_cells, "finetune", None)
    again = tiny_study(tmp_path / "study", cohort_root, night_grid={"lr": [2e-3, 1e-3]})
    assert again.run_cell("supervised", "night", 1, 0).settings == cell.settings
