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
from aot.commands.precision import node_precision, precision_summary
from aot.commands.report_chart import Lifetime, memory_chart
from aot.compiler import load
from aot.frontend.input_values import InputValue
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan, lower_and_plan_budgeted
from aot.planner.budget import BudgetedPlan
from aot.planner.liveness import arena_intervals
from aot.progress import Progress
from aot.resources import resource_dir
from aot.version import __version__


def build_report(model_path: str | os.PathLike[str],
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                 input_values: Mapping[str, InputValue] | None = None,
                 max_arena: int | None = None) -> dict[str, Any]:
    graph, source = load(model_path, input_shapes, input_values)
    macs_by_node = {n.name: node_macs(n) for n in graph.nodes}
    source_nodes = graph.source_node_count
    run_passes(graph)
    macs_by_node.update({n.name: node_macs(n) for n in graph.nodes})
    precision = {n.name: node_precision(n) for n in graph.nodes}
    summary = precision_summary(graph)
    budgeted = None
    if max_arena is None:
        planned = lower_and_plan(graph, PipelineOptions())  # as `aot compile` without options
    else:
        budgeted = lower_and_plan_budgeted(graph, PipelineOptions(max_arena=max_arena), model=source)
        planned = budgeted.planned
        macs_by_node.update({n.name: node_macs(n) for n in planned.program.graph.nodes})
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
        "budget": _budget_section(budgeted) if budgeted is not None else None,
    }


def _budget_section(budgeted: BudgetedPlan) -> dict[str, Any]:
    """What the --max-arena plan changed, and the arena bytes each technique saved: the
    convolution forms (today's arena to what the forms alone reach), the bands of rows (from
    there to the plan's), and the in-place pairs (each output over the input that dies there)."""
    plan = budgeted.to_json()
    program = budgeted.planned.program
    pairs = []
    for k, out_param, in_param in program.in_place:
        out, source = program.bindings[k][out_param], program.bindings[k][in_param]
        pairs.append({"kernel": k, "op": program.kernels[k].op, "output": out.name, "input": source.name,
                      "bytes": min(out.nbytes, source.nbytes)})
    arena = budgeted.planned.memory.arena_bytes
    forms_arena = budgeted.forms_arena if budgeted.forms_arena is not None else arena
    return {**plan, "in_place": pairs, "saved_by_forms": budgeted.default_arena - forms_arena,
            "saved_by_bands": forms_arena - arena if budgeted.patches else 0}


def render_report(data: dict[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report/report.html.j2").render(data)


def report_command(model: Path, output: Path, *, input_shape: list[str] | None, dim: list[str] | None,
                   input_value: list[str] | None, max_arena: int | None, force: bool, progress: Progress) -> None:
    """`aot report`: write MODEL's report page to `output` (its folders are created)."""
    from aot.commands.model_options import files_read, model_shapes, refuse_existing, values
    from aot.package.output_dir import check_output_file
    from aot.package.writer import write_file_atomically
    from aot.terminal import printable

    read = files_read(model, output, True, [])
    check_output_file(output, read)  # before the analysis: a refusal costs nothing
    refuse_existing(output, force)
    with progress.step("analysis and rendering"):
        page = render_report(build_report(model, model_shapes(model, input_shape, input_value, dim),
                                          values(input_value), max_arena))
    Path(os.path.abspath(output)).parent.mkdir(parents=True, exist_ok=True)  # as compile makes -o's parents
    write_file_atomically(output, page.encode(), inputs=read)
    print(f"wrote {printable(output)}")
