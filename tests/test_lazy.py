"""Package faces import their public names on first use (partnd._lazy)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from partnd._lazy import lazy_exports


def test_lazy_exports_resolve_relative_and_absolute_modules() -> None:
    from partnd.datasets.store import SleepStore
    from partnd.patches.sampling import OffGridSampler

    module_getattr, module_dir = lazy_exports(
        "partnd.datasets", {"SleepStore": ".store", "OffGridSampler": "partnd.patches.sampling"}
    )
    assert module_getattr("SleepStore") is SleepStore
    assert module_getattr("OffGridSampler") is OffGridSampler
    with pytest.raises(AttributeError, match=r"module 'partnd\.datasets' has no attribute 'nope'"):
        module_getattr("nope")
    names = module_dir()
    assert {"SleepStore", "OffGridSampler", "__name__"} <= set(names) and names == sorted(names)


def test_a_package_face_imports_a_module_only_when_its_name_is_used() -> None:
    code = (
        "import sys, partnd.datasets as d\n"
        "assert 'partnd.datasets.braindecode_interop' not in sys.modules\n"
        "assert 'torch' not in sys.modules\n"
        "d.SleepStore\n"
        "assert 'partnd.datasets.braindecode_interop' not in sys.modules\n"
        "assert callable(d.to_braindecode)\n"
        "assert 'partnd.datasets.braindecode_interop' in sys.modules\n"
        "import partnd.cohort as c\n"
        "assert 'partnd.cohort.pc18_cohort' not in sys.modules and c.make_pc18_cohort\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line_starts_without_torch() -> None:
    # torch loads inside the command's guard (partnd.cli.errors.run_command): Ctrl-C while it
    # loads ends with one line and status 130, not a KeyboardInterrupt traceback
    code = (
        "import sys, partnd.cli, partnd.engine as e\n"
        "assert 'torch' not in sys.modules, 'partnd.cli imports torch'\n"
        "assert e.PretrainConfig.field_names()[0] == 'epochs' and 'torch' not in sys.modules\n"
        "assert e.Trainer.__module__ == 'partnd.engine.trainer'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
