"""Compiling a training step's forward (and with it its backward) with ``torch.compile``.

On a GPU a small model's step is bound by the host launching kernels, not by the kernels:
measured on an H200 (``docs/results/cost.md``), the EEG preset's bare encoder step spent 5.6 ms
in kernels of 7.9 ms, PART's 6.3 ms of 16.1 ms, with ~520 kernel launches at ~45 µs of host time
each.
``torch.compile`` fuses the elementwise work into few generated kernels, forward and backward
(there: PART's step 1.8x, the bare encoder's 1.6x), and with ``"reduce-overhead"`` also replays
them as CUDA graphs, one launch per compiled region (PART 2.9x, bare 2.8x).

The module is compiled in place (:meth:`torch.nn.Module.compile`): its ``state_dict`` keys, the
optimiser's parameters, the EMA copy, checkpoints and DDP wrapping are unchanged, and the EMA
copy (made before compiling) and every submodule called directly stay eager. The objectives draw
every random quantity of a step before the forward (``Objective.draw``, from the run's
generator, eagerly), and the forward on those draws is a pure function: it compiles as **one
graph** (forward, and backward through autograd), so a step is one compiled region (one CUDA-graph
replay with ``"reduce-overhead"``; before, the generator's draws inside the forward broke PART's
EEG step into 9 regions). A compiled step draws exactly what the eager step draws and resumes
from the same generator states.

Settings (``TrainConfig.compile``): ``"off"``; ``"default"`` (fused kernels);
``"reduce-overhead"`` (fused kernels replayed as CUDA graphs, at fixed shapes: the engine's
batches all have the same shape, ``drop_last``; off CUDA there is no graph to replay and it
resolves to ``"default"``); ``"auto"``: see :func:`resolve_compile`. The first steps of a compiled
run include the compilation (tens of seconds on a GPU host, minutes on a small CPU).
"""

from __future__ import annotations

import torch
from torch import nn

from partnd._validation import check

__all__ = ["BACKEND", "COMPILE_MODES", "compile_module", "mark_step", "resolve_compile"]

#: Accepted settings of ``TrainConfig.compile``.
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead")

#: ``torch.compile`` backend (tests swap in ``"aot_eager"``: the same tracing, no code generation).
BACKEND = "inductor"

#: What ``"auto"`` resolves to on CUDA. Measured on an H200 (``docs/results/cost.md``, bf16,
#: batch 256) before the draws were split out of the forward: PART's EEG step 14,677 samples/s
#: eager, 26,825 ``"default"``, 42,624 ``"reduce-overhead"``; the engine's whole step (clipping,
#: EMA) 20,022 eager and 25,275 ``"default"``. ``"default"`` is the one that ran through the
#: engine there; whether ``"reduce-overhead"`` (one CUDA graph per step now) wins through the
#: engine and resumes exactly on a GPU is pending measurement (``benchmarks/gpu_goals.py``).
AUTO_ON_CUDA = "default"


def resolve_compile(setting: str, device: torch.device | str) -> str:
    """The compile mode a run on ``device`` uses for the setting ``setting``.

    Args:
        setting: One of :data:`COMPILE_MODES`.
        device: The training device.

    Returns:
        ``"off"``, ``"default"`` or ``"reduce-overhead"``: ``"auto"`` gives
        :data:`AUTO_ON_CUDA` on CUDA and ``"off"`` elsewhere (on a CPU a step is bound by its
        arithmetic, and compiling takes minutes); ``"reduce-overhead"`` gives ``"default"`` off
        CUDA (CUDA graphs replay on CUDA only; the fused kernels remain); the others are
        returned as given.

    Raises:
        InputError: For an unknown setting.
    """
    check(setting in COMPILE_MODES, "compile", f"one of {COMPILE_MODES}", repr(setting))
    device = torch.device(device)
    if setting == "auto":
        return AUTO_ON_CUDA if device.type == "cuda" else "off"
    if setting == "reduce-overhead" and device.type != "cuda":
        return "default"
    return setting


def compile_module(module: nn.Module, mode: str) -> None:
    """Compile ``module``'s forward in place (nothing for ``mode == "off"``).

    Args:
        module: The module whose calls are compiled (its forward and, through autograd, its
            backward).
        mode: A resolved mode (:func:`resolve_compile`).
    """
    if mode == "off":
        return
    module.compile(backend=BACKEND, mode=None if mode == "default" else mode, dynamic=False)


def mark_step(mode: str) -> None:
    """Tell CUDA-graph replay that a new training step begins (``"reduce-overhead"`` only): the
    previous step's graph outputs may then be overwritten."""
    if mode == "reduce-overhead":
        torch.compiler.cudagraph_mark_step_begin()
