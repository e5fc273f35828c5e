"""Resumable, deterministic training batch order.

The order of epoch ``e`` is a function of ``(seed, e, rank)`` only, so a run resumed in the
middle of an epoch can skip exactly the batches it already consumed without loading them. Two
orders are used (:func:`epoch_order`): ``DistributedSampler``'s shuffled shards for ordinary
datasets, and :class:`ChunkShuffleSampler` (chunk-local
shuffling, one decode per storage chunk) for datasets that expose ``chunk_ids`` such as
:class:`~partnd.datasets.SleepWindowDataset`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence, Sized
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DistributedSampler, Sampler

from partnd._validation import check

__all__ = ["ChunkShuffleSampler", "EpochOrder", "ResumableBatchSampler", "epoch_order"]


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


class _HasChunkIds(Protocol):
    chunk_ids: np.ndarray


class ChunkShuffleSampler(Sampler[int]):
    """Shuffle chunks, then windows inside buffers of a few chunks: cheap, chunk-local shuffling.

    Each epoch: (1) the storage chunks are put in a random order; (2) with several replicas (DDP),
    the resulting window sequence is cut into ``num_replicas`` equal contiguous shards, so ranks get
    disjoint chunks (at most ``num_replicas - 1`` chunks are split between two neighbouring ranks);
    (3) each rank shuffles its windows inside consecutive buffers of ``shuffle_buffer_chunks``
    chunks. A chunk's windows therefore appear within a span of at most
    ``shuffle_buffer_chunks * chunk_size`` positions, so a dataset cache holding that many chunks
    decodes every chunk once. The order depends only on ``(seed, epoch, rank)``.

    ``DataLoader`` workers each keep their own cache and receive batches round-robin. Given
    ``batch_size`` and ``num_workers`` (the loader's), step (3) runs on ``num_workers`` contiguous
    streams of the shard, one per worker, sized in whole batches, and their batches are
    interleaved: batch ``i`` comes from stream ``i % num_workers``, so each worker still decodes
    each of its chunks once (at most ``num_workers - 1`` chunks are split between two streams).

    Args:
        dataset: A dataset with a ``chunk_ids: [N]`` array (storage chunk of every item, as
            :class:`~partnd.datasets.SleepWindowDataset` provides), or that array itself.
        shuffle_buffer_chunks: Number of chunks whose windows are shuffled together (``k``).
        seed: Base seed, shared by all ranks.
        shuffle: ``False`` keeps the stored order (still sharded), e.g. for evaluation.
        num_replicas: Number of DDP ranks; default the initialised process group's world size,
            else 1.
        rank: This process' rank; default the process group's rank, else 0.
        drop_last: With several replicas, drop the tail so every rank gets ``N // num_replicas``
            items; otherwise pad with items from the start of the epoch's order (as
            ``torch.utils.data.DistributedSampler``) to ``ceil(N / num_replicas)`` items per rank.
        batch_size: The ``DataLoader``'s batch size; needed for worker streams.
        num_workers: The ``DataLoader``'s ``num_workers``; streams are used when ``>= 2`` and
            ``batch_size`` is given.
    """

    def __init__(
        self,
        dataset: _HasChunkIds | np.ndarray | Sequence[int],
        *,
        shuffle_buffer_chunks: int = 4,
        seed: int = 0,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        batch_size: int | None = None,
        num_workers: int = 0,
    ) -> None:
        chunk_ids = np.asarray(getattr(dataset, "chunk_ids", dataset))
        check(
            chunk_ids.ndim == 1
            and len(chunk_ids) > 0
            and np.issubdtype(chunk_ids.dtype, np.integer),
            "dataset",
            "a dataset with a non-empty integer chunk_ids array [N], or such an array",
            chunk_ids,
        )
        check(
            isinstance(shuffle_buffer_chunks, int) and shuffle_buffer_chunks >= 1,
            "shuffle_buffer_chunks",
            "an int >= 1",
            shuffle_buffer_chunks,
        )
        check(
            batch_size is None or (isinstance(batch_size, int) and batch_size >= 1),
            "batch_size",
            "None or an int >= 1",
            batch_size,
        )
        check(
            isinstance(num_workers, int) and num_workers >= 0,
            "num_workers",
            "an int >= 0",
            num_workers,
        )
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if num_replicas is None:
            num_replicas = torch.distributed.get_world_size() if distributed else 1
        if rank is None:
            rank = torch.distributed.get_rank() if distributed else 0
        check(num_replicas >= 1, "num_replicas", "an int >= 1", num_replicas)
        check(0 <= rank < num_replicas, "rank", f"an int in [0, {num_replicas})", rank)
        check(
            not drop_last or len(chunk_ids) >= num_replicas,
            "drop_last",
            f"False when the dataset has fewer items ({len(chunk_ids)}) than replicas",
            drop_last,
        )
        self.chunk_ids = chunk_ids
        self.shuffle_buffer_chunks = shuffle_buffer_chunks
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.drop_last = bool(drop_last)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.epoch = 0
        order = np.argsort(chunk_ids, kind="stable")
        starts = np.flatnonzero(np.diff(chunk_ids[order]) != 0) + 1
        self._chunks = np.split(order, starts)
        n = len(chunk_ids)
        self.num_samples = n // self.num_replicas if drop_last else math.ceil(n / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, which (with ``seed``) determines the order of the next iteration."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def _buffer_shuffle(self, indices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Shuffle ``indices`` (chunk-ordered) inside consecutive buffers of k chunk segments
        (none: a worker that gets no batch, when there are more workers than batches)."""
        if len(indices) == 0:
            return indices
        chunks = self.chunk_ids[indices]
        segment_start = np.concatenate([[True], chunks[1:] != chunks[:-1]])
        buffer_of = (np.cumsum(segment_start) - 1) // self.shuffle_buffer_chunks
        return indices[np.lexsort((rng.random(len(indices)), buffer_of))]

    def epoch_indices(self) -> np.ndarray:
        """Return this rank's ``[num_samples]`` int64 indices for the current epoch."""
        shared = np.random.default_rng([self.seed, self.epoch])
        chunk_order = (
            shared.permutation(len(self._chunks)) if self.shuffle else range(len(self._chunks))
        )
        sequence = np.concatenate([self._chunks[c] for c in chunk_order])
        total = self.num_samples * self.num_replicas
        if total > len(sequence):
            sequence = np.resize(sequence, total)
        shard = sequence[self.rank * self.num_samples : (self.rank + 1) * self.num_samples]
        if not self.shuffle:
            return shard
        local = np.random.default_rng([self.seed, self.epoch, self.rank])
        if self.batch_size is None or self.num_workers < 2:
            return self._buffer_shuffle(shard, local)
        size, workers = self.batch_size, self.num_workers
        n_batches = math.ceil(len(shard) / size)
        batch_sizes = np.full(n_batches, size)
        batch_sizes[-1] = len(shard) - (n_batches - 1) * size
        stream_sizes = [int(batch_sizes[w::workers].sum()) for w in range(workers)]
        streams = [
            self._buffer_shuffle(stream, local)
            for stream in np.split(shard, np.cumsum(stream_sizes)[:-1])
        ]
        return np.concatenate(
            [
                streams[i % workers][(i // workers) * size : (i // workers + 1) * size]
                for i in range(n_batches)
            ]
        )

    def __iter__(self) -> Iterator[int]:
        return iter(self.epoch_indices().tolist())
