"""Activations that read their input twice fuse into the producing kernel: SiLU's diamond
`x -> Sigmoid -> Mul(x, .)`, GELU as PyTorch exports it (Erf and tanh forms), HardSwish, Mish
and per-channel scale and shift become one Conv/Gemm/MatMul kernel's epilogue (the manifest's
kernel_order shows it), and still match onnxruntime on both backends. A DAG whose tensors are
read outside it is not absorbed."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from onnx import helper

import aot
from tests.helpers import assert_matches_onnxruntime, make_model, rand

BACKENDS = ["c", "llvm"]


def n(op: str, inputs: list[str], output: str, **attrs: object):  # noqa: ANN201
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


def scalar(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def kernel_order(model, **compile_args: object) -> list[str]:  # noqa: ANN001
    """The manifest's kernels, without the algorithm a Conv chose (Conv/winograd -> Conv)."""
    order = aot.compile(model, **compile_args).manifest["kernel_order"]
    return [re.sub(r"/[a-z0-9_]+", "", k["op"]) for k in order]


def conv(tail: list, out: str = "y", inits: dict | None = None, opset: int = 17, channels: int = 16):  # noqa: ANN201
    """Conv 3x3 8 -> `channels` on 1x8x10x10 (with bias), followed by `tail` reading `c`."""
    x = rand(1, 8, 10, 10)
    weights = {"w": rand(channels, 8, 3, 3, seed=1) * 0.3, "b": rand(channels, seed=2), **(inits or {})}
    nodes = [n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), *tail]
    return make_model(nodes, {"x": x}, [out], weights, opset=opset), {"x": x}


SILU = [n("Sigmoid", ["c"], "s"), n("Mul", ["c", "s"], "y")]
# PyTorch's export of x * relu6(x + 3) / 6 and of Mish, op by op.
HARDSWISH = [n("Add", ["c", "three"], "a"), n("Clip", ["a", "zero", "six"], "r"), n("Mul", ["c", "r"], "m"),
             n("Div", ["m", "six"], "y")]
HARDSWISH_CONSTANTS = {"three": scalar(3.0), "zero": scalar(0.0), "six": scalar(6.0)}
MISH = [n("Softplus", ["c"], "sp"), n("Tanh", ["sp"], "t"), n("Mul", ["c", "t"], "y")]


def gelu_erf(x: str) -> list:
    """0.5 * x * (1 + erf(x / sqrt 2)): Div, Erf, Add, Mul, Mul as torch.onnx exports nn.GELU()."""
    return [n("Div", [x, "sqrt2"], "d"), n("Erf", ["d"], "e"), n("Add", ["e", "one"], "p"),
            n("Mul", [x, "p"], "m"), n("Mul", ["m", "half"], "y")]


def gelu_tanh(x: str) -> list:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), as exported for approximate='tanh':
    `x` is read three times."""
    return [n("Mul", [x, "half"], "hx"), n("Pow", [x, "three"], "cube"), n("Mul", ["cube", "k"], "kc"),
            n("Add", [x, "kc"], "inner"), n("Mul", ["inner", "root"], "scaled"), n("Tanh", ["scaled"], "t"),
            n("Add", ["t", "one"], "p"), n("Mul", ["hx", "p"], "y")]


GELU_CONSTANTS = {"sqrt2": scalar(math.sqrt(2.0)), "one": scalar(1.0), "half": scalar(0.5), "three": scalar(3.0),
                  "k": scalar(0.044715), "root": scalar(math.sqrt(2.0 / math.pi))}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,tail,inits,kernels", [
    ("silu", SILU, {}, ["Conv+Sigmoid+Mul"]),
    ("hardswish", HARDSWISH, HARDSWISH_CONSTANTS, ["Conv+Add+Clip+Mul+Div"]),
    ("mish", MISH, {}, ["Conv+Softplus+Tanh+Mul"]),
    ("scale_shift", [n("Mul", ["c", "scale"], "m"), n("Add", ["m", "shift"], "y")],
     {"scale": rand(16, 1, 1, seed=3), "shift": rand(16, 1, 1, seed=4)}, ["Conv"]),  # folded into w and b
    ("scale_shift_silu", [n("Mul", ["c", "scale"], "m"), n("Add", ["m", "shift"], "a"),
                          n("Sigmoid", ["a"], "s"), n("Mul", ["a", "s"], "y")],
     {"scale": rand(16, 1, 1, seed=3), "shift": rand(16, 1, 1, seed=4)}, ["Conv+Sigmoid+Mul"]),
])
def test_conv_activation_reading_its_input_twice_is_one_kernel(name: str, tail: list, inits: dict,
                                                               kernels: list[str], backend: str) -> None:
    model, feeds = conv(tail, inits=inits)
    assert kernel_order(model) == kernels
    assert_matches_onnxruntime(model, feeds, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("algorithm", ["auto", "direct"])
@pytest.mark.parametrize("channels", [16, 5])
def test_conv_silu_is_one_kernel_for_every_conv_algorithm(algorithm: str, channels: int, backend: str) -> None:
    """Winograd's and the direct register tiles' epilogues, full and partial channel tiles."""
    model, feeds = conv(SILU, channels=channels)
    assert kernel_order(model, conv_algorithm=algorithm) == ["Conv+Sigmoid+Mul"]
    assert_matches_onnxruntime(model, feeds, backend=backend, conv_algorithm=algorithm)


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_batchnorm_silu_is_one_kernel(backend: str) -> None:
    bn = {"g": rand(16, seed=3), "beta": rand(16, seed=4), "mean": rand(16, seed=5),
          "var": np.abs(rand(16, seed=6)) + 0.5}
    model, feeds = conv([n("BatchNormalization", ["c", "g", "beta", "mean", "var"], "bn"),
                         n("Sigmoid", ["bn"], "s"), n("Mul", ["bn", "s"], "y")], inits=bn)
    order = kernel_order(model)
    assert len(order) == 1 and order[0].startswith("Conv") and order[0].endswith("+Sigmoid+Mul")
    assert_matches_onnxruntime(model, feeds, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_gelu_erf_form_is_one_kernel(backend: str) -> None:
    a = rand(4, 32)
    model = make_model([n("Gemm", ["a", "w", "bias"], "g", transB=1), *gelu_erf("g")], {"a": a}, ["y"],
                       {"w": rand(24, 32, seed=1) * 0.3, "bias": rand(24, seed=2), **GELU_CONSTANTS})
    assert kernel_order(model) == ["Gemm+Gelu"]  # the exporters' DAG is recognised as Gelu (aot/passes/gelu.py)
    assert_matches_onnxruntime(model, {"a": a}, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_gelu_tanh_form_is_one_kernel(backend: str) -> None:
    q = rand(2, 6, 32)
    model = make_model([n("MatMul", ["q", "w"], "mm"), *gelu_tanh("mm")], {"q": q}, ["y"],
                       {"w": rand(32, 24, seed=1) * 0.3, **GELU_CONSTANTS})
    assert kernel_order(model) == ["MatMul+Mul+Pow+Mul+Add+Mul+Tanh+Add+Mul"]
    assert_matches_onnxruntime(model, {"q": q}, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,opset", [("HardSwish", 17), ("Mish", 18), ("Gelu", 20), ("HardSigmoid", 17)])
def test_single_op_activations_fuse_into_conv(op: str, opset: int, backend: str) -> None:
    model, feeds = conv([n(op, ["c"], "y")], opset=opset)
    assert kernel_order(model) == [f"Conv+{op}"]
    assert_matches_onnxruntime(model, feeds, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_branch_may_read_a_side_input(backend: str) -> None:
    """x * sigmoid(x * gate): the branch multiplies by a graph input, loaded at the output index."""
    x, gate = rand(1, 8, 10, 10), rand(1, 16, 1, 1, seed=7)
    nodes = [n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), n("Mul", ["c", "gate"], "g"),
             n("Sigmoid", ["g"], "s"), n("Mul", ["c", "s"], "y")]
    model = make_model(nodes, {"x": x, "gate": gate}, ["y"], {"w": rand(16, 8, 3, 3, seed=1), "b": rand(16, seed=2)})
    assert kernel_order(model) == ["Conv+Mul+Sigmoid+Mul"]
    assert_matches_onnxruntime(model, {"x": x, "gate": gate}, backend=backend)


def test_conv_output_read_elsewhere_stays_in_memory() -> None:
    """The conv output also feeds a MaxPool: it must be stored, so SiLU runs on its own."""
    nodes = [*SILU, n("MaxPool", ["c"], "p", kernel_shape=[2, 2], strides=[2, 2])]
    x = rand(1, 8, 10, 10)
    model = make_model([n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), *nodes], {"x": x}, ["y", "p"],
                       {"w": rand(16, 8, 3, 3, seed=1), "b": rand(16, seed=2)})
    assert kernel_order(model) == ["Conv", "Sigmoid+Mul", "MaxPool"]
    assert_matches_onnxruntime(model, {"x": x})


def test_an_intermediate_graph_output_stays_in_memory() -> None:
    model, feeds = conv(SILU, out="y")
    model.graph.output.append(helper.make_value_info("s", model.graph.output[0].type))
    assert kernel_order(model) == ["Conv", "Sigmoid", "Mul"]
    assert_matches_onnxruntime(model, feeds)


def test_a_diamond_through_another_kernel_is_not_absorbed() -> None:
    """c -> Sigmoid -> Conv 1x1 -> Mul(c, .): the Mul needs a kernel that needs Sigmoid's output,
    so the Conv cannot take both as its epilogue (the 1x1 Conv takes the Mul instead)."""
    nodes = [n("Sigmoid", ["c"], "s"), n("Conv", ["s", "w2"], "p"), n("Mul", ["c", "p"], "y")]
    model, feeds = conv(nodes, inits={"w2": rand(16, 16, 1, 1, seed=5)})
    assert kernel_order(model) == ["Conv", "Sigmoid", "Conv+Mul"]
    assert_matches_onnxruntime(model, feeds)


def test_readers_that_never_join_end_the_epilogue() -> None:
    """Sigmoid(c) and Tanh(c) are both returned: no single node closes the DAG."""
    x = rand(1, 8, 10, 10)
    model = make_model([n("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), n("Sigmoid", ["c"], "s"),
                        n("Tanh", ["c"], "t")], {"x": x}, ["s", "t"],
                       {"w": rand(16, 8, 3, 3, seed=1), "b": rand(16, seed=2)})
    assert kernel_order(model) == ["Conv", "Sigmoid", "Tanh"]
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("backend", BACKENDS)
def test_yolo_bottleneck_is_two_kernels(backend: str) -> None:
    """YOLOv8's bottleneck: Conv+SiLU, Conv+SiLU, residual Add: the Add joins the second
    Conv's epilogue after its SiLU diamond closes."""
    x = rand(1, 16, 10, 10)
    nodes = [n("Conv", ["x", "w1", "b1"], "c1", pads=[1, 1, 1, 1]), n("Sigmoid", ["c1"], "s1"),
             n("Mul", ["c1", "s1"], "m1"), n("Conv", ["m1", "w2", "b2"], "c2", pads=[1, 1, 1, 1]),
             n("Sigmoid", ["c2"], "s2"), n("Mul", ["c2", "s2"], "m2"), n("Add", ["x", "m2"], "y")]
    model = make_model(nodes, {"x": x}, ["y"], {"w1": rand(16, 16, 3, 3, seed=1) * 0.2, "b1": rand(16, seed=2),
                                                 "w2": rand(16, 16, 3, 3, seed=3) * 0.2, "b2": rand(16, seed=4)})
    assert kernel_order(model) == ["Conv+Sigmoid+Mul", "Conv+Sigmoid+Mul+Add"]
    assert_matches_onnxruntime(model, {"x": x}, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_per_channel_scale_and_shift_then_silu_is_one_kernel(backend: str) -> None:
    a = rand(4, 32)
    nodes = [n("Gemm", ["a", "w"], "g", transB=1), n("Mul", ["g", "scale"], "m"), n("Add", ["m", "shift"], "t"),
             n("Sigmoid", ["t"], "s"), n("Mul", ["t", "s"], "y")]
    model = make_model(nodes, {"a": a}, ["y"], {"w": rand(24, 32, seed=1) * 0.3, "scale": rand(24, seed=2),
                                                "shift": rand(24, seed=3)})
    order = kernel_order(model)
    assert len(order) == 1 and order[0].startswith("Gemm") and order[0].endswith("Sigmoid+Mul")
    assert_matches_onnxruntime(model, {"a": a}, backend=backend)
