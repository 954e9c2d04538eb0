"""aot/backends/c/load_walks.py: which vector loads the C printer turns into a walking pointer
(AOT_F32X4_LOAD_STEP), and that packages for rpi3 use it where their tiles read consecutive vectors."""

from __future__ import annotations

from pathlib import Path

from aot.backends.c.load_walks import WalkStep, load_walks
from aot.compiler import compile as compile_model
from aot.kernel.ir import INDEX, Assign, Binary, Buffer, Const, Declare, Loop, Var, VecLoad, VecStore

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"
W = Buffer("w", "float32", 4096, False)
OUT = Buffer("out", "float32", 64, True)
K = Var("k", INDEX)


def load(name: str, offset: int, buffer: Buffer = W, lanes: int = 4) -> Declare:
    index = Binary("add", Binary("mul", K, Const(64, INDEX), INDEX), Const(offset, INDEX), INDEX)
    return Declare(Var(name, f"float32x{lanes}"), VecLoad(buffer, index, lanes))


def names(buffer: str) -> str:
    return f"{buffer}_walk"


def test_consecutive_loads_walk_from_the_first() -> None:
    block = [load("v0", 16), load("v1", 20), load("v2", 24), load("v3", 28)]
    assert load_walks(block, names) == {0: WalkStep("w_walk", True), 1: WalkStep("w_walk", False),
                                        2: WalkStep("w_walk", False), 3: WalkStep("w_walk", False)}


def test_a_gap_a_lone_load_or_other_lanes_do_not_walk() -> None:
    # 0 -> 8 skips a vector; 8 alone after it; 8-lane vectors are not walked
    assert load_walks([load("v0", 0), load("v1", 8)], names) == {}
    assert load_walks([load("v0", 0, lanes=8), load("v1", 8, lanes=8)], names) == {}


def test_a_loop_a_store_or_an_assignment_to_an_index_variable_ends_a_walk() -> None:
    store = VecStore(OUT, Const(0, INDEX), Var("v0", "float32x4"))
    inner = Loop(Var("j", INDEX), 2, [])
    for between in (store, inner, Assign(K, Const(1, INDEX))):
        steps = load_walks([load("v0", 0), load("v1", 4), between, load("v2", 8), load("v3", 12)], names)
        assert [p for p, s in steps.items() if s.first] == [0, 3], between
    # an assignment to another variable does not
    other = Assign(Var("t", INDEX), Const(1, INDEX))
    steps = load_walks([load("v0", 0), load("v1", 4), other, load("v2", 8)], names)
    assert sorted(steps) == [0, 1, 3] and [p for p, s in steps.items() if s.first] == [0]


def test_rpi3_packages_walk_their_tile_operands() -> None:
    source = compile_model(str(EXAMPLE), backend="c", target="rpi3").files["tiny_cnn.c"]
    text = source.decode() if isinstance(source, bytes) else source
    # a tile's two operand vectors per row load as one pair (armv7 gcc: one vld1 of 4 d registers)
    assert "AOT_F32X4_LOAD2_STEP(" in text
    # each walk's pointer is declared once, at the address of its first vector
    pointers = [line.split("*", 1)[1].split(" =", 1)[0] for line in text.splitlines()
                if line.strip().startswith("const float *") and "_walk" in line]
    assert pointers and all(text.count(f"LOAD_STEP({p})") + 2 * text.count(f"LOAD2_STEP({p},") >= 2
                            for p in pointers)


def test_walk_steps_print_in_pairs_then_alone() -> None:
    """Three steps of a walk: the first two as one LOAD2_STEP into both variables, the third alone."""
    from aot.backends.c.kernel_printer import KernelPrinter

    out: list[str] = []
    printer = KernelPrinter("m")
    printer._block([load("v0", 16), load("v1", 20), load("v2", 24)], 1, out)
    assert [line.strip() for line in out] == [
        "const float *w_walk0 = &w[k * 64 + 16];",
        "aot_f32x4 v0, v1;",
        "AOT_F32X4_LOAD2_STEP(w_walk0, v0, v1);",
        "aot_f32x4 v2 = AOT_F32X4_LOAD_STEP(w_walk0);"]
