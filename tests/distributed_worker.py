"""Worker for ``tests/test_distributed.py``: one rank of a torchrun ``partnd.pretraining`` run.

Usage::

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/distributed_worker.py OUT RESULTS [nan]

Every rank trains on the same generated data and writes its final weights to
``RESULTS/rank{RANK}.pt``, so the test can check that the ranks ended identical. With ``nan``, one
item holds a NaN: every rank must stop with an ``InputError`` (none may hang in a collective), and
writes the message to ``RESULTS/rank{RANK}.error``.
"""

import os
import sys
from pathlib import Path

import numpy as np
import torch

from partnd._validation import InputError
from partnd.engine.config import PretrainConfig
from partnd.pretraining import pretrain


def main() -> None:
    out_dir, results = Path(sys.argv[1]), Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    data = np.random.default_rng(0).standard_normal((32, 2, 80)).astype(np.float32)
    if sys.argv[3:] == ["nan"]:
        data[7, 0, 3] = np.nan
    config = PretrainConfig.preset(
        "test",
        patch_size=20,
        num_patches=6,
        num_pairs=12,
        epochs=2,
        batch_size=4,
        pos_embed=True,
        pos_mask_ratio=0.25,
        ema_decay=0.9,
        checkpoint_every_steps=3,
        log_every_steps=2,
        progress=True,
    )
    results.mkdir(parents=True, exist_ok=True)
    try:
        result = pretrain(data, out_dir=out_dir, config=config)
    except InputError as error:
        (results / f"rank{rank}.error").write_text(str(error))
        return
    torch.save(
        {"model": result.model.state_dict(), "history": result.history},
        results / f"rank{rank}.pt",
    )


if __name__ == "__main__":
    main()
