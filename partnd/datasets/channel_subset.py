"""A store holding some of another store's channels (``--channels`` of the sleep recipes).

Every reader of a ``partnd-sleep`` store (window datasets, YASA features, models sized by
``len(store.channels)``) reads all of its channels, so a study on a subset reads a store of that
subset: :func:`store_with_channels` writes it once, record by record (each atomically, so an
interrupted copy resumes), with the source's windows, stages, start times and record attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from partnd._validation import check
from partnd.datasets.store import (
    SIGNAL_DTYPES,
    SleepStore,
    create_store,
    remove_incomplete_records,
    write_record,
)

__all__ = ["store_with_channels"]

_CONFIG_KEYS = ("format", "format_version", "sfreq", "window_seconds", "n_times", "channels")
_RECORD_KEYS = ("record_id", "sfreq", "n_windows", "n_labelled", "channel_scale")


def store_with_channels(
    store: SleepStore, channels: Sequence[str], path: str | Path, argument: str = "channels"
) -> SleepStore:
    """``store`` itself when it holds exactly ``channels``, else a store of just those at ``path``.

    Args:
        store: The source store.
        channels: Channel names of the source, in the order wanted.
        path: Where the subset store is written (or completed) when one is needed.
        argument: The caller's name of ``channels``, for errors.

    Returns:
        A store whose channels are ``channels``.

    Raises:
        InputError: ``channels`` is empty, repeats a name, or names a channel ``store`` lacks.
    """
    wanted = list(channels)
    check(
        len(wanted) > 0 and len(set(wanted)) == len(wanted),
        argument,
        "distinct channel names",
        wanted,
    )
    missing = [name for name in wanted if name not in store.channels]
    check(
        not missing,
        argument,
        f"channels of the store {store.path} ({', '.join(store.channels)})",
        ", ".join(missing),
    )
    if wanted == store.channels:
        return store
    metadata = {
        key: value
        for key, value in store.attrs.items()
        if key not in _CONFIG_KEYS and key not in ("stage_names", "created", "library_versions")
    }
    metadata["channels_of"] = {"store": str(store.path), "channels": list(store.channels)}
    subset = create_store(
        path,
        sfreq=store.sfreq,
        channels=wanted,
        window_seconds=float(store.attrs["window_seconds"]),
        stage_names=store.stage_names,
        metadata=metadata,
    )
    remove_incomplete_records(subset.path)
    rows = [store.channels.index(name) for name in wanted]
    done = set(subset.record_ids())
    dtype = str(store.attrs.get("signal_dtype", "float32"))
    dtype = dtype if dtype in SIGNAL_DTYPES else "float32"
    for record in store.record_ids():
        if record in done:
            continue
        attrs = {k: v for k, v in store.record_attrs(record).items() if k not in _RECORD_KEYS}
        write_record(
            subset.path,
            record,
            store.read_windows(record, 0, store.n_windows(record))[:, rows],
            store.stages(record),
            store.start_times(record),
            attrs=attrs,
            dtype=dtype,
        )
    return SleepStore(subset.path)
