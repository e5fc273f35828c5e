"""Every command line the README and docs show uses options its command accepts (a page once told
users to run ``partnd finetune --pretrained``, which the command refuses: ``--init-weights``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from partnd import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"^(?:\$ )?(partnd [a-z][\w-]*|python -m partnd\.[\w.]+)(?=\s|$)(.*)$")
INLINE = re.compile(r"`((?:partnd [a-z][\w-]*|python -m partnd\.[\w.]+)(?:\s[^`]*)?)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def command_lines(text: str) -> list[str]:
    """The command lines of a page: in code blocks (continuation lines joined, comments
    dropped) and in inline code."""
    lines: list[str] = []
    in_block = False
    pending = ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            lines += INLINE.findall(raw)
            continue
        line = pending + raw.strip()
        pending = line[:-1] + " " if line.endswith("\\") else ""
        if not pending:
            lines.append(re.split(r"\s#", line)[0])
    return [line.strip() for line in lines if COMMAND.match(line.strip())]


def help_text(program: str, capsys: pytest.CaptureFixture) -> str:
    """``--help`` of ``partnd <subcommand>`` or of ``python -m partnd.<module>``."""
    if program.startswith("partnd "):
        name = program.split()[1]
        assert name in cli.SUBCOMMANDS, f"{program}: no such subcommand"
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        return capsys.readouterr().out
    module = importlib.import_module(program.split()[-1])
    return str(module.build_parser().format_help())


def test_the_pages_show_command_lines() -> None:
    found = [line for page in PAGES for line in command_lines(page.read_text())]
    assert len(found) > 20
    assert any(line.startswith("partnd finetune") and "--init-weights" in line for line in found)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_option_a_page_shows_is_accepted(page: Path, capsys: pytest.CaptureFixture) -> None:
    helps: dict[str, str] = {}
    unknown = []
    for line in command_lines(page.read_text()):
        match = COMMAND.match(line)
        assert match is not None
        program, rest = match.groups()
        if program not in helps:
            helps[program] = help_text(program, capsys)
        for option in OPTION.findall(rest):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helps[program]):
                unknown.append(f"{program} {option}")
    assert not unknown, f"{page.name} shows options its commands refuse: {unknown}"
