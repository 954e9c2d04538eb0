"""Small realistic models for the recurrent, attention, normalisation, resize and transposed
convolution ops, built with onnx.helper and checked end to end against onnxruntime: the ops
must compose (scratch tensors, aliases, fused neighbours) and not only pass one node at a time."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import BIT_EXACT_TARGET, assert_matches_onnxruntime, make_model, rand, run_aot
from tests.test_llvm_backend import assert_same_bits

Model = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _w(*shape: int, seed: int, scale: float | None = None) -> np.ndarray:
    """Weights with fan-in scaling, so activations stay in a realistic range through the model."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return rand(*shape, seed=seed) * (scale if scale is not None else 1.0 / math.sqrt(fan_in))


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def lstm_voice_activity_detector() -> Model:
    """Frames of log-mel features -> Conv1d frontend -> LSTM -> per-frame Gemm -> Sigmoid."""
    mels, frames, channels, hidden = 16, 40, 24, 32
    feats = rand(1, mels, frames)
    nodes = [
        helper.make_node("Conv", ["feats", "conv_w", "conv_b"], ["conv"], pads=[1, 1]),
        helper.make_node("Relu", ["conv"], ["act"]),
        helper.make_node("Transpose", ["act"], ["seq"], perm=[2, 0, 1]),  # [T, N, C]
        helper.make_node("LSTM", ["seq", "w", "r", "b"], ["y", "y_h", "y_c"], hidden_size=hidden),
        helper.make_node("Reshape", ["y", "flat_shape"], ["flat"]),  # [T, hidden]
        helper.make_node("Gemm", ["flat", "out_w", "out_b"], ["logits"], transB=1),
        helper.make_node("Sigmoid", ["logits"], ["speech"]),
    ]
    inits = {
        "conv_w": _w(channels, mels, 3, seed=1), "conv_b": rand(channels, seed=2) * 0.1,
        "w": _w(1, 4 * hidden, channels, seed=3), "r": _w(1, 4 * hidden, hidden, seed=4),
        "b": rand(1, 8 * hidden, seed=5) * 0.1, "flat_shape": _i64(frames, hidden),
        "out_w": _w(1, hidden, seed=6), "out_b": np.zeros(1, np.float32),
    }
    return make_model(nodes, {"feats": feats}, ["speech", "y_h", "y_c"], inits, opset=17), {"feats": feats}


def bidirectional_gru_tagger_with_lengths() -> Model:
    """A batch of padded sequences through a bidirectional GRU (per-row lengths), then a
    per-step linear layer over both directions (MatMul on [T, N, 2H])."""
    steps, batch, features, hidden, tags = 12, 3, 10, 16, 5
    x = rand(steps, batch, features)
    nodes = [
        helper.make_node("GRU", ["x", "w", "r", "b", "lens"], ["y", "y_h"], hidden_size=hidden,
                         direction="bidirectional", linear_before_reset=1),
        helper.make_node("Transpose", ["y"], ["y_t"], perm=[0, 2, 1, 3]),  # [T, N, 2, H]
        helper.make_node("Reshape", ["y_t", "shape"], ["both"]),  # [T, N, 2H]
        helper.make_node("MatMul", ["both", "proj"], ["scores"]),
        helper.make_node("LogSoftmax", ["scores"], ["tags"], axis=-1),
    ]
    inits = {
        "w": _w(2, 3 * hidden, features, seed=1), "r": _w(2, 3 * hidden, hidden, seed=2),
        "b": rand(2, 6 * hidden, seed=3) * 0.1, "lens": np.array([12, 7, 3], np.int32),
        "shape": _i64(steps, batch, 2 * hidden), "proj": _w(2 * hidden, tags, seed=4),
    }
    return make_model(nodes, {"x": x}, ["tags", "y_h"], inits), {"x": x}


def transformer_encoder_block() -> Model:
    """Pre-norm encoder block: LayerNorm, multi-head attention written with Einsum, Softmax,
    residual, LayerNorm, MLP with exact (Erf) Gelu, residual."""
    batch, seq, dim, heads = 2, 8, 32, 4
    head_dim, mlp = dim // heads, 4 * dim
    x = rand(batch, seq, dim)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["h1"], axis=-1, epsilon=1e-5),
    ]
    for name in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", ["h1", f"w{name}"], [f"{name}_lin"]),
            helper.make_node("Add", [f"{name}_lin", f"b{name}"], [f"{name}_flat"]),
            helper.make_node("Reshape", [f"{name}_flat", "heads_shape"], [name]),  # [B, S, H, dh]
        ]
    nodes += [
        helper.make_node("Einsum", ["q", "k"], ["scores_raw"], equation="bqhd,bkhd->bhqk"),
        helper.make_node("Mul", ["scores_raw", "inv_sqrt_dh"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("Einsum", ["attn", "v"], ["ctx"], equation="bhqk,bkhd->bqhd"),
        helper.make_node("Reshape", ["ctx", "model_shape"], ["ctx_flat"]),
        helper.make_node("MatMul", ["ctx_flat", "wo"], ["o_lin"]),
        helper.make_node("Add", ["o_lin", "bo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "ln2_g", "ln2_b"], ["h2"], axis=-1),
        helper.make_node("MatMul", ["h2", "w1"], ["f1_lin"]),
        helper.make_node("Add", ["f1_lin", "b1"], ["f1"]),
        # Gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
        helper.make_node("Div", ["f1", "sqrt2"], ["f1_s"]),
        helper.make_node("Erf", ["f1_s"], ["erf"]),
        helper.make_node("Add", ["erf", "one"], ["erf1"]),
        helper.make_node("Mul", ["f1", "erf1"], ["g0"]),
        helper.make_node("Mul", ["g0", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "w2"], ["f2_lin"]),
        helper.make_node("Add", ["f2_lin", "b2"], ["f2"]),
        helper.make_node("Add", ["res1", "f2"], ["y"]),
    ]
    f32 = np.float32
    inits = {
        "ln1_g": 1 + rand(dim, seed=1) * 0.1, "ln1_b": rand(dim, seed=2) * 0.1,
        "ln2_g": 1 + rand(dim, seed=3) * 0.1, "ln2_b": rand(dim, seed=4) * 0.1,
        "heads_shape": _i64(batch, seq, heads, head_dim), "model_shape": _i64(batch, seq, dim),
        "inv_sqrt_dh": np.array(1 / math.sqrt(head_dim), f32), "sqrt2": np.array(math.sqrt(2), f32),
        "one": np.array(1, f32), "half": np.array(0.5, f32),
        "wo": _w(dim, dim, seed=5), "bo": rand(dim, seed=6) * 0.1,
        "w1": _w(dim, mlp, seed=7), "b1": rand(mlp, seed=8) * 0.1,
        "w2": _w(mlp, dim, seed=9), "b2": rand(dim, seed=10) * 0.1,
    }
    for i, name in enumerate(("q", "k", "v")):
        inits[f"w{name}"] = _w(dim, dim, seed=20 + i)
        inits[f"b{name}"] = rand(dim, seed=30 + i) * 0.1
    return make_model(nodes, {"x": x}, ["y"], inits, opset=17), {"x": x}


def style_transfer_decoder() -> Model:
    """Conv -> InstanceNorm -> Relu, upsampled twice (ConvTranspose, then nearest Resize + Conv,
    as style-transfer and GAN generators do), InstanceNorm between, Tanh output."""
    image = rand(1, 3, 16, 16)
    nodes = [
        helper.make_node("Conv", ["image", "c1_w", "c1_b"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),  # 8x8
        helper.make_node("InstanceNormalization", ["c1", "in1_s", "in1_b"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "up_w", "up_b"], ["u1"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1]),  # 16x16
        helper.make_node("InstanceNormalization", ["u1", "in2_s", "in2_b"], ["n2"], epsilon=1e-3),
        helper.make_node("Relu", ["n2"], ["r2"]),
        helper.make_node("Resize", ["r2", "", "scales"], ["u2"], mode="nearest"),  # 32x32
        helper.make_node("Conv", ["u2", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["c2"], ["y"]),
    ]
    inits = {
        "c1_w": _w(8, 3, 3, 3, seed=1), "c1_b": rand(8, seed=2) * 0.1,
        "in1_s": 1 + rand(8, seed=3) * 0.1, "in1_b": rand(8, seed=4) * 0.1,
        "up_w": _w(8, 6, 3, 3, seed=5), "up_b": rand(6, seed=6) * 0.1,
        "in2_s": 1 + rand(6, seed=7) * 0.1, "in2_b": rand(6, seed=8) * 0.1,
        "scales": np.array([1, 1, 2, 2], np.float32),
        "c2_w": _w(3, 6, 3, 3, seed=9), "c2_b": rand(3, seed=10) * 0.1,
    }
    return make_model(nodes, {"image": image}, ["y"], inits, opset=13), {"image": image}


def feature_pyramid_with_bilinear_resize_and_lrn() -> Model:
    """An AlexNet-style stem (Conv, Relu, LRN, MaxPool) feeding a two-level feature pyramid:
    the coarse map is resized (bilinear, to the fine map's size via `sizes`) and added."""
    image = rand(1, 3, 24, 20)
    nodes = [
        helper.make_node("Conv", ["image", "stem_w", "stem_b"], ["stem"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["stem"], ["stem_r"]),
        helper.make_node("LRN", ["stem_r"], ["stem_n"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
        helper.make_node("MaxPool", ["stem_n"], ["fine"], kernel_shape=[2, 2], strides=[2, 2]),  # 12x10
        helper.make_node("Conv", ["fine", "down_w", "down_b"], ["coarse_c"], strides=[2, 2],
                         pads=[1, 1, 1, 1]),  # 6x5
        helper.make_node("Relu", ["coarse_c"], ["coarse"]),
        helper.make_node("Resize", ["coarse", "", "", "sizes"], ["up"], mode="linear",
                         coordinate_transformation_mode="half_pixel"),
        helper.make_node("Conv", ["fine", "lat_w"], ["lateral"]),
        helper.make_node("Add", ["up", "lateral"], ["merged"]),
        helper.make_node("Resize", ["merged", "", "", "out_sizes"], ["y"], mode="cubic",
                         coordinate_transformation_mode="align_corners"),
    ]
    inits = {
        "stem_w": _w(8, 3, 3, 3, seed=1), "stem_b": rand(8, seed=2) * 0.1,
        "down_w": _w(8, 8, 3, 3, seed=3), "down_b": rand(8, seed=4) * 0.1,
        "sizes": _i64(1, 8, 12, 10), "lat_w": _w(8, 8, 1, 1, seed=5), "out_sizes": _i64(1, 8, 17, 15),
    }
    return make_model(nodes, {"image": image}, ["y"], inits, opset=19), {"image": image}


MODELS = {f.__name__: f for f in (lstm_voice_activity_detector, bidirectional_gru_tagger_with_lengths,
                                  transformer_encoder_block, style_transfer_decoder,
                                  feature_pyramid_with_bilinear_resize_and_lrn)}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name: str) -> None:
    model, feeds = MODELS[name]()
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("name", list(MODELS))
def test_llvm_and_c_agree_bit_for_bit(name: str) -> None:
    """The kernels these ops lower to print the same arithmetic in both backends."""
    model, feeds = MODELS[name]()
    c = run_aot(model, feeds, backend="c", target=BIT_EXACT_TARGET)
    llvm = run_aot(model, feeds, backend="llvm", target=BIT_EXACT_TARGET)
    for output, value in c.items():
        assert_same_bits(llvm[output], value, f"{name} output {output!r} llvm vs c")
