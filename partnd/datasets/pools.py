"""Nested pretraining pools of unlabelled nights, sized in hours, and held-out nights.

The unlabelled axis of the sample-efficiency study pretrains one encoder per pool size. A
:class:`PretrainingPools` is made once from one store (:func:`make_pretraining_pools`) and saved
as JSON:

* **candidates**: the given records of the store (default: all of them), minus every record of an
  excluded subject. A study excludes its test subjects always, and its labelled fine-tuning
  subjects too, so that no pool holds a night whose labels a cell trains or selects on; excluded
  subjects are never in a pool nor held out.
* **order**: the candidate subjects in a seeded permutation (:func:`numpy.random.default_rng`
  seeded with ``[seed, 4]`` over sorted subject ids), each subject's records in id order.
* **held out**: the records of the first ``held_out_subjects`` subjects. They are in no pool: the
  pretext error on them chooses each pool's pretraining budget, the same nights for every pool.
* **pools**: for each size in hours, the prefix of the remaining order (at least one night) whose
  stored windows (labelled or not, ``window_seconds`` each) last closest to that long (the longer
  one on a tie). Pools are therefore nested (every pool holds every smaller one), and a pool's
  actual hours differ from its size by at most half of its last night (a nominal 8-h night
  stores a little less than 8 h: a pool of 8 h is one such night, not two).

Pools are named by their requested size (``"24h"``); :meth:`PretrainingPools.hours` gives the
actual hours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from partnd._validation import InputError, check
from partnd.datasets.splits import read_tagged_json
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import atomic_write_json

__all__ = ["PretrainingPools", "make_pretraining_pools", "pool_name"]

POOLS_FORMAT = "partnd-pretraining-pools"
POOLS_FORMAT_VERSION = 1
_POOL_STREAM = 4  # splits.py uses streams 0 and 1, label_budget.py 2


def pool_name(hours: float) -> str:
    """The name of a pool of ``hours`` requested hours: ``"24h"``, ``"2.5h"``."""
    return f"{float(hours):g}h"


@dataclass(frozen=True)
class PretrainingPools:
    """Nested pools of records and the held-out records (build with
    :func:`make_pretraining_pools`).

    Attributes:
        seed: Seed of the subject order.
        store: Path of the store the records are in.
        held_out: Held-out records, in no pool.
        pools: ``{name: records}`` for every pool, smallest first, records in pool order (each
            pool's records start with the previous pool's).
        record_hours: Hours of stored windows of every candidate record.
        record_subjects: Subject of every candidate record.
        excluded_subjects: Subjects whose records were left out, sorted.
    """

    seed: int
    store: str
    held_out: tuple[str, ...]
    pools: Mapping[str, tuple[str, ...]]
    record_hours: Mapping[str, float]
    record_subjects: Mapping[str, str]
    excluded_subjects: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Pool names, smallest pool first."""
        return tuple(self.pools)

    def records(self, name: str) -> tuple[str, ...]:
        """The records of pool ``name``.

        Raises:
            InputError: No pool of that name.
        """
        check(name in self.pools, "pool", f"one of the pools {list(self.pools)}", repr(name))
        return self.pools[name]

    def hours(self, name: str) -> float:
        """Hours of stored windows in pool ``name``."""
        return float(sum(self.record_hours[r] for r in self.records(name)))

    def subjects(self, name: str) -> tuple[str, ...]:
        """Subjects of pool ``name``, sorted."""
        return tuple(sorted({self.record_subjects[r] for r in self.records(name)}))

    @property
    def held_out_hours(self) -> float:
        """Hours of stored windows in the held-out records."""
        return float(sum(self.record_hours[r] for r in self.held_out))

    def summary(self) -> list[dict[str, Any]]:
        """One row per pool: ``pool``, ``hours``, ``nights``, ``subjects`` and the mean and
        longest night in hours (``night_hours``, ``longest_night_hours``)."""
        rows = []
        for name in self.names:
            lengths = [self.record_hours[r] for r in self.records(name)]
            rows.append(
                {
                    "pool": name,
                    "hours": round(self.hours(name), 2),
                    "nights": len(lengths),
                    "subjects": len(self.subjects(name)),
                    "night_hours": round(float(np.mean(lengths)), 2),
                    "longest_night_hours": round(float(max(lengths)), 2),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what :meth:`save` writes)."""
        return {
            "format": POOLS_FORMAT,
            "format_version": POOLS_FORMAT_VERSION,
            "seed": self.seed,
            "store": self.store,
            "held_out": list(self.held_out),
            "pools": {name: list(records) for name, records in self.pools.items()},
            "record_hours": dict(self.record_hours),
            "record_subjects": dict(self.record_subjects),
            "excluded_subjects": list(self.excluded_subjects),
        }

    def save(self, path: str | Path) -> None:
        """Write the pools as JSON atomically (temporary file, then rename)."""
        atomic_write_json(self.to_dict(), Path(path))

    @classmethod
    def load(cls, path: str | Path) -> PretrainingPools:
        """Read pools written by :meth:`save`.

        Raises:
            InputError: The file is missing, not JSON or not pools of a supported version.
        """
        data = read_tagged_json(
            path, POOLS_FORMAT, POOLS_FORMAT_VERSION, "pools JSON file (PretrainingPools.save)"
        )
        return cls(
            seed=int(data["seed"]),
            store=str(data["store"]),
            held_out=tuple(data["held_out"]),
            pools={name: tuple(records) for name, records in data["pools"].items()},
            record_hours={r: float(h) for r, h in data["record_hours"].items()},
            record_subjects={r: str(s) for r, s in data["record_subjects"].items()},
            excluded_subjects=tuple(data["excluded_subjects"]),
        )


def make_pretraining_pools(
    store: str | Path | SleepStore,
    sizes_hours: Sequence[float],
    *,
    records: Iterable[str] | None = None,
    exclude_subjects: Iterable[str] = (),
    held_out_subjects: int = 2,
    seed: int = 0,
) -> PretrainingPools:
    """Nested pools of ``sizes_hours`` hours each and held-out records (see the module docstring).

    Args:
        store: The store holding the unlabelled nights.
        sizes_hours: Pool sizes in hours, increasing.
        records: Candidate records (default every record of the store).
        exclude_subjects: Subjects never in a pool nor held out (a study's test subjects, and its
            labelled fine-tuning subjects).
        held_out_subjects: Subjects whose records are held out (pretext error of every pool).
        seed: Seed of the subject order.

    Returns:
        The :class:`PretrainingPools`.

    Raises:
        InputError: Sizes not positive and increasing, unknown records, fewer candidate hours
            (after the held-out subjects, and half a night) than the largest size, or two sizes
            that give the same nights.
    """
    opened = store if isinstance(store, SleepStore) else SleepStore(store)
    sizes = [float(size) for size in sizes_hours]
    check(
        len(sizes) > 0 and all(s > 0 for s in sizes) and sizes == sorted(set(sizes)),
        "sizes_hours",
        "increasing positive pool sizes in hours",
        list(sizes_hours),
    )
    check(held_out_subjects >= 1, "held_out_subjects", "an int >= 1", held_out_subjects)
    known = opened.record_ids()
    chosen = known if records is None else list(dict.fromkeys(records))
    unknown = sorted(set(chosen) - set(known))
    check(not unknown, "records", "record ids present in the store", unknown)
    excluded = {str(s) for s in exclude_subjects}
    subject_of = {r: str(opened.record_attrs(r)["subject_id"]) for r in chosen}
    candidates = sorted(r for r in chosen if subject_of[r] not in excluded)
    hours = {r: opened.n_windows(r) * float(opened.window_seconds) / 3600.0 for r in candidates}
    subjects = sorted({subject_of[r] for r in candidates})
    check(
        len(subjects) > held_out_subjects,
        "held_out_subjects",
        f"fewer than the {len(subjects)} candidate subjects (some must be left for the pools)",
        held_out_subjects,
    )
    permutation = np.random.default_rng([int(seed), _POOL_STREAM]).permutation(len(subjects))
    ordered = [r for i in permutation for r in candidates if subject_of[r] == subjects[i]]
    held_subjects = {subjects[i] for i in permutation[:held_out_subjects]}
    held_out = tuple(r for r in ordered if subject_of[r] in held_subjects)
    rest = [r for r in ordered if subject_of[r] not in held_subjects]
    cumulative = np.cumsum([hours[r] for r in rest])
    if sizes[-1] > cumulative[-1] + hours[rest[-1]] / 2:
        raise InputError(
            f"sizes_hours: expected pools of at most the {cumulative[-1]:.1f} h of the "
            f"{len(rest)} candidate nights outside the {held_out_subjects} held-out subject(s) "
            f"(and half a night), got {sizes[-1]:g} h"
        )
    pools = {pool_name(size): tuple(rest[: _closest(cumulative, size)]) for size in sizes}
    check(
        len(set(pools.values())) == len(pools),
        "sizes_hours",
        "sizes far enough apart that every pool holds more nights than the previous one",
        list(sizes_hours),
    )
    return PretrainingPools(
        seed=int(seed),
        store=str(opened.path),
        held_out=held_out,
        pools=pools,
        record_hours={r: round(hours[r], 6) for r in candidates},
        record_subjects={r: subject_of[r] for r in candidates},
        excluded_subjects=tuple(sorted(excluded & set(subject_of.values()))),
    )


def _closest(cumulative: np.ndarray, size: float) -> int:
    """The number of nights ``k >= 1`` whose cumulative hours ``cumulative[k - 1]`` come closest
    to ``size`` (the larger ``k`` on a tie)."""
    distance = np.abs(cumulative - size)
    return int(np.flatnonzero(distance <= distance.min() + 1e-9)[-1]) + 1
