"""The ViT's patch tokenizers: shapes for every ndim, the spectral front-end's known values,
per-patch tokens, save -> load round trips, and a planted spectral task the spectral front-end
learns and the linear one does not in the same budget."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.training import finetune
from partnd.models import PatchClassifier, create_encoder
from partnd.models.frontends import (
    ConvPatchEmbed,
    LinearPatchEmbed,
    SpectralPatchEmbed,
    build_frontend,
    frontend_options,
    list_frontends,
)
from partnd.models.serialization import (
    load_classifier,
    load_encoder,
    save_classifier,
    save_encoder,
)
from tests.training_loops import classifier_accuracy

pytestmark = pytest.mark.usefixtures("one_thread")

PATCH = {1: 20, 2: 4, 3: 4}
#: (front-end, ndim, options) cases: the spectral front-end reads 1-D patches only.
CASES = [
    ("linear", 1, {}),
    ("linear", 2, {}),
    ("linear", 3, {}),
    ("spectral", 1, {}),
    ("spectral", 1, {"max_frequency": 0.2, "hidden": 16, "raw": True}),
    ("spectral", 1, {"standardize": True}),
    ("conv", 1, {}),
    ("conv", 2, {"kernel": 3}),
    ("conv", 3, {"kernel": 3, "layers": 1}),
]


def encoder(frontend: str, ndim: int = 1, options: dict | None = None, **kwargs: object):
    return create_encoder(
        "vit_test",
        in_chans=2,
        patch_size=PATCH[ndim],
        ndim=ndim,
        frontend=frontend,
        frontend_options=options or {},
        **kwargs,
    )


@pytest.mark.parametrize(("frontend", "ndim", "options"), CASES)
def test_tokens_have_the_encoder_width_and_depend_on_their_own_patch_only(
    frontend: str, ndim: int, options: dict
) -> None:
    model = encoder(frontend, ndim, options).eval()
    patches = torch.randn(3, 5, 2, *(PATCH[ndim],) * ndim)
    tokens = model.patch_embed(patches)
    assert tokens.shape == (3, 5, 32)
    assert model.forward_features(patches).shape == (3, 6, 32)
    changed = patches.clone()
    changed[:, 2] = torch.randn_like(changed[:, 2])
    again = model.patch_embed(changed)
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(again[:, keep], tokens[:, keep])
    assert not torch.allclose(again[:, 2], tokens[:, 2])
    assert model.architecture["frontend"] == frontend
    assert model.architecture["frontend_options"] == options


def test_linear_front_end_is_the_papers_projection_with_its_parameter_names() -> None:
    model = encoder("linear")
    assert isinstance(model.patch_embed, LinearPatchEmbed)
    assert {"patch_embed.weight", "patch_embed.bias"} <= set(model.state_dict())
    patches = torch.randn(2, 4, 2, 20)
    expected = patches.flatten(2) @ model.patch_embed.weight.T + model.patch_embed.bias
    torch.testing.assert_close(model.patch_embed(patches), expected)


def test_a_sine_puts_its_power_in_its_bin_and_white_noise_is_flat() -> None:
    embed = SpectralPatchEmbed(1, (100,), 8)
    n = torch.arange(100, dtype=torch.float32)
    amplitude, k0 = 3.0, 10  # 10 cycles per 1 s patch at 100 Hz: 10 Hz
    sine = amplitude * torch.sin(2 * math.pi * k0 * n / 100 + 0.7)
    power = embed.log_power(sine.view(1, 1, 1, 100)).exp()[0, 0, 0]
    assert power.shape == (51,) and int(power.argmax()) == k0
    peak = amplitude**2 * 100
    torch.testing.assert_close(power[k0], torch.tensor(peak / 6), rtol=1e-4, atol=0)
    neighbours = power[[k0 - 1, k0 + 1]]
    torch.testing.assert_close(neighbours, torch.full((2,), peak / 24), rtol=1e-4, atol=0)
    others = torch.ones(51, dtype=torch.bool)
    others[k0 - 1 : k0 + 2] = False
    assert float(power[others].max()) < 1e-4  # only the eps floor (1e-6) and float32 leakage
    noise = 2.0 * torch.randn(4000, 1, 1, 100, generator=torch.Generator().manual_seed(0))
    mean_power = embed.log_power(noise).exp().mean(dim=(0, 1, 2))
    torch.testing.assert_close(mean_power, torch.full((51,), 4.0), rtol=0.1, atol=0)


def test_max_frequency_keeps_the_lowest_bins_and_power_is_blind_to_sign_without_raw() -> None:
    torch.manual_seed(0)
    full = SpectralPatchEmbed(2, (40,), 8)
    low = SpectralPatchEmbed(2, (40,), 8, max_frequency=0.15)  # 6 cycles per patch: bins 0-6
    assert (full.bins, low.bins) == (21, 7)
    assert SpectralPatchEmbed(1, (100,), 8, max_frequency=0.3).bins == 31  # 0-30 Hz at 100 Hz
    assert SpectralPatchEmbed(1, (200,), 8, max_frequency=0.3).bins == 61
    patches = torch.randn(3, 4, 2, 40)
    torch.testing.assert_close(low.log_power(patches), full.log_power(patches)[..., :7])
    assert low.proj.in_features == 2 * 7  # type: ignore[union-attr]
    torch.testing.assert_close(full(-patches), full(patches))
    with_raw = SpectralPatchEmbed(2, (40,), 8, raw=True)
    assert not torch.allclose(with_raw(-patches), with_raw(patches))


def test_spectral_tokens_are_float32_spectra_under_bf16_autocast() -> None:
    embed = SpectralPatchEmbed(2, (40,), 8)
    patches = torch.randn(2, 3, 2, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert embed.log_power(patches).dtype == torch.float32
        tokens = embed(patches)
    assert tokens.shape == (2, 3, 8) and torch.isfinite(tokens).all()


def test_standardized_spectra_use_running_estimates_set_by_the_first_training_batch() -> None:
    torch.manual_seed(0)
    embed = SpectralPatchEmbed(2, (40,), 8, max_frequency=0.25, standardize=True, momentum=0.5)
    assert embed.feature_mean.shape == (2 * 11,) and int(embed.feature_batches) == 0
    # a 1/f-like common shape: every token's features share a large offset per bin
    scale = torch.linspace(4.0, 0.5, 40)
    first = torch.randn(6, 5, 2, 40) * scale
    features = embed.log_power(first).flatten(2)
    var, mean = torch.var_mean(features.flatten(0, 1), dim=0, correction=0)
    embed.train()
    tokens = embed(first)
    torch.testing.assert_close(embed.feature_mean, mean)
    torch.testing.assert_close(embed.feature_var, var)
    standardized = (features - mean) / torch.sqrt(var + 1e-5)
    torch.testing.assert_close(tokens, embed.proj(standardized))
    flat = standardized.flatten(0, 1)
    torch.testing.assert_close(flat.mean(0), torch.zeros(22), atol=1e-5, rtol=0)
    torch.testing.assert_close(flat.std(0, correction=0), torch.ones(22), atol=1e-3, rtol=0)
    # later batches: normalised with the estimates from before them, then blended in
    second = 3.0 * torch.randn(6, 5, 2, 40)
    before = (embed.feature_mean.clone(), embed.feature_var.clone())
    tokens = embed(second)
    features = embed.log_power(second).flatten(2)
    torch.testing.assert_close(
        tokens, embed.proj((features - before[0]) / torch.sqrt(before[1] + 1e-5))
    )
    var, mean = torch.var_mean(features.flatten(0, 1), dim=0, correction=0)
    torch.testing.assert_close(embed.feature_mean, 0.5 * before[0] + 0.5 * mean)
    torch.testing.assert_close(embed.feature_var, 0.5 * before[1] + 0.5 * var)
    assert int(embed.feature_batches) == 2
    # so a training-mode token depends on its own patch only, and evaluation leaves them alone
    changed = second.clone()
    changed[:, 2] = torch.randn_like(changed[:, 2])
    estimates = (embed.feature_mean.clone(), embed.feature_var.clone())
    one = embed(second)
    embed.feature_mean.copy_(estimates[0])
    embed.feature_var.copy_(estimates[1])
    other = embed(changed)
    embed.eval()
    updated = embed.feature_mean.clone()
    torch.testing.assert_close(embed(second), embed(second))
    torch.testing.assert_close(embed.feature_mean, updated)
    assert int(embed.feature_batches) == 4
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(one[:, keep], other[:, keep])


def test_standardized_spectral_estimates_are_saved_with_the_encoder(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = encoder("spectral", options={"standardize": True}).train()
    model.forward_features(3.0 + torch.randn(4, 5, 2, 20))
    model.eval()
    save_encoder(model, tmp_path / "encoder.pt")
    loaded = load_encoder(tmp_path / "encoder.pt")
    embed = loaded.patch_embed
    assert isinstance(embed, SpectralPatchEmbed) and int(embed.feature_batches) == 1
    torch.testing.assert_close(embed.feature_mean, model.patch_embed.feature_mean)
    patches = torch.randn(2, 5, 2, 20)
    torch.testing.assert_close(loaded.forward_features(patches), model.forward_features(patches))


def test_conv_stem_output_size_and_convolution_kind_follow_the_patch() -> None:
    one = ConvPatchEmbed(2, (100,), 8)  # 100 -> 50 -> 25 with kernel 5, stride 2
    assert isinstance(one.stem[0], nn.Conv1d) and one.proj.in_features == 32 * 25
    three = ConvPatchEmbed(1, (4, 4, 4), 8, kernel=3, layers=1)
    assert isinstance(three.stem[0], nn.Conv3d) and three.proj.in_features == 32 * 8


def test_front_ends_refuse_what_they_cannot_read() -> None:
    assert list_frontends() == ["linear", "spectral", "conv"]
    assert frontend_options("spectral") == {
        "max_frequency": None,
        "hidden": 0,
        "raw": False,
        "eps": 1e-6,
        "standardize": False,
        "momentum": 0.01,
    }
    with pytest.raises(InputError, match=r"frontend: .*1-D patches.*got 'spectral' for 2-D"):
        encoder("spectral", ndim=2)
    with pytest.raises(InputError, match=r"frontend: expected one of .*got 'fft'"):
        encoder("fft")
    with pytest.raises(
        InputError,
        match=r"frontend_options: .*\(max_frequency, hidden, raw, eps, standardize, momentum\)",
    ):
        encoder("spectral", options={"bins": 3})
    with pytest.raises(InputError, match=r"frontend_options: .*'max_frequency'.*\(0, 0.5\]"):
        encoder("spectral", options={"max_frequency": 0.6})
    with pytest.raises(InputError, match=r"frontend_options: expected 'momentum' in \(0, 1\]"):
        encoder("spectral", options={"standardize": True, "momentum": 0.0})
    with pytest.raises(InputError, match="'conv' for 4-D patches"):
        build_frontend("conv", in_chans=1, patch_size=(2, 2, 2, 2), embed_dim=4)
    with pytest.raises(InputError, match="frontend_options: expected 'stride' >= 1, got 0"):
        build_frontend("conv", in_chans=1, patch_size=(4,), embed_dim=4, options={"stride": 0})


@pytest.mark.parametrize("frontend", ["spectral", "conv"])
def test_saved_encoders_and_classifiers_rebuild_their_front_end(
    frontend: str, tmp_path: Path
) -> None:
    options = {"max_frequency": 0.25, "raw": True} if frontend == "spectral" else {"channels": 8}
    torch.manual_seed(0)
    model = encoder(frontend, options=options).eval()
    save_encoder(model, tmp_path / "encoder.pt")
    loaded = load_encoder(tmp_path / "encoder.pt")
    assert loaded.architecture == model.architecture
    assert type(loaded.patch_embed) is type(model.patch_embed)
    patches = torch.randn(2, 5, 2, 20)
    torch.testing.assert_close(loaded.forward_features(patches), model.forward_features(patches))
    classifier = PatchClassifier(model, 3, spatial_shape=(100,)).eval()
    save_classifier(classifier, tmp_path / "classifier.pt")
    reloaded = load_classifier(tmp_path / "classifier.pt")
    assert isinstance(reloaded, PatchClassifier)
    assert reloaded.encoder.architecture["frontend_options"] == options
    x = torch.randn(4, 2, 100)
    torch.testing.assert_close(reloaded(x), classifier(x))


def test_finetune_builds_the_configured_front_end_and_load_classifier_rebuilds_it(
    tmp_path: Path,
) -> None:
    x = torch.randn(16, 2, 100, generator=torch.Generator().manual_seed(0))
    options = {"max_frequency": 0.35, "hidden": 16}
    config = FinetuneConfig.preset(
        "test",
        patch_size=20,
        epochs=1,
        encoder_overrides={"frontend": "spectral", "frontend_options": options},
    )
    result = finetune(
        None, x, train_labels=[0, 1] * 8, num_classes=2, out_dir=tmp_path, config=config
    )
    assert isinstance(result.model.encoder.patch_embed, SpectralPatchEmbed)
    loaded = load_classifier(tmp_path)
    assert isinstance(loaded, PatchClassifier)
    assert loaded.encoder.architecture["frontend_options"] == options
    torch.testing.assert_close(loaded(x), result.model.eval()(x))


def tone_task(num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[num, 1, 200] white noise plus a weak sine of random phase at 4 or 5 cycles per 20-sample
    patch; the label is the frequency: a matter of band power, not of waveform."""
    label = torch.randint(0, 2, (num,), generator=generator)
    t = torch.arange(200, dtype=torch.float32)
    phase = 2 * math.pi * torch.rand(num, 1, generator=generator)
    cycles = (4 + label.float())[:, None]
    tone = 0.5 * torch.sin(2 * math.pi * cycles * t / 20 + phase)
    return (tone + torch.randn(num, 200, generator=generator))[:, None], label


def tone_accuracy(frontend: str, steps: int = 40) -> float:
    torch.manual_seed(0)
    backbone = create_encoder("vit_test", in_chans=1, patch_size=20, ndim=1, frontend=frontend)
    model = PatchClassifier(backbone, 2, spatial_shape=(200,))
    generator = torch.Generator().manual_seed(100)
    return classifier_accuracy(model, tone_task, steps, generator, n_eval=512)


def test_the_spectral_front_end_learns_a_planted_band_power_task_faster() -> None:
    spectral, linear = tone_accuracy("spectral"), tone_accuracy("linear")
    assert spectral > 0.8, spectral
    assert spectral > linear + 0.1, (spectral, linear)
