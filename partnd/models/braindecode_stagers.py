"""The field's deep sleep stagers, from braindecode (not rewritten), as partnd classifiers.

Three published stagers of ``braindecode.models`` sit beside partnd's learned rows, trained by
the same engine, labels, validation subjects, augmentations and checkpoint selection:

| name | braindecode class | reads | reference |
|---|---|---|---|
| ``chambon2018`` | ``SleepStagerChambon2018`` | one window | Chambon et al. 2018 |
| ``deepsleepnet`` | ``DeepSleepNet`` | one window | Supratak et al. 2017 |
| ``usleep`` | ``USleep`` | the whole night | Perslev et al. 2021 |

:class:`WindowStager` maps windows ``x: [B, C, T] -> [B, K]`` like a
:class:`~partnd.models.PatchClassifier`; :class:`NightStager` maps crops or whole nights
``x: [B, L, C, T] -> [B, L, K]`` and predicts a record in one pass
(:meth:`NightStager.predict_night`), as the :class:`~partnd.models.NightClassifier` does: U-Sleep
is fully convolutional, so a night of any length is read whole. Both carry the
:class:`~partnd.signal_info.SignalInfo` they were trained on (``signal_info``) and are rebuilt
from ``(name, n_chans, n_outputs, n_times, sfreq, options)`` (:meth:`~WindowStager.spec`), which
``classifier.pt`` records.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from partnd._validation import InputError, check
from partnd.signal_info import SignalInfo

__all__ = [
    "NIGHT_STAGERS",
    "STAGERS",
    "NightStager",
    "WindowStager",
    "build_stager",
    "create_stager_module",
    "list_stagers",
]

#: name -> braindecode model class name, for the stagers that read one window.
WINDOW_STAGER_CLASSES = {
    "chambon2018": "SleepStagerChambon2018",
    "deepsleepnet": "DeepSleepNet",
}
#: name -> braindecode model class name, for the stagers that read the whole night.
NIGHT_STAGER_CLASSES = {"usleep": "USleep"}
#: Every stager name.
STAGERS = (*WINDOW_STAGER_CLASSES, *NIGHT_STAGER_CLASSES)
#: The stagers that read whole nights (``FinetuneConfig.context="night"``).
NIGHT_STAGERS = tuple(NIGHT_STAGER_CLASSES)
#: Options partnd sets unless given: U-Sleep's kernel of 9/128 s is even at some rates
#: (braindecode then refuses it unless asked to round it up to an odd size).
_DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {"usleep": {"ensure_odd_conv_size": True}}


def list_stagers() -> list[str]:
    """The stager names :func:`build_stager` accepts, sorted."""
    return sorted(STAGERS)


def create_stager_module(
    name: str, *, n_chans: int, n_outputs: int, n_times: int, sfreq: float, **options: Any
) -> nn.Module:
    """The braindecode model ``name`` (see :data:`STAGERS`) for windows ``[n_chans, n_times]``.

    Args:
        name: A stager name.
        n_chans: Channels C.
        n_outputs: Classes K.
        n_times: Samples T of one window.
        sfreq: Sampling rate in Hz.
        **options: Keyword arguments of the braindecode class (e.g. ``depth`` of ``USleep``).

    Raises:
        InputError: An unknown name, or shapes or options braindecode refuses.
    """
    import braindecode.models

    check(name in STAGERS, "stager", f"one of {list_stagers()}", repr(name))
    class_name = {**WINDOW_STAGER_CLASSES, **NIGHT_STAGER_CLASSES}[name]
    cls = getattr(braindecode.models, class_name)
    settings = {**_DEFAULT_OPTIONS.get(name, {}), **options}
    try:
        return cls(n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq, **settings)
    except (TypeError, ValueError) as error:
        raise InputError(
            f"stager_overrides: expected options and windows braindecode's {class_name} accepts "
            f"(windows [{n_chans}, {n_times}] at {sfreq:g} Hz, options {settings}), got: {error}"
        ) from None


class _Stager(nn.Module):
    """What both kinds share: the braindecode module, its rebuild spec, class names, signal.

    A subclass names the braindecode classes it wraps (``classes``) and what they read
    (``reads``, for the refusal of another name)."""

    classes: dict[str, str]
    reads: str

    def __init__(
        self,
        name: str,
        *,
        n_chans: int,
        n_outputs: int,
        n_times: int,
        sfreq: float,
        options: dict[str, Any] | None = None,
    ) -> None:
        check(
            name in self.classes,
            "stager",
            f"one of {sorted(self.classes)} for {self.reads}",
            repr(name),
        )
        super().__init__()
        self.name = name
        self.options = dict(options or {})
        self.num_classes = int(n_outputs)
        self.in_chans = int(n_chans)
        self.window_samples = int(n_times)
        self.sfreq = float(sfreq)
        self.model = create_stager_module(
            name, n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq, **self.options
        )
        self.class_names: list[str] | None = None
        #: The signal the stager reads (``finetune`` records the training data's channels).
        self.signal_info = SignalInfo(
            in_chans=self.in_chans, spatial_shape=(self.window_samples,), sfreq=self.sfreq
        )

    @property
    def spatial_shape(self) -> tuple[int]:
        """The window shape ``(T,)`` the stager reads."""
        return (self.window_samples,)

    def spec(self) -> dict[str, Any]:
        """What rebuilds the stager: ``name``, ``n_chans``, ``n_outputs``, ``n_times``,
        ``sfreq`` and ``options``."""
        return {
            "name": self.name,
            "n_chans": self.in_chans,
            "n_outputs": self.num_classes,
            "n_times": self.window_samples,
            "sfreq": self.sfreq,
            "options": dict(self.options),
        }

    def check_windows(self, x: Tensor, shape: str) -> None:
        check(
            x.shape[-2:] == (self.in_chans, self.window_samples),
            "x",
            f"{shape} with windows [{self.in_chans}, {self.window_samples}]",
            x,
        )

    def extra_repr(self) -> str:
        return f"name={self.name!r}, options={self.options}"


class WindowStager(_Stager):
    """A braindecode stager that reads one window: ``x: [B, C, T] -> [B, K]`` logits.

    Args:
        name: One of :data:`WINDOW_STAGER_CLASSES`.
        n_chans: Channels C.
        n_outputs: Classes K.
        n_times: Samples T of one window.
        sfreq: Sampling rate in Hz.
        options: Keyword arguments of the braindecode class.
    """

    classes = WINDOW_STAGER_CLASSES
    reads = "single windows (context None)"

    def forward(self, x: Tensor) -> Tensor:
        """Args: x: [B, C, T] windows. Returns: [B, K] logits."""
        self.check_windows(x, "a tensor [B, C, T]")
        return self.model(x)


class NightStager(_Stager):
    """A braindecode stager that reads consecutive windows at once (U-Sleep).

    ``x: [B, L, C, T] -> [B, L, K]``: the windows of a crop or a night are concatenated in time
    (``[B, C, L * T]``) and U-Sleep classifies every window from the whole input. Padded places
    of a batch (``valid`` False) are zeroed before the model reads them (their labels are -1 and
    carry no loss). U-Sleep reads no time of night: ``time`` is accepted for the night
    classifier's interface and ignored.

    Args:
        name: One of :data:`NIGHT_STAGER_CLASSES`.
        n_chans: Channels C.
        n_outputs: Classes K.
        n_times: Samples T of one window.
        sfreq: Sampling rate in Hz.
        options: Keyword arguments of the braindecode class (e.g. ``depth``).
    """

    classes = NIGHT_STAGER_CLASSES
    reads = "whole nights (context 'night')"

    def forward(self, x: Tensor, valid: Tensor | None = None, time: Tensor | None = None) -> Tensor:
        """Classify every window of a batch of crops or nights.

        Args:
            x: [B, L, C, T] consecutive windows.
            valid: [B, L] bool, False for padding (``None``: all valid).
            time: Ignored (U-Sleep reads no time of night).

        Returns:
            [B, L, K] logits.
        """
        self.check_windows(x, "a tensor [B, L, C, T]")
        check(x.dim() == 4, "x", "a tensor [B, L, C, T]", x)
        if valid is not None:
            x = x * valid[:, :, None, None].to(x.dtype)
        logits = self.model(x)  # [B, K, L], or [B, K] for L = 1
        if logits.dim() == 2:
            logits = logits[:, :, None]
        return logits.transpose(1, 2)

    @torch.no_grad()
    def predict_night(
        self, windows: Tensor, time: Tensor | None = None, *, batch_size: int = 256
    ) -> Tensor:
        """Probabilities of every window of one night, read whole in one pass.

        Args:
            windows: [N, C, T] the night's windows, in order.
            time: Ignored (the night classifier's interface).
            batch_size: Ignored: U-Sleep reads the night at once.

        Returns:
            [N, K] float32 probabilities on the CPU.
        """
        self.check_windows(windows, "a tensor [N, C, T]")
        device = next(self.parameters()).device
        logits = self(windows.to(device)[None])[0]
        return logits.float().softmax(-1).cpu()


def build_stager(
    name: str,
    *,
    n_chans: int,
    n_outputs: int,
    n_times: int,
    sfreq: float,
    options: dict[str, Any] | None = None,
) -> WindowStager | NightStager:
    """The stager ``name`` for windows ``[n_chans, n_times]`` at ``sfreq`` (a
    :class:`NightStager` for U-Sleep, else a :class:`WindowStager`).

    Args:
        name: One of :data:`STAGERS`.
        n_chans: Channels C.
        n_outputs: Classes K.
        n_times: Samples T of one window.
        sfreq: Sampling rate in Hz.
        options: Keyword arguments of the braindecode class.
    """
    check(name in STAGERS, "stager", f"one of {list_stagers()}", repr(name))
    cls = NightStager if name in NIGHT_STAGER_CLASSES else WindowStager
    return cls(
        name, n_chans=n_chans, n_outputs=n_outputs, n_times=n_times, sfreq=sfreq, options=options
    )
