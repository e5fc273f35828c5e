"""The install namespace: a built wheel holds ``partnd`` and nothing else at top level.

``preprocessing/`` and ``recipes/`` stay top-level folders of the repository but install as
``partnd.preprocessing`` and ``partnd.recipes`` (setuptools ``package-dir``), so that a user's own
``preprocessing`` or ``recipes`` module cannot clash with ours.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _package_dirs() -> dict[str, Path]:
    """Every folder with an ``__init__.py`` under the three source roots, by its installed name."""
    found: dict[str, Path] = {}
    for folder, prefix in (("partnd", "partnd"), ("preprocessing", "partnd.preprocessing")):
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT / folder).parts
            found[".".join((prefix, *relative))] = init.parent
    for init in sorted((ROOT / "recipes").rglob("__init__.py")):
        relative = init.parent.relative_to(ROOT / "recipes").parts
        found[".".join(("partnd.recipes", *relative))] = init.parent
    return found


def test_pyproject_lists_every_package_under_the_partnd_namespace() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert sorted(settings["packages"]) == sorted(_package_dirs())
    assert settings["package-dir"] == {
        "partnd.preprocessing": "preprocessing",
        "partnd.recipes": "recipes",
    }


@pytest.mark.slow
def test_wheel_installs_only_the_partnd_namespace(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("partnd", "preprocessing", "recipes"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", str(source), "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(wheels), "--quiet"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("partnd-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    assert top_level == {
        "partnd",
        f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info",
    }
    assert "partnd/preprocessing/pipeline.py" in names
    assert "partnd/recipes/sleep_staging.py" in names

    # A clean virtual environment with the wheel installed; its dependencies are reached through a
    # path entry (not a site directory, so this checkout's editable-install hook is not loaded).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    check = (
        "import importlib, importlib.util, pkgutil, partnd, partnd.preprocessing.pipeline;"
        f"assert partnd.__file__.startswith({site!r}), partnd.__file__;"
        "assert importlib.util.find_spec('preprocessing') is None;"
        "assert importlib.util.find_spec('recipes') is None;"
        "missing = [n for n in partnd.__all__ if getattr(partnd, n, None) is None];"
        "assert not missing, missing;"
        "names = [m.name for m in pkgutil.walk_packages(partnd.__path__, 'partnd.')];"
        "names = [n for n in names if not n.endswith('__main__')];"
        "modules = [importlib.import_module(n) for n in names];"
        "unbound = [f'{m.__name__}.{n}' for m in modules for n in getattr(m, '__all__', ())"
        " if not hasattr(m, n)];"
        "assert not unbound, unbound;"
        "assert 'partnd.recipes.sleep_study' in names and 'partnd.patches.sampling' in names;"
        "print('ok', len(names))"
    )
    out = subprocess.run(
        [str(python), "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("ok ")
    assert int(out.stdout.split()[1]) > 100  # every module of the installed package imported
