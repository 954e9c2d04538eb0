"""In-place reuse: elementwise kernels write over an input that dies there, and the arena shrinks."""

from __future__ import annotations

import pytest
from onnx import helper

from aot.backends.c.kernel_printer import KernelPrinter
from aot.compiler import load
from aot.kernel.ir import INDEX, Buffer, Kernel, Load, Loop, Store, Var, const
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from aot.planner.arena import plan_program, verify_sharing
from aot.planner.in_place import InPlace, in_place_candidates
from aot.planner.memory import Interval
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def lowered(model):  # noqa: ANN001, ANN201
    graph, _ = load(model)
    run_passes(graph)
    return lower_graph(graph)


def n(op: str, inputs: list[str], output: str, **attrs: object):  # noqa: ANN201
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


WEIGHTS = {"w1": rand(8, 4, 3, 3, seed=1), "w2": rand(2, 8, 1, 1, seed=2)}


def swish_model():  # noqa: ANN201
    """Conv -> x * sigmoid(x) -> Conv: the conv output has two readers, so the Sigmoid*Mul kernel
    runs on its own and reads it at the index it writes."""
    x = rand(1, 4, 8, 8)
    nodes = [n("Conv", ["x", "w1"], "t", pads=[1, 1, 1, 1]), n("Sigmoid", ["t"], "s"), n("Mul", ["t", "s"], "u"),
             n("Conv", ["u", "w2"], "y")]
    return make_model(nodes, {"x": x}, ["y"], WEIGHTS), {"x": x}


def add_of_consumed_model():  # noqa: ANN201
    """Relu(t) and Sigmoid(t) + Relu(t): the Add's kernel reads two tensors that both die there."""
    x = rand(1, 4, 8, 8)
    nodes = [n("Conv", ["x", "w1"], "t", pads=[1, 1, 1, 1]), n("Sigmoid", ["t"], "s"), n("Relu", ["t"], "r"),
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
        # The C kernel must not promise the compiler that the two pointers never alias.
        assert {out_param, in_param} <= program.overlapping_params(k)
        signature = KernelPrinter("m").signature(program.kernels[k], program.overlapping_params(k))
        assert "restrict" not in signature.split(",")[in_param] + signature.split(",")[out_param]
    assert_matches_onnxruntime(model, feeds)


def test_chain_of_in_place_kernels_shares_one_buffer() -> None:
    # Each link has a second reader of its input at its own kernel only (x * f(x)), so no fusion.
    x = rand(1, 3, 6, 6)
    nodes = [n("Conv", ["x", "w1"], "t0"), n("Sigmoid", ["t0"], "s0"), n("Mul", ["t0", "s0"], "t1"),
             n("Tanh", ["t1"], "s1"), n("Mul", ["t1", "s1"], "t2"), n("Conv", ["t2", "w2"], "y")]
    model = make_model(nodes, {"x": x}, ["y"], {"w1": rand(6, 3, 1, 1, seed=1), "w2": rand(2, 6, 1, 1, seed=2)})
    planned = plan_program(lowered(model), reorder=False)
    program, memory = planned.program, planned.memory
    assert len(program.in_place) == 2
    assert memory.offsets["t0"] == memory.offsets["t1"] == memory.offsets["t2"]
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
