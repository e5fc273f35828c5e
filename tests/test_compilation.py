"""How ``TrainConfig.compile`` resolves per device and kind of run (``resolve_compile``), and how
``compile_module`` compiles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.engine import compilation
from partnd.engine.compilation import compile_module, resolve_compile
from partnd.engine.config import FinetuneConfig, PretrainConfig


@pytest.mark.parametrize(
    ("setting", "device", "mode"),
    [
        ("auto", "cpu", "off"),
        ("auto", "cuda", "reduce-overhead"),  # pretraining: CUDA graphs, measured to win
        ("off", "cuda", "off"),
        ("default", "cpu", "default"),
        ("reduce-overhead", "cuda", "reduce-overhead"),
        ("reduce-overhead", "cuda:1", "reduce-overhead"),
        ("reduce-overhead", "cpu", "default"),  # no CUDA graphs off CUDA: the fused kernels
    ],
)
def test_each_setting_resolves_per_device(setting: str, device: str, mode: str) -> None:
    assert resolve_compile(setting, device) == mode


@pytest.mark.parametrize(
    ("config", "mode"),
    [(PretrainConfig.preset("test"), "reduce-overhead"), (FinetuneConfig(), "default")],
    ids=["pretraining", "finetuning"],
)
def test_auto_on_cuda_depends_on_the_kind_of_run(config: FinetuneConfig, mode: str) -> None:
    """A fine-tuned model is returned and run on batches of any size: no CUDA graphs for it."""
    assert resolve_compile("auto", "cuda", config.auto_compile_on_cuda) == mode
    assert resolve_compile("auto", "cpu", config.auto_compile_on_cuda) == "off"
    assert resolve_compile("default", "cuda", config.auto_compile_on_cuda) == "default"


def test_auto_under_ddp_keeps_fused_kernels_without_cuda_graphs() -> None:
    """CUDA graphs were measured in one process: several DDP processes keep ``"default"``."""
    pretraining = PretrainConfig.preset("test").auto_compile_on_cuda
    assert resolve_compile("auto", "cuda", pretraining, distributed=True) == "default"
    assert resolve_compile("auto", "cpu", pretraining, distributed=True) == "off"
    assert resolve_compile("reduce-overhead", "cuda", pretraining, distributed=True) == (
        "reduce-overhead"  # asked for by name: given
    )


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(InputError, match="compile"):
        resolve_compile("max-autotune", "cpu")


def test_a_compiled_module_recompiles_a_new_shape_with_fixed_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each batch shape gets its own graph with concrete sizes, never a symbolic one (a symbolic
    recompile crashed inductor's backward on an H200 with torch 2.11)."""
    shapes: list[list[tuple[object, ...]]] = []

    def recording_backend(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        shapes.append([tuple(value.shape) for value in inputs if isinstance(value, torch.Tensor)])
        return graph.forward

    monkeypatch.setattr(compilation, "BACKEND", recording_backend)
    torch._dynamo.reset()
    module = nn.Linear(3, 7)
    compile_module(module, "default")
    for rows in (4, 5, 6):
        torch.testing.assert_close(module(torch.ones(rows, 3)), module.forward(torch.ones(rows, 3)))
    torch._dynamo.reset()
    batch_sizes = [shape[0] for graph in shapes for shape in graph if shape[1:] == (3,)]
    assert batch_sizes == [7, 4, 7, 5, 7, 6]  # the weight [7, 3], then the batch
    assert all(isinstance(size, int) for graph in shapes for shape in graph for size in shape)
