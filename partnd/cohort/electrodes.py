"""Electrode potentials of the generated EEG and the derivations (montages) read from them.

The generator (:mod:`partnd.cohort.synthetic_eeg`) mixes its latent sources into one potential
per electrode (10-20 scalp sites, the mastoids and the EOG electrodes); a derivation ``"A-B"`` is
the difference of two potentials, so every montage follows from the same sources:

- PC18 (AASM recommended): F3-M2, F4-M1, C3-M2, C4-M1, O1-M2, O2-M1 and E1-M2;
- Sleep-EDF (Kemp et al. 2000, IEEE Trans Biomed Eng 47:1185): Fpz-Cz, Pz-Oz and the horizontal
  EOG (here E1-E2);
- SHHS (Quan et al. 1997, Sleep 20:1077; NSRR channel tables): C4-A1 and C3-A2, with the ear
  references A1/A2 read as the mastoids M1/M2;
- a frontal headband: AF7-Fpz (a forehead channel as home devices record it).

Potentials are relative to a distant reference. The PC18 sites are anchored to the mastoid they are
recorded against: ``F3 = (F3-M2 weights of generator version 5) + M2``, so the PC18 derivations are
exactly the mixtures version 5 drew (same weights, same random stream) whatever the mastoids hold.
The other sites ("free" electrodes: Fpz, Fp1, Fp2, AF7, Cz, Pz, Oz, E2) take the topographies of
:data:`FREE_TOPOGRAPHIES` relative to the linked mastoids, and their continuous rhythms are only
partly shared with the rest of the scalp: EEG coherence falls with electrode distance, to about
0.3–0.6 at 10 cm in most bands (Nunez et al. 1997, Electroencephalogr Clin Neurophysiol 103:499;
Srinivasan et al. 2007, Clin Neurophysiol 118:1093), so a short bipolar pair such as Pz-Oz keeps
its alpha instead of cancelling it. Topographies follow the textbook maxima: alpha occipital
(Berger; Niedermeyer & Lopes da Silva), slow waves and K-complexes frontal to fronto-central
(Massimini et al. 2004, J Neurosci 24:6862; Happe et al. 2002, Clin Neurophysiol 113:1019), slow
spindles frontal and fast spindles centro-parietal (Schabus et al. 2007, PNAS 104:13164), vertex
waves at Cz, horizontal eye movements of opposite polarity at E1 and E2, and a tenth to a quarter
of the EOG at the frontopolar sites (propagation factors of Croft & Barry 2000, Neurophysiol Clin
30:5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partnd._validation import check

__all__ = [
    "ANCHORED_REFERENCES",
    "COMPONENTS",
    "ELECTRODES",
    "ELECTRODE_ALIASES",
    "FREE_TOPOGRAPHIES",
    "HEADBAND_DERIVATIONS",
    "LOCAL_COMPONENTS",
    "MASTOID_TOPOGRAPHY",
    "PC18_DERIVATIONS",
    "SHHS_DERIVATIONS",
    "SITE_LAYOUT",
    "SLEEP_EDF_DERIVATIONS",
    "ScalpField",
    "derivation_electrodes",
]

COMPONENTS: tuple[str, ...] = (
    "background",
    "alpha",
    "beta",
    "theta",
    "delta",
    "spindle_slow",
    "spindle_fast",
    "kcomplex",
    "vertex",
    "sawtooth",
    "emg",
    "eye",
    "ecg",
    "movement",
)
"""Mixed components in topography order (the columns of the generator's mixing matrix)."""

LOCAL_COMPONENTS: tuple[str, ...] = ("background", "alpha", "beta", "theta", "delta")
"""Continuous rhythms that free electrodes hold partly as their own, incoherent activity."""

ANCHORED_REFERENCES: dict[str, str] = {
    "F3": "M2",
    "F4": "M1",
    "C3": "M2",
    "C4": "M1",
    "O1": "M2",
    "O2": "M1",
    "E1": "M2",
}
"""PC18 sites and the mastoid they are recorded against (their potentials are anchored there)."""

MASTOID_TOPOGRAPHY: dict[str, float] = {
    "background": 0.3,
    "alpha": 0.2,
    "beta": 0.15,
    "theta": 0.25,
    "delta": 0.3,
    "spindle_slow": 0.1,
    "spindle_fast": 0.15,
    "kcomplex": 0.2,
    "vertex": 0.15,
    "sawtooth": 0.15,
    "emg": 0.25,
    "eye": 0.05,
    "ecg": 1.5,
    "movement": 0.8,
}
"""Mastoid potential per component (relative to the component's amplitude; the ECG's sign flips
between M1 and M2, as the cardiac field does across the head): the mastoids are not silent, they
hold a damped copy of the scalp field (Nunez & Srinivasan 2006, Electric Fields of the Brain)."""

_FREE_COLUMNS = (
    #       bg   alpha beta theta delta sp_s  sp_f  kc    vx    saw   emg   eye   ecg   mov
    ("Fpz", 1.0, 0.25, 1.0, 0.8, 1.1, 0.9, 0.45, 0.75, 0.5, 0.6, 0.35, 0.15, 0.5, 1.0),
    ("Fp1", 1.0, 0.25, 1.0, 0.8, 1.1, 0.9, 0.45, 0.75, 0.45, 0.6, 0.4, 0.25, 0.8, 1.0),
    ("Fp2", 1.0, 0.25, 1.0, 0.8, 1.1, 0.9, 0.45, 0.75, 0.45, 0.6, 0.4, 0.15, -0.8, 1.0),
    ("AF7", 1.0, 0.3, 1.0, 0.8, 1.0, 0.85, 0.45, 0.7, 0.4, 0.55, 0.6, 0.25, 1.0, 1.1),
    ("Cz", 1.05, 0.5, 0.8, 1.05, 0.85, 0.75, 1.05, 1.0, 1.2, 1.05, 0.05, 0.03, 0.0, 0.8),
    ("Pz", 0.95, 0.9, 0.7, 0.85, 0.65, 0.4, 0.9, 0.6, 0.8, 0.7, 0.05, 0.01, 0.0, 0.8),
    ("Oz", 0.9, 1.05, 0.6, 0.7, 0.5, 0.25, 0.5, 0.4, 0.4, 0.5, 0.15, 0.0, 0.0, 0.9),
    ("E2", 0.55, 0.1, 0.3, 0.4, 0.7, 0.3, 0.15, 0.6, 0.3, 0.3, 0.15, -1.0, -1.0, 1.2),
)
FREE_TOPOGRAPHIES: dict[str, dict[str, float]] = {
    row[0]: dict(zip(COMPONENTS, row[1:], strict=True)) for row in _FREE_COLUMNS
}
"""Topographies (relative to the linked mastoids) of the electrodes PC18 does not record."""

ELECTRODES: tuple[str, ...] = (*ANCHORED_REFERENCES, "M1", "M2", *FREE_TOPOGRAPHIES)
"""Every electrode the generator can give a potential."""

SITE_LAYOUT: dict[str, tuple[int, tuple[float, float, float]]] = {
    "M1": (-1, (0.85, 0.3, -0.2)),
    "M2": (1, (0.85, -0.3, -0.2)),
    "Fpz": (0, (0.85, 0.0, 0.45)),
    "Fp1": (-1, (0.85, 0.3, 0.45)),
    "Fp2": (1, (0.85, -0.3, 0.45)),
    "AF7": (-1, (0.85, 0.35, 0.4)),
    "Cz": (0, (0.85, 0.0, 0.0)),
    "Pz": (0, (0.85, 0.0, -0.2)),
    "Oz": (0, (0.85, 0.0, -0.4)),
    "E2": (1, (0.85, -0.2, 0.35)),
}
"""Side (-1 left, 0 midline, +1 right) of the mastoids and free electrodes, and their weights on
the three background patterns (global, left-right, anterior-posterior) of the generator."""

ELECTRODE_ALIASES: dict[str, str] = {"A1": "M1", "A2": "M2"}
"""Other names of the same sites (SHHS's ear references)."""

PC18_DERIVATIONS: tuple[str, ...] = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1", "E1-M2")
SLEEP_EDF_DERIVATIONS: tuple[str, ...] = ("Fpz-Cz", "Pz-Oz", "E1-E2")
SHHS_DERIVATIONS: tuple[str, ...] = ("C4-A1", "C3-A2", "E1-A2", "E2-A1")
HEADBAND_DERIVATIONS: tuple[str, ...] = ("AF7-Fpz",)


def derivation_electrodes(name: str) -> tuple[str, str]:
    """The two electrodes of a derivation ``"A-B"`` (aliases resolved: ``C4-A1`` -> C4, M1).

    Raises:
        InputError: ``name`` is not two known electrodes joined by ``-``.
    """
    parts = name.split("-")
    resolved = [ELECTRODE_ALIASES.get(part, part) for part in parts]
    check(
        len(parts) == 2 and all(part in ELECTRODES for part in resolved) and parts[0] != parts[1],
        "derivation",
        f"two different electrodes of {', '.join(ELECTRODES)} (or A1/A2) joined by '-'",
        name,
    )
    return resolved[0], resolved[1]


@dataclass
class ScalpField:
    """Noise-free electrode potentials of one recording.

    Attributes:
        electrodes: Electrode names, one per row of ``potentials``.
        potentials: ``float32 [n_electrodes, n_samples]`` µV against a distant reference.
    """

    electrodes: tuple[str, ...]
    potentials: np.ndarray

    def derivation(self, name: str) -> np.ndarray:
        """``float32 [n_samples]``: the potential of A minus that of B for ``name`` ``"A-B"``.

        Raises:
            InputError: ``name`` is not a derivation of two electrodes this field holds.
        """
        first, second = derivation_electrodes(name)
        check(
            first in self.electrodes and second in self.electrodes,
            "derivation",
            f"a derivation of the generated electrodes {', '.join(self.electrodes)}",
            name,
        )
        rows = self.potentials
        return rows[self.electrodes.index(first)] - rows[self.electrodes.index(second)]
