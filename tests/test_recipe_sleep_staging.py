"""End-to-end run of the sleep-staging recipe on a small generated PC18-format cohort."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.datasets.pc18_cohort import make_pc18_cohort
from partnd.datasets.splits import SubjectSplit
from recipes.sleep_staging import RecipeConfig, main, run

TINY_PRETRAIN = {
    "encoder": "vit_test",
    "encoder_overrides": {},
    "epochs": 8,
    "batch_size": 16,
    "lr": 2e-3,
    "lr_reference_batch": None,
    "warmup_epochs": 0.0,
    "num_pairs": 64,
    "precision": "fp32",
}
TINY_FINETUNE = {
    "encoder": "vit_test",
    "encoder_overrides": {},
    "epochs": 2,
    "batch_size": 32,
    "precision": "fp32",
}


@pytest.fixture(scope="module")
def cohort_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cohort")
    make_pc18_cohort(root, n_records=10, hours=0.5, seed=1, progress=False)
    return root


@pytest.mark.slow
def test_recipe_runs_end_to_end_and_writes_results(cohort_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = RecipeConfig(
        out=out,
        src=cohort_root,
        progress=False,
        device="cpu",
        pretrain_overrides=TINY_PRETRAIN,
        finetune_overrides=TINY_FINETUNE,
    )
    result = run(config)

    assert [r.name for r in result.results] == ["part", "supervised"]
    split = SubjectSplit.load(out / "split.json")
    assert set(split.test).isdisjoint(split.finetune_pool)
    test_records = set(split.test_records)
    assert test_records.isdisjoint(split.pretrain)
    for method in ("part", "supervised"):
        metrics = json.loads((out / f"finetune_{method}" / "test_metrics.json").read_text())
        assert -1.0 <= metrics["cohen_kappa"] <= 1.0
        assert sum(map(sum, metrics["confusion_matrix"])) == metrics["n"] > 0
    with open(out / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["method"] for row in rows] == ["part", "supervised"]
    assert float(rows[0]["paper_kappa_10_subjects"]) == pytest.approx(0.616)
    for figure in ("pretrain_loss.png", "finetune_validation.png", "confusion_matrices.png"):
        assert (out / figure).stat().st_size > 1000
    assert list(out.glob("hypnogram_*.png"))
    assert (out / "pretrain" / "encoder.pt").is_file()
    # The pretext diagnostics are logged next to their content-free floor (no position leak:
    # PART's loss cannot fall below the floor by reading positions).
    history = [
        json.loads(line)
        for line in (out / "pretrain" / "metrics.jsonl").read_text().splitlines()
        if '"phase": "epoch"' in line
    ]
    assert all({"nmse", "r2_t", "mse_floor_t"} <= set(record) for record in history)
    assert 0.0 < history[-1]["nmse"] < 1.2


def test_command_line_supervised_only(cohort_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    code = main(
        [
            "--out", str(out), "--src", str(cohort_root), "--methods", "supervised",
            "--finetune-epochs", "1", "--no-progress", "--device", "cpu",
            "--store", str(tmp_path / "store.zarr"),
        ]
    )  # fmt: skip
    assert code == 0
    assert not (out / "pretrain").exists()
    assert (out / "results.md").read_text().count("supervised") == 1


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="methods"):
        RecipeConfig(out=tmp_path, methods=("mae",))
    with pytest.raises(InputError, match="scale"):
        RecipeConfig(out=tmp_path, scale="huge")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="pretrain_overrides"):
        RecipeConfig(out=tmp_path, pretrain_overrides={"no_such_field": 1})


def test_scales_resolve_to_the_presets(tmp_path: Path) -> None:
    paper = RecipeConfig(out=tmp_path, scale="paper")
    pretrain_config = paper.pretrain_config()
    assert pretrain_config.encoder == "vit_eeg_12m" and pretrain_config.epochs == 1000
    assert (pretrain_config.patch_size, pretrain_config.num_patches) == (100, 40)
    part, supervised = paper.finetune_config("part"), paper.finetune_config("supervised")
    assert part.epochs == supervised.epochs == 100
    assert part.layer_decay is not None and supervised.layer_decay is None
    demo = RecipeConfig(out=tmp_path, finetune_overrides={"epochs": 3})
    assert demo.finetune_config("part").epochs == 3


def test_overwrite_never_deletes_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("keep me")
    with pytest.raises(InputError, match="never deletes other folders"):
        main(["--out", str(precious), "--overwrite", "--no-progress"])
    assert (precious / "chapter1.tex").read_text() == "keep me"
