"""Tests of the parallel runner and the atomic manifest."""

from __future__ import annotations

import json
import os

import pytest

from partnd._validation import InputError
from partnd.preprocessing.manifest import Manifest, read_manifest, write_manifest
from partnd.preprocessing.parallel import parallel_map_unordered, resolve_n_jobs


def _square(value: int) -> int:
    return value * value


def test_resolve_n_jobs_follows_mne_semantics():
    cores = os.cpu_count() or 1
    assert resolve_n_jobs(None) == 1
    assert resolve_n_jobs(3) == 3
    assert resolve_n_jobs(-1) == cores
    assert resolve_n_jobs(-2) == max(1, cores - 1)
    with pytest.raises(InputError, match="n_jobs"):
        resolve_n_jobs(0)


def test_parallel_map_unordered_yields_every_result_once():
    results = list(parallel_map_unordered(_square, [1, 2, 3, 4], n_jobs=1, progress=False))
    assert sorted(results) == [1, 4, 9, 16]
    assert list(parallel_map_unordered(_square, [], n_jobs=2, progress=False)) == []
    with pytest.raises(InputError, match="backend"):
        list(parallel_map_unordered(_square, [1], backend="threads", progress=False))


@pytest.mark.slow
def test_parallel_map_unordered_with_two_processes():
    results = list(parallel_map_unordered(_square, list(range(6)), n_jobs=2, progress=False))
    assert sorted(results) == [0, 1, 4, 9, 16, 25]


def test_manifest_round_trip_is_atomic(tmp_path):
    assert read_manifest(tmp_path) == {}
    write_manifest(tmp_path, {"b": {"status": "done"}, "a": {"status": "failed"}})
    text = (tmp_path / "manifest.json").read_text()
    assert list(json.loads(text)) == ["a", "b"]
    manifest = Manifest(tmp_path)
    manifest.update("c", {"status": "done", "n_kept": 3})
    assert read_manifest(tmp_path)["c"] == {"status": "done", "n_kept": 3}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["manifest.json"]
    with pytest.raises(ValueError):
        write_manifest(tmp_path, {"d": {"value": float("nan")}})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["manifest.json"]
    assert "d" not in read_manifest(tmp_path)
