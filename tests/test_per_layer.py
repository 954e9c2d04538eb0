"""`aot verify --per-layer` names the node that goes wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aot.commands.per_layer import compare_layers
from aot.host.run import HostModel
from aot.ops import elementwise
from aot.ops.elementwise import FORMS, Form

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"


def test_every_layer_of_the_example_matches() -> None:
    result = subprocess.run([sys.executable, "-m", "aot", "verify", str(EXAMPLE), "--per-layer", "--json"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["first_failing_node"] is None
    assert [layer["node"] for layer in report["layers"]][:3] == ["stem/conv", "stem/bn", "stem/relu6"]
    assert len(report["layers"]) == 25  # one per ONNX node of the example


@pytest.mark.parametrize("culprit", ["block0.pw/relu6", "expand/relu6"])
def test_an_injected_error_is_pinned_on_its_node(monkeypatch: pytest.MonkeyPatch, culprit: str) -> None:
    original = FORMS["Clip"]

    def broken(node, ctx):  # noqa: ANN001, ANN202 - a Clip that is off by 0.01 on one node only
        form = original(node, ctx)
        if node.name != culprit:
            return form
        return Form(form.inputs, lambda v: form.fn(v) + elementwise.const(0.01, v[0].dtype))

    monkeypatch.setitem(FORMS, "Clip", broken)
    results, first = compare_layers(EXAMPLE, None, HostModel.build)
    assert first is not None and first.node == culprit and first.op == "Clip"
    index = [r.node for r in results].index(culprit)
    assert all(r.comparison.passed for r in results[:index])
