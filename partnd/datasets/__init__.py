"""Reading sleep data: the zarr sleep store, window datasets, splits, label budgets, pretraining
pools and braindecode interop.

The generated sample cohort that stands in for PhysioNet 2018 lives in :mod:`partnd.cohort`.

Names are imported on first use, so that ``import partnd.datasets.store`` in a preprocessing worker
does not pull in torch or braindecode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partnd._lazy import lazy_exports

if TYPE_CHECKING:
    from partnd.datasets.braindecode_interop import from_braindecode, to_braindecode
    from partnd.datasets.label_budget import (
        LabelBudget,
        LabelDraw,
        StageSample,
        draw_labels,
        draw_named_labels,
        sample_windows_per_stage,
    )
    from partnd.datasets.montage_union import MontageUnion
    from partnd.datasets.nights import SleepNightDataset, time_of_night
    from partnd.datasets.pools import PretrainingPools, make_pretraining_pools
    from partnd.datasets.sequences import Night, SleepSequenceDataset
    from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
    from partnd.datasets.splits import (
        RecordInfo,
        SubjectSplit,
        make_subject_split,
        records_from_store,
    )
    from partnd.datasets.store import STAGE_NAMES, SleepStore, create_store, write_record
    from partnd.engine.normalization import NORMALIZE_EPS, instance_normalize
    from partnd.engine.sampler import ChunkShuffleSampler

_EXPORTS: dict[str, str] = {
    "LabelBudget": ".label_budget",
    "LabelDraw": ".label_budget",
    "StageSample": ".label_budget",
    "draw_labels": ".label_budget",
    "draw_named_labels": ".label_budget",
    "sample_windows_per_stage": ".label_budget",
    "PretrainingPools": ".pools",
    "make_pretraining_pools": ".pools",
    "Night": ".sequences",
    "SleepSequenceDataset": ".sequences",
    "SleepNightDataset": ".nights",
    "time_of_night": ".nights",
    "NORMALIZE_EPS": "partnd.engine.normalization",
    "ChunkShuffleSampler": "partnd.engine.sampler",
    "InMemoryWindows": ".sleep_windows",
    "MontageUnion": ".montage_union",
    "SleepWindowDataset": ".sleep_windows",
    "instance_normalize": "partnd.engine.normalization",
    "RecordInfo": ".splits",
    "SubjectSplit": ".splits",
    "make_subject_split": ".splits",
    "records_from_store": ".splits",
    "STAGE_NAMES": ".store",
    "SleepStore": ".store",
    "create_store": ".store",
    "write_record": ".store",
    "from_braindecode": ".braindecode_interop",
    "to_braindecode": ".braindecode_interop",
}

__all__ = [
    "NORMALIZE_EPS",
    "STAGE_NAMES",
    "ChunkShuffleSampler",
    "InMemoryWindows",
    "LabelBudget",
    "LabelDraw",
    "MontageUnion",
    "Night",
    "PretrainingPools",
    "RecordInfo",
    "SleepNightDataset",
    "SleepSequenceDataset",
    "SleepStore",
    "SleepWindowDataset",
    "StageSample",
    "SubjectSplit",
    "create_store",
    "draw_labels",
    "draw_named_labels",
    "from_braindecode",
    "instance_normalize",
    "make_pretraining_pools",
    "make_subject_split",
    "records_from_store",
    "sample_windows_per_stage",
    "time_of_night",
    "to_braindecode",
    "write_record",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
