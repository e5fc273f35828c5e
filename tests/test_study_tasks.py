"""The study's rows as tasks: grouping, longest-first order, and a run on two processes that
writes the same cells as one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.recipes import sleep_staging
from partnd.recipes.study_tasks import StudyTask, row_tasks, run_tasks
from tests.test_recipe_sleep_staging import cohort_root, tiny_study  # noqa: F401


def test_the_demo_rows_group_by_what_they_share_and_start_longest_first() -> None:
    tasks = row_tasks(sleep_staging.DEFAULT_ROWS)
    assert tasks == [
        StudyTask((("part_windows", "probe"), ("part_windows", "night")), "part_windows"),
        StudyTask((("supervised", "night"),)),
        StudyTask(
            (("classical", "window"), ("classical", "sequence"), ("yasa_pretrained", "sequence"))
        ),
        StudyTask((("supervised", "window"),)),
        StudyTask((("supervised", "probe"),)),
    ]
    assert tasks[0].name == "pretrain part_windows, part_windows:probe part_windows:night"
    assert tasks[0].cost == pytest.approx(2.5 + 0.1 + 7.0)
    # every row once; without pretraining the chain keeps its rows only
    rows = [row for task in tasks for row in task.rows]
    assert sorted(rows) == sorted(sleep_staging.DEFAULT_ROWS)
    assert row_tasks(sleep_staging.DEFAULT_ROWS, pretrain=False)[0].pretrain is None
    assert StudyTask((), "mae").name == "pretrain mae"


def test_a_bad_number_of_jobs_is_refused_before_anything_runs(
    cohort_root: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    study = tiny_study(tmp_path / "study", cohort_root)
    with pytest.raises(InputError, match="jobs"):
        sleep_staging.run(study, "all", [("classical", "window")], jobs=0)
    with pytest.raises(InputError, match="jobs"):
        run_tasks(study, [], 1, 0, jobs=-2)
    assert not (tmp_path / "study" / "finetune").exists()


@pytest.mark.slow
def test_two_processes_write_the_cells_one_process_writes(
    cohort_root: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    rows = [("part", "probe"), ("supervised", "window"), ("classical", "window")]
    studies = {}
    for jobs in (1, 2):
        study = tiny_study(tmp_path / f"jobs{jobs}", cohort_root)
        sleep_staging.run(study, "all", rows, jobs=jobs)
        studies[jobs] = study
    printed = capsys.readouterr().out
    assert printed.count("finished pretrain part, part:probe in ") == 2
    assert printed.count("finished supervised:window in ") == 2
    one, two = studies[1], studies[2]
    assert two.pretrained("part")
    for method, arm in rows:
        assert two.cell_done(method, arm, 1, 0)
        first, second = one.load_cell(method, arm, 1, 0), two.load_cell(method, arm, 1, 0)
        assert first.subjects == second.subjects and first.settings == second.settings
        assert -1.0 <= second.report.cohen_kappa <= 1.0
    # the classical cell is deterministic: the same predictions in a worker process
    assert np.array_equal(
        one.load_cell("classical", "window", 1, 0).predictions,
        two.load_cell("classical", "window", 1, 0).predictions,
    )
    table = json.loads((two.out / "results.json").read_text())
    assert [row["row"] for row in table] == ["part probe", "supervised", "classical"]


def test_the_command_names_jobs_and_leaves_no_study_behind(
    cohort_root: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    out = tmp_path / "cli"
    argv = ["all", "--src", str(cohort_root), "--out", str(out), "--jobs", "0", "--no-progress"]
    assert sleep_staging.command(argv) == 2
    assert "--jobs" in capsys.readouterr().err
    assert not out.exists()
    args = sleep_staging.build_parser().parse_args(["all", "--jobs", "2"])
    assert args.jobs == 2 and sleep_staging.build_parser().parse_args([]).jobs == 1
