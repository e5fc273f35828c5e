"""End-to-end runs of the sleep recipes on a small generated PC18-format cohort."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from partnd._validation import InputError
from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.recipes import sample_efficiency, sleep_staging
from partnd.recipes.set_options import pretrain_fields_for
from partnd.recipes.sleep_study import SleepStudy, StudyConfig

TINY_PRETRAIN = {
    "encoder": "vit_test",
    "encoder_overrides": {},
    "epochs": 2,
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
    "epochs": 3,
    "min_steps": None,
    "eval_every_steps": None,
    "warmup_steps": None,
    "batch_size": 32,
    "lr": 2e-3,
    "lr_reference_batch": None,
    "warmup_epochs": 0.0,
    "precision": "fp32",
}
TINY_SEQUENCE = {
    "context": 5,
    "batch_size": 4,
    "temporal_encoder": "temporal_test",
    "min_steps": 12,
    "eval_every_steps": 4,
}
TINY_NIGHT = {**TINY_SEQUENCE, "context": "night", "night_crop": 20}


@pytest.fixture(scope="module")
def cohort_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cohort")
    make_pc18_cohort(root, n_records=10, hours=0.5, seed=1, progress=False)
    return root


def tiny_study(out: Path, cohort: Path, **overrides: object) -> SleepStudy:
    config = StudyConfig(
        out=out,
        src=cohort,
        progress=False,
        device="cpu",
        pretrain_overrides=TINY_PRETRAIN,
        finetune_overrides=TINY_FINETUNE,
        sequence_overrides=TINY_SEQUENCE,
        night_overrides=TINY_NIGHT,
        budgets=(1, 2),
        seeds=(0, 1),
        **overrides,  # type: ignore[arg-type]
    )
    return SleepStudy(config)


@pytest.mark.slow
def test_sleep_staging_table_figures_and_a_resume_that_recomputes_nothing(
    cohort_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "study"
    study = tiny_study(out, cohort_root)
    # an interrupted pretraining (killed after 3 steps) resumes instead of starting over
    from partnd import pretraining

    real_pretrain = pretraining.pretrain
    monkeypatch.setattr(
        "partnd.recipes.study_pretraining.pretrain",
        lambda *args, **kwargs: real_pretrain(*args, **{**kwargs, "max_steps": 3}),
    )
    study.run_pretraining("part")
    assert not study.pretrained("part")  # stopped after 3 of its 2 epochs' steps
    assert (out / "pretrain" / "part" / "checkpoints" / "last.pt").is_file()
    monkeypatch.setattr("partnd.recipes.study_pretraining.pretrain", real_pretrain)
    methods = ["part", "supervised", "classical", "yasa_pretrained"]
    rows = sleep_staging.rows_of(methods, ["window", "sequence", "night", "probe"])
    sleep_staging.run(study, "all", rows)
    history = [json.loads(line) for line in (out / "pretrain/part/metrics.jsonl").open()]
    steps = [r["step"] for r in history if r["phase"] == "train"]
    assert steps == list(range(5, 5 * len(steps) + 1, 5))  # one trajectory, logged every 5
    assert len(json.loads((out / "pretrain/part/meta.json").read_text())["resumes"]) == 1

    with open(out / "results.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [row["row"] for row in table] == [
        "part", "part+seq", "part+night", "part probe",
        "supervised", "supervised+seq", "supervised+night", "supervised probe",
        "classical", "classical+seq", "yasa_pretrained+seq",
    ]  # fmt: skip
    by_row = {row["row"]: row for row in table}
    for row in table:
        assert float(row["kappa_low"]) <= float(row["kappa"]) <= float(row["kappa_high"])
        assert {"pt_steps", "ft_steps", "accuracy", "macro_f1", "f1_W", "paper_kappa"} <= set(row)
        assert row["n_test_windows"] == table[0]["n_test_windows"]  # one test set for every row
    resolved = json.loads((out / "pretrain/part/meta.json").read_text())["resolved"]
    assert by_row["part"]["pt_steps"] == str(2 * resolved["steps_per_epoch"])  # 2 epochs
    assert by_row["supervised"]["pt_steps"] == "0"
    assert by_row["part"]["ft_steps"] == "3"  # 3 epochs of one step (one subject, batch 32)
    assert by_row["part+seq"]["context"] == "5" and by_row["part"]["context"] == ""
    assert by_row["supervised+night"]["context"] == "night"
    assert by_row["yasa_pretrained+seq"]["labels"] == "0"
    assert by_row["classical+seq"]["delta_kappa"] == ""  # the reference row
    supervised = by_row["supervised"]
    assert float(supervised["delta_low"]) <= float(supervised["delta_kappa"])
    assert float(supervised["delta_kappa"]) <= float(supervised["delta_high"])
    cell = study.load_cell("supervised", "sequence", 1, 0)
    assert cell.settings["selected_step"] is not None and cell.settings["context"] == 5
    assert cell.settings["augmentations"] == ["time_shift", "amplitude_scale", "channel_dropout"]
    assert study.load_cell("part", "probe", 1, 0).settings["C"] > 0
    night = study.load_cell("supervised", "night", 1, 0).settings
    assert night["night_crop"] == 20 and night["budget_settings"] == {}  # below the table
    summary = (out / "results.md").read_text().splitlines()  # the columns a reader compares
    assert summary[0] == (
        "| row | labels | kappa [95% CI] | difference to classical+seq [95% CI] | macro-F1 "
        "| N1 F1 |"
    )
    assert [line.split(" | ")[0][2:] for line in summary[2:]] == [row["row"] for row in table]
    for figure in ("pretext.png", "finetune_validation.png", "confusion_matrices.png"):
        assert (out / figure).stat().st_size > 1000
    assert list(out.glob("hypnogram_*.png"))
    split = json.loads((out / "split.json").read_text())
    assert set(split["test"]).isdisjoint(split["finetune_pool"])
    assert set(split["test_records"]).isdisjoint(split["pretrain"])

    # a second run recomputes nothing finished
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished stage was recomputed")

    monkeypatch.setattr("partnd.recipes.study_pretraining.pretrain", refuse)
    monkeypatch.setattr("partnd.recipes.study_cells.finetune", refuse)
    monkeypatch.setattr("partnd.recipes.study_cells.linear_probe", refuse)
    again = tiny_study(out, cohort_root)
    sleep_staging.run(again, "all", rows)
    # and the settings of a study cannot silently change
    with pytest.raises(InputError, match="same settings"):
        tiny_study(out, cohort_root, seed=5)


@pytest.mark.slow
def test_sample_efficiency_cells_resume_and_aggregate(
    cohort_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    out = tmp_path / "se"
    study = tiny_study(out, cohort_root)
    rows = [("part", "window"), ("supervised", "window")]
    cells = sample_efficiency.cell_list(study, rows)
    assert cells == [
        ("part", "window", 1, 0, None), ("part", "window", 1, 1, None),
        ("part", "window", 2, 0, None), ("part", "window", 2, 1, None),
        ("supervised", "window", 1, 0, None), ("supervised", "window", 1, 1, None),
        ("supervised", "window", 2, 0, None), ("supervised", "window", 2, 1, None),
    ]  # fmt: skip
    assert [sample_efficiency.format_cell(cell) for cell in cells[:2]] == [
        "part:window:1:0",
        "part:window:1:1",
    ]  # the keys of a study without pools are those of earlier studies
    # nested subsets per seed, shared encoder
    assert set(study.subjects(1, 0)) <= set(study.subjects(2, 0))
    study.run_pretraining("part")
    first = study.run_cell("part", "window", 1, 0)
    encoder_time = (out / "pretrain/part/encoder.pt").stat().st_mtime
    unfinished = r"got 7 of 8 cells unfinished: part:window:1:1, part:window:2:0"
    with pytest.raises(InputError, match=r"--out: expected a study whose cells all.*" + unfinished):
        sample_efficiency.aggregate(study, rows)  # partial tables only when asked
    sample_efficiency.aggregate(study, rows, allow_partial=True)
    with open(out / "kappa_by_budget.csv") as handle:
        partial = list(csv.DictReader(handle))
    assert [row["budget"] for row in partial] == ["1", "2"]  # budget 2 has no finished cell
    assert partial[0]["part"].endswith("(n=1)") and partial[1]["part"] == ""
    missing = [sample_efficiency.format_cell(cell) for cell in cells if cell[2] == 2]
    assert partial[1]["missing"].split() == missing
    assert "partial: 7 of 8 cells missing" in capsys.readouterr().out
    done = (out / "finetune/part/window/b1_s0/result.json").stat().st_mtime
    cells += sample_efficiency.cell_list(study, [("classical", "sequence")])
    sample_efficiency.run_cells(study, cells, jobs=1)
    assert (out / "finetune/part/window/b1_s0/result.json").stat().st_mtime == done
    assert (out / "pretrain/part/encoder.pt").stat().st_mtime == encoder_time
    assert study.load_cell("part", "window", 1, 0).report.cohen_kappa == first.report.cohen_kappa
    sample_efficiency.aggregate(study, [*rows, ("classical", "sequence")])
    with open(out / "kappa_by_budget.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["budget"] for row in rows] == ["1", "2"] and "missing" not in rows[0]
    assert rows[0]["part"].endswith("(n=2)") and "paper_part" in rows[0]
    assert rows[1]["classical+seq"].endswith("(n=2)")
    with open(out / "difference_to_reference.csv") as handle:
        assert "supervised - classical+seq" in next(csv.DictReader(handle))
    assert (out / "sample_efficiency.png").stat().st_size > 1000
    argv = ["cells", "--out", str(out), "--src", str(cohort_root), "--methods", "part"]
    argv += ["--budgets", "1", "2", "--seeds", "0", "1", "--no-progress"]
    with pytest.raises(InputError, match="same settings"):  # tiny overrides are not on the CLI
        sample_efficiency.main(argv)
    with pytest.raises(InputError, match="--cell"):
        sample_efficiency.parse_cell("part:window:ten:0")
    assert sample_efficiency.parse_cell("part:probe:2:1") == ("part", "probe", 2, 1, None)
    assert sample_efficiency.parse_cell("mae:sequence:w20:0:24h") == (
        "mae",
        "sequence",
        "w20",
        0,
        "24h",
    )
    for bad in ("part:probe:w0:1", "part:probe:2", "part:probe:2:1:24h:x", "part:probe:2:1:"):
        with pytest.raises(InputError, match="--cell"):
            sample_efficiency.parse_cell(bad)
    with pytest.raises(InputError, match="--arms"):
        sleep_staging.rows_of(["part"], ["sideways"])
    parser = sleep_staging.build_parser()
    assert sleep_staging.selected_rows(parser.parse_args([])) == list(sleep_staging.DEFAULT_ROWS)
    chosen = parser.parse_args(["--methods", "mae", "classical", "--arms", "sequence"])
    assert sleep_staging.selected_rows(chosen) == [("mae", "sequence"), ("classical", "sequence")]
    explicit = parser.parse_args(["--rows", "supervised:probe", "classical:window"])
    assert sleep_staging.selected_rows(explicit) == [
        ("supervised", "probe"),
        ("classical", "window"),
    ]
    with pytest.raises(InputError, match="--rows"):
        sleep_staging.selected_rows(parser.parse_args(["--rows", "yasa_pretrained:window"]))


def test_the_night_arm_and_its_settings_per_labelled_subject_budget(tmp_path: Path) -> None:
    from partnd.recipes.sleep_study import SCALES, budget_settings

    table = {"night": {2: {"min_steps": 5}, 8: {"min_steps": 9, "batch_size": 3}}}
    scale = SCALES["demo"].replace(by_budget=table)
    assert budget_settings(scale, "night", 1) == {}  # below the table: the arm's own settings
    assert (
        budget_settings(scale, "night", 2) == budget_settings(scale, "night", 7) == {"min_steps": 5}
    )  # the largest budget of the table not above it
    assert budget_settings(scale, "night", 100) == {"min_steps": 9, "batch_size": 3}
    assert budget_settings(scale, "sequence", 8) == budget_settings(scale, "night", None) == {}
    # budgets as written on the command line; windows per stage are scarcer than any subjects
    assert budget_settings(scale, "night", "8") == budget_settings(scale, "night", 8)
    assert budget_settings(scale, "night", "w20") == {}
    config = StudyConfig(out=tmp_path / "s", progress=False)
    night = config.finetune_config("part_windows", 0, arm="night", budget=2)
    arm = SCALES["demo"].night
    assert (night.context, night.night_crop, night.batch_size) == (
        "night",
        arm["night_crop"],
        arm["batch_size"],
    )
    for table_arm, budgets in SCALES["demo"].by_budget.items():
        for budget, changes in budgets.items():
            chosen = config.finetune_config("supervised", 0, arm=table_arm, budget=budget)
            assert {name: getattr(chosen, name) for name in changes} == changes
    window_steps = [config.finetune_config("supervised", 0, budget=b).min_steps for b in (2, 4, 8)]
    assert window_steps == [800, 2400, 2400]  # the window arm's steps follow the labels
    # the study's overrides come after the budget's, the night arm's last
    overridden = StudyConfig(
        out=tmp_path / "t",
        progress=False,
        finetune_overrides={"min_steps": 7, "batch_size": 5},
        night_overrides={"batch_size": 3},
    )
    chosen = overridden.finetune_config("supervised", 0, arm="night", budget=8)
    assert (chosen.min_steps, chosen.batch_size) == (7, 3)
    assert overridden.finetune_config("supervised", 0, arm="sequence").batch_size == 5
    assert "night_overrides" in overridden.settings  # recorded when set, and only then:
    assert "night_overrides" not in config.settings  # studies made before it stay valid
    # PART across windows pretrains its temporal level on segments as long as the night crop
    assert config.pretrain_config("part_windows").segment_windows == arm["night_crop"]
    config.check_settings()
    # the night arm's settings are checked with the others', before a study writes anything
    bad = StudyConfig(out=tmp_path / "u", progress=False, night_overrides={"night_crop": 0})
    with pytest.raises(InputError, match=r"^FinetuneConfig\.night_crop: expected .*got 0"):
        bad.check_settings()
    assert not (tmp_path / "u").exists()


def test_window_encoder_of_a_scratch_method_is_random_seeded_and_shaped_as_the_study(
    tmp_path: Path, cohort_root: Path
) -> None:
    """The frozen encoder the probe reads (and ``bench_feature_content`` measures): for a scratch
    method a random encoder of the study's shape, the same weights for the same seed, in eval
    mode, with a position embedding only where the method has one."""
    study = tiny_study(tmp_path / "study", cohort_root)
    first, again = (study.window_encoder("supervised", 0, None) for _ in range(2))
    other = study.window_encoder("supervised", 1, None)
    assert not first.training and first.in_chans == len(study.store.channels)
    weights, same, different = (e.state_dict() for e in (first, again, other))
    assert all(torch.equal(weights[name], same[name]) for name in weights)
    assert not all(torch.equal(weights[name], different[name]) for name in weights)
    assert first.pos_embed is not None
    assert study.window_encoder("supervised_no_pos", 0, None).pos_embed is None


def test_the_study_front_end_reaches_every_learned_encoder_and_is_a_setting(
    tmp_path: Path,
) -> None:
    from partnd.models import create_encoder
    from partnd.models.frontends import ConvPatchEmbed, LinearPatchEmbed, SpectralPatchEmbed
    from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES

    built = {
        "linear": LinearPatchEmbed,
        "spectral": SpectralPatchEmbed,
        "spectral_std": SpectralPatchEmbed,
        "spectral_std_raw": SpectralPatchEmbed,
        "conv": ConvPatchEmbed,
    }
    for name, kind in built.items():
        config = StudyConfig(out=tmp_path / name, progress=False, frontend=name)
        configs = [
            config.pretrain_config("part_windows"),
            config.pretrain_config("mae", pool=True),
            *(config.finetune_config("supervised", 0, arm) for arm in ("window", "night")),
            config.finetune_config("part_windows", 1, "sequence", 8),
        ]
        for chosen in configs:  # added to the demo's 128-wide encoder, not replacing it
            assert chosen.encoder_overrides.items() >= DEMO_ENCODER_OVERRIDES.items()
            encoder = create_encoder(
                chosen.encoder, in_chans=6, patch_size=100, ndim=1, **chosen.encoder_overrides
            )
            assert type(encoder.patch_embed) is kind
            assert encoder.embed_dim == DEMO_ENCODER_OVERRIDES["embed_dim"]
        # recorded when not the linear one every earlier study used, so those stay valid
        assert config.settings.get("frontend") == (None if name == "linear" else name)
    spectral = StudyConfig(out=tmp_path / "s", progress=False, frontend="spectral")
    options = spectral.finetune_config("supervised", 0).encoder_overrides["frontend_options"]
    assert options == {"max_frequency": 0.3}  # the store's 30 Hz band edge at 100 Hz
    for name, extra in (
        ("spectral_std", {"standardize": True}),
        ("spectral_std_raw", {"standardize": True, "raw": True}),
    ):
        chosen = StudyConfig(out=tmp_path / "s", progress=False, frontend=name)
        encoder = create_encoder(
            "vit_eeg_12m",
            in_chans=6,
            patch_size=100,
            ndim=1,
            **chosen.pretrain_config("part_windows").encoder_overrides,
        )
        assert encoder.architecture["frontend_options"] == {"max_frequency": 0.3, **extra}
        assert encoder.patch_embed.standardize and (encoder.patch_embed.raw is not None) == (
            "raw" in extra
        )
    assert StudyConfig(out=tmp_path / "d", progress=False).frontend_name == "spectral_std"
    assert StudyConfig(out=tmp_path / "p", scale="paper").frontend_name == "linear"
    with pytest.raises(InputError, match=r"^frontend: expected one of \['conv', 'linear'"):
        StudyConfig(out=tmp_path / "x", frontend="fft")
    # a study made with one front-end is not continued with another
    SleepStudy(StudyConfig(out=tmp_path / "study", progress=False, frontend="linear"))
    with pytest.raises(
        InputError, match=r"frontend: \(not recorded: the default\) stored -> 'spectral' given"
    ):
        SleepStudy(StudyConfig(out=tmp_path / "study", progress=False, frontend="spectral"))
    args = sleep_staging.build_parser("t").parse_args(
        ["all", "--out", str(tmp_path / "cli"), "--frontend", "conv"]
    )
    assert sleep_staging.study_from_args(args).config.frontend_name == "conv"


def test_a_step_budget_override_reaches_every_arm_and_the_sequence_override_comes_last(
    tmp_path: Path,
) -> None:
    config = StudyConfig(out=tmp_path / "s", progress=False, finetune_overrides={"min_steps": 7})
    assert config.finetune_config("supervised", 0).min_steps == 7
    sequence = config.finetune_config("supervised", 0, arm="sequence")
    assert (sequence.min_steps, sequence.context, sequence.batch_size) == (7, 21, 8)
    assert sequence.ema_decay == 0.99  # the demo protocol, for every arm
    config = StudyConfig(
        out=tmp_path / "t",
        progress=False,
        finetune_overrides={"min_steps": 7, "lr": 1e-3},
        sequence_overrides={"min_steps": 3},
    )
    sequence = config.finetune_config("mae", 0, arm="sequence")
    assert (sequence.min_steps, sequence.lr) == (3, 1e-3)
    assert config.finetune_config("mae", 0).min_steps == 7


def test_the_fields_stagers_and_context_objectives_are_rows_of_the_recipes(tmp_path: Path) -> None:
    """``--rows`` takes braindecode's stagers (U-Sleep on the night arm, the others on the window
    arm, from scratch by the study's protocol) and relative positioning / temporal shuffling
    (pretrained on PART across windows' segments and budget, normalised as the study)."""
    import argparse

    parsed = sleep_staging.selected_rows(
        argparse.Namespace(
            rows=[
                "usleep:night",
                "chambon2018:window",
                "deepsleepnet:window",
                "rp:probe",
                "ts:night",
            ],
            methods=None,
            arms=None,
        )
    )
    assert parsed[0] == ("usleep", "night") and parsed[-1] == ("ts", "night")
    for bad in ("usleep:window", "chambon2018:night", "rp:nothing"):
        with pytest.raises(InputError, match="--rows"):
            sleep_staging.selected_rows(argparse.Namespace(rows=[bad], methods=None, arms=None))
    config = StudyConfig(out=tmp_path / "s", progress=False)
    night = config.finetune_config("usleep", 0, arm="night")
    supervised = config.finetune_config("supervised", 0, arm="night")
    assert (night.stager, night.context, night.layer_decay) == ("usleep", "night", None)
    assert (night.min_steps, night.night_crop, night.augmentations) == (
        supervised.min_steps,
        supervised.night_crop,
        supervised.augmentations,
    )
    window = config.finetune_config("deepsleepnet", 0)
    assert (window.stager, window.context) == ("deepsleepnet", None)
    assert window.min_steps == config.finetune_config("supervised", 0).min_steps
    windows = config.pretrain_config("part_windows")
    for method in ("rp", "ts"):
        pretraining = config.pretrain_config(method)
        assert pretraining.method == method
        for name in ("segment_windows", "batch_size", "min_steps", "lr", "normalize"):
            assert getattr(pretraining, name) == getattr(windows, name), name


def test_scales_are_typed_frozen_and_refuse_unknown_config_fields() -> None:
    import dataclasses

    from partnd.recipes.study_scales import SCALES, StudyScale

    demo = SCALES["demo"]
    assert isinstance(demo, StudyScale) and demo.budgets == (2, 4, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        demo.seeds = (0,)  # type: ignore[misc]
    with pytest.raises(TypeError):
        demo.by_budget["night"][4]["min_steps"] = 1  # type: ignore[index]
    assert demo.replace(seeds=(5,)).seeds == (5,) and demo.seeds == (0, 1, 2)
    assert demo.arm("window") == {} and demo.arm("night")["context"] == "night"
    with pytest.raises(InputError, match=r"StudyScale\.by_budget\[night\]\[2\]"):
        demo.replace(by_budget={"night": {2: {"min_step": 5}}})
    with pytest.raises(InputError, match=r"StudyScale\.frontend"):
        demo.replace(frontend="fourier")


def test_the_study_command_line_sets_pretraining_fields_last(tmp_path: Path) -> None:
    def study(out: str, *options: str) -> StudyConfig:
        argv = ["all", "--out", out, "--rows", "part_windows:night", "mae:night", *options]
        args = sleep_staging.build_parser("t").parse_args(argv)
        return sleep_staging.study_from_args(args, [("part_windows", "night")]).config

    options = ["--pretrain-steps", "40", "--pretrain-set", "variance_weight=100"]
    options += ["--pretrain-set", "covariance_weight=4", "--pretrain-set", "min_steps=60"]
    config = study(str(tmp_path / "vicreg"), *options)
    expected = {"epochs": 1, "min_steps": 60, "variance_weight": 100, "covariance_weight": 4}
    assert config.pretrain_overrides == expected  # after --pretrain-steps: its min_steps wins
    assert config.settings["pretrain_overrides"] == expected
    for method in ("part_windows", "mae"):  # every method's; MAE's objective has no such term
        pretraining = config.pretrain_config(method)
        assert (pretraining.variance_weight, pretraining.covariance_weight) == (100, 4)
        assert pretraining.min_steps == 60
    assert study(str(tmp_path / "plain")).pretrain_config("part_windows").variance_weight == 0
    refused = str(tmp_path / "refused")
    with pytest.raises(InputError, match=r"^--pretrain-set: expected FIELD=VALUE, got 'x'"):
        study(refused, "--pretrain-set", "x")
    with pytest.raises(InputError, match=r"^--pretrain-set: expected PretrainConfig field names"):
        study(refused, "--pretrain-set", "variance=1")
    with pytest.raises(InputError, match=r"^PretrainConfig\.variance_weight: expected"):
        study(refused, "--pretrain-set", "variance_weight=-1")
    assert not Path(refused).exists()  # refused before the study directory is claimed


def test_a_held_window_encoder_is_set_for_part_windows_only(tmp_path: Path) -> None:
    """``--pretrain-set trained_levels=temporal`` reaches part_windows' pretraining, on the
    pools too; every other method keeps 'all', which it alone accepts."""
    argv = ["all", "--out", str(tmp_path / "held"), "--rows", "part_windows:night", "mae:night"]
    argv += ["--pretrain-set", "trained_levels=temporal"]
    args = sleep_staging.build_parser("t").parse_args(argv)
    config = sleep_staging.study_from_args(args, [("part_windows", "night")]).config
    config.check_settings(["part_windows", "mae"], [("part_windows", "night")])
    assert config.pretrain_config("part_windows").trained_levels == "temporal"
    assert config.pretrain_config("part_windows", pool=True).trained_levels == "temporal"
    for method in ("part", "mae", "rp", "part_joint"):
        assert config.pretrain_config(method).trained_levels == "all"
    fields = {"trained_levels": "temporal", "variance_weight": 2.0}
    assert pretrain_fields_for("part_windows", fields) == fields
    assert pretrain_fields_for("mae", fields) == {"variance_weight": 2.0}
