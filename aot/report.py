"""`aot report`: one self-contained HTML page (no network, no scripts from elsewhere) showing the
memory plan as a chart, the fused kernels with the ONNX nodes each implements and their MACs,
and the size breakdown."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from aot.analysis import node_macs
from aot.compiler import load
from aot.frontend.input_values import InputValue
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan
from aot.planner.liveness import arena_intervals
from aot.resources import resource_dir
from aot.version import __version__

CHART_WIDTH, CHART_HEIGHT = 960, 420


def _color(i: int) -> str:
    return f"hsl({(i * 47) % 360}, 60%, 62%)"


def build_report(model_path: str | os.PathLike[str],
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                 input_values: Mapping[str, InputValue] | None = None) -> dict[str, Any]:
    graph, source = load(model_path, input_shapes, input_values)
    macs_by_node = {n.name: node_macs(n) for n in graph.nodes}
    source_nodes = graph.source_node_count
    run_passes(graph)
    macs_by_node.update({n.name: node_macs(n) for n in graph.nodes})
    planned = lower_and_plan(graph, PipelineOptions())  # as `aot compile` without options
    program, memory = planned.program, planned.memory
    intervals = arena_intervals(program)
    steps = max(len(program.kernels), 1)
    arena = max(memory.arena_bytes, 1)
    rects = []
    for i, iv in enumerate(sorted(intervals, key=lambda v: (memory.offsets[v.key], v.start))):
        x = iv.start / steps * CHART_WIDTH
        w = (iv.end - iv.start + 1) / steps * CHART_WIDTH
        y = memory.offsets[iv.key] / arena * CHART_HEIGHT
        h = max(iv.size / arena * CHART_HEIGHT, 1.0)
        rects.append({"x": round(x, 2), "y": round(y, 2), "w": round(w, 2), "h": round(h, 2), "color": _color(i),
                      "title": f"{iv.key}: {iv.size} bytes at offset {memory.offsets[iv.key]}, "
                               f"kernels {iv.start}-{iv.end}"})
    kernels = []
    for i, k in enumerate(program.kernels):
        kernels.append({"index": i, "op": k.op, "sources": k.sources,
                        "macs": sum(macs_by_node.get(s, 0) for s in k.sources)})
    weights = sum(t.nbytes for t in program.weights)
    return {
        "model": Path(source).name, "version": __version__, "rects": rects, "kernels": kernels,
        "chart_width": CHART_WIDTH, "chart_height": CHART_HEIGHT,
        "arena_bytes": memory.arena_bytes, "lower_bound": memory.lower_bound_bytes,
        "unshared": memory.unshared_bytes, "weights_bytes": weights, "onnx_nodes": source_nodes,
        "total_macs": sum(k["macs"] for k in kernels),
        "inputs": [(t.name, t.dtype.name, list(t.shape)) for t in graph.inputs],
        "outputs": [(t.name, t.dtype.name, list(t.shape)) for t in graph.outputs],
    }


def render_report(data: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report/report.html.j2").render(data)
