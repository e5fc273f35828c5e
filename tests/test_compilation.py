"""How ``TrainConfig.compile`` resolves per device (``resolve_compile``)."""

from __future__ import annotations

import pytest

from partnd._validation import InputError
from partnd.engine.compilation import AUTO_ON_CUDA, resolve_compile


@pytest.mark.parametrize(
    ("setting", "device", "mode"),
    [
        ("auto", "cpu", "off"),
        ("auto", "cuda", AUTO_ON_CUDA),
        ("off", "cuda", "off"),
        ("default", "cpu", "default"),
        ("reduce-overhead", "cuda", "reduce-overhead"),
        ("reduce-overhead", "cuda:1", "reduce-overhead"),
        ("reduce-overhead", "cpu", "default"),  # no CUDA graphs off CUDA: the fused kernels
    ],
)
def test_each_setting_resolves_per_device(setting: str, device: str, mode: str) -> None:
    assert resolve_compile(setting, device) == mode


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(InputError, match="compile"):
        resolve_compile("max-autotune", "cpu")
