"""Attention as exporters write it runs as one kernel whose scratch grows linearly with the
sequence: every exporter form (tests/transformer_graphs.py) compiles to a package with no Softmax
kernel and an arena below one head's score matrix, matches onnxruntime with both backends and
with threads; a constant causal mask leaves the weights. ONNX's own Attention op is covered by the
conformance sweep (tests/test_conformance.py) and a grouped-query case here."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

from aot.compiler import compile as compile_model
from tests import transformer_graphs as tg
from tests.helpers import assert_matches_onnxruntime

SOURCES = ".c"


def _c_source(package) -> str:  # noqa: ANN001 - a Package
    return "".join(data.decode() for name, data in package.files.items()
                   if name.endswith(SOURCES) and isinstance(data, bytes))


EXPORTER_FORMS = {
    "eager_div_add_mask": lambda: tg.bert_encoder(layers=1, tokens=48, width=64, heads=4, vocab=50),
    "scaled_q_no_score_scale": lambda: tg.whisper_encoder_block(frames=64, width=64, heads=2),
    "sdpa_scaled_q_and_k": lambda: tg.sdpa_export_block(tokens=48, width=64, heads=2, mask=True),
    "gpt2_where_causal": lambda: tg.causal_decoder_block(tokens=48, width=64, heads=4),
    "added_causal_mask": lambda: tg.causal_decoder_block(tokens=48, width=64, heads=4, mask_style="add"),
}


@pytest.mark.parametrize("form", sorted(EXPORTER_FORMS))
def test_exporter_attention_is_one_kernel(form: str) -> None:
    model = EXPORTER_FORMS[form]()
    package = compile_model(model)
    source = _c_source(package)
    assert "/* Softmax" not in source and "ScaledDotProductAttention <- ONNX" in source
    # The head splits and merges are strided views of the kernel, not copies.
    assert not [k for k in package.manifest["kernel_order"] if "Transpose" in k["op"]]


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("form", sorted(EXPORTER_FORMS))
def test_exporter_attention_matches_onnxruntime(form: str, backend: str) -> None:
    model = EXPORTER_FORMS[form]()
    assert_matches_onnxruntime(model, tg.example_inputs(model), backend=backend)


def test_threads_give_the_serial_results() -> None:
    model = tg.whisper_encoder_block(frames=96, width=64, heads=4)
    inputs = tg.example_inputs(model)
    serial = assert_matches_onnxruntime(model, inputs)
    threaded = assert_matches_onnxruntime(model, inputs, parallel=2)
    for name in serial:
        np.testing.assert_array_equal(serial[name], threaded[name])


def test_a_constant_causal_mask_leaves_the_weights() -> None:
    model = tg.causal_decoder_block(tokens=256, width=32, heads=2)
    arrays = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    triangle = sum(a.nbytes for a in arrays if a.dtype == np.bool_)
    assert triangle >= 256 * 256
    package = compile_model(model)
    assert package.manifest["weights_bytes"] < sum(a.nbytes for a in arrays) - triangle + 4096


def test_arena_grows_linearly_with_the_sequence() -> None:
    arenas = {frames: compile_model(tg.whisper_encoder_block(frames=frames, width=64, heads=2)).arena_bytes
              for frames in (256, 512, 1024)}
    # Quadratic growth would quadruple the arena per doubling.
    assert arenas[1024] / arenas[512] < 2.3 and arenas[512] / arenas[256] < 2.3


def _gqa_attention(batch: int = 1, q_heads: int = 4, kv_heads: int = 2, queries: int = 7, past: int = 5,
                   head: int = 8) -> onnx.ModelProto:
    """Opset-23 Attention, 3-D packed heads, grouped-query, a past cache, causal, a float mask."""
    keys = past + queries
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], ["y", "present_k", "present_v"],
                            q_num_heads=q_heads, kv_num_heads=kv_heads, is_causal=1, softcap=3.0)
    info = helper.make_tensor_value_info
    graph = helper.make_graph([node], "gqa", [
        info("q", TensorProto.FLOAT, [batch, queries, q_heads * head]),
        info("k", TensorProto.FLOAT, [batch, queries, kv_heads * head]),
        info("v", TensorProto.FLOAT, [batch, queries, kv_heads * head]),
        info("mask", TensorProto.FLOAT, [queries, keys]),
        info("past_k", TensorProto.FLOAT, [batch, kv_heads, past, head]),
        info("past_v", TensorProto.FLOAT, [batch, kv_heads, past, head])], [
        info("y", TensorProto.FLOAT, [batch, queries, q_heads * head]),
        info("present_k", TensorProto.FLOAT, [batch, kv_heads, keys, head]),
        info("present_v", TensorProto.FLOAT, [batch, kv_heads, keys, head])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_onnx_attention_grouped_query_with_past_matches_onnxruntime(backend: str) -> None:
    model = _gqa_attention()
    rng = np.random.default_rng(1)
    inputs = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
              for i in model.graph.input}
    assert_matches_onnxruntime(model, inputs, backend=backend)


def test_exporters_erf_gelu_runs_as_gelu_and_matches_onnxruntime() -> None:
    """torch's x * 0.5 * (1 + erf(x / sqrt 2)) becomes one Gelu (a multiply by 1 / sqrt 2, no
    division) in the MatMul's epilogue, in both orders exporters write the halving."""
    model = tg.vit_block(tokens=17, width=64, heads=2)
    source = _c_source(compile_model(model))
    assert "Gelu <- ONNX" in source or "+Gelu" in source
    assert "Erf" not in source
    for backend in ("c", "llvm"):
        assert_matches_onnxruntime(model, tg.example_inputs(model), backend=backend)


def test_gelu_with_the_half_taken_first_runs_as_gelu() -> None:
    const = helper.make_tensor
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["scaled"]), helper.make_node("Erf", ["scaled"], ["e"]),
             helper.make_node("Add", ["one", "e"], ["onep"]), helper.make_node("Mul", ["h", "half"], ["hh"]),
             helper.make_node("Mul", ["hh", "onep"], ["y"])]
    w = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)
    graph = helper.make_graph(nodes, "gelu_half_first",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 24])],
                              [onnx.numpy_helper.from_array(w, "w"), const("sqrt2", TensorProto.FLOAT, [], [2 ** 0.5]),
                               const("one", TensorProto.FLOAT, [], [1.0]), const("half", TensorProto.FLOAT, [], [0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    assert "Erf" not in _c_source(compile_model(model))
    assert_matches_onnxruntime(model, {"x": np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)})


def _multi_head(case: str, batch: int = 2, queries: int = 6, keys: int = 9, heads: int = 2,
                head: int = 8) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """com.microsoft MultiHeadAttention: "self" (bias, key padding, attention bias), "causal" (a
    past cache, present outputs, unidirectional) or "cross" (4-D precomputed keys and values)."""
    width, rng = heads * head, np.random.default_rng(3)
    f = TensorProto.FLOAT
    inputs: dict[str, np.ndarray] = {"q": rng.standard_normal((batch, queries, width)).astype(np.float32)}
    names = ["q", "k", "v"]
    outputs = [helper.make_tensor_value_info("y", f, [batch, queries, width])]
    if case == "cross":
        inputs["k"] = rng.standard_normal((batch, heads, keys, head)).astype(np.float32)
        inputs["v"] = rng.standard_normal((batch, heads, keys, head)).astype(np.float32)
        attrs: dict[str, object] = {}
    else:
        total = keys if case == "self" else queries
        inputs["k"] = rng.standard_normal((batch, total, width)).astype(np.float32)
        inputs["v"] = rng.standard_normal((batch, total, width)).astype(np.float32)
        attrs = {"unidirectional": 1} if case == "causal" else {"mask_filter_value": -5000.0}
    if case == "self":
        inputs["bias"] = rng.standard_normal(3 * width).astype(np.float32)
        padding = np.ones((batch, keys), np.int32)
        padding[:, -2:] = 0
        padding[1, :] = 0  # a batch with every key padded: onnxruntime adds the filter value to all
        inputs["padding"] = padding
        inputs["attention_bias"] = rng.standard_normal((1, heads, queries, keys)).astype(np.float32)
        names += ["bias", "padding", "attention_bias"]
    if case == "causal":
        past = 4
        for name in ("past_k", "past_v"):
            inputs[name] = rng.standard_normal((batch, heads, past, head)).astype(np.float32)
        names += ["", "", "", "past_k", "past_v"]
        outputs += [helper.make_tensor_value_info(n, f, [batch, heads, past + queries, head])
                    for n in ("present_k", "present_v")]
    node = helper.make_node("MultiHeadAttention", names, [o.name for o in outputs], domain="com.microsoft",
                            num_heads=heads, **attrs)
    dtypes = {np.dtype(np.float32): f, np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph([node], f"mha_{case}", [
        helper.make_tensor_value_info(n, dtypes[a.dtype], list(a.shape)) for n, a in inputs.items()], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model, inputs


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("case", ["self", "causal", "cross"])
def test_multi_head_attention_matches_onnxruntime(case: str, backend: str) -> None:
    model, inputs = _multi_head(case)
    assert_matches_onnxruntime(model, inputs, backend=backend)
