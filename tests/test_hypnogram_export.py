"""Hypnograms partnd writes read back: predict -> EDF+ / CSV -> ``partnd ingest`` and
``mne.read_annotations``, for all five stages, with the store's onsets and the recording's start."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import mne
import numpy as np
import pytest

import partnd
from partnd import cli
from partnd.datasets import SleepWindowDataset
from partnd.datasets.stages import STAGE_ALIASES, STAGE_NAMES, stage_description
from partnd.datasets.store import SleepStore
from partnd.engine.config import FinetuneConfig
from partnd.inference import EDF_UNKNOWN_START, Prediction, predict_records
from partnd.preprocessing.ingest import ingest_file

pytest.importorskip("edfio")  # mne.export writes EDF through it

SFREQ = 100.0
CODES = [0, 1, 2, 3, 4, 2, 4, 0]  # every stage, REM twice
ONSET = 12.5
START = datetime(2021, 3, 4, 23, 0, 5, tzinfo=timezone.utc)


def write_night(path: Path, seed: int = 0, start: datetime | None = START) -> Path:
    """300 s of two 10-20 EEG channels at 100 Hz with an R&K hypnogram from ``ONSET`` s."""
    rng = np.random.default_rng(seed)
    data = 20e-6 * rng.standard_normal((2, round(300 * SFREQ)))
    raw = mne.io.RawArray(data, mne.create_info(["C3-M2", "C4-M1"], SFREQ, "eeg"), verbose="error")
    raw.set_meas_date(start)
    names = ["W", "1", "2", "3", "R", "2", "R", "W"]
    onsets = ONSET + 30.0 * np.arange(len(names))
    raw.set_annotations(mne.Annotations(onsets, 30.0, [f"Sleep stage {n}" for n in names]))
    mne.export.export_raw(path, raw, fmt="edf", verbose="error")
    return path


def edf_start(path: Path) -> datetime:
    """The start date and time in an EDF header (MNE reads EDF+ annotations without it)."""
    import pyedflib

    with pyedflib.EdfReader(str(path)) as reader:
        return reader.getStartdatetime().replace(tzinfo=timezone.utc)


def test_the_writers_descriptions_are_what_the_readers_accept() -> None:
    assert [stage_description(name) for name in STAGE_NAMES] == [
        "Sleep stage W",
        "Sleep stage N1",
        "Sleep stage N2",
        "Sleep stage N3",
        "Sleep stage R",
    ]
    for code, name in enumerate(STAGE_NAMES):
        assert STAGE_ALIASES[stage_description(name)] == code
        assert STAGE_ALIASES[name] == STAGE_ALIASES[f"Sleep stage {name}"] == code
    assert stage_description("spindle") == "Sleep stage spindle"  # other classes as they are


def test_every_stage_round_trips_through_edf_and_csv(tmp_path: Path) -> None:
    night = write_night(tmp_path / "night.edf")
    ingest_file(night, night, tmp_path / "a.zarr")
    store = SleepStore(tmp_path / "a.zarr")
    assert store.record_start("night") == START
    np.testing.assert_array_equal(store.stages("night"), CODES)
    prediction = Prediction(
        labels=np.array(CODES),
        probabilities=np.eye(5)[CODES],
        class_names=list(store.stage_names),
        onsets=store.start_times("night"),
        start=store.record_start("night"),
    )
    prediction.write_edf(tmp_path / "hypnogram.edf")
    prediction.write_csv(tmp_path / "hypnogram.csv")
    assert edf_start(tmp_path / "hypnogram.edf") == START
    csv = mne.read_annotations(tmp_path / "hypnogram.csv")
    assert csv.orig_time == START + timedelta(seconds=ONSET)  # MNE counts from the first row
    np.testing.assert_allclose(csv.onset, 30.0 * np.arange(8))
    for hypnogram in ("hypnogram.edf", "hypnogram.csv"):
        annotations = mne.read_annotations(tmp_path / hypnogram)
        assert list(annotations.description) == prediction.descriptions()
        back = tmp_path / f"{hypnogram}.zarr"
        ingest_file(night, tmp_path / hypnogram, back, "again")
        again = SleepStore(back)
        np.testing.assert_array_equal(again.stages("again"), CODES)  # REM included
        np.testing.assert_allclose(again.start_times("again"), store.start_times("night"))
    extras = mne.read_annotations(tmp_path / "hypnogram.csv").extras
    assert extras[4]["stage"] == "REM" and extras[4]["p_REM"] == 1.0
    assert extras[1]["onset_s"] == ONSET + 30.0


def test_an_unknown_start_is_written_as_such(tmp_path: Path) -> None:
    prediction = Prediction(labels=np.array([0, 4]), probabilities=np.eye(5)[[0, 4]],
                            class_names=list(STAGE_NAMES))  # fmt: skip
    prediction.write_edf(tmp_path / "h.edf")
    assert edf_start(tmp_path / "h.edf") == EDF_UNKNOWN_START
    assert prediction.to_annotations().orig_time is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"epoch_seconds": -30.0}, r"^epoch_seconds: expected a window duration > 0"),
        ({"epoch_seconds": 0.0}, r"^epoch_seconds: "),
        ({"onsets": np.array([0.0, -30.0])}, r"^onsets: expected 2 finite window starts >= 0"),
        ({"onsets": np.array([0.0])}, r"^onsets: expected 2 finite"),
        ({"labels": np.array([0, 5])}, r"^labels: expected class indices in \[0, 5\)"),
        ({"labels": np.array([0.0, 4.0])}, r"^labels: expected class indices"),
        ({"probabilities": np.eye(5)[:1]}, r"^probabilities: expected \[N, K\] = \[2, 5\]"),
        ({"start": datetime(2021, 3, 4, 23, 0)}, r"^start: expected None or a timezone-aware"),
    ],
)
def test_a_prediction_refuses_what_its_exports_would_write_distorted(
    fields: dict, message: str
) -> None:
    valid = {"labels": np.array([0, 4]), "probabilities": np.eye(5)[[0, 4]]}
    with pytest.raises(partnd.InputError, match=message):
        Prediction(**{**valid, "class_names": list(STAGE_NAMES), **fields})


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store of two ingested nights and a classifier fine-tuned on it."""
    root = tmp_path_factory.mktemp("nights")
    store = root / "nights.zarr"
    for seed, name in ((0, "n1"), (1, "n2")):
        edf = write_night(root / f"{name}.edf", seed, START.replace(day=4 + seed))
        assert cli.main(["ingest", str(edf), str(edf), "--out", str(store)]) == 0
    config = FinetuneConfig.preset("test", patch_size=300, epochs=1, batch_size=4)
    run = root / "ft"
    dataset = SleepWindowDataset(store, labelled_only=True)
    partnd.finetune(None, dataset, num_classes=5, class_names=list(STAGE_NAMES), out_dir=run,
                    config=config)  # fmt: skip
    return store, run


def test_predict_gives_one_hypnogram_per_record_with_its_onsets_and_start(
    two_nights: tuple[Path, Path], tmp_path: Path
) -> None:
    store_path, run = two_nights
    store = SleepStore(store_path)
    model = partnd.load_classifier(run)
    hypnograms = predict_records(model, store_path)
    assert list(hypnograms) == ["n1", "n2"]
    for day, (record, prediction) in enumerate(hypnograms.items(), start=4):
        np.testing.assert_allclose(prediction.window_onsets(), store.start_times(record))
        assert prediction.start == START.replace(day=day) and prediction.epoch_seconds == 30.0
    one = partnd.predict(model, SleepWindowDataset(store_path, records=["n2"]))
    np.testing.assert_allclose(one.window_onsets(), ONSET + 30.0 * np.arange(8))
    assert one.start == START.replace(day=5)
    with pytest.raises(partnd.InputError, match=r"data: .*predict_records gives one per record"):
        partnd.predict(model, store_path)  # two records are not one hypnogram

    out = tmp_path / "hypnograms"
    argv = ["predict", "--model", str(run), "--data", str(store_path), "--out", str(out), "--edf"]
    assert cli.main(argv) == 0
    assert edf_start(out / "n2.edf") == START.replace(day=5)  # not the time of writing
    np.testing.assert_allclose(mne.read_annotations(out / "n2.edf").onset, store.start_times("n2"))
    labels = hypnograms["n2"].labels
    night = write_night(tmp_path / "n2.edf", 1, START.replace(day=5))
    for hypnogram in (out / "n2.edf", out / "n2.csv"):
        back = tmp_path / f"{hypnogram.suffix}.zarr"
        assert cli.main(["ingest", str(night), str(hypnogram), "--out", str(back)]) == 0
        np.testing.assert_array_equal(SleepStore(back).stages("n2"), labels)


def test_the_csv_of_a_record_without_start_date_reingests_in_place(tmp_path: Path) -> None:
    """A generated PC18 record has no start date and its first scored window starts after 0 s:
    the CSV ``predict`` writes (onsets from 1970-01-01, as MNE writes them; MNE reads the first
    row back as orig_time) re-ingests with the predicted stages at the store's window times."""
    import torch

    from partnd.cohort.pc18_cohort import make_pc18_cohort
    from partnd.preprocessing.pc18_reader import find_records, read_eeg
    from partnd.preprocessing.physionet2018 import preprocess_physionet2018

    make_pc18_cohort(tmp_path / "pc18", n_records=1, hours=0.25, progress=False)
    preprocess_physionet2018(tmp_path / "pc18", tmp_path / "pc18.zarr", progress=False)
    store = SleepStore(tmp_path / "pc18.zarr")
    (record,) = store.record_ids()
    onsets = store.start_times(record)
    assert store.record_start(record) is None and onsets[0] > 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6 * 3000, 5))
    windows = SleepWindowDataset(tmp_path / "pc18.zarr", records=[record])
    prediction = partnd.predict(model, windows, class_names=list(STAGE_NAMES), device="cpu")
    assert len(set(prediction.labels.tolist())) > 1  # the stages say where each window went
    prediction.write_csv(tmp_path / "hypnogram.csv")
    assert mne.read_annotations(tmp_path / "hypnogram.csv").orig_time is not None

    eeg = read_eeg(find_records(tmp_path / "pc18")[0])  # the recording, without a start date
    info = mne.create_info(list(eeg.channels), eeg.sfreq, "eeg")
    mne.io.RawArray(eeg.data * 1e-6, info, verbose="error").save(
        tmp_path / f"{record}_raw.fif", verbose="error"
    )
    argv = ["ingest", str(tmp_path / f"{record}_raw.fif"), str(tmp_path / "hypnogram.csv")]
    assert cli.main([*argv, "--out", str(tmp_path / "back.zarr"), "--record-id", record]) == 0
    back = SleepStore(tmp_path / "back.zarr")
    np.testing.assert_allclose(back.start_times(record), onsets)
    np.testing.assert_array_equal(back.stages(record), prediction.labels)


def test_predict_a_recording_file_equals_ingest_then_predict(
    two_nights: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45 part 6: ``partnd predict --data NIGHT.edf`` stages the file through ingest's code
    path: the same windows and stages as ingesting it and predicting the store, kappa against
    its own hypnogram in the same call, nothing kept but the hypnogram beside it."""
    _, run = two_nights
    folder = tmp_path / "night"
    folder.mkdir()
    night = write_night(folder / "n3.edf", 3, START.replace(day=6))
    store = tmp_path / "n3.zarr"
    assert cli.main(["ingest", str(night), str(night), "--out", str(store)]) == 0
    expected = predict_records(partnd.load_classifier(run), store)["n3"]
    argv = ["predict", "--model", str(run), "--data", str(night), "--hypnogram", str(night)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == ["n3-stages.csv", "n3.edf"]
    written = mne.read_annotations(folder / "n3-stages.csv")
    np.testing.assert_allclose(written.onset - written.onset[0], expected.window_onsets() - ONSET)
    assert list(written.description) == expected.descriptions()
    staged = partnd.predict_recording(partnd.load_classifier(run), night, hypnogram=night)
    np.testing.assert_array_equal(staged.prediction.labels, expected.labels)
    np.testing.assert_allclose(staged.prediction.probabilities, expected.probabilities, atol=1e-6)
    np.testing.assert_allclose(staged.prediction.window_onsets(), expected.window_onsets())
    assert staged.prediction.start == expected.start and staged.store is None
    truth = SleepStore(store).stages("n3")
    codes = np.array([STAGE_NAMES.index(name) for name in expected.stage_names])
    from partnd.evaluation.metrics import cohen_kappa, confusion_matrix

    kappa = cohen_kappa(confusion_matrix(truth, codes, 5))
    assert staged.kappa == pytest.approx(kappa)
    assert f"kappa {kappa:.3f} against {night} over {len(truth)} scored windows" in printed
    # the written hypnogram re-ingests to the predicted stages (a record round-trips)
    back = tmp_path / "back.zarr"
    assert cli.main(["ingest", str(night), str(folder / "n3-stages.csv"), "--out", str(back)]) == 0
    np.testing.assert_array_equal(SleepStore(back).stages("n3"), expected.labels)
    # unlabelled: every window from the first sample, and --keep-store keeps the store
    kept = tmp_path / "kept.zarr"
    out = tmp_path / "out"
    argv = ["predict", "--model", str(run), "--data", str(night), "--out", str(out),
            "--keep-store", str(kept)]  # fmt: skip
    assert cli.main(argv) == 0
    assert SleepStore(kept).record_attrs("n3")["n_labelled"] == 0
    assert len(mne.read_annotations(out / "n3-stages.csv")) == 10
    bad = ["predict", "--model", str(run), "--data", str(store), "--out", str(out),
           "--hypnogram", str(night)]  # fmt: skip
    assert cli.main(bad) == 2
    assert "--hypnogram: expected a recording file as --data" in capsys.readouterr().err
