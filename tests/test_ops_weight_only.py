"""Weight-only quantised products: com.microsoft MatMulNBits (4 and 8 bits, blocked, with or
without zero points) and DequantizeLinear of constant int4/int8 weights read by MatMul or Gemm
run against onnxruntime, and their packages store the quantised bytes, not float32."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.ops.quantized.weight_only_pack import matmul_nbits_arrays
from tests.helpers import assert_matches_onnxruntime, run_aot

RNG = np.random.default_rng(7)


def _nbits_model(a_shape: tuple[int, ...], n: int, *, bits: int, block: int, zero: bool, bias: bool = False,
                 k: int | None = None) -> onnx.ModelProto:
    """A = input "a", Y = MatMulNBits(A, B) of random codes (K = a_shape[-1] unless given)."""
    k = a_shape[-1] if k is None else k
    blocks = -(-k // block)
    codes = RNG.integers(0, 1 << bits, (k, n)).astype(np.uint8)
    scales = RNG.uniform(0.01, 0.05, (blocks, n)).astype(np.float32)
    zeros = RNG.integers(0, 1 << bits, (blocks, n)).astype(np.uint8) if zero else None
    b, s, z = matmul_nbits_arrays(codes, scales, zeros, bits=bits, block=block)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(s, "s")]
    names = ["a", "b", "s"]
    if z is not None:
        inits.append(numpy_helper.from_array(z, "z"))
        names.append("z")
    if bias:
        names += [""] * (5 - len(names)) + ["bias"]
        inits.append(numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "bias"))
    node = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", name="proj",
                            K=a_shape[-1] if k is None else k, N=n, bits=bits, block_size=block)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*a_shape[:-1], n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("zero", [False, True])
def test_matmul_nbits_matches_onnxruntime(bits: int, block: int, zero: bool) -> None:
    model = _nbits_model((3, 200), 40, bits=bits, block=block, zero=zero)
    assert_matches_onnxruntime(model, {"a": RNG.standard_normal((3, 200)).astype(np.float32)})


@pytest.mark.parametrize("a_shape", [(1, 256), (1, 16, 256)])
def test_matmul_nbits_decode_and_prompt_with_bias(a_shape: tuple[int, ...]) -> None:
    model = _nbits_model(a_shape, 96, bits=4, block=32, zero=True, bias=True)
    assert_matches_onnxruntime(model, {"a": RNG.standard_normal(a_shape).astype(np.float32)})
