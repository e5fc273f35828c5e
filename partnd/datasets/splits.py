"""Subject-level splits for the sleep-staging recipe: held-out test subjects, pretraining records
and nested fine-tuning subsets for the low-label sample-efficiency study.

Rules (PhysioNet 2018 protocol of the paper, Appendix "EEG"):

* ``test``: ``n_test_subjects`` subjects drawn among the *labelled* subjects (those with at least
  one labelled record); 200 by default. Or the labelled subjects named by ``test_subjects``
  (nothing drawn). Their labelled records are the evaluation set.
* ``pretrain``: every record of every other subject, labelled or not (the unlabelled PhysioNet
  "test" partition included). Records of test subjects are never used for pretraining, even
  unlabelled ones.
* ``finetune``: nested subsets ``10 ⊂ 50 ⊂ 100 ⊂ 657`` of the labelled non-test subjects
  (``finetune_pool``): the prefixes of one seeded permutation. :meth:`SubjectSplit.finetune_subsets`
  draws another nested chain per seed for the 5-seed study; the test set never changes.

Randomness comes from :func:`numpy.random.default_rng` seeded with ``[seed, stream]`` and applied to
*sorted* ids, so a split depends only on the ids and the seed (not on Python's hash or the order the
store lists records). Save the split once with :meth:`SubjectSplit.save` and load it in every
experiment.

Small cohorts: an integer ``n_test_subjects`` that would hold out more than half of the labelled
subjects is scaled down to the same fraction of the cohort it is of PhysioNet 2018's 994 labelled
subjects (200 → 20.1 %), with a warning; a float in ``(0, 1)`` is used as a fraction as given. A
fine-tuning size larger than the pool is capped to the whole pool, with a warning (its key stays the
requested size, so result tables keep their columns).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.store import SleepStore, read_json

__all__ = [
    "PC18_LABELLED_SUBJECTS",
    "RecordInfo",
    "SubjectSplit",
    "make_subject_split",
    "read_tagged_json",
    "records_from_store",
]

PC18_LABELLED_SUBJECTS = 994
"""Labelled subjects of PhysioNet 2018, the reference cohort for scaling ``n_test_subjects``."""

SPLIT_FORMAT = "partnd-subject-split"
SPLIT_FORMAT_VERSION = 1
_TEST_STREAM = 0
_DEFAULT_TEST_SUBJECTS = 200  # the paper's PhysioNet 2018 test subjects
_FINETUNE_STREAM = 1


@dataclass(frozen=True)
class RecordInfo:
    """What a split needs to know about one record.

    Attributes:
        record_id: Record identifier (unique).
        subject_id: Subject the record belongs to.
        labelled: Whether the record has at least one labelled window.
    """

    record_id: str
    subject_id: str
    labelled: bool


def records_from_store(store: str | Path | SleepStore) -> list[RecordInfo]:
    """Return one :class:`RecordInfo` per complete record of a sleep store, sorted by record id."""
    opened = store if isinstance(store, SleepStore) else SleepStore(store)
    labelled = set(opened.record_ids(labelled_only=True))
    return [
        RecordInfo(r, str(opened.record_attrs(r)["subject_id"]), r in labelled)
        for r in opened.record_ids()
    ]


@dataclass(frozen=True)
class SubjectSplit:
    """A fixed subject-level split (build with :func:`make_subject_split`, never by hand).

    Attributes:
        seed: Seed of the test draw and of the default fine-tuning chain.
        test: Held-out labelled subjects, sorted.
        test_records: Labelled records of the test subjects, sorted.
        pretrain: Every record whose subject is not in ``test`` (labelled or not), sorted.
        finetune_pool: Labelled subjects not in ``test``, sorted.
        finetune_sizes: Requested nested fine-tuning sizes, increasing.
        finetune: ``{size: subjects}`` nested chain for ``seed`` (``finetune_subsets(seed)``).
        records: ``{record_id: RecordInfo}`` of every record the split was made from.
    """

    seed: int
    test: tuple[str, ...]
    test_records: tuple[str, ...]
    pretrain: tuple[str, ...]
    finetune_pool: tuple[str, ...]
    finetune_sizes: tuple[int, ...]
    finetune: Mapping[int, tuple[str, ...]]
    records: Mapping[str, RecordInfo]

    def finetune_subsets(self, seed: int) -> dict[int, tuple[str, ...]]:
        """Return a nested chain of fine-tuning subject sets for one seed of the 5-seed study.

        Args:
            seed: Chain seed (the study uses 5 seeds, e.g. ``0..4``).

        Returns:
            ``{size: sorted subject ids}`` for every size of ``finetune_sizes``; each set contains
            the previous one. A size above ``len(finetune_pool)`` gets the whole pool (warned about
            when the split was made).
        """
        order = self.finetune_order(seed)
        return {size: tuple(sorted(order[:size])) for size in self.finetune_sizes}

    def finetune_order(self, seed: int) -> tuple[str, ...]:
        """The fine-tuning pool in the seed's order: the first ``n`` subjects are the ``n``-subject
        set of the seed's nested chain, for any ``n`` (:meth:`finetune_subsets` for the split's
        sizes).

        Args:
            seed: Chain seed.
        """
        check(isinstance(seed, int | np.integer), "seed", "an int", seed)
        rng = np.random.default_rng([int(seed), _FINETUNE_STREAM])
        return tuple(self.finetune_pool[i] for i in rng.permutation(len(self.finetune_pool)))

    def records_of(self, subjects: Iterable[str], *, labelled_only: bool = True) -> list[str]:
        """Return the sorted records of ``subjects`` (only labelled ones by default).

        Raises:
            InputError: A subject is not part of the split.
        """
        wanted = set(subjects)
        known = {info.subject_id for info in self.records.values()}
        check(wanted <= known, "subjects", "subjects of this split", sorted(wanted - known))
        return sorted(
            record_id
            for record_id, info in self.records.items()
            if info.subject_id in wanted and (info.labelled or not labelled_only)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready representation (what :meth:`save` writes)."""
        return {
            "format": SPLIT_FORMAT,
            "format_version": SPLIT_FORMAT_VERSION,
            "seed": self.seed,
            "finetune_sizes": list(self.finetune_sizes),
            "test": list(self.test),
            "test_records": list(self.test_records),
            "pretrain": list(self.pretrain),
            "finetune_pool": list(self.finetune_pool),
            "finetune": {str(size): list(ids) for size, ids in self.finetune.items()},
            "records": {
                r: {"subject_id": info.subject_id, "labelled": info.labelled}
                for r, info in sorted(self.records.items())
            },
        }

    def save(self, path: str | Path) -> None:
        """Write the split as JSON atomically (temporary file in the same folder, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(self.to_dict(), file, indent=1)
                file.write("\n")
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)

    @classmethod
    def load(cls, path: str | Path) -> SubjectSplit:
        """Read a split written by :meth:`save`.

        Raises:
            InputError: The file is missing, not JSON, or not a partnd subject split of a
                supported version (naming ``path``).
        """
        data = read_tagged_json(
            path, SPLIT_FORMAT, SPLIT_FORMAT_VERSION, "split JSON file (SubjectSplit.save)"
        )
        return cls(
            seed=int(data["seed"]),
            test=tuple(data["test"]),
            test_records=tuple(data["test_records"]),
            pretrain=tuple(data["pretrain"]),
            finetune_pool=tuple(data["finetune_pool"]),
            finetune_sizes=tuple(int(s) for s in data["finetune_sizes"]),
            finetune={int(size): tuple(ids) for size, ids in data["finetune"].items()},
            records={
                r: RecordInfo(r, str(info["subject_id"]), bool(info["labelled"]))
                for r, info in data["records"].items()
            },
        )


def read_tagged_json(path: str | Path, name: str, version: int, what: str) -> dict[str, Any]:
    """A JSON object written with ``"format": name`` and ``"format_version": version``.

    Args:
        path: The file.
        name: Its expected ``format``.
        version: Its expected ``format_version``.
        what: What the file is, for errors (``"split JSON file (SubjectSplit.save)"``).

    Raises:
        InputError: The file is missing, not JSON, or of another format or version (naming
            ``path``).
    """
    data = read_json(Path(path), f"a readable {what}")
    check(
        isinstance(data, dict)
        and data.get("format") == name
        and data.get("format_version") == version,
        "path",
        f"a {name!r} JSON file of format_version {version}",
        str(path),
    )
    return dict(data)


def _test_count(n_test_subjects: int | float, n_labelled: int) -> int:
    """Number of test subjects for a cohort of ``n_labelled`` labelled subjects (see module doc)."""
    if isinstance(n_test_subjects, float):
        check(
            0.0 < n_test_subjects < 1.0,
            "n_test_subjects",
            "an int >= 1 or a fraction in (0, 1)",
            n_test_subjects,
        )
        count = round(n_test_subjects * n_labelled)
    else:
        check(
            isinstance(n_test_subjects, int | np.integer) and n_test_subjects >= 1,
            "n_test_subjects",
            "an int >= 1 or a fraction in (0, 1)",
            n_test_subjects,
        )
        count = int(n_test_subjects)
        if count > n_labelled // 2:
            scaled = round(n_labelled * count / PC18_LABELLED_SUBJECTS)
            warnings.warn(
                f"n_test_subjects={count} would hold out more than half of the "
                f"{n_labelled} labelled subjects; scaled to {max(1, scaled)} (the same fraction "
                f"of this cohort as of PhysioNet 2018's {PC18_LABELLED_SUBJECTS}). Pass a fraction "
                "in (0, 1) to choose it exactly.",
                UserWarning,
                stacklevel=3,
            )
            count = scaled
    return min(max(1, count), n_labelled - 1)


def _named_test_subjects(names: Sequence[str], labelled_subjects: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a split's test subjects, sorted: distinct labelled subjects, leaving at least
    one of ``labelled_subjects`` to fine-tune."""
    check(not isinstance(names, str), "test_subjects", "a sequence of subject ids", repr(names))
    test = sorted(str(name) for name in names)
    check(len(set(test)) == len(test), "test_subjects", "distinct subject ids", test)
    unknown = sorted(set(test) - set(labelled_subjects))
    check(not unknown, "test_subjects", "subjects with labelled records", unknown)
    check(
        0 < len(test) < len(labelled_subjects),
        "test_subjects",
        f"between 1 and {len(labelled_subjects) - 1} of the {len(labelled_subjects)} labelled "
        "subjects (at least one is left to fine-tune)",
        f"{len(test)} subject(s)",
    )
    return tuple(test)


def make_subject_split(
    store_or_records: str | Path | SleepStore | Sequence[RecordInfo],
    *,
    n_test_subjects: int | float | None = None,
    test_subjects: Sequence[str] | None = None,
    finetune_sizes: Sequence[int] = (10, 50, 100, 657),
    seed: int = 0,
) -> SubjectSplit:
    """Split a cohort by subject into test, pretraining and nested fine-tuning sets.

    Args:
        store_or_records: A sleep store (path or :class:`SleepStore`) or its records as
            :class:`RecordInfo` (see :func:`records_from_store`).
        n_test_subjects: Held-out labelled subjects, drawn with ``seed``: an int (scaled down
            with a warning when above half the labelled subjects) or a fraction in ``(0, 1)`` of
            the labelled subjects; default 200. At least one subject is held out and at least
            one is left for fine-tuning.
        test_subjects: The held-out subjects by name instead (labelled subjects, at least one
            left out of them for fine-tuning); not with ``n_test_subjects``.
        finetune_sizes: Nested fine-tuning subset sizes (distinct positive ints); sizes above the
            pool are capped to the whole pool with a warning.
        seed: Seed of the test draw and of the default fine-tuning chain.

    Returns:
        The :class:`SubjectSplit`.

    Raises:
        InputError: Duplicate record ids, fewer than 2 labelled subjects, invalid sizes, or
            ``test_subjects`` that are not labelled subjects or leave none to fine-tune.
    """
    if isinstance(store_or_records, str | Path | SleepStore):
        infos = records_from_store(store_or_records)
    else:
        infos = list(store_or_records)
        check(
            all(isinstance(info, RecordInfo) for info in infos),
            "store_or_records",
            "a store path, a SleepStore or a sequence of RecordInfo",
            store_or_records,
        )
    record_ids = [info.record_id for info in infos]
    duplicates = sorted({r for r in record_ids if record_ids.count(r) > 1})
    check(not duplicates, "store_or_records", "unique record ids", duplicates)
    check(isinstance(seed, int | np.integer), "seed", "an int", seed)
    sizes = tuple(int(s) for s in finetune_sizes)
    check(
        len(sizes) > 0 and all(s >= 1 for s in sizes) and len(set(sizes)) == len(sizes),
        "finetune_sizes",
        "a non-empty sequence of distinct positive ints",
        list(finetune_sizes),
    )
    sizes = tuple(sorted(sizes))
    labelled_subjects = sorted({info.subject_id for info in infos if info.labelled})
    if len(labelled_subjects) < 2:
        raise InputError(
            "store_or_records: expected at least 2 labelled subjects (one to test, one to "
            f"fine-tune), got {len(labelled_subjects)}"
        )
    check(
        n_test_subjects is None or test_subjects is None,
        "n_test_subjects",
        "no number of test subjects when test_subjects names them",
        f"{n_test_subjects!r} and {test_subjects!r}",
    )
    if test_subjects is None:
        n_test = _test_count(
            _DEFAULT_TEST_SUBJECTS if n_test_subjects is None else n_test_subjects,
            len(labelled_subjects),
        )
        rng = np.random.default_rng([int(seed), _TEST_STREAM])
        chosen = rng.permutation(len(labelled_subjects))[:n_test]
        test = tuple(sorted(labelled_subjects[i] for i in chosen))
    else:
        test = _named_test_subjects(test_subjects, labelled_subjects)
    test_set = set(test)
    pool = tuple(s for s in labelled_subjects if s not in test_set)
    too_large = [s for s in sizes if s > len(pool)]
    if too_large:
        warnings.warn(
            f"finetune_sizes {too_large} exceed the {len(pool)} labelled non-test subjects; "
            "those subsets hold the whole pool.",
            UserWarning,
            stacklevel=2,
        )
    records = {info.record_id: info for info in sorted(infos, key=lambda i: i.record_id)}
    partial = SubjectSplit(
        seed=int(seed),
        test=test,
        test_records=tuple(
            r for r, i in records.items() if i.subject_id in test_set and i.labelled
        ),
        pretrain=tuple(r for r, i in records.items() if i.subject_id not in test_set),
        finetune_pool=pool,
        finetune_sizes=sizes,
        finetune={},
        records=records,
    )
    return dataclasses.replace(partial, finetune=partial.finetune_subsets(int(seed)))
