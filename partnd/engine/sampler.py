"""Resumable, deterministic training batch order.

The order of epoch ``e`` is a function of ``(seed, e, rank)`` only, so a run resumed in the
middle of an epoch can skip exactly the batches it already consumed without loading them. Two
orders are used (:func:`epoch_order`): ``DistributedSampler``'s shuffled shards for ordinary
datasets, and :class:`~partnd.datasets.sleep_windows.ChunkShuffleSampler` (chunk-local
shuffling, one decode per storage chunk) for datasets that expose ``chunk_ids`` such as
:class:`~partnd.datasets.SleepWindowDataset`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any, Protocol

from torch.utils.data import DistributedSampler, Sampler

from partnd._validation import check

__all__ = ["EpochOrder", "ResumableBatchSampler", "epoch_order"]


class EpochOrder(Protocol):
    """An index sampler whose order is fixed by the epoch set last (like ``DistributedSampler``)."""

    def set_epoch(self, epoch: int) -> None: ...

    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...


def epoch_order(
    dataset: Sized,
    *,
    seed: int,
    rank: int,
    world_size: int,
    batch_size: int,
    num_workers: int,
) -> EpochOrder:
    """This rank's shuffled item order for training (tail dropped so ranks get equal shares).

    Args:
        dataset: The training set; if it has a ``chunk_ids`` array (storage chunk of every item),
            the order is chunk-aware so each chunk is decoded once per epoch.
        seed: Shuffling seed.
        rank: This process's rank.
        world_size: Number of processes.
        batch_size: Per-rank batch size (chunk-aware streams are cut in whole batches).
        num_workers: DataLoader workers (chunk-aware order gives each worker its own chunks).
    """
    chunk_ids = getattr(dataset, "chunk_ids", None)
    if chunk_ids is not None:
        from partnd.datasets.sleep_windows import ChunkShuffleSampler

        return ChunkShuffleSampler(
            chunk_ids,
            seed=seed,
            num_replicas=world_size,
            rank=rank,
            drop_last=True,
            batch_size=batch_size,
            num_workers=num_workers,
        )
    order: DistributedSampler[Any] = DistributedSampler(
        dataset,  # type: ignore[arg-type]
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=seed,
        drop_last=True,
    )
    return order


class ResumableBatchSampler(Sampler[list[int]]):
    """Batches of whole size from an epoch order (the last incomplete batch is dropped).

    Args:
        order: This rank's item order (:func:`epoch_order`).
        batch_size: Items per batch on this rank.
        world_size: Number of processes (for the error message only).
    """

    def __init__(self, order: EpochOrder, batch_size: int, world_size: int = 1) -> None:
        self.order = order
        self.batch_size = batch_size
        self.batches_per_epoch = len(order) // batch_size
        check(
            self.batches_per_epoch >= 1,
            "dataset",
            f"at least batch_size x world_size = {batch_size * world_size} items (training drops "
            "the last incomplete batch)",
            f"{len(order)} item(s) per rank",
        )
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Select the epoch to iterate and how many of its first batches to skip."""
        check(0 <= skip <= self.batches_per_epoch, "skip", "a batch count", repr(skip))
        self.epoch = epoch
        self.skip = skip

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All batches (dataset indices) of ``epoch`` on this rank, in order."""
        self.order.set_epoch(epoch)
        indices = [int(index) for index in self.order]
        size = self.batch_size
        return [indices[i * size : (i + 1) * size] for i in range(self.batches_per_epoch)]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.epoch_batches(self.epoch)[self.skip :]

    def __len__(self) -> int:
        return self.batches_per_epoch - self.skip
