"""The study directory every recipe keeps its results in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.recipes.study_directory import STUDY_MARKER, claim_study_directory


def test_a_new_directory_gets_the_settings_and_a_later_run_with_them_goes_on(
    tmp_path: Path,
) -> None:
    out = tmp_path / "study"
    claim_study_directory(out, {"seed": 0, "methods": ["part"]}, overwrite=False)
    assert json.loads((out / STUDY_MARKER).read_text()) == {"seed": 0, "methods": ["part"]}
    (out / "result.json").write_text("{}")
    claim_study_directory(out, {"seed": 0, "methods": ["part"]}, overwrite=False)
    assert (out / "result.json").is_file()  # nothing cleared


def test_other_settings_are_refused_naming_what_changed(tmp_path: Path) -> None:
    out = tmp_path / "study"
    claim_study_directory(out, {"seed": 0, "lr": 0.1}, overwrite=False)
    with pytest.raises(InputError, match=r"--out.*seed: 0 stored -> 1 given") as error:
        claim_study_directory(out, {"seed": 1, "lr": 0.1}, overwrite=False)
    assert "lr" not in str(error.value).split("got")[-1]


def test_a_stored_setting_left_out_is_named_with_what_was_stored(tmp_path: Path) -> None:
    """Reopening a study without its stored non-default setting (run without --dtype float16)
    said "... got" with nothing after it."""
    out = tmp_path / "study"
    claim_study_directory(out, {"seed": 0, "dtype": "float16"}, overwrite=False)
    with pytest.raises(InputError) as error:
        claim_study_directory(out, {"seed": 0}, overwrite=False)
    assert str(error.value).endswith(
        "got dtype: 'float16' stored -> (not recorded: the default) given"
    )
    with pytest.raises(InputError) as error:
        claim_study_directory(out, {"seed": 0, "dtype": "float16", "frontend": "x"}, False)
    assert str(error.value).endswith(
        "got frontend: (not recorded: the default) stored -> 'x' given"
    )


def test_overwrite_clears_a_study_but_never_another_folder(tmp_path: Path) -> None:
    out = tmp_path / "study"
    claim_study_directory(out, {"seed": 0}, overwrite=False)
    (out / "result.json").write_text("{}")
    claim_study_directory(out, {"seed": 1}, overwrite=True)
    assert not (out / "result.json").exists()
    assert json.loads((out / STUDY_MARKER).read_text()) == {"seed": 1}

    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(InputError, match="--out"):
            claim_study_directory(other, {"seed": 0}, overwrite=overwrite)
        with pytest.raises(InputError, match=r"--out: expected a directory for the study .*"
                           r"got the file .*holiday\.jpg"):  # fmt: skip
            claim_study_directory(other / "holiday.jpg", {"seed": 0}, overwrite=overwrite)
    assert (other / "holiday.jpg").read_text() == "precious"


@pytest.mark.slow
def test_a_recipe_run_as_a_module_ends_with_one_line_not_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("not a study")
    argv = ["--dataset", "cifar100", "--root", str(tmp_path), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "partnd.recipes.images", "report", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("python -m partnd.recipes.images: error: --")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_run_recipe_turns_failures_into_an_exit_status(capsys: pytest.CaptureFixture) -> None:
    import signal

    from partnd.engine.trainer import TrainingInterrupted
    from partnd.recipes.study_directory import run_recipe

    def refused() -> int:
        raise InputError("device: expected 'cpu', got 'gpu' (pass overwrite=True to clear it)")

    assert run_recipe("recipe", refused) == 2
    assert capsys.readouterr().err == (
        "recipe: error: --device: expected 'cpu', got 'gpu' (pass --overwrite to clear it)\n"
    )

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_recipe("recipe", interrupted) == 130
    assert capsys.readouterr().err == (
        "recipe: interrupted; run the same command again to continue\n"
    )

    def stopped_training() -> int:  # what the engine raises after saving its checkpoint
        raise TrainingInterrupted(signal.SIGTERM, Path("run/checkpoints/last.pt"), 12)

    assert run_recipe("recipe", stopped_training) == 143
    assert capsys.readouterr().err == (  # not the API's "resume=True"
        "recipe: interrupted by SIGTERM after step 12; resumable checkpoint "
        "run/checkpoints/last.pt (run the same command again to continue)\n"
    )


def test_a_refused_study_command_names_its_options_and_leaves_no_new_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from partnd import cli
    from partnd.datasets.store import create_store
    from partnd.recipes import sample_efficiency, sleep_staging

    out = tmp_path / "study"
    missing = tmp_path / "missing"
    (tmp_path / "notes.txt").write_text("keep")
    for argv, message in [
        (["prepare", "--out", str(out), "--src", str(missing)], "error: --src: expected a "),
        (["prepare", "--out", str(out), "--budgets", "0"], "error: --budgets: expected "),
        (["prepare", "--out", str(out), "--rows", "nope:window"], "error: --rows: expected "),
        (["prepare", "--out", str(out), "--rows", "supervised:wide"], "error: --rows: expected "),
        (["prepare", "--out", str(out), "--context", "0"], "error: --context: expected a number"),
        (["prepare", "--out", str(out), "--rows", "supervised:probe", "--context", "-1"],
         "error: --context: expected a number > 0"),  # stored in study.json all the same
        (["prepare", "--out", str(out), "--finetune-steps", "0"], "error: --finetune-steps: "),
        (["prepare", "--out", str(out), "--pretrain-epochs", "0"], "error: --pretrain-epochs: "),
        (["prepare", "--out", str(out), "--seed", "-1"], "error: --seed: expected an int >= 0"),
        (["prepare", "--out", str(out), "--seeds", "1", "1"], "error: --seeds: expected none"),
        (["prepare", "--out", str(out), "--device", "gpu"], "error: --device: expected 'auto'"),
        (["prepare", "--out", str(out), "--cohort-dir", str(tmp_path / "notes.txt")],
         "error: --cohort-dir: expected a directory, got the file"),
        (["report", "--out", str(out), "--rows", "classical:window", "supervised:probe"],
         "error: --out: expected a study whose rows have finished their cells (run the finetune "
         "stage first), got unfinished rows classical:window, supervised:probe"),
        (["finetune", "--out", str(out), "--rows", "part:window"],
         "error: --rows/--methods: expected a finished pretraining of 'part' (run the pretrain "),
    ]:  # fmt: skip
        assert sleep_staging.command(argv) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"python -m partnd.recipes.sleep_staging: {message}"), error
        assert not out.exists()  # the study directory it claimed is released again
    assert cli.main(["demo", "prepare", "--out", str(out), "--src", str(missing)]) == 2
    assert capsys.readouterr().err.startswith("partnd demo: error: --src: expected a directory")
    argv = ["cells", "--out", str(out), "--budgets", "0"]
    with pytest.raises(InputError, match=r"^budgets: "):
        sample_efficiency.main(argv)
    grid = ["--out", str(out), "--rows", "classical:window", "--budgets", "1", "2", "--seeds", "0"]
    for argv, message in [
        (["run-cell", *grid, "--cell", "classical:window:4:0"], "--cell: expected a cell of this "
         "study (one line of the cells command: its rows, budgets [1, 2] and seeds [0]; a cell "
         "outside them would never be aggregated), got 'classical:window:4:0'"),
        (["run-cell", *grid, "--cell", "classical:window:1:3"], "--cell: expected a cell of this"),
        (["run-cell", *grid, "--cell", "supervised:window:1:0"], "--cell: expected a cell of th"),
        (["cells", *grid, "--jobs", "2"], "--jobs: expected no --jobs with the cells command"),
        (["pretrain", *grid, "--allow-partial"], "--allow-partial: expected no --allow-partial"),
        (["run", *grid, "--jobs", "0"], "--jobs: expected a number of processes"),
        (["cells", *grid, "--backend", "dask"], "--backend: expected no --backend with the cells"),
        (["run", *grid, "--scheduler", "tcp://h:8786"],
         "--scheduler: expected no --scheduler without --backend dask, got tcp://h:8786"),
    ]:  # fmt: skip
        with pytest.raises(InputError, match=re.escape(message)):
            sample_efficiency.main(argv)
    assert not out.exists()
    existing = tmp_path / "notes.txt"  # --out naming a file: refused, not a NotADirectoryError
    for argv in (["prepare"], ["all"]):
        assert sleep_staging.command([*argv, "--out", str(existing)]) == 2
        assert "error: --out: expected a directory for the study" in capsys.readouterr().err
    for argv in (["cells"], ["run-cell", "--cell-index", "0"], ["aggregate"]):
        with pytest.raises(InputError, match="--out: expected a directory for the study"):
            sample_efficiency.main([*argv, "--out", str(existing)])
    assert existing.read_text() == "keep"
    (tmp_path / "src" / "training").mkdir(parents=True)
    other = tmp_path / "other.zarr"  # a store made with other settings
    create_store(other, sfreq=50.0, channels=["C3"], window_seconds=30.0, metadata={})
    argv = ["prepare", "--out", str(out), "--src", str(tmp_path / "src"), "--store", str(other)]
    assert sleep_staging.command(argv) == 2
    error = capsys.readouterr().err  # --overwrite clears --out, never a store: not suggested
    assert "error: --store: expected an existing store with the same configuration (give " in error
    assert "another --store, or delete this one to preprocess it again)" in error
    assert "--overwrite" not in error and not out.exists()
    out.mkdir()  # a directory that was there before is kept
    assert sleep_staging.command(["prepare", "--out", str(out), "--src", str(missing)]) == 2
    assert out.is_dir()


def test_released_on_failure_keeps_a_study_with_results(tmp_path: Path) -> None:
    from partnd.recipes.study_directory import released_on_failure

    out = tmp_path / "study"
    with pytest.raises(KeyboardInterrupt), released_on_failure(out):
        claim_study_directory(out, {"seed": 0}, overwrite=False)
        (out / "split.json").write_text("{}")
        raise KeyboardInterrupt
    assert (out / "split.json").is_file()


def test_settings_nothing_was_made_from_yet_may_be_corrected(tmp_path: Path) -> None:
    """`--pools 1 100` refused for 100 (too few hours) left study.json with both, and the
    corrected `--pools 0.5` was then refused as a change: only --overwrite helped."""
    import json

    out = tmp_path / "study"
    claim_study_directory(out, {"seed": 0, "pools": [1, 100]}, overwrite=False)
    claim_study_directory(out, {"seed": 0, "pools": [0.5]}, False, revisable=("pools",))
    assert json.loads((out / "study.json").read_text()) == {"seed": 0, "pools": [0.5]}
    with pytest.raises(InputError, match="seed: 0 stored -> 1 given"):
        claim_study_directory(out, {"seed": 1, "pools": [1]}, False, revisable=("pools",))


def test_a_study_whose_pools_were_not_drawn_takes_corrected_pool_sizes(tmp_path: Path) -> None:
    from partnd.recipes.sleep_study import SleepStudy, StudyConfig

    out = tmp_path / "study"
    SleepStudy(StudyConfig(out=out, progress=False, pools=(1.0, 100.0)))
    SleepStudy(StudyConfig(out=out, progress=False, pools=(0.5,)))  # nothing drawn yet
    (out / "pools.json").write_text("{}")  # the pools were drawn: they are the study's now
    with pytest.raises(InputError, match=r"pools: \[0\.5\] stored -> \[1\.0\] given"):
        SleepStudy(StudyConfig(out=out, progress=False, pools=(1.0,)))


def test_a_pool_segment_length_is_named_by_its_option() -> None:
    from partnd.recipes.sample_efficiency import OPTIONS

    message = "PretrainConfig.segment_windows: expected at most 240 windows, got 480"
    assert OPTIONS.translate(message).startswith("--pool-segment-windows: expected")
    assert OPTIONS.translate("segment_windows: expected x").startswith("--pool-segment-windows")


def test_a_table_is_not_replaced_by_one_of_fewer_rows(tmp_path: Path) -> None:
    """`aggregate --rows classical:window` rewrote a 4-row kappa_by_budget.md with 1 row, and
    `sleep_staging report --rows ...` results.md."""
    from partnd.recipes.study_directory import check_table_rows, record_table_rows

    rows = ["classical:window", "supervised:window", "part:window", "part:probe"]
    check_table_rows(tmp_path, "results", rows[:1])  # no table yet
    (tmp_path / "results.md").write_text("| 4 rows |")
    record_table_rows(tmp_path, "results", rows)
    with pytest.raises(InputError) as error:
        check_table_rows(tmp_path, "results", rows[:1])
    assert str(error.value).startswith(
        "--rows: expected every row of the study's results.md (classical:window "
        "supervised:window part:window part:probe) or more"
    )
    assert str(error.value).endswith(
        "got classical:window, without supervised:window part:window part:probe"
    )
    check_table_rows(tmp_path, "results", [*rows, "mae:window"])  # more rows: a superset
    check_table_rows(tmp_path, "kappa_by_budget", rows[:1])  # another table
    (tmp_path / "results.md").unlink()  # deleted on purpose: written from fewer rows again
    check_table_rows(tmp_path, "results", rows[:1])


def test_a_night_or_window_budget_may_be_added_to_a_study_whose_split_is_made(
    tmp_path: Path,
) -> None:
    from partnd.recipes.sleep_study import SleepStudy, StudyConfig

    out = tmp_path / "study"
    SleepStudy(StudyConfig(out=out, progress=False, budgets=("1n",)))
    (out / "split.json").write_text("{}")  # the split was made for these budgets
    SleepStudy(StudyConfig(out=out, progress=False, budgets=("w20", "1n", "2n")))
    assert json.loads((out / STUDY_MARKER).read_text())["budgets"] == ["w20", "1n", "2n"]
    SleepStudy(StudyConfig(out=out, progress=False, budgets=("2n",)))  # and removed
    with pytest.raises(InputError, match=r"budgets: \['2n'\] stored -> \['2n', 2\] given"):
        SleepStudy(StudyConfig(out=out, progress=False, budgets=("2n", 2)))


def test_a_subject_budget_may_change_only_before_the_split_is_made(tmp_path: Path) -> None:
    from partnd.recipes.sleep_study import SleepStudy, StudyConfig

    out = tmp_path / "study"
    SleepStudy(StudyConfig(out=out, progress=False, budgets=(1, 2)))
    SleepStudy(StudyConfig(out=out, progress=False, budgets=(1, 4)))  # no split yet
    (out / "split.json").write_text("{}")
    with pytest.raises(InputError, match=r"budgets: \[1, 4\] stored -> \[1, 8\] given"):
        SleepStudy(StudyConfig(out=out, progress=False, budgets=(1, 8)))
    SleepStudy(StudyConfig(out=out, progress=False, budgets=(1, "1n", 4)))  # same split


def test_the_split_is_sized_by_the_subject_budgets_only() -> None:
    from partnd.recipes.study_data import split_sizes

    assert split_sizes(["1n", "w20", "2n"]) == (1,)
    assert split_sizes([8, "1n", 2, "w20"]) == (2, 8)
    assert split_sizes(["4n", 1]) == (1,)
