"""Realistic adult hypnograms for the generated sample cohort.

A night is built in two layers. The *macro* layer is the classic NREM–REM cycle: sleep latency
(wake), a short N1 descent, then cycles of 70–120 minutes, each an N2 descent, N3 (plentiful in
the first cycle, fading later), an N2 ascent and a REM period that lengthens from cycle to cycle,
often closed by a brief awakening; in some nights the first REM period is skipped; a whole night
ends with a final awakening. The *micro* layer is a semi-Markov intrusion process that breaks
each macro block into bouts: brief awakenings (and fewer long ones) and N1 shifts inside N2 and
REM, N2 epochs inside N3, flickering N2/N3 borders. Every duration is drawn per subject
(:class:`HypnogramParams`), and age shifts them as in adult norms, so subjects differ in latency,
cycle length, amount of N3 and REM and fragmentation about as much as real adults do.

Sources of the norms the distributions are centred on:

- Carskadon & Dement, "Normal human sleep: an overview", in *Principles and Practice of Sleep
  Medicine* (Kryger, Roth & Dement, eds.): first NREM–REM cycle 70–100 min, later ones 90–120 min;
  REM periods lengthen across the night; N3 in the first third; N1 2–5 %, N2 45–55 %, N3 13–23 %
  (young adults), REM 20–25 % of sleep.
- Ohayon, Carskadon, Guilleminault & Vitiello (2004), Sleep 27:1255, meta-analysis of 3,577
  subjects: in adults slow-wave sleep, REM and REM latency decrease with age, sleep latency, N1,
  N2 and wake after sleep onset increase.
- Boulos et al. (2019), Lancet Respir Med 7:533, meta-analysis of 5,273 healthy adults (AASM
  scoring), per decade of age: wake after sleep onset +9.7 min, sleep latency +1.1 min, N1 +0.5
  percentage points, total sleep time -10.1 min.
- Real hypnograms that install offline (measured by :mod:`partnd.cohort.realism`): 14 adults of
  Menghini et al. (2021, Sleep 44:zsaa170; YASA's ``sample_data_sri.csv.xz``): REM latency
  98 ± 45 min (two of 14 above 150 min: a skipped first REM period), mean REM bout 20 epochs,
  mean wake bout 4.3 epochs, between-subject SD of the wake / N3 / REM fractions of the sleep
  period 0.06 / 0.08 / 0.05; Sleep-EDF cassette (DESIGN.md §5b): REM latency 93 ± 45 min, mean
  bouts W 6.7, N1 3.0, N2 10.8, N3 9.2, REM 19.1 epochs, stage-fraction SDs 0.05–0.10.

N1 inside sleep (version 5): a shift to N1 inside N2 lasts a lognormal number of epochs (median
1 min, 1–8 epochs; version 4 drew 1–3 uniformly) because N1 after an arousal is scored until a
spindle or a K-complex marks N2 again (AASM manual, Berry et al. v2.6, rules for N2), and sleep
resumes through 1–3 epochs of N1 after an awakening inside N2 (version 4: 0–2), N1 being the
transitional stage between wake and sleep (Carskadon & Dement). Together they bring the mean N1
bout from 1.9 to 2.2 epochs (Sleep-EDF 3.0) and N1 from 7 % to 9–10 % of the sleep period
(Sleep-EDF 10 %).

Records shorter than a night hold its first part (and no final awakening). The macro layer is
compressed in time when needed so that the record holds sleep onset, the first cycle (its REM
period included) and a quarter more; for two-hour records this is mild (cycles of ~70 minutes),
very short test records get unrealistic bout durations but still every stage.

Stages are coded as :class:`SleepStage` integers; a hypnogram is an ``int8`` array ``[n_epochs]`` of
30-second epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from partnd._validation import check

__all__ = [
    "EPOCH_SECONDS",
    "STAGE_LABELS",
    "STAGE_LETTERS",
    "HypnogramParams",
    "SleepStage",
    "draw_hypnogram_params",
    "hypnogram_from_string",
    "hypnogram_to_string",
    "make_hypnogram",
    "stage_fractions",
]

EPOCH_SECONDS = 30
"""Length of one scoring epoch in seconds (AASM)."""


class SleepStage(IntEnum):
    """AASM sleep stages in the order used throughout the generator."""

    WAKE = 0
    N1 = 1
    N2 = 2
    N3 = 3
    REM = 4


STAGE_LABELS: tuple[str, ...] = ("W", "N1", "N2", "N3", "R")
"""Challenge labels per :class:`SleepStage` (the ``aux_note`` strings of ``.arousal`` files)."""

STAGE_LETTERS = "W123R"
"""One character per :class:`SleepStage`, for the compact hypnogram strings of ``cohort.json``."""

_N3_CYCLE_FACTORS = (1.0, 0.7, 0.35, 0.12, 0.0)
_MINUTES_PER_EPOCH = EPOCH_SECONDS / 60.0
_REFERENCE_AGE = 45.0
"""Age (years) at which the drawn architecture is centred on the norms; others shift per decade."""
_MAX_REM_PERIOD = 45.0
_N1_SHIFT_MINUTES = 1.0
"""Median length of an N1 bout inside N2 (lognormal, 1–8 epochs; source: the module docstring)."""
_FULL_NIGHT_HOURS = 5.0
"""Records at least this long (hours) end with the final awakening (shorter ones stop mid-night)."""


@dataclass(frozen=True)
class HypnogramParams:
    """Per-subject sleep architecture (all durations in minutes, rates per hour of that stage).

    Attributes:
        sleep_latency: Wake from lights-off (scoring start) to the first sleep epoch.
        n1_onset: Duration of the N1 descent at sleep onset.
        cycle: Length of one NREM–REM cycle.
        n3_first_cycle: Minutes of N3 in the first cycle (later cycles get less).
        rem_first_cycle: Minutes of REM closing the first cycle (later cycles get more).
        rem_growth: Extra REM minutes per further cycle.
        awakening_rate: Brief awakenings per hour of N2/REM.
        n1_shift_rate: Shifts to N1 per hour of N2 (REM gets half as many).
        n3_break_rate: N2 interruptions per hour of N3.
        post_rem_wake_prob: Probability that a REM period ends in a brief awakening.
        long_wake_rate: Long awakenings (minutes, lognormal length) per hour of N2/REM.
        long_wake_minutes: Median length of a long awakening.
        skip_first_rem: Whether the first cycle has no REM period (REM latency of two cycles).
        final_wake: Minutes of wake closing a whole night (the final awakening before lights-on).
    """

    sleep_latency: float
    n1_onset: float
    cycle: float
    n3_first_cycle: float
    rem_first_cycle: float
    rem_growth: float
    awakening_rate: float
    n1_shift_rate: float
    n3_break_rate: float
    post_rem_wake_prob: float
    long_wake_rate: float
    long_wake_minutes: float
    skip_first_rem: bool
    final_wake: float


def draw_hypnogram_params(rng: np.random.Generator, age: float | None = None) -> HypnogramParams:
    """Draw one subject's sleep architecture.

    The distributions are centred on adult polysomnography norms at 45 years (sleep latency
    ~12 min, cycles ~90 min, whole-night N3 ~15 %, REM ~20 %, REM latency ~90 min; Carskadon &
    Dement; Ohayon et al. 2004) with the between-subject spread of real adults (see the module
    docstring). Age shifts them per decade as in Boulos et al. (2019): sleep latency +1.1 min,
    wake after sleep onset +9.7 min (more awakenings), N1 up; and as in Ohayon et al. (2004): less
    N3 and shorter REM latency (here: fewer skipped first REM periods) with age.

    Args:
        rng: Source of randomness.
        age: The subject's age in years; None draws a 45-year-old's architecture.

    Returns:
        The subject's :class:`HypnogramParams`.
    """
    decades = 0.0 if age is None else (float(age) - _REFERENCE_AGE) / 10.0
    wake_factor = float(np.clip(1.0 + 0.25 * decades, 0.4, 2.5))
    return HypnogramParams(
        sleep_latency=float(np.clip(rng.lognormal(np.log(12.0 + 1.1 * decades), 0.6), 2.0, 60.0)),
        n1_onset=float(rng.uniform(2.0, 7.0)),
        cycle=float(np.clip(rng.normal(92.0, 12.0), 70.0, 120.0)),
        n3_first_cycle=float(np.clip(rng.normal(30.0 - 3.0 * decades, 10.0), 4.0, 55.0)),
        rem_first_cycle=float(np.clip(rng.lognormal(np.log(14.0), 0.4), 4.0, 35.0)),
        rem_growth=float(rng.uniform(2.0, 7.0)),
        awakening_rate=float(np.clip(rng.lognormal(np.log(1.5 * wake_factor), 0.5), 0.4, 10.0)),
        n1_shift_rate=float(np.clip(rng.lognormal(np.log(2.5 + 0.3 * decades), 0.5), 0.6, 12.0)),
        n3_break_rate=float(np.clip(rng.lognormal(np.log(2.0), 0.5), 0.3, 10.0)),
        post_rem_wake_prob=float(rng.uniform(0.3, 0.8)),
        long_wake_rate=float(np.clip(rng.lognormal(np.log(0.8 * wake_factor), 0.6), 0.05, 3.0)),
        long_wake_minutes=float(np.clip(rng.lognormal(np.log(5.0), 0.5), 1.5, 20.0)),
        skip_first_rem=bool(rng.random() < float(np.clip(0.12 - 0.02 * decades, 0.03, 0.25))),
        final_wake=float(np.clip(rng.lognormal(np.log(6.0), 1.0), 0.0, 90.0)),
    )


def _macro_blocks(
    params: HypnogramParams, total_minutes: float, allow_skip: bool
) -> list[tuple[int, float]]:
    """Return the night's ``(stage, minutes)`` blocks until ``total_minutes`` is covered.

    The first REM period is left out when the subject skips it and ``allow_skip`` (whole nights;
    shorter records keep it so that every stage occurs).
    """
    blocks: list[tuple[int, float]] = [
        (SleepStage.WAKE, params.sleep_latency),
        (SleepStage.N1, params.n1_onset),
    ]
    elapsed = params.sleep_latency + params.n1_onset
    cycle_index = 0
    while elapsed < total_minutes:
        n3_factor = _N3_CYCLE_FACTORS[min(cycle_index, len(_N3_CYCLE_FACTORS) - 1)]
        n3 = params.n3_first_cycle * n3_factor
        rem = min(params.rem_first_cycle + cycle_index * params.rem_growth, _MAX_REM_PERIOD)
        if cycle_index == 0 and params.skip_first_rem and allow_skip:
            rem = 0.0
        n2_total = max(params.cycle - n3 - rem, 10.0)
        descent = 0.6 * n2_total if n3 > 0 else n2_total
        cycle_blocks = [(SleepStage.N2, descent)]
        if n3 > 0:
            cycle_blocks += [(SleepStage.N3, n3), (SleepStage.N2, n2_total - descent)]
        if rem > 0:
            cycle_blocks.append((SleepStage.REM, rem))
        blocks += cycle_blocks
        elapsed += sum(minutes for _, minutes in cycle_blocks)
        cycle_index += 1
    return blocks


def _blocks_to_epochs(
    blocks: list[tuple[int, float]], n_epochs: int, n_first_part: int
) -> list[tuple[int, int]]:
    """Turn minute blocks into epoch counts covering exactly ``n_epochs`` epochs.

    The first ``n_first_part`` blocks (sleep onset and the first cycle) keep at least one epoch each
    and are shrunk, largest first, until they fit, so every stage survives in short records.
    """
    counts = [max(1, round(minutes / _MINUTES_PER_EPOCH)) for _, minutes in blocks]
    while sum(counts[:n_first_part]) > n_epochs:
        largest = int(np.argmax(counts[:n_first_part]))
        counts[largest] -= 1
    epoch_blocks: list[tuple[int, int]] = []
    remaining = n_epochs
    for (stage, _), count in zip(blocks, counts, strict=True):
        if remaining == 0:
            break
        take = min(count, remaining)
        epoch_blocks.append((stage, take))
        remaining -= take
    return epoch_blocks


def _intrude(
    hypnogram: np.ndarray,
    start: int,
    stop: int,
    stage: int,
    rate_per_hour: float,
    max_bout: int,
    rng: np.random.Generator,
    median_minutes: float | None = None,
    return_via: int | None = None,
    min_bout: int = 1,
) -> None:
    """Overwrite bouts of ``stage`` inside ``hypnogram[start:stop]`` (a Poisson process).

    Bouts last ``min_bout`` to ``max_bout`` epochs, uniformly, or, given ``median_minutes``, a
    lognormal number of epochs (spread 0.6) in that range. They avoid the block's first and last
    epoch and never cover more than a third of the block. Given ``return_via``, each bout is
    followed by 1–3 epochs of that stage (sleep resumes through N1 after an awakening).
    """
    length = stop - start
    if length < 6:
        return
    n_bouts = rng.poisson(rate_per_hour * length * _MINUTES_PER_EPOCH / 60.0)
    budget = length // 3
    for _ in range(n_bouts):
        if median_minutes is None:
            bout = int(rng.integers(min_bout, max_bout + 1))
        else:
            drawn = rng.lognormal(np.log(median_minutes / _MINUTES_PER_EPOCH), 0.6)
            bout = int(np.clip(round(drawn), min_bout, max_bout))
        if bout > budget:
            break
        onset = int(rng.integers(start + 1, stop - bout))
        hypnogram[onset : onset + bout] = stage
        budget -= bout
        if return_via is not None:
            n_return = min(int(rng.integers(1, 4)), stop - onset - bout - 1)
            hypnogram[onset + bout : onset + bout + n_return] = return_via


def _flicker_border(hypnogram: np.ndarray, border: int, rng: np.random.Generator) -> None:
    """Let the two stages meeting at ``border`` alternate over a few epochs on either side."""
    before, after = hypnogram[border - 1], hypnogram[border]
    for offset in (1, 2):
        if border - 1 - offset >= 0 and rng.random() < 0.35:
            hypnogram[border - 1 - offset] = after
        if border + offset < len(hypnogram) and rng.random() < 0.35:
            hypnogram[border + offset] = before


def make_hypnogram(
    n_epochs: int, rng: np.random.Generator, params: HypnogramParams | None = None
) -> np.ndarray:
    """Generate the hypnogram of the first ``n_epochs`` 30-s epochs after lights-off.

    Args:
        n_epochs: Number of epochs to generate, at least 10 (5 minutes).
        rng: Source of randomness (the micro-structure and, if ``params`` is None, the subject).
        params: The subject's architecture; drawn with :func:`draw_hypnogram_params` if None.

    Returns:
        ``int8`` array ``[n_epochs]`` of :class:`SleepStage` codes; every stage occurs.
    """
    check(n_epochs >= 10, "n_epochs", "at least 10 epochs (5 minutes)", n_epochs)
    params = draw_hypnogram_params(rng) if params is None else params
    total_minutes = n_epochs * _MINUTES_PER_EPOCH
    whole_night = total_minutes >= 60.0 * _FULL_NIGHT_HOURS
    first_part = params.sleep_latency + params.n1_onset + params.cycle
    compression = min(1.0, total_minutes / (1.25 * first_part))
    blocks = [
        (stage, minutes * compression)
        for stage, minutes in _macro_blocks(
            params, total_minutes / compression, allow_skip=whole_night
        )
    ]
    n_first_part = 6
    epoch_blocks = _blocks_to_epochs(blocks, n_epochs, n_first_part)

    hypnogram = np.empty(n_epochs, dtype=np.int8)
    edges = np.concatenate([[0], np.cumsum([count for _, count in epoch_blocks])])
    for (stage, _), start, stop in zip(epoch_blocks, edges[:-1], edges[1:], strict=True):
        hypnogram[start:stop] = stage
    macro = hypnogram.copy()

    for index, ((stage, _), start, stop) in enumerate(
        zip(epoch_blocks, edges[:-1], edges[1:], strict=True)
    ):
        start, stop = int(start), int(stop)
        hours_asleep = start * _MINUTES_PER_EPOCH / compression / 60.0
        awakening_rate = params.awakening_rate * (1.0 + 0.35 * hours_asleep)
        if stage == SleepStage.WAKE:
            _intrude(hypnogram, start, stop, SleepStage.N1, 6.0, 2, rng)
        elif stage == SleepStage.N1:
            _intrude(hypnogram, start, stop, SleepStage.WAKE, 10.0, 1, rng)
        elif stage == SleepStage.N2:
            _intrude(
                hypnogram,
                start,
                stop,
                SleepStage.N1,
                params.n1_shift_rate,
                8,
                rng,
                _N1_SHIFT_MINUTES,
            )
            _intrude(
                hypnogram, start, stop, SleepStage.WAKE, awakening_rate, 2, rng, None, SleepStage.N1
            )
            long_rate = params.long_wake_rate * (1.0 + 0.35 * hours_asleep)
            long_minutes = params.long_wake_minutes
            _intrude(
                hypnogram,
                start,
                stop,
                SleepStage.WAKE,
                long_rate,
                60,
                rng,
                long_minutes,
                SleepStage.N1,
                min_bout=2,
            )
        elif stage == SleepStage.N3:
            _intrude(hypnogram, start, stop, SleepStage.N2, params.n3_break_rate, 3, rng)
        else:
            # REM periods are interrupted less than N2 (real REM bouts average ~20 epochs).
            _intrude(hypnogram, start, stop, SleepStage.N1, 0.4 * params.n1_shift_rate, 2, rng)
            _intrude(hypnogram, start, stop, SleepStage.WAKE, 0.4 * awakening_rate, 2, rng)
            is_last = index == len(epoch_blocks) - 1
            if not is_last and stop - start >= 4 and rng.random() < params.post_rem_wake_prob:
                n_wake = int(rng.integers(1, 4))
                hypnogram[stop - n_wake : stop] = SleepStage.WAKE
        previous = epoch_blocks[index - 1][0] if index > 0 else None
        if {previous, stage} == {SleepStage.N2, SleepStage.N3} and stop - start >= 6:
            _flicker_border(hypnogram, start, rng)

    if whole_night:
        n_final = round(params.final_wake * compression / _MINUTES_PER_EPOCH)
        if n_final > 0:
            hypnogram[n_epochs - n_final :] = SleepStage.WAKE
            hypnogram[max(n_epochs - n_final - 1, 0)] = SleepStage.N1
    for stage in SleepStage:
        if not np.any(hypnogram == stage):
            hypnogram[macro == stage] = stage
    return hypnogram


def stage_fractions(hypnogram: np.ndarray) -> dict[str, float]:
    """Fraction of epochs per stage.

    Args:
        hypnogram: ``[n_epochs]`` :class:`SleepStage` codes (other values are ignored).

    Returns:
        ``{"W": ..., "N1": ..., "N2": ..., "N3": ..., "R": ...}``, fractions of the scored epochs.
    """
    stages = np.asarray(hypnogram)
    scored = np.isin(stages, list(SleepStage))
    total = max(int(scored.sum()), 1)
    return {
        label: float(np.sum(stages == stage)) / total for stage, label in enumerate(STAGE_LABELS)
    }


def hypnogram_to_string(hypnogram: np.ndarray) -> str:
    """Encode a hypnogram as one character per epoch (``W``, ``1``, ``2``, ``3``, ``R``).

    Args:
        hypnogram: ``[n_epochs]`` :class:`SleepStage` codes.
    """
    stages = np.asarray(hypnogram)
    check(
        bool(np.isin(stages, list(SleepStage)).all()),
        "hypnogram",
        "sleep stage codes 0..4",
        f"values {sorted(set(stages.tolist()))}",
    )
    return "".join(STAGE_LETTERS[int(stage)] for stage in stages)


def hypnogram_from_string(text: str) -> np.ndarray:
    """Decode :func:`hypnogram_to_string` output into ``int8`` codes ``[n_epochs]``."""
    unknown = set(text) - set(STAGE_LETTERS)
    check(not unknown, "text", f"only the letters {STAGE_LETTERS!r}", f"also {sorted(unknown)}")
    return np.array([STAGE_LETTERS.index(letter) for letter in text], dtype=np.int8)
