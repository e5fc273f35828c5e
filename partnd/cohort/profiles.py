"""Dataset profiles: the generated cohort in the montage, format and population of a real dataset.

Every profile synthesises the same nights (:func:`partnd.cohort.pc18_cohort.synthesize_record`:
hypnograms, sources, electrode potentials) and records the derivations its dataset records, at
its dataset's rate, in its dataset's files, for a population like its dataset's:

- ``pc18``: PhysioNet/CinC 2018 (WFDB, 200 Hz, six EEG derivations):
  :func:`~partnd.cohort.pc18_cohort.make_pc18_cohort`, unchanged.
- ``sleep_edf``: the Sleep-EDF Sleep Cassette study (Kemp et al. 2000, IEEE Trans Biomed Eng
  47:1185; Mourtazaev et al. 1995, Sleep 18:557): ``SC4ssNE0-PSG.edf`` with ``EEG Fpz-Cz``,
  ``EEG Pz-Oz`` and ``EOG horizontal`` at 100 Hz and ``SC4ssNEC-Hypnogram.edf`` scored by
  Rechtschaffen & Kales (1968): N3 split into stage 3 (slow waves above 75 µV in 20-50 % of the
  epoch) and stage 4 (more than half), epochs more than half obscured by movement scored
  ``Movement time``, the unscored tail ``Sleep stage ?``; healthy subjects aged 25 to 101 (the SC
  study's range), whose sleep architecture (Ohayon et al. 2004, Sleep 27:1255) and slow-wave
  amplitude (Carrier et al. 2011) follow their age, so stage 4 fades in the oldest, as Mourtazaev
  et al. found in these subjects.
- ``nsrr``: the Sleep Heart Health Study as the NSRR distributes it (Quan et al. 1997, Sleep
  20:1077; Zhang et al. 2018, JAMIA 25:1351): ``shhs1-NNNNNN.edf`` with ``EEG`` (C4-A1) and
  ``EEG(sec)`` (C3-A2) at 125 Hz, ``EOG(L)``/``EOG(R)`` at 50 Hz and ``EMG`` at 125 Hz, and
  ``shhs1-NNNNNN-nsrr.xml`` (:mod:`partnd.cohort.nsrr_format`; R&K stages 3 and 4, arousals and
  hypopneas as scored events); community-dwelling adults aged 40 and over (SHHS1: mean 63, SD 11;
  Quan et al. 1997) with more arousals with age (the arousal index rises by about 2 per hour per
  decade: Bonnet & Arand 2007, J Clin Sleep Med 3:133; SHHS1 mean about 19 per hour: Redline et
  al. 2004, Arch Intern Med 164:406) and more hypopneas (sleep-disordered breathing is common in
  SHHS and rises with age: Young et al. 2002, Arch Intern Med 162:893).
- ``headband``: home sleep EEG from a frontal headband, in a BIDS dataset (DESIGN.md §5c: one or
  two frontal channels at 125-500 Hz): one channel ``AF7-Fpz`` (the Muse headband's forehead
  electrode AF7 against its reference at Fpz, sampled at 256 Hz: Krigolson et al. 2017, Front
  Neurosci 11:109) in ``sub-SS/ses-NN/eeg/sub-SS_ses-NN_task-sleep_eeg.edf``, scored in 30-s AASM
  stages (Berry et al., AASM Manual v2.6, 2020: no stage 4, no movement time) as BIDS
  ``*_events.tsv`` rows ``onset``, ``duration``, ``trial_type`` (EEG-BIDS: Pernet et al. 2019,
  Sci Data 6:103), two nights (BIDS sessions) per subject, so subject-wise splits keep a
  subject's nights together; adults aged 20 to 65 (a choice: frontal headbands are validated
  against PSG in adults, e.g. the Dreem headband by Arnal et al. 2020, Sleep 43:zsaa097). The
  root holds BIDS's ``dataset_description.json`` and ``participants.tsv``.

Sleep-EDF, SHHS and the headband score the whole recording in 30-s epochs from its first sample,
so their records start on an epoch border (the PC18 profile's sub-epoch unscored prefix is cut)
and the wake before lights-off is scored wake. No recording faults are injected in these profiles.
Each profile's files ingest with ``partnd ingest DIR`` (:data:`DatasetProfile.layout` names the
pairing rule of :mod:`partnd.preprocessing.dataset_ingest` they follow).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import scipy.signal
from joblib import Parallel, delayed

from partnd._validation import InputError, check
from partnd.cohort.hypnogram import EPOCH_SECONDS, STAGE_LABELS, STAGE_LETTERS, SleepStage
from partnd.cohort.nsrr_format import (
    AROUSAL_CONCEPT,
    HYPOPNEA_CONCEPT,
    STAGE_CONCEPTS,
    ScoredEvent,
    write_nsrr_xml,
)
from partnd.cohort.pc18_cohort import (
    COHORT_FILE,
    GENERATOR_VERSION,
    MAX_HOURS,
    MIN_HOURS,
    RecordSpec,
    synthesize_record,
)
from partnd.cohort.pc18_format import CHANNEL_NAMES, FS
from partnd.cohort.sleep_edf_format import (
    RK_LABELS,
    EdfSignal,
    label_runs,
    write_edf_signals,
    write_rk_hypnogram,
)
from partnd.cohort.synthetic_eeg import SubjectProfile
from partnd.datasets.stages import STAGE_NAMES, stage_description

__all__ = [
    "HEADBAND",
    "NSRR",
    "PROFILES",
    "SLEEP_EDF",
    "DatasetProfile",
    "ProfileChannel",
    "ProfileNight",
    "ProfileRecord",
    "make_profile_cohort",
    "plan_profile_cohort",
    "synthesize_profile_night",
]

_EPOCH_SAMPLES = EPOCH_SECONDS * FS
_STAGE4_DELTA_UV = 45.0
"""Epoch-mean slow-wave envelope (µV RMS) above which an N3 epoch is R&K stage 4: 1.5 times the
smallest N3 amplitude, whose median epoch holds 75-µV waves for about a fifth of its length (the
stage 3 floor); at 45 µV they fill more than half of it (stage 4)."""
_MOVEMENT_SECONDS = EPOCH_SECONDS / 2
"""Movement time: an epoch more than half obscured by movement (Rechtschaffen & Kales 1968)."""
_BIDS_SESSIONS = 2
"""Nights (BIDS sessions) per subject of the headband profile."""
_AASM_LABELS: tuple[str, ...] = tuple(stage_description(name) for name in STAGE_NAMES)
"""``trial_type`` of the headband's AASM stages W N1 N2 N3 R (``"Sleep stage W"``...)."""


@dataclass(frozen=True)
class ProfileChannel:
    """One signal a profile's files hold.

    Attributes:
        label: Label in the file (``"EEG Fpz-Cz"``, ``"EEG(sec)"``).
        derivation: What it records: a derivation of :data:`partnd.cohort.electrodes.ELECTRODES`
            or a PC18 signal (``"Chin1-Chin2"``).
        sfreq: Samples per second in the file.
        store_name: Channel name when ingested (:data:`DatasetProfile.store_channels`), or None
            for channels not ingested (EOG, EMG).
    """

    label: str
    derivation: str
    sfreq: int
    store_name: str | None = None


@dataclass(frozen=True)
class DatasetProfile:
    """A dataset's montage, files and population.

    Attributes:
        name: ``"sleep_edf"``, ``"nsrr"`` or ``"headband"``.
        layout: The dataset family its files follow, a pairing rule of ``partnd ingest DIR``
            (``"sleep-edf"``: R&K EDF+ hypnograms; ``"nsrr"``: NSRR XML; ``"bids"``: AASM
            stages in BIDS ``events.tsv``).
        channels: The signals of each recording file.
        yasa_channel: Store name of the channel YASA's stager reads (a central EEG against a
            mastoid where there is one, else the frontal channel).
        age_range: Youngest and oldest age.
        age_mean_sd: Mean and SD of a normal age distribution, or None for uniform ages.
        female_share: Share of women.
        arousals_per_decade: Extra arousals per hour of sleep per decade above the youngest age.
        hypopnea_median: Median hypopneas per hour of sleep (lognormal), or None to keep the
            generator's.
    """

    name: str
    layout: str
    channels: tuple[ProfileChannel, ...]
    yasa_channel: str
    age_range: tuple[int, int]
    age_mean_sd: tuple[float, float] | None
    female_share: float
    arousals_per_decade: float = 0.0
    hypopnea_median: float | None = None

    @property
    def store_channels(self) -> dict[str, str]:
        """File label -> store channel name of the channels ingest keeps."""
        return {ch.label: ch.store_name for ch in self.channels if ch.store_name is not None}


SLEEP_EDF = DatasetProfile(
    name="sleep_edf",
    layout="sleep-edf",
    channels=(
        ProfileChannel("EEG Fpz-Cz", "Fpz-Cz", 100, "Fpz-Cz"),
        ProfileChannel("EEG Pz-Oz", "Pz-Oz", 100, "Pz-Oz"),
        ProfileChannel("EOG horizontal", "E1-E2", 100),
    ),
    yasa_channel="Fpz-Cz",
    age_range=(25, 101),
    age_mean_sd=None,
    female_share=0.5,
)
NSRR = DatasetProfile(
    name="nsrr",
    layout="nsrr",
    channels=(
        ProfileChannel("EEG", "C4-A1", 125, "C4-A1"),
        ProfileChannel("EEG(sec)", "C3-A2", 125, "C3-A2"),
        ProfileChannel("EOG(L)", "E1-A2", 50),
        ProfileChannel("EOG(R)", "E2-A1", 50),
        ProfileChannel("EMG", "Chin1-Chin2", 125),
    ),
    yasa_channel="C4-A1",
    age_range=(40, 90),
    age_mean_sd=(63.0, 11.0),
    female_share=0.52,
    arousals_per_decade=2.0,
    hypopnea_median=8.0,
)
HEADBAND = DatasetProfile(
    name="headband",
    layout="bids",
    channels=(ProfileChannel("AF7-Fpz", "AF7-Fpz", 256, "AF7-Fpz"),),
    yasa_channel="AF7-Fpz",
    age_range=(20, 65),
    age_mean_sd=None,
    female_share=0.5,
)
PROFILES: dict[str, DatasetProfile] = {
    profile.name: profile for profile in (SLEEP_EDF, NSRR, HEADBAND)
}
"""The file-writing profiles by name (``pc18`` is :func:`make_pc18_cohort`)."""


@dataclass(frozen=True)
class ProfileRecord:
    """One planned night of a profile.

    Attributes:
        name: Record name (``SC4011E0``, ``shhs1-200001``).
        psg_file: Signal file name.
        hypnogram_file: Hypnogram file name.
        spec: The night's generator spec (subject, age, sex, hours, seed; no faults).
        start: Wall-clock start of the recording.
    """

    name: str
    psg_file: str
    hypnogram_file: str
    spec: RecordSpec
    start: datetime


def plan_profile_cohort(
    profile: DatasetProfile, n_records: int, hours: float, seed: int
) -> list[ProfileRecord]:
    """Draw a profile's nights: names, ages, sexes, start times and per-night seeds.

    Sleep-EDF names one night per subject ``SC4ssNE0`` (``ss`` the subject, ``N`` the night,
    1 for the first 100 records); SHHS numbers its nights ``shhs1-200001`` on; the headband's
    BIDS records are ``sub-SS_ses-NN_task-sleep``, two sessions per subject (both nights of a
    subject share its age and sex).

    Raises:
        InputError: ``n_records`` below 1 or above what the naming holds (200 for Sleep-EDF),
            ``hours`` outside [:data:`MIN_HOURS`, :data:`MAX_HOURS`], a negative ``seed``.
    """
    limit = 200 if profile.layout == "sleep-edf" else 99999
    check(
        isinstance(n_records, int) and 1 <= n_records <= limit,
        "n_records",
        f"an int in [1, {limit}]",
        n_records,
    )
    check(
        MIN_HOURS <= hours <= MAX_HOURS,
        "hours",
        f"a record length in [{MIN_HOURS}, {MAX_HOURS}] hours",
        hours,
    )
    check(isinstance(seed, int | np.integer) and seed >= 0, "seed", "an int >= 0", seed)
    rng = np.random.default_rng([seed, len(profile.name)])
    low, high = profile.age_range
    if profile.age_mean_sd is None:
        ages = rng.uniform(low, high + 1, n_records)
    else:
        ages = rng.normal(*profile.age_mean_sd, n_records)
    ages = np.clip(np.floor(ages), low, high).astype(int)
    sexes = rng.choice(["F", "M"], n_records, p=[profile.female_share, 1 - profile.female_share])
    start_minutes = rng.uniform(-60.0, 90.0, n_records)
    seeds = np.random.SeedSequence([seed, 45]).generate_state(n_records, dtype=np.uint64)
    records = []
    for index in range(n_records):
        subject_id = None
        if profile.layout == "bids":
            subject = index // _BIDS_SESSIONS
            subject_id = f"sub-{1 + subject:02d}"
            name = f"{subject_id}_ses-{1 + index % _BIDS_SESSIONS:02d}_task-sleep"
            folder = f"{subject_id}/ses-{1 + index % _BIDS_SESSIONS:02d}/eeg"
            psg, hypnogram = f"{folder}/{name}_eeg.edf", f"{folder}/{name}_events.tsv"
            day = datetime(2020, 1, 6) + timedelta(days=index % _BIDS_SESSIONS)
            ages[index], sexes[index] = (
                ages[subject * _BIDS_SESSIONS],
                sexes[subject * _BIDS_SESSIONS],
            )
        elif profile.layout == "sleep-edf":
            stem = f"SC4{index % 100:02d}{1 + index // 100}"
            name, psg, hypnogram = f"{stem}E0", f"{stem}E0-PSG.edf", f"{stem}EC-Hypnogram.edf"
            day = datetime(1989, 4, 24)
        else:
            name = f"shhs1-{200001 + index}"
            psg, hypnogram = f"{name}.edf", f"{name}-nsrr.xml"
            day = datetime(1985, 1, 1)
        spec = RecordSpec(
            name=name,
            split="training",
            subject_id=subject_id or name,
            age=int(ages[index]),
            sex=str(sexes[index]),
            hours=float(hours),
            seed=int(seeds[index]),
            line_noise=False,
            flat_channel=False,
            clipped_channel=False,
        )
        start = day + timedelta(hours=22, minutes=round(float(start_minutes[index])))
        records.append(ProfileRecord(name, psg, hypnogram, spec, start))
    return records


def _adjust_population(
    profile_drawn: SubjectProfile, *, dataset: DatasetProfile, age: int, seed: int
) -> SubjectProfile:
    """A dataset's population differences on the drawn physiology (arousals, hypopneas)."""
    if dataset.arousals_per_decade == 0.0 and dataset.hypopnea_median is None:
        return profile_drawn
    rng = np.random.default_rng([seed, 7])
    decades = max(age - dataset.age_range[0], 0) / 10.0
    hypopneas = profile_drawn.hypopnea_rate
    if dataset.hypopnea_median is not None:
        drawn = rng.lognormal(np.log(dataset.hypopnea_median), 0.7) * (1.0 + 0.2 * decades)
        hypopneas = float(np.clip(drawn, 1.0, 40.0))
    return replace(
        profile_drawn,
        arousal_rate=profile_drawn.arousal_rate + dataset.arousals_per_decade * decades,
        hypopnea_rate=hypopneas,
    )


@dataclass
class ProfileNight:
    """One night of a profile in memory, as its files will hold it.

    Attributes:
        record: The planned record.
        signals: The file's signals, in :attr:`DatasetProfile.channels` order.
        epoch_labels: The hypnogram file's label of every 30-s epoch from the first sample
            (:data:`RK_LABELS`, :data:`STAGE_CONCEPTS`, or AASM ``"Sleep stage N2"``... with
            ``""`` for an unscored epoch).
        stages: ``int8 [n_epochs]`` store stage codes of the same epochs (R&K 3 and 4 merged into
            N3, movement time and unscored -1).
        events: Scored arousals and hypopneas (NSRR profile; empty for Sleep-EDF).
        truth: Ground truth for ``cohort.json``.
    """

    record: ProfileRecord
    signals: list[EdfSignal]
    epoch_labels: list[str]
    stages: np.ndarray
    events: list[ScoredEvent]
    truth: dict[str, Any]


def _resample(signal: np.ndarray, sfreq: int) -> np.ndarray:
    factor = np.gcd(sfreq, FS)
    return scipy.signal.resample_poly(signal, sfreq // factor, FS // factor).astype(np.float32)


def synthesize_profile_night(profile: DatasetProfile, record: ProfileRecord) -> ProfileNight:
    """Synthesise one night of ``profile`` in memory (deterministic in ``record``)."""
    derivations = [ch.derivation for ch in profile.channels if ch.derivation not in CHANNEL_NAMES]
    adjust = functools.partial(
        _adjust_population, dataset=profile, age=record.spec.age, seed=record.spec.seed
    )
    night = synthesize_record(record.spec, derivations, adjust)
    plan, synthesis = night.plan, night.synthesis
    crop = plan.prefix % _EPOCH_SAMPLES
    n_wake = plan.prefix // _EPOCH_SAMPLES
    n_epochs = (plan.n_samples - crop) // _EPOCH_SAMPLES
    stop = crop + n_epochs * _EPOCH_SAMPLES
    stages = np.full(n_epochs, -1, dtype=np.int8)
    stages[:n_wake] = SleepStage.WAKE
    n_scored = min(plan.n_scored, n_epochs - n_wake)
    stages[n_wake : n_wake + n_scored] = plan.scored[:n_scored]

    delta = synthesis.envelopes["delta"]
    epoch_seconds = (crop // FS + np.arange(n_epochs)[:, None] * EPOCH_SECONDS) + np.arange(
        EPOCH_SECONDS
    )
    epoch_delta = delta[np.minimum(epoch_seconds, len(delta) - 1)].mean(axis=1)
    moving = np.zeros(plan.n_samples, dtype=bool)
    for start, end in synthesis.movements:
        moving[start:end] = True
    movement_seconds = moving[crop:stop].reshape(n_epochs, -1).sum(axis=1) / FS
    if profile.layout == "bids":  # AASM: no stage 4, no movement time; unscored epochs unlisted
        names = _AASM_LABELS
        labels = [names[code] if code >= 0 else "" for code in stages]
    else:
        stage4 = (stages == SleepStage.N3) & (epoch_delta >= _STAGE4_DELTA_UV)
        movement = (stages >= 0) & (movement_seconds > _MOVEMENT_SECONDS)
        # Index into RK_LABELS / STAGE_CONCEPTS: W 1 2 3 4 R MT ?.
        rk = np.array([0, 1, 2, 3, 5])[np.maximum(stages, 0)]
        rk[stage4] = 4
        rk[movement] = 6
        rk[stages < 0] = 7
        stages[movement] = -1
        names = RK_LABELS if profile.layout == "sleep-edf" else STAGE_CONCEPTS
        labels = [names[index] for index in rk]

    signals = []
    for channel in profile.channels:
        if channel.derivation in CHANNEL_NAMES:
            source = night.physical[CHANNEL_NAMES.index(channel.derivation)]
        else:
            source = synthesis.derivations[channel.derivation]
        signals.append(
            EdfSignal(channel.label, _resample(source[crop:stop], channel.sfreq), channel.sfreq)
        )
    events = []
    if profile.layout == "nsrr":
        for event in night.events:
            kind = HYPOPNEA_CONCEPT if event.label.startswith("resp_") else AROUSAL_CONCEPT
            start_s = (event.start - crop) / FS
            if start_s >= 0.0 and event.stop <= stop:
                events.append(
                    ScoredEvent(*kind[:2], start_s, (event.stop - event.start) / FS, kind[2])
                )
    scored = stages[stages >= 0]
    truth = {
        "record": record.name,
        "psg_file": record.psg_file,
        "hypnogram_file": record.hypnogram_file,
        "subject_id": record.spec.subject_id,
        "age": record.spec.age,
        "sex": record.spec.sex,
        "start": record.start.isoformat(),
        "n_epochs": n_epochs,
        "stages": "".join("?" if code < 0 else STAGE_LETTERS[code] for code in stages),
        "stage_counts": {
            label: int(np.sum(scored == code)) for code, label in enumerate(STAGE_LABELS)
        },
        "session_id": record.name.split("_")[1] if profile.layout == "bids" else None,
        "label_counts": {name: labels.count(name) for name in names if name in labels},
        "arousals": sum(event.event_type == AROUSAL_CONCEPT[0] for event in events),
        "hypopneas": sum(event.event_type == HYPOPNEA_CONCEPT[0] for event in events),
        "subject_profile": night.truth["subject_profile"],
    }
    return ProfileNight(record, signals, labels, stages, events, truth)


_TRUTH_DIR = ".truth"


def _write_tsv(path: Path, rows: list[list[str]]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, delimiter="\t", lineterminator="\n").writerows(rows)
    os.replace(partial, path)


def _write_bids_events(path: Path, labels: list[str]) -> None:
    """BIDS ``*_events.tsv``: one row (``onset``, ``duration``, ``trial_type``) per run of scored
    epochs; unscored epochs have no row."""
    rows = [["onset", "duration", "trial_type"]]
    rows += [
        [f"{onset:.1f}", f"{duration:.1f}", label]
        for onset, duration, label in label_runs(labels, EPOCH_SECONDS)
        if label
    ]
    _write_tsv(path, rows)


def _write_bids_root(root: Path, records: list[ProfileRecord]) -> None:
    """BIDS's ``dataset_description.json`` and ``participants.tsv`` (one row per subject)."""
    description = {"Name": "partnd headband sample cohort (generated)", "BIDSVersion": "1.8.0"}
    partial = root / ".dataset_description.json.partial"
    partial.write_text(json.dumps(description, indent=1) + "\n")
    os.replace(partial, root / "dataset_description.json")
    subjects = {record.spec.subject_id: record.spec for record in records}
    rows = [["participant_id", "age", "sex"]]
    rows += [[subject, str(spec.age), spec.sex] for subject, spec in subjects.items()]
    _write_tsv(root / "participants.tsv", rows)


def _write_night(profile: DatasetProfile, record: ProfileRecord, root: Path) -> None:
    """Write one night: signals, then its ground truth, then the hypnogram (marks completion)."""
    night = synthesize_profile_night(profile, record)
    hypnogram_path = root / record.hypnogram_file
    hypnogram_path.unlink(missing_ok=True)
    hypnogram_path.parent.mkdir(parents=True, exist_ok=True)
    write_edf_signals(
        root / record.psg_file, night.signals, record.start, edf_plus=profile.layout == "sleep-edf"
    )
    truth_path = root / _TRUTH_DIR / f"{record.name}.json"
    truth_path.parent.mkdir(exist_ok=True)
    partial = truth_path.with_name(f".{truth_path.name}.partial")
    partial.write_text(json.dumps(night.truth) + "\n")
    os.replace(partial, truth_path)
    if profile.layout == "sleep-edf":
        write_rk_hypnogram(hypnogram_path, night.epoch_labels, record.start)
    elif profile.layout == "bids":
        _write_bids_events(hypnogram_path, night.epoch_labels)
    else:
        write_nsrr_xml(hypnogram_path, night.epoch_labels, night.events, record.start.time())


def make_profile_cohort(
    profile: str | DatasetProfile,
    out_dir: str | Path,
    *,
    n_records: int,
    hours: float,
    seed: int = 0,
    n_jobs: int = 1,
    overwrite: bool = False,
) -> Path:
    """Write (or resume) a profile's cohort: its signal and hypnogram files plus ``cohort.json``.

    A night whose hypnogram file exists is complete (the signal file is written first, each file
    atomically) and is kept on a rerun with the same parameters.

    Args:
        profile: ``"sleep_edf"``, ``"nsrr"``, ``"headband"`` or a :class:`DatasetProfile`.
        out_dir: Directory for the files; created if missing.
        n_records: Nights.
        hours: Length of each night before cutting to whole epochs.
        seed: Cohort seed.
        n_jobs: Worker processes (joblib).
        overwrite: Replace a cohort written with other parameters.

    Returns:
        ``out_dir``.

    Raises:
        InputError: An unknown profile, bad counts, or ``out_dir`` holding another cohort (without
            ``overwrite``) or other files.
    """
    if isinstance(profile, str):
        check(profile in PROFILES, "profile", f"one of {sorted(PROFILES)} (or pc18)", profile)
        profile = PROFILES[profile]
    check(isinstance(n_jobs, int) and n_jobs != 0, "n_jobs", "a non-zero int", n_jobs)
    records = plan_profile_cohort(profile, n_records, float(hours), int(seed))
    root = Path(out_dir).expanduser()
    check(not root.exists() or root.is_dir(), "out_dir", "a directory", f"the file {root}")
    root.mkdir(parents=True, exist_ok=True)
    parameters = {
        "profile": profile.name,
        "generator_version": GENERATOR_VERSION,
        "n_records": n_records,
        "hours": float(hours),
        "seed": int(seed),
    }
    manifest_path = root / COHORT_FILE
    ours = {
        Path(name).parts[0]
        for record in records
        for name in (record.psg_file, record.hypnogram_file)
    }
    if profile.layout == "bids":
        ours |= {"dataset_description.json", "participants.tsv"}
    if manifest_path.is_file():
        previous = json.loads(manifest_path.read_text()).get("parameters")
        if previous != parameters:
            if not overwrite:
                raise InputError(
                    f"out_dir: expected an empty directory or a cohort with the same parameters "
                    f"(or overwrite=True), got {root} holding a cohort of {previous}"
                )
            shutil.rmtree(root)
            root.mkdir(parents=True)
    else:
        foreign = sorted(
            path.name for path in root.iterdir() if path.name not in ours | {_TRUTH_DIR}
        )
        foreign = [name for name in foreign if not name.endswith(".partial")]
        check(not foreign, "out_dir", "an empty directory or a generated cohort", foreign[:5])
    truth_dir = root / _TRUTH_DIR
    pending = [
        record
        for record in records
        if not (root / record.hypnogram_file).is_file()
        or not (truth_dir / f"{record.name}.json").is_file()
    ]
    if pending or not manifest_path.is_file():
        Parallel(n_jobs=n_jobs)(delayed(_write_night)(profile, record, root) for record in pending)
        if profile.layout == "bids":
            _write_bids_root(root, records)
        manifest = {
            "format": f"partnd {profile.name} sample cohort",
            "parameters": parameters,
            "records": {
                record.name: json.loads((truth_dir / f"{record.name}.json").read_text())
                for record in records
            },
        }
        partial = manifest_path.with_name(f".{COHORT_FILE}.partial")
        partial.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(partial, manifest_path)
    return root
