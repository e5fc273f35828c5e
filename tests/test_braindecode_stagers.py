"""The field's deep stagers from braindecode as partnd classifiers: their shapes on the recipes'
windows and night crops, training by ``finetune`` on a planted task, saving and reloading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from partnd._validation import InputError
from partnd.datasets.nights import SleepNightDataset
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.training import evaluate, finetune
from partnd.models.braindecode_stagers import (
    NightStager,
    WindowStager,
    build_stager,
    list_stagers,
)
from partnd.models.serialization import load_classifier
from tests.staged_stores import write_staged_store

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ["W", "N1", "N2", "N3", "R"]
#: The recipes' windows: 6 EEG channels, 30 s at 100 Hz (preprocessing's store), and the test
#: cohort's 2 channels of 30 s at 10 Hz.
RECIPE_WINDOWS = [(6, 100.0, 3000), (2, 10.0, 300)]
#: U-Sleep's depth per window shape (its input is halved ``depth`` times; braindecode's 12 for
#: 30 s at 100 Hz).
USLEEP_DEPTH = {3000: 12, 300: 4}


def test_the_stagers_are_braindecodes_classes() -> None:
    import braindecode.models

    assert list_stagers() == ["chambon2018", "deepsleepnet", "usleep"]
    expected = {
        "chambon2018": braindecode.models.SleepStagerChambon2018,
        "deepsleepnet": braindecode.models.DeepSleepNet,
        "usleep": braindecode.models.USleep,
    }
    for name, cls in expected.items():
        options = {"depth": 4} if name == "usleep" else {}
        stager = build_stager(
            name, n_chans=2, n_outputs=5, n_times=300, sfreq=10.0, options=options
        )
        assert type(stager.model) is cls
        assert isinstance(stager, NightStager if name == "usleep" else WindowStager)


@pytest.mark.parametrize(("n_chans", "sfreq", "n_times"), RECIPE_WINDOWS)
@pytest.mark.parametrize("name", ["chambon2018", "deepsleepnet"])
def test_window_stagers_map_windows_to_logits(
    name: str, n_chans: int, sfreq: float, n_times: int
) -> None:
    torch.manual_seed(0)
    stager = build_stager(name, n_chans=n_chans, n_outputs=5, n_times=n_times, sfreq=sfreq)
    logits = stager.eval()(torch.randn(3, n_chans, n_times))
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    assert stager.signal_info.spatial_shape == (n_times,) and stager.signal_info.sfreq == sfreq
    with pytest.raises(InputError, match="x: expected a tensor"):
        stager(torch.randn(3, n_chans, n_times - 1))


@pytest.mark.parametrize(("n_chans", "sfreq", "n_times"), RECIPE_WINDOWS)
def test_usleep_classifies_every_window_of_crops_and_whole_nights(
    n_chans: int, sfreq: float, n_times: int
) -> None:
    """Night crops of the recipes' length (``night_crop``: 128 at 100 Hz; 16 in tests), whole
    nights of any length (odd, shorter than a crop, one window) in one pass."""
    torch.manual_seed(0)
    options = {"depth": USLEEP_DEPTH[n_times]}
    stager = build_stager(
        "usleep", n_chans=n_chans, n_outputs=5, n_times=n_times, sfreq=sfreq, options=options
    ).eval()
    crop = 128 if n_times == 3000 else 16
    with torch.no_grad():
        logits = stager(torch.randn(2, crop, n_chans, n_times))
    assert logits.shape == (2, crop, 5)
    for length in (37, 3, 1):
        windows = torch.randn(length, n_chans, n_times)
        probabilities = stager.predict_night(windows, None)
        assert probabilities.shape == (length, 5)
        torch.testing.assert_close(probabilities.sum(-1), torch.ones(length))


def test_usleep_reads_padding_as_zeros() -> None:
    stager = build_stager(
        "usleep", n_chans=2, n_outputs=5, n_times=300, sfreq=10.0, options={"depth": 4}
    ).eval()
    x = torch.randn(1, 6, 2, 300)
    valid = torch.tensor([[True, True, True, True, False, False]])
    zeroed = x.clone()
    zeroed[:, 4:] = 0
    with torch.no_grad():
        torch.testing.assert_close(stager(x, valid), stager(zeroed))


def test_layer_decay_leaves_every_stager_parameter_at_the_full_rate() -> None:
    """Layer-wise decay scales transformer blocks; a stager has none (braindecode's
    ``encoder_blocks`` are no ViT ``blocks``), so the recipes' ``layer_decay`` changes nothing."""
    from partnd.engine.optim import param_groups

    for name in list_stagers():
        options = {"depth": 4} if name == "usleep" else {}
        stager = build_stager(
            name, n_chans=2, n_outputs=5, n_times=300, sfreq=10.0, options=options
        )
        groups = param_groups(stager, weight_decay=0.05, layer_decay=0.75)
        assert {group["lr_scale"] for group in groups} == {1.0}, name


def test_configuration_pairs_stagers_with_what_they_read() -> None:
    with pytest.raises(InputError, match="stager"):
        FinetuneConfig.preset("test", stager="tinysleepnet")
    with pytest.raises(InputError, match="context: expected 'night'"):
        FinetuneConfig.preset("test", stager="usleep")
    with pytest.raises(InputError, match="context: expected None"):
        FinetuneConfig.preset("test", stager="chambon2018", context="night")
    with pytest.raises(InputError, match="stager_overrides"):
        build_stager(
            "usleep", n_chans=2, n_outputs=5, n_times=300, sfreq=10.0, options={"width": 3}
        )


@pytest.fixture(scope="module")
def staged_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_staged_store(
        tmp_path_factory.mktemp("stagers") / "store.zarr", ["C3", "C4"], records=4
    )


def test_finetune_trains_a_window_stager_on_a_planted_task(
    staged_store: Path, tmp_path: Path
) -> None:
    train = InMemoryWindows(staged_store, records=["r0", "r1", "r2"], progress=False)
    held_out = InMemoryWindows(staged_store, records=["r3"], progress=False)
    config = FinetuneConfig.preset(
        "test", stager="chambon2018", batch_size=16, epochs=1, min_steps=120, lr=3e-3,
        eval_every_steps=40,
    )  # fmt: skip
    result = finetune(
        None, train, num_classes=5, val_dataset=held_out, out_dir=tmp_path, config=config,
        class_names=NAMES,
    )  # fmt: skip
    model = result.model
    assert isinstance(model, WindowStager) and model.signal_info.ch_names == ("C3", "C4")
    report = evaluate(model, held_out, device="cpu")
    assert report.cohen_kappa > 0.6, report
    assert result.best_metrics["cohen_kappa"] == pytest.approx(report.cohen_kappa)
    reloaded = load_classifier(tmp_path)
    assert isinstance(reloaded, WindowStager) and reloaded.class_names == NAMES
    assert reloaded.signal_info == model.signal_info and reloaded.spec() == model.spec()
    x = held_out[0][0][None]
    torch.testing.assert_close(reloaded(x), model(x))
    with pytest.raises(InputError, match="encoder: expected None"):
        finetune("vit_test", train, num_classes=5, out_dir=tmp_path / "vit", config=config)


@pytest.mark.slow
def test_finetune_trains_usleep_on_night_crops_and_scores_whole_nights(
    staged_store: Path, tmp_path: Path
) -> None:
    train = InMemoryWindows(staged_store, records=["r0", "r1", "r2"], progress=False)
    held_out = SleepNightDataset(staged_store, records=["r3"], context=1, progress=False)
    config = FinetuneConfig.preset(
        "test", stager="usleep", stager_overrides={"depth": 4}, context="night", night_crop=16,
        batch_size=4, epochs=1, min_steps=150, lr=3e-3, eval_every_steps=50,
    )  # fmt: skip
    result = finetune(
        None, train, num_classes=5, val_dataset=held_out, out_dir=tmp_path, config=config,
        class_names=NAMES,
    )  # fmt: skip
    model = result.model
    assert isinstance(model, NightStager)
    report = evaluate(model, held_out, device="cpu")
    assert report.n == 48 and report.cohen_kappa > 0.6, report
    reloaded = load_classifier(tmp_path)
    assert isinstance(reloaded, NightStager) and reloaded.spec()["options"] == {"depth": 4}
    assert evaluate(reloaded, held_out, device="cpu").cohen_kappa == pytest.approx(
        report.cohen_kappa
    )


def test_predict_reads_windows_as_one_night_for_usleep() -> None:
    """``partnd.predict`` gives U-Sleep an array's windows as one night, as the night
    classifier; a window stager classifies each window alone."""
    from partnd.inference import predict

    torch.manual_seed(0)
    windows = torch.randn(9, 2, 300)
    usleep = build_stager(
        "usleep", n_chans=2, n_outputs=5, n_times=300, sfreq=10.0, options={"depth": 4}
    ).eval()
    night = predict(usleep, windows.numpy(), device="cpu").probabilities
    torch.testing.assert_close(torch.from_numpy(night), usleep.predict_night(windows))
    chambon = build_stager("chambon2018", n_chans=2, n_outputs=5, n_times=300, sfreq=10.0).eval()
    alone = predict(chambon, windows.numpy(), device="cpu").probabilities
    with torch.no_grad():
        expected = chambon(windows).softmax(-1)
    torch.testing.assert_close(torch.from_numpy(alone), expected)
