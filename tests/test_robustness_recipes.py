"""Recipe options that would be ignored, or silently narrow a study, are refused (issue 43)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.recipes import sample_efficiency, sleep_staging


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["all", "--budgets", "w20", "1"], "--budgets: expected one label budget"),
        (["all", "--seeds", "0", "1"], "--seeds: expected none (this recipe's cells use --seed"),
        (
            ["report", "--rows", "classical:window", "--methods", "part"],
            "--methods: expected none beside --rows",
        ),
        (
            ["report", "--rows", "classical:window", "--arms", "probe"],
            "--arms: expected none beside --rows",
        ),
    ],
)
def test_sleep_staging_refuses_what_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    """`all --budgets w20 1 --seeds 0 1` ran budget w20 and seed 0 only (study.json stored
    both); --methods beside --rows was dropped."""
    out = tmp_path / "study"
    assert sleep_staging.command([*argv, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"python -m partnd.recipes.sleep_staging: error: {message}"), error
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["aggregate", "--loader-workers", "2"], "--loader-workers: expected no --loader-workers"),
        (["cells", "--device", "cpu"], "--device: expected no --device with the cells command"),
    ],
)
def test_sample_efficiency_refuses_run_settings_a_command_does_not_read(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        sample_efficiency.main([*argv, "--out", str(tmp_path / "study")])
    assert not (tmp_path / "study").exists()


def test_one_process_at_a_time_writes_a_cell(tmp_path: Path) -> None:
    """After kill -9 of `run --jobs 2` its workers went on writing cells while a resume
    started at once ran the same cells: two writers of one cell."""
    import os
    import signal
    import subprocess
    import sys

    from partnd.recipes.sleep_study import SleepStudy, StudyConfig
    from partnd.recipes.study_directory import exclusive

    study = SleepStudy(StudyConfig(out=tmp_path / "study", progress=False))
    cell = study.cell_dir("classical", "window", 1, 0)
    lock = cell.with_name(f".{cell.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(  # a worker that outlived its command, busy with the cell
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; h = open(sys.argv[1], 'a'); "
            "fcntl.flock(h, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=r"--out: expected no other process writing the cell"):
            study.run_cell("classical", "window", 1, 0)
        assert not cell.exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    with (
        exclusive(lock, "the cell"),  # the system released the killed holder's lock
        pytest.raises(InputError, match="no other process writing the cell"),
        exclusive(lock, "the cell"),
    ):
        pass


def test_a_cell_that_cannot_fill_a_batch_trains_with_a_smaller_one_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A w20 draw with scarce stages, a short record...: 'dataset: expected at least
    batch_size x world_size = 64 items ... got 60', naming no cell, mid-study."""
    from partnd.datasets.label_budget import LabelBudget, LabelDraw
    from partnd.recipes import study_cells
    from partnd.recipes.sleep_study import SleepStudy, StudyConfig

    study = SleepStudy(StudyConfig(out=tmp_path / "study", progress=False))
    monkeypatch.setattr(SleepStudy, "arm_data", lambda self, arm, subjects, *a, **k: [0] * 5)
    used: list[int] = []

    class Stop(Exception):
        pass

    def finetune(encoder, train, **kwargs):
        used.append(kwargs["config"].batch_size)
        raise Stop

    monkeypatch.setattr(study_cells, "finetune", finetune)
    draw = LabelDraw(LabelBudget.parse("w20"), 0, ("s1",), ())
    with (
        pytest.warns(UserWarning, match=r"the cell supervised:window:w20:0: 5 training items"),
        pytest.raises(Stop),
    ):
        study.cells._finetune("supervised", "window", draw, 0, tmp_path / "run", None)
    assert used == [5]


def test_a_failing_cell_is_named_and_leaves_no_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from partnd.recipes.sleep_study import SleepStudy, StudyConfig
    from partnd.recipes.study_cells import StudyCells

    study = SleepStudy(StudyConfig(out=tmp_path / "study", progress=False))

    def fails(self, method, arm, budget, seed, pool=None):
        (self.cell_store.cell_dir(method, arm, budget, seed, pool) / "run").mkdir(parents=True)
        raise InputError("dataset: expected at least 64 items, got 60")

    monkeypatch.setattr(StudyCells, "_run_cell", fails)
    with pytest.raises(InputError) as error:
        study.run_cell("supervised", "window", 1, 0)
    assert str(error.value) == (
        "dataset: expected at least 64 items, got 60 (in the cell supervised:window:1:0)"
    )
    assert not study.cell_dir("supervised", "window", 1, 0).exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--held-out-subjects", "3"], "--held-out-subjects: expected None without pools"),
        (
            ["--pool-patience", "3"],
            "--pool-patience/--pool-eval-steps/--pool-segment-windows: expected {} without pools",
        ),
    ],
)
def test_pool_settings_without_pools_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    """They only set the pools' pretraining, yet were accepted and stored without --pools."""
    from partnd.recipes.sample_efficiency import OPTIONS
    from partnd.recipes.study_directory import run_recipe

    command = ["cells", "--out", str(tmp_path / "study"), *argv]
    assert run_recipe("se", lambda: sample_efficiency.main(command), OPTIONS) == 2
    assert f"se: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()
