"""The sleep recipes on a store of Sleep-EDF-like nights with the 2 channels a user names."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.cohort.profiles import make_profile_cohort
from partnd.datasets.store import SleepStore
from partnd.preprocessing.ingest import ingest_file
from partnd.recipes import sample_efficiency, sleep_staging
from partnd.recipes.sleep_study import SleepStudy, StudyConfig
from tests.test_recipe_sleep_staging import TINY_FINETUNE, TINY_NIGHT, TINY_PRETRAIN, TINY_SEQUENCE

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sleep_edf_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight 15-minute Sleep-EDF-like nights ingested with three channels (EEG and EOG)."""
    root = make_profile_cohort(
        "sleep_edf", tmp_path_factory.mktemp("sleep_edf"), n_records=8, hours=0.25, seed=4
    )
    store = tmp_path_factory.mktemp("store") / "sleep_edf.zarr"
    truth = json.loads((root / "cohort.json").read_text())["records"]
    channels = {"EEG Fpz-Cz": "Fpz-Cz", "EEG Pz-Oz": "Pz-Oz", "EOG horizontal": "E1-E2"}
    for name, entry in truth.items():
        ingest_file(
            root / entry["psg_file"],
            root / entry["hypnogram_file"],
            store,
            record_id=name,
            eeg_channels=channels,
        )
    return store


@pytest.mark.slow
def test_staging_and_sample_efficiency_run_on_two_named_channels_of_a_sleep_edf_store(
    sleep_edf_store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "study"
    argv = ["all", "--out", str(out), "--store", str(sleep_edf_store)]
    args = sleep_staging.build_parser().parse_args([*argv, "--channels", "Fpz-Cz,Pz-Oz"])
    assert args.channels == ("Fpz-Cz", "Pz-Oz")
    config = StudyConfig(
        out=out,
        store=sleep_edf_store,
        channels=args.channels,
        progress=False,
        device="cpu",
        pretrain_overrides=TINY_PRETRAIN,
        finetune_overrides={**TINY_FINETUNE, "batch_size": 8},  # 15-minute nights
        sequence_overrides=TINY_SEQUENCE,
        night_overrides=TINY_NIGHT,
        budgets=(1, 2),
        seeds=(0,),
    )
    study = SleepStudy(config)
    assert study.store.channels == ["Fpz-Cz", "Pz-Oz"]  # the named subset, not the EOG
    assert set(study.store.record_ids()) == set(SleepStore(sleep_edf_store).record_ids())
    rows = [("supervised", "window"), ("classical", "sequence"), ("yasa_pretrained", "sequence")]
    sleep_staging.run(study, "all", rows)
    with open(out / "results.csv") as handle:
        table = {row["row"]: row for row in csv.DictReader(handle)}
    assert list(table) == ["supervised", "classical+seq", "yasa_pretrained+seq"]
    for row in table.values():
        assert -1.0 <= float(row["kappa"]) <= 1.0
    assert study.load_cell("supervised", "window", 1, 0).report.cohen_kappa > 0.0
    yasa_row = study.load_cell("yasa_pretrained", "sequence", 1, 0)  # labelled by what it staged
    assert yasa_row.settings["features"].startswith("YASA's own (Fpz-Cz,")

    cells = sample_efficiency.cell_list(study, [("supervised", "window")])
    sample_efficiency.run_cells(study, cells, jobs=1)
    sample_efficiency.aggregate(study, [("supervised", "window")])
    with open(out / "kappa_by_budget.csv") as handle:
        assert [row["budget"] for row in csv.DictReader(handle)] == ["1", "2"]
    # the same study, reopened with other channels, is refused (channels are a setting)
    with pytest.raises(InputError, match="same settings"):
        SleepStudy(StudyConfig(out=out, store=sleep_edf_store, channels=("Fpz-Cz",)))
    other = StudyConfig(out=tmp_path / "other", store=sleep_edf_store, channels=("C4-M1",))
    with pytest.raises(InputError, match="channels: expected channels of the store"):
        _ = SleepStudy(other).store
