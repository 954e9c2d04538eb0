"""`aot report`: a self-contained HTML page whose memory chart really renders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aot.commands.report import build_report
from aot.commands.report_chart import Lifetime, memory_chart

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"


def aot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_report_is_self_contained_and_describes_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = aot("report", str(EXAMPLE), "-o", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert not re.search(r"(src|href)=\"https?:", page) and "<script" not in page
    data = build_report(EXAMPLE)
    assert page.count('<rect class="tensor"') == len(data["rects"]) > 0
    for r in data["rects"]:  # every tensor drawn inside the chart
        assert r["x"] >= 0 and r["x"] + r["w"] <= data["chart_width"] + 0.01
        assert r["y"] >= 0 and r["y"] + r["h"] <= data["chart_height"] + 0.01
    assert "Conv+BatchNormalization" in page or "Conv+Clip" in page
    assert f">{data['arena_bytes']}<" in page


def _svg_texts(page: str, css_class: str) -> list[str]:
    return re.findall(rf'<text class="{css_class}"[^>]*>([^<]*)</text>', page)


def test_report_chart_has_labelled_axes_and_a_legend(tmp_path: Path) -> None:
    """What a reader needs without hovering: what x and y are, their scales, and which colour is which tensor."""
    out = tmp_path / "report.html"
    assert aot("report", str(EXAMPLE), "-o", str(out)).returncode == 0
    page = out.read_text()
    data = build_report(EXAMPLE)
    assert _svg_texts(page, "axis-label") == ["kernel step", "arena offset (KiB)"]
    ticks = _svg_texts(page, "tick")
    kernels = len(data["kernels"])
    assert ticks[:kernels] == [str(k) for k in range(kernels)]  # 10 kernels: every step labelled
    y_labels = [float(t) for t in ticks[kernels:]]
    assert y_labels[0] == 0 and y_labels == sorted(y_labels) and len(y_labels) >= 3
    assert y_labels[-1] == pytest.approx(data["arena_bytes"] / 1024, abs=0.01)  # the arena's end, 48 KiB
    legend = page[page.index('<table id="legend">'):]
    legend = legend[:legend.index("</table>")]
    rows = re.findall(r'background: (hsl\([^)]*\))"></span></td><td>([^<]*)</td>', legend)
    assert len(rows) == min(10, len(data["rects"])) > 0
    colour_of = {r["name"]: r["color"] for r in data["rects"]}
    assert all(colour_of[name] == colour for colour, name in rows)  # a swatch matches its rectangle
    sizes = [next(r["size"] for r in data["rects"] if r["name"] == name) for _, name in rows]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == max(r["size"] for r in data["rects"])
    assert f"The {len(rows)} largest of {len(data['rects'])} tensors" in page
    assert len({r["color"] for r in data["rects"]}) == len(data["rects"])  # one colour per tensor


def test_chart_ticks_span_the_arena_at_any_size() -> None:
    for arena, unit in ((40, "bytes"), (49152, "KiB"), (3 * 2**20 + 5, "KiB")):
        chart = memory_chart([Lifetime("t", arena, 0, 0, 0)], 1, arena)
        assert chart["y_label"] == f"arena offset ({unit})"
        positions = [t["pos"] for t in chart["y_ticks"]]
        assert positions[0] == 0 and positions == sorted(positions)
        assert 3 <= len(positions) <= 10 and positions[-1] <= chart["chart_height"]
        assert chart["chart_height"] - positions[-1] < 14  # the bottom (the arena's end) is labelled
    assert [t["label"] for t in memory_chart([], 1, 0)["y_ticks"]] == ["0"]  # nothing in the arena: no scale
    steps = [t["label"] for t in memory_chart([], 250, 1024)["x_ticks"]]
    assert steps[0] == "0" and len(steps) <= 16 and all(int(b) - int(a) == 20 for a, b in zip(steps, steps[1:]))


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("chromium not installed")
    out = tmp_path / "report.html"
    assert aot("report", str(EXAMPLE), "-o", str(out)).returncode == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="tensor"') == len(build_report(EXAMPLE)["rects"])
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1100,900", out.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 5000  # a real picture, not an empty page
