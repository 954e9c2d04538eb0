"""Einsum against onnxruntime: the equation forms transformers and exporters write."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from tests.helpers import assert_matches_onnxruntime, make_model, rand

CASES = {
    # equation: operand shapes
    "bij,bjk->bik": [(2, 3, 4), (2, 4, 5)],
    "ij,jk->ik": [(3, 4), (4, 5)],
    "ij,jk": [(3, 4), (4, 5)],  # implicit output: ik
    "ij->ji": [(3, 5)],
    "ij": [(3, 5)],  # implicit: identity
    "ji": [(3, 5)],  # implicit: transpose (output labels sorted)
    "bhqd,bhkd->bhqk": [(2, 3, 4, 8), (2, 3, 5, 8)],  # attention scores
    "bhqk,bhkd->bhqd": [(2, 3, 4, 5), (2, 3, 5, 8)],  # attention context
    "bqhd,bkhd->bhqk": [(1, 4, 2, 8), (1, 5, 2, 8)],  # heads in dim 2
    "bsd,hd->bsh": [(2, 3, 8), (6, 8)],  # linear layer, weight transposed
    "i,i": [(7,), (7,)],  # inner product: scalar
    "i,j->ij": [(3,), (4,)],  # outer product
    "ij->": [(3, 4)],  # full sum
    "ij->i": [(3, 4)],  # row sums
    "ii->i": [(4, 4)],  # diagonal
    "ii": [(4, 4)],  # trace
    "bii->bi": [(2, 3, 3)],  # batch diagonal
    "...ij,...jk->...ik": [(2, 3, 4, 5), (2, 3, 5, 2)],
    "...ij,...jk": [(3, 4, 5), (1, 5, 2)],  # ellipsis broadcast, implicit output
    "b...,b...->b...": [(2, 3, 4), (2, 3, 4)],
    "...ii->...i": [(2, 3, 3)],
    "ijk->kji": [(2, 3, 4)],
    "abc,cd,de->abe": [(2, 3, 4), (4, 5), (5, 2)],  # three operands
    "i,i,i->i": [(5,), (5,), (5,)],  # elementwise triple product
    "ij,kj->ikj": [(2, 3), (4, 3)],  # batched broadcast, no reduction
    "bn,anm,bm->ba": [(2, 3), (4, 3, 5), (2, 5)],  # bilinear
}


@pytest.mark.parametrize("opset", [12, 13, 21])
@pytest.mark.parametrize("equation", list(CASES))
def test_einsum(equation: str, opset: int) -> None:
    shapes = CASES[equation]
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = {n: rand(*s, seed=i) for i, (n, s) in enumerate(zip(names, shapes))}
    model = make_model([helper.make_node("Einsum", names, ["y"], equation=equation)], inputs, ["y"], opset=opset)
    assert_matches_onnxruntime(model, inputs)


def test_einsum_with_constant_weight_and_spaces() -> None:
    x = rand(2, 4, 6)
    w = rand(3, 6, seed=1)
    node = helper.make_node("Einsum", ["x", "w"], ["y"], equation="b s d , h d -> b h s")
    model = make_model([node], {"x": x}, ["y"], {"w": w})
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_einsum_other_dtypes(dtype: type) -> None:
    a = (rand(2, 3, 4) * 5).astype(dtype)
    b = (rand(2, 4, 3, seed=1) * 5).astype(dtype)
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
                       {"a": a, "b": b}, ["y"])
    assert_matches_onnxruntime(model, {"a": a, "b": b})


def test_einsum_broadcasts_size_one_ellipsis_dims() -> None:
    a, b = rand(1, 3, 4), rand(5, 4, 2, seed=1)
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")],
                       {"a": a, "b": b}, ["y"])
    assert_matches_onnxruntime(model, {"a": a, "b": b})


def test_einsum_label_size_mismatch_names_the_node() -> None:
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik", name="bad_einsum")
    model = make_model([node], {"a": rand(3, 4), "b": rand(5, 2)}, ["y"])
    with pytest.raises(AotError, match="bad_einsum.*label 'j' has sizes 4 and 5"):
        compile_model(model)


def test_einsum_ellipsis_missing_from_output_is_refused() -> None:
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="b...,b...->b", name="drops_dims")
    model = make_model([node], {"a": rand(2, 3), "b": rand(2, 3)}, ["y"])
    with pytest.raises(AotError, match="drops_dims.*output has no '...'"):
        compile_model(model)
