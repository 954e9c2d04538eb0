"""Sections of the README and docs/*.md by heading, for the tests that run a walkthrough as
written: the text under a heading line up to the next heading of the same or a higher level
(lines inside fenced code blocks are never headings)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _heading_level(line: str) -> int:
    match = re.match(r"(#{1,6}) ", line)
    return len(match.group(1)) if match else 0


def markdown_section(path: str | Path, heading: str) -> str:
    """The section of `path` (relative to the repository, or absolute) under the line `heading`,
    e.g. "### Linking a package into your build"; fails naming the file when it has no such line."""
    file = Path(path) if Path(path).is_absolute() else REPO / path
    lines = file.read_text().splitlines()
    level = _heading_level(heading)
    assert level, f"{heading!r} is not a markdown heading"
    body: list[str] = []
    inside, fenced = False, False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and inside and 0 < _heading_level(line) <= level:
            break
        elif not fenced and line.rstrip() == heading:
            inside = True
            continue
        if inside:
            body.append(line)
    assert inside, f"{file.relative_to(REPO) if file.is_relative_to(REPO) else file} has no heading {heading!r}"
    return "\n".join(body) + "\n"


def code_blocks(text: str, language: str = r"\w+") -> list[tuple[str, str]]:
    """The fenced code blocks of `text` as (language, body)."""
    return re.findall(rf"```({language})\n(.*?)```", text, re.S)
