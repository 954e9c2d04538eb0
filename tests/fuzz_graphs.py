"""Differential fuzzing: random ONNX graphs of supported ops, compiled by aot and compared with
onnxruntime on random inputs.

    python -m tests.fuzz_graphs --count 2000 [--backend llvm] [--seed 0]

Each graph is a random DAG over NCHW float tensors: convolutions (random kernel, stride, padding,
groups), Gemm/MatMul heads, pools, elementwise ops with broadcasting against other tensors or
constants, Concat, Transpose/Reshape, Softmax and reductions, so fusion, views, Concat in place
and the planner all get exercised together. A mismatch prints the seed that reproduces it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from tests.helpers import make_model

UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Softplus", "HardSwish", "LeakyRelu", "Elu", "Softsign"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


class GraphMaker:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, shape: tuple[int, ...], scale: float = 0.5) -> str:
        n = self.name("c")
        self.inits[n] = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return n

    def add(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.name("t")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op.lower() + "_"), **attrs))
        return out


def conv_out(size: int, k: int, s: int, pb: int, pe: int, d: int) -> int:
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


def random_model(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    g = GraphMaker(rng)
    c, h, w = int(rng.integers(1, 9)), int(rng.integers(3, 13)), int(rng.integers(3, 13))
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    # Live tensors with their shapes, to pick operands from.
    live: list[tuple[str, tuple[int, ...]]] = [("x", (1, c, h, w))]
    for _ in range(int(rng.integers(2, 9))):
        name, shape = live[int(rng.integers(len(live)))]
        _, c, h, w = shape
        kind = rng.choice(["conv", "unary", "binary", "pool", "concat", "bn"], p=[0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
        if kind == "conv":
            k, s, d = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
            pads = [int(v) for v in rng.integers(0, k, 4)]
            group = int(rng.choice([g_ for g_ in (1, 2, c) if c % g_ == 0]))
            cout = group * int(rng.integers(1, 4))
            oh = conv_out(h, k, s, pads[0], pads[2], d)
            ow = conv_out(w, k, s, pads[1], pads[3], d)
            if oh < 1 or ow < 1:
                continue
            inputs = [name, g.const((cout, c // group, k, k))]
            if rng.random() < 0.5:
                inputs.append(g.const((cout,)))
            out = g.add("Conv", inputs, kernel_shape=[k, k], strides=[s, s], dilations=[d, d], pads=pads, group=group)
            live.append((out, (1, cout, oh, ow)))
        elif kind == "unary":
            live.append((g.add(str(rng.choice(UNARY)), [name]), shape))
        elif kind == "binary":
            partners = [t for t in live if t[1] == shape]
            if rng.random() < 0.5 and len(partners) > 1:
                other = partners[int(rng.integers(len(partners)))][0]
            else:
                shapes = [(c, 1, 1), (1, 1, w), (1,), shape[1:]]
                other = g.const(tuple(int(v) for v in shapes[int(rng.integers(len(shapes)))]))
            live.append((g.add(str(rng.choice(BINARY)), [name, other]), shape))
        elif kind == "pool" and h >= 2 and w >= 2:
            op = str(rng.choice(["MaxPool", "AveragePool"]))
            out = g.add(op, [name], kernel_shape=[2, 2], strides=[2, 2])
            live.append((out, (1, c, h // 2, w // 2)))
        elif kind == "concat":
            partners = [t for t in live if t[1][2:] == shape[2:]]
            other, other_shape = partners[int(rng.integers(len(partners)))]
            out = g.add("Concat", [name, other], axis=1)
            live.append((out, (1, c + other_shape[1], h, w)))
        elif kind == "bn":
            params = [g.const((c,)), g.const((c,)), g.const((c,)), g.name("v")]
            g.inits[params[3]] = (np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32)
            live.append((g.add("BatchNormalization", [name, *params]), shape))
    # A head: global pool + Gemm + Softmax, or a reduction, on the last tensor.
    name, (_, c, h, w) = live[-1]
    if rng.random() < 0.5:
        pooled = g.add("GlobalAveragePool", [name])
        flat = g.add("Flatten", [pooled])
        logits = g.add("Gemm", [flat, g.const((5, c)), g.const((5,))], transB=1)
        head = g.add("Softmax", [logits], axis=1)
    else:
        head = g.add("ReduceMean", [g.add("Transpose", [name], perm=[0, 2, 3, 1])], keepdims=0, axes=[1, 2])
    outputs = [head]
    if len(live) > 2 and rng.random() < 0.3:
        outputs.append(live[int(rng.integers(1, len(live) - 1))][0])  # an intermediate as a second output
    model = make_model(g.nodes, {"x": x}, outputs, g.inits, opset=17)
    return model, {"x": x}


def check(seed: int, backend: str = "c") -> str | None:
    """None when aot matches onnxruntime on the graph made from `seed`, else what differed."""
    from aot.commands.verify import compare
    from tests.helpers import run_aot, run_onnxruntime

    model, feeds = random_model(seed)
    ours = run_aot(model, feeds, backend=backend)
    reference = run_onnxruntime(model, feeds)
    for name, expected in reference.items():
        result = compare(name, ours[name], expected, 1e-4)
        if not result.passed:
            return f"seed {seed}: output {name}: max abs err {result.max_abs_err:.3g} (scale {result.scale:.3g})"
    return None


def run_seeds(check_seed: Callable[[int, str], str | None], what: str, argv: list[str] | None,
              description: str) -> int:
    """The long-run command of a fuzzer: `check_seed` over --count seeds from --seed, each failure
    printed as it is found, then the tally; exit code 1 when any failed."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="c")
    args = parser.parse_args(argv)
    failures = []
    start = time.time()
    for seed in range(args.seed, args.seed + args.count):
        problem = check_seed(seed, args.backend)
        if problem:
            failures.append(problem)
            print(problem, flush=True)
    print(f"{args.count - len(failures)} passed, {len(failures)} failed ({args.count} {what}, backend "
          f"{args.backend}, {time.time() - start:.0f} s)")
    return 1 if failures else 0


def _checked(seed: int, backend: str) -> str | None:
    try:
        return check(seed, backend)
    except Exception as e:  # a crash in aot is a finding too
        return f"seed {seed}: {type(e).__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    return run_seeds(_checked, "random graphs", argv, __doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
