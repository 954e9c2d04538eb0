"""Differential fuzzing over real architectures: graphs assembled from the blocks exporters write,
compiled by aot and compared with onnxruntime on random inputs.

    python -m tests.fuzz_architectures --count 5000 [--backend llvm] [--seed 0]

Convolutional graphs: a stem, then residual, squeeze-and-excitation, MBConv, C2f (YOLOv8),
FPN-style upsample-and-add and channel-shuffle blocks with random widths, kernels, strides and
activations (Relu, SiLU as x * Sigmoid(x), HardSwish, Clip 0-6), then a pooled Gemm head.
Transformer graphs: embeddings, pre- or post-norm encoder layers written as torch exports them
(LayerNormalization, MatMul + Add projections, Reshape/Transpose head splits, MatMul(Q, K^T)
scaled by Mul or Div, an optional additive mask, Softmax, GELU in its Erf form) and a pooled
head. Opsets 17-21. A fraction is quantised to QDQ by onnxruntime's quantizer (int8 weights and
activations) and compared with onnxruntime running that QDQ model.

A graph fails when aot refuses it (any error: every graph is a valid model), crashes, or
differs from onnxruntime beyond the tolerance; the failure prints the seed that reproduces it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from tests.fuzz_graphs import GraphMaker, run_seeds
from tests.helpers import make_model

ACTIVATIONS = ("relu", "silu", "hardswish", "relu6")
FLOAT_TOLERANCE = 1e-3
QUANTIZED_TOLERANCE = 0.05  # of the output's scale: one or two int8 steps after a few layers


class Net(GraphMaker):
    """A graph under construction: GraphMaker's nodes and constants, with the blocks."""

    def act(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.add("Relu", [x])
        if kind == "silu":
            return self.add("Mul", [x, self.add("Sigmoid", [x])])
        if kind == "hardswish":
            return self.add("HardSwish", [x])
        return self.add("Clip", [x, self.scalar(0.0), self.scalar(6.0)])

    def scalar(self, value: float) -> str:
        return self.const_array(np.array(value, np.float32))

    def const_array(self, value: np.ndarray) -> str:
        n = self.name("k")
        self.inits[n] = value
        return n

    def conv(self, x: str, c_in: int, c_out: int, *, k: int = 1, stride: int = 1, group: int = 1) -> str:
        w = self.const((c_out, c_in // group, k, k), scale=1.0 / np.sqrt(c_in // group * k * k))
        return self.add("Conv", [x, w, self.const((c_out,), 0.1)], kernel_shape=[k, k], strides=[stride, stride],
                        pads=[k // 2] * 4, group=group)

    def conv_bn_act(self, x: str, c_in: int, c_out: int, act: str, **conv: int) -> str:
        y = self.conv(x, c_in, c_out, **conv)
        if self.rng.random() < 0.5:  # unfolded BatchNormalization, as training exports leave it
            var = self.name("v")
            self.inits[var] = (np.abs(self.rng.standard_normal(c_out)) + 0.5).astype(np.float32)
            y = self.add("BatchNormalization", [y, self.const((c_out,)), self.const((c_out,), 0.1),
                                                self.const((c_out,), 0.1), var])
        return self.act(y, act)


Shape = tuple[int, int, int]  # channels, height, width
Block = Callable[[Net, str, Shape, str], tuple[str, Shape]]


def residual(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c = shape[0]
    y = net.conv_bn_act(x, c, c, act, k=3)
    y = net.conv(y, c, c, k=3)
    return net.act(net.add("Add", [y, x]), act), shape


def squeeze_excite(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c = shape[0]
    mid = max(1, c // 4)
    s = net.add("GlobalAveragePool", [x])
    s = net.act(net.conv(s, c, mid), "relu" if act == "relu6" else act)
    gate = net.add("HardSigmoid" if act == "hardswish" else "Sigmoid", [net.conv(s, mid, c)])
    return net.add("Mul", [x, gate]), shape


def mbconv(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c, h, w = shape
    wide, k = c * int(net.rng.choice([2, 4, 6])), int(net.rng.choice([3, 5]))
    stride = 2 if h >= 8 and net.rng.random() < 0.3 else 1
    y = net.conv_bn_act(x, c, wide, act)
    y = net.conv_bn_act(y, wide, wide, act, k=k, stride=stride, group=wide)
    if net.rng.random() < 0.5:
        y, _ = squeeze_excite(net, y, (wide, h, w), act)
    c_out = c if stride == 1 else c * 2
    y = net.conv(y, wide, c_out)
    out_shape = (c_out, -(-h // stride), -(-w // stride))
    return (net.add("Add", [y, x]) if stride == 1 else y), out_shape


def c2f(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c, h, w = shape
    half = max(1, c // 2)
    y = net.conv_bn_act(x, c, 2 * half, act)
    split = net.name("split")
    parts = [net.name("part"), net.name("part")]
    net.nodes.append(helper.make_node("Split", [y, split], parts, axis=1))
    net.inits[split] = np.array([half, half], np.int64)
    branches, last = list(parts), parts[1]
    for _ in range(int(net.rng.integers(1, 3))):
        b = net.conv_bn_act(net.conv_bn_act(last, half, half, act, k=3), half, half, act, k=3)
        last = net.add("Add", [last, b])
        branches.append(last)
    joined = net.add("Concat", branches, axis=1)
    return net.conv_bn_act(joined, half * len(branches), c, act), shape


def fpn(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c, h, w = shape
    if h < 4 or w < 4:
        return residual(net, x, shape, act)
    down = net.conv_bn_act(x, c, c, act, k=3, stride=2)
    up = net.add("Resize", [down, "", net.const_array(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    if h % 2 or w % 2:  # the upsampled map is one larger: crop it to the lateral's size
        starts, ends = net.const_array(np.array([0, 0], np.int64)), net.const_array(np.array([h, w], np.int64))
        up = net.add("Slice", [up, starts, ends, net.const_array(np.array([2, 3], np.int64))])
    lateral = net.conv(x, c, c)
    return net.add("Add", [lateral, up]), shape


def channel_shuffle(net: Net, x: str, shape: Shape, act: str) -> tuple[str, Shape]:
    c, h, w = shape
    if c % 2:
        return residual(net, x, shape, act)
    y = net.add("Reshape", [x, net.const_array(np.array([1, 2, c // 2, h, w], np.int64))])
    y = net.add("Transpose", [y], perm=[0, 2, 1, 3, 4])
    y = net.add("Reshape", [y, net.const_array(np.array([1, c, h, w], np.int64))])
    return net.conv_bn_act(y, c, c, act, k=3, group=2), shape


CNN_BLOCKS: tuple[Block, ...] = (residual, squeeze_excite, mbconv, c2f, fpn, channel_shuffle)


def cnn(net: Net) -> tuple[list[str], dict[str, np.ndarray]]:
    rng = net.rng
    c, h, w = int(rng.choice([1, 3])), int(rng.integers(8, 33)), int(rng.integers(8, 33))
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    act = str(rng.choice(ACTIVATIONS))
    width = int(rng.choice([4, 8, 12, 16, 24]))
    stride = 2 if h >= 16 else 1
    y = net.conv_bn_act("x", c, width, act, k=3, stride=stride)
    shape: Shape = (width, -(-h // stride), -(-w // stride))
    for _ in range(int(rng.integers(1, 5))):
        block = CNN_BLOCKS[int(rng.integers(len(CNN_BLOCKS)))]
        y, shape = block(net, y, shape, act)
    pooled = net.add("Flatten", [net.add("GlobalAveragePool", [y])])
    logits = net.add("Gemm", [pooled, net.const((10, shape[0]), 0.3), net.const((10,), 0.1)], transB=1)
    return [net.add("Softmax", [logits], axis=1)], {"x": x}


def attention(net: Net, x: str, seq: int, dim: int, heads: int, mask: str | None) -> str:
    head = dim // heads

    def project(t: str) -> str:
        return net.add("Add", [net.add("MatMul", [t, net.const((dim, dim), dim ** -0.5)]), net.const((dim,), 0.1)])

    def split(t: str) -> str:
        t = net.add("Reshape", [t, net.const_array(np.array([1, seq, heads, head], np.int64))])
        return net.add("Transpose", [t], perm=[0, 2, 1, 3])

    q, k, v = (split(project(x)) for _ in range(3))
    scores = net.add("MatMul", [q, net.add("Transpose", [k], perm=[0, 1, 3, 2])])
    scale = float(np.sqrt(head))
    scores = net.add("Div", [scores, net.scalar(scale)]) if net.rng.random() < 0.5 else \
        net.add("Mul", [scores, net.scalar(1 / scale)])
    if mask is not None:
        scores = net.add("Add", [scores, mask])
    probs = net.add("Softmax", [scores], axis=-1)
    context = net.add("Transpose", [net.add("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return project(net.add("Reshape", [context, net.const_array(np.array([1, seq, dim], np.int64))]))


def gelu(net: Net, x: str) -> str:
    inner = net.add("Erf", [net.add("Div", [x, net.scalar(float(np.sqrt(2.0)))])])
    return net.add("Mul", [net.add("Mul", [x, net.add("Add", [inner, net.scalar(1.0)])]), net.scalar(0.5)])


def layer_norm(net: Net, x: str, dim: int) -> str:
    return net.add("LayerNormalization", [x, net.const((dim,), 0.2), net.const((dim,), 0.1)], axis=-1)


def transformer(net: Net) -> tuple[list[str], dict[str, np.ndarray]]:
    rng = net.rng
    heads = int(rng.choice([1, 2, 4]))
    dim, seq = heads * int(rng.choice([8, 16, 32])), int(rng.integers(3, 40))
    x = rng.standard_normal((1, seq, dim)).astype(np.float32)
    mask = None
    if rng.random() < 0.5:  # causal: -1e4 above the diagonal, as older exports add it
        mask = net.const_array(np.triu(np.full((seq, seq), -1e4, np.float32), 1)[None, None])
    y, pre_norm = "x", bool(rng.random() < 0.5)
    for _ in range(int(rng.integers(1, 3))):
        a = attention(net, layer_norm(net, y, dim) if pre_norm else y, seq, dim, heads, mask)
        y = net.add("Add", [y, a])
        y = y if pre_norm else layer_norm(net, y, dim)
        hidden = net.add("MatMul", [layer_norm(net, y, dim) if pre_norm else y, net.const((dim, 4 * dim), dim ** -0.5)])
        mlp = net.add("MatMul", [gelu(net, net.add("Add", [hidden, net.const((4 * dim,), 0.1)])),
                                 net.const((4 * dim, dim), (4 * dim) ** -0.5)])
        y = net.add("Add", [y, mlp])
        y = layer_norm(net, y, dim) if not pre_norm else y
    return [net.add("ReduceMean", [layer_norm(net, y, dim)], axes=[1], keepdims=0)], {"x": x}


def random_architecture(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray], bool]:
    """The graph for `seed`, its inputs, and whether it is to be quantised."""
    rng = np.random.default_rng(seed)
    net = Net(rng)
    outputs, feeds = (cnn if rng.random() < 0.6 else transformer)(net)
    opset = int(rng.integers(17, 22))
    model = make_model(net.nodes, feeds, outputs, net.inits, opset=opset)
    # ReduceMean takes its axes as an input from opset 18 on.
    if opset >= 18:
        model = onnx.version_converter.convert_version(make_model(net.nodes, feeds, outputs, net.inits, opset=17),
                                                       opset)
    return model, feeds, bool(rng.random() < 0.25)


def quantized(model: onnx.ModelProto, feeds: dict[str, np.ndarray], seed: int) -> onnx.ModelProto:
    """`model` as onnxruntime's quantizer writes it: QDQ, int8 weights and activations, calibrated
    on a few random inputs around the real ones."""
    import logging
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing, per graph

    rng = np.random.default_rng(seed)
    samples = [{k: (v + rng.standard_normal(v.shape) * 0.1).astype(v.dtype) for k, v in feeds.items()}
               for _ in range(4)]

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return samples.pop() if samples else None

    with tempfile.TemporaryDirectory() as folder:
        src, dst = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, src)
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=bool(rng.random() < 0.5))
        return onnx.load(str(dst))


def check(seed: int, backend: str = "c") -> str | None:
    """None when aot matches onnxruntime on the architecture made from `seed`, else what failed."""
    from aot.commands.verify import compare
    from tests.helpers import run_aot, run_onnxruntime

    model, feeds, quantize = random_architecture(seed)
    if quantize:
        model = quantized(model, feeds, seed)
    try:
        ours = run_aot(model, feeds, backend=backend)
    except Exception as e:  # every graph is valid: a refusal is a finding too
        return f"seed {seed}{' (int8)' if quantize else ''}: {type(e).__name__}: {str(e)[:300]}"
    for name, expected in run_onnxruntime(model, feeds).items():
        result = compare(name, ours[name], expected, QUANTIZED_TOLERANCE if quantize else FLOAT_TOLERANCE)
        if not result.passed:
            return (f"seed {seed}{' (int8)' if quantize else ''}: output {name}: max abs err "
                    f"{result.max_abs_err:.3g} (scale {result.scale:.3g})")
    return None


def main(argv: list[str] | None = None) -> int:
    return run_seeds(check, "architectures", argv, __doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
