"""End-to-end tests of pretraining: learning, run directory, resume, failures, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from partnd._validation import InputError
from partnd.datasets.adapters import as_signal_dataset
from partnd.engine import compilation
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.engine.trainer import NonFiniteLossError
from partnd.patches.sampling import OffGridSampler
from partnd.patches.targets import relative_targets, sample_pairs
from partnd.pretraining import load_encoder, pretrain


def ramp_1d(n: int, seed: int = 0) -> np.ndarray:
    """[n, 2, 400]: a rising and a falling ramp plus noise, so content reveals the time."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(-1.0, 1.0, 400)
    clean = np.stack([ramp, -ramp])
    return (clean + 0.05 * rng.standard_normal((n, 2, 400))).astype(np.float32)


def field_2d(n: int, seed: int = 0) -> np.ndarray:
    """[n, 1, 16, 16]: ``2 i/16 + 4 (j/16)^2`` plus noise. The patch mean reveals the row once the
    column is known, and the column is revealed by the horizontal slope (which grows with j); a
    purely linear field would only reveal one combination of the two coordinates."""
    rng = np.random.default_rng(seed)
    rows = np.arange(16)[:, None] / 16
    columns = np.arange(16)[None, :] / 16
    clean = 2 * rows + 4 * columns**2
    return (clean[None, None] + 0.05 * rng.standard_normal((n, 1, 16, 16))).astype(np.float32)


def target_variance(data: np.ndarray, patch_size: int, num_patches: int | None) -> float:
    """Variance of PART's targets under the sampler: the MSE of the best constant prediction."""
    x = torch.from_numpy(data)
    generator = torch.Generator().manual_seed(123)
    batch = OffGridSampler(x.dim() - 2, patch_size, num_patches)(x, generator=generator)
    ref, tgt = sample_pairs(batch.num_patches, 256, generator=generator)
    targets = relative_targets(batch.centers, batch.sizes, ref, tgt)
    return float(targets.reshape(-1, targets.shape[-1]).var(dim=0).mean())


def epoch_losses(history: list[dict]) -> list[float]:
    return [record["loss"] for record in history if record["phase"] == "epoch"]


def deterministic(history: list[dict]) -> list[tuple]:
    """The records without their timing fields."""
    return [(r["phase"], r["epoch"], r["step"], r["loss"], r["lr"]) for r in history]


def tiny_config(**overrides: object) -> PretrainConfig:
    base = {
        "patch_size": 20,
        "num_patches": 6,
        "num_pairs": 12,
        "epochs": 2,
        "batch_size": 4,
    }
    return PretrainConfig.preset("test", **{**base, **overrides})


def test_pretrain_1d_learns_relative_time(tmp_path: Path) -> None:
    """No position embedding: the loss falls only because the content reveals the time.

    60 epochs: at 30 the final nmse was 0.085-0.10 on AVX-512 machines but 0.10-0.13 on an
    AVX2-only one (other kernels, another trajectory), too close to the bound; at 60 it is
    0.015-0.024 on the latter."""
    data = ramp_1d(64)
    variance = target_variance(data, 20, 10)
    config = PretrainConfig.preset(
        "test", patch_size=20, num_patches=10, num_pairs=90, epochs=60, batch_size=8, lr=3e-3
    )
    result = pretrain(data, out_dir=tmp_path / "run", config=config)
    assert result.encoder.pos_embed is None
    losses = epoch_losses(result.history)
    assert variance > 30  # centres uniform over 380 samples, in units of P = 20
    assert losses[0] > 0.5 * variance
    assert losses[-1] < 0.1 * variance
    epochs = [r for r in result.history if r["phase"] == "epoch"]
    assert epochs[0]["nmse"] > 0.5 and epochs[-1]["nmse"] < 0.1  # the library's own diagnostic
    assert epochs[-1]["r2_t"] > 0.9 and epochs[-1]["euclid"] < 0.5 * epochs[-1]["euclid_floor"]


def test_noise_gives_nothing_to_learn_and_the_diagnostic_says_so(tmp_path: Path) -> None:
    """White noise carries no position: the loss stays at the content-free floor (nmse ~ 1)."""
    noise = np.random.default_rng(0).standard_normal((64, 2, 400)).astype(np.float32)
    config = PretrainConfig.preset(
        "test", patch_size=20, num_patches=10, num_pairs=90, epochs=10, batch_size=8, lr=3e-3
    )
    result = pretrain(noise, out_dir=tmp_path / "run", config=config)
    last = [r for r in result.history if r["phase"] == "epoch"][-1]
    assert 0.9 < last["nmse"] < 1.15 and abs(last["r2_t"]) < 0.15


def test_pretrain_2d_learns_relative_position(tmp_path: Path) -> None:
    data = field_2d(64)
    variance = target_variance(data, 4, None)
    config = PretrainConfig.preset(
        "test", patch_size=4, num_pairs=64, epochs=25, batch_size=8, lr=3e-3, head="pairwise_mlp"
    )
    result = pretrain(data, out_dir=tmp_path / "run", config=config)
    losses = epoch_losses(result.history)
    assert result.model.sampler.num_patches_for((16, 16)) == 16
    assert losses[-1] < 0.1 * variance


def test_run_directory_contents(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = pretrain(ramp_1d(16), out_dir=out, config=tiny_config(log_every_steps=2))
    assert {p.name for p in out.iterdir()} == {
        "config.json",
        "meta.json",
        "metrics.jsonl",
        "metrics.csv",
        "tb",
        "checkpoints",
        "encoder.pt",
    }
    assert PretrainConfig.from_json(out / "config.json") == result.config
    meta = json.loads((out / "meta.json").read_text())
    assert meta["world_size"] == 1
    assert meta["torch_version"] == torch.__version__
    assert meta["resolved"]["steps_per_epoch"] == 4
    assert meta["resolved"]["data"] == {"in_chans": 2, "spatial_shape": [400]}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records == result.history
    assert [r["step"] for r in records if r["phase"] == "train"] == [2, 4, 6, 8]
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    columns = csv_lines[0].split(",")
    assert columns[:4] == ["phase", "epoch", "step", "loss"]
    assert {"lr", "nmse", "r2_t", "mse_t", "mse_floor_t", "euclid", "euclid_floor"} <= set(columns)
    assert all("nmse" in r for r in records if r["phase"] in ("train", "epoch"))
    assert len(csv_lines) == 1 + len(records)
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tb").iterdir())
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "epoch_0000.pt",
        "epoch_0001.pt",
        "last.pt",
    ]
    encoder = load_encoder(out)
    for name, value in result.encoder.state_dict().items():
        assert torch.equal(value, encoder.state_dict()[name])


def _assert_same_state(left: Path, right: Path) -> None:
    a, b = load_checkpoint(left), load_checkpoint(right)
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for name in a["ema"]["module"]:
        assert torch.equal(a["ema"]["module"][name], b["ema"]["module"][name]), name
    assert a["ema"]["updates"] == b["ema"]["updates"]
    for param_id, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][param_id][key]), (param_id, key)
    assert a["trainer"] == b["trainer"]
    assert a["scheduler"] == b["scheduler"]


RESUME_CONFIG = {
    "epochs": 2,
    "ema_decay": 0.9,
    "encoder_overrides": {"drop_path_rate": 0.1},
    "warmup_epochs": 1.0,
}


@pytest.mark.parametrize("method", ["part_grid", "mae", "mp3", "droppos"])
def test_every_method_resumes_exactly(tmp_path: Path, method: str) -> None:
    data = ramp_1d(16)
    config = tiny_config(method=method, ema_decay=0.9)
    full = pretrain(data, out_dir=tmp_path / "full", config=config)
    pretrain(data, out_dir=tmp_path / "cut", config=config, max_steps=6)
    resumed = pretrain(data, out_dir=tmp_path / "cut", config=config, resume=True)
    _assert_same_state(tmp_path / "full/checkpoints/last.pt", tmp_path / "cut/checkpoints/last.pt")
    assert deterministic(full.history) == deterministic(resumed.history)


@pytest.mark.parametrize("stop_after", [4, 6], ids=["epoch_end", "mid_epoch"])
def test_resume_equals_uninterrupted(tmp_path: Path, stop_after: int) -> None:
    data = ramp_1d(16)
    config = tiny_config(**RESUME_CONFIG)
    full = pretrain(data, out_dir=tmp_path / "full", config=config)
    pretrain(data, out_dir=tmp_path / "cut", config=config, max_steps=stop_after)
    stopped = load_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")
    assert stopped["trainer"]["step"] == stop_after
    resumed = pretrain(data, out_dir=tmp_path / "cut", resume=True, max_steps=None)
    _assert_same_state(tmp_path / "full/checkpoints/last.pt", tmp_path / "cut/checkpoints/last.pt")
    for name, value in full.encoder.state_dict().items():
        assert torch.equal(value, resumed.encoder.state_dict()[name])
    assert deterministic(resumed.history) == deterministic(full.history)


def test_a_compiled_run_equals_the_eager_run_and_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compile="default"``: the same losses as the eager run (the same draws), the encoder
    weights within float rounding, and an interrupted compiled run resumes to the uninterrupted
    one's state (``aot_eager``: the engine's tracing without code generation)."""
    monkeypatch.setattr(compilation, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    data = ramp_1d(16)
    config = tiny_config(**RESUME_CONFIG)
    eager = pretrain(data, out_dir=tmp_path / "eager", config=config)
    compiled = config.replace(compile="default")
    full = pretrain(data, out_dir=tmp_path / "full", config=compiled)
    pretrain(data, out_dir=tmp_path / "cut", config=compiled, max_steps=6)
    resumed = pretrain(data, out_dir=tmp_path / "cut", resume=True, max_steps=None)
    meta = json.loads((tmp_path / "full" / "meta.json").read_text())
    assert meta["resolved"]["compile"] == "default"
    _assert_same_state(tmp_path / "full/checkpoints/last.pt", tmp_path / "cut/checkpoints/last.pt")
    assert deterministic(resumed.history) == deterministic(full.history)
    np.testing.assert_allclose(epoch_losses(full.history), epoch_losses(eager.history), rtol=1e-4)
    for name, value in eager.encoder.state_dict().items():
        torch.testing.assert_close(full.encoder.state_dict()[name], value, rtol=1e-3, atol=1e-5)


class CrashingDataset(Dataset):
    """Wraps an array; the read after ``reads_before_crash`` reads raises while ``armed``."""

    def __init__(self, data: np.ndarray, reads_before_crash: int) -> None:
        self.data, self.reads_left, self.armed = data, reads_before_crash, True

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.armed:
            if self.reads_left == 0:
                raise RuntimeError("simulated crash")
            self.reads_left -= 1
        return torch.from_numpy(self.data[index])


def test_resume_after_crash_with_step_checkpoints(tmp_path: Path) -> None:
    data = ramp_1d(16)
    config = tiny_config(**RESUME_CONFIG, checkpoint_every_steps=1)
    pretrain(data, out_dir=tmp_path / "full", config=config)
    # item 0 is read once to infer the shape, then 16 reads per epoch: crash in step 7 (epoch 1)
    crashing = CrashingDataset(data, reads_before_crash=1 + 16 + 2 * 4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        pretrain(crashing, out_dir=tmp_path / "cut", config=config)
    assert load_checkpoint(tmp_path / "cut/checkpoints/last.pt")["trainer"]["step"] == 6
    crashing.armed = False
    pretrain(crashing, out_dir=tmp_path / "cut", resume=True)
    _assert_same_state(tmp_path / "full/checkpoints/last.pt", tmp_path / "cut/checkpoints/last.pt")


def test_different_seed_gives_different_weights(tmp_path: Path) -> None:
    data = ramp_1d(16)
    a = pretrain(data, out_dir=tmp_path / "a", config=tiny_config(epochs=1))
    b = pretrain(data, out_dir=tmp_path / "b", config=tiny_config(epochs=1, seed=1))
    assert not torch.equal(a.encoder.patch_embed.weight, b.encoder.patch_embed.weight)


def test_run_directory_refusal_overwrite_and_resume_rules(tmp_path: Path) -> None:
    data = ramp_1d(8)
    out = tmp_path / "run"
    pretrain(data, out_dir=out, config=tiny_config(epochs=1))
    with pytest.raises(InputError, match="non-empty directory"):
        pretrain(data, out_dir=out, config=tiny_config(epochs=1))
    (out / "stale.txt").write_text("old")
    pretrain(data, out_dir=out, config=tiny_config(epochs=1), overwrite=True)
    assert not (out / "stale.txt").exists()
    with pytest.raises(InputError, match="resume=True and overwrite=True"):
        pretrain(data, out_dir=out, resume=True, overwrite=True)
    with pytest.raises(InputError, match=r"config\.json \(a run that started\)"):
        pretrain(data, out_dir=tmp_path / "empty", resume=True)
    with pytest.raises(InputError, match=r"num_pairs: 12 -> 3"):
        pretrain(data, out_dir=out, config=tiny_config(epochs=1), resume=True, num_pairs=3)


def test_resume_refuses_other_data_naming_the_difference(tmp_path: Path) -> None:
    out = tmp_path / "run"
    pretrain(ramp_1d(8), out_dir=out, config=tiny_config(epochs=1))
    with pytest.raises(
        InputError,
        match=r"dataset: .* when resume=True, got other data "
        r"\(num_items: 8 -> 12; other item values\)",
    ):
        pretrain(ramp_1d(12), out_dir=out, resume=True, epochs=2)
    with pytest.raises(InputError, match=r"other data \(other item values\)"):
        pretrain(ramp_1d(8, seed=1), out_dir=out, resume=True, epochs=2)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["data"]["dataset"]["num_items"] == 8 and "resumes" not in meta
    assert pretrain(ramp_1d(8), out_dir=out, resume=True, epochs=2).config.epochs == 2


def test_a_run_stopped_before_its_first_checkpoint_restarts_with_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    pretrain(ramp_1d(8), out_dir=out, config=tiny_config(epochs=1, num_pairs=5))
    for stale in ("checkpoints/last.pt", "checkpoints/epoch_0000.pt", "encoder.pt"):
        (out / stale).unlink()  # as a run killed (SIGKILL) during its first epoch leaves it
    with pytest.raises(InputError, match="pass overwrite=True to clear it, or resume=True"):
        pretrain(ramp_1d(8), out_dir=out, config=tiny_config(epochs=1))
    result = pretrain(ramp_1d(8), out_dir=out, resume=True)
    assert result.config.num_pairs == 5  # the stored configuration
    assert [r["step"] for r in result.history if r["phase"] == "epoch"] == [2]
    assert (out / "encoder.pt").is_file()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["phase"] for line in lines] == ["train", "train", "epoch"]


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path: Path) -> None:
    data = ramp_1d(8) * np.float32(1e30)  # finite input whose activations overflow
    with pytest.raises(NonFiniteLossError):
        pretrain(data, out_dir=tmp_path / "new", config=tiny_config())
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(NonFiniteLossError):
        pretrain(data, out_dir=tmp_path / "empty", config=tiny_config())
    assert list((tmp_path / "empty").iterdir()) == []  # a folder it did not create stays


def test_resume_with_more_epochs_continues(tmp_path: Path) -> None:
    data = ramp_1d(8)
    out = tmp_path / "run"
    pretrain(data, out_dir=out, config=tiny_config(epochs=1))
    result = pretrain(data, out_dir=out, resume=True, epochs=2)
    assert result.config.epochs == 2
    assert [r["epoch"] for r in result.history if r["phase"] == "epoch"] == [0, 1]
    assert len(json.loads((out / "meta.json").read_text())["resumes"]) == 1


def test_init_weights_from_run_directory(tmp_path: Path) -> None:
    data = ramp_1d(8)
    first = pretrain(data, out_dir=tmp_path / "a", config=tiny_config(epochs=1))
    second = pretrain(
        data,
        out_dir=tmp_path / "b",
        config=tiny_config(epochs=1, lr=1e-9, min_lr=0.0, weight_decay=0.0),
        init_weights=tmp_path / "a",
    )
    assert torch.allclose(first.encoder.patch_embed.weight, second.encoder.patch_embed.weight)
    with pytest.raises(InputError, match="init_weights"):
        pretrain(
            data,
            out_dir=tmp_path / "c",
            config=tiny_config(epochs=1, encoder="vit_test_wide"),
            init_weights=tmp_path / "a",
        )
    with pytest.raises(InputError, match=r"^init_weights: expected .*no such file"):
        pretrain(
            data, out_dir=tmp_path / "d", config=tiny_config(epochs=1), init_weights=tmp_path / "x"
        )
    assert not (tmp_path / "d").exists()


def test_ema_weights_are_returned(tmp_path: Path) -> None:
    result = pretrain(ramp_1d(8), out_dir=tmp_path / "run", config=tiny_config(ema_decay=0.5))
    checkpoint = load_checkpoint(tmp_path / "run/checkpoints/last.pt")
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, checkpoint["ema"]["module"][name])
    assert any(
        not torch.equal(checkpoint["ema"]["module"][name], checkpoint["model"][name])
        for name in checkpoint["model"]
    )


def test_non_finite_loss_stops_with_step_epoch_and_lr(tmp_path: Path) -> None:
    data = ramp_1d(8) * np.float32(1e30)  # finite input whose activations overflow
    with pytest.raises(NonFiniteLossError, match=r"step 1 \(epoch 0, batch 0\).*learning rate"):
        pretrain(data, out_dir=tmp_path / "run", config=tiny_config())
    assert not (tmp_path / "run/checkpoints/last.pt").exists()


def test_nan_in_data_names_the_item(tmp_path: Path) -> None:
    data = ramp_1d(16)
    data[5, 1, 17] = np.nan
    with pytest.raises(InputError, match=r"dataset\[5\]: expected only finite values"):
        pretrain(data, out_dir=tmp_path / "run", config=tiny_config())


def test_batches_read_at_once_stacked_in_their_dtype_and_checked() -> None:
    """``SignalDataset.batch``: the stacked items (rounded to bf16 when asked), and a non-finite
    item named as a per-item read names it."""
    data = torch.from_numpy(ramp_1d(6))
    dataset, _ = as_signal_dataset(data)
    torch.testing.assert_close(dataset.batch([4, 0, 2]), data[[4, 0, 2]], rtol=0, atol=0)
    rounded = dataset.batch([1, 3], torch.bfloat16)
    assert rounded.dtype == torch.bfloat16
    assert torch.equal(rounded, data[[1, 3]].bfloat16())
    data[3, 1, 17] = float("inf")
    with pytest.raises(InputError, match=r"dataset\[3\]: expected only finite values"):
        as_signal_dataset(data)[0].batch([1, 3])


@pytest.mark.parametrize("method", ["part", "mae"])
def test_bf16_batches_from_workers(tmp_path: Path, method: str) -> None:
    """``loader_dtype="bfloat16"``: a worker ships the batch in bf16 (half the bytes), the
    engine casts it back on the device. Under bf16 autocast PART's whole-sample patches reach
    the patch embedding's bf16 product unchanged, so its run is the float32-shipped run; MAE's
    float32 pixel targets see the inputs rounded: its losses move, within bf16 rounding."""
    data = ramp_1d(16)
    runs = {}
    for dtype in ("float32", "bfloat16"):
        config = tiny_config(
            method=method, precision="bf16", num_workers=1, loader_dtype=dtype, epochs=1
        )
        runs[dtype] = pretrain(data, out_dir=tmp_path / dtype, config=config)
        meta = json.loads((tmp_path / dtype / "meta.json").read_text())
        assert meta["resolved"]["loader_dtype"] == dtype
    shipped, reference = (
        epoch_losses(runs["bfloat16"].history),
        epoch_losses(runs["float32"].history),
    )
    if method == "part":
        assert deterministic(runs["bfloat16"].history) == deterministic(runs["float32"].history)
    else:
        assert shipped != reference
        np.testing.assert_allclose(shipped, reference, rtol=1e-2)


@pytest.mark.parametrize(
    ("data", "overrides", "message"),
    [
        (np.zeros((0, 2, 400), np.float32), {}, "non-empty dataset"),
        (np.zeros((8, 400), np.float32), {}, r"\[N, C, \*spatial\]"),
        (np.zeros((8, 2, 10), np.float32), {}, "at least the patch size"),
        (np.zeros((8, 2, 400), np.float32), {"num_pairs": 0}, "num_pairs"),
        (np.zeros((8, 2, 400), np.float32), {"epochz": 1}, "unknown name.*'epochz'"),
        (np.zeros((8, 2, 400), np.float32), {"patch_size": (20, 20)}, "1 spatial dimension"),
        (np.zeros((3, 2, 400), np.float32), {}, "at least batch_size x world_size = 4"),
        (np.zeros((8, 2, 400), np.float32), {"num_patches": 1}, r"num_patches: .*got 1 for"),
        (np.zeros((8, 2, 410), np.float32), {}, r"patch_size: .*divides .* \(410,\)"),
        (
            np.zeros((8, 2, 20), np.float32),
            {"num_patches": None},
            r"^PretrainConfig\.num_patches: expected at least 2 patches.*got 1 for items",
        ),
    ],
    ids=[
        "empty",
        "rank",
        "too_short",
        "num_pairs",
        "unknown_field",
        "patch_rank",
        "too_few",
        "one_patch",
        "one_grid_tile",
        "patch_leaves_a_remainder",
    ],
)
def test_bad_input(tmp_path: Path, data: np.ndarray, overrides: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        pretrain(data, out_dir=tmp_path / "run", config=tiny_config(), **overrides)
    assert not (tmp_path / "run").exists()  # refused before the run directory is created


def test_inconsistent_item_shapes_name_the_item(tmp_path: Path) -> None:
    items = [torch.zeros(2, 400) for _ in range(7)] + [torch.zeros(2, 399)]
    with pytest.raises(InputError, match=r"dataset\[7\].*\(2, 400\)"):
        pretrain(items, out_dir=tmp_path / "run", config=tiny_config(batch_size=8))


def test_tuple_items_and_tensor_input(tmp_path: Path) -> None:
    data = torch.from_numpy(ramp_1d(8))
    labelled = [(data[i], i % 2) for i in range(8)]
    a = pretrain(labelled, out_dir=tmp_path / "a", config=tiny_config(epochs=1))
    b = pretrain(data, out_dir=tmp_path / "b", config=tiny_config(epochs=1))
    assert torch.equal(a.encoder.patch_embed.weight, b.encoder.patch_embed.weight)


def test_worker_processes_give_the_same_run(tmp_path: Path) -> None:
    data = ramp_1d(16)
    inline = pretrain(data, out_dir=tmp_path / "a", config=tiny_config(epochs=1))
    workers = pretrain(data, out_dir=tmp_path / "b", config=tiny_config(epochs=1, num_workers=2))
    for name, value in inline.model.state_dict().items():
        assert torch.equal(value, workers.model.state_dict()[name]), name


@pytest.mark.parametrize("shape", [(4, 2, 400), (4, 1, 16, 16), (4, 1, 8, 8, 8)])
def test_no_position_embedding_for_any_ndim(shape: tuple[int, ...]) -> None:
    from partnd.datasets.adapters import as_signal_dataset
    from partnd.objectives import build_objective

    _, spec = as_signal_dataset(torch.randn(*shape))
    patch = 20 if len(shape) == 3 else 4
    model = build_objective(tiny_config(patch_size=patch, num_patches=None), spec)
    assert model.encoder.pos_embed is None


def _tensorboard_steps(tb_dir: Path) -> dict[str, list[int]]:
    """Steps of every scalar as TensorBoard shows them (all event files, purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [event.step for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


@pytest.mark.parametrize("stop_after", [4, 6], ids=["epoch_end", "mid_epoch"])
def test_tensorboard_and_jsonl_hold_the_same_steps_after_a_resume(
    tmp_path: Path, stop_after: int
) -> None:
    data = ramp_1d(16)
    config = tiny_config(epochs=3, log_every_steps=1)
    # max_steps stops with a checkpoint at exactly the last logged step
    pretrain(data, out_dir=tmp_path / "cut", config=config, max_steps=stop_after)
    result = pretrain(data, out_dir=tmp_path / "cut", config=config, resume=True)
    records = [
        json.loads(line) for line in (tmp_path / "cut/metrics.jsonl").read_text().splitlines()
    ]
    tensorboard = _tensorboard_steps(tmp_path / "cut" / "tb")
    for phase in ("train", "epoch"):
        expected = [r["step"] for r in records if r["phase"] == phase]
        assert tensorboard[f"{phase}/loss"] == expected, phase
    assert [r["step"] for r in records if r["phase"] == "train"] == list(range(1, 13))
    assert records == result.history
