"""What signal a model was trained on, and the check that data fit it.

A :class:`SignalInfo` records the channels (count and, when known, names), the spatial shape of one
item (``(n_times,)`` for a window of a 1-D signal) and, when known, the sampling rate. Models carry
the record of their training data (``encoder.signal_info``, ``classifier.signal_info``) and save
it with their weights; :func:`match_signal` compares it with the data a model is applied to and
refuses a mismatch naming the argument, or returns the channels to pick when the data hold all of
the model's channels under their names in another order or among others.

Window datasets of a sleep store expose ``ch_names``, ``sfreq`` and ``n_times``, so their record
is complete; a plain array ``[N, C, *spatial]`` gives only the channel count and the shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partnd._validation import InputError, check

__all__ = ["SignalInfo", "SignalSpec", "channel_names", "match_signal"]


@dataclass(frozen=True)
class SignalSpec:
    """Shape of every item of a dataset.

    Attributes:
        in_chans: Channels C.
        spatial_shape: Spatial extent, e.g. ``(3000,)`` for a 30 s EEG window at 100 Hz.
    """

    in_chans: int
    spatial_shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions."""
        return len(self.spatial_shape)

    @property
    def item_shape(self) -> tuple[int, ...]:
        """``(C, *spatial)``."""
        return (self.in_chans, *self.spatial_shape)


@dataclass(frozen=True)
class SignalInfo:
    """The signal of one item of a dataset (``[C, *spatial]``), as far as it is known.

    Attributes:
        in_chans: Number of channels C.
        spatial_shape: Extent of one item, e.g. ``(3000,)`` for a 30 s window at 100 Hz.
        ch_names: Channel names in item order, or ``None`` when unknown.
        sfreq: Sampling rate in Hz of a 1-D signal, or ``None`` when unknown.
        normalization: How the windows of a sleep store were normalised (``"window"``,
            ``"record"`` or ``"none"``, see :data:`partnd.engine.normalization.NORMALIZATIONS`),
            or ``None`` when unknown (arrays are used as given).
        channel_mode: ``"fixed"``: a model of this signal reads exactly these channels (picked
            by name); ``"set"``: a channel-set model, which reads any named derivations of 10-05
            electrodes, and ``ch_names`` are the derivations it has seen in training (its
            montage).
    """

    in_chans: int
    spatial_shape: tuple[int, ...]
    ch_names: tuple[str, ...] | None = None
    sfreq: float | None = None
    normalization: str | None = None
    channel_mode: str = "fixed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "spatial_shape", tuple(int(n) for n in self.spatial_shape))
        if self.ch_names is not None:
            object.__setattr__(self, "ch_names", tuple(str(name) for name in self.ch_names))
        if self.sfreq is not None:
            object.__setattr__(self, "sfreq", float(self.sfreq))
        check(self.in_chans >= 1, "in_chans", "a positive int", repr(self.in_chans))
        check(
            self.ch_names is None or len(self.ch_names) == self.in_chans,
            "ch_names",
            f"None or {self.in_chans} names (in_chans)",
            repr(self.ch_names),
        )
        check(self.sfreq is None or self.sfreq > 0, "sfreq", "None or a rate > 0", repr(self.sfreq))
        check(
            self.channel_mode in ("fixed", "set"),
            "channel_mode",
            "'fixed' or 'set'",
            repr(self.channel_mode),
        )

    @property
    def n_times(self) -> int | None:
        """Samples per item of a 1-D signal (``None`` for other shapes)."""
        return self.spatial_shape[0] if len(self.spatial_shape) == 1 else None

    @property
    def window_seconds(self) -> float | None:
        """Duration of one item in seconds, when the rate is known."""
        if self.n_times is None or self.sfreq is None:
            return None
        return self.n_times / self.sfreq

    def describe(self) -> str:
        """A short human description, e.g. ``"6 channels (F3-M2, ...) at 100 Hz, items of 3000
        samples (30 s)"``."""
        channels = f"{self.in_chans} channel{'s' if self.in_chans != 1 else ''}"
        if self.ch_names is not None:
            channels += f" ({', '.join(self.ch_names)})"
        text = channels + (f" at {self.sfreq:g} Hz" if self.sfreq is not None else "")
        shape = "x".join(map(str, self.spatial_shape))
        text += f", items of {shape} sample{'s' if shape != '1' else ''}"
        if self.window_seconds is not None:
            text += f" ({self.window_seconds:g} s)"
        if self.normalization is not None:
            text += f", {self.normalization} normalisation"
        if self.channel_mode == "set":
            text += ", any channel set of 10-05 derivations"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (:meth:`from_dict` reads it back)."""
        return {
            "in_chans": self.in_chans,
            "spatial_shape": list(self.spatial_shape),
            "ch_names": None if self.ch_names is None else list(self.ch_names),
            "sfreq": self.sfreq,
            "normalization": self.normalization,
            "channel_mode": self.channel_mode,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SignalInfo:
        """Read :meth:`to_dict`'s output (missing optional entries are unknown)."""
        names = values.get("ch_names")
        return cls(
            in_chans=int(values["in_chans"]),
            spatial_shape=tuple(values["spatial_shape"]),
            ch_names=None if names is None else tuple(names),
            sfreq=values.get("sfreq"),
            normalization=values.get("normalization"),
            channel_mode=values.get("channel_mode", "fixed"),
        )


def match_signal(
    expected: SignalInfo,
    actual: SignalInfo,
    argument: str,
    *,
    same_shape: bool = True,
    reference: str = "the model was trained on",
) -> tuple[int, ...] | None:
    """Check that data (``actual``) fit a model trained on ``expected``.

    Rules, in this order: sampling rates must agree when both are known, and so must the
    normalisation of store windows; a channel-set model (``expected.channel_mode == "set"``)
    reads any named derivations whose electrodes are in the 10-05 montage (the data must name
    their channels; they are used as they are); else, when both sides name
    their channels, the data must hold every channel of the model (picked by name, in the model's
    order), else the channel counts must agree; with ``same_shape`` the item shapes must agree
    (a classifier's grid is fixed; an encoder being fine-tuned may see other window lengths).

    Args:
        expected: What the model was trained on.
        actual: What the data hold.
        argument: Name of the data argument in error messages.
        same_shape: Also require the same item shape.
        reference: Says where ``expected`` comes from in error messages.

    Returns:
        ``None`` when the data fit as they are, else the indices of the data's channels to use,
        in the model's order.

    Raises:
        InputError: If the data do not fit, saying what the model was trained on.
    """
    trained = f"({reference} {expected.describe()})"
    if expected.sfreq is not None and actual.sfreq is not None:
        check(
            abs(expected.sfreq - actual.sfreq) < 1e-6 * expected.sfreq,
            argument,
            f"signals sampled at {expected.sfreq:g} Hz {trained}",
            f"{actual.sfreq:g} Hz",
        )
    if expected.normalization is not None and actual.normalization is not None:
        check(
            expected.normalization == actual.normalization,
            argument,
            f"windows with {expected.normalization} normalisation {trained}",
            f"{actual.normalization} normalisation",
        )
    picks: tuple[int, ...] | None = None
    if expected.channel_mode == "set":
        from partnd.models.electrodes import derivation_positions

        check(
            actual.ch_names is not None,
            argument,
            f"named channels {trained}",
            f"{actual.in_chans} unnamed channels",
        )
        assert actual.ch_names is not None
        derivation_positions(actual.ch_names, argument)
    elif expected.ch_names is not None and actual.ch_names is not None:
        missing = [name for name in expected.ch_names if name not in actual.ch_names]
        if missing:
            raise InputError(
                f"{argument}: expected the channels {list(expected.ch_names)} {trained}, got "
                f"channels {list(actual.ch_names)} (missing {missing})"
            )
        indices = tuple(actual.ch_names.index(name) for name in expected.ch_names)
        picks = None if indices == tuple(range(actual.in_chans)) else indices
    else:
        check(
            expected.in_chans == actual.in_chans,
            argument,
            f"items with {expected.in_chans} channels {trained}",
            f"items with {actual.in_chans}",
        )
    if same_shape:
        check(
            expected.spatial_shape == actual.spatial_shape,
            argument,
            f"items of spatial shape {expected.spatial_shape} {trained}",
            f"items of spatial shape {actual.spatial_shape}",
        )
    return picks


def channel_names(names: Sequence[str] | None, in_chans: int) -> tuple[str, ...] | None:
    """``names`` as a tuple when there is one per channel, else ``None`` (unknown)."""
    if names is None or isinstance(names, str) or len(names) != in_chans:
        return None
    return tuple(str(name) for name in names)
