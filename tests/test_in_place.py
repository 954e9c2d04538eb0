"""In-place reuse: elementwise kernels, and convolutions whose epilogue adds a residual, write over
an input that dies there, and the arena shrinks."""

from __future__ import annotations

import json

import pytest
from onnx import helper

from aot.backends.c.kernel_printer import KernelPrinter
from aot.compiler import load
from aot.kernel.ir import INDEX, Buffer, Declare, Kernel, Load, Loop, Store, Var, VecArith, VecLoad, VecStore, const
from aot.kernel.unread import untouched_params
from aot.lowering.program import lower_graph
from aot.lowering.tiles import DEFAULT_TILES, TileConfig
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions
from aot.planner.arena import plan_program, verify_sharing
from aot.planner.in_place import InPlace, in_place_candidates, verify_in_place
from aot.planner.memory import Interval
from tests.helpers import assert_matches_onnxruntime, make_model, rand
from tests.test_cli import aot


def lowered(model, tiles: TileConfig = DEFAULT_TILES):  # noqa: ANN001, ANN201
    graph, _ = load(model)
    run_passes(graph)
    return lower_graph(graph, tiles=tiles)


def n(op: str, inputs: list[str], output: str, **attrs: object):  # noqa: ANN201
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


WEIGHTS = {"w1": rand(8, 4, 3, 3, seed=1), "w2": rand(2, 8, 1, 1, seed=2)}


# A Conv takes a following x * f(x) as its epilogue (aot/lowering/fusion.py), so in these models
# the elementwise kernels read the output of a Softmax, which fuses nothing.


def swish_model():  # noqa: ANN201
    """Softmax -> x * sigmoid(x) -> Conv: the Sigmoid*Mul kernel runs on its own and reads the
    Softmax output at the index it writes; the Softmax reads the graph input, so the peak is the
    Sigmoid*Mul's input and output."""
    x = rand(1, 8, 8, 8)
    nodes = [n("Softmax", ["x"], "t", axis=1), n("Sigmoid", ["t"], "s"), n("Mul", ["t", "s"], "u"),
             n("Conv", ["u", "w2"], "y")]
    return make_model(nodes, {"x": x}, ["y"], WEIGHTS), {"x": x}


def add_of_consumed_model():  # noqa: ANN201
    """Relu(t) and Sigmoid(t) + Relu(t): the Add's kernel reads two tensors that both die there."""
    x = rand(1, 4, 8, 8)
    nodes = [n("Conv", ["x", "w1"], "c", pads=[1, 1, 1, 1]), n("Softmax", ["c"], "t", axis=1),
             n("Sigmoid", ["t"], "s"), n("Relu", ["t"], "r"),
             n("Add", ["s", "r"], "a"), n("Tanh", ["a"], "b"), n("Conv", ["b", "w2"], "y")]
    return make_model(nodes, {"x": x}, ["y"], WEIGHTS), {"x": x}


@pytest.mark.parametrize("build", [swish_model, add_of_consumed_model], ids=["swish", "add_of_consumed"])
def test_in_place_lowers_the_bound_and_the_arena(build) -> None:  # noqa: ANN001
    model, feeds = build()
    lowered_program = lowered(model)
    planned = plan_program(lowered_program, reorder=False)
    program, with_reuse = planned.program, planned.memory
    without = plan_program(lowered(model), reorder=False, in_place=False).memory
    assert not lowered_program.in_place  # planning returns its pairs, leaving the lowered program as it was
    assert program.in_place, [k.op for k in program.kernels]
    assert with_reuse.lower_bound_bytes < without.lower_bound_bytes
    assert with_reuse.arena_bytes == with_reuse.lower_bound_bytes < without.arena_bytes
    for k, out_param, in_param in program.in_place:
        out_t, in_t = program.bindings[k][out_param], program.bindings[k][in_param]
        assert with_reuse.offsets[out_t.name] == with_reuse.offsets[in_t.name]
        # The kernel reads its input through the output's pointer, the buffer's only one, which
        # may then stay restrict: no two pointers the compiler is told never alias share memory.
        kernel = program.kernels[k]
        assert kernel.params[in_param] in untouched_params(kernel.params, kernel.body)
        assert not {out_param, in_param} & program.overlapping_params(k)
        signature = KernelPrinter("m").signature(kernel, program.overlapping_params(k))
        assert "restrict" in signature.split(",")[out_param]
    assert_matches_onnxruntime(model, feeds)


def test_chain_of_in_place_kernels_shares_one_buffer() -> None:
    # Each link reads its input twice (x * f(x)), at the index it writes; a Softmax between the
    # links (which fuses nothing) keeps them two kernels, each writing over its dying input.
    x = rand(1, 6, 6, 6)
    nodes = [n("Softmax", ["x"], "t0", axis=1), n("Sigmoid", ["t0"], "s0"), n("Mul", ["t0", "s0"], "t1"),
             n("Softmax", ["t1"], "t2", axis=1), n("Tanh", ["t2"], "s2"), n("Mul", ["t2", "s2"], "t3"),
             n("Conv", ["t3", "w2"], "y")]
    model = make_model(nodes, {"x": x}, ["y"], {"w2": rand(2, 6, 1, 1, seed=2)})
    planned = plan_program(lowered(model), reorder=False)
    program, memory = planned.program, planned.memory
    assert [k.op for k in program.kernels] == ["Softmax", "Sigmoid+Mul", "Softmax", "Tanh+Mul", "Conv"]
    assert len(program.in_place) == 2
    assert memory.offsets["t0"] == memory.offsets["t1"] and memory.offsets["t2"] == memory.offsets["t3"]
    assert_matches_onnxruntime(model, {"x": x})


def test_input_read_later_is_not_overwritten() -> None:
    x = rand(1, 4, 6, 6)
    nodes = [n("Conv", ["x", "w1"], "t"), n("Sigmoid", ["t"], "s"), n("Mul", ["t", "s"], "u"),
             n("Conv", ["u", "w2"], "y"), n("Conv", ["t", "w3"], "z"), n("Add", ["y", "z"], "out")]
    model = make_model(nodes, {"x": x}, ["out"], {"w1": rand(4, 4, 1, 1, seed=1), "w2": rand(2, 4, 1, 1, seed=2),
                                                  "w3": rand(2, 4, 1, 1, seed=3)})
    program = plan_program(lowered(model), reorder=False).program
    # t is still read by the second Conv after the Sigmoid*Mul kernel: u must not overwrite it.
    assert [k.op for k in program.kernels] == ["Conv", "Sigmoid+Mul", "Conv", "Conv+Add"]
    assert program.in_place == ()
    assert_matches_onnxruntime(model, {"x": x})


def test_graph_inputs_and_broadcast_inputs_are_not_overwritten() -> None:
    x = rand(1, 4, 5, 5)
    nodes = [n("Conv", ["x", "w1"], "t"), n("ReduceMean", ["t"], "m", axes=[2, 3], keepdims=1),
             n("Sub", ["t", "m"], "d"), n("Conv", ["d", "w2"], "y"), n("Relu", ["x"], "xr"),
             n("Sigmoid", ["xr"], "y2")]
    model = make_model(nodes, {"x": x}, ["y", "y2"], {"w1": rand(4, 4, 1, 1, seed=1),
                                                        "w2": rand(2, 4, 1, 1, seed=2)})
    program = plan_program(lowered(model), reorder=False).program
    names = {program.bindings[k][i].name for k, _, i in program.in_place}
    assert "m" not in names and "x" not in names and names <= {"t"}
    assert_matches_onnxruntime(model, {"x": x})


# -- the kernel-IR rule, on hand-written kernels ---------------------------------------------------


def _kernel(index_of_load, extent: int = 8, store_twice: bool = False) -> Kernel:  # noqa: ANN001
    a = Buffer("in0", "float32", extent, False)
    b = Buffer("in1", "float32", extent, False)
    out = Buffer("out2", "float32", extent, True)
    i = Var("i0", INDEX)
    body = [Store(out, i, Load(a, index_of_load(i)) + Load(b, i))]
    if store_twice:
        body = [Store(out, i, Load(out, i) * const(2.0, "float32")), *body]
    return Kernel("k0", [a, b, out], [Loop(i, extent, body)], [], "Add")


def test_kernel_rule_accepts_same_index_and_rejects_the_rest() -> None:
    assert in_place_candidates(_kernel(lambda i: i)) == [(2, 0), (2, 1)]
    # Reversed or shifted reads would see elements already overwritten.
    assert in_place_candidates(_kernel(lambda i: const(7, INDEX) - i)) == [(2, 1)]
    assert in_place_candidates(_kernel(lambda i: i * 0)) == [(2, 1)]  # broadcast element
    assert in_place_candidates(_kernel(lambda i: i, store_twice=True)) == []
    # A loop covering only half of the output is no bijection onto it.
    half = _kernel(lambda i: i)
    half.body = [Loop(Var("i0", INDEX), 4, half.body[0].body)]
    assert in_place_candidates(half) == []


def test_sharing_check_rejects_overlap_outside_an_in_place_pair() -> None:
    tensors = [Interval("a", 64, 0, 2), Interval("b", 64, 2, 3), Interval("c", 64, 1, 2)]
    pair = [InPlace(2, 1, 0, "b", "a")]
    verify_sharing(tensors, {"a": 0, "b": 0, "c": 64}, pair, 64)
    with pytest.raises(AssertionError, match="overlap"):
        verify_sharing(tensors, {"a": 0, "b": 0, "c": 0}, pair, 64)
    with pytest.raises(AssertionError, match="overlap"):
        verify_sharing(tensors, {"a": 0, "b": 0, "c": 64}, [], 64)


# -- residual convolutions --------------------------------------------------------------------------


def residual_block(channels: int, width: int, kernel: int, reread: bool = False):  # noqa: ANN201
    """r = Relu(Conv(x)); Relu(Conv(Relu(Conv(r))) + r) -> Conv: the Add fuses into the second
    Conv's epilogue, where r dies (unless `reread`: another Conv reads r after the block)."""
    x = rand(1, 3, width, width)
    pads = [kernel // 2] * 4
    nodes = [n("Conv", ["x", "w0"], "r0"), n("Relu", ["r0"], "r"),
             n("Conv", ["r", "w1"], "t0", pads=pads), n("Relu", ["t0"], "t"),
             n("Conv", ["t", "w2", "b2"], "u", pads=pads), n("Add", ["u", "r"], "s"), n("Relu", ["s"], "v"),
             n("Conv", ["v", "w3"], "y")]
    weights = {"w0": rand(channels, 3, 1, 1, seed=1), "w1": rand(channels, channels, kernel, kernel, seed=2),
               "w2": rand(channels, channels, kernel, kernel, seed=3), "b2": rand(channels, seed=4),
               "w3": rand(2, channels, 1, 1, seed=5)}
    outputs = ["y"]
    if reread:
        nodes += [n("Conv", ["r", "w4"], "z"), n("Add", ["y", "z"], "out")]
        weights["w4"] = rand(2, channels, 1, 1, seed=6)
        outputs = ["out"]
    return make_model(nodes, {"x": x}, outputs, weights), {"x": x}


# Channel counts and widths that leave ragged register tiles (an overlapping last vector).
RESIDUAL_CASES = [(7, 5, 1), (12, 9, 1), (17, 31, 1), (7, 31, 3), (7, 9, 3)]


@pytest.mark.parametrize(("channels", "width", "kernel"), RESIDUAL_CASES,
                         ids=[f"c{c}_w{w}_k{k}" for c, w, k in RESIDUAL_CASES])
def test_conv_writes_over_its_dying_residual(channels: int, width: int, kernel: int, tmp_path) -> None:  # noqa: ANN001
    model, feeds = residual_block(channels, width, kernel)
    tiles = PipelineOptions().tiles  # this machine's, as `aot inspect` plans below
    planned = plan_program(lowered(model, tiles))
    without = plan_program(lowered(model, tiles), in_place=False).memory
    program, memory = planned.program, planned.memory
    residual_kernels = [k for k, kernel_ in enumerate(program.kernels) if "Add" in kernel_.op]
    assert [k for k, _, _ in program.in_place] == residual_kernels
    (k, out_param, in_param), = program.in_place
    assert (program.bindings[k][in_param].name, program.bindings[k][out_param].name) == ("r", "v")
    assert memory.offsets["r"] == memory.offsets["v"]
    assert memory.lower_bound_bytes < without.lower_bound_bytes and memory.arena_bytes < without.arena_bytes
    path = tmp_path / "block.onnx"
    path.write_bytes(model.SerializeToString())
    inspected = json.loads(aot("inspect", str(path), "--json").stdout)
    assert inspected["arena_bytes"] == memory.arena_bytes
    assert [names for names in inspected["in_place_kernels"] if "add_s" in names]
    for backend in ("c", "llvm"):
        assert_matches_onnxruntime(model, feeds, backend=backend)


def test_residual_read_by_a_later_kernel_is_not_overwritten() -> None:
    model, feeds = residual_block(12, 9, 1, reread=True)
    program = plan_program(lowered(model), reorder=False).program
    assert [k.op for k in program.kernels] == ["Conv+Relu", "Conv+Relu", "Conv+Add+Relu", "Conv", "Conv+Add"]
    assert program.in_place == ()
    # The scheduler may run the other reader of r first; only then does r die at the block's Conv.
    program = plan_program(lowered(model)).program
    for k, _, in_param in program.in_place:
        r = program.bindings[k][in_param]
        assert all(r not in bindings for bindings in program.bindings[k + 1:])
    assert_matches_onnxruntime(model, feeds)


def _ragged_row(declared_first: bool) -> Kernel:
    """One row of 12 columns in two vectors of 8 at columns 0 and 4 (overlapping 4..7), each
    stored as acc + residual: either each value computed just before its store (the second vector
    then reloads residual columns 4..7 after the first store overwrote them) or both first."""
    residual = Buffer("residual", "float32", 12, False)
    out = Buffer("y", "float32", 12, True)
    values = [VecArith("add", VecLoad(residual, const(start, INDEX), 8), VecLoad(residual, const(start, INDEX), 8))
              for start in (0, 4)]
    if not declared_first:
        body = [VecStore(out, const(start, INDEX), value) for start, value in zip((0, 4), values)]
    else:
        names = [Var(f"v{i}", "float32x8") for i in range(2)]
        body = [*(Declare(var, value) for var, value in zip(names, values)),
                *(VecStore(out, const(start, INDEX), var) for start, var in zip((0, 4), names))]
    return Kernel("k0", [residual, out], body, [], "Conv+Add")


def test_overlapping_tail_reloading_the_residual_is_refused() -> None:
    assert in_place_candidates(_ragged_row(declared_first=False)) == []
    assert in_place_candidates(_ragged_row(declared_first=True)) == [(1, 0)]


def test_planner_check_catches_a_load_after_the_store() -> None:
    kernel = _ragged_row(declared_first=False)
    program = lowered(residual_block(7, 5, 1)[0])
    program.kernels = [kernel]
    pair = InPlace(0, 1, 0, "v", "r")
    with pytest.raises(AssertionError, match="loads element 4 of the input after storing it"):
        verify_in_place(program, [pair])
    program.kernels = [_ragged_row(declared_first=True)]
    verify_in_place(program, [pair])


def gemm_block(rows: int, features: int, direct: bool = False):  # noqa: ANN201
    """r = Relu(Gemm(x)); Relu(Gemm(Relu(Gemm(r))) + r) -> Gemm, or with `direct` Gemm(r) + r: the
    residual is then also the Gemm's own matrix operand, read by every step of the reduction."""
    x = rand(rows, 6)
    inner = [] if direct else [n("Gemm", ["r", "w3"], "h0"), n("Relu", ["h0"], "h")]
    nodes = [n("Gemm", ["x", "w0"], "r0"), n("Relu", ["r0"], "r"), *inner,
             n("Gemm", ["r" if direct else "h", "w1", "b1"], "u"), n("Add", ["u", "r"], "s"), n("Relu", ["s"], "v"),
             n("Gemm", ["v", "w2"], "y")]
    weights = {"w0": rand(6, features, seed=1), "w1": rand(features, features, seed=2), "b1": rand(features, seed=3),
               "w2": rand(features, 2, seed=4), "w3": rand(features, features, seed=5)}
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


@pytest.mark.parametrize(("rows", "features"), [(3, 17), (5, 31)], ids=["3x17", "5x31"])
def test_gemm_writes_over_its_dying_residual(rows: int, features: int) -> None:
    model, feeds = gemm_block(rows, features)
    planned = plan_program(lowered(model))
    without = plan_program(lowered(model), in_place=False).memory
    (k, out_param, in_param), = planned.program.in_place
    assert planned.program.kernels[k].op == "Gemm+Add+Relu"
    assert planned.program.bindings[k][in_param].name == "r"
    assert planned.memory.arena_bytes < without.arena_bytes
    for backend in ("c", "llvm"):
        assert_matches_onnxruntime(model, feeds, backend=backend)


def test_gemm_reading_its_residual_as_the_matrix_is_refused() -> None:
    model, feeds = gemm_block(5, 31, direct=True)
    program = plan_program(lowered(model)).program
    assert "Gemm+Add+Relu" in [k.op for k in program.kernels]
    assert program.in_place == ()
    assert_matches_onnxruntime(model, feeds)
