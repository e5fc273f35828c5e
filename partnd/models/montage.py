"""Models that carry their montage: switching a channel-set model to the data's channels,
recording the derivations it has seen, and configuring a channel-set encoder.

A channel-set encoder (front-end ``"channel_set"``,
:class:`partnd.models.channel_set.ChannelSetPatchEmbed`) reads any named derivations of 10-05
electrodes; its model's :class:`~partnd.signal_info.SignalInfo` has ``channel_mode="set"`` and
lists, as ``ch_names``, the derivations it saw in training. Applying it to data of another
montage switches its layout to the data's channels (:func:`read_data_channels`, after
:func:`~partnd.signal_info.match_signal` checked that their electrodes are known).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from partnd._validation import check
from partnd.models.channel_set import CHANNEL_SET, check_channel_options
from partnd.models.vit import ViTEncoder
from partnd.signal_info import SignalInfo

__all__ = ["channel_set_overrides", "read_data_channels", "seen_signal"]


def read_data_channels(model: nn.Module, info: SignalInfo | None) -> None:
    """Let a channel-set model read data of another layout: every channel-set encoder in
    ``model`` switches to the data's channels (:meth:`ViTEncoder.read_channels`). A fixed-channel
    model, or data without channel names, is left as it is (the data were checked against the
    model by :func:`partnd.signal_info.match_signal` before).

    Args:
        model: A classifier or encoder.
        info: The data's signal (its ``ch_names`` in item order).
    """
    if info is None or info.ch_names is None:
        return
    for module in model.modules():
        if (
            isinstance(module, ViTEncoder)
            and module.channel_mode == "set"
            and tuple(module.architecture["frontend_options"]["channels"]) != info.ch_names
        ):
            module.read_channels(info.ch_names)


def channel_set_overrides(
    overrides: Mapping[str, Any],
    channels: Sequence[str] | None,
    options: Mapping[str, Any] | None = None,
    argument: str = "channel_options",
) -> dict[str, Any]:
    """Encoder overrides that turn a fixed-channel configuration into a channel-set one.

    The configured front-end (``overrides["frontend"]``, default ``"linear"``, with its
    ``frontend_options``) becomes the per-channel tokenizer of a ``"channel_set"`` front-end
    laid out in ``channels``.

    Args:
        overrides: Keyword overrides of an encoder preset (``create_encoder``).
        channels: The training data's channel names.
        options: ``frequencies``, ``channel_dropout``, ``subset_sampling``, ``channel_pool``,
            ``channel_pool_heads`` (see :class:`ChannelSetPatchEmbed`).
        argument: Name of ``options`` in error messages.

    Returns:
        The new overrides.

    Raises:
        InputError: For data without channel names, an unknown option or a value that no
            front-end accepts.
    """
    given = dict(options or {})
    check_channel_options(given, argument)
    check(
        channels is not None,
        "channel_mode",
        "'fixed' for data without channel names ('set' reads channels by their names)",
        "'set'",
    )
    assert channels is not None
    result = dict(overrides)
    tokenizer = result.pop("frontend", "linear")
    tokenizer_options = result.pop("frontend_options", {})
    result["frontend"] = CHANNEL_SET
    result["frontend_options"] = {
        "channels": [str(name) for name in channels],
        "tokenizer": tokenizer,
        "tokenizer_options": dict(tokenizer_options),
        **given,
    }
    return result


def seen_signal(data: SignalInfo, before: SignalInfo | None = None) -> SignalInfo:
    """The montage record of a channel-set model trained on ``data``: its signal with
    ``channel_mode="set"`` and, as ``ch_names``, the derivations of ``before`` (what a pretrained
    encoder had seen) followed by the new ones of ``data``."""
    names = list(before.ch_names or ()) if before is not None else []
    names += [name for name in data.ch_names or () if name not in names]
    return dataclasses.replace(data, in_chans=len(names), ch_names=tuple(names), channel_mode="set")
