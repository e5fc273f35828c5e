"""Shared pytest configuration: deterministic, thread-limited, headless."""

import importlib
import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pytest
import torch

from partnd.datasets.store import STAGE_NAMES, create_store, write_record


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One intra-op thread for tiny models: as fast, and far faster when another process keeps a
    core busy (two spinning OpenMP threads then slow every step down many times). Use it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class HostSyncCounter:
    """Counts reads of tensor values back to Python (``bool``, ``int``, ``float``, ``item``,
    ``tolist``): on a GPU each one is a host synchronisation."""

    METHODS = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist")

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._originals: dict[str, object] = {}

    def __enter__(self) -> "HostSyncCounter":
        for name in self.METHODS:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original

            def counting(tensor: torch.Tensor, *args: object, _name=name, _original=original):
                self.calls.append(_name)
                return _original(tensor, *args)

            setattr(torch.Tensor, name, counting)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)


@pytest.fixture
def host_syncs() -> HostSyncCounter:
    """A :class:`HostSyncCounter`; use it as a context manager around the code under test."""
    return HostSyncCounter()


GAPPY_CHANNELS = ["F3-M2", "C4-M1", "O1-M2"]
GAPPY_N_TIMES = 50


@pytest.fixture
def gappy_store(tmp_path):
    """A 3-channel store of windows of 50 samples: record ``a`` (9 consecutive windows, the first 3
    unscored), ``b`` (6 windows with a gap after the 4th), ``c`` (2 windows). The first sample of
    every window encodes (record r, window i) as ``1000 * r + i``."""
    path = tmp_path / "store.zarr"
    create_store(
        path,
        sfreq=100.0 / 60.0,
        channels=GAPPY_CHANNELS,
        window_seconds=30.0,
        stage_names=STAGE_NAMES,
        metadata={},
    )
    rng = np.random.default_rng(0)
    layouts = {
        "a": np.arange(9),  # 9 consecutive windows
        "b": np.array([0, 1, 2, 3, 6, 7]),  # a gap after window 3 (windows 4 and 5 dropped)
        "c": np.arange(2),  # shorter than the context
    }
    for r, (record, slots) in enumerate(layouts.items()):
        n = len(slots)
        signal = rng.standard_normal((n, len(GAPPY_CHANNELS), GAPPY_N_TIMES)).astype(np.float32)
        signal[:, :, 0] = (1000 * r + np.arange(n))[:, None]
        stage = (np.arange(n) % 5).astype(np.int8)
        if record == "a":
            stage[[0, 1, 2]] = -1  # an unscored start
        write_record(
            path,
            record,
            signal,
            stage,
            5.0 + 30.0 * slots,
            attrs={"subject_id": f"s{r}", "split": "training"},
        )
    return path


@pytest.fixture
def drawn_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, dict[str, object]]]:
    """What the sleep recipes' figures plot, recorded as each is saved (and still written):
    ``{file name: {panel title: {"lines": {legend label: (x, y)}, "dots": [y of every dot]}}}``;
    a horizontal reference line (``axhline``) is a line whose y values are equal."""
    from matplotlib.collections import PathCollection

    from partnd.recipes import sample_efficiency_report, sleep_report

    figures: dict[str, dict[str, dict[str, object]]] = {}
    save = sleep_report.save_figure

    def recording(fig, path):
        panels = {}
        for ax in fig.axes:
            lines = {
                line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                for line in ax.get_lines()
                if not line.get_label().startswith("_")
            }
            dots = [
                float(y)
                for collection in ax.collections
                if isinstance(collection, PathCollection)
                for y in collection.get_offsets()[:, 1]
            ]
            panels[ax.get_title()] = {"lines": lines, "dots": dots}
        figures[path.name] = panels
        save(fig, path)

    monkeypatch.setattr(sleep_report, "save_figure", recording)
    monkeypatch.setattr(sample_efficiency_report, "save_figure", recording)
    return figures


@pytest.fixture
def import_benchmark(monkeypatch: pytest.MonkeyPatch):
    """``import_benchmark(name)`` imports ``benchmarks/<name>.py`` as its script runs it (the
    benchmarks import each other by name); the benchmark modules it loaded are forgotten after
    the test."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    before = set(sys.modules)
    yield importlib.import_module
    for name in set(sys.modules) - before:
        if name.startswith("bench_"):
            sys.modules.pop(name)
