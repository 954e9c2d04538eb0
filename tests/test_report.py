"""`aot report`: a self-contained HTML page whose memory chart really renders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aot.report import build_report

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
