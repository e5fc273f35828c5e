"""The generated PC18-format sample cohort: hypnograms, synthesis, the file writer, the builder.

This package *writes* data: it stands in for PhysioNet/CinC 2018 where the real recordings are not
available (tests, the demo, benchmarks). It imports the readers where it must and is never imported
by them (:mod:`partnd.datasets` only reads stores).

- :mod:`~partnd.cohort.hypnogram`: realistic adult hypnograms (NREM-REM cycles, intrusions).
- :mod:`~partnd.cohort.synthetic_eeg`: stage-dependent 13-channel polysomnography.
- :mod:`~partnd.cohort.pc18_format`: the challenge's file layout (WFDB header, ``.mat`` signals,
  MATLAB v7.3 ``-arousal.mat``, ``.arousal`` annotations), written and read back.
- :mod:`~partnd.cohort.pc18_cohort`: :func:`make_pc18_cohort` and :func:`ensure_sample_cohort`.
- :mod:`~partnd.cohort.electrodes`: electrode potentials and the montages read from them.
- :mod:`~partnd.cohort.profiles`: Sleep-EDF-like and NSRR-like datasets
  (:func:`make_profile_cohort`), written by :mod:`~partnd.cohort.sleep_edf_format` and
  :mod:`~partnd.cohort.nsrr_format`; their realism: :mod:`~partnd.cohort.profile_realism`.
- :mod:`~partnd.cohort.command`: the ``partnd cohort`` command (``--profile``).

Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from partnd._lazy import lazy_exports

if TYPE_CHECKING:
    from partnd.cohort.pc18_cohort import (
        CohortInfo,
        default_cache_dir,
        ensure_sample_cohort,
        injected_faults,
        make_pc18_cohort,
    )
    from partnd.cohort.profiles import make_profile_cohort

_EXPORTS: dict[str, str] = {
    "CohortInfo": ".pc18_cohort",
    "default_cache_dir": ".pc18_cohort",
    "ensure_sample_cohort": ".pc18_cohort",
    "injected_faults": ".pc18_cohort",
    "make_pc18_cohort": ".pc18_cohort",
    "make_profile_cohort": ".profiles",
}

__all__ = [
    "CohortInfo",
    "default_cache_dir",
    "ensure_sample_cohort",
    "injected_faults",
    "make_pc18_cohort",
    "make_profile_cohort",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
