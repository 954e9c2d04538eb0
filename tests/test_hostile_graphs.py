"""Hostile graph structure: long fused chains and huge variadic nodes. The generated code grows
linearly with the model, compiling takes bounded time and memory, nothing overflows Python's
stack, and the results still match onnxruntime on both backends.

Relu is `x < 0 ? 0 : x`, which names its operand twice: printed as a tree, the expression of n
fused Relus had 2**n copies of the input (20 Relus were 28 MiB of C; 5,000 never finished).
aot/kernel/let_binding.py computes shared and deep subexpressions into locals."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.kernel.ir import (
    INDEX,
    Buffer,
    Declare,
    If,
    Kernel,
    Load,
    Loop,
    Select,
    Store,
    Var,
    const,
    expr_children,
    lt,
    select,
)
from aot.kernel.let_binding import MAX_HEIGHT, bind_subexpressions
from aot.kernel.parallel import check_parallel, segments
from aot.planner.arena import plan_program
from tests.helpers import make_model
from tests.test_cli import EXAMPLE, REPO, aot
from tests.test_in_place import lowered

GB = 2**30
CPU_SECONDS_LIMIT = 120
MIXED = ["Relu", "Neg", "Sigmoid", "AddConstant", "Relu", "Mul", "LeakyRelu", "Softplus", "Elu", "HardSwish"]


def chain_model(path: Path, ops: list[str], length: int, shape: tuple[int, ...] = (2, 8),
                anchor: str | None = None, dtype: type = np.float32) -> Path:
    """x -> [anchor] -> ops[0] -> ops[1] -> ... (cycled to `length` nodes) -> y, all one fused kernel."""
    nodes = []
    inits = [numpy_helper.from_array(np.array([1], dtype), "c")]
    rng = np.random.default_rng(0)
    previous = "x"
    if anchor == "Conv":  # 3x3, padded: its taps are the guarded loads `inside ? x[i] : 0`
        inits.append(numpy_helper.from_array((rng.standard_normal((8, shape[1], 3, 3)) * 0.2).astype(np.float32), "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]))
        previous, out_shape = "a", (shape[0], 8, *shape[2:])
    elif anchor == "MatMul":  # register tiles: the epilogue is applied lane-wise in registers
        inits.append(numpy_helper.from_array((rng.standard_normal((shape[-1], 32)) * 0.2).astype(np.float32), "w"))
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["a"]))
        previous, out_shape = "a", (*shape[:-1], 32)
    else:
        out_shape = shape
    for i in range(length):
        op = ops[i % len(ops)]
        out = "y" if i == length - 1 else f"t{i}"
        if op == "AddConstant":
            nodes.append(helper.make_node("Add", [previous, "c"], [out]))
        elif op == "Mul":  # a side input, broadcast along the rows
            nodes.append(helper.make_node("Mul", [previous, "r"], [out]))
        elif op == "Where":  # the chain so far is only evaluated where m holds
            nodes.append(helper.make_node("Where", ["m", previous, "c"], [out]))
        else:
            nodes.append(helper.make_node(op, [previous], [out]))
        previous = out
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [helper.make_tensor_value_info("x", element, list(shape))]
    if "Mul" in ops:
        inputs.append(helper.make_tensor_value_info("r", element, [out_shape[-1]]))
    if "Where" in ops:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, list(out_shape)))
    graph = helper.make_graph(nodes, "chain", inputs, [helper.make_tensor_value_info("y", element, list(out_shape))],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def sum_model(path: Path, inputs: int, op: str = "Sum") -> Path:
    """One variadic node reading the same tensor `inputs` times (and a constant once)."""
    c = numpy_helper.from_array(np.full((2, 8), 0.5, np.float32), "c")
    graph = helper.make_graph([helper.make_node(op, ["x"] * (inputs - 1) + ["c"], ["y"])], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def aot_timed(*args: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`python -m aot ...`: its result, wall seconds and its own peak resident memory in bytes."""
    def limit() -> None:  # a guard, not the measure: an exponential regression fails instead of hanging
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS_LIMIT, CPU_SECONDS_LIMIT))
        resource.setrlimit(resource.RLIMIT_AS, (6 * GB, 6 * GB))

    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aot", *args], stdout=out, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(proc.args, os.waitstatus_to_exitcode(status), out.read(), err.read())
    return result, seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def compiled_c(tmp_path: Path, model: Path) -> str:
    out = tmp_path / model.stem
    result, _, _ = aot_timed("compile", str(model), "-o", str(out))
    assert result.returncode == 0, result.stderr
    return (out / f"{model.stem}.c").read_text()


def assert_verifies(model: Path, backend: str) -> None:
    result = aot("verify", str(model), "--backend", backend, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"], report


def test_5000_fused_ops_compile_in_bounded_time_and_memory(tmp_path: Path) -> None:
    model = chain_model(tmp_path / "chain5000.onnx", MIXED, 5000)
    result, seconds, peak = aot_timed("compile", str(model), "-o", str(tmp_path / "pkg"), "--json")
    assert result.returncode == 0, result.stderr
    assert seconds < 30 and peak < GB, (seconds, peak)
    assert json.loads(result.stdout)["kernels"] == 1
    # A few hundred bytes per op: Softplus and Elu (a fifth of MIXED) inline their exp, log1p and
    # expm1 polynomials (about 60 and 25 steps) instead of calling libm: 2.4 MB in all.
    assert (tmp_path / "pkg" / "chain5000.c").stat().st_size < 5000 * 600


def test_generated_c_grows_linearly_with_the_chain(tmp_path: Path) -> None:
    sizes = {n: len(compiled_c(tmp_path, chain_model(tmp_path / f"relu{n}.onnx", ["Relu"], n)))
             for n in (10, 100, 1000)}
    assert sizes[100] < 12 * sizes[10] and sizes[1000] < 12 * sizes[100], sizes
    assert sizes[1000] < 1000 * 200, sizes


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("anchor,ops,length,shape,dtype", [
    (None, MIXED, 300, (2, 8), np.float32),
    (None, ["Neg"], 600, (2, 8), np.float32),  # 600 levels deep: the printers recursed once per level
    (None, ["Where", "ThresholdedRelu", "Relu", "Softplus"], 200, (2, 8), np.float32),
    (None, ["Abs", "Neg", "AddConstant"], 150, (2, 8), np.int32),  # C prints an integer abs as a ? -a : a
    ("Conv", MIXED, 200, (1, 3, 6, 6), np.float32),
    ("MatMul", ["Relu", "Neg", "AddConstant", "Mul"], 200, (4, 16), np.float32),  # deeper than lanewise looks
    ("MatMul", ["Relu", "AddConstant", "Relu", "Mul"], 40, (4, 16), np.float32),  # in registers
], ids=["mixed", "neg600", "where", "int_abs", "conv", "matmul_deep", "matmul_tile"])
def test_long_fused_chains_match_onnxruntime(tmp_path: Path, backend: str, anchor: str | None, ops: list[str],
                                             length: int, shape: tuple[int, ...], dtype: type) -> None:
    assert_verifies(chain_model(tmp_path / "chain.onnx", ops, length, shape, anchor, dtype), backend)


@pytest.mark.parametrize("op,inputs,backend", [
    ("Sum", 10_000, "c"), ("Mean", 3000, "c"), ("Max", 3000, "c"), ("Sum", 2000, "llvm"), ("Min", 2000, "llvm"),
])
def test_variadic_nodes_with_thousands_of_inputs(tmp_path: Path, op: str, inputs: int, backend: str) -> None:
    model = sum_model(tmp_path / "wide.onnx", inputs, op)
    assert_verifies(model, backend)
    deepest = max(line.count("(") for line in compiled_c(tmp_path, model).splitlines())
    assert deepest <= 2 * MAX_HEIGHT  # in locals of bounded depth, not one expression 10,000 deep


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_thousands_of_graph_inputs_verify(tmp_path: Path, backend: str) -> None:
    """3,000 inputs into one Concat: the C run function copies their pointers in chunks and the
    LLVM one is left unoptimised past MANY_PORTS (aot/backends/llvm/module.py), where O3 took
    minutes over its pointer checks."""
    count = 3000
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 2]) for i in range(count)]
    graph = helper.make_graph([helper.make_node("Concat", [f"x{i}" for i in range(count)], ["y"], axis=0)], "many",
                              inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count, 2])])
    path = tmp_path / "many.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_verifies(path, backend)


def test_register_tile_epilogue_stays_in_registers(tmp_path: Path) -> None:
    """A MatMul's fused chain is applied to the accumulators lane-wise (aot/kernel/vectorize.py),
    which rewrites the chain's DAG once per node, not once per path through it."""
    model = chain_model(tmp_path / "tile.onnx", ["Relu", "AddConstant", "Relu", "Mul"], 40, (4, 16), "MatMul")
    # AVX2's tiles of 8 floats: their selects are what this counts
    result, seconds, _ = aot_timed("compile", str(model), "--target", "x86_64-v3", "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0 and seconds < 30, (result.stderr, seconds)
    text = (tmp_path / "pkg" / "tile.c").read_text()
    assert text.count("AOT_F32X8_SELECT_LT") >= 20 and len(text) < 100_000


def test_ordinary_kernels_print_as_before(tmp_path: Path) -> None:
    """Small shared operands stay inline (a Relu's load read twice), so kernels the compilers
    vectorise today are the same text. (The steps of a polynomial exp are locals: the Softmax.)"""
    text = compiled_c(tmp_path, EXAMPLE)
    assert " let0 " not in text.split("Softmax <- ONNX")[0]
    relu = compiled_c(tmp_path, chain_model(tmp_path / "relu.onnx", ["Relu"], 1))
    assert "y[i0] = x[i0] < 0.0f ? 0.0f : x[i0];" in relu and "let" not in relu


def test_long_chain_still_writes_in_place() -> None:
    """The locals of a long chain are computed in the iteration that stores: the kernel may still
    write over an input that dies there."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    # t comes from a MaxPool, which takes no epilogue (a Conv would absorb the whole chain).
    nodes = [helper.make_node("MaxPool", ["x"], ["t"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["t"], ["s"]),
             helper.make_node("Mul", ["t", "s"], ["u0"])]
    nodes += [helper.make_node("Relu", [f"u{i}"], [f"u{i + 1}"]) for i in range(40)]
    nodes.append(helper.make_node("Conv", ["u40", "w2"], ["y"]))
    model = make_model(nodes, {"x": x}, ["y"], {"w2": rng.standard_normal((2, 4, 1, 1)).astype(np.float32)})
    program = plan_program(lowered(model), reorder=False).program
    chain = next(i for i, k in enumerate(program.kernels) if k.op.startswith("Sigmoid+Mul+Relu"))
    assert any(isinstance(s, Declare) for s in program.kernels[chain].body[0].body)
    assert any(k == chain for k, _, _ in program.in_place), program.in_place


def _guarded_kernel(index_shift: int) -> Kernel:
    """out[i] = relu^12(i + shift < 16 ? x[i + shift] : 0): the load is guarded unless shift is 0."""
    x = Buffer("in0", "float32", 16, False)
    out = Buffer("out1", "float32", 16, True)
    i = Var("i0", INDEX)
    at = i + const(index_shift, INDEX)
    value = select(lt(at, const(16, INDEX)), Load(x, at), const(0.0, "float32"))
    for _ in range(12):
        value = select(lt(value, const(0.0, "float32")), const(0.0, "float32"), value)
    return Kernel("k0", [x, out], [Loop(i, 16, [Store(out, i, Select(lt(i, const(8, INDEX)), value,
                                                                        const(1.0, "float32")))])], [], "test")


@pytest.mark.parametrize("shift,hoisted", [(0, True), (3, False)], ids=["in_bounds", "guarded"])
def test_guarded_loads_are_never_hoisted(shift: int, hoisted: bool) -> None:
    """The chain sits in a select's branch: computing it before the statement is only allowed
    when each of its loads is inside its buffer for every iteration (x[i + 3] is not)."""
    body = bind_subexpressions(_guarded_kernel(shift)).body[0]
    assert isinstance(body, Loop)
    declares = [s for s in body.body if isinstance(s, Declare)]
    assert bool(declares) is hoisted
    stack = [d.init for d in declares]
    while stack:  # what the locals compute (small trees once bound)
        e = stack.pop()
        assert not isinstance(e, Load) or e.index is body.var
        stack += expr_children(e)


def test_kernels_with_parallel_loops_keep_no_top_level_locals() -> None:
    """A parallel kernel is split into functions at its top level (aot/kernel/parallel.py), so the
    locals of a deep top-level statement go into a block of their own."""
    x = Buffer("in0", "float32", 16, False)
    out = Buffer("out1", "float32", 17, True)
    deep = Load(x, const(0, INDEX))
    for _ in range(3 * MAX_HEIGHT):
        deep = -deep
    i = Var("i0", INDEX)
    kernel = Kernel("k0", [x, out], [Store(out, const(16, INDEX), deep),
                                     Loop(i, 16, [Store(out, i, Load(x, i))], parallel=True)], [], "test")
    bound = bind_subexpressions(kernel)
    check_parallel(bound)
    assert [type(s) for s in bound.body] == [If, Loop] and len(bound.body[0].then) == 4
    assert [len(segment.kernel.body) for segment in segments(bound)] == [1, 1]
