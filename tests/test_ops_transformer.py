"""The transformer ops exporters and onnxruntime's tools write: RMSNormalization and
RotaryEmbedding (ai.onnx opset 23), SimplifiedLayerNormalization (onnxruntime's, in the ai.onnx
domain), and com.microsoft SkipLayerNormalization, SkipSimplifiedLayerNormalization, FastGelu,
QuickGelu, BiasGelu and RotaryEmbedding, each on transformer-sized inputs (hidden 256, 4 heads of
64, 128 tokens) against onnxruntime, with every optional input and output present and absent; a
small decoder block chaining them; one-line errors naming the node for what they refuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.errors import AotError, ModelLoadError, NodeError
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime
from tests.test_cli import aot

MS = "com.microsoft"
BATCH, SEQ, HIDDEN, HEADS, HEAD = 1, 128, 256, 4, 64
POSITIONS = 256  # rows of the cos/sin caches


def contrib_model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
                  initializers: dict[str, np.ndarray] | None = None, *, opset: int = 17,
                  output_shapes: dict[str, list[int]] | None = None) -> onnx.ModelProto:
    """Inputs typed and shaped from their arrays; float outputs unsized (onnx cannot size contrib
    ops) unless `output_shapes` gives them."""
    shapes = output_shapes or {}
    onnx_type = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
    graph = helper.make_graph(
        nodes, "transformer",
        [helper.make_tensor_value_info(n, onnx_type[a.dtype], list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes.get(n)) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


def hidden_states(seed: int = 0) -> np.ndarray:
    return rand(BATCH, SEQ, HIDDEN, seed=seed) * 2 + 0.5


def caches(half: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin caches of real angles, [positions, half]."""
    inv_freq = 1.0 / (10000 ** (np.arange(half) / half))
    angles = np.arange(POSITIONS)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def position_ids(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, POSITIONS, (BATCH, SEQ)).astype(np.int64)


# -- normalizations ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape,axis,scale_shape,attrs", [
    ((BATCH, SEQ, HIDDEN), None, (HIDDEN,), {}),
    ((BATCH, SEQ, HIDDEN), -1, (HIDDEN,), {"epsilon": 1e-3}),
    ((2, 4, 16, 32), 2, (1, 32), {}),  # two normalised axes, scale broadcast over one
    ((4, 8, 16), 0, (8, 16), {"stash_type": 1}),
], ids=["default", "epsilon", "two_axes_broadcast", "axis0"])
def test_rms_normalization(shape: tuple[int, ...], axis: int | None, scale_shape: tuple[int, ...],
                           attrs: dict) -> None:
    x = rand(*shape) * 2 + 0.5
    if axis is not None:
        attrs = {**attrs, "axis": axis}
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], **attrs)
    model = make_model([node], {"x": x}, ["y"], {"scale": rand(*scale_shape, seed=1)}, opset=23)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("stash_type", [1, 11])
def test_rms_normalization_float64_statistics_in_the_stash_type(stash_type: int) -> None:
    x = rand(8, HIDDEN, dtype=np.float64) * 2 + 0.5
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], stash_type=stash_type)
    model = make_model([node], {"x": x}, ["y"], {"scale": rand(HIDDEN, seed=1, dtype=np.float64)}, opset=23)
    assert_matches_onnxruntime(model, {"x": x}, tolerance=1e-6)


@pytest.mark.parametrize("outputs", [["y"], ["y", "inv_std_var"]], ids=["y", "inv_std_var"])
def test_simplified_layer_normalization(outputs: list[str]) -> None:
    x = hidden_states()
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outputs, axis=-1, epsilon=1e-6)
    model = contrib_model([node], {"x": x}, outputs, {"scale": rand(HIDDEN, seed=1)})
    assert_matches_onnxruntime(model, {"x": x})


SKIP_OUTPUTS = {
    "output": ["y"],
    "all": ["y", "mean", "inv_std_var", "sum"],
    "sum_only_extra": ["y", "", "", "sum"],
    "statistics": ["y", "mean", "inv_std_var"],
}


@pytest.mark.parametrize("outputs", sorted(SKIP_OUTPUTS))
@pytest.mark.parametrize("beta,bias", [(True, True), (False, False), (True, False), (False, True)],
                         ids=["beta_bias", "plain", "beta", "bias"])
def test_skip_layer_normalization(beta: bool, bias: bool, outputs: str) -> None:
    x, skip = hidden_states(), hidden_states(seed=1)
    inits = {"gamma": rand(HIDDEN, seed=2)}
    names = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    if beta:
        inits["beta"] = rand(HIDDEN, seed=3)
    if bias:
        inits["bias"] = rand(HIDDEN, seed=4)
    node_outputs = SKIP_OUTPUTS[outputs]
    node = helper.make_node("SkipLayerNormalization", names, node_outputs, domain=MS, epsilon=1e-5)
    model = contrib_model([node], {"x": x, "skip": skip}, [o for o in node_outputs if o], inits)
    assert_matches_onnxruntime(model, {"x": x, "skip": skip})


@pytest.mark.parametrize("outputs", sorted(SKIP_OUTPUTS))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_skip_simplified_layer_normalization(bias: bool, outputs: str) -> None:
    x, skip = hidden_states(), hidden_states(seed=1)
    inits = {"gamma": rand(HIDDEN, seed=2)}
    if bias:
        inits["bias"] = rand(HIDDEN, seed=4)
    node_outputs = [o for o in SKIP_OUTPUTS[outputs] if o != "mean"]  # RMSNorm has no mean
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias" if bias else ""],
                            node_outputs, domain=MS, epsilon=1e-6)
    model = contrib_model([node], {"x": x, "skip": skip}, [o for o in node_outputs if o], inits)
    assert_matches_onnxruntime(model, {"x": x, "skip": skip})


@pytest.mark.parametrize("skip_shape", [(SEQ, HIDDEN), (1, SEQ, HIDDEN)], ids=["2d", "batch1"])
def test_skip_layer_normalization_skip_repeats_over_the_batch(skip_shape: tuple[int, ...]) -> None:
    """A skip without batch (or of batch 1) is added to every batch, as onnxruntime reads it; the
    default epsilon is onnxruntime's."""
    x, skip = rand(3, SEQ, HIDDEN), rand(*skip_shape, seed=1)
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y", "", "", "sum"], domain=MS)
    model = contrib_model([node], {"x": x, "skip": skip}, ["y", "sum"], {"gamma": rand(HIDDEN, seed=2)})
    assert_matches_onnxruntime(model, {"x": x, "skip": skip})


# -- GELU forms -------------------------------------------------------------------------------


@pytest.mark.parametrize("op,inputs,attrs", [
    ("FastGelu", ["x"], {}),
    ("FastGelu", ["x", "bias"], {}),
    ("QuickGelu", ["x"], {}),
    ("QuickGelu", ["x"], {"alpha": 1.0}),
    ("BiasGelu", ["x", "bias"], {}),
], ids=["fast", "fast_bias", "quick", "quick_alpha", "bias_gelu"])
def test_gelu_forms(op: str, inputs: list[str], attrs: dict) -> None:
    x = rand(BATCH, SEQ, 4 * HIDDEN) * 3
    inits = {"bias": rand(4 * HIDDEN, seed=1)} if "bias" in inputs else {}
    node = helper.make_node(op, inputs, ["y"], domain=MS, **attrs)
    assert_matches_onnxruntime(contrib_model([node], {"x": x}, ["y"], inits), {"x": x})


def test_gelu_form_fuses_into_the_matmul_before_it() -> None:
    x = hidden_states()
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("FastGelu", ["h", "bias"], ["y"], domain=MS)]
    model = contrib_model(nodes, {"x": x}, ["y"], {"w": rand(HIDDEN, 2 * HIDDEN, seed=1) * 0.1,
                                                   "bias": rand(2 * HIDDEN, seed=2)})
    assert_matches_onnxruntime(model, {"x": x})
    assert len(compile_model(model).manifest["kernel_order"]) == 1


# -- rotary embeddings ------------------------------------------------------------------------

ONNX_ROTARY = {
    # name: (input shape, attrs, with position ids)
    "bnsh": ((BATCH, HEADS, SEQ, HEAD), {}, True),
    "bnsh_interleaved": ((BATCH, HEADS, SEQ, HEAD), {"interleaved": 1}, True),
    "bnsh_partial": ((BATCH, HEADS, SEQ, HEAD), {"rotary_embedding_dim": 32}, True),
    "packed_3d": ((BATCH, SEQ, HIDDEN), {"num_heads": HEADS}, True),
    "packed_3d_interleaved_partial": ((BATCH, SEQ, HIDDEN), {"num_heads": HEADS, "interleaved": 1,
                                                            "rotary_embedding_dim": 16}, True),
    "no_position_ids": ((BATCH, HEADS, SEQ, HEAD), {}, False),
    "no_position_ids_3d_partial": ((BATCH, SEQ, HIDDEN), {"num_heads": HEADS, "rotary_embedding_dim": 32}, False),
}


@pytest.mark.parametrize("case", sorted(ONNX_ROTARY))
def test_rotary_embedding(case: str) -> None:
    shape, attrs, with_ids = ONNX_ROTARY[case]
    half = attrs.get("rotary_embedding_dim", HEAD) // 2
    cos, sin = caches(half)
    x = rand(*shape)
    feeds: dict[str, np.ndarray] = {"x": x}
    if with_ids:
        feeds["position_ids"] = position_ids()
        inits = {"cos": cos, "sin": sin}
    else:  # caches already gathered per token: [batch, sequence, half]
        ids = position_ids()
        inits = {"cos": cos[ids], "sin": sin[ids]}
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "position_ids" if with_ids else ""], ["y"],
                            **attrs)
    model = make_model([node], feeds, ["y"], inits, opset=23)
    assert_matches_onnxruntime(model, feeds)


MS_ROTARY = {
    # name: (input shape, attrs, position ids: "tokens" [batch, sequence] or "start" [1])
    "bnsh": ((BATCH, HEADS, SEQ, HEAD), {}, "tokens"),
    "bnsh_start": ((BATCH, HEADS, SEQ, HEAD), {"interleaved": 1}, "start"),
    "packed_3d": ((BATCH, SEQ, HIDDEN), {"num_heads": HEADS}, "tokens"),
    "packed_3d_heads_from_cache": ((BATCH, SEQ, HIDDEN), {}, "start"),
    "packed_3d_interleaved": ((2, SEQ, HIDDEN), {"num_heads": HEADS, "interleaved": 1}, "tokens"),
    "packed_3d_partial": ((BATCH, SEQ, HIDDEN), {"num_heads": HEADS, "rotary_embedding_dim": 32}, "tokens"),
}


@pytest.mark.parametrize("case", sorted(MS_ROTARY))
def test_ms_rotary_embedding(case: str) -> None:
    shape, attrs, ids = MS_ROTARY[case]
    cos, sin = caches(attrs.get("rotary_embedding_dim", HEAD) // 2)
    x = rand(*shape)
    batch = shape[0]
    pos = (np.random.default_rng(3).integers(0, POSITIONS - SEQ, (batch, SEQ)) if ids == "tokens"
           else np.array([7])).astype(np.int64)
    node = helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos", "sin"], ["y"], domain=MS, **attrs)
    feeds = {"x": x, "position_ids": pos}
    model = contrib_model([node], feeds, ["y"], {"cos": cos, "sin": sin})
    assert_matches_onnxruntime(model, feeds)


def test_rotary_position_ids_outside_the_cache_are_clamped() -> None:
    """onnxruntime refuses them at run time; aot reads the nearest cache row instead of memory
    outside the cache."""
    cos, sin = caches(HEAD // 2)
    x = rand(BATCH, HEADS, SEQ, HEAD)
    ids = position_ids()
    ids[0, :3] = [-5, POSITIONS, 10**12]
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "position_ids"], ["y"])
    model = make_model([node], {"x": x, "position_ids": ids}, ["y"], {"cos": cos, "sin": sin}, opset=23)
    clamped = {"x": x, "position_ids": np.clip(ids, 0, POSITIONS - 1)}
    ours = run_aot(model, {"x": x, "position_ids": ids})["y"]
    np.testing.assert_allclose(ours, run_onnxruntime(model, clamped)["y"], rtol=1e-5, atol=1e-5)


# -- a decoder block --------------------------------------------------------------------------


def decoder_block() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """RMSNorm -> Q projection -> rotary -> output projection -> residual + RMSNorm -> MLP with
    FastGelu -> residual + RMSNorm, the ops onnxruntime's model builder writes."""
    x = hidden_states()
    cos, sin = caches(HEAD // 2)
    w = {name: rand(*shape, seed=i + 10) * 0.06 for i, (name, shape) in enumerate(
        [("wq", (HIDDEN, HIDDEN)), ("wo", (HIDDEN, HIDDEN)), ("w_up", (HIDDEN, 2 * HIDDEN)),
         ("w_down", (2 * HIDDEN, HIDDEN))])}
    inits = {**w, "cos": cos, "sin": sin, "g1": rand(HIDDEN, seed=1), "g2": rand(HIDDEN, seed=2),
             "g3": rand(HIDDEN, seed=3), "up_bias": rand(2 * HIDDEN, seed=4)}
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "g1"], ["n1"], name="input_norm", epsilon=1e-6),
        helper.make_node("MatMul", ["n1", "wq"], ["q"], name="q_proj"),
        helper.make_node("RotaryEmbedding", ["q", "position_ids", "cos", "sin"], ["q_rot"], name="q_rotary",
                         domain=MS, num_heads=HEADS),
        helper.make_node("MatMul", ["q_rot", "wo"], ["attn"], name="o_proj"),
        helper.make_node("SkipSimplifiedLayerNormalization", ["attn", "x", "g2"], ["n2", "", "", "residual"],
                         name="post_attention_norm", domain=MS, epsilon=1e-6),
        helper.make_node("MatMul", ["n2", "w_up"], ["up"], name="up_proj"),
        helper.make_node("FastGelu", ["up", "up_bias"], ["act"], name="act", domain=MS),
        helper.make_node("MatMul", ["act", "w_down"], ["down"], name="down_proj"),
        helper.make_node("SkipSimplifiedLayerNormalization", ["down", "residual", "g3"], ["y"],
                         name="final_norm", domain=MS, epsilon=1e-6),
    ]
    feeds = {"x": x, "position_ids": np.array([0], np.int64)}
    model = contrib_model(nodes, feeds, ["y", "residual"], inits,
                          output_shapes={"y": [BATCH, SEQ, HIDDEN], "residual": [BATCH, SEQ, HIDDEN]})
    return model, feeds


def test_decoder_block_matches_onnxruntime() -> None:
    model, feeds = decoder_block()
    assert_matches_onnxruntime(model, feeds)


def test_decoder_block_with_parallel_loops_matches_onnxruntime() -> None:
    model, feeds = decoder_block()
    assert_matches_onnxruntime(model, feeds, parallel=True)


def test_inspect_lists_the_decoder_block_ops_as_supported(tmp_path: Path) -> None:
    model, _ = decoder_block()
    path = tmp_path / "decoder.onnx"
    onnx.save(model, path)
    result = aot("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["supported"] and not report["unsupported"]
    ops = set(report["op_counts"])
    assert {"SimplifiedLayerNormalization", f"{MS}::RotaryEmbedding", f"{MS}::SkipSimplifiedLayerNormalization",
            f"{MS}::FastGelu"} <= ops, ops
    assert [o["shape"] for o in report["outputs"]] == [[BATCH, SEQ, HIDDEN]] * 2


# -- errors -----------------------------------------------------------------------------------


def _refusal(model: onnx.ModelProto, error: type[AotError] = NodeError) -> str:
    with pytest.raises(error) as raised:
        compile_model(model)
    message = str(raised.value)
    assert "\n" not in message and "bad_node" in message, message
    return message


def test_rotary_3d_without_num_heads_is_refused() -> None:
    cos, sin = caches(HEAD // 2)
    x = rand(BATCH, SEQ, HIDDEN)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "position_ids"], ["y"], name="bad_node")
    feeds = {"x": x, "position_ids": position_ids()}
    model = contrib_model([node], feeds, ["y"], {"cos": cos, "sin": sin}, opset=23)
    assert "num_heads" in _refusal(model, ModelLoadError)  # onnx's shape inference knows this op


@pytest.mark.parametrize("attrs,fragment", [
    ({"rotary_embedding_dim": 33, "num_heads": HEADS}, "even"),
    ({"is_packed_batching": 1}, "is_packed_batching"),
    ({"rotary_embedding_dim": 32}, "num_heads"),
    ({"num_heads": 3}, "multiple of num_heads"),
], ids=["odd_dim", "packed_batching", "dim_without_heads", "heads_do_not_divide"])
def test_ms_rotary_bad_attributes_are_refused(attrs: dict, fragment: str) -> None:
    cos, sin = caches(HEAD // 2)
    x = rand(BATCH, SEQ, HIDDEN)
    node = helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos", "sin"], ["y"], name="bad_node",
                            domain=MS, **attrs)
    feeds = {"x": x, "position_ids": position_ids()}
    assert fragment in _refusal(contrib_model([node], feeds, ["y"], {"cos": cos, "sin": sin}))


def test_skip_layer_normalization_wrong_gamma_is_refused() -> None:
    x = hidden_states()
    node = helper.make_node("SkipLayerNormalization", ["x", "x", "gamma"], ["y"], name="bad_node", domain=MS)
    model = contrib_model([node], {"x": x}, ["y"], {"gamma": rand(HIDDEN // 2)})
    assert "gamma" in _refusal(model)


def test_skip_of_another_shape_is_refused() -> None:
    x, skip = hidden_states(), rand(2, SEQ, HIDDEN)
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y"], name="bad_node",
                            domain=MS)
    model = contrib_model([node], {"x": x, "skip": skip}, ["y"], {"gamma": rand(HIDDEN)})
    assert "skip has shape [2, 128, 256]" in _refusal(model)


def test_fast_gelu_bias_of_the_wrong_size_is_refused() -> None:
    x = hidden_states()
    node = helper.make_node("FastGelu", ["x", "bias"], ["y"], name="bad_node", domain=MS)
    model = contrib_model([node], {"x": x}, ["y"], {"bias": rand(HIDDEN + 1)})
    assert "bias" in _refusal(model)


def test_rms_normalization_integer_input_is_refused() -> None:
    x = np.arange(16, dtype=np.int64).reshape(2, 8)
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="bad_node")
    model = contrib_model([node], {"x": x}, ["y"], {"scale": rand(8)})
    assert "float" in _refusal(model)
