"""Preprocess one 8 h PC18 record with partnd's pipeline and the braindecode way; compare.

The record (13 channels, 200 Hz, int16) is generated with
:func:`partnd.cohort.pc18_cohort.make_pc18_cohort` (cached in ``--workdir``) in a subprocess. Each
pipeline runs in a fresh Python subprocess (``OMP_NUM_THREADS=1``) started by a parent that has
imported nothing heavy, so that its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, interpreter and imports included) is what one
worker needs; a last run under :mod:`tracemalloc` gives the peak of the run's own allocations:

- **partnd**: :func:`partnd.preprocessing.physionet2018.process_record` — SHA-256 of the sources,
  wfdb read of the six EEG channels (int16 -> float32 µV), h5py labels, whole-night FIR band-pass
  (MNE design, float32 FFT overlap-save) keeping every second sample (200 -> 100 Hz), window
  cutting and the atomic zarr write;
- **braindecode**: wfdb ``rdrecord`` (physical, six EEG channels) -> ``mne.io.RawArray`` ->
  ``raw.filter(0.1, 30)`` -> ``raw.resample(100)`` -> stage annotations (one per run of a defined
  stage, from the same per-sample labels) -> braindecode ``create_windows_from_events``
  (30 s windows, preloaded). Nothing is written to disk.

Each pipeline processes the record ``1 + --repeats`` times in its subprocess: the first ("cold")
run pays one-off lazy imports and caches, the fastest of the others ("warm", what every further
record of a batch costs, least disturbed by other load) gives the speed ratio. Both subprocesses
are started first and the parent has them run one record at a time in turn (partnd, braindecode,
braindecode, partnd, ...; the idle one waits on its stdin), so that load from other jobs on a
shared machine falls on both pipelines alike instead of on whichever ran during a busy spell;
their memory is measured per process as before. It prints each wall
time, the speed ratio (goal >= 3x), each peak memory (goal <= 1 GB), whether the window labels are
identical, how the window starts differ, the largest difference between the two pipelines' window
values (when their sample grids coincide), the store's compression ratio and its decode time per
window.

Example::

    python benchmarks/bench_preprocessing.py --hours 8 --workdir /tmp/partnd-bench
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "run_braindecode", "run_partnd"]

STAGE_NAMES = ("W", "N1", "N2", "N3", "REM")
RUN, FINISH = "run", "finish"
MEGABYTE = 1024.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MEGABYTE


def _partnd_once(record_dir: Path, out: Path) -> tuple[float, None]:
    from partnd.preprocessing.pc18_reader import PC18_EEG_CHANNELS, PC18Record
    from partnd.preprocessing.physionet2018 import PC18_SOURCE_SFREQ, RecordTask, process_record
    from partnd.preprocessing.pipeline import PreprocessingConfig, open_or_create_store

    config = PreprocessingConfig()
    metadata = config.store_metadata({"dataset": "benchmark"}, PC18_SOURCE_SFREQ)
    store = open_or_create_store(
        out,
        config,
        list(PC18_EEG_CHANNELS),
        {**metadata, "signal_dtype": "float32"},
        overwrite=True,
    )
    record = PC18Record(record_dir.name, "training", record_dir)
    started = time.perf_counter()
    _, outcome, entry = process_record(RecordTask(record, store.path, config, "float32"))
    seconds = time.perf_counter() - started
    if outcome != "done":
        raise RuntimeError(f"partnd pipeline failed: {entry}")
    return seconds, None


def _measure(run_once: Callable[[], tuple[float, Any]]) -> tuple[dict[str, float], Any]:
    """Run once per ``run`` line on stdin (printing its time), until ``finish``; then peak RSS and
    a traced run.

    Returns:
        The timing/memory fields of a result row (the first run is cold, the fastest other one
        warm), and what the last run returned.
    """
    baseline_mb = _peak_mb()
    times: list[float] = []
    result = None
    for line in sys.stdin:
        if line.strip() != RUN:
            break
        seconds, result = run_once()
        times.append(seconds)
        print(json.dumps({"seconds": seconds}), flush=True)
    cold, warm = times[0], min(times[1:] or times)
    peak_mb = _peak_mb()
    tracemalloc.start()
    run_once()
    traced_mb = tracemalloc.get_traced_memory()[1] / MEGABYTE**2
    tracemalloc.stop()
    row = {
        "cold_seconds": cold,
        "seconds": warm,
        "peak_mb": peak_mb,
        "traced_mb": traced_mb,
        "import_peak_mb": baseline_mb,
    }
    return row, result


def run_partnd(record_dir: Path, out: Path) -> dict[str, Any]:
    """Preprocess the record into ``out`` with partnd's worker, once per ``run`` line on stdin."""
    from partnd.datasets.store import SleepStore
    from partnd.preprocessing.physionet2018 import process_record

    del process_record
    row, _ = _measure(lambda: _partnd_once(record_dir, out))
    reader = SleepStore(out)
    start_times = reader.start_times(record_dir.name)
    return {
        **row,
        "stages": reader.stages(record_dir.name).tolist(),
        "start_samples_200hz": np.rint(start_times * 200).astype(int).tolist(),
    }


def _braindecode_once(record_dir: Path) -> tuple[float, Any]:
    import mne
    import wfdb
    from braindecode.datasets import BaseConcatDataset, RawDataset
    from braindecode.preprocessing import create_windows_from_events

    from partnd.preprocessing.pc18_reader import PC18_EEG_CHANNELS, read_sample_stages

    record_path = str(record_dir / record_dir.name)
    started = time.perf_counter()
    record = wfdb.rdrecord(record_path, channel_names=list(PC18_EEG_CHANNELS))
    info = mne.create_info(list(record.sig_name), record.fs, "eeg")
    raw = mne.io.RawArray(record.p_signal.T * 1e-6, info)
    del record
    stages = read_sample_stages(record_dir / f"{record_dir.name}-arousal.mat", raw.n_times)
    changes = np.flatnonzero(np.diff(stages, prepend=-3, append=-3))
    runs = [(start, stop, stages[start]) for start, stop in itertools.pairwise(changes)]
    defined = [(start, stop, code) for start, stop, code in runs if code >= 0]
    raw.set_annotations(
        mne.Annotations(
            [start / raw.info["sfreq"] for start, _, _ in defined],
            [(stop - start) / raw.info["sfreq"] for start, stop, _ in defined],
            [STAGE_NAMES[code] for _, _, code in defined],
        )
    )
    raw.filter(0.1, 30.0)
    raw.resample(100.0)
    windows = create_windows_from_events(
        BaseConcatDataset([RawDataset(raw, target_name=None)]),
        window_size_samples=3000,
        window_stride_samples=3000,
        mapping={name: code for code, name in enumerate(STAGE_NAMES)},
        preload=True,
    )
    data = np.stack([windows[index][0] for index in range(len(windows))]).astype(np.float32)
    labels = np.array([windows[index][1] for index in range(len(windows))])
    seconds = time.perf_counter() - started
    starts = windows.datasets[0].metadata["i_start_in_trial"].to_numpy()
    return seconds, (data * 1e6, labels, starts)


def run_braindecode(record_dir: Path, out: Path) -> dict[str, Any]:
    """Preprocess the record the braindecode way once per ``run`` line on stdin; save windows."""
    import braindecode.preprocessing
    import mne

    del braindecode.preprocessing
    mne.set_log_level("ERROR")
    row, (data, labels, starts) = _measure(lambda: _braindecode_once(record_dir))
    np.savez(out, data=data, labels=labels, starts=starts)
    return {**row, "stages": labels.tolist(), "start_samples": starts.tolist()}


def generate_record(workdir: Path, hours: float, seed: int) -> dict[str, Any]:
    """Generate (or reuse) a one-record training cohort; returns the record directory."""
    from partnd.cohort.pc18_cohort import make_pc18_cohort

    cohort = make_pc18_cohort(
        workdir / f"cohort-{hours:g}h-seed{seed}",
        n_records=1,
        hours=hours,
        seed=seed,
        test_fraction=0.0,
        progress=False,
        overwrite=True,
    )
    return {"record_dir": str(cohort.training_records[0])}


def _child_command(pipeline: str, first: Path, second: Path, hours: float, seed: int) -> list[str]:
    command = [sys.executable, __file__, "--child", pipeline, str(first), str(second)]
    return [*command, "--hours", str(hours), "--seed", str(seed)]


_CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _generate(workdir: Path, hours: float, seed: int) -> dict[str, Any]:
    command = _child_command("generate", workdir, workdir, hours, seed)
    env = {**os.environ, **_CHILD_ENV}
    completed = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


def _read_reply(child: subprocess.Popen, log: Path) -> dict[str, Any]:
    """The next JSON line the child prints (other output is skipped)."""
    assert child.stdout is not None
    while line := child.stdout.readline():
        if line.startswith("{"):
            return dict(json.loads(line))
    child.wait()
    raise RuntimeError(f"{' '.join(child.args)} failed:\n{log.read_text()[-4000:]}")


def _run_in_turn(
    pipelines: dict[str, tuple[Path, Path]], workdir: Path, hours: float, seed: int, runs: int
) -> dict[str, dict[str, Any]]:
    """Start one subprocess per pipeline and have them process the record ``runs`` times each,
    one run at a time, alternating (ABBA...); return each subprocess's result row."""
    children: dict[str, tuple[subprocess.Popen, Path]] = {}
    env = {**os.environ, **_CHILD_ENV}
    for name, (first, second) in pipelines.items():
        log = workdir / f"{name}.log"
        with open(log, "w") as stderr:
            child = subprocess.Popen(
                _child_command(name, first, second, hours, seed),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        children[name] = (child, log)
    names = list(pipelines)
    for index in range(runs):
        for name in names if index % 2 == 0 else names[::-1]:
            child, log = children[name]
            assert child.stdin is not None
            child.stdin.write(RUN + "\n")
            child.stdin.flush()
            _read_reply(child, log)
    rows = {}
    for name, (child, log) in children.items():
        assert child.stdin is not None
        child.stdin.write(FINISH + "\n")
        child.stdin.close()
        rows[name] = _read_reply(child, log)
        child.wait()
    return rows


def _decode_time_per_window(store_path: Path, record_id: str) -> tuple[float, float]:
    from partnd.datasets.store import SleepStore

    store = SleepStore(store_path)
    array = store.signal_array(record_id)
    chunk = store.chunk_windows(record_id)
    n_windows = store.n_windows(record_id)
    started = time.perf_counter()
    for start in range(0, n_windows, chunk):
        store.read_windows(record_id, start, min(start + chunk, n_windows))
    per_window = (time.perf_counter() - started) / n_windows
    signal_dir = store_path / "records" / record_id / "signal"
    stored = sum(path.stat().st_size for path in signal_dir.rglob("*") if path.is_file())
    ratio = n_windows * array.shape[1] * array.shape[2] * 4 / stored
    return per_window, ratio


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/partnd-bench-preprocessing"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="warm runs; the fastest counts")
    parser.add_argument("--child", nargs=3, metavar=("PIPELINE", "RECORD_DIR", "OUT"))
    args = parser.parse_args(argv)
    if args.child:
        pipeline, first, second = args.child
        if pipeline == "generate":
            result = generate_record(Path(first), args.hours, args.seed)
        else:
            run = run_partnd if pipeline == "partnd" else run_braindecode
            result = run(Path(first), Path(second))
        print(json.dumps(result))
        return 0

    args.workdir.mkdir(parents=True, exist_ok=True)
    generated = _generate(args.workdir, args.hours, args.seed)
    record_dir = Path(generated["record_dir"])
    store_path = args.workdir / "bench.zarr"
    windows_path = args.workdir / "braindecode_windows.npz"
    rows = _run_in_turn(
        {"partnd": (record_dir, store_path), "braindecode": (record_dir, windows_path)},
        args.workdir,
        args.hours,
        args.seed,
        1 + args.repeats,
    )
    ours, theirs = rows["partnd"], rows["braindecode"]

    from partnd.datasets.store import SleepStore

    store = SleepStore(store_path)
    first_sample = store.record_attrs(record_dir.name)["first_window_sample"]
    ours_starts = np.asarray(ours["start_samples_200hz"]) / 2.0
    theirs_starts = np.asarray(theirs["start_samples"], dtype=np.float64)
    same_count = len(ours_starts) == len(theirs_starts)
    labels_identical = same_count and ours["stages"] == theirs["stages"]
    start_offset = (theirs_starts - ours_starts) if same_count else np.array([np.nan])
    value_difference = "n/a (grids differ by half a 100 Hz sample)"
    if same_count and np.all(start_offset == 0):
        braindecode_windows = np.load(windows_path)["data"]
        signal = store.read_windows(record_dir.name, 1, len(ours_starts) - 1)
        difference = float(np.abs(signal - braindecode_windows[1:-1]).max())
        value_difference = f"{difference:.3f} µV"
    per_window, ratio = _decode_time_per_window(store_path, record_dir.name)

    print(
        f"record {record_dir.name}: {args.hours:g} h, 13 channels at 200 Hz, "
        f"first scored sample {first_sample}"
    )
    print(
        f"{'pipeline':<12} {'warm s':>7} {'cold s':>7} {'peak MB':>8} {'after imports MB':>17} "
        f"{'traced MB':>10} {'windows':>8}"
    )
    for name, result in (("partnd", ours), ("braindecode", theirs)):
        print(
            f"{name:<12} {result['seconds']:>7.2f} {result['cold_seconds']:>7.2f} "
            f"{result['peak_mb']:>8.0f} {result['import_peak_mb']:>17.0f} "
            f"{result['traced_mb']:>10.0f} {len(result['stages']):>8}"
        )
    print(
        f"speed ratio (braindecode / partnd): {theirs['seconds'] / ours['seconds']:.2f}x "
        "(goal >= 3x)"
    )
    print(f"peak memory of the partnd worker: {ours['peak_mb']:.0f} MB (goal <= 1024 MB)")
    print(f"window labels identical: {labels_identical}")
    print(
        "braindecode window start - partnd window start (100 Hz samples): "
        f"{sorted(set(np.round(start_offset, 3).tolist()))}"
    )
    print(f"largest |partnd - braindecode| window value difference: {value_difference}")
    print(f"store: compression ratio {ratio:.2f}, decode {per_window * 1e6:.0f} µs per window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
