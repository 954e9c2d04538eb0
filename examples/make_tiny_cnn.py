"""Builds examples/tiny_cnn.onnx: a small image classifier with the shapes of a real edge CNN
(strided stem conv, depthwise-separable blocks with residual Adds, BatchNorm, Relu6 clips, max
and global average pooling, a Gemm head and Softmax). Weights are seeded random, so the file is
reproducible; it is checked in so the README's first command needs nothing but this repo."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 7) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def param(name: str, shape: tuple[int, ...], scale: float = 0.3) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv_bn_relu6(x: str, name: str, cin: int, cout: int, k: int, stride: int, group: int = 1) -> str:
        w = param(f"{name}.w", (cout, cin // group, k, k), scale=(2.0 / (cin // group * k * k)) ** 0.5)
        nodes.append(helper.make_node("Conv", [x, w], [f"{name}.conv"], name=f"{name}/conv", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=group))
        scale = param(f"{name}.bn.scale", (cout,), 0.1)
        inits[-1] = numpy_helper.from_array(np.abs(numpy_helper.to_array(inits[-1])) + 0.9, scale)
        bias = param(f"{name}.bn.bias", (cout,), 0.1)
        mean = param(f"{name}.bn.mean", (cout,), 0.1)
        var = param(f"{name}.bn.var", (cout,), 0.1)
        inits[-1] = numpy_helper.from_array(np.abs(numpy_helper.to_array(inits[-1])) + 0.5, var)
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", scale, bias, mean, var], [f"{name}.bn"],
                                      name=f"{name}/bn", epsilon=1e-5))
        lo = param(f"{name}.min", (), 0.0)
        hi = f"{name}.max"
        inits.append(numpy_helper.from_array(np.array(6.0, dtype=np.float32), hi))
        nodes.append(helper.make_node("Clip", [f"{name}.bn", lo, hi], [f"{name}.out"], name=f"{name}/relu6"))
        return f"{name}.out"

    x = conv_bn_relu6("image", "stem", 3, 16, 3, 2)
    for i in range(2):
        dw = conv_bn_relu6(x, f"block{i}.dw", 16, 16, 3, 1, group=16)
        pw = conv_bn_relu6(dw, f"block{i}.pw", 16, 16, 1, 1)
        nodes.append(helper.make_node("Add", [x, pw], [f"block{i}.out"], name=f"block{i}/residual"))
        x = f"block{i}.out"
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    x = conv_bn_relu6("pool", "expand", 16, 32, 3, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["features"], name="flatten", axis=1))
    w = param("head.w", (10, 32), 0.3)
    b = param("head.b", (10,), 0.1)
    nodes.append(helper.make_node("Gemm", ["features", w, b], ["logits"], name="head", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1))
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="aot-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tiny_cnn.onnx")
    onnx.save(build(), out)
    print(f"wrote {out}")
