"""--max-arena measurements (aot/planner/budget.py). Needs make and a C compiler; one thread.

    python -m benchmarks.max_arena factors MODEL.onnx ...   # time per MAC of each convolution form
    python -m benchmarks.max_arena table MODEL.onnx ... [--light]

factors: every distinct convolution of the models (geometry and fused Relu), alone in a model of
its own with random weights (an int8 one, QLinearConv or ConvInteger, with its own weights and
quantisation), compiled for this machine in each of its forms (aot/ops/conv_forms.py) and timed;
per form, the median over the convolutions of its time relative to the tiled form without
Winograd (for int8: the fastest form) on the same convolution, split by depthwise or not:
budget.FORM_FACTORS.

table: per model, the default arena, the smallest arena --max-arena reaches (the error names it)
and the time at that budget against the default plan's (interleaved rounds, medians).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import aot.compiler
from aot.commands.verify import random_inputs
from aot.compiler import compile as compile_model
from aot.compiler import load
from aot.errors import AotError
from aot.host.run import HostModel
from aot.ir.graph import Node
from aot.ops.conv.lowering import conv_key
from aot.ops.conv_forms import FORMED_OPS, factor_key, forms_of
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan
from aot.planner.budget import layer_class
from aot.targets import host_preset_name, resolve_targets
from benchmarks.run import light_models


def _median_ms(run: object, seconds: float = 0.3) -> float:
    calls = []
    start = time.perf_counter()
    for _ in range(5):
        run()  # type: ignore[operator]
    while time.perf_counter() - start < seconds or len(calls) < 20:
        t0 = time.perf_counter_ns()
        run()  # type: ignore[operator]
        calls.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(calls)


def _conv_model(node: Node) -> onnx.ModelProto:
    """The Conv `node` (after the graph passes) alone, with a Relu and random weights."""
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None and node.outputs[0] is not None
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal(w.shape) * 0.1).astype(np.float32)
    bias = rng.standard_normal(w.shape[0]).astype(np.float32)
    attrs = {k: node.attr(k) for k in ("strides", "pads", "dilations", "group", "kernel_shape", "auto_pad")
             if node.attr(k) is not None}
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph([conv, relu], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _integer_conv_model(node: Node) -> onnx.ModelProto:
    """The integer convolution `node` (after the graph passes) alone, with its own constants."""
    x, y = node.inputs[0], node.outputs[0]
    assert x is not None and y is not None
    names = [t.name if t is not None else "" for t in node.inputs]
    shared = {t.name: t for t in node.inputs[1:] if t is not None and t.is_constant}  # (a scale may repeat)
    constants = [numpy_helper.from_array(np.asarray(t.data), name) for name, t in shared.items()]
    attrs = {k: node.attr(k) for k in ("strides", "pads", "dilations", "group", "kernel_shape", "auto_pad")
             if node.attr(k) is not None}
    conv = helper.make_node(node.op_type, names, [y.name], **attrs)
    graph = helper.make_graph([conv], "conv", [helper.make_tensor_value_info(
        x.name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)], [helper.make_tensor_value_info(
            y.name, helper.np_dtype_to_tensor_dtype(y.dtype), None)], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _forced(model: onnx.ModelProto, form: object) -> HostModel:
    """`model` (one convolution) compiled for this machine with it in `form`."""
    original = aot.compiler.lower_and_plan

    def with_form(graph, options, progress=None, model=None):  # type: ignore[no-untyped-def]
        conv = next(n for n in graph.nodes if n.op_type in FORMED_OPS)
        return original(graph, replace(options, overrides=((conv_key(conv), form),)), progress, model)

    aot.compiler.lower_and_plan = with_form  # a benchmark's hook: the Python API has no per-node forms
    try:
        package = compile_model(model, target=host_preset_name())
    finally:
        aot.compiler.lower_and_plan = original
    return HostModel.build(package, opt="-O3 -march=native")


def factors(models: list[Path]) -> None:
    tiles = PipelineOptions(tuple(resolve_targets(host_preset_name()))).tiles
    seen: set[tuple] = set()
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in models:
        graph, _ = load(path)
        run_passes(graph)
        for node in [n for n in graph.nodes if n.op_type in FORMED_OPS]:
            model = _conv_model(node) if node.op_type == "Conv" else _integer_conv_model(node)
            key = (node.op_type, tuple(node.inputs[0].shape), tuple(tuple(i.dims) for i in model.graph.initializer),
                   str(model.graph.node[0].attribute))
            if key in seen:
                continue
            seen.add(key)
            layer = layer_class(node)
            forms = forms_of(node, tiles, "auto")
            times = {}
            for form in forms:
                built = _forced(model, form)
                times[form] = _median_ms(built.runner_for(random_inputs(built.package)))
                built.close()
            # The base: the default form without Winograd (the first register-tile form listed).
            base = next((t for f, t in times.items() if factor_key(f) == "tiled"), None)
            if base is None:
                continue
            row = ", ".join(f"{factor_key(f)} {t / base:.2f}" for f, t in times.items())
            geometry = f"s{list(node.attr('strides', []))} p{list(node.attr('pads', []))} g{node.attr('group', 1)}"
            print(f"{path.stem} {node.op_type} x{list(node.inputs[0].shape)} {geometry}"
                  f" base {base * 1000:.1f} us: {row}", flush=True)
            for f, t in list(times.items())[1:]:  # the default itself is the base or Winograd
                ratios[factor_key(f), layer].append(t / base)
            if factor_key(forms[0]) == "winograd":
                ratios["winograd", layer].append(times[forms[0]] / base)
    print("\nFORM_FACTORS (median, count):")
    for (label, layer), values in sorted(ratios.items()):
        print(f"    ({label!r}, {layer!r}): {statistics.median(values):.2f},  # {len(values)} convolutions, "
              f"{min(values):.2f}-{max(values):.2f}")


def _smallest(path: Path, target: str) -> tuple[int, int, str]:
    """(default arena, smallest arena --max-arena reaches, where its peak is)."""
    graph, _ = load(path)
    run_passes(graph)
    options = PipelineOptions(tuple(resolve_targets(target)))
    default = lower_and_plan(graph, options).memory.arena_bytes
    try:
        smallest = lower_and_plan(graph, replace(options, max_arena=1), model=path.name).memory.arena_bytes
        return default, smallest, ""
    except AotError as e:
        text = str(e)
        reached = int(text.split(" is ")[1].split(" bytes")[0])
        return default, reached, text.split("(peak at ")[1].rstrip(")")


def _time_ratio(path: Path, budget: int, rounds: int = 7) -> float:
    """Median time of the package at `budget` over the default package's, in interleaved rounds."""
    target = host_preset_name()
    built = [HostModel.build(compile_model(path, target=target, max_arena=b), opt="-O3 -march=native")
             for b in (None, budget)]
    runs = [b.runner_for(random_inputs(b.package)) for b in built]
    samples: list[list[float]] = [[], []]
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            samples[i].append(_median_ms(runs[i], 0.15))
    for b in built:
        b.close()
    return statistics.median(samples[1]) / statistics.median(samples[0])


def table(models: list[Path]) -> None:
    target = host_preset_name()
    print(f"target {target}, one thread\n")
    print("| model | default arena | smallest reachable | ratio | time at smallest / default | peak then at |")
    print("|---|---|---|---|---|---|")
    for path in models:
        default, smallest, peak = _smallest(path, target)
        ratio = _time_ratio(path, smallest) if smallest < default else 1.0
        print(f"| {path.stem} | {default} | {smallest} | {smallest / default:.3f} | {ratio:.3f} | {peak} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["factors", "table"])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--light", action="store_true", help="add the onnx package's light ResNet-50")
    args = parser.parse_args(argv)
    models = list(args.models) + ([m for m in light_models() if "resnet50" in m.name] if args.light else [])
    (factors if args.what == "factors" else table)(models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
