"""`aot inspect`: what is in a model and what aot makes of it, without failing on gaps."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aot.analysis import model_stats
from aot.frontend.importer import load_graph


def inspect_model(path: str | os.PathLike[str],
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    graph = load_graph(path, input_shapes, allow_unsupported=True)
    stats = model_stats(graph)
    report: dict[str, Any] = {
        "model": str(path),
        "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name} for t in graph.inputs],
        "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name} for t in graph.outputs],
        "onnx_nodes": graph.source_node_count,
        "nodes_after_folding": len(graph.nodes),
        "op_counts": stats.op_counts,
        "unsupported": [{"op": op, "nodes": names} for op, names in sorted(stats.unsupported.items())],
        "supported": not stats.unsupported,
        "unknown_shapes": list(graph.unknown_shapes),
        "parameters": stats.parameters,
        "weights_bytes": stats.weights_bytes,
        "macs": stats.macs,
        "layers": [{"node": n, "op": op, "macs": m} for n, op, m in stats.per_node_macs if m],
    }
    if not stats.unsupported:
        from aot.compiler import plan
        from aot.lowering.program import lower_graph
        from aot.passes.pipeline import run_passes

        run_passes(graph)
        program = lower_graph(graph)
        memory = plan(program)
        report.update({
            "kernels": len(program.kernels),
            "arena_bytes": memory.arena_bytes,
            "arena_lower_bound_bytes": memory.lower_bound_bytes,
            "arena_unshared_bytes": memory.unshared_bytes,
            "arena_alignment": memory.alignment,
            "schedule": program.schedule,
            "in_place_kernels": [program.kernels[k].sources for k, _, _ in program.in_place],
            "peak_live": {"kernel": memory.peak_step,
                          "kernel_sources": program.kernels[memory.peak_step].sources if program.kernels else [],
                          "tensors": list(memory.peak_keys)},
        })
    return report


def _count(n: int) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def render_text(r: dict[str, Any]) -> str:
    lines = [f"model {Path(r['model']).name}: {r['onnx_nodes']} ONNX nodes, {r['nodes_after_folding']} after folding"]
    for kind in ("inputs", "outputs"):
        for t in r[kind]:
            lines.append(f"  {kind[:-1]:6} {t['name']}: {t['dtype']}{t['shape']}")
    lines.append(f"  parameters {_count(r['parameters'])} ({r['weights_bytes']} bytes of weights), "
                 f"MACs {_count(r['macs'])}")
    lines.append("  ops:")
    unsupported = {u["op"] for u in r["unsupported"]}
    for op, n in r["op_counts"].items():
        mark = "  UNSUPPORTED" if op in unsupported else ""
        lines.append(f"    {op:24} {n:5}{mark}")
    if r["unsupported"]:
        lines.append(f"  {len(r['unsupported'])} unsupported op type(s):")
        for u in r["unsupported"]:
            lines.append(f"    {u['op']}: {', '.join(repr(n) for n in u['nodes'])}")
    else:
        lines.append(f"  all ops supported: {r['kernels']} kernels; arena {r['arena_bytes']} bytes "
                     f"(lower bound {r['arena_lower_bound_bytes']}, unshared {r['arena_unshared_bytes']}); "
                     f"kernel order: {r['schedule']}, {len(r['in_place_kernels'])} kernel(s) writing in place")
        peak = r["peak_live"]
        if peak["tensors"]:
            lines.append(f"  largest live set at kernel {peak['kernel']} ({', '.join(peak['kernel_sources'])}): "
                         + ", ".join(peak["tensors"]))
    return "\n".join(lines)
