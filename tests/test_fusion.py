"""Fusion: elementwise chains become one kernel, Conv/Gemm/MatMul take them as epilogues; every
fused pattern still matches onnxruntime, and each kernel names the ONNX nodes it implements."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

import aot
from aot.compiler import load
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def kernels_of(model) -> list[str]:  # noqa: ANN001
    graph, _ = load(model)
    run_passes(graph)
    return [k.op for k in lower_graph(graph).kernels]


def n(op: str, inputs: list[str], output: str, **attrs: object):
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


def conv_model(tail: list, extra_inputs: dict | None = None, inits: dict | None = None):  # noqa: ANN201
    x = rand(1, 4, 6, 6)
    feeds = {"x": x, **(extra_inputs or {})}
    nodes = [n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), *tail]
    out = tail[-1].output[0] if tail else "c"
    model = make_model(nodes, feeds, [out], {"w": rand(4, 4, 3, 3, seed=1), "b": rand(4, seed=2), **(inits or {})})
    return model, feeds


@pytest.mark.parametrize("name,tail,kernels", [
    ("relu", [n("Relu", ["c"], "y")], ["Conv+Relu"]),
    ("relu6", [n("Clip", ["c", "lo", "hi"], "y")], ["Conv+Clip"]),
    ("hardswish", [n("HardSwish", ["c"], "y")], ["Conv+HardSwish"]),
    ("leaky_sigmoid", [n("LeakyRelu", ["c"], "l", alpha=0.1), n("Sigmoid", ["l"], "y")], ["Conv+LeakyRelu+Sigmoid"]),
    ("residual_relu", [n("Add", ["c", "x"], "a"), n("Relu", ["a"], "y")], ["Conv+Add+Relu"]),
    ("gelu", [n("Gelu", ["c"], "y")], ["Conv+Gelu"]),
    ("tanh_mul", [n("Tanh", ["c"], "t"), n("Mul", ["t", "x"], "y")], ["Conv+Tanh+Mul"]),
])
def test_conv_epilogues(name: str, tail: list, kernels: list[str]) -> None:
    inits = {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    opset = 20 if name == "gelu" else 17
    x = rand(1, 4, 6, 6)
    nodes = [n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), *tail]
    model = make_model(nodes, {"x": x}, ["y"], {"w": rand(4, 4, 3, 3, seed=1), "b": rand(4, seed=2), **inits},
                       opset=opset)
    assert kernels_of(model) == kernels
    assert_matches_onnxruntime(model, {"x": x})


def test_non_constant_batchnorm_fuses_into_conv() -> None:
    x = rand(1, 3, 5, 5)
    feeds = {"x": x, "s": rand(3, seed=3), "bb": rand(3, seed=4), "m": rand(3, seed=5),
             "v": np.abs(rand(3, seed=6)) + 0.5}
    model = make_model([n("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
                        n("BatchNormalization", ["c", "s", "bb", "m", "v"], "bn"), n("Relu", ["bn"], "y")],
                       feeds, ["y"], {"w": rand(3, 3, 3, 3, seed=1)})
    assert kernels_of(model) == ["Conv+BatchNormalization+Relu"]
    assert_matches_onnxruntime(model, feeds)


def test_gemm_and_batched_matmul_epilogues() -> None:
    a = rand(3, 8)
    model = make_model([n("Gemm", ["a", "w", "b"], "g", transB=1), n("Sigmoid", ["g"], "y")],
                       {"a": a}, ["y"], {"w": rand(5, 8, seed=1), "b": rand(5, seed=2)})
    assert kernels_of(model) == ["Gemm+Sigmoid"]
    assert_matches_onnxruntime(model, {"a": a})
    q = rand(2, 4, 8)
    model = make_model([n("MatMul", ["q", "w"], "m"), n("Add", ["m", "bias"], "s"), n("Gelu", ["s"], "y")],
                       {"q": q}, ["y"], {"w": rand(8, 6, seed=3), "bias": rand(6, seed=4)}, opset=20)
    assert kernels_of(model) == ["MatMul+Add+Gelu"]
    assert_matches_onnxruntime(model, {"q": q})


def test_elementwise_chain_with_broadcast_side_inputs_is_one_kernel() -> None:
    x, s = rand(2, 3, 4), rand(3, 1, seed=1)
    model = make_model([n("Mul", ["x", "s"], "a"), n("Add", ["a", "k"], "b"), n("Exp", ["b"], "c"),
                        n("Neg", ["c"], "d"), n("Max", ["d", "x"], "y")],
                       {"x": x, "s": s}, ["y"], {"k": rand(4, seed=2)})
    assert kernels_of(model) == ["Mul+Add+Exp+Neg+Max"]
    assert_matches_onnxruntime(model, {"x": x, "s": s})


@pytest.mark.parametrize("k_shape, inner", [((3, 1, 1), 35), ((7,), 7)], ids=["per_channel", "per_column"])
def test_a_broadcast_kernel_loops_over_the_dimensions_every_operand_walks_as_one(k_shape: tuple, inner: int) -> None:
    """A per-channel side input leaves each plane one run (a loop of 5 x 7), a per-column one does
    not: the loops touch the same elements as over the whole shape."""
    x, s = rand(2, 3, 5, 7), rand(3, 1, 1, seed=1)
    model = make_model([n("Mul", ["x", "s"], "a"), n("Add", ["a", "k"], "b"), n("Relu", ["b"], "y")],
                       {"x": x, "s": s}, ["y"], {"k": rand(*k_shape, seed=2)})
    source = aot.compile(model).files["test_graph.c"].decode()
    loops = [int(extent) for extent in re.findall(r"< (\d+); \+\+i\d", source)]
    assert loops == [2, 3, inner] if inner == 35 else loops == [2, 3, 5, 7]
    assert_matches_onnxruntime(model, {"x": x, "s": s})


def test_two_readers_that_join_again_fuse_and_a_graph_output_ends_the_epilogue() -> None:
    x = rand(2, 5)
    model = make_model([n("Relu", ["x"], "r"), n("Sigmoid", ["r"], "s"), n("Tanh", ["r"], "t"),
                        n("Add", ["s", "t"], "y"), n("Exp", ["y"], "z")], {"x": x}, ["y", "z"])
    # r's two readers meet again in Add: one diamond-shaped epilogue; y is returned, so it is stored.
    assert kernels_of(model) == ["Relu+Sigmoid+Tanh+Add", "Exp"]
    assert_matches_onnxruntime(model, {"x": x})


def test_chain_stops_at_a_tensor_whose_readers_never_join() -> None:
    x = rand(2, 5)
    model = make_model([n("Relu", ["x"], "r"), n("Sigmoid", ["r"], "s"), n("Tanh", ["r"], "t"),
                        n("Add", ["s", "x"], "y"), n("Neg", ["t"], "z")], {"x": x}, ["y", "z"])
    assert kernels_of(model) == ["Relu", "Sigmoid+Add", "Tanh+Neg"]
    assert_matches_onnxruntime(model, {"x": x})


def test_fused_kernel_runs_after_its_side_inputs_are_ready() -> None:
    """Add(conv_a, conv_b): the chain joins conv_a, whose kernel must run after conv_b."""
    x = rand(1, 2, 5, 5)
    model = make_model([n("Conv", ["x", "w1"], "a"), n("Conv", ["x", "w2"], "b", pads=[1, 1, 1, 1]),
                        n("Add", ["a", "b"], "s"), n("Relu", ["s"], "y")], {"x": x}, ["y"],
                       {"w1": rand(3, 2, 1, 1, seed=1), "w2": rand(3, 2, 3, 3, seed=2)})
    assert kernels_of(model) == ["Conv", "Conv+Add+Relu"]
    assert_matches_onnxruntime(model, {"x": x})


def test_generated_c_names_every_fused_onnx_node() -> None:
    model, feeds = conv_model([n("Add", ["c", "x"], "a"), n("Relu", ["a"], "y")])
    source = aot.compile(model, name="fused").files["fused.c"].decode()
    assert "/* Conv+Add+Relu <- ONNX 'conv_c', 'add_a', 'relu_y' */" in source


def test_fusion_reduces_kernels_and_memory_on_the_example() -> None:
    from pathlib import Path

    package = aot.compile(Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx")
    m = package.manifest
    assert m["onnx_nodes"] == 25 and m["kernels"] <= 10


def test_cast_to_another_dtype_ends_the_chain() -> None:
    """Kernels may accumulate in their output buffer before the epilogue: its dtype must stay."""
    a = rand(2, 3, 4)
    model = make_model([n("MatMul", ["a", "w"], "m"), n("Relu", ["m"], "r"), n("Cast", ["r"], "c", to=11),
                        n("Neg", ["c"], "y")], {"a": a}, ["y"], {"w": rand(4, 5, seed=1)})
    assert kernels_of(model) == ["MatMul+Relu", "Cast+Neg"]
    assert_matches_onnxruntime(model, {"a": a})
