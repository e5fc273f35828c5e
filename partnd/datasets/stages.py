"""Sleep stage names: the one table that the store, the hypnogram writers and readers share.

Stage codes are ``0..4`` for W, N1, N2, N3 and REM (``-1`` unscored). A hypnogram written as
annotations (EDF+, CSV, ``mne.Annotations``) names stage ``k`` ``"Sleep stage "`` followed by its
annotation name (``W``, ``N1``, ``N2``, ``N3``, ``R``: REM is ``"Sleep stage R"`` as in Sleep-EDF
and MNE's sleep tutorial); a reader accepts that description and every alias of
:data:`STAGE_ALIASES` (each stage's name and annotation name, bare or after the prefix, and
Rechtschaffen & Kales ``"Sleep stage 1..4"`` with 3 and 4 merged into N3).
:func:`stage_description` (writers) and :data:`STAGE_ALIASES` (readers) are built from the same
rows, so every hypnogram partnd writes reads back to the same stages.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANNOTATION_PREFIX",
    "SLEEP_STAGES",
    "STAGE_ALIASES",
    "STAGE_NAMES",
    "SleepStage",
    "stage_description",
]

ANNOTATION_PREFIX = "Sleep stage "
"""Text before a stage's annotation name in an annotation description."""


@dataclass(frozen=True)
class SleepStage:
    """One sleep stage.

    Attributes:
        code: Stage code stored per window (0..4).
        name: Name in the store's ``stage_names`` and in class names (``"REM"``).
        annotation: Name written after :data:`ANNOTATION_PREFIX` in a hypnogram (``"R"``).
        aliases: Further descriptions read as this stage (Rechtschaffen & Kales names).
    """

    code: int
    name: str
    annotation: str
    aliases: tuple[str, ...] = ()

    def descriptions(self) -> tuple[str, ...]:
        """Every annotation description read as this stage: its name and annotation name, each
        bare and after :data:`ANNOTATION_PREFIX`, and its aliases."""
        names = tuple(dict.fromkeys((self.name, self.annotation)))
        return (*names, *(ANNOTATION_PREFIX + name for name in names), *self.aliases)


SLEEP_STAGES: tuple[SleepStage, ...] = (
    SleepStage(0, "W", "W"),
    SleepStage(1, "N1", "N1", ("Sleep stage 1",)),
    SleepStage(2, "N2", "N2", ("Sleep stage 2",)),
    SleepStage(3, "N3", "N3", ("Sleep stage 3", "Sleep stage 4")),
    SleepStage(4, "REM", "R"),
)

STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in SLEEP_STAGES)
"""Names of stage codes ``0..4`` (a store's default ``stage_names``)."""

STAGE_ALIASES: dict[str, int] = {
    description: stage.code for stage in SLEEP_STAGES for description in stage.descriptions()
}
"""Hypnogram description -> stage code, for every name a reader accepts."""

_ANNOTATION_OF = {
    name: stage.annotation for stage in SLEEP_STAGES for name in (stage.name, stage.annotation)
}


def stage_description(name: str, prefix: str = ANNOTATION_PREFIX) -> str:
    """The annotation description a hypnogram writer gives the class ``name``.

    Args:
        name: A class name: a sleep stage (``"REM"``, ``"N2"``...) is written with its
            annotation name (``"Sleep stage R"``), any other name as it is.
        prefix: Text before the name.

    Returns:
        ``prefix`` followed by the stage's annotation name, or by ``name``.
    """
    return prefix + _ANNOTATION_OF.get(name, name)
