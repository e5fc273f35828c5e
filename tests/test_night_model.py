"""The night classifier: shapes, padding, time of night, whole nights, pretrained temporal level."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from partnd._validation import InputError
from partnd.models import (
    HierarchicalEncoder,
    NightClassifier,
    ViTEncoder,
    create_encoder,
    create_temporal_encoder,
)
from partnd.models.night import HALF_LIFE_HOURS

pytestmark = pytest.mark.usefixtures("one_thread")

CHANNELS, TILE, WINDOW = 2, 10, 60  # 6 tiles per window


def _night(temporal: str = "temporal_test", **overrides) -> NightClassifier:
    window = create_encoder("vit_test", in_chans=CHANNELS, patch_size=TILE, ndim=1)
    return NightClassifier.from_window_encoder(
        window, 5, window_samples=WINDOW, temporal=temporal, temporal_overrides=overrides
    )


def _time(length: int, start_hours: float = 0.0, night_hours: float = 8.0) -> torch.Tensor:
    """[L, 2] time of night of ``length`` back-to-back 30 s windows."""
    hours = start_hours + torch.arange(length) / 120.0
    return torch.stack([hours, hours / night_hours], dim=1)


def test_shapes_for_any_length_and_heads_spanning_minutes_to_hours() -> None:
    model = _night(num_heads=4, embed_dim=16).eval()
    assert model.encoder.temporal.pos_embed is None  # positions enter as time
    half_lives = model.log_half_life.exp()
    assert half_lives.shape == (1, 4)  # one per block and head
    torch.testing.assert_close(half_lives[0, [0, -1]], torch.tensor(HALF_LIFE_HOURS))
    for length in (1, 7, 300):
        x = torch.randn(2, length, CHANNELS, WINDOW)
        time = _time(length).expand(2, -1, -1)
        assert model(x, None, time).shape == (2, length, 5)
    with pytest.raises(InputError, match="time"):
        model(torch.randn(1, 3, CHANNELS, WINDOW), None, torch.zeros(1, 3, 1))
    with pytest.raises(InputError, match="x"):
        model(torch.randn(1, 3, CHANNELS, WINDOW + 1), None, _time(3)[None])


def test_padding_is_invisible_to_valid_windows() -> None:
    torch.manual_seed(0)
    model = _night().eval()
    x = torch.randn(2, 9, CHANNELS, WINDOW)
    time = torch.stack([_time(9), _time(9, start_hours=3.0)])
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[1, 5:] = False  # the second night is 5 windows long, padded to 9
    padded = model(x, valid, time)
    other_x, other_time = x.clone(), time.clone()
    other_x[1, 5:] = 100.0 * torch.randn(4, CHANNELS, WINDOW)
    other_time[1, 5:] = torch.rand(4, 2) * 50.0
    torch.testing.assert_close(model(other_x, valid, other_time)[1, :5], padded[1, :5])
    alone = model(x[1:, :5], None, time[1:, :5])  # the same night alone, without padding
    torch.testing.assert_close(padded[1, :5], alone[0], atol=1e-5, rtol=1e-5)


def test_time_of_night_is_read() -> None:
    torch.manual_seed(0)
    model = _night().eval()
    with torch.no_grad():  # a head of unit weights, so that differences of the tokens show
        model.head.weight.normal_()
    x = torch.randn(1, 6, CHANNELS, WINDOW)
    base = model(x, None, _time(6)[None])
    # the distance between windows biases attention: the same windows further apart differ
    spread = torch.stack([torch.arange(6) / 4.0, torch.arange(6) / 32.0], dim=1)
    assert (model(x, None, spread[None]) - base).abs().max() > 1e-2
    # the time embedding starts at zero (a pretrained temporal level starts as it was), so a
    # shift of the whole night changes nothing until it has learned to read the hour
    torch.testing.assert_close(model(x, None, _time(6, start_hours=2.0)[None]), base)
    with torch.no_grad():
        model.time_embed[2].weight.normal_()
    assert (model(x, None, _time(6, start_hours=2.0)[None]) - base).abs().max() > 1e-2


def _hour_task(model: NightClassifier, steps: int, blind: bool) -> float:
    """Train the night level on window embeddings of pure noise whose stage is 1 after hour 2
    (0 before); return the accuracy on fresh nights. ``blind`` feeds zero time instead of the
    true one."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    width = model.encoder.window.embed_dim

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        starts = torch.rand(size, generator=generator) * 3.5
        time = torch.stack([_time(8, float(start), 4.0) for start in starts])
        embeddings = torch.randn(size, 8, width, generator=generator)
        labels = (time[..., 0] > 2.0).long()
        return embeddings, (torch.zeros_like(time) if blind else time), labels

    model.train()
    for _ in range(steps):
        embeddings, time, labels = batch(8)
        logits = model.classify_embeddings(embeddings, time)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    embeddings, time, labels = batch(64)
    with torch.no_grad():
        predicted = model.classify_embeddings(embeddings, time).argmax(-1)
    return float((predicted == labels).float().mean())


def test_a_task_that_needs_the_hour_is_learnt_only_with_it() -> None:
    torch.manual_seed(0)
    sighted = _hour_task(_night(), steps=150, blind=False)
    torch.manual_seed(0)
    blind = _hour_task(_night(), steps=150, blind=True)
    assert sighted > 0.9, sighted
    assert blind < 0.7, blind  # the windows are noise: without the hour, about the prior


def test_predict_night_reads_every_window_once_in_order() -> None:
    torch.manual_seed(0)
    model = _night().eval()
    with torch.no_grad():  # a head of unit weights, so that differences of the tokens show
        model.head.weight.normal_()
    night = torch.randn(11, CHANNELS, WINDOW)
    time = _time(11, start_hours=0.5)
    probabilities = model.predict_night(night, time, batch_size=3)  # embedded in chunks of 3
    assert probabilities.shape == (11, 5)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(11))
    with torch.no_grad():
        whole = model(night[None], None, time[None])[0].softmax(-1)
    torch.testing.assert_close(probabilities, whole, atol=1e-5, rtol=1e-5)
    # the same windows in another order are another night: the order is read
    order = torch.randperm(11)
    with torch.no_grad():
        logits = model(night[None], None, time[None])[0]
        shuffled = model(night[order][None], None, time[None])[0]
    assert (shuffled - logits[order]).abs().max() > 1e-3
    with pytest.raises(InputError, match="time"):
        model.predict_night(night, time[:10])


def test_a_pretrained_temporal_level_initialises_the_night_level() -> None:
    window = create_encoder("vit_test", in_chans=CHANNELS, patch_size=TILE, ndim=1)
    temporal = create_temporal_encoder(
        window.embed_dim, "temporal_test", num_positions=12, pos_mask_ratio=0.5
    )
    with torch.no_grad():
        temporal.pos_mask_token.normal_()
    encoder = HierarchicalEncoder(window, temporal, WINDOW)
    model = NightClassifier(encoder, 5)
    night = model.encoder.temporal
    assert night.pos_embed is None and night.pos_mask_token is None
    torch.testing.assert_close(night.blocks[0].attn.qkv.weight, temporal.blocks[0].attn.qkv.weight)
    # every window enters as a window whose slot was hidden in pretraining
    torch.testing.assert_close(
        night.patch_embed.bias, temporal.patch_embed.bias + temporal.pos_mask_token
    )
    assert temporal.num_positions == 12  # the given encoder is copied, not changed
    with pytest.raises(InputError, match="num_classes"):
        NightClassifier(encoder, 1)
    conv = ViTEncoder(
        in_chans=1,
        patch_size=window.embed_dim,
        ndim=1,
        embed_dim=16,
        depth=1,
        num_heads=2,
        num_positions=12,
        pos_mask_ratio=0.5,
        frontend="conv",
    )  # a mask embedding cannot be folded into a convolutional stem
    with pytest.raises(InputError, match=r"^encoder: expected a temporal level with the linear"):
        NightClassifier(HierarchicalEncoder(window, conv, WINDOW), 5)


def test_night_refusal_speaks_of_a_night_classifier():
    """Issue 43 item 21: the refusal of an array for a night model names the night classifier."""
    from partnd.finetuning.sequence import as_sequence_dataset

    array = np.zeros((3, 1, 3000), dtype=np.float32)
    with pytest.raises(InputError) as night:
        as_sequence_dataset(array, None, "dataset", night=True)
    assert "a night classifier reads whole records" in str(night.value)
    assert "sequence classifier" not in str(night.value)
    with pytest.raises(InputError, match="a sequence classifier reads consecutive windows"):
        as_sequence_dataset(array, 5, "dataset")
