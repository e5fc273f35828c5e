"""Where the electrodes of a named EEG derivation sit on the head.

A channel-set encoder (:class:`partnd.models.channel_set.ChannelSetPatchEmbed`) knows a channel
only through the positions of its electrodes, so a derivation it never saw in training is read
like its neighbours. A name is parsed into its two ends: ``"F3-M2"`` -> ``("F3", "M2")``,
``"EEG Fpz-Cz"`` -> ``("Fpz", "Cz")``; a name without ``-`` is a single electrode against an
unknown (common) reference, ``("Cz", None)``. Electrodes are looked up, case-insensitively, in
MNE's 10-05 template montage (``colin27_1005``, formerly ``standard_1005``; 343 positions incl.
the mastoids M1/M2 and earlobes A1/A2), in head coordinates (metres, x to the right ear, y to the
nose, z up). A name whose electrodes the montage lacks (SHHS's ``"EEG"``, ``"EOG(L)"``, a chin
EMG) is refused, naming the channel.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Sequence

import numpy as np

from partnd._validation import InputError

__all__ = ["MONTAGE", "derivation_ends", "derivation_positions", "electrode_position"]

#: MNE's template montage the positions come from.
MONTAGE = "colin27_1005"

#: Prefixes that name the signal type in EDF and WFDB channel labels (``"EEG Fpz-Cz"``).
_PREFIX = re.compile(r"^(?:EEG|EOG|EMG)[\s_:]+", re.IGNORECASE)


@functools.cache
def _montage_positions() -> dict[str, np.ndarray]:
    """Lower-case electrode name -> position [3] in metres (head coordinates)."""
    import mne

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # older MNE names it standard_1005
        try:
            montage = mne.channels.make_standard_montage(MONTAGE)
        except ValueError:
            montage = mne.channels.make_standard_montage("standard_1005")
    positions = montage.get_positions()["ch_pos"]
    return {
        name.lower(): np.asarray(position, dtype=np.float64) for name, position in positions.items()
    }


def derivation_ends(name: str) -> tuple[str, str | None]:
    """Split a derivation name into its electrodes.

    Args:
        name: A channel label such as ``"F3-M2"``, ``"EEG Fpz-Cz"`` or ``"Cz"``.

    Returns:
        ``(active, reference)``; ``reference`` is ``None`` for a single electrode.

    Raises:
        InputError: For an empty name or one with more than two ends.
    """
    stripped = _PREFIX.sub("", str(name).strip())
    parts = [part.strip() for part in stripped.split("-")]
    if not stripped or len(parts) > 2 or not all(parts):
        raise InputError(
            f"channels: expected derivation names 'A-B' or 'A' of 10-05 electrodes, got {name!r}"
        )
    return parts[0], parts[1] if len(parts) == 2 else None


def electrode_position(electrode: str) -> np.ndarray | None:
    """The position [3] (metres) of a 10-05 electrode, or ``None`` when the montage lacks it."""
    return _montage_positions().get(electrode.lower())


def derivation_positions(names: Sequence[str], argument: str = "channels") -> np.ndarray:
    """Electrode positions of derivations.

    Args:
        names: C derivation names (see :func:`derivation_ends`).
        argument: Name of the channels in error messages.

    Returns:
        [C, 2, 3] float64 positions in metres: the active electrode, then the reference (zeros
        for a single electrode).

    Raises:
        InputError: Naming every channel whose electrodes are not in the 10-05 montage.
    """
    positions = np.zeros((len(names), 2, 3))
    unknown: list[str] = []
    for index, name in enumerate(names):
        try:
            ends = derivation_ends(name)
        except InputError:
            unknown.append(str(name))
            continue
        for end, electrode in enumerate(ends):
            if electrode is None:
                continue
            position = electrode_position(electrode)
            if position is None:
                unknown.append(str(name))
                break
            positions[index, end] = position
    if unknown:
        raise InputError(
            f"{argument}: expected EEG derivations 'A-B' whose electrodes are in the 10-05 montage "
            f"(a channel-set model reads a channel by the positions of its electrodes), got "
            f"{unknown} among {list(map(str, names))}"
        )
    return positions
