"""The public API surface: every advertised name resolves, and light modules stay light."""

import subprocess
import sys

import pytest

import partnd
import partnd.datasets


@pytest.mark.parametrize("module", [partnd, partnd.datasets])
def test_every_exported_name_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = partnd.no_such_thing


def test_top_level_names_are_the_implementations():
    import partnd.finetuning.training
    import partnd.pretraining
    from partnd.patches.sampling import OffGridSampler

    # Importing the implementing modules must not shadow the functions of the same role.
    assert partnd.pretrain is partnd.pretraining.pretrain
    assert partnd.finetune is partnd.finetuning.training.finetune
    assert partnd.evaluate is partnd.finetuning.training.evaluate
    assert partnd.OffGridSampler is OffGridSampler


def test_store_and_preprocessing_do_not_import_torch():
    # Preprocessing workers import these; torch alone costs ~0.5 GB of memory per worker.
    code = (
        "import sys, partnd, partnd.datasets.store, partnd.preprocessing.physionet2018;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
