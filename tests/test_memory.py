"""Memory: Concat written in place, views without copies, arena plans at the lower bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.compiler import load
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from aot.planner.arena import plan_program
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def lowered(model):  # noqa: ANN001, ANN201
    graph, _ = load(model)
    run_passes(graph)
    return lower_graph(graph)


def n(op: str, inputs: list[str], output: str, **attrs: object):
    return helper.make_node(op, inputs, [output], name=f"{op.lower()}_{output}", **attrs)


def fire_module(output_is_graph_output: bool = False):  # noqa: ANN201
    """SqueezeNet's fire module: squeeze conv, two expand convs, channel Concat."""
    x = rand(1, 8, 6, 6)
    nodes = [n("Conv", ["x", "ws"], "s"), n("Relu", ["s"], "sr"),
             n("Conv", ["sr", "w1"], "e1"), n("Relu", ["e1"], "e1r"),
             n("Conv", ["sr", "w3"], "e3", pads=[1, 1, 1, 1]), n("Relu", ["e3"], "e3r"),
             n("Concat", ["e1r", "e3r"], "cat", axis=1)]
    outputs = ["cat"]
    if not output_is_graph_output:
        nodes.append(n("Conv", ["cat", "wo"], "y"))
        outputs = ["y"]
    inits = {"ws": rand(4, 8, 1, 1, seed=1), "w1": rand(5, 4, 1, 1, seed=2), "w3": rand(6, 4, 3, 3, seed=3),
             "wo": rand(3, 11, 1, 1, seed=4)}
    return make_model(nodes, {"x": x}, outputs, inits), {"x": x}


@pytest.mark.parametrize("as_output", [False, True], ids=["intermediate", "graph_output"])
def test_concat_parts_are_written_in_place(as_output: bool) -> None:
    model, feeds = fire_module(as_output)
    program = lowered(model)
    assert not any(k.op == "Concat" for k in program.kernels), [k.op for k in program.kernels]
    assert_matches_onnxruntime(model, feeds)


def test_concat_copies_only_what_cannot_be_placed() -> None:
    x = rand(1, 2, 3, 3)
    model = make_model([n("Relu", ["x"], "r"), n("Concat", ["x", "r", "c", "r2"], "y", axis=1),
                        n("Sigmoid", ["x"], "r2")], {"x": x}, ["y"], {"c": rand(1, 3, 3, 3, seed=1)})
    # Topological order: r2 must come before Concat.
    model.graph.node.insert(1, model.graph.node.pop(2))
    program = lowered(model)
    concat = [k for k in program.kernels if k.op == "Concat"]
    assert len(concat) == 1 and len(concat[0].params) == 3  # copies x and c; r, r2 are in place
    assert_matches_onnxruntime(model, {"x": x})


def test_nested_concat_and_part_read_by_others() -> None:
    x = rand(1, 2, 4)
    model = make_model([n("Relu", ["x"], "a"), n("Tanh", ["x"], "b"), n("Concat", ["a", "b"], "ab", axis=1),
                        n("Sigmoid", ["x"], "c"), n("Concat", ["ab", "c"], "abc", axis=1),
                        n("Neg", ["a"], "na"), n("Concat", ["abc", "na"], "y", axis=1)],
                       {"x": x}, ["y"])
    program = lowered(model)
    assert not any(k.op == "Concat" for k in program.kernels)  # a, b, c, na all land in y directly
    assert_matches_onnxruntime(model, {"x": x})


def test_strided_concat_is_copied() -> None:
    x = rand(2, 3, 4)
    model = make_model([n("Relu", ["x"], "a"), n("Exp", ["x"], "b"), n("Concat", ["a", "b"], "y", axis=1)],
                       {"x": x}, ["y"])
    assert [k.op for k in lowered(model).kernels][-1] == "Concat"
    assert_matches_onnxruntime(model, {"x": x})


def test_views_cost_nothing() -> None:
    x = rand(2, 3, 4)
    model = make_model([n("Relu", ["x"], "r"), n("Reshape", ["r", "shape"], "v"), n("Flatten", ["v"], "f"),
                        n("Unsqueeze", ["f", "ax"], "u"), n("Sigmoid", ["u"], "y")], {"x": x}, ["y"],
                       {"shape": np.array([6, 4], np.int64), "ax": np.array([0], np.int64)})
    assert [k.op for k in lowered(model).kernels] == ["Relu", "Sigmoid"]
    assert_matches_onnxruntime(model, {"x": x})


def test_arena_reaches_the_lower_bound_on_the_example() -> None:
    from pathlib import Path

    graph, _ = load(Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx")
    run_passes(graph)
    memory = plan_program(lower_graph(graph)).memory
    assert memory.arena_bytes == memory.lower_bound_bytes < memory.unshared_bytes


def test_a_concat_of_many_graph_inputs_is_copied_by_kernels_of_at_most_64_inputs() -> None:
    """Each copy kernel takes its inputs as restrict pointers, and gcc's time grows with the
    square of their number: a wide Concat is split so that a package of 10,000 inputs builds."""
    from aot.ops.layout import MAX_INPUTS_PER_KERNEL

    count = 3 * MAX_INPUTS_PER_KERNEL + 5
    feeds = {f"x{i}": rand(1, 3, seed=i) for i in range(count)}
    model = make_model([n("Concat", list(feeds), "y", axis=0)], feeds, ["y"], {})
    program = lowered(model)
    assert [k.op for k in program.kernels] == ["Concat"] * 4
    assert max(len(k.params) for k in program.kernels) <= MAX_INPUTS_PER_KERNEL + 1
    assert_matches_onnxruntime(model, feeds)


def test_a_package_of_hundreds_of_inputs_runs_through_its_struct_api(tmp_path) -> None:  # noqa: ANN001
    """Past 256 inputs the struct-to-array copy of run() is split into functions of 256 stores
    (one function of thousands took gcc minutes); the program still gets its own inputs back."""
    import subprocess

    from aot.backends.c.model_source import POINTER_CHUNK
    from aot.compiler import compile as compile_model
    from aot.host.build import host_cc, run_make

    count = POINTER_CHUNK + 44
    feeds = {f"x{i}": rand(1, 3, seed=i) for i in range(count)}
    model = make_model([n("Concat", list(feeds), "y", axis=0)], feeds, ["y"], {})
    compile_model(model, name="wide").write(tmp_path / "wide")
    source = (tmp_path / "wide" / "wide.c").read_text()
    assert "wide_input_pointers_1(inputs, in);" in source and "wide_input_pointers_2" not in source
    run_make(tmp_path / "wide", ["libwide.a"])
    fields = "\n".join(f"    in.x{i} = x[{i}];" for i in range(count))
    (tmp_path / "main.c").write_text(f"""#include <stdio.h>
#include "wide.h"
static float x[{count}][3], y[{count * 3}];
static unsigned char arena[WIDE_ARENA_SIZE + WIDE_ARENA_ALIGN];
int main(void) {{
    wide_inputs in;
    wide_outputs out;
    int i, wrong = 0;
    size_t skip;
    for (i = 0; i < {count * 3}; ++i) x[i / 3][i % 3] = (float)i;
{fields}
    out.y = y;
    skip = (WIDE_ARENA_ALIGN - (size_t)arena % WIDE_ARENA_ALIGN) % WIDE_ARENA_ALIGN;
    if (wide_run(&in, &out, arena + skip) != AOT_OK) return 2;
    for (i = 0; i < {count * 3}; ++i) wrong += y[i] != (float)i;
    printf("%d wrong\\n", wrong);
    return wrong != 0;
}}
""")
    program = tmp_path / "main"
    subprocess.run([host_cc(), "-std=c99", "-O1", f"-I{tmp_path / 'wide'}", str(tmp_path / "main.c"),
                    str(tmp_path / "wide" / "libwide.a"), "-lm", "-o", str(program)], check=True)
    result = subprocess.run([str(program)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "0 wrong\n", result.stdout + result.stderr
