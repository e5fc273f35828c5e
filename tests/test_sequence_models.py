"""The hierarchical encoder and the sequence classifier: shapes, masking, context, whole nights."""

from __future__ import annotations

import pytest
import torch

from partnd._validation import InputError
from partnd.models import (
    HierarchicalEncoder,
    SequenceClassifier,
    create_encoder,
    create_temporal_encoder,
)

CHANNELS, TILE, WINDOW = 2, 10, 60  # 6 tiles per window


def _window_encoder():
    return create_encoder("vit_test", in_chans=CHANNELS, patch_size=TILE, ndim=1)


def _hierarchical(num_positions: int | None = None, ratio: float = 0.0) -> HierarchicalEncoder:
    window = _window_encoder()
    temporal = create_temporal_encoder(
        window.embed_dim, "temporal_test", num_positions=num_positions, pos_mask_ratio=ratio
    )
    return HierarchicalEncoder(window, temporal, WINDOW)


def test_hierarchical_encoder_embeds_each_window_then_mixes_them() -> None:
    torch.manual_seed(0)
    encoder = _hierarchical().eval()
    assert encoder.window.num_positions == WINDOW // TILE  # tile positions added
    windows = torch.randn(3, 5, CHANNELS, WINDOW)
    tokens = encoder.forward_features(windows)
    assert tokens.shape == (3, 1 + 5, encoder.embed_dim)
    embedding = encoder.embed_windows(windows[0])
    assert embedding.shape == (5, encoder.window.embed_dim)
    # the window level is the window encoder's [CLS] token of the on-grid tiling
    expected = encoder.window.forward_grid(windows[0])[:, 0]
    torch.testing.assert_close(embedding, expected)
    # without a temporal position embedding the window tokens are permutation-equivariant
    order = torch.tensor([4, 2, 0, 1, 3])
    shuffled = encoder.forward_features(windows[:, order])
    torch.testing.assert_close(shuffled[:, 1:], tokens[:, 1:][:, order], atol=1e-5, rtol=1e-5)


def test_hierarchical_encoder_checks_its_parts() -> None:
    window = _window_encoder()
    wrong = create_temporal_encoder(window.embed_dim + 1, "temporal_test")
    with pytest.raises(InputError, match="temporal"):
        HierarchicalEncoder(window, wrong, WINDOW)
    encoder = _hierarchical()
    with pytest.raises(InputError, match="patches"):
        encoder.forward_features(torch.randn(2, 3, CHANNELS, WINDOW + 1))


def test_sequence_classifier_shapes_and_context() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(_hierarchical(), 5, context=7).eval()
    assert model.encoder.num_positions == 7
    x = torch.randn(2, 7, CHANNELS, WINDOW)
    assert model(x).shape == (2, 7, 5)
    assert model(x[:, :4]).shape == (2, 4, 5)  # shorter sequences use the first slots
    with pytest.raises(InputError, match="embeddings"):
        model(torch.randn(1, 8, CHANNELS, WINDOW))
    # each window's logits depend on its neighbours (context is used)
    changed = x.clone()
    changed[:, 0] = torch.randn(2, CHANNELS, WINDOW)
    assert not torch.allclose(model(changed)[:, 3], model(x)[:, 3])


def test_padding_is_invisible_to_valid_windows() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(_hierarchical(), 5, context=6).eval()
    x = torch.randn(1, 6, CHANNELS, WINDOW)
    valid = torch.tensor([[True, True, True, True, False, False]])
    padded = model(x, valid)
    other = x.clone()
    other[:, 4:] = 100.0 * torch.randn(1, 2, CHANNELS, WINDOW)
    torch.testing.assert_close(model(other, valid)[:, :4], padded[:, :4])


def test_pretrained_temporal_slots_are_kept_for_the_context() -> None:
    encoder = _hierarchical(num_positions=10, ratio=0.2)
    learned = encoder.temporal.pos_embed.detach().clone()
    model = SequenceClassifier(encoder, 5, context=4)
    torch.testing.assert_close(model.encoder.temporal.pos_embed.detach(), learned[:4])
    assert model.encoder.pos_mask_token is None  # no masking when classifying
    assert encoder.temporal.num_positions == 10  # the given encoder is copied, not changed
    fresh = SequenceClassifier(_hierarchical(num_positions=3, ratio=0.2), 5, context=4)
    assert fresh.encoder.num_positions == 4


def test_predict_night_averages_every_sequence_holding_a_window() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(_hierarchical(), 3, context=4).eval()
    night = torch.randn(9, CHANNELS, WINDOW)
    probabilities = model.predict_night(night, batch_size=4)
    assert probabilities.shape == (9, 3)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(9))
    with torch.no_grad():
        runs = [model(night[s : s + 4][None])[0].softmax(-1) for s in range(6)]
    # window 0 is only in the first run; window 4 is in runs 1, 2, 3 and 4
    torch.testing.assert_close(probabilities[0], runs[0][0])
    expected = (runs[1][3] + runs[2][2] + runs[3][1] + runs[4][0]) / 4
    torch.testing.assert_close(probabilities[4], expected)
    short = model.predict_night(night[:2])  # a night shorter than the context: one sequence
    with torch.no_grad():
        torch.testing.assert_close(short, model(night[None, :2])[0].softmax(-1))


def test_from_window_encoder_wraps_a_pretrained_window_encoder() -> None:
    window = _window_encoder()
    model = SequenceClassifier.from_window_encoder(
        window, 5, context=3, window_samples=WINDOW, temporal="temporal_test"
    )
    assert window.pos_embed is None  # copied, not modified
    assert model.encoder.window.num_positions == WINDOW // TILE
    assert model(torch.randn(2, 3, CHANNELS, WINDOW)).shape == (2, 3, 5)
