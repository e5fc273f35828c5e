"""Resumes that would change the model are refused (issue 43)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partnd._validation import InputError
from partnd.datasets.sequences import SleepSequenceDataset
from partnd.engine.config import FinetuneConfig
from partnd.finetuning.training import finetune


def test_sequence_resume_refuses_another_normalisation(gappy_store: Path, tmp_path: Path) -> None:
    """Resuming a sequence classifier on record-normalised windows with window-normalised ones
    went on and relabelled the model: the fingerprint left the normalisation out."""
    config = FinetuneConfig.preset(
        "test", patch_size=10, context=3, temporal_encoder="temporal_test", epochs=2, max_steps=1
    )
    out = tmp_path / "run"
    record = SleepSequenceDataset(gappy_store, context=3, normalize="record", progress=False)
    finetune(None, record, num_classes=5, out_dir=out, config=config)
    window = SleepSequenceDataset(gappy_store, context=3, normalize="window", progress=False)
    with pytest.raises(InputError, match="normali"):
        finetune(None, window, num_classes=5, out_dir=out, resume=True)
    finetune(None, record, num_classes=5, out_dir=out, resume=True)
