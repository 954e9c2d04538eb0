"""YOLOv8n's topology as an ONNX graph with seeded random weights: no real yolov8n.onnx ships in a
package we can fetch (the detector weights are AGPL and distributed from a hub). The graph is
what an export of the real network holds at opset 17, BatchNorm folded into each Conv:
Conv+SiLU (as x * Sigmoid(x)) blocks, C2f blocks (Split, Bottlenecks, Concat), SPPF (three
chained 5x5 MaxPools), nearest Resize x2 and Concat in the PAN neck, and the decoupled detect
head with its DFL (Softmax over 16 bins, a 1x1 Conv) and box decoding, at 1x3x320x320 by default.

    python -m benchmarks.yolov8n OUT.onnx [SIZE]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NUM_CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)


class _Graph:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def constant(self, prefix: str, value: np.ndarray) -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attrs: object) -> list[str]:
        names = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=self.name(f"/{op}"), **attrs))
        return names

    def conv(self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, act: bool = True) -> str:
        """Conv2d (BatchNorm folded: a bias) then SiLU, as ultralytics' Conv block exports."""
        # He-style scale keeps activations O(1) through the 60 layers of random weights.
        w = (self.rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2.0 / (c_in * k * k))).astype(np.float32)
        b = (0.1 * self.rng.standard_normal(c_out)).astype(np.float32)
        y = self.node("Conv", [x, self.constant("w", w), self.constant("b", b)], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4)[0]
        return self.node("Mul", [y, self.node("Sigmoid", [y])[0]])[0] if act else y

    def c2f(self, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
        c = c_out // 2
        y = self.conv(x, c_in, 2 * c, 1)
        parts = self.node("Split", [y, self.constant("split", np.array([c, c], np.int64))], outputs=2, axis=1)
        for _ in range(n):
            z = self.conv(self.conv(parts[-1], c, c, 3), c, c, 3)
            parts.append(self.node("Add", [parts[-1], z])[0] if shortcut else z)
        return self.conv(self.node("Concat", parts, axis=1)[0], (2 + n) * c, c_out, 1)

    def sppf(self, x: str, c_in: int, c_out: int) -> str:
        y = [self.conv(x, c_in, c_in // 2, 1)]
        for _ in range(3):
            y.append(self.node("MaxPool", [y[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])[0])
        return self.conv(self.node("Concat", y, axis=1)[0], 2 * c_in, c_out, 1)

    def upsample(self, x: str) -> str:
        scales = self.constant("scales", np.array([1, 1, 2, 2], np.float32))
        return self.node("Resize", [x, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor")[0]

    def concat(self, xs: list[str]) -> str:
        return self.node("Concat", xs, axis=1)[0]


def _anchors(size: int) -> tuple[np.ndarray, np.ndarray]:
    points, strides = [], []
    for s in STRIDES:
        n = size // s
        ys, xs = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full((1, n * n), s))
    return np.concatenate(points, 1)[None].astype(np.float32), np.concatenate(strides, 1).astype(np.float32)


def _detect(g: _Graph, features: list[tuple[str, int]], size: int) -> str:
    c2, c3 = max(16, features[0][1] // 4, 4 * REG_MAX), max(features[0][1], min(NUM_CLASSES, 100))
    levels = []
    for x, c in features:
        box = g.conv(g.conv(g.conv(x, c, c2, 3), c2, c2, 3), c2, 4 * REG_MAX, 1, act=False)
        cls = g.conv(g.conv(g.conv(x, c, c3, 3), c3, c3, 3), c3, NUM_CLASSES, 1, act=False)
        level = g.node("Concat", [box, cls], axis=1)[0]
        shape = g.constant("shape", np.array([1, 4 * REG_MAX + NUM_CLASSES, -1], np.int64))
        levels.append(g.node("Reshape", [level, shape])[0])
    anchors = size * size // 64 + size * size // 256 + size * size // 1024
    out = g.node("Concat", levels, axis=2)[0]
    box, cls = g.node("Split", [out, g.constant("split", np.array([4 * REG_MAX, NUM_CLASSES], np.int64))],
                      outputs=2, axis=1)
    # DFL: a softmax over each side's 16 distance bins, then their expectation as a fixed 1x1 Conv.
    bins = g.node("Reshape", [box, g.constant("shape", np.array([1, 4, REG_MAX, anchors], np.int64))])[0]
    bins = g.node("Softmax", [g.node("Transpose", [bins], perm=[0, 2, 1, 3])[0]], axis=1)[0]
    weight = g.constant("dfl", np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1))
    dist = g.node("Reshape", [g.node("Conv", [bins, weight], kernel_shape=[1, 1])[0],
                              g.constant("shape", np.array([1, 4, anchors], np.int64))])[0]
    lt, rb = g.node("Split", [dist, g.constant("split", np.array([2, 2], np.int64))], outputs=2, axis=1)
    points, strides = _anchors(size)
    anchor = g.constant("anchors", points)
    x1y1 = g.node("Sub", [anchor, lt])[0]
    x2y2 = g.node("Add", [anchor, rb])[0]
    centre = g.node("Div", [g.node("Add", [x1y1, x2y2])[0], g.constant("two", np.array(2, np.float32))])[0]
    wh = g.node("Sub", [x2y2, x1y1])[0]
    boxes = g.node("Mul", [g.node("Concat", [centre, wh], axis=1)[0], g.constant("strides", strides)])[0]
    return g.node("Concat", [boxes, g.node("Sigmoid", [cls])[0]], axis=1)[0]


def yolov8n(size: int = 320, seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv(g.conv("images", 3, 16, 3, 2), 16, 32, 3, 2)
    x = g.c2f(x, 32, 32, 1, True)
    p3 = g.c2f(g.conv(x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = g.c2f(g.conv(p3, 64, 128, 3, 2), 128, 128, 2, True)
    p5 = g.sppf(g.c2f(g.conv(p4, 128, 256, 3, 2), 256, 256, 1, True), 256, 256)
    n4 = g.c2f(g.concat([g.upsample(p5), p4]), 384, 128, 1, False)
    n3 = g.c2f(g.concat([g.upsample(n4), p3]), 192, 64, 1, False)
    m4 = g.c2f(g.concat([g.conv(n3, 64, 64, 3, 2), n4]), 192, 128, 1, False)
    m5 = g.c2f(g.concat([g.conv(m4, 128, 128, 3, 2), p5]), 384, 256, 1, False)
    _detect(g, [(n3, 64), (m4, 128), (m5, 256)], size)  # its last node makes the output
    g.nodes[-1].output[0] = "output0"
    graph = helper.make_graph(
        g.nodes, "yolov8n", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT,
                                        [1, 4 + NUM_CLASSES, sum((size // s) ** 2 for s in STRIDES)])], g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="benchmarks.yolov8n")
    model.ir_version = 8  # what onnxruntime 1.2x reads
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 320
    Path(sys.argv[1]).write_bytes(yolov8n(size).SerializeToString())
