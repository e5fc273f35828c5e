"""Shared pytest configuration: deterministic, thread-limited, headless."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    torch.manual_seed(0)


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
