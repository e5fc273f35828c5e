"""Patch tokenizers ("front-ends"): how the ViT turns one patch into one token.

Every front-end maps a patch set ``[B, N, C, *P]`` to tokens ``[B, N, D]``, one patch at a time:
a token depends on its own patch's content only. Off-grid crops (PART), on-grid tiles
(fine-tuning, MAE, MP3, DropPos) and whole windows (PART across windows, through the window
encoder) are therefore tokenised alike, and no front-end can tell a token where its patch lies.

| name | token of a patch ``x: [C, *P]`` | ndim |
|---|---|---|
| ``linear`` | ``Linear(C * prod(P) -> D)`` of the flattened values (the paper's ViT) | any |
| ``spectral`` | ``Linear`` (or an MLP) of the log-power spectrum of every channel (with ``standardize``, each log-power centred and scaled by running estimates); with ``raw``, plus the ``linear`` token | 1 |
| ``conv`` | a small convolutional stem (``Conv{1,2,3}d`` + GELU layers), then ``Linear`` of its output | 1-3 |

The front-end is part of :attr:`partnd.models.ViTEncoder.architecture` (``frontend`` and
``frontend_options``), so saved encoders and classifiers rebuild it. Build one with
:func:`build_frontend`; the options of each are the keyword-only arguments of its class.
"""  # noqa: E501

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from partnd._validation import InputError, check

__all__ = [
    "FRONTENDS",
    "ConvPatchEmbed",
    "LinearPatchEmbed",
    "SpectralPatchEmbed",
    "build_frontend",
    "frontend_options",
    "list_frontends",
]


class LinearPatchEmbed(nn.Linear):
    """The paper's tokenizer: ``Linear(C * prod(P) -> D)`` of the flattened patch.

    A subclass of :class:`torch.nn.Linear` (its ``weight`` and ``bias`` keep the names and the
    initialisation every saved encoder has), whose input is the unflattened patch set.

    Args:
        in_chans: Channels C of a patch.
        patch_size: Patch extent P per dimension.
        embed_dim: Token width D.
    """

    def __init__(self, in_chans: int, patch_size: Sequence[int], embed_dim: int) -> None:
        super().__init__(in_chans * math.prod(patch_size), embed_dim)

    def forward(self, patches: Tensor) -> Tensor:
        """Args: patches: [B, N, C, *P]. Returns: [B, N, D]."""
        return super().forward(patches.flatten(2))


class SpectralPatchEmbed(nn.Module):
    """Log-power spectrum of every channel of a 1-D patch, projected to a token.

    For a patch ``x: [C, P]`` each channel is multiplied by a periodic Hann window scaled to unit
    mean square and transformed by the orthonormal real FFT, ``X[c, k]`` for ``k = 0 .. P // 2``;
    bin ``k`` is the frequency ``k * fs / P`` (1 Hz bins for 1 s patches). The features are
    ``log(|X[c, k]|^2 + eps)`` of the F bins up to ``max_frequency`` (:meth:`log_power`),
    ``[C, F]`` flattened and projected by ``Linear(C * F -> D)`` (``hidden > 0``: ``Linear ->
    GELU -> Linear``). Keep only the bins of the signal's pass band: bins a band-pass emptied sit at
    ``log(eps)``, a large constant that swamps the varying part of every token at initialisation
    (on the sample cohort, band-passed to 0.1-30 Hz: -14 in bins 38-50 against -4 to 2 in the
    0-30 Hz bins; the window arm's validation kappa after 91 steps was 0.03 with all 51 bins of
    1 s patches, 0.61 with the lowest 31). White noise of variance
    ``s^2`` has expected power ``s^2`` in every bin; a sine of amplitude ``A`` at an integer
    ``k0`` (``1 < k0 < P / 2 - 1``) puts ``A^2 P / 6`` in bin ``k0`` and ``A^2 P / 24`` in each
    neighbour (the Hann main lobe). With ``raw``, the token also adds ``Linear(C * P -> D)`` of the
    raw values: the waveform (sign, phase, transients) the power spectrum drops.

    With ``standardize``, every feature is centred and scaled by running estimates of its mean
    and variance over the tokens seen in training (:meth:`standardized`): raw log-powers share a
    large common part (the 1/f shape; on the sample cohort a token's common component has norm 15
    against 4 for what varies between windows), which leaves the tokens nearly parallel at
    initialisation. The estimates are buffers (saved with the encoder) that only training-mode
    calls update, after the batch is normalised with the estimates from before it, so a token
    still depends on its own patch alone; the first training batch sets them.

    The spectrum is computed in float32 (also under bf16 autocast); only the projections follow
    autocast.

    Args:
        in_chans: Channels C of a patch.
        patch_size: ``(P,)``: 1-D patches only.
        embed_dim: Token width D.
        max_frequency: Highest frequency kept, in cycles per sample, in ``(0, 0.5]``
            (``None``: up to Nyquist): the lowest ``floor(max_frequency * P) + 1`` bins. 0.3 keeps
            0-30 Hz at 100 Hz (the sleep store's band-pass) whatever the patch length.
        hidden: Hidden width of an MLP projection; 0 for a linear projection.
        raw: Add a linear projection of the raw patch values.
        eps: Added to the power before the logarithm (in squared signal units).
        standardize: Centre and scale every feature by running estimates of its mean and
            variance before the projection.
        momentum: Weight of each training batch in the running estimates.
    """

    def __init__(
        self,
        in_chans: int,
        patch_size: Sequence[int],
        embed_dim: int,
        *,
        max_frequency: float | None = None,
        hidden: int = 0,
        raw: bool = False,
        eps: float = 1e-6,
        standardize: bool = False,
        momentum: float = 0.01,
    ) -> None:
        super().__init__()
        check(
            len(patch_size) == 1,
            "frontend",
            "a front-end for 1-D patches with 'spectral' (a power spectrum per channel and "
            "patch); 'linear' or 'conv' read N-D patches",
            f"'spectral' for {len(patch_size)}-D patches of size {tuple(patch_size)}",
        )
        length = int(patch_size[0])
        check(
            max_frequency is None or 0.0 < max_frequency <= 0.5,
            "frontend_options",
            "'max_frequency' None or a frequency in (0, 0.5] cycles per sample",
            repr(max_frequency),
        )
        check(isinstance(hidden, int) and hidden >= 0, "frontend_options", "'hidden' >= 0", hidden)
        check(eps > 0, "frontend_options", "'eps' > 0", repr(eps))
        check(0.0 < momentum <= 1.0, "frontend_options", "'momentum' in (0, 1]", repr(momentum))
        self.in_chans = in_chans
        self.patch_length = length
        self.bins = (
            length // 2 + 1
            if max_frequency is None
            else math.floor(max_frequency * length + 1e-9) + 1
        )
        self.eps = float(eps)
        window = torch.hann_window(length, periodic=True, dtype=torch.float64)
        window = window / window.square().mean().sqrt()
        #: [P] the analysis window (unit mean square); recomputed, not saved.
        self.window: Tensor
        self.register_buffer("window", window.float(), persistent=False)
        features = in_chans * self.bins
        self.standardize = bool(standardize)
        self.momentum = float(momentum)
        #: [C * F] running mean and variance of the features (``standardize``), and the number
        #: of training batches they have seen.
        self.feature_mean: Tensor
        self.feature_var: Tensor
        self.feature_batches: Tensor
        if self.standardize:
            self.register_buffer("feature_mean", torch.zeros(features))
            self.register_buffer("feature_var", torch.ones(features))
            self.register_buffer("feature_batches", torch.zeros((), dtype=torch.long))
        self.proj: nn.Module = (
            nn.Linear(features, embed_dim)
            if hidden == 0
            else nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, embed_dim))
        )
        self.raw = nn.Linear(in_chans * length, embed_dim) if raw else None

    def log_power(self, patches: Tensor) -> Tensor:
        """The spectral features.

        Args:
            patches: [B, N, C, P] patches.

        Returns:
            [B, N, C, F] float32 ``log(power + eps)`` of the lowest F = ``self.bins`` rFFT bins.
        """
        windowed = patches.float() * self.window
        spectrum = torch.fft.rfft(windowed, dim=-1, norm="ortho")[..., : self.bins]
        power = spectrum.real.square() + spectrum.imag.square()
        return torch.log(power + self.eps)

    def standardized(self, features: Tensor) -> Tensor:
        """Centre and scale features by the running estimates; in training, update them after.

        Args:
            features: [B, N, C * F] flattened log-powers.

        Returns:
            [B, N, C * F] ``(features - mean) / sqrt(var + 1e-5)`` with the estimates from before
            this call (the first training call sets them from its own batch).
        """
        if self.training:
            with torch.no_grad():
                flat = features.flatten(0, -2)
                batch_var, batch_mean = torch.var_mean(flat, dim=0, correction=0)
                first = self.feature_batches == 0  # a tensor: no read back to the host
                mean = torch.where(first, batch_mean, self.feature_mean)
                var = torch.where(first, batch_var, self.feature_var)
                self.feature_mean.copy_(torch.lerp(mean, batch_mean, self.momentum))
                self.feature_var.copy_(torch.lerp(var, batch_var, self.momentum))
                self.feature_batches += 1
        else:
            mean, var = self.feature_mean, self.feature_var
        return (features - mean) * torch.rsqrt(var + 1e-5)

    def forward(self, patches: Tensor) -> Tensor:
        """Args: patches: [B, N, C, P]. Returns: [B, N, D]."""
        features = self.log_power(patches).flatten(2)
        if self.standardize:
            features = self.standardized(features)
        tokens = self.proj(features)
        if self.raw is not None:
            tokens = tokens + self.raw(patches.flatten(2))
        return tokens

    def extra_repr(self) -> str:
        return (
            f"patch_length={self.patch_length}, bins={self.bins}, eps={self.eps}, "
            f"standardize={self.standardize}"
        )


_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


class ConvPatchEmbed(nn.Module):
    """A convolutional stem run on every patch, then a linear projection of its output.

    ``layers`` convolutions (``channels`` filters, ``kernel`` wide, ``stride``, zero padding
    ``kernel // 2``, each followed by GELU; He-initialised weights, zero biases) map a patch
    ``[C, *P]`` to ``[channels, *P']``, which ``Linear(channels * prod(P') -> D)`` projects to
    the token. One implementation for 1-D, 2-D
    and 3-D patches (``Conv1d``/``Conv2d``/``Conv3d``).

    Args:
        in_chans: Channels C of a patch.
        patch_size: Patch extent P per dimension (1 to 3 dimensions).
        embed_dim: Token width D.
        channels: Filters of every convolution.
        kernel: Kernel extent in every dimension.
        stride: Stride in every dimension.
        layers: Number of convolutions.
    """

    def __init__(
        self,
        in_chans: int,
        patch_size: Sequence[int],
        embed_dim: int,
        *,
        channels: int = 32,
        kernel: int = 5,
        stride: int = 2,
        layers: int = 2,
    ) -> None:
        super().__init__()
        ndim = len(patch_size)
        check(
            ndim in _CONV,
            "frontend",
            "'linear' for patches of more than 3 dimensions ('conv' has 1-D to 3-D convolutions)",
            f"'conv' for {ndim}-D patches",
        )
        for name, value in (
            ("channels", channels),
            ("kernel", kernel),
            ("stride", stride),
            ("layers", layers),
        ):
            check(
                isinstance(value, int) and value >= 1, "frontend_options", f"'{name}' >= 1", value
            )
        convolution = _CONV[ndim]
        stem: list[nn.Module] = []
        sizes = list(patch_size)
        width = in_chans
        for _ in range(layers):
            layer = convolution(width, channels, kernel, stride, kernel // 2)
            # He init, zero bias: the stem keeps the input's scale (PyTorch's default biases
            # swamped the content at initialisation: PART stayed at its floor for 120 steps)
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            assert layer.bias is not None
            nn.init.zeros_(layer.bias)
            stem += [layer, nn.GELU()]
            sizes = [(size + 2 * (kernel // 2) - kernel) // stride + 1 for size in sizes]
            width = channels
        self.ndim = ndim
        self.stem = nn.Sequential(*stem)
        self.proj = nn.Linear(channels * math.prod(sizes), embed_dim)

    def forward(self, patches: Tensor) -> Tensor:
        """Args: patches: [B, N, C, *P]. Returns: [B, N, D]."""
        batch, count = patches.shape[:2]
        features = self.stem(patches.flatten(0, 1))  # [B * N, channels, *P']
        return self.proj(features.flatten(1)).view(batch, count, -1)


#: Front-end name -> its class (constructor ``(in_chans, patch_size, embed_dim, **options)``).
FRONTENDS: dict[str, type[nn.Module]] = {
    "linear": LinearPatchEmbed,
    "spectral": SpectralPatchEmbed,
    "conv": ConvPatchEmbed,
}


def list_frontends() -> list[str]:
    """The names :func:`build_frontend` accepts."""
    return list(FRONTENDS)


def frontend_options(name: str) -> dict[str, Any]:
    """The options of front-end ``name`` with their defaults (its keyword-only arguments)."""
    check(name in FRONTENDS, "frontend", f"one of {list_frontends()}", repr(name))
    parameters = inspect.signature(FRONTENDS[name].__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def build_frontend(
    name: str,
    *,
    in_chans: int,
    patch_size: Sequence[int],
    embed_dim: int,
    options: Mapping[str, Any] | None = None,
) -> nn.Module:
    """A front-end mapping patches ``[B, N, C, *P]`` to tokens ``[B, N, D]``.

    Args:
        name: One of :func:`list_frontends`.
        in_chans: Channels C of a patch.
        patch_size: Patch extent P per dimension.
        embed_dim: Token width D.
        options: Keyword options of the front-end (see :func:`frontend_options`).

    Returns:
        The front-end module (freshly initialised).

    Raises:
        InputError: For an unknown name, an unknown option, or patches it cannot read.
    """
    accepted = frontend_options(name)
    given = dict(options or {})
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise InputError(
            f"frontend_options: expected options of the {name!r} front-end "
            f"({', '.join(accepted) or 'none'}), got unknown {', '.join(unknown)}"
        )
    return FRONTENDS[name](in_chans, tuple(patch_size), embed_dim, **given)
