"""Nights per minute of ``partnd ingest DIR`` against a loop of single-file ``partnd ingest`` calls.

A directory of Sleep-EDF-like nights is generated (cached in ``--workdir``): per night a
``SC4ssNE0-PSG.edf`` with ``EEG Fpz-Cz``, ``EEG Pz-Oz`` and ``EOG horizontal`` at 100 Hz (white
noise, 20 µV; written with :func:`mne.export.export_raw`) and a ``SC4ssNEC-Hypnogram.edf`` of R&K
stage runs (pyedflib). Then, each timed from the shell's view (wall time of the subprocesses,
imports included, as a user meets them):

- **loop**: one ``partnd ingest PSG HYPNOGRAM --out A --channels sleep-edf --record-id ID
  --subject-id SUBJECT`` per night, one after the other (what a user did before dataset ingest);
- **dataset**: one ``partnd ingest DIR --out B --n-jobs N --no-progress``.

It prints nights per minute of each, and whether both stores hold the same records with identical
windows, stages and start times.

Example::

    python benchmarks/bench_dataset_ingest.py --nights 8 --hours 8 --n-jobs 2 \
        --workdir /tmp/partnd-bench-ingest
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

SFREQ = 100.0
RK = ["Sleep stage W", "Sleep stage 1", "Sleep stage 2", "Sleep stage 3", "Sleep stage 4"]
RK += ["Sleep stage R", "Movement time"]


def write_night(folder: Path, index: int, hours: float) -> tuple[str, str]:
    """One Sleep-EDF-like night; returns ``(record id, subject id)``."""
    import mne
    import pyedflib

    subject, night = index // 2, index % 2 + 1
    stem = f"SC4{subject:02d}{night}"
    psg, hypnogram = folder / f"{stem}E0-PSG.edf", folder / f"{stem}EC-Hypnogram.edf"
    if not (psg.exists() and hypnogram.exists()):
        rng = np.random.default_rng(index)
        n = round(hours * 3600 * SFREQ)
        names = ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal"]
        info = mne.create_info(names, SFREQ, ["eeg", "eeg", "eog"])
        raw = mne.io.RawArray(rng.standard_normal((3, n)) * 20e-6, info, verbose="error")
        raw.set_meas_date(datetime(1989, 4, 24, 16, 13, tzinfo=timezone.utc))
        mne.export.export_raw(psg, raw, overwrite=True, verbose="error")
        writer = pyedflib.EdfWriter(str(hypnogram), 0, file_type=pyedflib.FILETYPE_EDFPLUS)
        writer.setStartdatetime(datetime(1989, 4, 24, 16, 13))
        onset, end = 0.0, hours * 3600
        while onset < end:
            run = 30.0 * int(rng.integers(1, 20))
            writer.writeAnnotation(onset, min(run, end - onset), RK[int(rng.integers(len(RK)))])
            onset += run
        writer.close()
    return f"{stem}E0", stem[:5]


def _run(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=8)
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/partnd-bench-ingest"))
    args = parser.parse_args()
    data = args.workdir / f"sleep-edf-{args.nights}x{args.hours:g}h"
    data.mkdir(parents=True, exist_ok=True)
    records = [write_night(data, index, args.hours) for index in range(args.nights)]
    partnd = [sys.executable, "-m", "partnd.cli"]
    loop_store, dataset_store = args.workdir / "loop.zarr", args.workdir / "dataset.zarr"
    for store in (loop_store, dataset_store):
        shutil.rmtree(store, ignore_errors=True)
    loop_seconds = 0.0
    for record_id, subject in records:
        stem = record_id[:6]
        psg = data / f"{record_id}-PSG.edf"
        hypnogram = next(data.glob(f"{stem}??-Hypnogram.edf"))
        loop_seconds += _run(
            [*partnd, "ingest", str(psg), str(hypnogram), "--out", str(loop_store),
             "--channels", "sleep-edf", "--record-id", record_id, "--subject-id", subject]
        )  # fmt: skip
    dataset_seconds = _run(
        [*partnd, "ingest", str(data), "--out", str(dataset_store), "--n-jobs", str(args.n_jobs),
         "--no-progress"]
    )  # fmt: skip
    from partnd.datasets.store import SleepStore

    loop, dataset = SleepStore(loop_store), SleepStore(dataset_store)
    same = loop.record_ids() == dataset.record_ids() and all(
        np.array_equal(loop.stages(r), dataset.stages(r))
        and np.array_equal(loop.start_times(r), dataset.start_times(r))
        and np.array_equal(
            loop.read_windows(r, 0, loop.n_windows(r)),
            dataset.read_windows(r, 0, dataset.n_windows(r)),
        )
        for r in loop.record_ids()
    )
    n = len(records)
    print(f"{n} nights of {args.hours:g} h (Sleep-EDF-like, 3 channels at 100 Hz)")
    print(
        f"loop of single-file partnd ingest: {loop_seconds:.1f} s, "
        f"{60 * n / loop_seconds:.2f} nights/min"
    )
    print(
        f"partnd ingest DIR --n-jobs {args.n_jobs}: {dataset_seconds:.1f} s, "
        f"{60 * n / dataset_seconds:.2f} nights/min ({loop_seconds / dataset_seconds:.2f}x)"
    )
    print(f"same records, windows, stages and start times: {same}")


if __name__ == "__main__":
    main()
