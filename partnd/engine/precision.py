"""Mixed precision: which precision a device runs fast, and the autocast context for it.

bf16 autocast is fast on GPUs that support bf16 and on CPUs where oneDNN has bf16 kernels
(AVX-512 or AMX). On a CPU without them (AVX2 only) PyTorch falls back to reference kernels:
measured on one such machine (AMD EPYC, AVX2, one thread), a 1024 x 1024 bf16 matmul ran at
0.4 GFLOP/s against 69 GFLOP/s in fp32, about 170 times slower, and a pretraining step took 22 s
instead of a fraction of a second. ``precision="auto"`` (the presets' setting) therefore picks bf16
only where the device runs it fast, and fp32 elsewhere; an explicit ``"bf16"`` is kept as asked,
with a warning where it is emulated.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

import torch

from partnd._validation import check

__all__ = [
    "LOADER_DTYPES",
    "PRECISIONS",
    "autocast",
    "fast_bf16",
    "resolve_loader_dtype",
    "resolve_precision",
]

#: Accepted settings: ``"auto"`` resolves to ``"bf16"`` or ``"fp32"`` for the device.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")

#: Accepted settings of ``TrainConfig.loader_dtype``.
LOADER_DTYPES = ("auto", "float32", "bfloat16")


@functools.cache
def _cpu_has_bf16_kernels() -> bool:
    """Whether oneDNN runs bf16 natively on this CPU (AVX-512 / AMX), not by reference code."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if probe is not None:
        try:
            return bool(probe())
        except RuntimeError:
            pass
    return "AVX512" in torch.backends.cpu.get_cpu_capability()


def fast_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` runs bf16 autocast at least about as fast as fp32.

    Args:
        device: A torch device (or its name).

    Returns:
        On CUDA, whether the GPU supports bf16; on the CPU, whether oneDNN has bf16 kernels for
        it (AVX-512 or AMX); False elsewhere.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        return _cpu_has_bf16_kernels()
    return False


@functools.cache
def _warn_emulated_bf16(device_type: str) -> None:
    warnings.warn(
        f"precision='bf16' on this {device_type} runs emulated bf16 kernels, often 10-100x "
        "slower than fp32 (no AVX-512/AMX bf16 support); use precision='auto' or 'fp32'",
        stacklevel=3,
    )


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """The precision a run on ``device`` uses for the setting ``precision``.

    Args:
        precision: One of :data:`PRECISIONS`.
        device: The training device.

    Returns:
        ``"fp32"``, ``"bf16"`` or ``"fp16"``: ``"auto"`` gives ``"bf16"`` where
        :func:`fast_bf16`, else ``"fp32"``; the others are returned as given (``"bf16"`` on a
        device without fast bf16 with a warning, once per process).
    """
    check(precision in PRECISIONS, "precision", f"one of {PRECISIONS}", repr(precision))
    device = torch.device(device)
    if precision == "auto":
        return "bf16" if fast_bf16(device) else "fp32"
    if precision == "bf16" and not fast_bf16(device):
        _warn_emulated_bf16(device.type)
    return precision


def autocast(device: torch.device | str, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of ``precision`` (resolved for ``device``) on ``device``.

    Args:
        device: Where the forward pass runs.
        precision: One of :data:`PRECISIONS`.

    Returns:
        A null context for fp32, else ``torch.autocast`` with bf16 or fp16.
    """
    device = torch.device(device)
    resolved = resolve_precision(precision, device)
    if resolved == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if resolved == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def resolve_loader_dtype(
    setting: str, precision: str, device: torch.device | str, num_workers: int
) -> torch.dtype:
    """The dtype in which the loader ships input batches (``TrainConfig.loader_dtype``).

    Args:
        setting: One of :data:`LOADER_DTYPES`.
        precision: The run's resolved precision (:func:`resolve_precision`).
        device: The training device.
        num_workers: Loader worker processes.

    Returns:
        ``torch.bfloat16`` for ``"bfloat16"``, and for ``"auto"`` when the step runs in bf16 on
        CUDA fed by worker processes (the batches then cross processes and the host-to-device
        link, where their bytes cost the training process time); ``torch.float32`` otherwise.
    """
    check(setting in LOADER_DTYPES, "loader_dtype", f"one of {LOADER_DTYPES}", repr(setting))
    if setting == "auto":
        use_bf16 = precision == "bf16" and torch.device(device).type == "cuda" and num_workers > 0
        return torch.bfloat16 if use_bf16 else torch.float32
    return torch.bfloat16 if setting == "bfloat16" else torch.float32
