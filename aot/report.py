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
from aot.precision import node_precision, precision_summary
from aot.report_chart import Lifetime, memory_chart
from aot.resources import resource_dir
from aot.version import __version__


def build_report(model_path: str | os.PathLike[str],
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                 input_values: Mapping[str, InputValue] | None = None) -> dict[str, Any]:
    graph, source = load(model_path, input_shapes, input_values)
    macs_by_node = {n.name: node_macs(n) for n in graph.nodes}
    source_nodes = graph.source_node_count
    run_passes(graph)
    macs_by_node.update({n.name: node_macs(n) for n in graph.nodes})
    precision = {n.name: node_precision(n) for n in graph.nodes}
    summary = precision_summary(graph)
    planned = lower_and_plan(graph, PipelineOptions())  # as `aot compile` without options
    program, memory = planned.program, planned.memory
    lifetimes = [Lifetime(str(iv.key), iv.size, memory.offsets[iv.key], iv.start, iv.end)
                 for iv in arena_intervals(program)]
    chart = memory_chart(lifetimes, len(program.kernels), memory.arena_bytes)
    kernels = []
    for i, k in enumerate(program.kernels):
        kernels.append({"index": i, "op": k.op, "sources": k.sources,
                        "macs": sum(macs_by_node.get(s, 0) for s in k.sources),
                        "runs_in": precision.get(k.sources[0], "") if k.sources else ""})
    weights = sum(t.nbytes for t in program.weights)
    return {
        "model": Path(source).name, "version": __version__, **chart, "kernels": kernels,
        "arena_bytes": memory.arena_bytes, "lower_bound": memory.lower_bound_bytes,
        "unshared": memory.unshared_bytes, "weights_bytes": weights, "onnx_nodes": source_nodes,
        "total_macs": sum(k["macs"] for k in kernels),
        "quantized": summary.quantized,
        "bytes_by_dtype": [(d, summary.tensor_bytes.get(d, 0), summary.weight_bytes.get(d, 0))
                           for d in sorted({*summary.tensor_bytes, *summary.weight_bytes})],
        "inputs": [(t.name, t.dtype.name, list(t.shape)) for t in graph.inputs],
        "outputs": [(t.name, t.dtype.name, list(t.shape)) for t in graph.outputs],
    }


def render_report(data: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report/report.html.j2").render(data)
