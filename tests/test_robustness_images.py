"""The image recipe swept as issue 43 swept the sleep recipes: bad options are refused by name
before ``study.json`` is written (else it kept the bad settings and refused their correction),
a subset larger than the split is refused instead of recorded, and a report of fewer variants
does not replace the study's results table by fewer rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partnd.recipes import images
from partnd.recipes.study_directory import run_recipe
from tests.test_recipe_images import _args, cifar_root  # noqa: F401


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epochs", "0"], "--epochs: expected a number of epochs >= 1, got 0"),
        (["--pretrain-epochs", "-1"], "--pretrain-epochs: expected a number of epochs >= 1"),
        (["--seed", "-1"], "--seed: expected an int >= 0, got -1"),
        (["--image-size", "30"], "--image-size: expected a multiple of the patch size 4"),
        (["--subset", "100000"], "--subset: expected at most the 120 images of the training"),
        (["--test-subset", "41"], "--test-subset: expected at most the 40 images of the test"),
        (["--set", "lr=abc"], "-set lr: expected float, got 'abc'"),
        (
            ["--finetune-set", "batch_size=0"],
            "--set/--finetune-set batch_size: expected a number > 0",
        ),
        (["--pretrain-set", "num_pairs=0"], "--set/--pretrain-set num_pairs: expected"),
    ],
)
def test_a_bad_option_is_refused_before_study_json(
    cifar_root: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    extra: list[str],
    message: str,
) -> None:
    out = tmp_path / "study"
    out.mkdir()  # an existing --out is kept: whatever was written would stay
    argv = ["pretrain", *_args(cifar_root, out, *extra), "--variants", "part"]
    assert run_recipe("img", lambda: images.main(argv), images.IMAGE_OPTIONS) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Config." not in err
    assert list(out.iterdir()) == []


def test_a_missing_root_is_refused_before_study_json(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "study"
    out.mkdir()
    argv = ["pretrain", *_args(tmp_path / "nowhere", out), "--variants", "part"]
    assert run_recipe("img", lambda: images.main(argv)) == 2
    assert "img: error: --root: expected a directory holding" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_report_of_fewer_variants_keeps_every_finished_row(
    cifar_root: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``report --variants supervised`` rewrote results.md with that one row."""
    out = tmp_path / "study"
    both = ["all", *_args(cifar_root, out), "--variants", "supervised", "supervised_no_pos"]
    assert images.main(both) == 0
    table = (out / "results.md").read_text()
    assert images.main(["report", *_args(cifar_root, out), "--variants", "supervised"]) == 0
    rows = json.loads((out / "results.json").read_text())
    assert [row["method"] for row in rows] == ["supervised", "supervised_no_pos"]
    assert (out / "results.md").read_text() == table


def test_option_names_name_assigned_config_fields_by_their_assignment_options() -> None:
    from partnd.cli.errors import OptionNames

    message = "PretrainConfig.num_pairs: expected > 0; FinetuneConfig.batch_size: expected > 0"
    assigned = OptionNames(config_assignments={"PretrainConfig": "--set/--pretrain-set"})
    assert assigned.translate(message) == (
        "--set/--pretrain-set num_pairs: expected > 0; FinetuneConfig.batch_size: expected > 0"
    )
    both = OptionNames(config_fields=True, config_assignments={"PretrainConfig": "--pset"})
    assert both.translate(message) == "--pset num_pairs: expected > 0; --batch-size: expected > 0"
    assert OptionNames().translate(message) == message
