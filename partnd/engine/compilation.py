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

from typing import TYPE_CHECKING

from partnd._validation import check

if TYPE_CHECKING:  # torch loads when a run resolves or compiles: the configs import this module
    import torch
    from torch import nn

__all__ = [
    "AUTO_ON_CUDA",
    "AUTO_ON_CUDA_FINETUNING",
    "BACKEND",
    "COMPILE_MODES",
    "compile_module",
    "mark_step",
    "resolve_compile",
]

#: Accepted settings of ``TrainConfig.compile``.
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead")

#: ``torch.compile`` backend (tests swap in ``"aot_eager"``: the same tracing, no code generation).
BACKEND = "inductor"

#: What ``"auto"`` resolves to on CUDA for a pretraining objective's step
#: (:attr:`partnd.engine.config.PretrainConfig.auto_compile_on_cuda`). Measured through the
#: engine's whole step on an H200 (``docs/results/cost.md``, PART on the EEG preset, bf16, batch
#: 256, torch 2.11, one run of ``benchmarks/bench_compile_modes.py``): 13,533 samples/s eager,
#: 14,139 ``"default"``, 36,467 ``"reduce-overhead"``; a ``"reduce-overhead"`` run cut and
#: resumed ended within 7.5e-4 of the uninterrupted one, as close as a repeated uninterrupted run
#: (6.5e-4: CUDA's backward accumulates in a run-dependent order in every mode).
AUTO_ON_CUDA = "reduce-overhead"

#: What ``"auto"`` resolves to on CUDA for a fine-tuning run
#: (:attr:`partnd.engine.config.TrainConfig.auto_compile_on_cuda`): fused kernels without CUDA
#: graphs, because the fine-tuned model is returned to the caller and evaluated on batches of any
#: size, where CUDA graphs would record a graph per shape and overwrite earlier outputs.
AUTO_ON_CUDA_FINETUNING = "default"


def resolve_compile(
    setting: str,
    device: torch.device | str,
    auto_on_cuda: str = AUTO_ON_CUDA,
    *,
    distributed: bool = False,
) -> str:
    """The compile mode a run on ``device`` uses for the setting ``setting``.

    Args:
        setting: One of :data:`COMPILE_MODES`.
        device: The training device.
        auto_on_cuda: What ``"auto"`` gives on CUDA (:data:`AUTO_ON_CUDA` for pretraining,
            :data:`AUTO_ON_CUDA_FINETUNING` for fine-tuning).
        distributed: The run is one of several DDP processes: ``"auto"`` then gives
            :data:`AUTO_ON_CUDA_FINETUNING` on CUDA whatever ``auto_on_cuda`` says, because CUDA
            graphs were measured to win and to resume in one process only.

    Returns:
        ``"off"``, ``"default"`` or ``"reduce-overhead"``: ``"auto"`` gives
        ``auto_on_cuda`` on CUDA and ``"off"`` elsewhere (on a CPU a step is bound by its
        arithmetic, and compiling takes minutes); ``"reduce-overhead"`` gives ``"default"`` off
        CUDA (CUDA graphs replay on CUDA only; the fused kernels remain); the others are
        returned as given.

    Raises:
        InputError: For an unknown setting.
    """
    check(setting in COMPILE_MODES, "compile", f"one of {COMPILE_MODES}", repr(setting))
    import torch

    device = torch.device(device)
    if setting == "auto":
        if device.type != "cuda":
            return "off"
        return AUTO_ON_CUDA_FINETUNING if distributed else auto_on_cuda
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
    # fixed shapes: a second shape compiles its own static graph instead of a symbolic one (on an
    # H200 with torch 2.11 a symbolic recompile of the bare steps crashed in inductor's backward)
    module.compile(backend=BACKEND, mode=None if mode == "default" else mode, dynamic=False)


def mark_step(mode: str) -> None:
    """Tell CUDA-graph replay that a new training step begins (``"reduce-overhead"`` only): the
    previous step's graph outputs may then be overwritten."""
    if mode == "reduce-overhead":
        import torch

        torch.compiler.cudagraph_mark_step_begin()
