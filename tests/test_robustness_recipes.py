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
