"""The electrode-level generator and the dataset profiles (Sleep-EDF, NSRR, headband) it writes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import mne
import numpy as np
import pyedflib
import pytest
import scipy.signal

from partnd._validation import InputError
from partnd.cohort import command
from partnd.cohort.electrodes import (
    HEADBAND_DERIVATIONS,
    PC18_DERIVATIONS,
    SHHS_DERIVATIONS,
    SLEEP_EDF_DERIVATIONS,
    derivation_electrodes,
)
from partnd.cohort.nsrr_format import STAGE_CONCEPTS
from partnd.cohort.pc18_cohort import plan_cohort, plan_record, synthesize_record
from partnd.cohort.profiles import (
    NSRR,
    SLEEP_EDF,
    _adjust_population,
    make_profile_cohort,
    plan_profile_cohort,
)
from partnd.cohort.sleep_edf_format import RK_LABELS, label_runs
from partnd.cohort.synthetic_eeg import draw_subject_profile, synthesize_psg
from partnd.datasets.store import SleepStore
from partnd.preprocessing import ingest_command
from partnd.preprocessing.dataset_ingest import ingest_dataset
from partnd.preprocessing.ingest import ingest_file

REFERENCE = Path(__file__).parent / "reference"
TRUTH_CODES = {"W": 0, "1": 1, "2": 2, "3": 3, "R": 4}
"""``cohort.json`` stage letters -> store codes (``?`` unscored)."""
BANDS = {"delta": (0.5, 4), "theta": (4, 8), "alpha": (8, 12), "sigma": (12, 16), "beta": (16, 30)}


def _night(derivations: tuple[str, ...], noise: bool = True):
    spec = plan_cohort(1, 0.25, 3, 0.0)[0]
    rng = np.random.default_rng(spec.seed)
    plan = plan_record(spec, rng)
    n_prefix = -(-plan.prefix // 6000)
    profile = draw_subject_profile(rng, spec.age)
    if not noise:
        profile = replace(profile, noise_level=0.0)
    return synthesize_psg(
        np.concatenate([np.zeros(n_prefix, dtype=np.int8), plan.hypnogram]),
        grid_start=plan.prefix - n_prefix * 6000,
        n_samples=plan.n_samples,
        scoring_start=plan.prefix,
        profile=profile,
        rng=rng,
        derivations=derivations,
    )


def test_every_derivation_is_the_difference_of_two_electrode_potentials() -> None:
    extra = (*SLEEP_EDF_DERIVATIONS, *SHHS_DERIVATIONS, *HEADBAND_DERIVATIONS)
    result = _night(extra, noise=False)
    scalp = result.scalp
    assert scalp is not None
    for row, name in enumerate(PC18_DERIVATIONS):  # the recorded PC18 channels, noise off
        first, second = derivation_electrodes(name)
        difference = (
            scalp.potentials[scalp.electrodes.index(first)]
            - scalp.potentials[scalp.electrodes.index(second)]
        )
        assert np.array_equal(result.signals[row], difference), name
    for name in extra:
        assert np.array_equal(result.derivations[name], scalp.derivation(name)), name
    # SHHS's ear references are the mastoids: C4-A1 is PC18's C4-M1
    assert np.array_equal(result.derivations["C4-A1"], result.signals[3])
    assert np.array_equal(result.derivations["C3-A2"], result.signals[2])
    # a bipolar pair keeps its own rhythm: Pz-Oz is neither zero nor a copy of O1-M2
    assert 3.0 < result.derivations["Pz-Oz"].std() < result.signals[4].std() * 1.5
    with pytest.raises(InputError, match="derivation"):
        scalp.derivation("Fpz-Xz")
    with pytest.raises(InputError, match="derivation"):
        _night(("Cz-Cz",))


def test_asking_for_other_derivations_leaves_the_pc18_signals_unchanged() -> None:
    plain = _night(())
    more = _night((*SLEEP_EDF_DERIVATIONS, "C4-A1"))
    assert np.array_equal(plain.signals, more.signals)
    alone = _night(("Fpz-Cz",))  # a derivation does not depend on which others are asked for
    assert np.array_equal(alone.derivations["Fpz-Cz"], more.derivations["Fpz-Cz"])


def test_pc18_derivations_keep_generator_version_5s_stage_band_powers() -> None:
    """Per-stage, per-channel log10 band powers of a fixed-seed record, against the numbers
    version 5 (mixtures of derivation topographies) gave for the same record."""
    expected = json.loads((REFERENCE / "pc18_v5_band_power.json").read_text())
    record = synthesize_record(plan_cohort(2, 0.5, 7, 0.0)[0])
    measured = {}
    for stage in range(5):
        mask = record.stages == stage
        n = int(mask.sum()) // 6000
        for channel in range(7):
            epochs = record.physical[channel][mask][: n * 6000].reshape(n, -1)
            freqs, power = scipy.signal.welch(epochs, 200, nperseg=800, axis=-1)
            power = power.mean(axis=0)
            for band, (low, high) in BANDS.items():
                inside = (freqs >= low) & (freqs < high)
                measured[f"{stage}|{channel}|{band}"] = float(np.log10(power[inside].mean()))
    assert measured.keys() == expected.keys()
    worst = max(abs(measured[key] - expected[key]) for key in expected)
    assert worst < 0.005  # log10 units: within about 1 % of the power


@pytest.fixture(scope="module")
def sleep_edf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sleep_edf")
    return make_profile_cohort("sleep_edf", root, n_records=2, hours=0.5, seed=0)


@pytest.fixture(scope="module")
def nsrr_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nsrr")
    return make_profile_cohort("nsrr", root, n_records=2, hours=0.5, seed=0)


def test_sleep_edf_profile_files_read_with_mne_as_sleep_edf(sleep_edf_root: Path) -> None:
    manifest = json.loads((sleep_edf_root / "cohort.json").read_text())
    assert manifest["parameters"]["profile"] == "sleep_edf"
    labels: dict[str, int] = {}
    for name, truth in manifest["records"].items():
        assert name in ("SC4001E0", "SC4011E0")
        psg = sleep_edf_root / f"{name}-PSG.edf"
        hypnogram = sleep_edf_root / f"{name[:-2]}EC-Hypnogram.edf"
        raw = mne.io.read_raw_edf(psg, verbose="error")
        assert raw.ch_names == ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal"]
        assert raw.info["sfreq"] == 100.0
        assert raw.n_times == truth["n_epochs"] * 3000
        annotations = mne.read_annotations(hypnogram)
        assert set(annotations.description) <= set(RK_LABELS)
        assert np.allclose(annotations.duration % 30.0, 0.0)
        assert np.allclose(
            annotations.onset[1:], annotations.onset[:-1] + annotations.duration[:-1]
        )
        assert annotations.onset[0] == 0.0
        assert annotations.onset[-1] + annotations.duration[-1] == truth["n_epochs"] * 30.0
        epochs = np.concatenate(
            [
                [label] * round(seconds / 30)
                for label, seconds in zip(
                    annotations.description, annotations.duration, strict=True
                )
            ]
        )
        for label in set(epochs):
            labels[label] = labels.get(label, 0) + int(np.sum(epochs == label))
        assert {k: int(np.sum(epochs == k)) for k in set(epochs)} == truth["label_counts"]
        assert 25 <= truth["age"] <= 101
    assert {"Sleep stage 3", "Sleep stage 4", "Movement time", "Sleep stage ?"} <= set(labels)


def test_ingested_sleep_edf_profile_holds_its_stages_with_stage_4_in_n3(
    sleep_edf_root: Path, tmp_path: Path
) -> None:
    manifest = json.loads((sleep_edf_root / "cohort.json").read_text())
    store_path = tmp_path / "s.zarr"
    for name in manifest["records"]:
        ingest_file(
            sleep_edf_root / f"{name}-PSG.edf",
            sleep_edf_root / f"{name[:-2]}EC-Hypnogram.edf",
            store_path,
            record_id=name,
            eeg_channels={"EEG Fpz-Cz": "Fpz-Cz", "EEG Pz-Oz": "Pz-Oz"},
        )
    store = SleepStore(store_path)
    assert store.channels == ["Fpz-Cz", "Pz-Oz"] and store.sfreq == 100.0
    letters = {"W": 0, "1": 1, "2": 2, "3": 3, "R": 4}
    for name, truth in manifest["records"].items():
        expected = np.array([letters.get(char, -1) for char in truth["stages"]])
        stored = store.stages(name)
        starts = (store.start_times(name) / 30.0).round().astype(int)
        assert np.array_equal(stored, expected[starts])
        assert set(np.flatnonzero(expected >= 0)) == set(starts)  # every scored epoch is a window


def test_nsrr_profile_writes_shhs_edf_and_nsrr_xml_per_spec(nsrr_root: Path) -> None:
    manifest = json.loads((nsrr_root / "cohort.json").read_text())
    assert list(manifest["records"]) == ["shhs1-200001", "shhs1-200002"]
    for name, truth in manifest["records"].items():
        with pyedflib.EdfReader(str(nsrr_root / f"{name}.edf")) as edf:
            assert edf.getSignalLabels() == ["EEG", "EEG(sec)", "EOG(L)", "EOG(R)", "EMG"]
            assert list(edf.getSampleFrequencies()) == [125, 125, 50, 50, 125]
            assert edf.getFileDuration() == truth["n_epochs"] * 30
        root = ET.parse(nsrr_root / f"{name}-nsrr.xml").getroot()
        assert root.tag == "PSGAnnotation" and root.findtext("EpochLength") == "30"
        events = root.findall("ScoredEvents/ScoredEvent")
        assert events[0].findtext("EventConcept") == "Recording Start Time"
        assert events[0].findtext("ClockTime").startswith("00.00.00 ")
        stages = [e for e in events if e.findtext("EventType") == "Stages|Stages"]
        expanded: list[str] = []
        for event in stages:
            assert float(event.findtext("Start")) == 30.0 * len(expanded)  # contiguous runs
            expanded += [event.findtext("EventConcept")] * round(
                float(event.findtext("Duration")) / 30.0
            )
        assert set(expanded) <= set(STAGE_CONCEPTS) and len(expanded) == truth["n_epochs"]
        assert {k: expanded.count(k) for k in set(expanded)} == truth["label_counts"]
        arousals = [e for e in events if e.findtext("EventType") == "Arousals|Arousals"]
        assert len(arousals) == truth["arousals"] > 0
        assert all(e.findtext("SignalLocation") for e in arousals)
        assert 40 <= truth["age"] <= 90


def _assert_stages_are_the_truth(store: SleepStore, records: dict[str, dict]) -> None:
    """Every stored window holds the generator's stage of its epoch, and every scored epoch is a
    window."""
    for name, truth in records.items():
        expected = np.array([TRUTH_CODES.get(char, -1) for char in truth["stages"]])
        starts = (store.start_times(name) / 30.0).round().astype(int)
        assert np.array_equal(store.stages(name), expected[starts])
        assert set(np.flatnonzero(expected >= 0)) <= set(starts)


def test_nsrr_profile_ingests_through_dataset_ingest_with_the_truth_stages(
    nsrr_root: Path, tmp_path: Path
) -> None:
    report = ingest_dataset(nsrr_root, tmp_path / "s.zarr", progress=False)
    manifest = json.loads((nsrr_root / "cohort.json").read_text())["records"]
    assert {pair.record_id for pair in report.pairing.pairs} == set(manifest)
    assert all(pair.family == "nsrr" for pair in report.pairing.pairs)
    assert not report.pairing.unpaired and report.outcomes == dict.fromkeys(manifest, "done")
    store = SleepStore(tmp_path / "s.zarr")
    assert store.channels == ["C4-A1", "C3-A2"] and store.sfreq == 100.0
    attrs = store.record_attrs("shhs1-200002")
    assert (attrs["subject_id"], attrs["session_id"]) == ("200002", "shhs1")
    assert attrs["channel_derivations"] == {"C4-A1": "EEG", "C3-A2": "EEG(sec)"}
    _assert_stages_are_the_truth(store, manifest)


@pytest.fixture(scope="module")
def headband_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("headband")
    return make_profile_cohort("headband", root, n_records=3, hours=0.5, seed=0)


def test_headband_profile_writes_one_frontal_channel_in_a_bids_layout(
    headband_root: Path,
) -> None:
    manifest = json.loads((headband_root / "cohort.json").read_text())["records"]
    assert list(manifest) == [
        "sub-01_ses-01_task-sleep",
        "sub-01_ses-02_task-sleep",
        "sub-02_ses-01_task-sleep",
    ]
    assert (
        manifest["sub-01_ses-01_task-sleep"]["age"] == manifest["sub-01_ses-02_task-sleep"]["age"]
    )
    for name, truth in manifest.items():
        subject, session = name.split("_")[:2]
        folder = headband_root / subject / session / "eeg"
        raw = mne.io.read_raw_edf(folder / f"{name}_eeg.edf", verbose="error")
        assert raw.ch_names == ["AF7-Fpz"] and raw.info["sfreq"] == 256.0
        assert raw.n_times == truth["n_epochs"] * 30 * 256
        with (folder / f"{name}_events.tsv").open() as handle:
            rows = [line.rstrip("\n").split("\t") for line in handle]
        assert rows[0] == ["onset", "duration", "trial_type"]
        epochs: list[str] = []
        for onset, duration, trial_type in rows[1:]:
            assert float(onset) >= 30.0 * len(epochs) and float(duration) % 30.0 == 0.0
            epochs += [""] * round(float(onset) / 30.0 - len(epochs))
            epochs += [trial_type] * round(float(duration) / 30.0)
        letters = {"Sleep stage W": "W", "Sleep stage N1": "1", "Sleep stage N2": "2"}
        letters |= {"Sleep stage N3": "3", "Sleep stage R": "R", "": "?"}
        assert "".join(letters[label] for label in epochs) == truth["stages"].rstrip("?")
        assert 20 <= truth["age"] <= 65
    participants = (headband_root / "participants.tsv").read_text().splitlines()
    assert (
        participants[0].split("\t") == ["participant_id", "age", "sex"] and len(participants) == 3
    )
    assert json.loads((headband_root / "dataset_description.json").read_text())["BIDSVersion"]


def test_headband_profile_ingests_with_partnd_ingest_dir_with_the_truth_stages(
    headband_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store_path = tmp_path / "hb.zarr"
    assert ingest_command.main([str(headband_root), "--out", str(store_path)]) == 0
    assert "paired 3: bids 3" in capsys.readouterr().out
    store = SleepStore(store_path)
    assert store.channels == ["AF7-Fpz"] and store.sfreq == 100.0
    manifest = json.loads((headband_root / "cohort.json").read_text())["records"]
    assert set(store.record_ids()) == set(manifest)
    attrs = store.record_attrs("sub-01_ses-02_task-sleep")
    assert (attrs["subject_id"], attrs["session_id"]) == ("sub-01", "ses-02")
    _assert_stages_are_the_truth(store, manifest)


def test_nsrr_population_has_more_arousals_with_age_and_sleep_edf_keeps_its_own() -> None:
    drawn = draw_subject_profile(np.random.default_rng(0), 60)
    younger = _adjust_population(drawn, dataset=NSRR, age=45, seed=1)
    older = _adjust_population(drawn, dataset=NSRR, age=85, seed=1)
    assert older.arousal_rate - younger.arousal_rate == pytest.approx(8.0)
    assert older.hypopnea_rate > younger.hypopnea_rate
    assert _adjust_population(drawn, dataset=SLEEP_EDF, age=85, seed=1) == drawn
    ages = [record.spec.age for record in plan_profile_cohort(SLEEP_EDF, 200, 8.0, 0)]
    assert min(ages) >= 25 and max(ages) >= 95
    names = [record.psg_file for record in plan_profile_cohort(SLEEP_EDF, 101, 8.0, 0)]
    assert names[0] == "SC4001E0-PSG.edf" and names[100] == "SC4002E0-PSG.edf"


def test_label_runs_join_equal_epochs() -> None:
    assert label_runs(["a", "a", "b", "a"], 30.0) == [
        (0.0, 60.0, "a"),
        (60.0, 30.0, "b"),
        (90.0, 30.0, "a"),
    ]


def test_profile_cohort_resumes_and_refuses_other_parameters(tmp_path: Path) -> None:
    root = make_profile_cohort("sleep_edf", tmp_path / "c", n_records=1, hours=0.25, seed=2)
    psg = root / "SC4001E0-PSG.edf"
    before = psg.stat().st_mtime_ns
    make_profile_cohort("sleep_edf", root, n_records=1, hours=0.25, seed=2)
    assert psg.stat().st_mtime_ns == before  # complete nights are kept
    (root / "SC4001EC-Hypnogram.edf").unlink()  # as if killed before the hypnogram
    make_profile_cohort("sleep_edf", root, n_records=1, hours=0.25, seed=2)
    assert (root / "SC4001EC-Hypnogram.edf").is_file()
    with pytest.raises(InputError, match="out_dir"):
        make_profile_cohort("sleep_edf", root, n_records=1, hours=0.25, seed=3)
    with pytest.raises(InputError, match="profile"):
        make_profile_cohort("mass", tmp_path / "m", n_records=1, hours=0.25)


def test_cohort_command_writes_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "nsrr"
    argv = ["--profile", "nsrr", "--out", str(out), "--records", "1", "--hours", "0.25"]
    assert command.main(argv) == 0
    assert (out / "shhs1-200001.edf").is_file() and (out / "shhs1-200001-nsrr.xml").is_file()
    assert f"next: partnd ingest {out} --out STORE.zarr" in capsys.readouterr().out
    assert command.main([*argv[:4], "--records", "0", "--hours", "0.25"]) == 2
    assert "--records" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "channel", "record"),
    [
        ("sleep_edf", "Fpz-Cz", "SC4001E0"),
        ("nsrr", "C4-A1", "shhs1-200001"),
        ("headband", "AF7-Fpz", "sub-01_ses-01_task-sleep"),
    ],
)
def test_profile_realism_stages_the_yasa_channel_of_the_written_files(
    tmp_path: Path, profile: str, channel: str, record: str
) -> None:
    from partnd.cohort.profile_realism import format_profile_realism, profile_realism

    report = profile_realism(profile, tmp_path, n_records=1, hours=0.5, n_planned=5)
    assert report.channel == channel and report.n_records == 1
    assert -1.0 <= report.kappa <= 1.0 and set(report.per_stage_f1) == {"W", "N1", "N2", "N3", "R"}
    truth = json.loads((tmp_path / "cohort" / "cohort.json").read_text())["records"][record]
    assert SleepStore(tmp_path / "store.zarr").record_ids() == [record]
    labelled = sum(truth["stage_counts"].values()) if profile == "headband" else truth["n_epochs"]
    assert sum(report.label_counts.values()) == labelled  # BIDS events list scored epochs only
    assert sum(map(sum, report.confusion)) == sum(truth["stage_counts"].values())
    assert f"YASA pretrained ({channel}, zero labels)" in format_profile_realism(report)


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["sleep_edf", "nsrr"])
def test_parallel_profile_generation_writes_each_profile_format_and_the_same_bytes(
    tmp_path: Path, profile: str
) -> None:
    # Worker processes receive a pickled copy of the profile: a check by identity picked the
    # wrong writer there (every Sleep-EDF hypnogram came out as NSRR XML with n_jobs=2).
    serial = make_profile_cohort(profile, tmp_path / "one", n_records=2, hours=0.25, seed=4)
    parallel = make_profile_cohort(
        profile, tmp_path / "two", n_records=2, hours=0.25, seed=4, n_jobs=2
    )
    suffix = "-Hypnogram.edf" if profile == "sleep_edf" else "-nsrr.xml"
    hypnograms = sorted(parallel.rglob(f"*{suffix}"))
    assert len(hypnograms) == 2
    for path in hypnograms:
        head = path.read_bytes()[:5]
        assert head.startswith(b"<?xml") == (profile == "nsrr"), path
        assert (serial / path.relative_to(parallel)).read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"hours": float("inf")}, "hours"),
        ({"hours": 1e6}, "hours"),
        ({"hours": 1, "seed": -1}, "seed"),
    ],
)
def test_a_profile_night_is_bounded(tmp_path: Path, kwargs: dict, argument: str) -> None:
    """As partnd cohort (issue 43 #14): inf hours overflowed, 1e6 hours had no bound, seed -1
    reached numpy's ValueError."""
    from partnd.cohort.profiles import make_profile_cohort

    with pytest.raises(InputError, match=f"^{argument}: expected"):
        make_profile_cohort("sleep_edf", tmp_path / "c", n_records=1, **kwargs)
    assert not (tmp_path / "c").exists()


def test_profile_realism_refuses_an_existing_json_before_any_night_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from partnd.cohort import profile_realism

    existing = tmp_path / "report.json"
    existing.write_text("{}\n")
    argv = ["--profile", "sleep_edf", "--out", str(tmp_path / "c"), "--json", str(existing)]
    assert profile_realism.main([*argv, "--records", "1", "--hours", "0.25"]) == 2
    assert "--json: expected a new file (pass --overwrite to replace it)" in capsys.readouterr().err
    assert existing.read_text() == "{}\n"
    assert not (tmp_path / "c").exists()
