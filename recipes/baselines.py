"""The from-scratch baselines both study recipes (sleep and images) compare every pretraining
against: a supervised model trained on the labels alone, with and without a position
embedding."""

from __future__ import annotations

__all__ = ["SCRATCH_METHODS"]

#: Methods trained from scratch (no pretraining): name -> whether they get a position embedding.
SCRATCH_METHODS: dict[str, bool] = {"supervised": True, "supervised_no_pos": False}
