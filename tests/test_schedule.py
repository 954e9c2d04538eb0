"""Kernel scheduling: branches run in the order that keeps the least memory live."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import helper

from aot.compiler import load
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from aot.planner.arena import plan_program
from aot.planner.schedule import choose_order, dependencies
from tests.helpers import assert_matches_onnxruntime, make_model, rand, selected_backend


def lowered(model):  # noqa: ANN001, ANN201
    graph, _ = load(model)
    run_passes(graph)
    return lower_graph(graph)


def n(op: str, inputs: list[str], output: str, **attrs: object):  # noqa: ANN201
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


def two_branches():  # noqa: ANN201
    """Two branches that widen then narrow, listed breadth first: both wide tensors are live
    together in the ONNX order, one at a time if each branch is finished before the next starts."""
    x = rand(1, 4, 12, 12)
    nodes = [n("Conv", ["x", "wa1"], "a1"), n("Conv", ["x", "wb1"], "b1"), n("Conv", ["x", "wc1"], "c1"),
             n("Conv", ["a1", "wa2"], "a2"), n("Conv", ["b1", "wb2"], "b2"), n("Conv", ["c1", "wc2"], "c2"),
             n("Concat", ["a2", "b2", "c2"], "cat", axis=1), n("Conv", ["cat", "wo"], "y")]
    inits = {"wa1": rand(32, 4, 1, 1, seed=1), "wb1": rand(32, 4, 1, 1, seed=2), "wc1": rand(32, 4, 1, 1, seed=3),
             "wa2": rand(2, 32, 3, 3, seed=4), "wb2": rand(2, 32, 3, 3, seed=5), "wc2": rand(2, 32, 3, 3, seed=6),
             "wo": rand(3, 6, 1, 1, seed=7)}
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def test_scheduler_finishes_a_branch_before_starting_the_next() -> None:
    model, feeds = two_branches()
    lowered_program = lowered(model)
    original = plan_program(lowered(model), reorder=False).memory
    planned = plan_program(lowered_program)
    program, scheduled = planned.program, planned.memory
    assert scheduled.lower_bound_bytes < original.lower_bound_bytes
    assert scheduled.arena_bytes < original.arena_bytes
    sources = [k.sources[0] for k in program.kernels]
    for branch in "abc":  # each widening conv is directly followed by its narrowing one
        assert sources.index(f"conv_{branch}2") == sources.index(f"conv_{branch}1") + 1, sources
    assert [k.name for k in program.kernels] == [f"k{i}" for i in range(len(program.kernels))]
    # The lowered program keeps its kernels, their order and their names.
    assert [k.sources for k in lowered_program.kernels] != [k.sources for k in program.kernels]
    assert [k.name for k in lowered_program.kernels] == [f"k{i}" for i in range(len(program.kernels))]
    assert_matches_onnxruntime(model, feeds)


def test_schedule_is_deterministic_and_leaves_the_program_alone() -> None:
    model, _ = two_branches()
    program = lowered(model)
    before = [(k.name, k.sources) for k in program.kernels]
    first, second = plan_program(program), plan_program(lowered(model))
    assert first.schedule == second.schedule != "original"
    assert [k.sources for k in first.kernels] == [k.sources for k in second.kernels]
    assert [(k.name, k.sources) for k in program.kernels] == before and program.in_place == ()
    again = plan_program(program)  # planning the same program again gives the same plan
    assert again.schedule == first.schedule and [k.sources for k in again.kernels] == [k.sources for k in first.kernels]
    assert again.memory == first.memory


def test_linear_model_keeps_its_order() -> None:
    graph, _ = load(Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx")
    run_passes(graph)
    program = lower_graph(graph)
    order, strategy = choose_order(program, 64)
    assert strategy == "original" and order == list(range(len(program.kernels)))


def test_dependencies_follow_shared_storage() -> None:
    # a, b are written in place into the Concat output; the Conv reading it must follow both, and
    # the Sigmoid reading a must follow a's writer but not b's.
    x = rand(1, 2, 4, 4)
    nodes = [n("Relu", ["x"], "a"), n("Tanh", ["x"], "b"), n("Concat", ["a", "b"], "cat", axis=1),
             n("Conv", ["cat", "w"], "y"), n("Sigmoid", ["a"], "z")]
    model = make_model(nodes, {"x": x}, ["y", "z"], {"w": rand(2, 4, 1, 1, seed=1)})
    program = lowered(model)
    ops = [k.op for k in program.kernels]
    assert ops == ["Relu", "Tanh", "Conv", "Sigmoid"], ops
    assert dependencies(program) == [set(), set(), {0, 1}, {0}]
    assert_matches_onnxruntime(model, {"x": x})


# Random graphs (Concats in place, views, residuals, heads) whose kernels can run in another order.
REORDERABLE_SEEDS = [2, 4, 5, 10, 13, 14, 20, 21, 28, 35, 37, 50, 57]


@pytest.mark.parametrize("seed", REORDERABLE_SEEDS)
def test_any_order_the_dependencies_allow_computes_the_same(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forces the order furthest from the lowering's (the latest ready kernel first) whatever its
    peak, so the dependency analysis is checked against onnxruntime on many shapes of graph."""
    import aot.planner.arena as arena
    import aot.planner.schedule as scheduling
    from tests.fuzz_graphs import check, random_model

    def latest_first(program, alignment, candidates=None):  # noqa: ANN001, ANN202
        order = scheduling.list_schedule(program, dependencies(program), lambda k, *_: (-k,), alignment)
        return order, "latest_first"

    graph, _ = load(random_model(seed)[0])
    run_passes(graph)
    program = lower_graph(graph)
    assert latest_first(program, 64)[0] != list(range(len(program.kernels)))
    monkeypatch.setattr(arena, "choose_order", latest_first)
    problem = check(seed, backend=selected_backend())
    assert problem is None, problem
