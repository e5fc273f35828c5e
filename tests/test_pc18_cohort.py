"""Tests of the generated PC18-format sample cohort: layout, labels, ground truth, idempotency."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import wfdb

from partnd._validation import InputError
from partnd.cohort import pc18_cohort
from partnd.cohort.hypnogram import STAGE_LABELS, hypnogram_from_string
from partnd.cohort.pc18_cohort import (
    COHORT_FILE,
    FAULT_KINDS,
    CohortInfo,
    default_cache_dir,
    ensure_sample_cohort,
    injected_faults,
    make_pc18_cohort,
    plan_cohort,
    synthesize_record,
)
from partnd.cohort.pc18_format import (
    CHANNEL_NAMES,
    FS,
    STAGE_KEYS,
    physical_to_digital,
    read_arousal_mat,
    wfdb_checksums,
)

EPOCH = 30 * FS
PARAMS: dict = {"n_records": 4, "hours": 0.5, "seed": 3, "test_fraction": 0.25}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> CohortInfo:
    root = tmp_path_factory.mktemp("cohort")
    start = time.perf_counter()
    info = make_pc18_cohort(root, progress=False, **PARAMS)
    seconds = time.perf_counter() - start
    record_hours = PARAMS["n_records"] * PARAMS["hours"]
    print(f"generated {record_hours} record-hours in {seconds:.2f} s")
    return info


def _all_files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def _spec(name: str) -> pc18_cohort.RecordSpec:
    return next(spec for spec in plan_cohort(**PARAMS) if spec.name == name)


def test_layout_and_manifest(cohort: CohortInfo) -> None:
    assert len(cohort.training_records) == 3 and len(cohort.test_records) == 1
    for record in cohort.training_records:
        assert record.parent.name == "training" and record.name.startswith("tr")
        expected = {f"{record.name}{suffix}" for suffix in (".hea", ".mat", "-arousal.mat")}
        assert {p.name for p in record.iterdir()} == expected | {f"{record.name}.arousal"}
    (test_record,) = cohort.test_records
    assert test_record.name.startswith("te") and test_record.parent.name == "test"
    assert {p.name for p in test_record.iterdir()} == {
        f"{test_record.name}.hea",
        f"{test_record.name}.mat",
    }
    manifest = json.loads(cohort.manifest.read_text())
    assert manifest["parameters"] == {"generator_version": pc18_cohort.GENERATOR_VERSION, **PARAMS}
    assert set(manifest["records"]) == {p.name for p in cohort.records}
    truths = list(cohort.truth.values())
    assert len({t["subject_id"] for t in truths}) == len(truths)  # one subject per record
    assert all(20 <= t["age"] <= 90 and t["sex"] in ("F", "M") for t in truths)
    assert not (cohort.root / ".partial").exists()


def test_wfdb_reads_channels_units_and_generator_values(cohort: CohortInfo) -> None:
    record_dir = cohort.training_records[0]
    record = wfdb.rdrecord(str(record_dir / record_dir.name))
    truth = cohort.truth[record_dir.name]
    assert record.sig_name == list(CHANNEL_NAMES)
    assert record.units == ["uV"] * 11 + ["%", "mV"]
    assert record.fs == FS and record.sig_len == truth["n_samples"] == 0.5 * 3600 * FS
    generated = synthesize_record(_spec(record_dir.name))
    step = 1.0 / np.array([1.0] * 11 + [655.35, 1000.0])[:, None]
    inside = np.abs(generated.physical * np.array([1.0] * 11 + [655.35, 1000.0])[:, None]) < 32000
    error = np.abs(record.p_signal.T - generated.physical)
    assert np.all(error[inside] <= 0.5 * np.broadcast_to(step, error.shape)[inside] + 1e-6)
    digital = wfdb.rdrecord(str(record_dir / record_dir.name), physical=False).d_signal
    np.testing.assert_array_equal(digital.T, generated.digital)


def test_mat_file_is_matlab_v4_with_interleaved_format_16(cohort: CohortInfo) -> None:
    record_dir = cohort.test_records[0]
    mat_path = record_dir / f"{record_dir.name}.mat"
    raw = mat_path.read_bytes()
    n = cohort.truth[record_dir.name]["n_samples"]
    assert struct.unpack("<5i", raw[:20]) == (30, 13, n, 0, 4)  # int16, 13 rows, n columns
    assert raw[20:24] == b"val\x00" and len(raw) == 24 + 2 * 13 * n
    val = scipy.io.loadmat(mat_path)["val"]
    assert val.shape == (13, n) and val.dtype == np.int16
    assert raw[24:] == np.ascontiguousarray(val.T).tobytes()  # sample-interleaved stream
    digital = wfdb.rdrecord(str(record_dir / record_dir.name), physical=False).d_signal
    np.testing.assert_array_equal(digital.T, val)


def test_header_matches_challenge_spelling_and_checksums(cohort: CohortInfo) -> None:
    record_dir = cohort.training_records[1]
    name = record_dir.name
    lines = (record_dir / f"{name}.hea").read_text().splitlines()
    n = cohort.truth[name]["n_samples"]
    assert lines[0] == f"{name} 13 200 {n}"
    val = scipy.io.loadmat(record_dir / f"{name}.mat")["val"]
    gains = ["1/uV"] * 11 + ["655.35(-32768)/%", "1000/mV"]
    checksums = wfdb_checksums(val)
    unsigned = wfdb.Record(d_signal=val.T, fmt=["16"] * 13).calc_checksum()  # wfdb: 0..65535
    assert [c % 65536 for c in checksums] == unsigned
    assert all(-32768 <= c <= 32767 for c in checksums)  # the challenge headers are signed
    for index, line in enumerate(lines[1:14]):
        fields = line.split(" ")
        assert fields[:5] == [f"{name}.mat", "16+24", gains[index], "16", "0"]
        assert int(fields[5]) == val[index, 0] and int(fields[6]) == checksums[index]
        assert fields[7:] == ["0", CHANNEL_NAMES[index]]
    assert len(lines) == 14


def test_arousal_mat_is_matlab_73_with_one_hot_stages(cohort: CohortInfo) -> None:
    record_dir = cohort.training_records[0]
    path = record_dir / f"{record_dir.name}-arousal.mat"
    assert path.read_bytes()[:19] == b"MATLAB 7.3 MAT-file"
    truth = cohort.truth[record_dir.name]
    n = truth["n_samples"]
    with h5py.File(path, "r") as handle:
        assert set(handle.keys()) == {"#refs#", "data"}
        assert handle["data/arousals"].shape == (n, 1)
        assert handle["data/arousals"].dtype == np.float64
        assert set(handle["data/sleep_stages"].keys()) == set(STAGE_KEYS)
        one_hot = np.stack([handle["data/sleep_stages"][key][()].squeeze() for key in STAGE_KEYS])
        assert handle["data/sleep_stages/wake"].shape == (1, n)
        assert handle["data/sleep_stages/wake"].dtype == np.uint8
    np.testing.assert_array_equal(one_hot.sum(axis=0), np.ones(n))
    stages, arousals = read_arousal_mat(path)
    start, stop = truth["scoring_start"], truth["scoring_stop"]
    assert np.all(stages[:start] == -1) and np.all(stages[stop:] == -1)
    assert np.all(arousals[:start] == -1) and set(np.unique(arousals)) <= {-1, 0, 1}
    assert np.sum(arousals == 1) > 0


def test_scoring_starts_after_an_unscored_prefix_and_epochs_carry_the_hypnogram(
    cohort: CohortInfo,
) -> None:
    for record_dir in cohort.training_records:
        truth = cohort.truth[record_dir.name]
        stages, _ = read_arousal_mat(record_dir / f"{record_dir.name}-arousal.mat")
        first_scored = int(np.flatnonzero(stages >= 0)[0])
        assert first_scored == truth["scoring_start"] == truth["unscored_prefix_samples"]
        assert first_scored >= 60 * FS and first_scored % EPOCH != 0
        hypnogram = hypnogram_from_string(truth["hypnogram"])
        scored = stages[first_scored : truth["scoring_stop"]].reshape(-1, EPOCH)
        assert np.all(scored == scored[:, :1])  # one stage per aligned 30-s epoch
        np.testing.assert_array_equal(scored[:, 0], hypnogram)
        assert truth["unscored_suffix_samples"] == truth["n_samples"] - truth["scoring_stop"]
        counts = {label: int(np.sum(hypnogram == i)) for i, label in enumerate(STAGE_LABELS)}
        assert truth["stage_counts"] == counts and all(counts.values())


def test_wfdb_annotations_repeat_the_labels(cohort: CohortInfo) -> None:
    record_dir = cohort.training_records[2]
    annotation = wfdb.rdann(str(record_dir / record_dir.name), "arousal")
    stages, arousals = read_arousal_mat(record_dir / f"{record_dir.name}-arousal.mat")
    rebuilt = np.full_like(stages, -1)
    stage_marks = [
        (s, note)
        for s, note in zip(annotation.sample, annotation.aux_note, strict=True)
        if note in STAGE_LABELS
    ]
    truth = cohort.truth[record_dir.name]
    for (sample, note), (next_sample, _) in zip(
        stage_marks, [*stage_marks[1:], (truth["scoring_stop"], "")], strict=True
    ):
        rebuilt[sample:next_sample] = STAGE_LABELS.index(note)
    np.testing.assert_array_equal(rebuilt, stages)
    openings = [
        (s, n[1:])
        for s, n in zip(annotation.sample, annotation.aux_note, strict=True)
        if n[0] == "("
    ]
    closings = [
        (s, n[:-1])
        for s, n in zip(annotation.sample, annotation.aux_note, strict=True)
        if n[-1] == ")"
    ]
    assert len(openings) == len(closings) > 0
    for (start, label), (stop, closing) in zip(openings, closings, strict=True):
        assert label == closing
        assert np.all(arousals[start : stop + 1] == (-1 if label.startswith("resp_") else 1))
    assert set(annotation.symbol) == {'"'}


def test_quantisation_clipping_is_recorded(cohort: CohortInfo) -> None:
    for record_dir in cohort.records:
        truth = cohort.truth[record_dir.name]
        val = scipy.io.loadmat(record_dir / f"{record_dir.name}.mat")["val"]
        recorded = truth["artefacts"]["quantisation_clipped_samples"]
        for row, name in enumerate(CHANNEL_NAMES[:8]):
            at_limit = int(np.sum((val[row] == 32767) | (val[row] == -32767)))
            assert recorded.get(name, 0) <= at_limit <= recorded.get(name, 0) + 2
        for start, stop in truth["artefacts"]["movement"]:
            assert 0 <= start < stop <= truth["n_samples"]


def test_faulty_records_are_declared_in_cohort_json(tmp_path: Path) -> None:
    info = make_pc18_cohort(tmp_path, n_records=12, hours=0.25, seed=0, progress=False)
    artefacts = {name: truth["artefacts"] for name, truth in info.truth.items()}
    flat = [name for name, a in artefacts.items() if a["flat_channel"]]
    assert len(flat) == 1 and flat[0].startswith("tr")  # one flat-channel record, labelled
    record_dir = info.root / "training" / flat[0]
    val = scipy.io.loadmat(record_dir / f"{flat[0]}.mat")["val"]
    channel = CHANNEL_NAMES.index(artefacts[flat[0]]["flat_channel"]["channel"])
    assert np.all(val[channel] == val[channel, 0])
    assert all(np.ptp(val[row]) > 100 for row in range(6) if row != channel)
    noisy = [name for name, a in artefacts.items() if a["line_noise"]]
    assert 0 < len(noisy) < 12
    for name in noisy:
        split = "training" if name.startswith("tr") else "test"
        val = scipy.io.loadmat(info.root / split / name / f"{name}.mat")["val"]
        spectrum = np.abs(np.fft.rfft(val[2, : 60 * FS].astype(float)))
        freqs = np.fft.rfftfreq(60 * FS, 1 / FS)
        line = spectrum[np.abs(freqs - 60.0) < 0.05].max()
        assert line > 10 * np.median(spectrum[(freqs > 50) & (freqs < 70)])
    for a in artefacts.values():
        if a["clipped_channel"]:
            clip = a["clipped_channel"]
            assert a["quantisation_clipped_samples"][clip["channel"]] > 0
            assert 30 * FS <= clip["stop"] - clip["start"] <= 180 * FS
    faults = injected_faults(info.root)  # what preprocessing reads to expect failures
    assert faults[flat[0]]["flat_channel"] == artefacts[flat[0]]["flat_channel"]
    assert sorted(n for n, f in faults.items() if "line_noise" in f) == sorted(noisy)
    assert set(faults) == {n for n, a in artefacts.items() if any(a[k] for k in FAULT_KINDS)}
    assert injected_faults(tmp_path / "training") == {}  # no cohort.json: nothing declared


def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path: Path) -> None:
    args = {"n_records": 2, "hours": 0.25, "test_fraction": 0.5, "progress": False}
    first = make_pc18_cohort(tmp_path / "a", seed=7, **args)
    time.sleep(1.1)  # file timestamps must not leak into the bytes
    make_pc18_cohort(tmp_path / "b", seed=7, **args)
    make_pc18_cohort(tmp_path / "c", seed=8, **args)
    files_a, files_b = _all_files(tmp_path / "a"), _all_files(tmp_path / "b")
    assert files_a == files_b and len(files_a) == 1 + 4 + 2
    files_c = _all_files(tmp_path / "c")
    mats_a = [v for k, v in files_a.items() if k.endswith(".mat")]
    mats_c = [v for k, v in files_c.items() if k.endswith(".mat")]
    assert not set(mats_a) & set(mats_c)
    assert first.seed == 7


def test_second_call_is_idempotent(cohort: CohortInfo) -> None:
    before = {p: p.stat().st_mtime_ns for p in cohort.root.rglob("*") if p.is_file()}
    again = make_pc18_cohort(cohort.root, progress=False, **PARAMS)
    after = {p: p.stat().st_mtime_ns for p in cohort.root.rglob("*") if p.is_file()}
    assert before == after
    assert again == cohort


def test_killed_generation_leaves_no_manifest_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"n_records": 3, "hours": 0.25, "seed": 5, "test_fraction": 0.34, "progress": False}
    real = pc18_cohort.generate_record
    calls = []

    def dies_after_one(spec: pc18_cohort.RecordSpec, root: Path) -> dict:
        if calls:
            raise KeyboardInterrupt("killed")
        calls.append(spec.name)
        return real(spec, root)

    monkeypatch.setattr(pc18_cohort, "generate_record", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        make_pc18_cohort(tmp_path / "killed", **args)
    killed = tmp_path / "killed"
    assert not (killed / COHORT_FILE).exists()
    done = killed / "training" / calls[0]
    assert done.is_dir() and (killed / ".partial" / f"{calls[0]}.json").is_file()
    done_mtime = (done / f"{calls[0]}.mat").stat().st_mtime_ns

    monkeypatch.setattr(pc18_cohort, "generate_record", real)
    info = make_pc18_cohort(killed, **args)
    assert (killed / COHORT_FILE).is_file() and len(info.records) == 3
    assert (done / f"{calls[0]}.mat").stat().st_mtime_ns == done_mtime  # not regenerated
    make_pc18_cohort(tmp_path / "clean", **args)
    assert _all_files(killed) == _all_files(tmp_path / "clean")


def test_other_parameters_need_overwrite_and_foreign_dirs_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "cohort"
    make_pc18_cohort(root, n_records=1, hours=0.25, seed=0, test_fraction=0.0, progress=False)
    with pytest.raises(InputError, match="overwrite=True"):
        make_pc18_cohort(root, n_records=1, hours=0.25, seed=1, test_fraction=0.0, progress=False)
    info = make_pc18_cohort(
        root, n_records=1, hours=0.25, seed=1, test_fraction=0.0, progress=False, overwrite=True
    )
    assert info.seed == 1 and len(list((root / "training").iterdir())) == 1
    foreign = tmp_path / "foreign"
    (foreign / "training" / "tr03-0005").mkdir(parents=True)
    with pytest.raises(InputError, match="out_dir"):
        make_pc18_cohort(foreign, n_records=1, hours=0.25, progress=False)
    assert (foreign / "training" / "tr03-0005").is_dir()


def test_missing_file_is_regenerated(tmp_path: Path) -> None:
    info = make_pc18_cohort(tmp_path, n_records=1, hours=0.25, test_fraction=0.0, progress=False)
    record = info.training_records[0]
    original = (record / f"{record.name}.hea").read_bytes()
    (record / f"{record.name}.hea").unlink()
    again = make_pc18_cohort(tmp_path, n_records=1, hours=0.25, test_fraction=0.0, progress=False)
    assert (record / f"{record.name}.hea").read_bytes() == original
    assert again.truth == info.truth


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"n_records": 0}, "n_records"),
        ({"hours": 0.1}, "hours"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"n_records": 1, "test_fraction": 0.6}, "test_fraction"),
        ({"n_jobs": 0}, "n_jobs"),
        ({"hours": float("inf")}, "hours"),  # OverflowError
        ({"hours": float("nan")}, "hours"),
        ({"hours": 1e6}, "hours"),  # no night is that long
        ({"seed": -1}, "seed"),  # ValueError from numpy
        ({"n_records": 100000}, "n_records"),  # "Cannot take a larger sample than population"
    ],
)
def test_bad_arguments_are_rejected(tmp_path: Path, kwargs: dict, argument: str) -> None:
    with pytest.raises(InputError, match=argument):
        make_pc18_cohort(tmp_path, progress=False, **kwargs)


def test_default_cache_dir_follows_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARTND_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "pc18_sample"
    monkeypatch.delenv("PARTND_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "partnd" / "pc18_sample"


@pytest.mark.slow
def test_parallel_generation_gives_the_same_bytes(tmp_path: Path) -> None:
    args = {"n_records": 3, "hours": 0.25, "seed": 4, "progress": False}
    make_pc18_cohort(tmp_path / "serial", n_jobs=1, **args)
    make_pc18_cohort(tmp_path / "parallel", n_jobs=2, **args)
    assert _all_files(tmp_path / "serial") == _all_files(tmp_path / "parallel")


@pytest.mark.slow
def test_default_sample_cohort_builds_once_and_is_reused(tmp_path: Path) -> None:
    info = ensure_sample_cohort(tmp_path / "sample", progress=False)
    assert len(info.training_records) == 18 and len(info.test_records) == 6
    flat = [name for name, truth in info.truth.items() if truth["artefacts"]["flat_channel"]]
    assert len(flat) == 1
    proportions = np.mean(
        [list(truth["stage_fractions"].values()) for truth in info.truth.values()], axis=0
    )
    assert all(0.04 <= p <= 0.55 for p in proportions)
    files = [p for p in (tmp_path / "sample").rglob("*") if p.is_file() and p.name != ".lock"]
    written = {path: path.stat().st_mtime_ns for path in files}
    again = ensure_sample_cohort(tmp_path / "sample", progress=False)
    assert again.training_records == info.training_records
    assert {path: path.stat().st_mtime_ns for path in files} == written


def test_saturation_never_writes_the_wfdb_invalid_marker() -> None:
    # -32768 is WFDB format 16's "missing sample": a clipped channel reads saturated, not NaN.
    physical = np.zeros((13, 4))
    physical[0] = [-1e6, 1e6, 0.0, 5.0]
    digital, n_clipped = physical_to_digital(physical)
    assert digital[0].tolist() == [-32767, 32767, 0, 5]
    assert n_clipped[0] == 2


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--hours", "inf"], "--hours"),
        (["--hours", "1e6"], "--hours"),
        (["--seed", "-1"], "--seed"),
        (["--records", "100000"], "--records"),
    ],
)
def test_cli_bounds_what_a_night_can_be(
    tmp_path: Path, capsys, argv: list[str], option: str
) -> None:
    """These values crashed with a traceback (or, for 1e6 hours, started a year-long night)."""
    from partnd.cohort.pc18_cohort import main

    assert main(["--out", str(tmp_path / "c"), "--no-progress", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"partnd cohort: error: {option}: expected")
    assert not (tmp_path / "c").exists()
