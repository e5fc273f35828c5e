"""The stages both sleep recipes share: data, split, pretraining per method, fine-tuning cells.

A *study* lives in one output directory::

    OUT/
      study.json                 the settings (a later command must agree with them)
      split.json                 subject split (test subjects, pretraining pool, nested chains)
      store.zarr/                the preprocessed store (unless --store points elsewhere)
      features.npz               the classical rows' YASA features of every labelled window
      pretrain/<method>/         one engine run per self-supervised method (encoder.pt when done)
      finetune/<method>/<arm>/b<B>_s<S>/   one cell: budget B (subjects, or wK windows per
                                 stage), seed S
          result.json            written last (atomically): the cell is finished
          predictions.npy        predicted stage per test window (test-set order)

With pretraining pools (``StudyConfig.pools``, the unlabelled axis) it also holds::

      pool_store.zarr/           the unlabelled nights (``pool_src``; else the study's own store)
      pools.json                 nested pools in hours, held-out nights (:mod:`partnd.datasets.pools`)
      pretrain_pools/<pool>/<method>/  one engine run per pool and method, its budget chosen on the
                                 held-out nights' pretext error; selection.json when done
      finetune/<method>/<arm>/b<B>_s<S>_p<pool>/   a pretrained method's cell on a pool's encoder

Every stage is idempotent: a finished pretraining run (``encoder.pt``) or cell (``result.json``)
is never recomputed, an interrupted one resumes from its last checkpoint, and a directory made
with other settings is refused (``--overwrite`` starts over).

A *row* of the results is a method and an *arm*, how its labelled subjects are used:

| arm | what is trained on the labelled subjects | scored |
|---|---|---|
| ``window`` | a single-window classifier (the paper's protocol) | each 30 s window alone |
| ``sequence`` | a sequence classifier over ``context`` windows (``FinetuneConfig.context``) | each window with its neighbours |
| ``night`` | a night classifier (``context="night"``: the whole record with the time of night), trained on crops | each window with its whole night |
| ``probe`` | logistic regression on the frozen encoder's features (Banville et al. 2021) | each window alone |

Methods:

| name | pretraining | arms |
|---|---|---|
| ``part``, ``part_grid``, ``mae``, ``mp3``, ``droppos``, ``part_windows``, ``rp``, ``ts`` | ``pretrain(method=name)`` on the pool (``rp``, ``ts``: relative positioning, temporal shuffling, with PART across windows' segments and budget) | window, sequence and night (``part_windows``: both its levels), probe |
| ``chambon2018``, ``deepsleepnet`` | none: braindecode's stagers from scratch (``FinetuneConfig.stager``) | window |
| ``usleep`` | none: braindecode's U-Sleep from scratch, reading whole nights | night |
| ``supervised_pool`` | supervised, on the stage labels of each pool's nights (an oracle, a reference row; pools only, :mod:`~partnd.recipes.study_ceiling`) | window, sequence, night, probe |
| ``supervised`` | none: from scratch, with position embedding | window, sequence, night, probe (a random encoder) |
| ``supervised_no_pos`` | none: from scratch, without position embedding | window, probe |
| ``classical`` | none: YASA's features + LightGBM (:mod:`partnd.evaluation.classical`) | window (the epoch's features), sequence (with YASA's context) |
| ``yasa_pretrained`` | YASA's shipped classifier, no labels | sequence |

Every neural cell uses the same protocol for every initialisation: a step budget, the EEG
augmentations, class weights, label smoothing, and the checkpoint chosen by Cohen's kappa on
validation subjects drawn from the fine-tuning pool (never a test subject); each cell records the
settings it used. The training budget may follow the label count: a scale's ``by_budget`` table
gives, per arm and number of labelled subjects, what changes (steps, batch, crops, EMA;
:func:`budget_settings`), and the cell records it.

A cell's labels are a *draw* (:func:`partnd.datasets.label_budget.draw_labels`): for a budget and
a seed, its labelled subjects (or windows per stage) and its validation subjects, drawn from the
fine-tuning pool; every row with the same budget and seed gets the same draw, so their
differences are paired. A labelled window's unlabelled neighbours stay as context (label -1) for
the arms that read context.

The stages live in modules of their own: the settings and methods in
:mod:`~partnd.recipes.study_config`, the store, split and draws in :mod:`~partnd.recipes.study_data`,
pretraining in :mod:`~partnd.recipes.study_pretraining` (pools: :mod:`~partnd.recipes.study_pools`),
computing a cell in :mod:`~partnd.recipes.study_cells` and its files in
:mod:`~partnd.recipes.study_cell_store`; :class:`SleepStudy` ties them together.
"""  # noqa: E501

from __future__ import annotations

import json

from partnd._validation import check
from partnd.recipes.study_cell_store import CellResult, CellStore
from partnd.recipes.study_cells import StudyCells
from partnd.recipes.study_config import (
    ARMS,
    CLASSICAL_METHODS,
    SCRATCH_METHODS,
    StudyConfig,
    available_methods,
    method_arms,
    pretrained_methods,
)
from partnd.recipes.study_data import StudyData, split_sizes
from partnd.recipes.study_directory import STUDY_MARKER, claim_study_directory
from partnd.recipes.study_pools import PoolStage
from partnd.recipes.study_pretraining import StudyPretraining
from partnd.recipes.study_scales import (
    DEMO_ENCODER_OVERRIDES,
    SCALES,
    STUDY_FRONTENDS,
    budget_settings,
)

__all__ = [
    "ARMS",
    "CLASSICAL_METHODS",
    "DEMO_ENCODER_OVERRIDES",
    "SCALES",
    "SCRATCH_METHODS",
    "STUDY_FRONTENDS",
    "CellResult",
    "SleepStudy",
    "StudyConfig",
    "available_methods",
    "budget_settings",
    "method_arms",
    "pretrained_methods",
]


class SleepStudy(StudyData):
    """Runs the stages of a sleep study in ``config.out`` (see the module docstring).

    The study is its data (:class:`~partnd.recipes.study_data.StudyData`: store, split, labelled
    windows, draws); it claims its directory and hands each stage to a part, whose verbs are the
    study's own: ``pretraining`` (:class:`~partnd.recipes.study_pretraining.StudyPretraining`:
    ``run_pretraining``, ``pretrained``, ``pretrain_dir``, ``window_encoder``, ``pools``,
    ``pool_names``), ``cell_store`` (:class:`~partnd.recipes.study_cell_store.CellStore`:
    ``cell_dir``, ``cell_done``, ``load_cell``) and ``cells``
    (:class:`~partnd.recipes.study_cells.StudyCells`: ``run_cell``).

    Args:
        config: The study's settings.
        overwrite: Start the directory over (only a study directory is ever cleared).
    """

    #: The parts a study hands its pretraining and its cells to (a study of another kind, such
    #: as :mod:`partnd.recipes.transfer_study`'s, brings its own).
    pretraining_type: type[StudyPretraining] = StudyPretraining
    cells_type: type[StudyCells] = StudyCells

    def __init__(self, config: StudyConfig, overwrite: bool = False) -> None:
        super().__init__(config)
        self._claim(overwrite)
        self.pretraining = self.pretraining_type(self)
        self.cell_store = CellStore(self.out)
        self.cells = self.cells_type(self, self.pretraining, self.cell_store)
        self.pretrain_dir = self.pretraining.pretrain_dir
        self.pretrained = self.pretraining.pretrained
        self.run_pretraining = self.pretraining.run_pretraining
        self.window_encoder = self.pretraining.window_encoder
        self.cell_dir = self.cell_store.cell_dir
        self.cell_done = self.cell_store.cell_done
        self.load_cell = self.cell_store.load_cell
        self.run_cell = self.cells.run_cell

    def _claim(self, overwrite: bool) -> None:
        """Claim ``out`` for these settings (a store inside it is never cleared; the pools'
        settings may change until the pools are drawn)."""
        store = self.config.store
        if overwrite and store is not None and self.out.is_dir() and any(self.out.iterdir()):
            inside = store.resolve().is_relative_to(self.out.resolve())
            check(not inside, "--store", "a store outside --out with --overwrite", "inside")
        drawn = (self.out / "pools.json").exists() or (self.out / "pretrain_pools").exists()
        revisable = [] if drawn else ["pools", "pool_overrides", "held_out_subjects"]
        if self._split_kept():
            revisable.append("budgets")
        claim_study_directory(self.out, self.config.settings, overwrite, revisable)

    def _split_kept(self) -> bool:
        """Whether this config's label budgets leave the study's subject split as it is: the
        split is not made yet, or the budgets size it as the stored ones did. Then a budget
        may be added or removed; every cell of a budget is its own."""
        marker = self.out / STUDY_MARKER
        if not (self.out / "split.json").is_file() or not marker.is_file():
            return True
        stored = json.loads(marker.read_text()).get("budgets")
        return split_sizes(stored or SCALES[self.config.scale].budgets) == split_sizes(self.budgets)

    def build_shared_data(self, pool_pretraining: bool) -> None:
        """Build what the processes of a parallel run share, here, once, so that no two
        processes build it at the same time: the store and the split, and with
        ``pool_pretraining`` (a task pretrains on a pool) the pool store and ``pools.json``."""
        _ = self.store, self.split
        if pool_pretraining:
            _ = self.pools.store, self.pools.plan

    @property
    def pools(self) -> PoolStage:
        """The unlabelled axis: the pool store, the nested pools and their pretraining."""
        return self.pretraining.pools

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The pools of the study, smallest first (none without ``StudyConfig.pools``)."""
        return self.pretraining.pool_names
