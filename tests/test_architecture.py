"""The shape of the code's own imports: no circles, readers never import the generated cohort, and
nothing below the package face imports it.

The graph is read from the source with :mod:`ast` (module-level and function-level imports alike,
``TYPE_CHECKING`` blocks excluded: they never run), over the installed namespace ``partnd``
(``preprocessing/`` and ``recipes/`` install as ``partnd.preprocessing`` and ``partnd.recipes``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"partnd": "partnd", "preprocessing": "partnd.preprocessing", "recipes": "partnd.recipes"}


def _modules() -> dict[str, Path]:
    """Installed module name -> source file."""
    found: dict[str, Path] = {}
    for folder, prefix in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(path: Path, module: str, is_package: bool) -> list[str]:
    """Absolute names of everything ``module`` imports (``from a import b`` gives ``a.b`` and
    ``a``), skipping ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
        for statement in node.body
        for child in ast.walk(statement)
    }
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (the package face ``partnd`` included)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = _imported_names(path, name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (package faces' lazy exports are strings, not edges)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_graph_is_read_from_real_imports() -> None:
    graph = import_graph()
    assert "partnd.patches.sampling" in graph["partnd.objectives"]
    assert "partnd.datasets.store" in graph["partnd.datasets.sleep_windows"]
    assert "partnd.patches.resampling" in graph["partnd.patches.integer_box_resize"]


def test_no_import_circle() -> None:
    assert _cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_nothing_imports_the_package_face_from_below() -> None:
    importers = sorted(name for name, targets in import_graph().items() if "partnd" in targets)
    assert importers == []


def test_readers_never_import_the_generated_cohort() -> None:
    graph = import_graph()
    readers = [name for name in graph if name.startswith("partnd.datasets")]
    assert readers
    for reader in readers:
        assert not any(t.startswith("partnd.cohort") for t in graph[reader]), reader


def test_no_module_under_datasets_synthesises_signals() -> None:
    generators = {"hypnogram", "pc18_cohort", "pc18_format", "synthetic_eeg"}
    assert not generators & {path.stem for path in (ROOT / "partnd" / "datasets").glob("*.py")}
    assert generators <= {path.stem for path in (ROOT / "partnd" / "cohort").glob("*.py")}


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("partnd.cohort", "ensure_sample_cohort"),
        ("partnd.cohort", "make_pc18_cohort"),
        ("partnd.cohort", "injected_faults"),
        ("partnd.cohort.pc18_cohort", "main"),
    ],
)
def test_public_cohort_names_import_from_their_documented_places(where: str, name: str) -> None:
    module = __import__(where, fromlist=[name])
    assert callable(getattr(module, name))


LOWER_LAYERS = ("partnd.patches", "partnd.models", "partnd.objectives", "partnd.engine")
UPPER_LAYERS = (
    "partnd.datasets",
    "partnd.cohort",
    "partnd.recipes",
    "partnd.preprocessing",
    "partnd.finetuning",
    "partnd.evaluation",
    "partnd.cli",
)


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def test_the_core_models_objectives_and_engine_never_import_data_readers_or_recipes() -> None:
    graph = import_graph()
    lower = [name for name in graph if _under(name, LOWER_LAYERS)]
    assert "partnd.engine.sampler" in lower and "partnd.patches.sampling" in lower
    leaks = {
        name: sorted(t for t in graph[name] if _under(t, UPPER_LAYERS))
        for name in lower
        if any(_under(t, UPPER_LAYERS) for t in graph[name])
    }
    assert leaks == {}


def test_the_patch_core_imports_nothing_of_the_layers_above_it() -> None:
    graph = import_graph()
    above = ("partnd.models", "partnd.objectives", "partnd.engine", *UPPER_LAYERS)
    leaks = {
        name: sorted(t for t in graph[name] if _under(t, above))
        for name in graph
        if _under(name, ("partnd.patches",)) and any(_under(t, above) for t in graph[name])
    }
    assert leaks == {}


def test_the_layering_check_catches_a_leak() -> None:
    graph = {"partnd.engine.sampler": {"partnd.datasets.sleep_windows"}}
    assert any(_under(t, UPPER_LAYERS) for t in graph["partnd.engine.sampler"])


def test_the_package_top_level_holds_few_modules() -> None:
    top = sorted(path.stem for path in (ROOT / "partnd").glob("*.py"))
    assert len(top) <= 8, top
