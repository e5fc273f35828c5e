"""Tests for the fine-tuning classifier (on-grid patches, new position embedding, [CLS] head)."""

from __future__ import annotations

import pytest
import torch

from partnd._validation import InputError
from partnd.models.classifier import PatchClassifier
from partnd.models.registry import create_encoder
from partnd.models.vit import ViTEncoder
from tests.training_loops import classifier_accuracy

T, P, SLOTS = 40, 5, 8


def encoder_1d(**kwargs: object) -> ViTEncoder:
    return create_encoder("vit_test", in_chans=1, patch_size=P, ndim=1, **kwargs)


def bump_task(num: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One tile of ones in a silent signal; label: is the tile in the first half?

    The set of patches is the same for every input, only the bump's slot differs, so the task is
    solvable with a position embedding and impossible without one.
    """
    slot = torch.randint(0, SLOTS, (num,), generator=generator)
    x = 0.05 * torch.randn(num, 1, T, generator=generator)
    for i, s in enumerate(slot.tolist()):
        x[i, 0, s * P : (s + 1) * P] += 1.0
    return x, (slot < SLOTS // 2).long()


@pytest.mark.parametrize("ndim,shape,patch", [(1, (40,), 5), (2, (12, 8), 4), (3, (4, 4, 6), 2)])
def test_shapes_and_slot_count(ndim: int, shape: tuple[int, ...], patch: int) -> None:
    encoder = create_encoder("vit_test", in_chans=2, patch_size=patch, ndim=ndim)
    model = PatchClassifier(encoder, 5, spatial_shape=shape, patch_size=patch, ndim=ndim)
    expected_slots = 1
    for length in shape:
        expected_slots *= length // patch
    assert model.num_positions == expected_slots
    assert model.encoder.pos_embed is not None
    assert model.encoder.pos_embed.shape == (expected_slots, 32)
    assert model(torch.randn(3, 2, *shape)).shape == (3, 5)


def test_encoder_is_copied_and_left_untouched() -> None:
    encoder = encoder_1d()
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    model = PatchClassifier(encoder, 2, spatial_shape=(T,))
    assert model.encoder is not encoder
    assert encoder.pos_embed is None and encoder.num_classes == 0
    classifier_accuracy(model, bump_task, 2, torch.Generator().manual_seed(0), n_eval=256)
    for key, value in encoder.state_dict().items():
        torch.testing.assert_close(value, before[key])
    in_place = PatchClassifier(encoder, 2, spatial_shape=(T,), copy_encoder=False)
    assert in_place.encoder is encoder and encoder.num_classes == 2


def test_pretrained_position_embedding_is_replaced_or_removed() -> None:
    encoder = encoder_1d(num_positions=3)
    assert encoder.pos_embed is not None
    with_pos = PatchClassifier(encoder, 2, spatial_shape=(T,), pos_mask_ratio=0.25)
    assert with_pos.encoder.num_positions == SLOTS and with_pos.encoder.pos_mask_token is not None
    without_pos = PatchClassifier(encoder, 2, spatial_shape=(T,), pos_embed=False)
    assert without_pos.encoder.pos_embed is None
    assert without_pos(torch.randn(2, 1, T)).shape == (2, 2)


def test_learns_a_positional_task_only_with_position_embedding() -> None:
    torch.manual_seed(0)
    model = PatchClassifier(encoder_1d(), 2, spatial_shape=(T,))
    accuracy = classifier_accuracy(model, bump_task, 60, torch.Generator(), n_eval=256)
    assert accuracy > 0.9
    blind = PatchClassifier(encoder_1d(), 2, spatial_shape=(T,), pos_embed=False).eval()
    x = torch.zeros(2, 1, T)
    x[0, 0, :P] = 1.0  # bump in the first slot
    x[1, 0, -P:] = 1.0  # bump in the last slot: same patches, other class
    logits = blind(x)
    torch.testing.assert_close(logits[0], logits[1])  # without positions it cannot tell them apart


def test_validation() -> None:
    encoder = encoder_1d()
    model = PatchClassifier(encoder, 2, spatial_shape=(T,))
    with pytest.raises(InputError, match="x"):
        model(torch.randn(2, 1, T + 5))
    with pytest.raises(InputError, match="x"):
        model(torch.randn(2, 3, T))
    with pytest.raises(InputError, match="patch_size"):
        PatchClassifier(encoder, 2, spatial_shape=(T,), patch_size=4)
    with pytest.raises(InputError, match="ndim"):
        PatchClassifier(encoder, 2, spatial_shape=(T,), ndim=2)
    with pytest.raises(InputError, match="pos_mask_ratio"):
        PatchClassifier(encoder, 2, spatial_shape=(T,), pos_embed=False, pos_mask_ratio=0.2)
    with pytest.raises(InputError, match="spatial_shape"):
        PatchClassifier(encoder, 2, spatial_shape=(3,))
    with pytest.raises(InputError, match="num_classes"):
        PatchClassifier(encoder, 0, spatial_shape=(T,))


def test_a_pretrained_position_embedding_of_the_grids_size_is_kept() -> None:
    encoder = create_encoder("vit_test", in_chans=1, patch_size=4, ndim=2)
    encoder.add_position_embedding(16, pos_mask_ratio=0.2)  # e.g. anchored PART or MAE
    learned = encoder.pos_embed.detach().clone()  # type: ignore[union-attr]
    kept = PatchClassifier(encoder, 3, spatial_shape=(16, 16))
    assert torch.equal(kept.encoder.pos_embed.detach(), learned)  # type: ignore[union-attr]
    assert kept.encoder.pos_mask_token is None and kept.encoder.pos_mask_ratio == 0.0
    masked = PatchClassifier(encoder, 3, spatial_shape=(16, 16), pos_mask_ratio=0.1)
    assert masked.encoder.pos_mask_token is not None
    other_grid = PatchClassifier(encoder, 3, spatial_shape=(20, 20))  # 25 slots: a fresh one
    assert other_grid.encoder.num_positions == 25
    assert not PatchClassifier(encoder, 3, spatial_shape=(16, 16), pos_embed=False).use_positions
    assert torch.equal(encoder.pos_embed.detach(), learned)  # type: ignore[union-attr]
