"""The LLVM backend: kernel IR -> LLVM IR -> object files, checked against onnxruntime and the C backend.

Op models run through the host object (never the C fallback: tests.helpers asserts which variant
was built) and must match onnxruntime, and match the C backend bit for bit: both backends render
the same kernel IR with the same C semantics, and neither may reassociate or contract floats.
Objects for every target are inspected from their bytes (ELF header, ARM build attributes,
symbol table) without external tools.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from llvmlite import ir as llvm_ir
from onnx import helper
from typer.testing import CliRunner

from aot.backends.llvm import get_target, host_target, object_name
from aot.backends.llvm.kernel_emitter import KernelEmitter, MathLibrary, ParamInfo
from aot.backends.llvm.target import EF_ARM_ABI_FLOAT_HARD, EF_ARM_EABI_VER5, normalize_triple, runs_on_host
from aot.cli import app
from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.host.build import host_cc
from aot.host.run import HostModel
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    Stmt,
    Store,
    Var,
    VecLoad,
    VecStore,
    cast,
    const,
    eq,
    ge,
    gt,
    logical_and,
    logical_or,
    lt,
    maximum,
    minimum,
    select,
    unary,
)
from aot.kernel.ir import binary as ir_binary
from aot.lowering import registry
from aot.targets import load_target, preset_names
from tests.helpers import BIT_EXACT_TARGET, assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"
API = ("run", "run_ptrs", "run_parallel", "run_parallel_ptrs", "info")

def _host() -> Any:
    try:
        spec = host_target()
    except AotError:  # no preset for this kind of machine
        return None
    return spec if runs_on_host(spec.triple, spec.cpu, spec.features) else None


HOST = _host()
pytestmark = pytest.mark.skipif(HOST is None, reason="this machine cannot run its own LLVM objects")


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


def assert_same_bits(ours: np.ndarray, reference: np.ndarray, what: str) -> None:
    """Equal values, dtypes, signed zeros and NaN positions (NaN payloads may differ)."""
    assert ours.dtype == reference.dtype and ours.shape == reference.shape, what
    if ours.dtype.kind == "f":
        nan = np.isnan(reference)
        assert np.array_equal(np.isnan(ours), nan), f"{what}: NaN positions differ"
        width = {4: np.uint32, 8: np.uint64}[ours.dtype.itemsize]
        differ = ours[~nan].view(width) != reference[~nan].view(width)
        assert not differ.any(), f"{what}: {int(differ.sum())} values differ, e.g. {ours[~nan][differ][:4]} " \
                                 f"vs {reference[~nan][differ][:4]}"
    else:
        assert np.array_equal(ours, reference), f"{what}: {ours} vs {reference}"


def check_model(model: onnx.ModelProto, inputs: dict[str, np.ndarray], tolerance: float = 1e-4) -> None:
    """LLVM (this machine's object) matches onnxruntime within tolerance, and the C backend exactly
    where neither contracts a multiply-add (both built for BIT_EXACT_TARGET)."""
    assert_matches_onnxruntime(model, inputs, tolerance, backend="llvm")
    ours = run_aot(model, inputs, backend="llvm", target=BIT_EXACT_TARGET)
    c = run_aot(model, inputs, backend="c", target=BIT_EXACT_TARGET)
    for name, value in c.items():
        assert_same_bits(ours[name], value, f"output {name!r} llvm vs c")


# ---------------------------------------------------------------------------------------------
# Op models through the host object


def _conv(x: tuple[int, ...], w: tuple[int, ...], bias: bool = True, **attrs: Any) -> tuple:
    inits = {"w": rand(*w, seed=1)}
    names = ["x", "w"]
    if bias:
        inits["b"] = rand(w[0], seed=2)
        names.append("b")
    return [node("Conv", names, **attrs)], {"x": rand(*x)}, inits


def _binary(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple:
    rhs = np.asarray(rand(*b, seed=3) + np.float32(3.0 if op == "Div" else 0.0))
    return [node(op, ["a", "b"])], {"a": rand(*a), "b": rhs}, {}


def _unary(op: str, shape: tuple[int, ...], scale: float = 3.0, **attrs: Any) -> tuple:
    return [node(op, ["x"], **attrs)], {"x": rand(*shape) * scale}, {}


def _pool(op: str, shape: tuple[int, ...], outputs: list[str] | None = None, **attrs: Any) -> tuple:
    return [node(op, ["x"], outputs, **attrs)], {"x": rand(*shape)}, {}


OP_CASES: dict[str, Callable[[], tuple]] = {
    "conv_pads_strides": lambda: _conv((1, 3, 9, 9), (4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "conv_asymmetric_pads": lambda: _conv((1, 2, 7, 9), (3, 2, 3, 2), bias=False, pads=[0, 1, 2, 0]),
    "conv_dilations": lambda: _conv((1, 2, 10, 10), (3, 2, 3, 3), dilations=[2, 2], pads=[2, 2, 2, 2]),
    "conv_groups": lambda: _conv((1, 4, 6, 6), (6, 2, 3, 3), group=2, pads=[1, 1, 1, 1]),
    "conv_depthwise": lambda: _conv((1, 8, 7, 7), (8, 1, 3, 3), group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
    "conv1d": lambda: _conv((2, 3, 11), (5, 3, 3), pads=[1, 1], strides=[2]),
    "conv3d": lambda: _conv((1, 2, 5, 6, 4), (3, 2, 3, 3, 2), pads=[1, 1, 0, 1, 1, 1]),
    "gemm": lambda: ([node("Gemm", ["a", "b", "c"], transB=1, alpha=0.5, beta=2.0)],
                     {"a": rand(3, 7)}, {"b": rand(5, 7, seed=1), "c": rand(5, seed=2)}),
    "gemm_trans_a": lambda: ([node("Gemm", ["a", "b"], transA=1)], {"a": rand(7, 3), "b": rand(7, 4, seed=1)}, {}),
    "matmul_batched": lambda: ([node("MatMul", ["a", "b"])], {"a": rand(2, 3, 4, 5), "b": rand(3, 5, 6, seed=1)},
                               {}),
    "matmul_vector": lambda: ([node("MatMul", ["a", "b"])], {"a": rand(5), "b": rand(2, 5, 3, seed=1)}, {}),
    "maxpool_pads": lambda: _pool("MaxPool", (1, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "maxpool_ceil_indices": lambda: _pool("MaxPool", (1, 2, 8, 8), ["y", "idx"], kernel_shape=[3, 3],
                                          strides=[2, 2], ceil_mode=1),
    "averagepool_pads": lambda: _pool("AveragePool", (1, 2, 7, 8), kernel_shape=[3, 2], pads=[1, 0, 0, 1]),
    "averagepool_include_pad": lambda: _pool("AveragePool", (1, 1, 7, 7), kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1], count_include_pad=1),
    "global_average_pool": lambda: _pool("GlobalAveragePool", (2, 3, 5, 5)),
    "global_max_pool": lambda: _pool("GlobalMaxPool", (1, 4, 7)),
    "softmax_last": lambda: _unary("Softmax", (2, 3, 7)),
    "softmax_axis1": lambda: _unary("Softmax", (2, 5, 3), axis=1),
    "logsoftmax": lambda: _unary("LogSoftmax", (3, 6)),
    "batchnorm": lambda: ([node("BatchNormalization", ["x", "s", "b", "m", "v"])], {"x": rand(2, 3, 4, 5)},
                          {"s": rand(3, seed=1), "b": rand(3, seed=2), "m": rand(3, seed=3),
                           "v": np.abs(rand(3, seed=4)) + 0.5}),
    "batchnorm_runtime_params": lambda: ([node("BatchNormalization", ["x", "s", "b", "m", "v"])],
                                         {"x": rand(2, 3, 4), "s": rand(3, seed=1), "b": rand(3, seed=2),
                                          "m": rand(3, seed=3), "v": np.abs(rand(3, seed=4)) + 0.5}, {}),
    "add_broadcast": lambda: _binary("Add", (2, 3, 4), (3, 1)),
    "sub_broadcast_both": lambda: _binary("Sub", (2, 1, 4), (3, 1)),
    "mul_scalar": lambda: _binary("Mul", (4, 5), ()),
    "div_broadcast": lambda: _binary("Div", (1, 6), (5, 1)),
    "relu": lambda: _unary("Relu", (3, 17)),
    "leaky_relu": lambda: _unary("LeakyRelu", (3, 17), alpha=0.2),
    "sigmoid": lambda: _unary("Sigmoid", (33,)),
    "tanh": lambda: _unary("Tanh", (33,)),
    "clip": lambda: _unary("Clip", (5, 7), min=-1.0, max=2.0),
    "transpose": lambda: ([node("Transpose", ["x"], perm=[2, 0, 1])], {"x": rand(3, 4, 5)}, {}),
    "transpose_nchw_nhwc": lambda: ([node("Transpose", ["x"], perm=[0, 2, 3, 1])], {"x": rand(1, 3, 4, 5)}, {}),
    "concat": lambda: ([node("Concat", ["a", "b", "c"], axis=1)], {"a": rand(2, 3, 4), "b": rand(2, 1, 4, seed=1)},
                       {"c": rand(2, 2, 4, seed=2)}),
    "reshape_flatten_chain": lambda: ([node("Flatten", ["x"], ["f"], axis=2), node("Relu", ["f"])],
                                      {"x": rand(2, 3, 4, 5)}, {}),
}
_OPSETS = {"clip": 6}


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_onnxruntime_and_c(case: str) -> None:
    nodes, inputs, inits = OP_CASES[case]()
    outputs = [o for n in nodes[-1:] for o in n.output]
    model = make_model(nodes, inputs, outputs, inits, opset=_OPSETS.get(case, 17))
    check_model(model, inputs)


def test_special_float_values_propagate_like_c() -> None:
    """NaN, infinities and signed zeros through Relu/Clip (NaN-propagating min/max), MaxPool, Softmax:
    bit for bit what the C backend computes (onnxruntime's MaxPool treats NaN differently)."""
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e38, 2.5], dtype=np.float32)
    x = np.tile(specials, 4).reshape(1, 2, 4, 4)
    for nodes, opset in (
        ([node("Relu", ["x"])], 17),
        ([node("Clip", ["x"], min=-1.0, max=1.0)], 6),
        ([node("LeakyRelu", ["x"], alpha=0.1)], 17),
        ([node("MaxPool", ["x"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])], 17),
        ([node("GlobalMaxPool", ["x"])], 17),
        ([node("Softmax", ["x"], axis=-1)], 17),
        ([node("Sigmoid", ["x"])], 17),
    ):
        model = make_model(nodes, {"x": x}, ["y"], opset=opset)
        ours = run_aot(model, {"x": x}, backend="llvm")["y"]
        assert_same_bits(ours, run_aot(model, {"x": x}, backend="c")["y"], nodes[0].op_type)


def test_integer_arithmetic_wraps_like_c() -> None:
    """int8/uint8 results truncate on store, int64 keeps its width (C's promotions and conversions)."""
    for dtype in (np.int8, np.uint8, np.int32, np.int64):
        info = np.iinfo(dtype)
        a = np.array([info.max, info.min, 100, -7 if info.min < 0 else 7, 0, 1], dtype=dtype)
        b = np.array([1, 1, 100, 3, info.max, info.min], dtype=dtype)
        for op in ("Add", "Sub", "Mul"):
            model = make_model([node(op, ["a", "b"])], {"a": a, "b": b}, ["y"])
            ours = run_aot(model, {"a": a, "b": b}, backend="llvm")["y"]
            assert_same_bits(ours, run_aot(model, {"a": a, "b": b}, backend="c")["y"], f"{op} {dtype.__name__}")
            expected = run_onnxruntime(model, {"a": a, "b": b})["y"]
            assert_same_bits(ours, expected, f"{op} {dtype.__name__} vs onnxruntime")


def test_example_tiny_cnn() -> None:
    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    model = onnx.load(str(EXAMPLE))
    check_model(model, {model.graph.input[0].name: image})


# ---------------------------------------------------------------------------------------------
# Kernel IR the ONNX ops do not produce (yet): C semantics the emitter must reproduce exactly.
# A test-only lowering stands in for Identity, so any kernel body can be compiled by both backends.

KernelBody = Callable[[Any, Any, Any], list[Stmt]]  # (builder, input view, output view) -> body


def _kernel_model(monkeypatch: pytest.MonkeyPatch, x: np.ndarray, body: KernelBody) -> onnx.ModelProto:
    """y = Identity(x), lowered (for this test only) to a kernel with the given body."""
    def lower(graph_node: Any, ctx: Any) -> None:
        kb = ctx.builder(graph_node)
        xv, yv = kb.input(graph_node.inputs[0]), kb.output(graph_node.outputs[0])
        ctx.emit(kb, body(kb, xv, yv))

    monkeypatch.setitem(registry._LOWERINGS, "Identity", lower)
    return make_model([node("Identity", ["x"])], {"x": x}, ["y"])


def _kernel_package(monkeypatch: pytest.MonkeyPatch, x: np.ndarray, body: KernelBody) -> Any:
    return compile_model(_kernel_model(monkeypatch, x, body), backend="llvm")


def _run_kernel(monkeypatch: pytest.MonkeyPatch, x: np.ndarray, body: KernelBody) -> dict[str, np.ndarray]:
    model = _kernel_model(monkeypatch, x, body)
    results = {b: run_aot(model, {"x": x}, backend=b)["y"] for b in ("c", "llvm")}
    assert_same_bits(results["llvm"], results["c"], "llvm vs c")
    return results


def _elementwise(fn: Callable[[Expr, Expr], Expr]) -> KernelBody:
    """y[i] = fn(x[i], i) over the whole tensor."""
    return lambda kb, xv, yv: kb.loops([xv.buffer.size], lambda i: [yv.store_flat(i[0], fn(xv.load_flat(i[0]), i[0]))])


FLOAT_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-45, 3e38, -7.25,
                           100.0, 0.3], dtype=np.float32)


@pytest.mark.parametrize("case", [
    "sign", "abs", "floor", "ceil", "round_even", "sqrt", "exp", "log", "erf", "atan", "cosh", "isnan", "isinf",
    "isposinf", "isneginf", "not", "min", "max", "fmod", "pow", "neg", "div", "ne", "bool_cast",
])
def test_float_expressions_match_c(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    def fn(v: Expr, i: Expr) -> Expr:
        other = const(0.75, "float32")
        if case in ("min", "max"):
            # Both operand orders: the C helper returns `a` when a is NaN, else `b` unless a < b.
            nan_or_value = select(eq(ir_binary("mod", i, 2), const(0, INDEX)), const(float("nan"), "float32"), other)
            return (minimum if case == "min" else maximum)(nan_or_value, v) + \
                (minimum if case == "min" else maximum)(v, other)
        if case == "fmod":
            return ir_binary("mod", v, other)
        if case == "pow":
            return ir_binary("pow", v, const(3.0, "float32"))
        if case == "div":
            return v / const(0.0, "float32")
        if case == "ne":
            return cast(ir_binary("ne", v, v), "float32")
        if case == "bool_cast":
            return cast(cast(v, "bool"), "float32")
        if case in ("isnan", "isinf", "isposinf", "isneginf", "not"):
            # As a condition: glibc's isinf() is -1 for -inf, so the C backend's *value* of isinf
            # is only "nonzero", where the LLVM backend yields the bool 1.
            return select(unary(case, v), const(1.0, "float32"), const(0.0, "float32"))
        return unary(case, v)

    _run_kernel(monkeypatch, FLOAT_SPECIALS, _elementwise(fn))


def test_narrow_integers_promote_to_int(monkeypatch: pytest.MonkeyPatch) -> None:
    """uint8 arithmetic happens in (signed) int: x - 100 < 0 for x < 100, no wrap before the store."""
    x = np.array([0, 1, 50, 99, 100, 101, 200, 255], dtype=np.uint8)

    def fn(v: Expr, i: Expr) -> Expr:
        hundred = const(100, "uint8")
        below = lt(v - hundred, const(0, "uint8"))
        # The min helper takes uint8 arguments: v * 3 is truncated on the way in.
        smallest = minimum(v * const(3, "uint8"), v + const(7, "uint8"))
        return select(below, smallest, ir_binary("div", v, const(7, "uint8")) + ir_binary("mod", v, hundred))

    results = _run_kernel(monkeypatch, x, _elementwise(fn))
    promoted = np.array([min((int(v) * 3) % 256, (int(v) + 7) % 256) if v < 100 else v // 7 + v % 100
                         for v in x.tolist()]) % 256
    assert results["llvm"].tolist() == promoted.tolist()


def test_signed_narrow_integers_and_casts(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([-128, -100, -7, -1, 0, 1, 7, 100, 127], dtype=np.int8)

    def fn(v: Expr, i: Expr) -> Expr:
        wide = cast(v, "int64") * const(1_000_000_007, "int64")   # int64 keeps the product
        back = cast(wide, "int8")                                 # truncates modulo 256
        via_float = cast(cast(v, "float32") * const(0.5, "float32"), "int8")   # toward zero
        quotient = ir_binary("div", v, const(-3, "int8")) + ir_binary("mod", v, const(5, "int8"))
        above_index = cast(gt(cast(v, INDEX), i), "int8")
        return back + via_float + quotient + unary("sign", v) + unary("abs", v) + above_index

    _run_kernel(monkeypatch, x, _elementwise(fn))


def test_bool_logic(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([True, False, True, True, False, False, True, False])

    def fn(v: Expr, i: Expr) -> Expr:
        odd = cast(ir_binary("mod", i, 2), "bool")
        either = logical_or(v, logical_and(odd, unary("not", v)))
        return ir_binary("xor", either, odd)

    _run_kernel(monkeypatch, x, _elementwise(fn))


def test_guarded_loads_are_never_speculated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """C's ?:, && / || and if evaluate a guarded load only when the guard holds. Here the guards
    depend on the data (so LLVM cannot fold them) and never hold, and the guarded addresses are
    gigabytes past the buffer: evaluating one anyway crashes the runner."""
    x = np.arange(8, dtype=np.float32)
    far = 100_000_000

    def body(kb: Any, xv: Any, yv: Any) -> list[Stmt]:
        def at(i: list[Expr]) -> list[Stmt]:
            idx = i[0]
            value = xv.load_flat(idx)
            never = gt(value, const(100.0, "float32"))
            acc = kb.var("acc", "float32")
            return [
                Declare(acc, select(never, xv.load_flat(idx * far), const(1.0, "float32"))),
                If(logical_and(never, gt(xv.load_flat(idx * far + 1), const(0.0, "float32"))),
                   [Assign(acc, acc + const(10.0, "float32"))]),
                If(logical_or(ge(value, const(0.0, "float32")), gt(xv.load_flat(idx * far + 2), value)),
                   [Assign(acc, acc + value)], [Assign(acc, const(-1.0, "float32"))]),
                yv.store_flat(idx, acc),
            ]
        return kb.loops([8], at)

    package = _kernel_package(monkeypatch, x, body)
    package.write(tmp_path / "pkg")
    build = _make(tmp_path / "pkg", f"CC={host_cc()}", "test_graph_runner")
    assert build.returncode == 0, build.stderr
    assert object_name("test_graph", HOST) in build.stdout
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([str(tmp_path / "pkg" / "test_graph_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0, f"the runner failed (status {run.returncode}): {run.stderr}"
    assert np.load(tmp_path / "output0.npy").tolist() == (1.0 + x).tolist()


def test_select_branches_only_around_operands_that_could_fault() -> None:
    """The emitted IR (before LLVM optimises it): an operand that may read outside its buffer is
    evaluated in its own block under the condition; in-bounds operands make a plain select."""
    x, y = Buffer("in0", "float32", 8, False), Buffer("out1", "float32", 8, True)
    i = Var("i0", INDEX)
    near = Load(x, i)
    far = Load(x, i * 100_000_000)
    relu = select(lt(near, const(0.0, "float32")), const(0.0, "float32"), near)
    guarded = select(gt(near, const(100.0, "float32")), far, const(1.0, "float32"))
    kernel = Kernel("k0", [x, y], [Loop(i, 8, [Store(y, i, relu + guarded)])], [], "Test")
    module = llvm_ir.Module()
    fn = KernelEmitter(module, MathLibrary(module)).emit(kernel, "k0", [ParamInfo(4, True), ParamInfo(4, True)])
    loads = {b.name: [str(ins) for ins in b.instructions if ins.opname == "load"] for b in fn.blocks}
    selects = [str(ins) for b in fn.blocks for ins in b.instructions if ins.opname == "select"]
    assert len(loads["sel.then"]) == 1 and "sel.then" not in loads["i0.loop"]
    assert sum(len(v) for v in loads.values()) == 4  # x[i] three times (GVN merges them), unguarded
    assert len(selects) == 1 and "float" in selects[0]


def test_armv7_loads_consecutive_operand_vectors_as_one_pair() -> None:
    """32-bit Arm NEON: two Declares of consecutive float32x4 loads (a register tile's row of
    operands) become one vld1x2 (one vld1 of four d registers); a gap, another buffer, or
    paired_loads off (every other target) keeps two loads."""
    w, y = Buffer("w", "float32", 64, False), Buffer("out1", "float32", 64, True)
    k = Var("k", INDEX)
    vector = "float32x4"

    def emitted(offsets: list[int], paired: bool) -> str:
        loads = [Declare(Var(f"v{n}", vector), VecLoad(w, k * 16 + at, 4)) for n, at in enumerate(offsets)]
        stores = [VecStore(y, k * 16 + 4 * n, Var(f"v{n}", vector)) for n in range(len(offsets))]
        kernel = Kernel("k0", [w, y], [Loop(k, 4, loads + stores)], [], "Test")
        module = llvm_ir.Module()
        KernelEmitter(module, MathLibrary(module), paired).emit(kernel, "k0", [ParamInfo(4, True)] * 2)
        return str(module)

    pair = "call {<4 x float>, <4 x float>} @\"llvm.arm.neon.vld1x2.v4f32.p0\""
    assert emitted([0, 4], True).count(pair) == 1
    assert emitted([0, 4, 8], True).count(pair) == 1  # a pair, then a load alone
    assert "vld1x2" not in emitted([0, 8], True) and "vld1x2" not in emitted([0, 4], False)


def test_sibling_scopes_reuse_names_and_zero_trip_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like C blocks: sibling loops may declare the same names; a zero-trip loop never runs."""
    x = rand(6, 4)
    j, tmp, acc = Var("j", INDEX), Var("tmp", "float32"), Var("acc", "float32")

    def body(kb: Any, xv: Any, yv: Any) -> list[Stmt]:
        def row(i: list[Expr]) -> list[Stmt]:
            return [
                Declare(acc, const(0.0, "float32")),
                Loop(j, 4, [Declare(tmp, xv.load([i[0], j])), Assign(acc, acc + tmp)]),
                Loop(Var("never", INDEX), 0, [Assign(acc, const(99.0, "float32"))]),
                Loop(j, 4, [Declare(tmp, xv.load([i[0], j]) * const(2.0, "float32")),
                            yv.store([i[0], j], acc - tmp / const(2.0, "float32"))]),
            ]
        return kb.loops([6], row)

    results = _run_kernel(monkeypatch, x, body)
    np.testing.assert_allclose(results["llvm"], x.sum(axis=1, keepdims=True) - x, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The exported C API: same behaviour as the C backend's model.c


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("size", ctypes.c_size_t), ("bytes", ctypes.c_size_t)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("num_inputs", ctypes.c_int32), ("num_outputs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(TensorInfo)), ("outputs", ctypes.POINTER(TensorInfo)),
                ("arena_size", ctypes.c_size_t), ("arena_align", ctypes.c_size_t),
                ("weights_size", ctypes.c_size_t)]


def _info(host: HostModel) -> dict[str, Any]:
    fn = getattr(host._lib, f"{host.package.name}_info")
    fn.restype = ctypes.POINTER(ModelInfo)
    fn.argtypes = []
    info = fn().contents

    def tensors(array: Any, count: int) -> list[tuple]:
        return [(array[i].name, array[i].dtype, array[i].rank, [array[i].dims[d] for d in range(array[i].rank)],
                 array[i].size, array[i].bytes) for i in range(count)]

    return {"name": info.name, "counts": (info.num_inputs, info.num_outputs),
            "inputs": tensors(info.inputs, info.num_inputs), "outputs": tensors(info.outputs, info.num_outputs),
            "sizes": (info.arena_size, info.arena_align, info.weights_size)}


def _statuses(host: HostModel, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> dict[str, int]:
    fn = getattr(host._lib, f"{host.package.name}_run_ptrs")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3
    ins = (ctypes.c_void_p * len(inputs))(*[a.ctypes.data for a in inputs])
    outs = (ctypes.c_void_p * len(outputs))(*[a.ctypes.data for a in outputs])
    null_in = (ctypes.c_void_p * len(inputs))(*([None] * len(inputs)))
    arena = host._arena.ctypes.data
    return {
        "ok": fn(ins, outs, arena),
        "null_inputs": fn(None, outs, arena),
        "null_outputs": fn(ins, None, arena),
        "null_input_entry": fn(null_in, outs, arena),
        "null_arena": fn(ins, outs, None),
        "misaligned_arena": fn(ins, outs, arena + 4),
    }


def test_api_behaves_like_the_c_backend() -> None:
    a, b = rand(2, 3, 4), rand(3, 4, seed=1)
    model = make_model([node("Add", ["a", "b"], ["s"]), node("Relu", ["s"], ["r"]), node("Sigmoid", ["r"], ["y"]),
                        node("Tanh", ["s"], ["z"])], {"a": a, "b": b}, ["y", "z"])
    hosts = {}
    for backend in ("c", "llvm"):
        hosts[backend] = HostModel.build(compile_model(model, name="api", backend=backend))
        assert hosts[backend].backend == backend
    assert hosts["llvm"].package.arena_bytes > 0  # so the NULL arena check applies
    infos = {k: _info(h) for k, h in hosts.items()}
    assert infos["llvm"] == infos["c"]
    assert infos["llvm"]["inputs"][0] == (b"a", 1, 3, [2, 3, 4], 24, 96)
    outputs = {k: [np.zeros((2, 3, 4), np.float32), np.zeros((2, 3, 4), np.float32)] for k in hosts}
    statuses = {k: _statuses(h, [a, b], outputs[k]) for k, h in hosts.items()}
    assert statuses["llvm"] == statuses["c"] == {
        "ok": 0, "null_inputs": 1, "null_outputs": 1, "null_input_entry": 1, "null_arena": 1, "misaligned_arena": 2}
    assert_same_bits(outputs["llvm"][0], outputs["c"][0], "y")

    # <name>_run takes the <name>_inputs / <name>_outputs structs.
    run = hosts["llvm"]._lib.api_run
    run.restype = ctypes.c_int
    run.argtypes = [ctypes.c_void_p] * 3
    ins = (ctypes.c_void_p * 2)(a.ctypes.data, b.ctypes.data)
    fresh = [np.zeros((2, 3, 4), np.float32) for _ in range(2)]
    outs = (ctypes.c_void_p * 2)(*[o.ctypes.data for o in fresh])
    assert run(ctypes.addressof(ins), ctypes.addressof(outs), hosts["llvm"]._arena.ctypes.data) == 0
    assert run(None, ctypes.addressof(outs), hosts["llvm"]._arena.ctypes.data) == 1
    assert_same_bits(fresh[1], outputs["c"][1], "z through <name>_run")


def test_model_without_inputs() -> None:
    """The info table then has C's one-element placeholder, and run never reads the input list."""
    c = rand(2, 3)
    model = make_model([node("Relu", ["c"])], {}, ["y"], {"c": c})
    host = HostModel.build(compile_model(model, backend="llvm"))
    assert host.backend == "llvm"
    np.testing.assert_array_equal(host.run({})["y"], np.maximum(c, 0))
    assert _info(host)["counts"] == (0, 1)


def test_model_without_weights_does_not_reference_them() -> None:
    x = rand(2, 3)
    package = compile_model(make_model([node("Relu", ["x"])], {"x": x}, ["y"]), name="plain", backend="llvm")
    symbols = Elf(package.files[object_name("plain", HOST)]).symbols()
    assert "plain_weights" not in {s.name for s in symbols}


# ---------------------------------------------------------------------------------------------
# Objects for every target, read from their bytes


@dataclass
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass
class Symbol:
    name: str
    bind: int        # 0 local, 1 global, 2 weak
    visibility: int  # 0 default, 2 hidden
    defined: bool


class Elf:
    def __init__(self, data: bytes) -> None:
        assert data[:4] == b"\x7fELF", "not an ELF file"
        self.data = data
        self.elf_class, self.byte_order = data[4], data[5]
        assert self.byte_order == 1, "all supported targets are little-endian"
        self.is64 = self.elf_class == 2
        self.type, self.machine = struct.unpack_from("<HH", data, 16)
        if self.is64:
            self.flags, = struct.unpack_from("<I", data, 48)
            shoff, = struct.unpack_from("<Q", data, 40)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
            fmt, fields = "<IIQQQQIIQQ", (0, 1, 4, 5, 6, 9)
        else:
            self.flags, = struct.unpack_from("<I", data, 36)
            shoff, = struct.unpack_from("<I", data, 32)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 46)
            fmt, fields = "<IIIIIIIIII", (0, 1, 4, 5, 6, 9)
        raw = [struct.unpack_from(fmt, data, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections = [Section(self._string(names[4], r[0]), *(r[f] for f in fields[1:])) for r in raw]

    def _string(self, table_offset: int, index: int) -> str:
        end = self.data.index(b"\0", table_offset + index)
        return self.data[table_offset + index:end].decode()

    def symbols(self) -> list[Symbol]:
        symtab = next(s for s in self.sections if s.type == 2)  # SHT_SYMTAB
        strtab = self.sections[symtab.link]
        out = []
        for i in range(1, symtab.size // symtab.entsize):
            at = symtab.offset + i * symtab.entsize
            if self.is64:
                name, info, other, shndx = struct.unpack_from("<IBBH", self.data, at)
            else:
                name, _, _, info, other, shndx = struct.unpack_from("<IIIBBH", self.data, at)
            if info & 0xF == 4:  # STT_FILE
                continue
            out.append(Symbol(self._string(strtab.offset, name), info >> 4, other & 3, shndx != 0))
        return out

    def arm_attributes(self) -> dict[int, int | str]:
        """The public "aeabi" file attributes (ARM ELF build attributes, AAELF32 / addenda)."""
        section = next(s for s in self.sections if s.type == 0x70000003)  # SHT_ARM_ATTRIBUTES
        data = self.data[section.offset:section.offset + section.size]
        assert data[0:1] == b"A"
        attrs: dict[int, int | str] = {}
        pos = 1
        while pos < len(data):
            length, = struct.unpack_from("<I", data, pos)
            vendor_end = data.index(b"\0", pos + 4)
            if data[pos + 4:vendor_end] == b"aeabi":
                sub = vendor_end + 1
                assert data[sub] == 1  # Tag_File
                sub_length, = struct.unpack_from("<I", data, sub + 1)
                at, stop = sub + 5, sub + sub_length
                while at < stop:
                    tag, at = _uleb(data, at)
                    if tag in (4, 5, 67) or (tag > 32 and tag % 2 == 1):
                        end = data.index(b"\0", at)
                        attrs[tag], at = data[at:end].decode(), end + 1
                    elif tag == 32:  # Tag_compatibility: flag, then vendor name
                        _, at = _uleb(data, at)
                        at = data.index(b"\0", at) + 1
                    else:
                        attrs[tag], at = _uleb(data, at)
            pos += length
        return attrs


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


TAG_CPU_NAME, TAG_ABI_VFP_ARGS = 5, 28
OTHER = get_target("x86_64" if HOST is not None and HOST.arch == "aarch64" else "aarch64")  # not the host


def expected_machine(triple: str) -> tuple[int, int]:
    """(e_machine, EI_CLASS) for the architecture of a triple."""
    arch = triple.split("-")[0]
    if arch == "x86_64":
        return 62, 2
    if arch == "aarch64":
        return 183, 2
    if arch == "riscv64":
        return 243, 2
    assert arch.startswith(("arm", "thumb")), arch
    return 40, 1

_objects: dict[str, bytes] = {}
# Every preset of an architecture the LLVM backend supports (all of them, today).
LLVM_PRESETS = [n for n in preset_names() if load_target(n).arch.startswith(("x86_64", "aarch64", "arm", "thumb",
                                                                                      "riscv64"))]


def target_object(target: str) -> bytes:
    if target not in _objects:
        package = compile_model(EXAMPLE, backend="llvm", target=target)
        assert package.manifest["target"] == target
        assert package.manifest["triple"] == get_target(target).triple
        _objects[target] = package.files[object_name("tiny_cnn", get_target(target))]
    return _objects[target]


@pytest.mark.parametrize("target", LLVM_PRESETS)
def test_object_header_for_each_target(target: str) -> None:
    spec = get_target(target)
    elf = Elf(target_object(target))
    machine, elf_class = expected_machine(spec.triple)
    assert (elf.machine, elf.elf_class, elf.type) == (machine, elf_class, 1)  # ET_REL
    if elf.machine == 40:
        assert elf.flags & 0xFF000000 == EF_ARM_EABI_VER5
        assert elf.flags & EF_ARM_ABI_FLOAT_HARD
        attrs = elf.arm_attributes()
        # What linkers check: floats are passed in VFP registers (AAPCS-VFP), matching -mfloat-abi=hard.
        assert attrs.get(TAG_ABI_VFP_ARGS) == 1, attrs
        assert str(attrs.get(TAG_CPU_NAME, "")).lower() == spec.cpu


@pytest.mark.parametrize("target", LLVM_PRESETS)
def test_object_exports_exactly_the_api(target: str) -> None:
    symbols = Elf(target_object(target)).symbols()
    exported = {s.name for s in symbols if s.defined and s.bind in (1, 2)}
    assert exported == {f"tiny_cnn_{f}" for f in API}
    undefined = {s.name: s for s in symbols if not s.defined}
    assert undefined["tiny_cnn_weights"].visibility == 2  # hidden: reached PC-relative, not via the GOT
    assert not {"malloc", "calloc", "realloc", "free"} & set(undefined)
    # Whatever else is referenced is libm or the compiler's own runtime (memcpy, __aeabi_*).
    allowed = {"tiny_cnn_weights", "expf", "memcpy", "memset", "memmove"}
    assert all(n in allowed or n.startswith("__") for n in undefined), sorted(undefined)


@pytest.mark.parametrize("target", ["x86_64", "aarch64", "rpi3", "cortex-m4f"])
def test_objects_are_byte_identical_across_compiles(target: str) -> None:
    again = compile_model(EXAMPLE, backend="llvm", target=target)
    assert again.files[object_name("tiny_cnn", get_target(target))] == target_object(target)


def test_package_is_byte_identical_in_another_process(tmp_path: Path) -> None:
    first = compile_model(EXAMPLE, backend="llvm", target=["x86_64", "rpi3"])
    script = ("import aot, sys; aot.compile(sys.argv[1], backend='llvm', target=['x86_64', 'rpi3'])"
              ".write(sys.argv[2])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", script, str(EXAMPLE), str(tmp_path / "pkg")], check=True, env=env)
    for path, data in first.files.items():
        assert (tmp_path / "pkg" / path).read_bytes() == data, path


# ---------------------------------------------------------------------------------------------
# Package integration: compile options, manifest, Makefile and CMake choosing the object


def test_target_errors(tmp_path: Path) -> None:
    with pytest.raises(AotError, match=r"unknown target \(available: aarch64, cortex-m4f, .*x86_64"):
        compile_model(EXAMPLE, backend="llvm", target="mips")
    with pytest.raises(AotError, match="both build x86_64-unknown-linux-gnu objects"):
        compile_model(EXAMPLE, backend="llvm", target=["x86_64", "x86_64-v3"])
    with pytest.raises(AotError, match="the C backend takes one target"):
        compile_model(EXAMPLE, backend="c", target=["rpi4", "rpi3"])
    c_for_rpi4 = compile_model(EXAMPLE, backend="c", target="rpi4")  # C sources made for one target
    assert c_for_rpi4.manifest["target"] == "rpi4" and "toolchain.cmake" in c_for_rpi4.files
    soft_triple = tmp_path / "armel.toml"
    soft_triple.write_text(_toml(triple="armv7-unknown-linux-gnueabi", cpu="cortex-a7", float_abi="hard"))
    with pytest.raises(AotError, match="float_abi 'hard' does not match the triple"):
        compile_model(EXAMPLE, backend="llvm", target=str(soft_triple))
    power = tmp_path / "power.toml"
    power.write_text(_toml(triple="powerpc64le-unknown-linux-gnu", cpu="pwr9", float_abi="hard"))
    with pytest.raises(AotError, match="does not support architecture 'powerpc64le'"):
        compile_model(EXAMPLE, backend="llvm", target=str(power))


def _toml(**fields: str) -> str:
    base = {"description": "test target", "features": "", "os": "linux", "float_abi": "hard"}
    text = "".join(f'{k} = "{v}"\n' for k, v in {**base, **fields}.items())
    return text + "alignment = 64\ncflags = []\n"


def test_target_from_a_toml_file(tmp_path: Path) -> None:
    """A user's own target file, e.g. a 64-bit Cortex-A53 board (not a preset)."""
    path = tmp_path / "a53-board.toml"
    path.write_text(_toml(triple="aarch64-linux-gnu", cpu="cortex-a53", features="+neon,+crc"))
    package = compile_model(EXAMPLE, backend="llvm", target=str(path))
    assert package.manifest["targets"][0] == {
        "name": "a53-board", "triple": "aarch64-unknown-linux-gnu", "cpu": "cortex-a53", "features": "+neon,+crc",
        "object": "tiny_cnn.aarch64-unknown-linux-gnu.o"}
    elf = Elf(package.files["tiny_cnn.aarch64-unknown-linux-gnu.o"])
    assert (elf.machine, elf.elf_class) == (183, 2)


def test_triples_are_normalised_for_llvm() -> None:
    assert normalize_triple("thumbv7em-none-eabihf") == "thumbv7em-unknown-none-eabihf"
    assert normalize_triple("aarch64-linux-gnu") == "aarch64-unknown-linux-gnu"
    assert normalize_triple("armv7-unknown-linux-gnueabihf") == "armv7-unknown-linux-gnueabihf"


def test_c_backend_package_is_unchanged() -> None:
    package = compile_model(EXAMPLE)
    assert not [p for p in package.files if p.endswith(".o")]
    assert "target" not in package.manifest and package.manifest["backend"] == "c"
    assert b"AOT_LLVM_TARGETS" not in package.files["Makefile"]
    assert b"LLVM" not in package.files["CMakeLists.txt"]


def test_manifest_and_files() -> None:
    package = compile_model(EXAMPLE, backend="llvm", target=["x86_64", "aarch64"])
    m = package.manifest
    assert (m["backend"], m["target"], m["triple"]) == ("llvm", "x86_64", "x86_64-unknown-linux-gnu")
    assert [t["object"] for t in m["targets"]] == ["tiny_cnn.x86_64-unknown-linux-gnu.o",
                                                   "tiny_cnn.aarch64-unknown-linux-gnu.o"]
    for t in m["targets"]:
        assert t["object"] in m["files"]
    # The C sources stay in the package as the fallback; the header is the C backend's. Both are
    # tuned for the narrowest vector registers of the targets (x86_64's 128-bit SSE here).
    c_package = compile_model(EXAMPLE, target="x86_64")
    for same in ("tiny_cnn.h", "tiny_cnn.c", "tiny_cnn_weights.c", "tiny_cnn_weights.h"):
        assert package.files[same] == c_package.files[same]


def _make(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-C", str(directory), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def two_target_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llvm") / "pkg"
    compile_model(EXAMPLE, backend="llvm", target=[HOST.name, OTHER.name]).write(directory)
    return directory


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_uses_the_host_object_and_the_runner_works(tmp_path: Path, two_target_package: Path) -> None:
    directory = tmp_path / "pkg"
    shutil.copytree(two_target_package, directory)
    result = _make(directory, f"CC={host_cc()}")
    assert result.returncode == 0, result.stderr
    assert f"rcs libtiny_cnn.a {object_name('tiny_cnn', HOST)} tiny_cnn_weights.o" in result.stdout
    assert not (directory / "tiny_cnn.o").exists()  # the C model source was not compiled
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(directory / "in.npy", image)
    run = subprocess.run([str(directory / "tiny_cnn_runner"), "-o", str(directory), str(directory / "in.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    expected = run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": image})["probabilities"]
    np.testing.assert_allclose(np.load(directory / "output0.npy"), expected, rtol=1e-4, atol=1e-6)
    # `make clean` must not delete the packaged objects.
    assert _make(directory, "clean").returncode == 0
    assert (directory / object_name("tiny_cnn", HOST)).exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_picks_the_object_for_the_compiler(tmp_path: Path, two_target_package: Path) -> None:
    other = OTHER
    # A cross compiler named explicitly: `make CC=aarch64-linux-gnu-gcc TARGET=aarch64`.
    explicit = _make(two_target_package, "-n", "CC=aarch64-linux-gnu-gcc", f"TARGET={other.name}")
    assert explicit.returncode == 0, explicit.stderr
    assert f"rcs libtiny_cnn.a {object_name('tiny_cnn', other)} tiny_cnn_weights.o" in explicit.stdout
    # A compiler that says it builds for the other target is recognised without TARGET.
    fake = tmp_path / "fake-cc"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = -dumpmachine ] && echo {other.arch}-linux-gnu\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    automatic = _make(two_target_package, "-n", f"CC={fake}")
    assert f"rcs libtiny_cnn.a {object_name('tiny_cnn', other)} tiny_cnn_weights.o" in automatic.stdout
    # No object fits: the C sources.
    fallback = _make(two_target_package, "-n", f"CC={host_cc()}", "BACKEND=c")
    assert "rcs libtiny_cnn.a tiny_cnn.o tiny_cnn_weights.o" in fallback.stdout
    unknown = _make(two_target_package, "-n", "TARGET=cortex-m4f")
    assert unknown.returncode != 0 and "no LLVM object for it" in unknown.stderr


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_cmake_uses_the_host_object(tmp_path: Path, two_target_package: Path) -> None:
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(two_target_package), "-B", str(build),
                                f"-DCMAKE_C_COMPILER={host_cc()}"], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stderr
    cache = (build / "CMakeCache.txt").read_text()
    assert f"TINY_CNN_TARGET:STRING={HOST.name}" in cache and "TINY_CNN_BACKEND:STRING=llvm" in cache
    compiled = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    image = np.zeros((1, 3, 32, 32), np.float32)
    np.save(tmp_path / "in.npy", image)
    run = subprocess.run([str(build / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "in.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    expected = run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": image})["probabilities"]
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("target", ["aarch64", "rpi3"])
def test_cross_objects_run_under_qemu(target: str) -> None:
    """Built with the target's cross toolchain (its `-dumpmachine` selects the object) and run
    under qemu-user: the C backend's results for that target, to rounding. (Not bit for bit: both
    fuse the register tiles' multiply-adds on these FMA targets, but gcc -ffp-contract=fast also
    fuses other scalar a * b + c it finds, which LLVM, keeping C99 semantics, does not.)"""
    from aot.errors import BuildError
    from aot.toolchain.discovery import find_toolchain, qemu_for
    from aot.toolchain.target_build import TargetModel

    preset = load_target(target)
    try:
        toolchain = find_toolchain(preset, prefer="gcc")
        qemu_for(preset)
    except BuildError as e:
        pytest.skip(str(e))
    image = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    results = {}
    for backend in ("c", "llvm"):
        package = compile_model(EXAMPLE, backend=backend, target=target if backend == "llvm" else None)
        built = TargetModel.build(package, preset, toolchain)
        if backend == "llvm":
            assert not (built.directory / "tiny_cnn.o").exists()  # linked the object, not tiny_cnn.c
        results[backend] = built.run({"image": image})["probabilities"]
    np.testing.assert_allclose(results["llvm"], results["c"], rtol=1e-5, atol=1e-7, err_msg=f"{target}: llvm vs c")
    expected = run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": image})["probabilities"]
    np.testing.assert_allclose(results["llvm"], expected, rtol=1e-4, atol=1e-6)


def test_cli_compile_with_targets(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "pkg"
    result = runner.invoke(app, ["compile", str(EXAMPLE), "-o", str(out), "--backend", "llvm",
                                 "--target", "rpi3", "--target", "cortex-m4f"])
    assert result.exit_code == 0, result.output
    assert (out / "tiny_cnn.armv7-unknown-linux-gnueabihf.o").is_file()
    assert (out / "tiny_cnn.thumbv7em-unknown-none-eabihf.o").is_file()
    bad = runner.invoke(app, ["compile", str(EXAMPLE), "-o", str(tmp_path / "bad"), "--backend", "llvm",
                              "--target", "riscv"])
    assert bad.exit_code == 2 and "unknown target (available: aarch64" in bad.output
    assert not (tmp_path / "bad").exists()


def test_cli_verify_runs_the_llvm_object() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(EXAMPLE), "--backend", "llvm", "--json"])
    assert result.exit_code == 0, result.output
    assert '"backend": "llvm"' in result.output and '"passed": true' in result.output
    foreign = runner.invoke(app, ["verify", str(EXAMPLE), "--backend", "llvm", "--target", "cortex-m4f"])
    assert foreign.exit_code == 2 and "bare-metal targets build a library only" in foreign.output


@pytest.mark.parametrize("preset,needs", [
    ("x86_64-v3", ("avx2", "fma")),
    ("x86_64-v4", ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")),
])
def test_host_runs_the_x86_levels_it_supports(preset: str, needs: tuple[str, ...]) -> None:
    """An object for an x86-64 micro-architecture level runs here when this CPU has the level's
    features (the x86-64-v4 objects were never picked: unknown CPU name), and the C sources
    are taken otherwise."""
    import llvmlite.binding as llvm

    from aot.host.run import host_variant

    if HOST is None or not HOST.triple.startswith("x86_64"):
        pytest.skip("not an x86-64 host")
    features = llvm.get_host_cpu_features()
    x = rand(1, 8)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"])
    package = compile_model(model, backend="llvm", target=preset)
    expected = ("llvm", preset) if all(features.get(n, False) for n in needs) else ("c", None)
    assert host_variant(package) == expected
    np.testing.assert_array_equal(package.run({"x": x})["y"], np.maximum(x, 0))
