"""``benchmarks/bench_channel_sets.py kappa``: the night classifier of every channel mode
trained on one draw of a tiny generated store (paired kappas, finished runs reused), the
window arm, still the default; and the ``step`` command's three layouts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from partnd.cohort.pc18_cohort import make_pc18_cohort

MODES = ["fixed", "set", "set-dropout", "set-plain", "set-attention"]
#: a tiny night classifier: test-sized encoders, crops of 20 windows, fp32
TINY = {
    "encoder": "vit_test",
    "encoder_overrides": {},
    "temporal_encoder": "temporal_test",
    "night_crop": 20,
    "warmup_steps": 1,
    "precision": "fp32",
    "log_every_steps": 1,
}


@pytest.fixture
def bench(import_benchmark):
    """The benchmark script as a module."""
    return import_benchmark("bench_channel_sets")


@pytest.fixture
def cohort(tmp_path: Path) -> Path:
    """Six generated nights of 15 min: three test subjects, three to label and validate on."""
    return make_pc18_cohort(
        tmp_path / "cohort", n_records=6, hours=0.25, seed=1, progress=False
    ).root


def test_night_arm_trains_every_mode_on_one_draw_and_reports_paired_kappas(
    bench, cohort: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = ["kappa", "--arm", "night", "--src", str(cohort), "--store", str(tmp_path / "s.zarr")]
    argv += ["--out", str(out), "--draws", "0", "--subjects", "1", "--steps", "3"]
    argv += ["--batch-size", "2", "--eval-every", "3", "--overrides", json.dumps(TINY)]
    bench.main([*argv, "--modes", *MODES])

    report = json.loads((out / "kappa.json").read_text())
    settings = report["settings"]
    assert settings["arm"] == "night" and settings["steps"] == 3 and settings["batch_size"] == 2
    assert settings["channel_options"] == {
        "set": {"subset_sampling": True},
        "set-dropout": {"channel_dropout": 0.5},
        "set-plain": {},
        "set-attention": {"subset_sampling": True, "channel_pool": "attention"},
    }
    (row,) = report["rows"]
    assert row["draw"] == 0 and len(row["subjects"]) == 1
    assert not set(row["subjects"]) & set(row["validation"])
    for mode in MODES:
        names = ["val_kappa", "kappa"]
        names += ["val_subset_kappa", "subset_kappa"] if mode != "fixed" else []
        for name in names:
            value = row[f"{mode}_{name}"]
            assert math.isfinite(value) and -1.0 <= value <= 1.0, (mode, name, value)
            assert report["means"][mode][name] == pytest.approx(value)  # one draw
        assert f"{mode}_subset_kappa" in row or mode == "fixed"
        config = json.loads((out / f"draw0-{mode}" / "config.json").read_text())
        assert config["context"] == "night" and config["min_steps"] == 3
        assert config["channel_mode"] == ("fixed" if mode == "fixed" else "set")
    for mode in MODES[1:]:  # paired: the same draw's difference
        (difference,) = report["differences"][mode]["per_draw"]
        assert difference["kappa"] == pytest.approx(row[f"{mode}_kappa"] - row["fixed_kappa"])
        assert difference["val_kappa"] == pytest.approx(
            row[f"{mode}_val_kappa"] - row["fixed_val_kappa"]
        )
    table = (out / "kappa.md").read_text()
    assert "| set-plain − fixed |" not in table and "| set-plain | mean |" in table
    assert table.count(f"| 0 | {row['subjects'][0]} | ") == len(MODES)

    # a second command reuses the finished runs: nothing is trained again
    finished = {mode: (out / f"draw0-{mode}.json").stat().st_mtime_ns for mode in MODES}
    bench.main([*argv, "--modes", "fixed", "set"])
    assert {m: (out / f"draw0-{m}.json").stat().st_mtime_ns for m in MODES} == finished
    again = json.loads((out / "kappa.json").read_text())
    assert again["rows"][0]["set_kappa"] == row["set_kappa"]
    assert list(again["means"]) == ["fixed", "set"]

    # a run finished before the validation subset kappa existed gets it from its classifier
    saved = json.loads((out / "draw0-set.json").read_text())
    del saved["kappas"]["val_subset_kappa"]
    (out / "draw0-set.json").write_text(json.dumps(saved))
    checkpoint = (out / "draw0-set" / "classifier.pt").stat().st_mtime_ns
    bench.main([*argv, "--modes", "set"])
    restored = json.loads((out / "draw0-set.json").read_text())["kappas"]
    assert restored["val_subset_kappa"] == pytest.approx(row["set_val_subset_kappa"])
    assert (out / "draw0-set" / "classifier.pt").stat().st_mtime_ns == checkpoint


def test_the_validation_subset_kappa_of_every_channel_is_the_validation_kappa(
    bench, cohort: Path, tmp_path: Path
) -> None:
    """Given all six channels, the selected classifier read back from its run directory
    stages the validation subjects exactly as the run's checkpoint selection measured."""
    argv = ["kappa", "--arm", "night", "--src", str(cohort), "--store", str(tmp_path / "s.zarr")]
    argv += ["--out", str(tmp_path / "out"), "--subjects", "1", "--steps", "3"]
    argv += ["--batch-size", "2", "--eval-every", "3", "--overrides", json.dumps(TINY)]
    channels = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
    bench.main([*argv, "--modes", "set", "--subset", *channels])
    (row,) = json.loads((tmp_path / "out" / "kappa.json").read_text())["rows"]
    assert row["set_val_subset_kappa"] == pytest.approx(row["set_val_kappa"], abs=1e-9)


def test_window_arm_is_the_default_and_takes_the_step_and_batch_options(
    bench, cohort: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    window = {key: TINY[key] for key in ("encoder", "encoder_overrides", "precision")}
    argv = ["kappa", "--src", str(cohort), "--store", str(tmp_path / "s.zarr"), "--out", str(out)]
    argv += ["--subjects", "1", "--steps", "2", "--batch-size", "8", "--eval-every", "2"]
    bench.main([*argv, "--overrides", json.dumps(window), "--modes", "set", "--vote-subsets", "2"])
    report = json.loads((out / "kappa.json").read_text())
    assert report["settings"]["arm"] == "window" and report["differences"] == {}
    config = json.loads((out / "draw0-set" / "config.json").read_text())
    assert config["context"] is None and config["batch_size"] == 8 and config["min_steps"] == 2
    assert config["channel_options"] == {"subset_sampling": True}
    row = report["rows"][0]
    kappas = ("val_kappa", "kappa", "subset_kappa", "vote_kappa", "subset_vote_kappa")
    assert all(-1.0 <= row[f"set_{name}"] <= 1.0 for name in kappas)
    assert "fixed_kappa" not in row


def test_step_layouts_give_the_sequence_layout_six_times_the_tokens(bench) -> None:
    x = torch.randn(2, len(bench.CHANNELS), bench.SAMPLES)
    layouts = bench.step_layouts(x)
    assert list(layouts) == ["fixed", "set", "sequence"]
    patches = {name: classifier.num_positions for name, (classifier, _) in layouts.items()}
    assert patches == {"fixed": 30, "set": 30, "sequence": 180}
    for name, (classifier, inputs) in layouts.items():
        assert classifier(inputs).shape == (2, bench.CLASSES), name
    sequence_input = layouts["sequence"][1]
    assert sequence_input.shape == (2, 1, 6 * bench.SAMPLES)
    assert sequence_input[0, 0, bench.SAMPLES : 2 * bench.SAMPLES].equal(x[0, 1])


def test_step_command_prints_each_layouts_ratio_to_fixed(bench, capsys) -> None:
    bench.main(["step", "--batch-size", "2", "--steps", "1", "--warmup", "0", "--threads", "1"])
    printed = capsys.readouterr().out
    for name in ("fixed", "set", "sequence"):
        assert f"{name}:" in printed
    assert "set / fixed: x" in printed and "sequence / fixed: x" in printed
