"""Write ``docs/guide/api.md``: every public name of ``partnd`` and every ``partnd`` subcommand,
with the first line of its docstring or help.

``tests/test_docs_guide.py`` regenerates the page and compares, so it cannot go stale. Run from
the repository root after changing a public name or its docstring:

    .venv/bin/python docs/make_api_reference.py [--out docs/guide/api.md]
"""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "guide" / "api.md"

HEADER = """# 7. API reference

This page is generated from the docstrings by `docs/make_api_reference.py`.
A test regenerates it, so it matches the code.
Read a name's full docstring with `help(partnd.NAME)`.
"""


def first_line(text: str | None) -> str:
    """The first paragraph of ``text`` joined into one line, its reST roles and double
    backquotes as Markdown code (empty without a docstring)."""
    if not text:
        return ""
    paragraph = inspect.cleandoc(text).split("\n\n")[0]
    line = " ".join(part.strip() for part in paragraph.splitlines())
    line = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", line)
    return line.replace("``", "`").replace("|", "/")


def api_reference() -> str:
    """The page's Markdown: the public names by kind, then the subcommands."""
    import partnd
    from partnd import cli

    classes, functions = [], []
    for name in sorted(partnd.__all__, key=str.lower):
        if name.startswith("__"):
            continue
        value = getattr(partnd, name)
        row = f"| `partnd.{name}` | {first_line(inspect.getdoc(value))} |"
        (classes if inspect.isclass(value) else functions).append(row)
    lines = [HEADER, "## Functions", "", "| name | what it does |", "|---|---|", *functions]
    lines += ["", "## Classes", "", "| name | what it is |", "|---|---|", *classes]
    lines += ["", "## Commands", "", "Each takes `--help`.", "", "| command | what it does |"]
    lines += ["|---|---|"]
    lines += [f"| `partnd {name}` | {sub.help} |" for name, sub in cli.SUBCOMMANDS.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PAGE)
    args = parser.parse_args()
    args.out.write_text(api_reference())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
