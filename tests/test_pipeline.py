"""One pipeline (aot/pipeline.py): `aot report`, `aot inspect` and the package's manifest show the
same memory plan and kernel order, and lowering and planning leave what they are given as it was."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from aot.compiler import compile as compile_model
from aot.compiler import load
from aot.ir.graph import Graph
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower, lower_and_plan, plan
from aot.targets import host_preset_name, load_target, resolve_targets
from tests.test_cli import EXAMPLE, REPO, aot

SHARED_MODELS = REPO.parent / "shared" / "models"  # outside the repository: a user's clone lacks it
MODELS = sorted((REPO / "examples").glob("*.onnx")) + (
    sorted(SHARED_MODELS.glob("*.onnx")) if SHARED_MODELS.is_dir() else [])

Plan = tuple[int, int, list[tuple[str, str]]]  # arena bytes, lower bound, (op, ONNX nodes) per kernel


class _Tables(HTMLParser):
    """The rows of every table in a page, as the text of their cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _report_plan(page: str) -> Plan:
    tables = _Tables()
    tables.feed(page)
    sizes = {row[0]: row[1] for row in tables.rows if len(row) == 2}
    # The kernels table: #, kernel, ONNX nodes, runs in, MACs, share.
    kernel_rows = [row for row in tables.rows if len(row) == 6 and row[0].isdigit()]
    assert [int(row[0]) for row in kernel_rows] == list(range(len(kernel_rows)))
    return (int(sizes["arena (scratch RAM, planned)"]), int(sizes["arena lower bound (largest live set)"]),
            [(row[1], row[2]) for row in kernel_rows])


def _json_plan(data: dict, arena: str, bound: str) -> Plan:
    return data[arena], data[bound], [(k["op"], ", ".join(k["sources"])) for k in data["kernel_order"]]


# Models whose inputs have free dimensions, with the shape the test gives them.
FREE_INPUTS = {"keyword_cnn.onnx": ["--input-shape", "features=1x40x98"], "tiny_encoder.onnx": ["--dim", "tokens=48"]}


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.name)
def test_report_inspect_and_manifest_show_the_same_plan(tmp_path: Path, model: Path) -> None:
    shape = FREE_INPUTS.get(model.name, [])
    inspected = aot("inspect", "--json", str(model), *shape)
    assert inspected.returncode == 0, inspected.stderr
    compiled = aot("compile", str(model), "-o", str(tmp_path / "pkg"), *shape)
    assert compiled.returncode == 0, compiled.stderr
    reported = aot("report", str(model), "-o", str(tmp_path / "report.html"), *shape)
    assert reported.returncode == 0, reported.stderr
    inspection = json.loads(inspected.stdout)
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    plans = {
        "inspect": _json_plan(inspection, "arena_bytes", "arena_lower_bound_bytes"),
        "manifest": _json_plan(manifest, "arena_bytes", "arena_lower_bound_bytes"),
        "report": _report_plan((tmp_path / "report.html").read_text()),
    }
    assert plans["inspect"] == plans["manifest"] == plans["report"], plans
    assert manifest["kernels"] == inspection["kernels"] == len(plans["manifest"][2]) > 0


def _passed_graph(model: Path) -> Graph:
    graph, _ = load(model)
    run_passes(graph)
    return graph


def _graph_state(graph: Graph) -> tuple:
    return (list(graph.tensors), [id(t) for t in graph.tensors.values()], [id(n) for n in graph.nodes],
            [id(t) for t in graph.outputs], [[id(c) for c in t.consumers] for t in graph.tensors.values()])


@pytest.mark.parametrize("model", [m for m in MODELS if m.name in ("tiny_cnn.onnx", "squeezenet1_1_fp32.onnx",
                                                                   "mlperf_tiny_resnet8.onnx")],
                         ids=lambda p: p.name)
def test_one_graph_lowers_for_several_targets_unchanged(model: Path) -> None:
    """Lowering adds no tensor to the graph, so lowering one graph again (for another target's
    register tiles) gives what a freshly read graph gives; planning leaves the program alone."""
    graph = _passed_graph(model)
    before = _graph_state(graph)
    for target in ("x86_64-v4", "cortex-m4f", None):
        options = PipelineOptions(targets=(load_target(target),) if target else ())
        program = lower(graph, options)
        assert _graph_state(graph) == before, target
        kernels = [(k.name, k.op, k.sources) for k in program.kernels]
        planned = plan(program, options)
        assert [(k.name, k.op, k.sources) for k in program.kernels] == kernels and program.in_place == ()
        fresh = lower_and_plan(_passed_graph(model), options)
        assert planned.memory == fresh.memory and planned.schedule == fresh.schedule
        assert [(k.name, k.op, k.sources) for k in planned.kernels] == [(k.name, k.op, k.sources)
                                                                          for k in fresh.kernels]
        assert planned.program.in_place == fresh.program.in_place


def test_no_target_means_any_target_and_the_llvm_backend_builds_for_the_host() -> None:
    assert resolve_targets(None) == resolve_targets([]) == []
    assert resolve_targets(["rpi4", "rpi4"]) == [load_target("rpi4")]  # each target once
    assert PipelineOptions(targets=(load_target("cortex-m4f"),), parallel=True).threads is False  # bare metal
    assert PipelineOptions(targets=(load_target("cortex-m4f"),)).alignment == load_target("cortex-m4f").alignment
    any_target = compile_model(EXAMPLE)
    with_objects = compile_model(EXAMPLE, backend="llvm")
    assert "target" not in any_target.manifest
    host = load_target(host_preset_name())  # the preset that fits this CPU, as the C build's -march=native
    assert (with_objects.manifest["target"], [t["name"] for t in with_objects.manifest["targets"]]) == (
        host.name, [host.name])
    # Its C sources are those of the package for any target: no target was given to either.
    assert with_objects.files["tiny_cnn.c"] == any_target.files["tiny_cnn.c"]
