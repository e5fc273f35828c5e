"""``precision="auto"``: bf16 only where the device runs it fast, fp32 elsewhere, and recorded."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import partnd
from partnd._validation import InputError
from partnd.engine import precision
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.engine.precision import autocast, fast_bf16, resolve_precision


@pytest.fixture
def cpu_bf16(monkeypatch: pytest.MonkeyPatch):
    """Pretend the CPU has (True) or lacks (False) bf16 kernels; warnings fire again."""

    def set_to(value: bool) -> None:
        monkeypatch.setattr(precision, "_cpu_has_bf16_kernels", lambda: value)
        precision._warn_emulated_bf16.cache_clear()

    yield set_to
    precision._warn_emulated_bf16.cache_clear()


@pytest.mark.parametrize("has_kernels", [True, False])
def test_auto_is_bf16_only_on_a_cpu_with_bf16_kernels(cpu_bf16, has_kernels: bool) -> None:
    cpu_bf16(has_kernels)
    assert fast_bf16("cpu") is has_kernels
    assert resolve_precision("auto", "cpu") == ("bf16" if has_kernels else "fp32")
    assert resolve_precision("fp32", "cpu") == "fp32"
    with autocast("cpu", "auto"):
        out = torch.ones(2, 2) @ torch.ones(2, 2)
    assert out.dtype == (torch.bfloat16 if has_kernels else torch.float32)


def test_explicit_bf16_is_kept_with_one_warning_where_it_is_emulated(cpu_bf16) -> None:
    cpu_bf16(False)
    with pytest.warns(UserWarning, match="emulated bf16 kernels.*precision='auto' or 'fp32'"):
        assert resolve_precision("bf16", "cpu") == "bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_precision("bf16", "cpu") == "bf16"  # once per process
    with autocast("cpu", "bf16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    cpu_bf16(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_precision("bf16", "cpu") == "bf16"


def test_this_machines_answer_follows_onednn(cpu_bf16) -> None:
    expected = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert precision._cpu_has_bf16_kernels() is expected


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(InputError, match="precision: expected one of"):
        resolve_precision("fp8", "cpu")


def test_presets_use_auto() -> None:
    for name in ("eeg_sleep", "eeg_sleep_windows", "images_cifar", "images_imagenet"):
        assert PretrainConfig.preset(name).precision == "auto", name
    for name in ("eeg_sleep", "images_cifar"):
        assert FinetuneConfig.preset(name).precision == "auto", name


@pytest.mark.parametrize("has_kernels", [True, False])
def test_a_run_records_what_auto_resolved_to(cpu_bf16, has_kernels: bool, tmp_path: Path) -> None:
    cpu_bf16(has_kernels)
    signals = np.random.default_rng(0).standard_normal((16, 2, 64)).astype("float32")
    config = PretrainConfig.preset("test", patch_size=8, precision="auto", epochs=1)
    result = partnd.pretrain(signals, out_dir=tmp_path / "run", config=config)
    meta = json.loads((result.run_dir / "meta.json").read_text())
    assert meta["resolved"]["precision"] == ("bf16" if has_kernels else "fp32")
    assert json.loads((result.run_dir / "config.json").read_text())["precision"] == "auto"
