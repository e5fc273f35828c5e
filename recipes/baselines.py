"""The from-scratch baselines both study recipes (sleep and images) compare every pretraining
against: a supervised model trained on the labels alone, with and without a position embedding;
and the sleep study's oracle ceiling of its pool axis, a supervised pretraining on the pool's own
stage labels (:mod:`partnd.recipes.study_ceiling`)."""

from __future__ import annotations

__all__ = ["POOL_CEILING", "SCRATCH_METHODS"]

#: Methods trained from scratch (no pretraining): name -> whether they get a position embedding.
SCRATCH_METHODS: dict[str, bool] = {"supervised": True, "supervised_no_pos": False}

#: The reference (oracle) row of the pool axis: an encoder pretrained, supervised, on the stage
#: labels of a pretraining pool's nights (labels no user of a pool has), then fine-tuned as every
#: pretrained encoder; it bounds what any pretraining on that pool could give.
POOL_CEILING = "supervised_pool"
