"""Channel maps: which stored channel comes from which channel(s) of a recording.

A map names each stored channel and how to get it from the file, tried in order:

- a channel of the file by its name (``Fpz-Cz <- "EEG Fpz-Cz"``: renamed);
- or a derivation ``A - B`` of two channels of the file (``C4-M1 <- C4 - M1`` from a
  referential recording: the difference of the two signals).

In text (``--channels``): ``STORED=SOURCE|SOURCE...`` separated by commas, where a ``SOURCE`` is a
channel name or ``A - B`` (spaces around the minus). A bare ``SOURCE`` without spaces around a
``-`` (``C4-M1``) is first looked up as a channel name, and else, when the file holds both ``C4``
and ``M1``, derived as ``C4 - M1``. ``STORED`` alone stands for ``STORED=STORED``.

Built-in maps for the dataset families (:data:`BUILTIN_CHANNEL_MAPS`):

- ``sleep-edf``: ``Fpz-Cz`` and ``Pz-Oz`` from ``EEG Fpz-Cz`` and ``EEG Pz-Oz`` (Sleep-EDF's
  two bipolar channels);
- ``shhs`` (NSRR SHHS): ``C4-A1`` from ``EEG``, ``C3-A2`` from ``EEG(sec)``, ``EEG2`` or
  ``EEG 2`` (the name of the second EEG differs by visit);
- ``mass``: ``C3`` and ``C4`` from ``EEG C3-CLE`` / ``EEG C3-LER`` (and C4; MASS subsets
  reference to linked or computed linked ears);
- ``pc18``: PhysioNet 2018's ``F3-M2 F4-M1 C3-M2 C4-M1 O1-M2 O2-M1``, by name or derived from
  referential ``F3``... and ``M1``/``M2`` channels.

Each record keeps, per stored channel, the source it came from (``channel_derivations``: the
channel name, or ``"C4 - M1"``). A recording that holds no source of a stored channel fails with
:data:`~partnd.preprocessing.errors.MISSING_CHANNEL`, naming the record, what was tried and the
channels the file holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from partnd._validation import InputError, check

from .errors import MISSING_CHANNEL, RecordError

__all__ = [
    "BUILTIN_CHANNEL_MAPS",
    "ChannelMap",
    "ResolvedChannels",
    "channel_map",
    "parse_channel_map",
]


@dataclass(frozen=True)
class ResolvedChannels:
    """Where a recording's stored channels come from.

    Attributes:
        stored: Stored channel names, in order.
        derivations: ``[C]`` per stored channel ``(positive, negative or None)`` source names.
    """

    stored: list[str]
    derivations: list[tuple[str, str | None]]

    @property
    def descriptions(self) -> dict[str, str]:
        """Stored name -> ``"EEG Fpz-Cz"`` or ``"C4 - M1"`` (the record's
        ``channel_derivations``)."""
        return {
            name: positive if negative is None else f"{positive} - {negative}"
            for name, (positive, negative) in zip(self.stored, self.derivations, strict=True)
        }

    @property
    def sources(self) -> list[str]:
        """Every channel of the file that is read, without repeats."""
        names = [name for pair in self.derivations for name in pair if name is not None]
        return list(dict.fromkeys(names))

    def data(self, raw: object) -> np.ndarray:
        """``[C, N]`` float64 signals in µV of the stored channels from ``raw``
        (an ``mne.io.BaseRaw``)."""
        sources = self.sources
        read = raw.get_data(picks=sources, units="uV")  # type: ignore[attr-defined]
        index = {name: row for row, name in enumerate(sources)}
        rows = []
        for positive, negative in self.derivations:
            signal = read[index[positive]]
            rows.append(signal if negative is None else signal - read[index[negative]])
        return np.stack(rows)


@dataclass(frozen=True)
class ChannelMap:
    """Stored channel -> sources tried in order (see the module docstring).

    Attributes:
        channels: ``(stored name, (source, ...))`` pairs, in stored order; a source is a channel
            name, ``"A - B"``, or a name with ``-`` that is derived when the file lacks it.
        name: The map's name (a built-in family, or ``"custom"``).
    """

    channels: tuple[tuple[str, tuple[str, ...]], ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        stored = [name for name, _ in self.channels]
        check(bool(stored), "channels", "at least one stored channel", self.channels)
        check(len(set(stored)) == len(stored), "channels", "distinct stored names", stored)
        for name, sources in self.channels:
            check(
                bool(name.strip()) and bool(sources) and all(s.strip() for s in sources),
                "channels",
                "STORED=SOURCE pairs with non-empty names",
                f"{name!r}: {sources}",
            )

    @property
    def stored(self) -> list[str]:
        """Stored channel names, in order."""
        return [name for name, _ in self.channels]

    def describe(self) -> str:
        """The map in ``--channels`` text."""
        return ",".join(f"{name}={'|'.join(sources)}" for name, sources in self.channels)

    def resolve(self, available: Sequence[str], record: str) -> ResolvedChannels:
        """The source of each stored channel among ``available`` channel names.

        Args:
            available: The recording's channel names.
            record: The record (file) name for the error message.

        Raises:
            RecordError: ``missing_channel``: some stored channel has no source in the file.
        """
        names = set(available)
        derivations: list[tuple[str, str | None]] = []
        missing = []
        for stored, sources in self.channels:
            found = next(
                (pair for source in sources if (pair := _source(source, names)) is not None),
                None,
            )
            if found is None:
                missing.append(f"{stored} (tried {' | '.join(sources)})")
            else:
                derivations.append(found)
        if missing:
            raise RecordError(
                MISSING_CHANNEL,
                f"{record}: the channel map {self.name!r} needs {'; '.join(missing)}, "
                f"but the recording holds {list(available)}",
            )
        return ResolvedChannels(self.stored, derivations)


def _source(source: str, names: set[str]) -> tuple[str, str | None] | None:
    """``(positive, negative)`` of one source among ``names``, or None."""
    if " - " in source:
        positive, _, negative = (part.strip() for part in source.partition(" - "))
        return (positive, negative) if {positive, negative} <= names else None
    if source in names:
        return source, None
    if source.count("-") == 1:
        positive, negative = (part.strip() for part in source.split("-"))
        if positive and negative and {positive, negative} <= names:
            return positive, negative
    return None


_PC18 = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1")

BUILTIN_CHANNEL_MAPS: dict[str, ChannelMap] = {
    "sleep-edf": ChannelMap(
        (("Fpz-Cz", ("EEG Fpz-Cz",)), ("Pz-Oz", ("EEG Pz-Oz",))), name="sleep-edf"
    ),
    "shhs": ChannelMap(
        (("C4-A1", ("EEG",)), ("C3-A2", ("EEG(sec)", "EEG2", "EEG 2"))), name="shhs"
    ),
    "mass": ChannelMap(
        (
            ("C3", ("EEG C3-CLE", "EEG C3-LER")),
            ("C4", ("EEG C4-CLE", "EEG C4-LER")),
        ),
        name="mass",
    ),
    "pc18": ChannelMap(tuple((name, (name,)) for name in _PC18), name="pc18"),
}
"""Channel maps of the dataset families, by name (``--channels shhs``)."""


def parse_channel_map(text: str) -> ChannelMap:
    """A map from ``--channels`` text: a built-in name or ``STORED=SOURCE|SOURCE,...``.

    Raises:
        InputError: Empty text, an empty name, a stored name given twice.
    """
    text = text.strip()
    if text in BUILTIN_CHANNEL_MAPS:
        return BUILTIN_CHANNEL_MAPS[text]
    items = [item.strip() for item in text.split(",") if item.strip()]
    check(
        bool(items),
        "channels",
        f"a built-in map {sorted(BUILTIN_CHANNEL_MAPS)} or STORED=SOURCE pairs",
        repr(text),
    )
    pairs = []
    for item in items:
        stored, equals, sources = item.partition("=")
        alternatives = tuple(s.strip() for s in (sources if equals else stored).split("|"))
        pairs.append((stored.strip(), alternatives))
    return ChannelMap(tuple(pairs))


def channel_map(value: ChannelMap | str | Mapping[str, str | Sequence[str]]) -> ChannelMap:
    """A :class:`ChannelMap` from a map, a built-in name or ``--channels`` text, or a mapping
    ``{stored: source or [sources]}``."""
    if isinstance(value, ChannelMap):
        return value
    if isinstance(value, str):
        return parse_channel_map(value)
    if isinstance(value, Mapping):
        return ChannelMap(
            tuple(
                (str(stored), (sources,) if isinstance(sources, str) else tuple(sources))
                for stored, sources in value.items()
            )
        )
    raise InputError(
        "channels: expected a ChannelMap, a built-in map name "
        f"{sorted(BUILTIN_CHANNEL_MAPS)}, 'STORED=SOURCE,...' or a mapping, got "
        f"{type(value).__name__}"
    )
