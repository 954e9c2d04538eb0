"""Builds examples/tiny_encoder.onnx: a two-layer transformer encoder over 32 features per token,
written as torch exports a BERT-style model (LayerNormalization, Q/K/V MatMuls, head splits by
Reshape and Transpose, MatMul(Q, K^T) / sqrt(head), an additive padding mask, Softmax, MatMul with
V, Erf GELU). Its number of tokens is free (`--dim tokens=64`), and a float `mask` input [1, tokens]
holds 0 for a token and -10000 for padding. Weights are seeded random, so the file is
reproducible; it is checked in for docs/transformers.md."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH, HEADS, LAYERS = 32, 4, 2


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(self, x: str, rows: int, cols: int, name: str) -> str:
        w = (self.rng.standard_normal((rows, cols)) / math.sqrt(rows)).astype(np.float32)
        b = (0.02 * self.rng.standard_normal(cols)).astype(np.float32)
        product = self.node("MatMul", [x, self.const(f"{name}.weight", w)], f"{name}/MatMul")
        return self.node("Add", [product, self.const(f"{name}.bias", b)], f"{name}/Add")

    def layer_norm(self, x: str, name: str) -> str:
        gamma = self.const(f"{name}.weight", np.ones(WIDTH, np.float32))
        beta = self.const(f"{name}.bias", np.zeros(WIDTH, np.float32))
        return self.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-12)


def _attention(g: _Builder, x: str, mask: str, name: str) -> str:
    head = WIDTH // HEADS
    split = g.const(f"{name}.heads", np.array([1, -1, HEADS, head], np.int64))
    parts = {}
    for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        heads = g.node("Reshape", [g.linear(x, WIDTH, WIDTH, f"{name}.{part}"), split], f"{name}.{part}/Reshape")
        parts[part] = g.node("Transpose", [heads], f"{name}.{part}/Transpose", perm=perm)
    scores = g.node("MatMul", [parts["query"], parts["key"]], f"{name}/scores")
    scaled = g.node("Div", [scores, g.const(f"{name}.sqrt_head", np.array(math.sqrt(head), np.float32))],
                    f"{name}/scale")
    probabilities = g.node("Softmax", [g.node("Add", [scaled, mask], f"{name}/mask")], f"{name}/Softmax", axis=-1)
    context = g.node("MatMul", [probabilities, parts["value"]], f"{name}/context")
    merged = g.node("Transpose", [context], f"{name}/merge", perm=[0, 2, 1, 3])
    flat = g.node("Reshape", [merged, g.const(f"{name}.flat", np.array([1, -1, WIDTH], np.int64))], f"{name}/flat")
    return g.linear(flat, WIDTH, WIDTH, f"{name}.output")


def _gelu(g: _Builder, x: str, name: str) -> str:
    erf = g.node("Erf", [g.node("Div", [x, g.const(f"{name}.sqrt2", np.array(math.sqrt(2), np.float32))],
                                f"{name}/Div")], f"{name}/Erf")
    one = g.node("Add", [erf, g.const(f"{name}.one", np.array(1.0, np.float32))], f"{name}/Add")
    return g.node("Mul", [g.node("Mul", [x, one], f"{name}/Mul"), g.const(f"{name}.half", np.array(0.5, np.float32))],
                  f"{name}/Mul_1")


def build(seed: int = 5) -> onnx.ModelProto:
    g = _Builder(seed)
    mask = g.node("Unsqueeze", ["mask", g.const("mask.axes", np.array([1, 2], np.int64))], "mask/Unsqueeze")
    hidden = "tokens"
    for layer in range(LAYERS):
        name = f"layer{layer}"
        hidden = g.layer_norm(g.node("Add", [hidden, _attention(g, hidden, mask, f"{name}.attention")],
                                     f"{name}/residual1"), f"{name}.norm1")
        up = _gelu(g, g.linear(hidden, WIDTH, 4 * WIDTH, f"{name}.up"), f"{name}.gelu")
        hidden = g.layer_norm(g.node("Add", [hidden, g.linear(up, 4 * WIDTH, WIDTH, f"{name}.down")],
                                     f"{name}/residual2"), f"{name}.norm2")
    g.nodes[-1].output[0] = "encoded"
    graph = helper.make_graph(
        g.nodes, "tiny_encoder",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, "tokens", WIDTH]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, "tokens"])],
        [helper.make_tensor_value_info("encoded", TensorProto.FLOAT, [1, "tokens", WIDTH])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="aot-examples")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tiny_encoder.onnx")
    onnx.save(build(), str(out))
    print(f"wrote {out}")
