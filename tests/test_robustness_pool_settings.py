"""The pools' settings are refused before anything of the study is written, naming their options
(issue 43 #17): a bad value leaves no ``study.json``, and a segment length the nights cannot hold
is refused before the pools are drawn into ``pools.json``, so that the corrected value is taken
without ``--overwrite`` (which would delete the preprocessed pool store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.recipes import sample_efficiency, study_pools
from partnd.recipes.study_directory import run_recipe


def _run(argv: list[str]) -> int:
    return run_recipe("se", lambda: sample_efficiency.main(argv), sample_efficiency.OPTIONS)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--pool-patience", "0"), ("--pool-eval-steps", "0"), ("--pool-patience", "-3")],
)
def test_a_bad_pool_option_is_refused_by_its_name_before_study_json(
    tmp_path: Path, capsys: pytest.CaptureFixture, option: str, value: str
) -> None:
    """Named PretrainConfig.patience / eval_every_steps, options the user never typed."""
    out = tmp_path / "study"
    out.mkdir()  # an existing --out is never removed: whatever was written would stay
    argv = ["pretrain", "--out", str(out), "--src", str(tmp_path / "nowhere"), "--no-progress"]
    argv += ["--pools", "0.4", "--rows", "part_windows:probe", option, value]
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"se: error: {option}: expected a number > 0, got {value}")
    assert err.count("\n") == 1
    assert list(out.iterdir()) == []


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A study cohort of 10 nights and a pool source of 7, each night 0.5 h (60 windows)."""
    root = tmp_path_factory.mktemp("pool-settings")
    study = make_pc18_cohort(root / "study", n_records=10, hours=0.5, seed=1, progress=False)
    pool = make_pc18_cohort(root / "pool", n_records=7, hours=0.5, seed=2, progress=False)
    return study.root, pool.root


class _Pretrained(Exception):
    """Raised where the pool's pretraining would start: every setting was accepted."""


@pytest.mark.slow
def test_a_segment_longer_than_the_nights_is_refused_before_the_pools_are_drawn(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    cohorts: tuple[Path, Path],
) -> None:
    """Refused after pools.json was written, which locked the pool options: the corrected
    --pool-segment-windows was then refused as a change of the study. Too many hours, which only
    the preprocessed nights tell, are refused before the pools are drawn too."""
    src, pool_src = cohorts
    out = tmp_path / "study"
    argv = ["pretrain", "--out", str(out), "--src", str(src), "--pool-src", str(pool_src)]
    argv += ["--rows", "part_windows:probe", "--no-progress", "--device", "cpu"]
    assert _run([*argv, "--pools", "100"]) == 2  # more hours than the nights hold
    assert "se: error: --pools: expected pools of at most the " in capsys.readouterr().err
    assert not (out / "pools.json").exists()
    argv += ["--pools", "0.4"]
    assert _run([*argv, "--pool-segment-windows", "100000"]) == 2
    err = capsys.readouterr().err
    assert "se: error: --pool-segment-windows: expected at most the longest contiguous run" in err
    assert "(60 windows in " in err and err.rstrip().endswith("got 100000")
    assert not (out / "pools.json").exists() and not (out / "pretrain_pools").exists()
    relative = [*argv, "--rows", "rp:probe", "--pool-segment-windows", "100000"]
    assert _run(relative) == 2  # relative positioning reads the pools' segments too
    assert "se: error: --pool-segment-windows: expected at most" in capsys.readouterr().err
    assert not (out / "pools.json").exists() and not (out / "pretrain_pools").exists()

    def started(*args: object, **kwargs: object) -> None:
        raise _Pretrained

    monkeypatch.setattr(study_pools, "pretrain", started)
    with pytest.raises(_Pretrained):  # the corrected value, without --overwrite
        sample_efficiency.main([*argv, "--pool-segment-windows", "30"])
    assert json.loads((out / "study.json").read_text())["pool_overrides"] == {"segment_windows": 30}
    assert (out / "pools.json").is_file()  # drawn once the segments were known to fit
