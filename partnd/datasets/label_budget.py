"""How many labels a sample-efficiency cell gets, and which: whole nights, or windows per stage.

A :class:`LabelBudget` is a number of labelled *subjects* (every labelled window of their
nights), of labelled *nights* (every labelled window of that many records, for datasets whose
subjects have several nights) or of labelled *windows per stage* drawn from the fine-tuning
subjects' windows (Banville et al. 2021 count labels per class). Written ``"2"``, ``"1n"`` and
``"w20"`` on command lines and in result files.

:func:`draw_labels` makes one *draw* of a budget for one seed, from a fixed
:class:`~partnd.datasets.splits.SubjectSplit` (the test subjects never change):

* **subjects**: the first ``n`` subjects of the seed's permutation of the fine-tuning pool
  (:meth:`SubjectSplit.finetune_order`: nested, ``1 ⊂ 2 ⊂ 4 ⊂ 8`` within a seed); the validation
  subjects are drawn (seeded) from the rest of the pool;
* **nights**: the validation subjects are drawn (seeded) from the whole pool first; the labelled
  nights are then taken from the other pool subjects in the seed's subject order, one night of
  each subject before a second night of any (nested within a seed); every other night of those
  subjects is left out;
* **windows per stage**: the validation subjects are drawn (seeded) from the whole pool first;
  the labelled windows are then drawn from the other pool subjects' labelled windows by
  :func:`sample_windows_per_stage`. Every other window of those nights stays available as
  unlabelled context (label ``-1``).

Labelled and validation subjects are therefore never shared, and neither is ever a test subject.
:func:`draw_named_labels` is the draw of labelled subjects given by name: their validation
subjects are drawn as a subject budget's are.

:func:`sample_windows_per_stage` draws ``k`` windows of every stage uniformly without replacement
from the labelled windows of the given records. A stage with fewer than ``k`` windows there gives
all of its windows (and a warning naming the stage and the count); the drawn and available counts
per stage are kept in the result. Randomness comes from :func:`numpy.random.default_rng` seeded
with ``[seed, stream]`` over sorted record ids, so a draw depends only on the records, their
labels and the seed.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import check
from partnd.datasets.splits import SubjectSplit
from partnd.datasets.store import SleepStore

__all__ = [
    "LabelBudget",
    "LabelDraw",
    "StageSample",
    "draw_labels",
    "draw_named_labels",
    "sample_windows_per_stage",
]

_WINDOW_STREAM = 2  # splits.py draws the test subjects with stream 0, the chains with 1
_WINDOW_BUDGET = re.compile(r"w([0-9]+)")
_NIGHT_BUDGET = re.compile(r"([0-9]+)n")


@dataclass(frozen=True)
class LabelBudget:
    """A labelled budget: the nights of ``subjects`` subjects, ``nights`` nights, or
    ``windows_per_stage`` windows of every stage. Exactly one is set.

    Attributes:
        subjects: Number of labelled subjects (all their labelled windows).
        windows_per_stage: Number of labelled windows drawn per stage.
        nights: Number of labelled nights (records; all their labelled windows).
    """

    subjects: int | None = None
    windows_per_stage: int | None = None
    nights: int | None = None

    def __post_init__(self) -> None:
        values = [v for v in (self.subjects, self.windows_per_stage, self.nights) if v is not None]
        check(
            len(values) == 1
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values),
            "budget",
            "exactly one of subjects, windows_per_stage and nights, a positive int",
            f"subjects={self.subjects!r}, windows_per_stage={self.windows_per_stage!r}, "
            f"nights={self.nights!r}",
        )

    @classmethod
    def parse(cls, value: int | str | LabelBudget, argument: str = "budget") -> LabelBudget:
        """A budget from its written form: ``2`` or ``"2"`` (subjects), ``"1n"`` (nights),
        ``"w20"`` (windows per stage).

        Raises:
            InputError: Anything else, naming ``argument``.
        """
        if isinstance(value, LabelBudget):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(subjects=value)
        text = str(value).strip()
        windows = _WINDOW_BUDGET.fullmatch(text)
        nights = _NIGHT_BUDGET.fullmatch(text)
        counted = windows or nights
        check(
            (text.isdigit() and int(text) >= 1)
            or (counted is not None and int(counted.group(1)) >= 1),
            argument,
            "a number of labelled subjects (e.g. 2), of labelled nights (e.g. 1n) or of labelled "
            "windows per stage (e.g. w20)",
            repr(value),
        )
        if windows is not None:
            return cls(windows_per_stage=int(windows.group(1)))
        if nights is not None:
            return cls(nights=int(nights.group(1)))
        return cls(subjects=int(text))

    def __str__(self) -> str:
        if self.windows_per_stage is not None:
            return f"w{self.windows_per_stage}"
        if self.nights is not None:
            return f"{self.nights}n"
        return str(self.subjects)

    def to_json(self) -> int | str:
        """The written form in JSON: an int for subjects, ``"1n"`` for nights, ``"w20"`` for
        windows per stage."""
        return self.subjects if self.subjects is not None else str(self)

    @property
    def sort_key(self) -> tuple[int, int]:
        """Scarcest first: every window budget (by size), then every night budget, then every
        subject budget."""
        if self.windows_per_stage is not None:
            return (0, self.windows_per_stage)
        if self.nights is not None:
            return (1, self.nights)
        assert self.subjects is not None
        return (2, self.subjects)


@dataclass(frozen=True)
class StageSample:
    """Windows drawn per stage from some records (see :func:`sample_windows_per_stage`).

    Attributes:
        per_stage: Windows asked for per stage.
        seed: Seed of the draw.
        stage_names: Stage names by code.
        windows: ``{record: [n] int64 sorted window indices}`` of the drawn windows, records
            holding none left out.
        counts: Drawn windows per stage code (``per_stage`` unless the stage had fewer).
        available: Labelled windows per stage code in the records drawn from.
    """

    per_stage: int
    seed: int
    stage_names: tuple[str, ...]
    windows: Mapping[str, np.ndarray]
    counts: tuple[int, ...]
    available: tuple[int, ...]

    @property
    def records(self) -> tuple[str, ...]:
        """Records holding at least one drawn window, sorted."""
        return tuple(sorted(self.windows))

    @property
    def total(self) -> int:
        """Number of drawn windows."""
        return int(sum(self.counts))

    @property
    def short_stages(self) -> tuple[str, ...]:
        """Stages that had fewer labelled windows than asked (all of theirs were drawn)."""
        return tuple(
            name
            for name, count in zip(self.stage_names, self.counts, strict=True)
            if count < self.per_stage
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the drawn windows per record, the counts per stage name)."""
        return {
            "per_stage": self.per_stage,
            "seed": self.seed,
            "counts": dict(zip(self.stage_names, self.counts, strict=True)),
            "available": dict(zip(self.stage_names, self.available, strict=True)),
            "windows": {record: self.windows[record].tolist() for record in self.records},
        }


def _open(store: str | Path | SleepStore) -> SleepStore:
    return store if isinstance(store, SleepStore) else SleepStore(store)


def sample_windows_per_stage(
    store: str | Path | SleepStore,
    records: Sequence[str],
    per_stage: int,
    *,
    seed: int,
) -> StageSample:
    """Draw ``per_stage`` labelled windows of every stage from ``records`` (without replacement).

    Args:
        store: The sleep store (its stage labels are read; no signal is).
        records: Records to draw from (distinct; their order does not matter).
        per_stage: Windows per stage, at least 1.
        seed: Seed of the draw: the same records, labels and seed give the same windows.

    Returns:
        The :class:`StageSample`. A stage with fewer than ``per_stage`` labelled windows in
        ``records`` contributes all of them (warned about; ``counts`` < ``per_stage``).

    Raises:
        InputError: Unknown or repeated records, a bad ``per_stage``, or no labelled window.
    """
    opened = _open(store)
    check(
        isinstance(per_stage, int) and not isinstance(per_stage, bool) and per_stage >= 1,
        "per_stage",
        "an int >= 1 (labelled windows per stage)",
        repr(per_stage),
    )
    check(not isinstance(records, str), "records", "a sequence of record ids", records)
    ordered = sorted(records)
    check(len(set(ordered)) == len(ordered), "records", "distinct record ids", list(records))
    known = set(opened.record_ids())
    unknown = [r for r in ordered if r not in known]
    check(not unknown, "records", "record ids present in the store", unknown)
    stage_names = tuple(opened.stage_names)
    stages = [opened.stages(r).astype(np.int64) for r in ordered]
    record_of = np.concatenate([np.full(len(s), p) for p, s in enumerate(stages)]).astype(np.int64)
    window_of = np.concatenate([np.arange(len(s)) for s in stages]).astype(np.int64)
    labels = np.concatenate(stages)
    check(
        bool((labels >= 0).any()),
        "records",
        "records holding at least one labelled window",
        f"{len(ordered)} record(s) without one",
    )
    rng = np.random.default_rng([int(seed), _WINDOW_STREAM])
    chosen, counts, available = [], [], []
    for code in range(len(stage_names)):
        candidates = np.flatnonzero(labels == code)
        take = min(per_stage, len(candidates))
        chosen.append(candidates[rng.choice(len(candidates), size=take, replace=False)])
        counts.append(take)
        available.append(len(candidates))
    short = [
        f"{name} ({count})"
        for name, count in zip(stage_names, counts, strict=True)
        if count < per_stage
    ]
    if short:
        warnings.warn(
            f"fewer than {per_stage} labelled windows of stage(s) {', '.join(short)} in the "
            f"{len(ordered)} record(s) drawn from: all of them are used",
            UserWarning,
            stacklevel=2,
        )
    picked = np.sort(np.concatenate(chosen))
    windows = {
        ordered[position]: np.sort(window_of[picked[record_of[picked] == position]])
        for position in np.unique(record_of[picked]).tolist()
    }
    return StageSample(
        per_stage=per_stage,
        seed=int(seed),
        stage_names=stage_names,
        windows=windows,
        counts=tuple(counts),
        available=tuple(available),
    )


@dataclass(frozen=True)
class LabelDraw:
    """One draw of a budget for one seed (see :func:`draw_labels`).

    Attributes:
        budget: The budget drawn.
        seed: The draw's seed.
        subjects: Labelled subjects: those whose windows carry the labels, sorted.
        validation: Validation subjects (checkpoint selection), sorted; never in ``subjects``.
        sample: For a window budget, the labelled windows; ``None`` for a subject budget (every
            labelled window of ``subjects``).
        nights: For a night budget, ``{record: [n] labelled window indices}`` of the labelled
            nights; ``None`` otherwise.
    """

    budget: LabelBudget
    seed: int
    subjects: tuple[str, ...]
    validation: tuple[str, ...]
    sample: StageSample | None = field(default=None)
    nights: Mapping[str, np.ndarray] | None = field(default=None)

    @property
    def labelled_windows(self) -> Mapping[str, np.ndarray] | None:
        """``{record: window indices}`` that keep their labels (``None``: every labelled window
        of ``subjects``), as the datasets' ``labelled_windows`` argument takes it."""
        if self.nights is not None:
            return self.nights
        return None if self.sample is None else self.sample.windows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the budget, seed, subjects, validation subjects and drawn windows."""
        return {
            "budget": self.budget.to_json(),
            "seed": self.seed,
            "subjects": list(self.subjects),
            "validation": list(self.validation),
            **({} if self.sample is None else {"windows": self.sample.to_dict()}),
            **({} if self.nights is None else {"nights": sorted(self.nights)}),
        }


def draw_labels(
    split: SubjectSplit,
    store: str | Path | SleepStore,
    budget: LabelBudget | int | str,
    seed: int,
    *,
    n_validation: int,
) -> LabelDraw:
    """Draw the labelled and validation subjects (and windows) of ``budget`` for ``seed``.

    Args:
        split: The subject split (test subjects and fine-tuning pool).
        store: The sleep store the split was made from (labels of a window budget's draw).
        budget: A :class:`LabelBudget` or its written form (``2``, ``"w20"``).
        seed: Seed of the draw; every row of a study with the same budget and seed gets the same
            draw, so differences between rows are paired.
        n_validation: Validation subjects to draw (for a window budget, fewer when the pool
            has no more).

    Returns:
        The :class:`LabelDraw`.

    Raises:
        InputError: A subject budget that leaves fewer than ``n_validation`` subjects of the pool
            to validate on (it would label other subjects than its name says, or none would be
            left to select a checkpoint on).
    """
    budget = LabelBudget.parse(budget)
    check(isinstance(seed, int | np.integer), "seed", "an int", seed)
    check(n_validation >= 0, "n_validation", "an int >= 0", n_validation)
    if budget.subjects is not None:
        _check_validation_left(split, budget, n_validation)
        training = tuple(sorted(split.finetune_order(int(seed))[: budget.subjects]))
        validation = _validation(split, training, int(seed), n_validation)
        return LabelDraw(budget, int(seed), training, validation)
    if budget.nights is not None:
        return _draw_nights(split, _open(store), budget, int(seed), n_validation)
    assert budget.windows_per_stage is not None
    validation = _validation(split, (), int(seed), n_validation)
    source = sorted(set(split.finetune_pool) - set(validation))
    check(
        bool(source),
        "budget",
        f"fine-tuning subjects left after the {len(validation)} validation subjects",
        f"a pool of {len(split.finetune_pool)}",
    )
    sample = sample_windows_per_stage(
        store, split.records_of(source), budget.windows_per_stage, seed=int(seed)
    )
    subject_of = {r: info.subject_id for r, info in split.records.items()}
    subjects = tuple(sorted({subject_of[r] for r in sample.records}))
    return LabelDraw(budget, int(seed), subjects, validation, sample)


def draw_named_labels(
    split: SubjectSplit, subjects: Sequence[str], seed: int, *, n_validation: int
) -> LabelDraw:
    """The draw whose labelled subjects are named: every labelled window of ``subjects``, and
    ``n_validation`` validation subjects drawn from the rest of the fine-tuning pool as
    :func:`draw_labels` draws a subject budget's (naming the seed's first ``n`` subjects of
    :meth:`SubjectSplit.finetune_order` gives :func:`draw_labels`' draw of budget ``n``).

    Args:
        split: The subject split (test subjects and fine-tuning pool).
        subjects: The labelled subjects: distinct subjects of the fine-tuning pool.
        seed: Seed of the validation draw.
        n_validation: Validation subjects to draw.

    Returns:
        The :class:`LabelDraw` of the subject budget ``len(subjects)``.

    Raises:
        InputError: ``subjects`` outside the fine-tuning pool (test subjects among them), repeated
            or none, or fewer than ``n_validation`` pool subjects left outside them.
    """
    check(not isinstance(subjects, str), "subjects", "a sequence of subject ids", repr(subjects))
    named = tuple(sorted(str(subject) for subject in subjects))
    check(
        bool(named) and len(set(named)) == len(named),
        "subjects",
        "at least one subject, each once",
        list(named),
    )
    outside = sorted(set(named) - set(split.finetune_pool))
    check(not outside, "subjects", "subjects of the fine-tuning pool (no test subject)", outside)
    check(isinstance(seed, int | np.integer), "seed", "an int", seed)
    check(n_validation >= 0, "n_validation", "an int >= 0", n_validation)
    budget = LabelBudget(subjects=len(named))
    _check_validation_left(split, budget, n_validation)
    return LabelDraw(budget, int(seed), named, _validation(split, named, int(seed), n_validation))


def _check_validation_left(split: SubjectSplit, budget: LabelBudget, n_validation: int) -> None:
    """Refuse a subject budget that leaves fewer than ``n_validation`` pool subjects."""
    assert budget.subjects is not None
    pool = len(split.finetune_pool)
    check(
        budget.subjects + n_validation <= pool,
        "budgets",
        f"at most {pool - n_validation} labelled subjects (the fine-tuning pool of {pool} "
        f"keeps {n_validation} validation subjects)",
        str(budget),
    )


def _validation(
    split: SubjectSplit, training: Sequence[str], seed: int, n_validation: int
) -> tuple[str, ...]:
    """``n_validation`` pool subjects outside ``training``, drawn with ``[split.seed, seed]``."""
    rest = sorted(set(split.finetune_pool) - set(training))
    order = np.random.default_rng([split.seed, seed]).permutation(len(rest))
    return tuple(sorted(rest[i] for i in order[:n_validation]))


def _draw_nights(
    split: SubjectSplit, store: SleepStore, budget: LabelBudget, seed: int, n_validation: int
) -> LabelDraw:
    """A night budget's draw (see the module docstring): validation subjects first, then
    ``budget.nights`` nights of the other pool subjects, in the seed's subject order, one night
    of every subject before a second of any."""
    assert budget.nights is not None
    validation = _validation(split, (), seed, n_validation)
    order = [s for s in split.finetune_order(seed) if s not in validation]
    nights_of = [split.records_of([subject]) for subject in order]
    rounds = max((len(nights) for nights in nights_of), default=0)
    ordered = [nights[i] for i in range(rounds) for nights in nights_of if i < len(nights)]
    check(
        budget.nights <= len(ordered),
        "budgets",
        f"at most {len(ordered)} labelled nights (the fine-tuning pool's nights outside its "
        f"{len(validation)} validation subjects)",
        str(budget),
    )
    chosen = sorted(ordered[: budget.nights])
    windows = {r: np.flatnonzero(store.stages(r) >= 0).astype(np.int64) for r in chosen}
    subject_of = {r: info.subject_id for r, info in split.records.items()}
    subjects = tuple(sorted({subject_of[r] for r in chosen}))
    return LabelDraw(budget, seed, subjects, validation, nights=windows)
