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
from aot.errors import AotError
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
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
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


ONNX_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int4": TensorProto.INT4,
              "uint4": TensorProto.UINT4}
RANGES = {"int8": (-128, 128), "uint8": (0, 256), "int4": (-8, 8), "uint4": (0, 16)}


def _integers(name: str, dtype: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    values = RNG.integers(*RANGES[dtype], shape)
    return helper.make_tensor(name, ONNX_TYPES[dtype], list(shape), values.reshape(-1).tolist())


def _dq_model(dtype: str, layout: str, *, op: str = "MatMul", zero: bool = True, k: int = 96, n: int = 40,
              m: int = 3) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Y = op(A, DequantizeLinear(W)) with W [K, N] (Gemm transB: [N, K]) of `dtype`, scaled per
    tensor, per column or in blocks of 32 along K."""
    trans = op == "GemmT"
    w_shape = (n, k) if trans else (k, n)
    k_axis, n_axis = (1, 0) if trans else (0, 1)
    attrs: dict[str, int] = {}
    if layout == "tensor":
        p_shape: tuple[int, ...] = ()
    elif layout == "column":
        p_shape, attrs = (n,), {"axis": n_axis}
    else:
        blocks = -(-k // 32)
        p_shape, attrs = ((n, blocks) if trans else (blocks, n)), {"axis": k_axis, "block_size": 32}
    inits = [_integers("w", dtype, w_shape),
             numpy_helper.from_array(RNG.uniform(0.005, 0.02, p_shape).astype(np.float32), "s")]
    dq_inputs = ["w", "s"]
    if zero:
        inits.append(_integers("z", dtype, p_shape))
        dq_inputs.append("z")
    nodes = [helper.make_node("DequantizeLinear", dq_inputs, ["wd"], **attrs)]
    if op == "MatMul":
        nodes.append(helper.make_node("MatMul", ["a", "wd"], ["y"], name="fc"))
    else:
        inits.append(numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "c"))
        nodes.append(helper.make_node("Gemm", ["a", "wd", "c"], ["y"], name="fc", transB=int(trans), alpha=0.5,
                                      beta=2.0))
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, {"a": RNG.standard_normal((m, k)).astype(np.float32)}


def _unoptimised_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime's float meaning of the model (its optimisations would quantise A too)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint4"])
@pytest.mark.parametrize("layout", ["tensor", "column", "blocked"])
@pytest.mark.parametrize("op", ["MatMul", "Gemm", "GemmT"])
def test_dequantized_weights_match_onnxruntime(dtype: str, layout: str, op: str) -> None:
    model, inputs = _dq_model(dtype, layout, op=op, zero=layout != "tensor" or dtype.startswith("u"))
    np.testing.assert_allclose(run_aot(model, inputs)["y"], _unoptimised_onnxruntime(model, inputs),
                               rtol=1e-4, atol=1e-4)


def _weights_bytes(model: onnx.ModelProto) -> int:
    return int(compile_model(model).manifest["weights_bytes"])


@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits_package_holds_the_quantized_payload(bits: int) -> None:
    model = _nbits_model((1, 768), 3072, bits=bits, block=32, zero=True)
    payload = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert _weights_bytes(model) <= 1.05 * payload, payload


@pytest.mark.parametrize(("dtype", "layout"), [("uint8", "column"), ("int8", "blocked"), ("int4", "blocked"),
                                               ("uint4", "column")])
def test_dequantized_weights_stay_quantized_in_the_package(dtype: str, layout: str) -> None:
    """A [768, 3072] weight: its integers (4-bit: two a byte), scales and zero points, no float32."""
    model, _ = _dq_model(dtype, layout, k=768, n=3072, m=1)
    bits = 4 if dtype.endswith("4") else 8
    blocks = 768 // 32 if layout == "blocked" else 1
    payload = 768 * 3072 * bits // 8 + blocks * 3072 * (4 + bits / 8)
    stored = _weights_bytes(model)
    assert stored <= 1.05 * payload, (stored, payload)


def test_matmul_nbits_bad_bits_is_one_line_naming_the_node() -> None:
    model = _nbits_model((1, 64), 16, bits=4, block=32, zero=False)
    model.graph.node[0].attribute[2].i = 3  # bits
    assert model.graph.node[0].attribute[2].name == "bits"
    with pytest.raises(AotError, match=r"'proj'.*bits=3") as raised:
        compile_model(model)
    assert "\n" not in str(raised.value)


def test_matmul_nbits_k_mismatch_is_one_line_naming_the_node() -> None:
    model = _nbits_model((1, 64), 16, bits=4, block=32, zero=False, k=128)
    with pytest.raises(AotError, match=r"'proj'.*K=128") as raised:
        compile_model(model)
    assert "\n" not in str(raised.value)


def test_matmul_nbits_act_order_is_refused() -> None:
    model = _nbits_model((1, 64), 16, bits=4, block=32, zero=False)
    model.graph.initializer.append(numpy_helper.from_array(np.arange(64, dtype=np.int32) // 32, "g_idx"))
    model.graph.node[0].input.extend(["", "g_idx"])
    with pytest.raises(AotError, match=r"'proj'.*g_idx"):
        compile_model(model)


@pytest.mark.parametrize("m", [1, 9])
@pytest.mark.parametrize(("dtype", "layout"), [("int4", "column"), ("uint4", "blocked"), ("uint8", "blocked")])
def test_odd_k_and_prompt_rows_match_onnxruntime(m: int, dtype: str, layout: str) -> None:
    """K = 77: a last 4-bit code alone in its byte and a short last block; 9 rows take the panels."""
    model, inputs = _dq_model(dtype, layout, k=77, n=37, m=m)
    np.testing.assert_allclose(run_aot(model, inputs)["y"], _unoptimised_onnxruntime(model, inputs),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [75, 200])
def test_matmul_nbits_odd_k_prompt(k: int) -> None:
    model = _nbits_model((1, 9, k), 33, bits=4, block=16, zero=True, bias=True)
    assert_matches_onnxruntime(model, {"a": RNG.standard_normal((1, 9, k)).astype(np.float32)})


@pytest.mark.parametrize(("dtype", "per_row", "zero"), [("int8", False, False), ("uint8", True, True),
                                                         ("int8", True, True)])
def test_gather_of_a_dequantized_table_keeps_it_8_bit(dtype: str, per_row: bool, zero: bool) -> None:
    """An embedding table [V, D] int8 behind DequantizeLinear, rows picked by run-time ids."""
    vocab, dim = 500, 64
    p_shape = (vocab,) if per_row else ()
    inits = [_integers("table", dtype, (vocab, dim)),
             numpy_helper.from_array(RNG.uniform(0.005, 0.02, p_shape).astype(np.float32), "s")]
    if zero:
        inits.append(_integers("z", dtype, p_shape))
    dq = helper.make_node("DequantizeLinear", ["table", "s", "z"] if zero else ["table", "s"], ["emb"], axis=0)
    gather = helper.make_node("Gather", ["emb", "ids"], ["y"], name="embed")
    graph = helper.make_graph([dq, gather], "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    inputs = {"ids": np.array([[0, 499, 3, 250, -1, 17, 42]], np.int64)}
    np.testing.assert_allclose(run_aot(model, inputs)["y"], _unoptimised_onnxruntime(model, inputs),
                               rtol=1e-6, atol=1e-6)
    assert _weights_bytes(model) <= 1.05 * (vocab * dim + vocab * 5)


@pytest.mark.parametrize("a_shape", [(1, 512), (1, 24, 512)])
def test_matmul_nbits_with_threads(a_shape: tuple[int, ...]) -> None:
    """--parallel: column runs of the streaming kernel, row blocks of the panels, as tasks."""
    model = _nbits_model(a_shape, 1024, bits=4, block=32, zero=True)
    assert_matches_onnxruntime(model, {"a": RNG.standard_normal(a_shape).astype(np.float32)}, parallel=True)


@pytest.mark.parametrize("a_shape", [(2, 64), (8, 64)])
def test_matmul_nbits_float_zero_points(a_shape: tuple[int, ...]) -> None:
    """zero_points of the scales' type (one float per block and column) instead of packed bytes."""
    model = _nbits_model(a_shape, 24, bits=4, block=32, zero=False)
    zeros = RNG.uniform(4.0, 11.0, 24 * 2).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(zeros, "zf"))
    model.graph.node[0].input.append("zf")
    assert_matches_onnxruntime(model, {"a": RNG.standard_normal(a_shape).astype(np.float32)})
