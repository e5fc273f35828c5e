"""Shared pytest configuration: deterministic, thread-limited, headless."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    torch.manual_seed(0)
