"""Pretraining the encoders of a sleep study, and the encoders its cells start from.

Each self-supervised method is pretrained once per study (``OUT/pretrain/<method>/``, an engine
run on the split's pretraining records for the scale's step budget), or once per pretraining pool
(``OUT/pretrain_pools/<pool>/<method>/``, :class:`~partnd.recipes.study_pools.PoolStage`); the
pool axis's oracle ceiling (``supervised_pool``) is pretrained on each pool's stage labels
(:mod:`partnd.recipes.study_ceiling`). A
finished run (``encoder.pt``) is never recomputed and an interrupted one resumes
(:class:`~partnd.engine.run_dir.RunDir`). :meth:`StudyPretraining.window_encoder` gives a cell its
window encoder: a pretrained method's, or a from-scratch method's seeded random one.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from partnd._validation import check
from partnd.datasets.pools import pool_name
from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.engine.run_dir import RunDir
from partnd.models import ViTEncoder, create_encoder
from partnd.models.serialization import ENCODER_FILE, load_encoder
from partnd.pretraining import pretrain
from partnd.recipes.study_ceiling import run_pool_ceiling
from partnd.recipes.study_config import POOL_CEILING, SCRATCH_METHODS, pretrained_methods
from partnd.recipes.study_data import StudyData
from partnd.recipes.study_pools import PoolStage

__all__ = ["StudyPretraining"]


class StudyPretraining:
    """The pretraining runs of a study and the window encoders its cells start from.

    Args:
        data: The study's data (store, split, settings).
    """

    def __init__(self, data: StudyData) -> None:
        self.data = data
        self.config = data.config
        self.out = data.out

    @cached_property
    def pools(self) -> PoolStage:
        """The unlabelled axis: the pool store, the nested pools and their pretraining."""
        check(
            self.config.pools is not None,
            "pools",
            "pool sizes in hours (a study with pretraining pools)",
            "none",
        )
        return PoolStage(self.data)

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The pools of the study, smallest first (none without ``StudyConfig.pools``)."""
        if self.config.pools is None:
            return ()
        return tuple(pool_name(size) for size in self.config.pools)

    def pretrain_dir(self, method: str, pool: str | None = None) -> Path:
        """Run directory of ``method``'s pretraining (on ``pool``'s nights when given)."""
        if pool is not None:
            return self.pools.run_dir(method, pool)
        return self.out / "pretrain" / method

    def pretrained(self, method: str, pool: str | None = None) -> bool:
        """Whether ``method``'s pretraining (on ``pool``) has finished (a run stopped early by
        ``max_steps`` also writes ``encoder.pt``, but has not finished)."""
        if pool is not None:
            return self.pools.done(method, pool)
        return self.trained(self.pretrain_dir(method))

    @staticmethod
    def trained(run_dir: Path) -> bool:
        """Whether the pretraining run in ``run_dir`` has finished (``encoder.pt`` and every
        step trained)."""
        return (run_dir / ENCODER_FILE).is_file() and RunDir(run_dir).trained()

    def run_pretraining(self, method: str, pool: str | None = None) -> Path:
        """Pretrain ``method`` unless done (an interrupted run resumes): on the split's
        pretraining records for the scale's budget, or on ``pool``'s nights for a budget chosen
        on held-out nights (:class:`PoolStage`; the oracle ceiling on their stage labels,
        :func:`~partnd.recipes.study_ceiling.run_pool_ceiling`, pools only).

        Returns:
            The run directory (holding ``encoder.pt``).
        """
        check(
            method in pretrained_methods(),
            "method",
            f"a pretraining method {pretrained_methods()}",
            repr(method),
        )
        check(
            method != POOL_CEILING or pool is not None,
            "pool",
            f"a pretraining pool for {POOL_CEILING} (it is pretrained on a pool's stage labels)",
            "none",
        )
        if method == POOL_CEILING:
            return run_pool_ceiling(self.pools, str(pool))
        if pool is not None:
            return self.pools.run(method, pool)
        run_dir = self.pretrain_dir(method)
        if self.pretrained(method):
            return run_dir
        data = SleepWindowDataset(
            self.data.store,
            records=list(self.data.split.pretrain),
            normalize=self.config.normalization,
        )
        return self.pretrain_run(run_dir, data, method)

    def pretrain_run(self, run_dir: Path, data: Any, method: str) -> Path:
        """Pretrain ``method`` on ``data`` into ``run_dir`` with the study's configuration, or
        continue the interrupted run there to its end.

        Returns:
            ``run_dir`` (holding ``encoder.pt``).
        """
        if RunDir(run_dir).resumable:
            pretrain(data, out_dir=run_dir, resume=True, max_steps=None)
        else:
            config = self.config.pretrain_config(method)
            pretrain(data, out_dir=run_dir, config=config, overwrite=run_dir.exists())
        return run_dir

    def window_encoder(self, method: str, seed: int, pool: str | None) -> ViTEncoder:
        """A pretrained method's window encoder, or a scratch method's random encoder."""
        if method not in SCRATCH_METHODS:
            return load_encoder(self.pretrain_dir(method, pool))
        config = self.config.finetune_config(method, seed)
        torch.manual_seed(seed)
        encoder = create_encoder(
            config.encoder,
            in_chans=len(self.data.store.channels),
            patch_size=config.patch_size,
            ndim=1,
            **config.encoder_overrides,
        )
        if SCRATCH_METHODS[method]:
            encoder.add_position_embedding(self.data.store.n_times // encoder.patch_size[0])
        return encoder.eval()
