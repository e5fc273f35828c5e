"""Which levels of a night classifier start from the pretrained encoder
(``FinetuneConfig.pretrained_levels``): both, the window encoder only, or the temporal level only
over a fresh window encoder drawn from the run's seed."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from partnd._validation import InputError
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.pretrained_levels import full_rate_parameter_names
from partnd.finetuning.sequence import build_sequence_classifier
from partnd.finetuning.training import finetune
from partnd.models import (
    HierarchicalEncoder,
    NightClassifier,
    create_encoder,
    create_temporal_encoder,
)
from partnd.models.serialization import encoder_from_spec, encoder_spec
from partnd.recipes import sleep_staging, transfer_study
from partnd.recipes.study_config import StudyConfig
from partnd.recipes.study_directory import run_recipe
from tests.finetune_helpers import optimiser_state_names, tiny_night_config

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 3


def night_config(**overrides: Any) -> FinetuneConfig:
    return tiny_night_config(**{"seed": SEED, **overrides})


def pretrained_hierarchical(trained_levels: str = "all") -> HierarchicalEncoder:
    """PART across windows' encoder as it is saved: a window ViT with tile slots under a temporal
    ViT with slot and mask embeddings, both drawn from other seeds than the runs'."""
    torch.manual_seed(7)
    window = create_encoder("vit_test", in_chans=3, patch_size=10, ndim=1)
    torch.manual_seed(11)
    temporal = create_temporal_encoder(
        window.embed_dim, "temporal_test", num_positions=4, pos_mask_ratio=0.5
    )
    return HierarchicalEncoder(window, temporal, 50, trained_levels=trained_levels)


def built(encoder: Any, config: FinetuneConfig) -> NightClassifier:
    """The night classifier ``finetune`` starts from (the global seed set as it sets it)."""
    torch.manual_seed(config.seed)
    model = build_sequence_classifier(encoder, config, num_classes=5, in_chans=3, window_samples=50)
    assert isinstance(model, NightClassifier)
    return model


def level(model: NightClassifier, name: str) -> dict[str, torch.Tensor]:
    return getattr(model.encoder, name).state_dict()


def assert_same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    for name, value in first.items():
        assert torch.equal(value, second[name]), name


def assert_all_differ(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    """Every random weight matrix of ``first`` differs from ``second``'s (norms start at 1)."""
    matrices = [name for name, value in first.items() if value.dim() >= 2]
    assert matrices
    for name in matrices:
        assert not torch.equal(first[name], second[name]), name


def test_all_is_todays_night_classifier_bit_for_bit(gappy_store: Path, tmp_path: Path) -> None:
    pretrained = pretrained_hierarchical()
    torch.manual_seed(SEED)
    today = NightClassifier(copy.deepcopy(pretrained), 5)
    assert_same(
        built(pretrained, night_config(pretrained_levels="all")).state_dict(), today.state_dict()
    )
    runs = [
        finetune(
            pretrained,
            str(gappy_store),
            num_classes=5,
            out_dir=tmp_path / name,
            config=night_config(max_steps=2, **levels),
        ).model.state_dict()
        for name, levels in (("default", {}), ("all", {"pretrained_levels": "all"}))
    ]
    assert_same(*runs)


def test_window_keeps_the_window_encoder_under_a_fresh_temporal_level(
    gappy_store: Path, tmp_path: Path
) -> None:
    pretrained = pretrained_hierarchical()
    model = built(pretrained, night_config(pretrained_levels="window"))
    assert_same(level(model, "window"), pretrained.window.state_dict())
    on_window = built(pretrained.window, night_config())  # today's night classifier on a window
    assert_same(model.state_dict(), on_window.state_dict())
    assert_all_differ(
        level(model, "temporal"), level(built(pretrained, night_config()), "temporal")
    )
    assert model.encoder.temporal.pos_mask_token is None  # a fresh one, never pretrained with one
    # the same run as on the window encoder alone, and its temporal preset is the config's
    runs = [
        finetune(
            encoder,
            str(gappy_store),
            num_classes=5,
            out_dir=tmp_path / name,
            config=night_config(max_steps=2, pretrained_levels=levels),
            temporal_overrides={"depth": 2},
        ).model
        for name, encoder, levels in (
            ("window", pretrained, "window"),
            ("plain", pretrained.window, "all"),
        )
    ]
    assert len(runs[0].encoder.temporal.blocks) == 2
    assert_same(runs[0].state_dict(), runs[1].state_dict())


def test_temporal_keeps_the_temporal_level_over_a_fresh_window_encoder() -> None:
    pretrained = pretrained_hierarchical()
    model = built(pretrained, night_config(pretrained_levels="temporal"))
    everything = built(pretrained, night_config())
    # the temporal level as the night classifier keeps it (mask folded in, slot table dropped),
    # and the classifier's other fresh parts drawn as with "all"
    assert_same(level(model, "temporal"), level(everything, "temporal"))
    for name, value in everything.state_dict().items():
        if not name.startswith("encoder.window."):
            assert torch.equal(model.state_dict()[name], value), name
    torch.manual_seed(SEED)
    fresh = encoder_from_spec(encoder_spec(pretrained.window))
    assert_same(level(model, "window"), fresh.state_dict())
    assert_all_differ(level(model, "window"), pretrained.window.state_dict())
    other_seed = built(pretrained, night_config(pretrained_levels="temporal", seed=SEED + 1))
    assert_all_differ(level(other_seed, "window"), level(model, "window"))


def held_names(run: Path, model: torch.nn.Module) -> set[str]:
    """The parameters without AdamW state after a run that stopped inside its probe phase."""
    return {name for name, _ in model.named_parameters()} - optimiser_state_names(run)


@pytest.mark.parametrize(
    ("levels", "held_level"), [("temporal", "encoder.temporal."), ("window", "encoder.window.")]
)
def test_probe_steps_hold_only_the_levels_kept(
    gappy_store: Path, tmp_path: Path, levels: str, held_level: str
) -> None:
    pretrained = pretrained_hierarchical()
    config = night_config(probe_steps=2, epochs=4, pretrained_levels=levels)
    run = tmp_path / levels
    model = finetune(
        pretrained, str(gappy_store), num_classes=5, out_dir=run, config=config, max_steps=2
    ).model
    held = held_names(run, model)
    level_names = {name for name, _ in model.named_parameters() if name.startswith(held_level)}
    assert held == level_names and held
    start = built(pretrained, config)  # held: not one bit moved
    for name in held:
        assert torch.equal(model.state_dict()[name], start.state_dict()[name]), name


def test_meaningless_levels_are_refused(gappy_store: Path, tmp_path: Path) -> None:
    field = r"^FinetuneConfig\.pretrained_levels: expected "
    with pytest.raises(
        InputError, match=field + re.escape("'all' | 'window' | 'temporal', got 'both'")
    ):
        night_config(pretrained_levels="both")
    with pytest.raises(InputError, match=field + "'all' for a single-window classifier"):
        FinetuneConfig.preset("test", pretrained_levels="window")
    with pytest.raises(InputError, match=field + "'all' for a single-window classifier"):
        FinetuneConfig.preset(
            "test", stager="usleep", context="night", pretrained_levels="temporal"
        )

    def run(encoder: Any, levels: str, name: str) -> None:
        finetune(
            encoder,
            str(gappy_store),
            num_classes=5,
            out_dir=tmp_path / name,
            config=night_config(max_steps=1, pretrained_levels=levels),
        )

    with pytest.raises(InputError, match=field + "'all' when training from scratch"):
        run(None, "window", "scratch")
    with pytest.raises(InputError, match=field + "'all' when training from scratch"):
        run("vit_test", "temporal", "preset")
    window = pretrained_hierarchical().window
    with pytest.raises(InputError, match=field + "'all' or 'window' for a pretrained window"):
        run(window, "temporal", "window_only")
    with pytest.raises(InputError, match=field + "'all' when training from scratch"):
        build_sequence_classifier(
            None,
            night_config(pretrained_levels="temporal"),
            num_classes=5,
            in_chans=3,
            window_samples=50,
        )
    with pytest.raises(InputError, match=field + "'all' or 'temporal' for an encoder pretrained"):
        run(pretrained_hierarchical("temporal"), "window", "held_window")
    assert not any(
        (tmp_path / name / "checkpoints").exists() for name in ("scratch", "preset", "held_window")
    )
    with pytest.raises(
        InputError,
        match=r"^FinetuneConfig\.decay_random_window: expected False without a layer_decay",
    ):
        night_config(decay_random_window=True)
    with pytest.raises(InputError, match=r"^FinetuneConfig\.decay_random_window: expected bool"):
        night_config(layer_decay=0.5, decay_random_window="yes")
    with pytest.raises(InputError, match=r"^trained_levels: expected one of \('all', 'temporal'\)"):
        pretrained_hierarchical("window")
    # a temporal preset is refused where the pretrained temporal level is kept
    with pytest.raises(InputError, match=r"^FinetuneConfig\.temporal_overrides: expected no arch"):
        finetune(
            pretrained_hierarchical(),
            str(gappy_store),
            num_classes=5,
            out_dir=tmp_path / "kept",
            config=night_config(pretrained_levels="temporal"),
            temporal_overrides={"depth": 2},
        )


def lr_scales(run: Path) -> dict[str, float]:
    """``{parameter name: lr_scale}`` of the run's last optimiser state."""
    groups = torch.load(run / "checkpoints" / "last.pt", weights_only=False)["optimizer"]
    return {name: g["lr_scale"] for g in groups["param_groups"] for name in g["param_names"]}


@pytest.mark.parametrize(
    ("trained", "levels", "decay_random", "window_decayed"),
    [
        ("all", "all", False, True),
        ("all", "temporal", False, False),
        ("temporal", "all", False, False),
        ("temporal", "all", True, True),
        ("all", "temporal", True, True),
    ],
)
def test_layer_decay_leaves_an_untrained_window_encoder_at_the_full_rate(
    gappy_store: Path,
    tmp_path: Path,
    trained: str,
    levels: str,
    decay_random: bool,
    window_decayed: bool,
) -> None:
    """Layer-wise decay keeps pretrained features; a window encoder drawn fresh (``temporal``
    kept) or held at its random start by the pretext has none, so it trains at the rate a
    classifier from scratch gives it, unless ``decay_random_window`` asks for the decay. The
    temporal level and the head are at the full rate in every case."""
    result = finetune(
        pretrained_hierarchical(trained),
        str(gappy_store),
        num_classes=5,
        out_dir=tmp_path / "run",
        config=night_config(
            max_steps=1,
            layer_decay=0.5,
            pretrained_levels=levels,
            decay_random_window=decay_random,
        ),
    )
    scales = lr_scales(tmp_path / "run")
    window = {name: scale for name, scale in scales.items() if name.startswith("encoder.window.")}
    rest = {name: scale for name, scale in scales.items() if name not in window}
    assert window and set(rest.values()) == {1.0}
    untrained = "temporal" in (trained, levels)
    assert set(full_rate_parameter_names(result.model)) == (set(window) if untrained else set())
    if window_decayed:
        assert window["encoder.window.patch_embed.weight"] == 0.5**3  # depth 2: 4 levels
        assert window["encoder.window.blocks.1.attn.qkv.weight"] == 0.5
    else:
        assert set(window.values()) == {1.0}
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["resolved"]["full_rate_parameters"] == (0 if window_decayed else len(window))


def test_the_study_sets_it_for_pretrained_night_rows_only(tmp_path: Path) -> None:
    def study(out: str, rows: list[tuple[str, str]], *night_set: str) -> StudyConfig:
        options = [item for value in night_set for item in ("--night-set", value)]
        args = sleep_staging.build_parser("t").parse_args(["all", "--out", out, *options])
        return sleep_staging.study_from_args(args, rows).config

    rows = [("part_windows", "night"), ("supervised", "night"), ("part_windows", "probe")]
    config = study(str(tmp_path / "temporal"), rows, "pretrained_levels=temporal")
    assert config.settings["night_overrides"] == {"pretrained_levels": "temporal"}
    assert config.finetune_config("part_windows", 0, "night").pretrained_levels == "temporal"
    assert config.finetune_config("part_windows", 0, "window").pretrained_levels == "all"
    assert config.finetune_config("supervised", 0, "night").pretrained_levels == "all"
    assert config.finetune_config("usleep", 0, "night").pretrained_levels == "all"
    refused = str(tmp_path / "refused")
    message = r"^FinetuneConfig\.pretrained_levels: expected 'all' or 'window' for the row part:n"
    with pytest.raises(InputError, match=message):
        study(refused, [("part", "night"), *rows], "pretrained_levels=temporal")
    assert not Path(refused).exists()  # refused before the study directory is claimed
    decayed = study(str(tmp_path / "decayed"), rows, "decay_random_window=true")
    assert config.finetune_config("supervised", 0, "night").layer_decay is None
    assert config.finetune_config("part_windows", 0, "night").layer_decay == 0.75
    for method in ("supervised", "part_windows"):  # every random window encoder decayed alike
        night = decayed.finetune_config(method, 0, "night")
        assert (night.layer_decay, night.decay_random_window) == (0.75, True)
    assert decayed.finetune_config("supervised", 0, "window").layer_decay is None
    stager = decayed.finetune_config("usleep", 0, "night")
    assert (stager.layer_decay, stager.decay_random_window) == (None, False)
    window = StudyConfig(out=tmp_path, night_overrides={"pretrained_levels": "window"})
    window.check_settings(["part", "mae"], [("part", "night"), ("mae", "night")])
    assert window.finetune_config("mae", 0, "night").pretrained_levels == "window"


def test_the_transfer_study_refuses_temporal_for_rows_without_a_temporal_level(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def cells(out: Path, method: str) -> int:
        argv = ["cells", "--out", str(out), "--budgets", "1n", "--draws", "1"]
        argv += ["--methods", method, "--pools", "mixed"]
        argv += ["--night-set", "pretrained_levels=temporal"]
        return run_recipe("ts", lambda: transfer_study.main(argv), transfer_study.OPTIONS)

    assert cells(tmp_path / "mae", "mae") == 2 and not (tmp_path / "mae").exists()
    assert "FinetuneConfig.pretrained_levels" in capsys.readouterr().err
    assert cells(tmp_path / "pw", "part_windows") == 0
    assert "part_windows:night:1n:0:mixed" in capsys.readouterr().out.split()
