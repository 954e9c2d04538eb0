"""Small models of four model classes (text detector, YOLO block, BERT layer, voice activity), built
with onnx.helper and seeded weights (no downloads), so the test suite can verify them on every backend and target and
benchmarks/model_classes.py can time them beside the real models:

- a DBNet-like text-detector head at 320x320: strided convs with BatchNorm, a depthwise conv with
  a HardSigmoid gate, an FPN (1x1 laterals, nearest Resize x2, Add), then Conv, two ConvTranspose
  2x2 stride 2 with BatchNorm and Relu, and a Sigmoid probability map;
- a YOLOv8-like stem and C2f block: Conv+SiLU (x * Sigmoid(x)), Split, Bottlenecks with residual
  Adds, Concat;
- a BERT-like encoder layer: int64 input_ids and attention_mask, embedding Gather, LayerNorm,
  masked multi-head attention, Erf GELU, residuals;
- a Silero-like voice-activity model: an audio frame and the LSTM state in, STFT as a strided
  Conv, magnitude by Pow and Sqrt, a Conv encoder, LSTM 64, the probability and the new state out.

Each builder returns the model and inputs that exercise it (token ids in range, a padded mask).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.yolov8n import _Graph

Model = tuple[onnx.ModelProto, dict[str, np.ndarray]]

_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


def _finish(graph: _Graph, name: str, inputs: dict[str, np.ndarray], outputs: dict[str, list[int]]) -> Model:
    """The model over `graph`'s nodes, its inputs typed from the example arrays."""
    proto = helper.make_graph(
        graph.nodes, name,
        [helper.make_tensor_value_info(n, _ONNX_TYPES[a.dtype], list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs.items()],
        graph.initializers)
    model = helper.make_model(proto, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="benchmarks.class_graphs")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model, inputs


def _rename_output(graph: _Graph, old: str, new: str) -> None:
    for node in graph.nodes:
        node.output[:] = [new if o == old else o for o in node.output]
        node.input[:] = [new if i == old else i for i in node.input]


class _Layers(_Graph):
    """yolov8n's graph builder plus the layers of the other model classes."""

    def weight(self, *shape: int, fan_in: int) -> str:
        return self.constant("w", (self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32))

    def vector(self, size: int, mean: float = 0.0, spread: float = 0.1) -> str:
        return self.constant("v", (mean + spread * self.rng.standard_normal(size)).astype(np.float32))

    def batchnorm(self, x: str, channels: int) -> str:
        var = self.constant("var", (0.5 + self.rng.random(channels)).astype(np.float32))
        return self.node("BatchNormalization", [x, self.vector(channels, 1.0), self.vector(channels),
                                                self.vector(channels), var], epsilon=1e-5)[0]

    def conv_bn_relu(self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, group: int = 1) -> str:
        w = self.weight(c_out, c_in // group, k, k, fan_in=c_in // group * k * k)
        y = self.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4, group=group)[0]
        return self.node("Relu", [self.batchnorm(y, c_out)])[0]

    def up2(self, x: str, c_in: int, c_out: int) -> str:
        """ConvTranspose 2x2 stride 2 (bias), as DBNet's head upsamples its probability map."""
        w = self.weight(c_in, c_out, 2, 2, fan_in=c_in)
        return self.node("ConvTranspose", [x, w, self.vector(c_out)], kernel_shape=[2, 2], strides=[2, 2])[0]

    def matmul(self, x: str, rows: int, cols: int, bias: bool = True) -> str:
        y = self.node("MatMul", [x, self.weight(rows, cols, fan_in=2 * rows)])[0]
        return self.node("Add", [y, self.vector(cols)])[0] if bias else y

    def layer_norm(self, x: str, width: int) -> str:
        return self.node("LayerNormalization", [x, self.vector(width, 1.0), self.vector(width)], axis=-1,
                         epsilon=1e-12)[0]

    def scalar(self, value: float) -> str:
        return self.constant("s", np.array(value, np.float32))

    def shape(self, *dims: int) -> str:
        return self.constant("shape", np.array(dims, np.int64))


def fpn_text_detector(size: int = 320) -> Model:
    """DBNet's shape: features at 1/4, 1/8 and 1/16, an FPN summing them top-down, and a head
    that upsamples 1/4 back to full size with two ConvTranspose 2x2 stride 2."""
    g = _Layers(seed=1)
    c4 = g.conv_bn_relu(g.conv_bn_relu("image", 3, 16, 3, 2), 16, 24, 3, 2)  # 1/4
    gate = g.node("HardSigmoid", [g.conv_bn_relu(c4, 24, 24, 3, 1, group=24)], alpha=0.2, beta=0.5)[0]
    c4 = g.node("Mul", [c4, gate])[0]
    c8 = g.conv_bn_relu(c4, 24, 32, 3, 2)
    c16 = g.conv_bn_relu(c8, 32, 48, 3, 2)
    lateral = [g.node("Conv", [c, g.weight(24, ch, 1, 1, fan_in=ch)], kernel_shape=[1, 1])[0]
               for c, ch in ((c4, 24), (c8, 32), (c16, 48))]
    p8 = g.node("Add", [lateral[1], g.upsample(lateral[2])])[0]
    p4 = g.node("Add", [lateral[0], g.upsample(p8)])[0]
    head = g.conv_bn_relu(p4, 24, 24, 3)
    head = g.node("Relu", [g.batchnorm(g.up2(head, 24, 24), 24)])[0]
    g.node("Sigmoid", [g.up2(head, 24, 1)])
    _rename_output(g, g.nodes[-1].output[0], "probability")
    image = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    return _finish(g, "fpn_text_detector", {"image": image}, {"probability": [1, 1, size, size]})


def c2f_block(size: int = 160) -> Model:
    """YOLOv8's stem (two strided Conv+SiLU) and a C2f block with two shortcut Bottlenecks."""
    g = _Layers(seed=2)
    x = g.conv(g.conv("images", 3, 16, 3, 2), 16, 32, 3, 2)
    g.c2f(x, 32, 32, 2, True)
    _rename_output(g, g.nodes[-1].output[0], "features")
    images = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    return _finish(g, "c2f_block", {"images": images}, {"features": [1, 32, size // 4, size // 4]})


def bert_encoder_layer(seq: int = 64, vocab: int = 1000, dim: int = 128, heads: int = 4) -> Model:
    """Token and position embeddings, LayerNorm, attention whose mask adds (1 - mask) * -10000 to
    the scores, residual, LayerNorm, an Erf-GELU feed-forward layer, residual, LayerNorm."""
    g = _Layers(seed=3)
    head_dim = dim // heads
    tokens = g.node("Gather", [g.constant("embeddings", (0.5 * g.rng.standard_normal((vocab, dim))).astype(np.float32)),
                               "input_ids"], axis=0)[0]
    positions = g.constant("positions", (0.1 * g.rng.standard_normal((1, seq, dim))).astype(np.float32))
    hidden = g.layer_norm(g.node("Add", [tokens, positions])[0], dim)
    mask = g.node("Cast", ["attention_mask"], to=TensorProto.FLOAT)[0]
    mask = g.node("Mul", [g.node("Sub", [g.scalar(1.0), mask])[0], g.scalar(-10000.0)])[0]
    mask = g.node("Unsqueeze", [mask, g.constant("axes", np.array([1, 2], np.int64))])[0]  # [1, 1, 1, S]
    qkv = {}
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        split = g.node("Reshape", [g.matmul(hidden, dim, dim), g.shape(1, seq, heads, head_dim)])[0]
        qkv[name] = g.node("Transpose", [split], perm=perm)[0]
    scores = g.node("Div", [g.node("MatMul", [qkv["q"], qkv["k"]])[0], g.scalar(math.sqrt(head_dim))])[0]
    attention = g.node("Softmax", [g.node("Add", [scores, mask])[0]], axis=-1)[0]
    context = g.node("Transpose", [g.node("MatMul", [attention, qkv["v"]])[0]], perm=[0, 2, 1, 3])[0]
    context = g.matmul(g.node("Reshape", [context, g.shape(1, seq, dim)])[0], dim, dim)
    hidden = g.layer_norm(g.node("Add", [context, hidden])[0], dim)
    up = g.matmul(hidden, dim, 4 * dim)
    erf = g.node("Erf", [g.node("Div", [up, g.scalar(math.sqrt(2.0))])[0]])[0]
    gelu = g.node("Mul", [g.node("Mul", [up, g.node("Add", [erf, g.scalar(1.0)])[0]])[0], g.scalar(0.5)])[0]
    out = g.node("Add", [g.matmul(gelu, 4 * dim, dim), hidden])[0]
    g.layer_norm(out, dim)
    _rename_output(g, g.nodes[-1].output[0], "last_hidden_state")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (1, seq)).astype(np.int64)
    attention_mask = np.ones((1, seq), np.int64)
    attention_mask[:, seq - seq // 4:] = 0  # a padded sentence: the last quarter is masked out
    return _finish(g, "bert_encoder_layer", {"input_ids": ids, "attention_mask": attention_mask},
                   {"last_hidden_state": [1, seq, dim]})


def conv_lstm_vad(frame: int = 576, hidden: int = 64) -> Model:
    """Silero VAD's shape: STFT as a strided Conv (256-sample windows, hop 128), magnitude,
    a Conv1d+Relu encoder, an LSTM stepping over the frames from the given state, and the
    speech probability of the last step."""
    g = _Layers(seed=4)
    bins, window, hop, channels = 65, 256, 128, 64
    steps = (frame - window) // hop + 1
    audio = g.node("Reshape", ["input", g.shape(1, 1, frame)])[0]
    t = np.arange(window)[None, :] * np.arange(bins)[:, None] * (2 * math.pi / window)
    hann = 0.5 - 0.5 * np.cos(2 * math.pi * np.arange(window) / window)
    basis = np.concatenate([np.cos(t), -np.sin(t)]) * hann
    spectrum = g.node("Conv", [audio, g.constant("stft", basis[:, None, :].astype(np.float32))], kernel_shape=[window],
                      strides=[hop])[0]  # [1, 2*bins, steps]
    real, imag = g.node("Split", [spectrum, g.constant("split", np.array([bins, bins], np.int64))], outputs=2, axis=1)
    power = g.node("Add", [g.node("Pow", [real, g.scalar(2.0)])[0], g.node("Pow", [imag, g.scalar(2.0)])[0]])[0]
    x = g.node("Sqrt", [power])[0]
    for c_in, c_out in ((bins, channels), (channels, channels)):
        w = g.weight(c_out, c_in, 3, fan_in=4 * c_in)
        x = g.node("Relu", [g.node("Conv", [x, w, g.vector(c_out)], kernel_shape=[3], pads=[1, 1])[0]])[0]
    sequence = g.node("Transpose", [x], perm=[2, 0, 1])[0]  # [steps, 1, channels]
    lstm_w = g.weight(1, 4 * hidden, channels, fan_in=2 * channels)
    lstm_r = g.weight(1, 4 * hidden, hidden, fan_in=2 * hidden)
    lstm_b = g.constant("b", (0.1 * g.rng.standard_normal((1, 8 * hidden))).astype(np.float32))
    _, h_n, c_n = g.node("LSTM", [sequence, lstm_w, lstm_r, lstm_b, "", "h", "c"],
                         outputs=3, hidden_size=hidden)
    last = g.node("Reshape", [h_n, g.shape(1, hidden)])[0]
    g.node("Sigmoid", [g.node("Gemm", [g.node("Relu", [last])[0], g.weight(1, hidden, fan_in=hidden),
                                        g.vector(1)], transB=1)[0]])
    _rename_output(g, g.nodes[-1].output[0], "probability")
    _rename_output(g, h_n, "hn")
    _rename_output(g, c_n, "cn")
    rng = np.random.default_rng(0)
    inputs = {"input": (0.3 * rng.standard_normal((1, frame))).astype(np.float32),
              "h": (0.5 * rng.standard_normal((1, 1, hidden))).astype(np.float32),
              "c": (0.5 * rng.standard_normal((1, 1, hidden))).astype(np.float32)}
    assert steps == 3
    return _finish(g, "conv_lstm_vad", inputs, {"probability": [1, 1], "hn": [1, 1, hidden], "cn": [1, 1, hidden]})


CLASS_GRAPHS: dict[str, Callable[[], Model]] = {
    "fpn_text_detector": fpn_text_detector,
    "c2f_block": c2f_block,
    "bert_encoder_layer": bert_encoder_layer,
    "conv_lstm_vad": conv_lstm_vad,
}
