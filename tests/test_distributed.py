"""A 2-process torchrun (gloo, CPU) pretraining run: ranks stay identical, rank 0 writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("distributed_worker.py")


def run_torchrun(out: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run the worker on 2 CPU processes (gloo); fail the test after 300 s."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(WORKER), str(out), str(results), *extra]
    # A new session, so that a hang can be ended by killing this run's process group only.
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"torchrun timed out:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_pretrain(tmp_path: Path) -> None:
    out, results = tmp_path / "run", tmp_path / "ranks"
    done = run_torchrun(out, results)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # Both ranks trained on different shards yet end with identical weights (DDP synchronised
    # every step without find_unused_parameters, which would have raised otherwise).
    rank0 = torch.load(results / "rank0.pt", weights_only=False)
    rank1 = torch.load(results / "rank1.pt", weights_only=False)
    assert rank0["model"].keys() == rank1["model"].keys()
    for name, value in rank0["model"].items():
        assert torch.equal(value, rank1["model"][name]), name
    assert [r["loss"] for r in rank0["history"]] == [r["loss"] for r in rank1["history"]]

    # Rank 0 alone wrote the run directory: one record per logged step, one event file.
    meta = json.loads((out / "meta.json").read_text())
    assert meta["world_size"] == 2
    assert meta["resolved"]["global_batch_size"] == 8
    assert meta["resolved"]["steps_per_epoch"] == 4  # 32 items / (2 ranks x batch 4)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4, 4, 6, 8, 8]
    assert len(list((out / "tb").iterdir())) == 1
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "epoch_0000.pt",
        "epoch_0001.pt",
        "last.pt",
    ]
    checkpoint = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    assert checkpoint["world_size"] == 2 and len(checkpoint["rng"]) == 2
    assert not torch.equal(checkpoint["rng"][0]["sampling"], checkpoint["rng"][1]["sampling"])
    for name, value in rank0["model"].items():
        assert torch.equal(value, checkpoint["ema"]["module"][name]), name
    assert (out / "encoder.pt").is_file()
    assert done.stderr.count("epoch 1/2") >= 1  # rank 0's progress bar


@pytest.mark.distributed
@pytest.mark.slow
def test_nan_batch_stops_every_rank(tmp_path: Path) -> None:
    done = run_torchrun(tmp_path / "run", tmp_path / "ranks", "nan")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    messages = [(tmp_path / "ranks" / f"rank{r}.error").read_text() for r in range(2)]
    assert sum("dataset[7]: expected only finite values" in m for m in messages) == 1
    assert sum("on another rank" in message for message in messages) == 1


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_pretrain_with_every_ablation_head_and_method(tmp_path: Path) -> None:
    """DDP without find_unused_parameters aborts if any parameter misses a gradient in a step:
    the pairwise-MLP and MLP heads (scale targets), every baseline method, PART across windows,
    relative positioning and temporal shuffling train, and the ranks stay identical."""
    results = tmp_path / "ranks"
    done = run_torchrun(tmp_path / "runs", results, "heads")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    methods = ("part_grid", "mae", "mp3", "droppos", "part_windows", "rp", "ts")
    for head in ("pairwise_mlp", "mlp", *methods):
        rank0 = torch.load(results / f"{head}_rank0.pt", weights_only=False)
        rank1 = torch.load(results / f"{head}_rank1.pt", weights_only=False)
        assert any(not name.startswith("encoder.") for name in rank0["model"]), head
        for name, value in rank0["model"].items():
            assert torch.equal(value, rank1["model"][name]), (head, name)
        steps = [r["step"] for r in rank0["history"] if r["phase"] == "train"]
        assert steps == [1, 2, 3, 4], head  # 32 items / (2 ranks x batch 4)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_pretrain_of_a_compiled_model(tmp_path: Path) -> None:
    """DDP wraps the model compiled in place: the ranks stay identical, and the run gives the
    eager run's losses."""
    results = tmp_path / "ranks"
    done = run_torchrun(tmp_path / "runs", results, "compiled")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {
        (name, rank): torch.load(results / f"{name}_rank{rank}.pt", weights_only=False)
        for name in ("eager", "compiled")
        for rank in (0, 1)
    }
    for name, value in runs[("compiled", 0)]["model"].items():
        assert torch.equal(value, runs[("compiled", 1)]["model"][name]), name
        torch.testing.assert_close(value, runs[("eager", 0)]["model"][name], rtol=1e-3, atol=1e-5)
    losses = {
        name: [r["loss"] for r in runs[(name, 0)]["history"]] for name in ("eager", "compiled")
    }
    assert len(losses["compiled"]) == len(losses["eager"]) > 0
    torch.testing.assert_close(losses["compiled"], losses["eager"], rtol=1e-4, atol=0.0)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_finetune_through_a_linear_probe_phase(tmp_path: Path) -> None:
    """The encoder held for the probe steps joins DDP's gradient reduction when released: the
    ranks stay identical on either side of the boundary."""
    results = tmp_path / "ranks"
    done = run_torchrun(tmp_path / "runs", results, "probe")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(results / f"probe_rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for run in ("probe", "full"):
        for name, value in ranks[0][run].items():
            assert torch.equal(value, ranks[1][run][name]), (run, name)
    encoder = ranks[0]["encoder"]
    for name, value in encoder.items():
        assert torch.equal(ranks[0]["probe"][f"encoder.{name}"], value), name
    assert not torch.equal(
        ranks[0]["full"]["encoder.blocks.0.attn.qkv.weight"], encoder["blocks.0.attn.qkv.weight"]
    )
