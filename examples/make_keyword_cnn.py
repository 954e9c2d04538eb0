"""Builds examples/keyword_cnn.onnx: a small keyword spotter over 40 audio features per frame
(two 1-D convolutions over time with Relu, global average pooling, a Gemm head and Softmax). Its
number of frames is free, so one package can hold it for several clip lengths
(`--input-shape features=1x40x49 --input-shape features=1x40x98`), its weights stored once. Weights
are seeded random, so the file is reproducible; it is checked in for the multi-model example of docs/package.md."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 11) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> onnx.TensorProto:
        scale = (2.0 / fan_in) ** 0.5 if len(shape) > 1 else 0.1
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [weight("conv1.w", (32, 40, 3), 120), weight("conv1.b", (32,), 1),
             weight("conv2.w", (32, 32, 3), 96), weight("conv2.b", (32,), 1),
             weight("fc.w", (32, 12), 32), weight("fc.b", (12,), 1)]
    nodes = [
        helper.make_node("Conv", ["features", "conv1.w", "conv1.b"], ["conv1"], name="conv1", pads=[1, 1]),
        helper.make_node("Relu", ["conv1"], ["conv1.relu"], name="conv1/relu"),
        helper.make_node("Conv", ["conv1.relu", "conv2.w", "conv2.b"], ["conv2"], name="conv2", pads=[1, 1],
                         strides=[2]),
        helper.make_node("Relu", ["conv2"], ["conv2.relu"], name="conv2/relu"),
        helper.make_node("GlobalAveragePool", ["conv2.relu"], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["pool.flat"], name="flatten"),
        helper.make_node("Gemm", ["pool.flat", "fc.w", "fc.b"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["keywords"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "keyword_cnn",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 40, "frames"])],
        [helper.make_tensor_value_info("keywords", TensorProto.FLOAT, [1, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="aot-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("keyword_cnn.onnx")
    onnx.save(build(), str(out))
    print(f"wrote {out}")
