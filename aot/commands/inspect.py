"""`aot inspect`: what is in a model and what aot makes of it, without failing on gaps."""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from aot.analysis import model_stats
from aot.commands.precision import precision_summary
from aot.frontend.importer import load_graph
from aot.frontend.input_values import InputValue
from aot.ir.graph import Graph, Tensor
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower, lower_and_plan, lower_and_plan_budgeted, plan
from aot.planner.arena import PlannedProgram
from aot.planner.weights import layout_weights
from aot.progress import SILENT, Progress
from aot.targets import list_targets
from aot.terminal import printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def inspect_model(path: str | os.PathLike[str],
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                  progress: Progress | None = None,
                  input_values: Mapping[str, InputValue] | None = None,
                  max_arena: int | None = None) -> dict[str, Any]:
    """The inspection of the model at `path` as a JSON-able dict. `max_arena`: the memory plan is
    the one `aot compile --max-arena` makes (the "max_arena" entry says what it changed); the
    footprint per target stays that of the plans without a budget."""
    progress = progress or SILENT
    progress.start("import")
    graph = load_graph(path, input_shapes, allow_unsupported=True, input_values=input_values)
    stats = model_stats(graph)
    report: dict[str, Any] = {
        "model": str(path),
        "inputs": [_port(graph, t) for t in graph.inputs],
        "outputs": [_port(graph, t) for t in graph.outputs],
        "onnx_nodes": graph.source_node_count,
        "nodes_after_folding": len(graph.nodes),
        "op_counts": stats.op_counts,
        "unsupported": [{"op": op, "nodes": names} for op, names in sorted(stats.unsupported.items())],
        "supported": not stats.unsupported,
        "unknown_shapes": list(graph.unknown_shapes),
        "parameters": stats.parameters,
        "weights_bytes": stats.weights_bytes,
        "model_weights_bytes": stats.weights_bytes,
        "macs": stats.macs,
        "layers": [{"node": n, "op": op, "macs": m} for n, op, m in stats.per_node_macs if m],
    }
    if not stats.unsupported:
        progress.start("graph passes")
        run_passes(graph)
        report["precision"] = precision_summary(graph).to_json()
        if max_arena is None:
            planned = lower_and_plan(graph, PipelineOptions(), progress)  # as `aot compile` without options
            report.update(_plan_entries(planned))
        else:
            budgeted = lower_and_plan_budgeted(graph, PipelineOptions(max_arena=max_arena), progress, str(path))
            planned = budgeted.default  # the footprint's plans are those without a budget
            report.update(_plan_entries(budgeted.planned))
            report["max_arena"] = budgeted.to_json()
        progress.start("footprint per target")
        report["footprint"] = footprint_per_target(graph, planned)
    progress.finish()
    return report


def _port(graph: Graph, t: Tensor) -> dict[str, Any]:
    """An input or output as inspect shows it; after an unsupported op, its type as ONNX declares or
    infers it ("?" for what is not known; "shape": null for an unknown rank)."""
    if t.name in graph.declared_types:
        dtype, dims = graph.declared_types[t.name]
        return {"name": t.name, "shape": dims, "dtype": dtype}
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name}


def _plan_entries(planned: PlannedProgram) -> dict[str, Any]:
    """The memory plan and the kernels in the order they run, as `aot inspect --json` shows them."""
    memory, kernels = planned.memory, planned.kernels
    return {
        "kernels": len(kernels),
        "kernel_order": [{"op": k.op, "sources": k.sources} for k in kernels],
        "arena_bytes": memory.arena_bytes,
        "arena_lower_bound_bytes": memory.lower_bound_bytes,
        "arena_unshared_bytes": memory.unshared_bytes,
        "arena_alignment": memory.alignment,
        "package_weights_bytes": layout_weights(planned.program.weights)[1],
        "schedule": planned.schedule,
        "in_place_kernels": [kernels[k].sources for k, _, _ in planned.program.in_place],
        "peak_live": {"kernel": memory.peak_step,
                      "kernel_sources": kernels[memory.peak_step].sources if kernels else [],
                      "tensors": list(memory.peak_keys)},
    }


def footprint_per_target(graph: Graph, planned: PlannedProgram) -> list[dict[str, Any]]:
    """An estimate of each target preset's flash and RAM for the model, from `graph` (after the
    graph passes) lowered and planned as `aot compile --target` would for that target: its
    register tiles decide how the weights are packed and which convolutions run as Winograd,
    whose weights and scratch are larger (`planned` is the plan for the default options, reused
    where a target's tiles and alignment are the same). Flash = the weights struct (64-byte
    aligned members; the model code is not counted), RAM = the arena + the caller's input and
    output buffers (the stack is not counted)."""
    io_bytes = sum(t.nbytes for t in (*graph.inputs, *graph.outputs))
    default = PipelineOptions()
    programs = {default.tiles: planned.program}  # the lowering for each register-tile shape
    arenas = {(default.tiles, default.alignment): planned.memory.arena_bytes}
    rows = []
    for target in list_targets():
        options = PipelineOptions(targets=(target,))
        if options.tiles not in programs:
            programs[options.tiles] = lower(graph, options)
        lowered = programs[options.tiles]
        if (options.tiles, options.alignment) not in arenas:
            arenas[options.tiles, options.alignment] = plan(lowered, options).memory.arena_bytes
        arena = arenas[options.tiles, options.alignment]
        _, weights_struct = layout_weights(lowered.weights)
        rows.append({"target": target.name, "alignment": target.alignment, "weights_bytes": weights_struct,
                     "flash_bytes": weights_struct, "arena_bytes": arena, "io_bytes": io_bytes,
                     "ram_bytes": arena + io_bytes})
    return rows


def _count(n: int) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _bytes(n: int) -> str:
    """Exact bytes, with a KiB/MiB reading when large: '53504 (52.2 KiB)'."""
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n} ({n / div:.1f} {unit})"
    return str(n)


def _shape(t: dict[str, Any]) -> str:
    if t["shape"] is None:
        return f"{t['dtype']} (shape unknown)"
    return f"{t['dtype']}[{', '.join(str(d) for d in t['shape'])}]"


class _Page:
    """The console `render` writes to: plain lines and tables whose cells are text, never rich
    markup (node names like '[x]' print as they are, their control characters as escapes: an ESC
    in a tensor name must not reach the terminal)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def say(self, text: str = "") -> None:
        """One line of plain text: no markup, no highlighting, names' control characters escaped."""
        self.console.print(printable(text), markup=False, highlight=False)

    def table(self, title: str, *columns: str, right: tuple[str, ...] = ()) -> Table:
        from rich import box

        t = _plain_table()(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                           pad_edge=False, show_edge=False)
        for c in columns:
            t.add_column(c, justify="right" if c in right else "left", overflow="fold")
        return t

    def show(self, table: Table) -> None:
        self.console.print(table)
        self.console.print()


@functools.cache
def _plain_table() -> type[Table]:
    from rich.table import Table
    from rich.text import Text

    class PlainTable(Table):
        def add_row(self, *cells: Any, **kwargs: Any) -> None:
            super().add_row(*(Text(printable(c)) if isinstance(c, str) else c for c in cells), **kwargs)

    return PlainTable


def render(r: dict[str, Any], console: Console) -> None:
    """The inspection as tables on a rich console (plain text when it is not a terminal)."""
    page = _Page(console)
    kernels = f", {r['kernels']} kernels" if r["supported"] else ""
    page.say(f"model {Path(r['model']).name}: {r['onnx_nodes']} ONNX nodes, "
             f"{r['nodes_after_folding']} after folding{kernels}")
    console.print()
    _render_ops(page, r)
    _render_compute(page, r)
    if r["supported"]:
        _render_precision(page, r)
        _render_memory(page, r)
        _render_budget(page, r)
        _render_footprint(page, r)


def _render_ops(page: _Page, r: dict[str, Any]) -> None:
    from rich.text import Text

    io = page.table("Inputs and outputs", "kind", "name", "type")
    for kind in ("inputs", "outputs"):
        for t in r[kind]:
            io.add_row(kind[:-1], t["name"], _shape(t))
    page.show(io)
    unsupported = {u["op"]: u["nodes"] for u in r["unsupported"]}
    ops = page.table("Ops", "op", "count", "status", right=("count",))
    for op, n in r["op_counts"].items():
        if op in unsupported:
            names = ", ".join(repr(name) for name in unsupported[op])
            ops.add_row(op, str(n), Text.assemble(("UNSUPPORTED", "bold red"), printable(f" ({names})")))
        else:
            ops.add_row(op, str(n), "supported")
    page.show(ops)
    if unsupported:
        page.say(f"{len(unsupported)} unsupported op type(s): aot compile will refuse this model "
                 "(memory plan and footprint need every op supported)")
        page.console.print()


def _render_compute(page: _Page, r: dict[str, Any]) -> None:
    totals = page.table("Size and compute", "quantity", "value", right=("value",))
    totals.add_row("parameters", f"{r['parameters']} ({_count(r['parameters'])})")
    totals.add_row("weights bytes in the ONNX model", _bytes(r["weights_bytes"]))
    totals.add_row("MACs", f"{r['macs']} ({_count(r['macs'])})")
    page.show(totals)
    if r["layers"]:
        layers = page.table("MACs per layer", "node", "op", "MACs", "share", right=("MACs", "share"))
        total = max(r["macs"], 1)
        for layer in r["layers"]:
            layers.add_row(layer["node"], layer["op"], str(layer["macs"]), f"{100 * layer['macs'] / total:.1f}%")
        layers.add_section()
        layers.add_row("total", "", str(r["macs"]), "100.0%")
        page.console.print(layers)
    page.console.print()


def _render_precision(page: _Page, r: dict[str, Any]) -> None:
    """For quantised models: which ops run on int8 and which in float, and the bytes of each."""
    p = r.get("precision")
    if not p or not (p["int8_nodes"] or p["conversion_nodes"]):
        return
    table = page.table("Precision (after the graph passes)", "runs in", "nodes", "ops", right=("nodes",))
    for label, key in (("int8", "int8_nodes"), ("float", "float_nodes")):
        ops = Counter(n["op"] for n in p[key])
        table.add_row(label, str(len(p[key])), ", ".join(f"{op} {k}" for op, k in sorted(ops.items())))
    table.add_row("conversions", str(p["conversion_nodes"]), "QuantizeLinear / DequantizeLinear")
    page.show(table)
    sizes = page.table("Bytes by type", "type", "activations (unshared)", "weights",
                       right=("activations (unshared)", "weights"))
    for dtype in sorted({*p["tensor_bytes_by_dtype"], *p["weight_bytes_by_dtype"]}):
        sizes.add_row(dtype, _bytes(p["tensor_bytes_by_dtype"].get(dtype, 0)),
                      _bytes(p["weight_bytes_by_dtype"].get(dtype, 0)))
    page.show(sizes)


def _render_memory(page: _Page, r: dict[str, Any]) -> None:
    memory = page.table("Memory plan", "quantity", "bytes", right=("bytes",))
    memory.add_row("planned arena", _bytes(r["arena_bytes"]))
    memory.add_row("lower bound (largest live set)", _bytes(r["arena_lower_bound_bytes"]))
    memory.add_row("unshared (every tensor its own buffer)", _bytes(r["arena_unshared_bytes"]))
    memory.add_row("alignment", str(r["arena_alignment"]))
    page.console.print(memory)
    page.say(f"kernel order: {r['schedule']}; {len(r['in_place_kernels'])} kernel(s) write over their input")
    page.console.print()
    peak = r["peak_live"]
    if peak["tensors"]:
        page.say(f"largest live set at kernel {peak['kernel']} ({', '.join(peak['kernel_sources'])}): "
                 + ", ".join(peak["tensors"]))
        page.console.print()


def _render_budget(page: _Page, r: dict[str, Any]) -> None:
    """With --max-arena: the plan chosen for it, against the default plan."""
    b = r.get("max_arena")
    if b is None:
        return
    cost, default = b["estimated_cost_macs"], b["default_estimated_cost_macs"]
    change = f"{100 * (cost - default) / default:+.1f}%" if default else "+0.0%"
    page.say(f"plan within --max-arena {b['max_arena']}: arena {b['arena_bytes']} bytes (default plan "
             f"{b['default_arena_bytes']}); estimated cost {cost} MACs ({_count(cost)}) against {default} "
             f"({_count(default)}) for the default plan, {change} (MACs times a measured factor per form)")
    page.console.print()
    patches = b.get("patches")
    if patches:
        page.say(f"run in {patches['bands']} bands of rows: the {patches['nodes']} nodes from "
                 f"{patches['first_node']!r} to {patches['last_node']!r} ({patches['source']!r} -> "
                 f"{patches['result']!r}, {patches['rows']} rows), each band recomputing its halo: "
                 f"+{patches['recomputed_macs']} MACs ({_count(patches['recomputed_macs'])})")
        page.console.print()
    if not b["changed_forms"]:
        page.say("the default plan fits: no node changes form" if not patches else "no node changes form")
        page.console.print()
        return
    table = page.table("Forms changed to fit the budget", "node", "op", "default form", "form", "scratch saved",
                       "MACs", right=("scratch saved", "MACs"))
    for c in b["changed_forms"]:
        table.add_row(c["node"], c["op"], c["default_form"], c["form"], str(c["scratch_saved_bytes"]), str(c["macs"]))
    page.show(table)


def _render_footprint(page: _Page, r: dict[str, Any]) -> None:
    footprint = page.table("Estimated footprint per target", "target", "alignment", "flash bytes", "RAM bytes",
                           right=("alignment", "flash bytes", "RAM bytes"))
    for row in r.get("footprint", []):
        footprint.add_row(row["target"], str(row["alignment"]), _bytes(row["flash_bytes"]), _bytes(row["ram_bytes"]))
    page.show(footprint)
    page.say("flash: the compiled weights (model code not counted); RAM: the arena planned with the target's "
             "alignment + input and output buffers (stack not counted)")


def render_text(r: dict[str, Any], width: int = 200) -> str:
    """The tables of `render` as plain text: no colour codes, no trailing blanks, wide enough not to
    wrap ordinary names (long ones fold within their column)."""
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    render(r, Console(file=buffer, width=width, color_system=None, force_terminal=False, soft_wrap=False))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).strip("\n")


def show(r: dict[str, Any], file: TextIO | None = None) -> None:
    """Print the inspection: coloured tables on a terminal, plain text otherwise (pipes, files)."""
    out = file or sys.stdout
    if out.isatty():
        from rich.console import Console

        render(r, Console(file=out))
    else:
        print(render_text(r), file=out)


def inspect_command(model: Path, *, input_shape: list[str] | None, dim: list[str] | None,
                    input_value: list[str] | None, max_arena: int | None, as_json: bool, progress: Progress) -> None:
    """`aot inspect`: print MODEL's inspection, as tables or one JSON object."""
    import json

    from aot.commands.model_options import model_shapes, values

    report = inspect_model(model, model_shapes(model, input_shape, input_value, dim), progress=progress,
                           input_values=values(input_value),
                           max_arena=max_arena)
    if as_json:
        print(json.dumps(report, sort_keys=True))
    else:
        show(report)
