"""The docs a newcomer walks: every page reachable from README, the guide written in short
sentences, and the API reference generated from the code."""

from __future__ import annotations

import importlib.util
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: The longest sentence a guide page may hold, and the most its sentences may average, in words.
MAX_WORDS, MAX_MEAN_WORDS = 30, 18.0


def linked_pages(page: Path) -> list[Path]:
    """The local Markdown files ``page`` links to (anchors dropped, web addresses skipped)."""
    targets = []
    for target in LINK.findall(page.read_text()):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if path.suffix == ".md":
            targets.append(path)
    return targets


def test_every_docs_page_is_reachable_from_readme_and_every_link_resolves() -> None:
    seen, todo, broken = set(), [ROOT / "README.md"], []
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in linked_pages(page):
            if target.is_file():
                todo.append(target)
            else:
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, f"links to missing pages: {broken}"
    pages = {path.resolve() for path in (ROOT / "docs").rglob("*.md")}
    unreached = sorted(str(path.relative_to(ROOT)) for path in pages - seen)
    assert not unreached, f"pages no link from README reaches: {unreached}"
    assert len(pages) >= 20  # the guide, the reference pages and the results


def sentences(markdown: str) -> list[str]:
    """The prose sentences of a page: code blocks, tables and headings dropped, links reduced
    to their text, inline code kept as one word each."""
    prose, in_block = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block or line.lstrip().startswith(("|", "#")) or not line.strip():
            prose.append("\n")  # a paragraph break ends a sentence
            continue
        if re.match(r"\s*([-*]|\d+\.)\s", line):  # a list item starts a sentence
            prose.append("\n")
        prose.append(line.strip())
    text = " ".join(prose)
    text = LINK.sub(lambda m: m.group(0)[1 : m.group(0).index("]")], text)
    text = re.sub(r"`[^`]*`", "CODE", text)
    text = re.sub(r"(^|\n)\s*([-*]|\d+\.)\s", "\n", text)
    text = re.sub(r"\b(e\.g|i\.e|etc|vs)\.", r"\1", text)  # abbreviations end no sentence
    parts = re.split(r"(?<=[.!?])\s+|\n", text)
    return [part.strip() for part in parts if re.search(r"[A-Za-z]", part)]


def test_sentences_split_at_full_stops_and_paragraphs_but_not_in_code() -> None:
    page = "One two, e.g. three. Four `a. B` five.\n\n| a. B | c |\n```\nx. Y\n```\n"
    page += "Six [s](x.md). eight\n- nine\n  ten\n1. eleven"
    assert sentences(page) == [
        "One two, e.g three.",
        "Four CODE five.",
        "Six s.",
        "eight",
        "nine ten",
        "eleven",
    ]


def test_the_guide_is_written_in_short_sentences() -> None:
    pages = sorted(GUIDE.glob("*.md"))
    assert [page.name for page in pages] == [
        "api.md",
        "finetuning.md",
        "install.md",
        "pretraining.md",
        "recordings.md",
        "scaling.md",
        "studies.md",
    ]
    lengths = {}
    for page in pages:
        for sentence in sentences(page.read_text()):
            lengths[f"{page.name}: {sentence}"] = len(sentence.split())
    long = {sentence: words for sentence, words in lengths.items() if words > MAX_WORDS}
    assert not long, f"sentences over {MAX_WORDS} words: {long}"
    assert statistics.mean(lengths.values()) <= MAX_MEAN_WORDS


def test_the_api_reference_is_generated_from_the_code() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_api_reference", ROOT / "docs" / "make_api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (GUIDE / "api.md").read_text()
    assert page == module.api_reference(), "run docs/make_api_reference.py"
    import partnd

    for name in partnd.__all__:
        assert name.startswith("__") or f"`partnd.{name}`" in page
