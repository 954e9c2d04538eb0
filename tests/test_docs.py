"""The README is a short manual whose links resolve, docs/ops.md is what `aot ops` prints, and the
tree holds no development history (session and issue numbers, dates, before -> after figures)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import aot

REPO = Path(__file__).resolve().parent.parent
README_LIMIT_BYTES = 20_000
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

# Development narrative, flagged anywhere in the tree.
HISTORY = {
    "a session number": re.compile(r"\b[Ss]ession \d+"),
    "an issue number": re.compile(r"\b[Ii]ssue #?\d+|\(#\d+\)"),
    # A measurement log: a figure with its unit, an arrow, the new figure with its unit
    # ("3.37 -> 3.25 M", "1.5x -> 0.95x", "633 -> 566 us"); shapes ("64 -> 256 channels",
    # "24 -> 1 map") carry no unit after the second number.
    "a before -> after measurement": re.compile(
        r"\d[\d.]*\s?(?:ms|us|µs|M|k|%|MB|KB|KiB|MiB|GB|x)?\s*->\s*\d[\d.]*\s?"
        r"(?:ms|us|µs|M|%|MB|KB|KiB|MiB|GB|x|bytes|instructions|GFLOP/s)(?![\w/])"),
}
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# Where dates belong: the changelog and the benchmark results say when a figure was measured.
DATED = {"CHANGELOG.md", "benchmarks/RESULTS.md"}
SCANNED = ("aot/", "templates/", "runtime_c/", "examples/", "benchmarks/", "docs/", "tests/", "README.md")
BINARY = (".onnx", ".npz", ".npy", ".png", ".jpg", ".bin", ".a", ".o", ".so")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_readme_is_a_short_manual() -> None:
    readme = REPO / "README.md"
    size = len(readme.read_bytes())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes, over {README_LIMIT_BYTES}: move detail to docs/"
    text = readme.read_text()
    assert text.index("bash examples/run_example.sh") < text.index("\n## "), "the first commands come first"
    for heading in ("## Install", "## From pip install to a verified Raspberry Pi 4 binary", "## Contents",
                    "## License"):
        assert f"\n{heading}\n" in text, heading


def test_readme_contents_links_every_docs_page() -> None:
    text = (REPO / "README.md").read_text()
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    linked = {target.split("#")[0] for target in LINK.findall(contents)}
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert pages and pages <= linked, sorted(pages - linked)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    """Each relative link names an existing file, and its #anchor a heading of that page."""
    for target in _links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.relative_to(REPO)}: link {target!r} names no file"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"{page.relative_to(REPO)}: {target!r} has no such heading"


def test_docs_ops_is_what_aot_ops_prints() -> None:
    """docs/ops.md is generated: regenerate it with `aot ops > docs/ops.md` when the ops change."""
    result = aot("ops")
    assert result.returncode == 0, result.stderr
    assert (REPO / "docs" / "ops.md").read_text() == result.stdout, "docs/ops.md is stale: aot ops > docs/ops.md"


def test_aot_ops_lists_every_registered_op_and_only_registered_limits() -> None:
    import json

    from aot.commands.op_table import limited_ops
    from aot.lowering.registry import registered_op_types

    result = aot("ops", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    names = {(r["op"] if r["domain"] == "ai.onnx" else f"{r['domain']}::{r['op']}") for r in rows}
    assert names == set(registered_op_types())
    assert set(limited_ops()) <= names, set(limited_ops()) - names
    slice_row = next(r for r in rows if r["op"] == "Slice")
    assert "compile-time constant `starts`" in slice_row["notes"] and slice_row["opsets"].endswith("+")


def _tree() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SCANNED],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in listed if not f.endswith(BINARY) and f != "tests/test_docs.py" and (REPO / f).is_file()]


def history_in(path: str, text: str) -> list[str]:
    """Each line of `text` that tells development history, as `path:line: what`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in HISTORY.items():
            if pattern.search(line):
                found.append(f"{path}:{number}: {what}: {line.strip()[:120]}")
        if path not in DATED and DATE.search(line):
            found.append(f"{path}:{number}: a date: {line.strip()[:120]}")
    return found


def test_the_history_patterns_flag_logs_and_spare_shapes() -> None:
    for log in ("SqueezeNet 125 -> 106 M", "session 16", "issue #19", "(#42)", "the model 71 -> 56 us",
                "1.5x -> 0.95x", "from 2026-11-30"):
        assert history_in("x.py", log), log
    for fine in ("64 -> 256 1x1 convs at 56x56", "a 24 -> 1 map", "x * Sigmoid(x) -> SiLU",
                 "`--input-shape x=1x40 --input-shape x=8x40`", "16 -> 24 at 160x160"):
        assert not history_in("x.py", fine), fine


def test_no_development_history_in_the_tree() -> None:
    """No session or issue numbers, dates (outside the changelog and benchmark results) or before
    -> after figures in code, comments, docs or templates: a comment says why in one sentence and
    names the benchmark that shows it."""
    found = [hit for path in _tree() for hit in history_in(path, (REPO / path).read_text(errors="replace"))]
    assert not found, f"{len(found)} lines tell development history:\n" + "\n".join(found)
