"""Graph passes: each one changes the graph the way it claims, and the model still computes the
same as onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.compiler import load
from aot.ir.verifier import verify_graph
from aot.passes.cse import eliminate_common_subexpressions
from aot.passes.fold_affine import fold_affine_into_weights
from aot.passes.layout_cancel import cancel_layout_ops
from aot.passes.pipeline import run_passes
from aot.passes.remove_identity import remove_identities
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def ops_after(model: onnx.ModelProto, *passes) -> list[str]:  # noqa: ANN002
    graph, _ = load(model)
    for p in passes:
        p(graph)
        verify_graph(graph)
    return [n.op_type for n in graph.nodes]


def bn_params(c: int, seed: int = 0) -> dict[str, np.ndarray]:
    return {"s": rand(c, seed=seed + 1), "b": rand(c, seed=seed + 2), "m": rand(c, seed=seed + 3),
            "v": np.abs(rand(c, seed=seed + 4)) + 0.2}


def test_batchnorm_folds_into_conv() -> None:
    x = rand(1, 3, 8, 8)
    inits = {"w": rand(4, 3, 3, 3, seed=9), "cb": rand(4, seed=8), **bn_params(4)}
    model = make_model([helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])],
                       {"x": x}, ["y"], inits)
    assert ops_after(model, fold_affine_into_weights) == ["Conv"]
    assert_matches_onnxruntime(model, {"x": x})


def test_mul_add_chain_folds_into_depthwise_conv_without_bias() -> None:
    x = rand(1, 4, 6, 6)
    inits = {"w": rand(4, 1, 3, 3, seed=9), "k": rand(4, 1, 1, seed=3), "a": rand(1, 4, 1, 1, seed=4)}
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], group=4, pads=[1, 1, 1, 1]),
                        helper.make_node("Mul", ["k", "c"], ["m"]),
                        helper.make_node("Sub", ["m", "a"], ["y"])], {"x": x}, ["y"], inits)
    assert ops_after(model, fold_affine_into_weights) == ["Conv"]
    assert_matches_onnxruntime(model, {"x": x})


def test_constant_minus_conv_folds_with_negated_weights() -> None:
    x = rand(1, 2, 5, 5)
    inits = {"w": rand(3, 2, 1, 1, seed=9), "a": rand(3, 1, 1, seed=4)}
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sub", ["a", "c"], ["y"])],
                       {"x": x}, ["y"], inits)
    assert ops_after(model, fold_affine_into_weights) == ["Conv"]
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 5)], ids=str)
def test_batchnorm_folds_into_gemm(trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    a = rand(3, 4)
    inits = {"wb": rand(5, 4, seed=1) if trans_b else rand(4, 5, seed=1), **bn_params(5)}
    inputs = ["a", "wb"]
    if c_shape:
        inits["c"] = rand(*c_shape, seed=7)
        inputs.append("c")
    model = make_model([helper.make_node("Gemm", inputs, ["g"], transB=trans_b, alpha=0.5, beta=2.0),
                        helper.make_node("BatchNormalization", ["g", "s", "b", "m", "v"], ["y"])],
                       {"a": a}, ["y"], inits)
    assert ops_after(model, fold_affine_into_weights) == ["Gemm"]
    assert_matches_onnxruntime(model, {"a": a})


def test_matmul_plus_bias_becomes_gemm() -> None:
    a = rand(3, 4)
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                       {"a": a}, ["y"], {"w": rand(4, 6, seed=1), "b": rand(6, seed=2)})
    assert ops_after(model, fold_affine_into_weights) == ["Gemm"]
    assert_matches_onnxruntime(model, {"a": a})


def test_no_fold_when_the_conv_output_is_also_read_elsewhere() -> None:
    x = rand(1, 2, 4, 4)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "k"], ["y"]),
                        helper.make_node("Relu", ["c"], ["z"])],
                       {"x": x}, ["y", "z"], {"w": rand(2, 2, 1, 1, seed=1), "k": rand(2, 1, 1, seed=2)})
    assert ops_after(model, fold_affine_into_weights) == ["Conv", "Mul", "Relu"]


def test_no_fold_for_non_per_channel_constant() -> None:
    x = rand(1, 2, 4, 4)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "k"], ["y"])],
                       {"x": x}, ["y"], {"w": rand(2, 2, 1, 1, seed=1), "k": rand(4, 4, seed=2)})
    assert ops_after(model, fold_affine_into_weights) == ["Conv", "Mul"]
    assert_matches_onnxruntime(model, {"x": x})


def test_identity_and_dropout_are_removed_but_named_outputs_stay() -> None:
    x = rand(2, 3)
    model = make_model([helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Dropout", ["a"], ["b"]),
                        helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Identity", ["c"], ["y"])],
                       {"x": x}, ["y"])
    assert ops_after(model, remove_identities) == ["Relu", "Identity"]
    assert_matches_onnxruntime(model, {"x": x})


def test_transpose_pairs_cancel_and_compose() -> None:
    x = rand(2, 3, 4)
    model = make_model([helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1]),
                        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1]),
                        helper.make_node("Relu", ["b"], ["r"]),
                        helper.make_node("Transpose", ["r"], ["c"], perm=[1, 0, 2]),
                        helper.make_node("Transpose", ["c"], ["y"], perm=[2, 1, 0])], {"x": x}, ["y"])
    assert ops_after(model, cancel_layout_ops) == ["Relu", "Transpose"]
    assert_matches_onnxruntime(model, {"x": x})


def test_view_chains_collapse() -> None:
    x = rand(2, 3, 4)
    model = make_model([helper.make_node("Flatten", ["x"], ["a"], axis=1),
                        helper.make_node("Unsqueeze", ["a", "ax"], ["b"]),
                        helper.make_node("Reshape", ["b", "shape"], ["c"]),
                        helper.make_node("Sigmoid", ["c"], ["y"])], {"x": x}, ["y"],
                       {"ax": np.array([0], dtype=np.int64), "shape": np.array([4, 6], dtype=np.int64)})
    assert ops_after(model, cancel_layout_ops) == ["Reshape", "Sigmoid"]
    assert_matches_onnxruntime(model, {"x": x})


def test_common_subexpressions_and_duplicate_constants_merge() -> None:
    x = rand(2, 3)
    model = make_model([helper.make_node("Mul", ["x", "k1"], ["a"]), helper.make_node("Mul", ["x", "k2"], ["b"]),
                        helper.make_node("Sigmoid", ["a"], ["sa"]), helper.make_node("Sigmoid", ["b"], ["sb"]),
                        helper.make_node("Add", ["sa", "sb"], ["y"])],
                       {"x": x}, ["y"], {"k1": np.full(3, 0.5, np.float32), "k2": np.full(3, 0.5, np.float32)})
    assert ops_after(model, eliminate_common_subexpressions) == ["Mul", "Sigmoid", "Add"]
    assert_matches_onnxruntime(model, {"x": x})


def test_full_pipeline_keeps_the_ir_valid_on_the_example() -> None:
    from pathlib import Path

    graph, _ = load(Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx")
    before = len(graph.nodes)
    run_passes(graph)
    ops = [n.op_type for n in graph.nodes]
    assert "BatchNormalization" not in ops and len(ops) < before
