"""The README and the pages under docs/ link only to files that exist, and to headings that do.

A reader follows these links from the front door to the manual; a page renamed or a heading
reworded without fixing its links makes these tests fail, naming the page and the link.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown page outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    as hyphens, and -1, -2... after a repeated one."""
    anchors: set[str] = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[1])
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _links(page: Path) -> list[str]:
    """The page's relative link and image targets."""
    prose = "\n".join(_prose_lines(page.read_text(encoding="utf-8")))  # a link may wrap
    prose = re.sub(r"`[^`]*`", "", prose)  # inline code, which may wrap too
    return [target for target in LINK.findall(prose) if not target.startswith(EXTERNAL)]


def test_the_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "manifest.md", "training.md", "performance.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            broken.append(f"{target}: no such file")
        elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
            broken.append(f"{target}: no heading with that anchor in {goal.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    linked = {Path(t.partition("#")[0]).name for t in _links(ROOT / "README.md")}
    missing = [page.name for page in PAGES[1:] if page.name not in linked]
    assert not missing, f"README.md does not link {missing}"
