"""The study's rows as tasks: grouping, longest-first order, and a run on two processes that
writes the same cells as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from partnd._validation import InputError
from partnd.recipes import sleep_staging
from partnd.recipes.study_progress import progress_path, read_status
from partnd.recipes.study_tasks import (
    TASK_LOG,
    Cell,
    StudyTask,
    cell_tasks,
    row_tasks,
    run_tasks,
)
from tests.test_recipe_sleep_staging import cohort_root, tiny_study  # noqa: F401


def test_the_demo_rows_group_by_what_they_share_and_start_longest_first() -> None:
    tasks = row_tasks(sleep_staging.DEFAULT_ROWS, 2, 0)

    def cells(*rows: str) -> tuple[Cell, ...]:
        return tuple((*row.split(":"), 2, 0, None) for row in rows)  # type: ignore[misc]

    assert tasks == [
        StudyTask(cells("part_windows:probe", "part_windows:night"), ("part_windows", None)),
        StudyTask(cells("supervised:night")),
        StudyTask(cells("classical:window", "classical:sequence", "yasa_pretrained:sequence")),
        StudyTask(cells("supervised:window")),
        StudyTask(cells("supervised:probe")),
    ]
    assert tasks[0].name == "pretrain part_windows, part_windows:probe:2:0 part_windows:night:2:0"
    assert tasks[0].cost == pytest.approx(2.5 + 0.1 + 7.0)
    # every row once; without pretraining the chain keeps its cells only
    rows = [cell[:2] for task in tasks for cell in task.cells]
    assert sorted(rows) == sorted(sleep_staging.DEFAULT_ROWS)
    assert row_tasks(sleep_staging.DEFAULT_ROWS, 2, 0, pretrain=False)[0].pretrain is None
    assert StudyTask((), ("mae", None)).name == "pretrain mae"
    assert StudyTask((), ("mae", "16h")).name == "pretrain mae on 16h"


def test_cell_tasks_pretrain_side_by_side_with_the_cells_that_need_no_pretraining() -> None:
    cells: list[Cell] = [
        ("part_windows", "night", 1, seed, pool) for pool in ("16h", "320h") for seed in (0, 1)
    ]
    cells += [("mae", "probe", 1, 0, "16h"), ("supervised", "night", 1, 0, None)]
    cells += [("classical", "window", 1, seed, None) for seed in (0, 1)]
    cells += [("supervised", "probe", 1, 0, None)]
    finished = {("mae", "16h")}  # mae on 16h has pretrained; part_windows on no pool has
    first, then = cell_tasks(cells, lambda method, pool: (method, pool) in finished)
    # the pretrainings come first, one task each, whatever their cost; then the ready cells
    # alone (the mae cell reads a finished encoder), the classical ones together, longest first
    assert first == [
        StudyTask((), ("part_windows", "16h")),
        StudyTask((), ("part_windows", "320h")),
        StudyTask((("supervised", "night", 1, 0, None),)),
        StudyTask((("classical", "window", 1, 0, None), ("classical", "window", 1, 1, None))),
        StudyTask((("mae", "probe", 1, 0, "16h"),)),
        StudyTask((("supervised", "probe", 1, 0, None),)),
    ]
    # the cells of the pretrainings of the first round, one each, in order
    assert then == [StudyTask((cell,)) for cell in cells[:4]]
    # every cell exactly once over both rounds
    ran = [cell for task in first + then for cell in task.cells]
    assert sorted(map(str, ran)) == sorted(map(str, cells))
    # nothing left to pretrain: one round
    first, then = cell_tasks(cells, lambda method, pool: True)
    assert then == [] and not any(task.pretrain for task in first)
    assert cell_tasks([], lambda method, pool: False) == ([], [])


def test_a_bad_number_of_jobs_is_refused_before_anything_runs(
    cohort_root: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    study = tiny_study(tmp_path / "study", cohort_root)
    with pytest.raises(InputError, match="jobs"):
        sleep_staging.run(study, "all", [("classical", "window")], jobs=0)
    with pytest.raises(InputError, match="jobs"):
        run_tasks(study, [], jobs=-2)
    with pytest.raises(InputError, match="backend"):
        sleep_staging.run(study, "all", [("classical", "window")], jobs=2, backend="ray")
    with pytest.raises(InputError, match="scheduler_address: expected no scheduler address"):
        run_tasks(study, [], jobs=2, scheduler_address="tcp://127.0.0.1:8786")
    assert not (tmp_path / "study" / "finetune").exists()


@pytest.mark.slow
def test_two_processes_write_the_cells_one_process_writes(
    cohort_root: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    rows = [("part", "probe"), ("supervised", "window"), ("classical", "window")]
    studies = {}
    for name, jobs, backend in ((1, 1, "loky"), (2, 2, "loky"), ("dask", 2, "dask")):
        study = tiny_study(tmp_path / f"jobs{name}", cohort_root)
        sleep_staging.run(study, "all", rows, jobs=jobs, backend=backend)
        studies[name] = study
    printed = capsys.readouterr().out
    assert printed.count("finished pretrain part, part:probe:1:0 in ") == 3
    assert printed.count("finished supervised:window:1:0 in ") == 3
    assert printed.count("3 tasks on a local dask cluster of 2 processes:\n  task 1: ") == 1
    # a local dask cluster: the same cells and the same table as two local processes (both run
    # every task in a single-threaded worker process, from the same seeds)
    dask = studies["dask"]
    for method, arm in rows:
        local, clustered = (
            studies[2].load_cell(method, arm, 1, 0),
            dask.load_cell(method, arm, 1, 0),
        )
        assert clustered.subjects == local.subjects and clustered.settings == local.settings
        assert np.array_equal(clustered.predictions, local.predictions), (method, arm)
    assert (dask.out / "results.json").read_text() == (studies[2].out / "results.json").read_text()
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
    # two processes: each task's progress file says done, and its times are logged
    assert printed.count("3 tasks on 2 processes:\n  task 1: ") == 1  # the numbered list
    statuses = [read_status(progress_path(two.out, index)) for index in range(3)]
    assert all(status is not None and status.done for status in statuses)
    logged = [json.loads(line) for line in (two.out / TASK_LOG).open()]
    assert sorted(record["name"] for record in logged) == sorted(s.name for s in statuses if s)
    assert all(record["wall_s"] > 0 and record["cpu_s"] > 0 for record in logged)
    assert len((one.out / TASK_LOG).read_text().splitlines()) == 3  # one process logs too


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
    assert (args.backend, args.scheduler) == ("loky", None)
    argv = ["all", "--src", str(cohort_root), "--out", str(out), "--scheduler", "tcp://h:8786"]
    assert sleep_staging.command([*argv, "--no-progress"]) == 2
    assert "--scheduler: expected no --scheduler without --backend dask" in capsys.readouterr().err
    assert not out.exists()
    args = sleep_staging.build_parser().parse_args(
        ["--backend", "dask", "--scheduler", "tcp://h:1"]
    )
    assert (args.backend, args.scheduler) == ("dask", "tcp://h:1")


def test_a_study_class_of_a_module_run_with_python_m_reaches_the_workers_by_name(
    tmp_path: Path,
) -> None:
    """``python -m partnd.recipes.transfer_study run --jobs 2`` failed to send its tasks: the
    study class of a module run as ``__main__`` was pickled by value, with its
    ``cached_property``'s lock. ``importable_class`` sends the class of the module's real name."""
    module = tmp_path / "study_kind_module.py"
    module.write_text(
        textwrap.dedent(
            """
            import functools
            import pickle

            import cloudpickle

            from partnd.recipes.study_tasks import importable_class


            class Kind:
                @functools.cached_property
                def cached(self):
                    return 1


            if __name__ == "__main__":
                try:
                    cloudpickle.dumps(Kind)
                except (TypeError, pickle.PicklingError) as error:
                    print("by value:", type(error).__name__)
                resolved = importable_class(Kind)
                print("module:", resolved.__module__)
                print("round trip:", pickle.loads(cloudpickle.dumps(resolved)) is resolved)
                print("importable unchanged:", importable_class(dict) is dict)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "study_kind_module"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.split("\n")
    if sys.version_info < (3, 12):  # cached_property holds a lock until Python 3.12
        assert lines[0] == "by value: TypeError"
        lines = lines[1:]
    assert lines[:3] == [
        "module: study_kind_module",
        "round trip: True",
        "importable unchanged: True",
    ]
