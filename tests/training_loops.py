"""The small Adam loops the learning tests run: a classifier on a planted task, an objective on
planted batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["classifier_accuracy", "objective_steps"]

T = TypeVar("T")
Task = Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def classifier_accuracy(
    model: torch.nn.Module, task: Task, steps: int, generator: torch.Generator, n_eval: int
) -> float:
    """Train ``model`` with Adam (lr 1e-3, cross-entropy) on ``steps`` batches of
    ``task(32, generator)``; its accuracy on a further ``task(n_eval, generator)``."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        x, y = task(32, generator)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    x, y = task(n_eval, generator)
    with torch.no_grad():
        return float((model(x).argmax(-1) == y).float().mean())


def objective_steps(
    model: torch.nn.Module,
    make_batch: Callable[[int, torch.Generator], torch.Tensor],
    steps: int,
    lr: float,
    record: Callable[[Any], T],
) -> list[T]:
    """Train a pretraining objective with Adam for ``steps`` steps on batches of
    ``make_batch(16, generator)`` (one generator seeded 0 draws the batches and the objective's
    choices); what ``record`` takes from each step's output."""
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    recorded = []
    for _ in range(steps):
        out = model(make_batch(16, generator), generator=generator)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        recorded.append(record(out))
    return recorded
