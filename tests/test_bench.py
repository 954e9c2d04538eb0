"""`aot bench`: ours against onnxruntime in one process, the figures a user compares (no timing
is asserted: the machines are shared; only that the report is complete and self-consistent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import aot

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"


def test_bench_json_reports_both_sides_the_ratio_and_the_share_of_peak() -> None:
    result = aot("bench", str(EXAMPLE), "--rounds", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("ours_ms", "onnxruntime_ms", "ratio", "ours_gflops", "peak_gflops", "ours_percent_of_peak",
                "arena_bytes", "onnxruntime_peak_rss_delta_bytes", "threads"):
        assert key in report, key
    assert report["ours_ms"] > 0 and report["onnxruntime_ms"] > 0
    assert report["ratio"] == pytest.approx(report["ours_ms"] / report["onnxruntime_ms"])
    assert report["peak_gflops"] > 1
    assert report["ours_percent_of_peak"] == pytest.approx(100 * report["ours_gflops"] / report["peak_gflops"])


def test_bench_text_names_the_peak_and_rejects_bad_options() -> None:
    result = aot("bench", str(EXAMPLE), "--rounds", "1")
    assert result.returncode == 0, result.stderr
    assert "ratio aot/onnxruntime" in result.stdout and "measured fp32 peak" in result.stdout
    bad = aot("bench", str(EXAMPLE), "--rounds", "0")
    assert bad.returncode == 2 and "--rounds" in bad.stderr
