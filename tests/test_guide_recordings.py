"""The "your own recordings" guide's commands run as shown on a small dataset of each family."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest

from partnd import cli
from partnd.cohort.profiles import make_profile_cohort
from partnd.datasets.store import SleepStore
from tests.hypnogram_fixtures import (
    expected_codes,
    write_bids_events,
    write_edf_hypnogram,
    write_nsrr_xml,
)
from tests.test_dataset_ingest import START, labels_of, write_edf
from tests.test_docs_commands import command_lines

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "recordings.md"


def _layout(root: Path) -> dict[str, list[str]]:
    """One small night per family, at the paths the guide uses; the labels of each store."""
    a, b = labels_of(1), labels_of(2)
    write_edf(
        root / "sleep-edf-cassette/SC4001E0-PSG.edf", ["EEG Fpz-Cz", "EEG Pz-Oz"], 100, 600, 1
    )
    write_edf_hypnogram(
        root / "sleep-edf-cassette/SC4001EC-Hypnogram.edf", a, start=START.replace(tzinfo=None)
    )
    for name in ("SC4001E0-PSG.edf", "SC4001EC-Hypnogram.edf"):
        (root / name).write_bytes((root / "sleep-edf-cassette" / name).read_bytes())
    shhs = root / "shhs/polysomnography"
    write_edf(shhs / "edfs/shhs1/shhs1-200001.edf", ["EEG(sec)", "EEG", "EMG"], 125, 600, 2)
    write_nsrr_xml(shhs / "annotations-events-nsrr/shhs1/shhs1-200001-nsrr.xml", a)
    mesa = root / "mesa/polysomnography"
    write_edf(mesa / "edfs/mesa-sleep-0001.edf", ["C3", "C4", "M1", "M2"], 256, 600, 3)
    write_nsrr_xml(mesa / "annotations-events-nsrr/mesa-sleep-0001-nsrr.xml", b)
    mass = root / "MASS/SS3"
    write_edf(mass / "01-03-0001 PSG.edf", ["EEG C3-CLE", "EEG C4-CLE"], 256, 600, 4)
    write_edf_hypnogram(
        mass / "01-03-0001 Base.edf", list("W12" * 10), epoch_seconds=20.0,
        start=START.replace(tzinfo=None),
    )  # fmt: skip
    eeg = root / "bids_root/sub-01/ses-02/eeg"
    write_edf(eeg / "sub-01_ses-02_task-sleep_eeg.edf", ["C3-M2", "C4-M1", "E1-M2"], 200, 600, 5)
    write_bids_events(eeg / "sub-01_ses-02_task-sleep_events.tsv", b)
    write_edf(root / "headband/signals/s7_n1.edf", ["EEG AF7"], 250, 600, 6)
    write_bids_events(root / "headband/scores/n1_events.tsv", a)
    make_profile_cohort("headband", root / "headband_like", n_records=2, hours=0.25, seed=0)
    return {
        "sleep_edf.zarr": a,
        "shhs.zarr": a,
        "mesa.zarr": b,
        "bids.zarr": b,
        "headband.zarr": a,
        "one_night.zarr": a,
    }


def test_the_guides_ingest_commands_run_as_shown(tmp_path, monkeypatch):
    expected = _layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    commands = [
        line for line in command_lines(GUIDE.read_text()) if line.startswith("partnd ingest")
    ]
    assert len(commands) >= 7
    for line in commands:
        argv = shlex.split(line)[1:]
        if len(argv) < 2:
            continue  # the command named in prose
        if "--out" in argv and argv[argv.index("--out") + 1] == "check.zarr":
            continue  # needs a predicted hypnogram (tested in test_hypnogram_export)
        assert cli.main([*argv, "--no-progress"] if Path(argv[1]).is_dir() else argv) == 0, line
    sample = SleepStore(tmp_path / "headband_sample.zarr")
    assert len(sample.record_ids()) == 2  # the generated sample: one subject, two sessions
    for store_name, labels in expected.items():
        store = SleepStore(tmp_path / store_name)
        codes = expected_codes(labels)
        for record in store.record_ids():
            np.testing.assert_array_equal(store.stages(record), codes[codes >= 0])
    assert SleepStore(tmp_path / "mesa.zarr").record_attrs("mesa-sleep-0001")[
        "channel_derivations"
    ] == {"C4-M1": "C4 - M1", "C3-M2": "C3 - M2"}
    headband = SleepStore(tmp_path / "headband.zarr").record_attrs("n1")
    assert (headband["subject_id"], headband["source_sfreq"]) == ("s7", 250.0)
    # 20 s epochs W 1 2 | W 1 2 ...: windows take W, N2, W, N2, ... by the majority rule
    mass = SleepStore(tmp_path / "mass_ss3.zarr")
    np.testing.assert_array_equal(mass.stages("01-03-0001"), [0, 2] * 10)
    assert mass.channels == ["C3", "C4"]


@pytest.mark.parametrize("option", ["--channels", "--hypnogram", "--keep-store", "--pattern"])
def test_the_guide_shows_each_new_option(option):
    assert option in GUIDE.read_text()
