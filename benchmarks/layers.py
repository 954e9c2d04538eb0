"""Layer by layer, ours against onnxruntime: each Conv/Gemm/MatMul's time and GFLOP/s on both
sides, in our kernels' order, matched to onnxruntime's nodes by their multiply-accumulates (the
two sides name and fuse nodes differently); "ort+" adds onnxruntime's separate nodes for the ops
our kernel fused (activations and residual Adds that onnxruntime did not fuse). Our times are
perf shares of the package's runner (benchmarks/profile_kernels.sh) times its median run;
onnxruntime's are its profiler's per-node medians (benchmarks/ort_profile.py). Needs perf, make
and a C compiler.

    python -m benchmarks.layers MODEL.onnx [REPEAT] [--target x86_64-v3 [--onnxruntime-isa target]]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from aot.analysis import node_macs, op_macs
from aot.commands.bench import native_target
from aot.compiler import load
from aot.host.cpu_mask import hidden_for, hide_cpu_features
from benchmarks.ort_profile import profiled_events

# onnxruntime's fused and layout-transformed kernels under the op whose multiply-adds they do
# (FusedConv, NchwcConv: Conv), most specific first (ConvTranspose is not a Conv).
_ORT_OPS = ("ConvTranspose", "QLinearConv", "ConvInteger", "Conv", "QLinearMatMul", "MatMulInteger", "MatMul",
            "QGemm", "Gemm")


def _aot_op_type(onnxruntime_op: str) -> str:
    return next((op for op in _ORT_OPS if op in onnxruntime_op), onnxruntime_op)


def onnxruntime_nodes(model: str, runs: int) -> list[tuple[str, str, float, int]]:
    """(name, op, median us, MACs) per node, in execution order. A node that is still the model's
    own (same name and op) is counted from the model's graph: onnxruntime's profiler leaves out
    the shapes of weights it has prepacked (a ConvTranspose's), so only a node it made (FusedConv
    ...) is counted from the shapes it reports."""
    graph, _ = load(model)
    own = {n.name: (n.op_type, node_macs(n)) for n in graph.nodes}
    events = profiled_events(model, runs)
    times: dict[str, list[float]] = collections.defaultdict(list)
    info: dict[str, tuple[str, int, int]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        times[name].append(e["dur"])
        if name not in info:
            args = e["args"]
            shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
            outs = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
            op = args.get("op_name", "")
            op_type = _aot_op_type(op)
            if own.get(name, ("", 0))[0] == op_type:
                macs = own[name][1]
            else:
                macs = op_macs(op_type, shapes, outs[0] if outs else None)
            info[name] = (op, macs, e["ts"])
    order = sorted(info, key=lambda n: info[n][2])
    return [(n, info[n][0], statistics.median(times[n]), info[n][1]) for n in order]


def our_kernels(model: str, repeat: int, target: str | None = None) -> list[tuple[str, str, float, int]]:
    """(kernel, description, us per run, MACs) for each kernel with samples, in kernel order."""
    script = Path(__file__).with_name("profile_kernels.sh")
    env = {**os.environ, "PROFILE_WIDTH": "1000000"}  # whole descriptions: every ONNX node name
    if target:
        env["PROFILE_TARGET"] = target
    out = subprocess.run(["bash", str(script), model, str(repeat), "100000"], check=True, capture_output=True,
                         text=True, env=env).stdout
    median = float(re.search(r"median_us ([0-9.]+)", out).group(1))
    graph, _ = load(model)
    macs = {n.name: node_macs(n) for n in graph.nodes}
    rows = []
    for line in out.splitlines():
        m = re.match(r"([0-9.]+)% (k\d+): (.*)", line)
        if m:
            names = re.findall(r"'([^']*)'", m.group(3))
            rows.append((m.group(2), m.group(3), float(m.group(1)) * median / 100, sum(macs.get(n, 0) for n in names)))
    return sorted(rows, key=lambda r: int(r[0][1:]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("repeat", type=int, nargs="?", default=200, help="runs of our package's runner")
    parser.add_argument("--target", help="a preset this machine runs, built with its own flags (default: the host's)")
    parser.add_argument("--onnxruntime-isa", default="native", choices=["native", "target"],
                        help="target: onnxruntime's kernels for --target's vector features (aot bench)")
    args = parser.parse_args(argv)
    if args.onnxruntime_isa == "target" and args.target:
        hide_cpu_features(hidden_for(native_target(args.target)))  # before onnxruntime is loaded
    model, repeat = args.model, args.repeat
    if not Path(model).is_file():
        parser.error(f"{model}: no such file")
    theirs = onnxruntime_nodes(model, max(20, repeat // 4))
    ours = our_kernels(model, repeat, args.target)
    unmatched = [t for t in theirs if t[3] > 0]
    separate = {t[0]: t for t in theirs if t[3] == 0}  # nodes without multiply-adds, by ONNX name
    print(f"{'kernel':6s} {'MMAC':>8s} {'ours us':>9s} {'ort us':>9s} {'ratio':>6s} {'ort+ us':>9s} {'ratio+':>6s} "
          f"{'ours GF/s':>9s} {'ort GF/s':>9s}  ours")
    total_ours = total_theirs = 0.0
    for kernel, desc, us, macs in ours:
        if macs == 0:
            continue
        match = next((t for t in unmatched if t[3] == macs), None)
        if match is not None:
            unmatched.remove(match)
        ort_us = match[2] if match else float("nan")
        # onnxruntime's own nodes for the ops this kernel fused (a Sigmoid after a ConvTranspose,
        # which its fusions leave apart): "ort+" is its time for the same ONNX nodes.
        fused = [separate.pop(name) for name in re.findall(r"'([^']*)'", desc) if name in separate]
        ort_plus = ort_us + sum(t[2] for t in fused)
        total_ours += us
        total_theirs += ort_plus if match else 0.0
        print(f"{kernel:6s} {macs / 1e6:8.1f} {us:9.1f} {ort_us:9.1f} {us / ort_us:6.2f} {ort_plus:9.1f} "
              f"{us / ort_plus:6.2f} {2 * macs / us / 1e3:9.1f} {2 * macs / ort_us / 1e3:9.1f}  {desc[:60]}")
    print(f"matched layers: ours {total_ours:.0f} us, onnxruntime {total_theirs:.0f} us (with the nodes ours fused)")
    rest_ours = sum(us for _, _, us, macs in ours if macs == 0)
    rest_theirs = sum(t[2] for t in separate.values())
    print(f"everything else: ours {rest_ours:.0f} us, onnxruntime {rest_theirs:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
