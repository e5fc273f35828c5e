"""The cohort's realism: per-stage spectra and hypnogram variability in the documented ranges."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.signal

from partnd._validation import InputError
from partnd.cohort.hypnogram import STAGE_LABELS, SleepStage
from partnd.cohort.pc18_cohort import plan_cohort, plan_record, synthesize_record
from partnd.cohort.pc18_format import CHANNEL_NAMES, FS
from partnd.cohort.realism import (
    NORMS,
    SPECTRAL_RANGES,
    RealismReport,
    format_report,
    hypnogram_statistics,
    main,
    read_sri_hypnograms,
    realism_report,
    run_report,
    stage_spectra,
)

EPOCH = 30 * FS


@pytest.fixture(scope="module")
def c4_spectra() -> dict[str, dict[str, float]]:
    """Per-stage spectra of C4-M1 (0.1–30 Hz, as preprocessed) of two 2-h generated records."""
    signals, stages = [], []
    for spec in plan_cohort(2, 2.0, seed=5, test_fraction=0.0):
        record = synthesize_record(spec)
        start, n_scored = record.truth["scoring_start"], len(record.truth["hypnogram"])
        sos = scipy.signal.butter(4, (0.1, 30.0), btype="bandpass", fs=FS, output="sos")
        c4 = scipy.signal.sosfiltfilt(sos, record.physical[CHANNEL_NAMES.index("C4-M1")])
        signals.append(c4[start : start + n_scored * EPOCH])
        stages.append(plan_record(spec).scored)
    return stage_spectra(np.concatenate(signals), np.concatenate(stages), FS)


@pytest.mark.parametrize("stage", STAGE_LABELS)
def test_stage_spectra_lie_in_the_documented_ranges(
    c4_spectra: dict[str, dict[str, float]], stage: str
) -> None:
    values = c4_spectra[stage]
    assert values["n"] >= 10
    for name, (low, high) in SPECTRAL_RANGES[stage].items():
        assert low <= values[name] <= high, (stage, name, values[name])


def test_stages_differ_as_scorers_read_them(c4_spectra: dict[str, dict[str, float]]) -> None:
    wake, n1, n2, n3, rem = (c4_spectra[label] for label in STAGE_LABELS)
    assert wake["alpha"] > 1.5 * n1["alpha"] and wake["alpha"] > rem["alpha"]  # alpha drops out
    assert wake["beta"] > n1["beta"]  # beta falls at sleep onset
    assert n2["sigma"] > 1.2 * max(n1["sigma"], rem["sigma"], n3["sigma"])  # spindles
    assert n3["sdelta"] + n3["fdelta"] > n2["sdelta"] + n2["fdelta"] + 0.1  # slow waves
    assert n3["std"] > 1.3 * n2["std"] > 1.3 * rem["std"]  # amplitude rises with depth
    assert rem["theta"] > n2["theta"] and rem["beta"] > n2["beta"]  # low-amplitude mixed frequency


def test_planned_nights_match_published_architecture() -> None:
    specs = plan_cohort(120, 8.0, seed=11, test_fraction=0.0)
    stats = hypnogram_statistics([plan_record(spec).scored for spec in specs])
    assert stats.violations() == []
    assert 6.5 <= stats.sleep_period_mean <= 7.9 and stats.sleep_period_sd >= 0.1
    assert min(stats.fraction_sd.values()) > 0.015


def test_plan_record_is_deterministic_per_seed_and_matches_the_record() -> None:
    spec_a, spec_b = plan_cohort(2, 8.0, seed=3, test_fraction=0.0)
    first, again = plan_record(spec_a), plan_record(spec_a)
    np.testing.assert_array_equal(first.hypnogram, again.hypnogram)
    assert first.architecture == again.architecture
    assert not np.array_equal(first.hypnogram, plan_record(spec_b).hypnogram)
    short = plan_cohort(1, 0.5, seed=3, test_fraction=0.0)[0]
    truth = synthesize_record(short).truth
    assert truth["hypnogram"] == "".join("W123R"[s] for s in plan_record(short).scored)


def test_hypnogram_statistics_known_values() -> None:
    w, n1, n2, n3, r = (int(stage) for stage in SleepStage)
    night = np.array([w, w, n1, n2, n2, n3, n3, n3, w, r, r, r, r, n2, w, w], dtype=np.int8)
    stats = hypnogram_statistics([night, night])
    # Sleep period: epochs 2..13 (12 epochs): W 1, N1 1, N2 3, N3 3, REM 4.
    assert stats.n_nights == 2 and stats.sleep_period_mean == pytest.approx(12 * 30 / 3600)
    assert stats.fraction_mean == pytest.approx(
        {"W": 1 / 12, "N1": 1 / 12, "N2": 3 / 12, "N3": 3 / 12, "R": 4 / 12}
    )
    assert stats.fraction_sd["N2"] == 0.0 and stats.sleep_period_sd == 0.0
    assert stats.mean_bout == pytest.approx({"W": 1.0, "N1": 1.0, "N2": 1.5, "N3": 3.0, "R": 4.0})
    assert stats.rem_latency_mean == pytest.approx(7 * 0.5)  # REM starts 7 epochs after onset
    assert NORMS["bout_R"].holds(19.0) and not NORMS["bout_R"].holds(9.9)
    with pytest.raises(InputError, match="hypnograms"):
        hypnogram_statistics([np.zeros(10, dtype=np.int8)])


def test_stage_spectra_of_a_pure_rhythm() -> None:
    t = np.arange(4 * EPOCH) / FS
    signal = 20.0 * np.sin(2 * np.pi * 10.0 * t)
    spectra = stage_spectra(signal, np.array([0, 0, 4, -1]), FS)
    assert set(spectra) == {"W", "R"} and spectra["W"]["n"] == 2
    assert spectra["W"]["alpha"] > 0.99 and spectra["W"]["std"] == pytest.approx(
        20 / np.sqrt(2), rel=1e-3
    )
    with pytest.raises(InputError, match="signal"):
        stage_spectra(signal[:-1], np.zeros(4), FS)


def test_sri_hypnograms_are_read_with_light_sleep_as_n2(tmp_path) -> None:
    path = tmp_path / "sri.csv"
    path.write_text("subject,epoch,reference,device\nb,2,3,0\nb,1,1,0\na,1,0,0\na,2,2,1\n")
    a, b = read_sri_hypnograms(path)
    np.testing.assert_array_equal(a, [SleepStage.WAKE, SleepStage.N3])
    np.testing.assert_array_equal(b, [SleepStage.N2, SleepStage.REM])  # sorted by epoch
    (tmp_path / "bad.csv").write_text("subject,stage\na,1\n")
    with pytest.raises(InputError, match="real_hypnograms"):
        read_sri_hypnograms(tmp_path / "bad.csv")


def test_cli_refuses_a_directory_without_a_cohort(tmp_path, capsys) -> None:
    assert main(["--out", str(tmp_path / "out"), "--cohort", str(tmp_path)]) == 2
    assert "error: --cohort: expected a generated cohort" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cohort", "C", "--records", "3"], "--records: expected None with --cohort"),
        (["--cohort", "C", "--hours", "2"], "--hours: expected None with --cohort"),
        (["--seed", "-1"], "--seed: expected an int >= 0"),
        (["--planned", "-2"], "--planned: expected a count in [0, 9999]"),
        (["--records", "0"], "--records: expected an int in [1, 9999]"),
        (["--hours", "inf"], "--hours: expected a record length"),
        (["--real-hypnograms", "nope.csv.xz"], "--real-hypnograms: expected a file"),
    ],
)
def test_cli_refuses_before_any_work_naming_the_option(tmp_path, capsys, argv, message) -> None:
    """--cohort with --records/--hours ignored them; --seed -1 and a missing --real-hypnograms
    crashed (the latter after the staging); errors named cohort_dir, n_records, n_planned."""
    argv = [str(tmp_path / a) if a in ("C", "nope.csv.xz") else a for a in argv]
    assert main(["--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m partnd.cohort.realism: error: ") and message in err, err
    assert not (tmp_path / "out").exists()  # nothing generated


def test_cli_refuses_to_replace_an_existing_json(tmp_path, capsys) -> None:
    existing = tmp_path / "report.json"
    existing.write_text("{}")
    assert main(["--out", str(tmp_path / "out"), "--json", str(existing)]) == 2
    assert "--json: expected a new file (pass --overwrite to replace it)" in capsys.readouterr().err
    assert existing.read_text() == "{}" and not (tmp_path / "out").exists()


def test_run_report_calls_the_report_with_the_options_and_writes_its_json_only_when_asked(
    tmp_path, capsys
) -> None:
    @dataclass(frozen=True)
    class Report:
        kappa: float

    calls: list[tuple] = []

    def report(out_dir, **arguments) -> Report:
        calls.append((out_dir, arguments))
        return Report(0.5)

    def run(json_path, overwrite: bool) -> int:
        args = argparse.Namespace(
            out=tmp_path / "out", records=3, hours=0.5, seed=7, n_jobs=2, planned=20,
            json=json_path, overwrite=overwrite,
        )  # fmt: skip
        return run_report(args, report, lambda made: f"kappa {made.kappa}", cohort_dir="c")

    assert run(None, False) == 0 and capsys.readouterr().out == "kappa 0.5\n"
    assert calls == [
        (
            tmp_path / "out",
            {"n_records": 3, "hours": 0.5, "seed": 7, "n_jobs": 2, "n_planned": 20,
             "overwrite": False, "cohort_dir": "c"},
        )
    ]  # fmt: skip
    target = tmp_path / "report.json"
    assert run(target, False) == 0 and json.loads(target.read_text()) == {"kappa": 0.5}
    with pytest.raises(InputError, match="json: expected a new file"):
        run(target, False)
    assert len(calls) == 2  # refused before the report was made
    target.write_text("{}")
    assert run(target, True) == 0 and json.loads(target.read_text()) == {"kappa": 0.5}
    assert calls[-1][1]["overwrite"] is True


def _report(planned) -> RealismReport:
    nights = [plan_record(spec).scored for spec in plan_cohort(3, 8.0, 4, 0.0)]
    generated = hypnogram_statistics(nights)
    return RealismReport(
        cohort="c",
        n_records=3,
        hours=8.0,
        generation_seconds_per_night=None,
        n_jobs=1,
        kappa=0.5,
        accuracy=0.6,
        per_stage_f1=dict.fromkeys(STAGE_LABELS, 0.5),
        confusion=[[1] * 5] * 5,
        per_record_kappa={"a": 0.5},
        generated=generated,
        planned=planned,
        real=None,
        spectra={},
        yasa_features={},
    )


def test_without_planned_nights_the_generated_ones_are_held_against_the_norms() -> None:
    """--planned 0 printed the generated nights a second time as "planned, same length" and
    called them the planned hypnograms outside the norms."""
    text = format_report(_report(None))
    assert "planned, same length" not in text
    assert "| generated (3 nights)" in text and "generated hypnograms outside the norms" in text
    assert "planned hypnograms" not in text
    planned = hypnogram_statistics([plan_record(s).scored for s in plan_cohort(5, 8.0, 9, 0.0)])
    text = format_report(_report(planned))
    assert "| planned, same length (5 nights)" in text
    assert "planned hypnograms outside the norms" in text


@pytest.mark.slow
def test_report_generates_preprocesses_and_stages_with_yasa(tmp_path) -> None:
    report = realism_report(tmp_path, n_records=2, hours=0.5, seed=2, n_planned=5)
    n_windows = int(np.sum(report.confusion))
    assert report.n_records == 2 and n_windows == sum(s["n"] for s in report.spectra.values())
    assert -1.0 <= report.kappa <= 1.0 and 0.0 <= report.accuracy <= 1.0
    assert report.generation_seconds_per_night is not None and report.planned.n_nights == 5
    assert set(report.yasa_features) <= set(STAGE_LABELS) and "W" in report.yasa_features
    assert "YASA pretrained (C4-M1, zero labels): kappa" in format_report(report)
    again = realism_report(tmp_path, n_records=2, hours=0.5, seed=2, n_planned=5)
    assert again.generation_seconds_per_night is None  # the cohort was reused
    assert again.kappa == report.kappa and again.confusion == report.confusion
