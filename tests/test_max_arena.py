"""--max-arena: the fastest plan whose arena fits a budget (aot/planner/budget.py).

Budgets between today's arena and the smallest aot can reach give packages whose arena fits and
whose outputs match onnxruntime, on both backends; a budget below the smallest is one line naming
it; without the flag (or with a budget today's plan meets) the package is byte for byte today's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.compiler import load
from aot.errors import AotError
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan_budgeted
from aot.planner.budget import parse_arena_bytes
from tests.helpers import assert_matches_onnxruntime, make_model, rand
from tests.test_cli import aot, assert_user_error

REPO = Path(__file__).resolve().parent.parent
TINY_CNN = REPO / "examples" / "tiny_cnn.onnx"
SMALLEST = re.compile(r"--max-arena (\d+): the smallest arena aot can plan for (.+) is (\d+) bytes "
                      r"\(peak at node '(.*)', op (\S+)\)$")


def _conv(nodes: list, inits: dict, x: str, out: str, w_shape: tuple[int, ...], seed: int, **attrs: object) -> str:
    inits[f"{out}_w"] = rand(*w_shape, seed=seed) * 0.3
    inits[f"{out}_b"] = rand(w_shape[0], seed=seed + 100)
    nodes.append(helper.make_node("Conv", [x, f"{out}_w", f"{out}_b"], [out], name=out, **attrs))
    return out


def padded_strided_chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """3x3 padded convs (Winograd on vector targets), a strided depthwise conv (a column-phase
    copy), a pointwise conv and a residual Add: every kind of scratch the fast forms make."""
    nodes: list = []
    inits: dict = {}
    x = rand(1, 8, 20, 20, seed=1)
    a = _conv(nodes, inits, "x", "a", (16, 8, 3, 3), 2, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Relu", [a], ["a_relu"], name="a_relu"))
    b = _conv(nodes, inits, "a_relu", "b", (16, 1, 3, 3), 3, pads=[1, 1, 1, 1], strides=[2, 2], group=16)
    c = _conv(nodes, inits, b, "c", (16, 16, 1, 1), 4)
    d = _conv(nodes, inits, c, "d", (16, 16, 3, 3), 5, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Add", [d, c], ["sum"], name="residual"))
    nodes.append(helper.make_node("Relu", ["sum"], ["y"], name="y_relu"))
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def wide_stem_chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A strided stem with odd image sides (im2col or a column-phase copy), a 5x3 conv with
    asymmetric padding and a padded 3x3 conv before a Sigmoid."""
    nodes: list = []
    inits: dict = {}
    x = rand(1, 3, 33, 31, seed=6)
    a = _conv(nodes, inits, "x", "a", (8, 3, 3, 3), 7, pads=[0, 0, 1, 1], strides=[2, 2])
    b = _conv(nodes, inits, a, "b", (12, 8, 5, 3), 8, pads=[2, 1, 2, 1])
    nodes.append(helper.make_node("Relu", [b], ["b_relu"], name="b_relu"))
    c = _conv(nodes, inits, "b_relu", "c", (12, 12, 3, 3), 9, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Sigmoid", [c], ["y"], name="y_sigmoid"))
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def _qlinear_conv(nodes: list, inits: dict, x: str, out: str, w_shape: tuple[int, ...], seed: int,
                  **attrs: object) -> str:
    rng = np.random.default_rng(seed)
    inits[f"{out}_w"] = rng.integers(-127, 128, w_shape, dtype=np.int8)
    inits[f"{out}_w_scale"] = np.full(w_shape[0], 0.01, np.float32)
    inits[f"{out}_w_zero"] = np.zeros(w_shape[0], np.int8)
    inits[f"{out}_b"] = rng.integers(-500, 500, w_shape[0], dtype=np.int32)
    inits[f"{out}_scale"] = np.float32(0.05 * (seed % 3 + 1))
    inits[f"{out}_zero"] = np.int8(seed - 3)
    scale, zero = (f"{x}_scale", f"{x}_zero") if x != "x" else ("x_scale", "x_zero")
    nodes.append(helper.make_node("QLinearConv", [x, scale, zero, f"{out}_w", f"{out}_w_scale", f"{out}_w_zero",
                                                  f"{out}_scale", f"{out}_zero", f"{out}_b"], [out], name=out, **attrs))
    return out


def int8_chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The integer convolutions' forms (aot/ops/quantized/conv/): a padded 3x3 conv (int8 tiles
    over a quad copy), a strided depthwise conv and a pointwise conv."""
    nodes: list = []
    inits: dict = {"x_scale": np.float32(0.05), "x_zero": np.int8(2)}
    x = np.random.default_rng(12).integers(-128, 128, (1, 8, 20, 20), dtype=np.int8)
    a = _qlinear_conv(nodes, inits, "x", "a", (16, 8, 3, 3), 4, pads=[1, 1, 1, 1])
    b = _qlinear_conv(nodes, inits, a, "b", (16, 1, 3, 3), 5, pads=[1, 1, 1, 1], strides=[2, 2], group=16)
    _qlinear_conv(nodes, inits, b, "y", (16, 16, 1, 1), 6)
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def tiny_cnn() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return onnx.load(TINY_CNN), {"image": rand(1, 3, 32, 32, seed=11)}


MODELS = {"tiny_cnn": tiny_cnn, "padded_strided_chain": padded_strided_chain, "wide_stem_chain": wide_stem_chain,
          "int8_chain": int8_chain}


def smallest_arena(model: onnx.ModelProto | Path, **options: object) -> int:
    """The smallest arena aot reaches, from the error a budget of one byte gets."""
    with pytest.raises(AotError) as error:
        compile_model(model, max_arena=1, **options)
    match = SMALLEST.match(str(error.value))
    assert match, str(error.value)
    return int(match[3])


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_budgets_between_default_and_smallest_fit_and_match_onnxruntime(name: str, backend: str) -> None:
    model, inputs = MODELS[name]()
    default = compile_model(model, backend=backend).manifest["arena_bytes"]
    smallest = smallest_arena(model, backend=backend)
    assert smallest < default, "the budget has nothing to win on this model"
    for budget in sorted({default - 1, (default + smallest) // 2, smallest}, reverse=True):
        package = compile_model(model, backend=backend, max_arena=budget)
        assert package.manifest["arena_bytes"] <= budget
        assert_matches_onnxruntime(model, inputs, backend=backend, max_arena=budget)


def test_a_budget_below_the_smallest_names_it_and_the_peak(tmp_path: Path) -> None:
    smallest = smallest_arena(TINY_CNN)
    out = tmp_path / "pkg"
    result = aot("compile", str(TINY_CNN), "-o", str(out), "--max-arena", str(smallest - 1))
    assert_user_error(result, f"--max-arena {smallest - 1}: the smallest arena aot can plan for {TINY_CNN} is "
                              f"{smallest} bytes (peak at node ")
    assert not out.exists()
    # That smallest arena is itself a budget aot meets.
    assert compile_model(TINY_CNN, max_arena=smallest).manifest["arena_bytes"] == smallest


def test_the_search_reports_the_peak_it_could_not_lower() -> None:
    with pytest.raises(AotError) as error:
        compile_model(TINY_CNN, max_arena="1k")
    match = SMALLEST.match(str(error.value))
    assert match and match[1] == "1024"
    graph_nodes = {n.name: n.op_type for n in onnx.load(TINY_CNN).graph.node}
    # the node's own kernel, or the copy of its rows that a band of rows reads (row_patches.py)
    assert match[4] in graph_nodes and (match[5].startswith(graph_nodes[match[4]]) or match[5] == "Slice")


def test_without_the_flag_or_within_todays_arena_the_package_is_todays() -> None:
    model, _ = padded_strided_chain()
    today = compile_model(model)
    assert compile_model(model, max_arena=None).files == today.files
    assert compile_model(model, max_arena=today.manifest["arena_bytes"]).files == today.files
    assert compile_model(model, max_arena=f"{today.manifest['arena_bytes'] * 2}").files == today.files


def test_a_budgeted_package_is_deterministic() -> None:
    model, _ = padded_strided_chain()
    budget = smallest_arena(model)
    assert compile_model(model, max_arena=budget).files == compile_model(model, max_arena=budget).files


@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4096), ("200k", 200 * 1024), ("200K", 200 * 1024), ("2M", 2 * 1024 * 1024), (" 64 ", 64), (7, 7)])
def test_arena_sizes_take_plain_bytes_and_k_or_m_suffixes(text: str | int, expected: int) -> None:
    assert parse_arena_bytes(text) == expected


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5k", "12G", "10 kB", "", "0k"])
def test_a_bad_max_arena_is_one_line_naming_the_option(value: str, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    result = aot("compile", str(TINY_CNN), "-o", str(out), "--max-arena", value)
    assert_user_error(result, "--max-arena", repr(value))
    assert not out.exists()
    with pytest.raises(AotError, match="--max-arena"):
        compile_model(TINY_CNN, max_arena=value)


@pytest.mark.parametrize("command", [
    ["inspect"], ["verify"], ["bench"], ["build", "--target", "x86_64", "-o", "OUT"], ["report", "-o", "OUT"]])
def test_every_command_with_the_option_checks_it_first(command: list[str], tmp_path: Path) -> None:
    args = [str(tmp_path / "pkg") if a == "OUT" else a for a in command]
    result = aot(args[0], str(TINY_CNN), *args[1:], "--max-arena", "lots")
    assert_user_error(result, "--max-arena 'lots'")
    assert not (tmp_path / "pkg").exists()


def test_verify_checks_a_budgeted_package(tmp_path: Path) -> None:
    smallest = smallest_arena(TINY_CNN)
    result = aot("verify", str(TINY_CNN), "--max-arena", str(smallest), "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["passed"] and payload["arena_bytes"] <= smallest


def test_inspect_shows_the_chosen_plan() -> None:
    default = json.loads(aot("inspect", str(TINY_CNN), "--json").stdout)
    assert "max_arena" not in default
    smallest = smallest_arena(TINY_CNN)
    result = aot("inspect", str(TINY_CNN), "--max-arena", str(smallest), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(default) <= set(report)  # new keys only
    plan = report["max_arena"]
    assert plan["max_arena"] == smallest and report["arena_bytes"] == plan["arena_bytes"] <= smallest
    assert plan["default_arena_bytes"] == default["arena_bytes"] > smallest
    assert plan["changed_forms"], "a smaller arena than today's changes some convolution's form"
    for change in plan["changed_forms"]:
        assert change["form"] != change["default_form"] and change["scratch_saved_bytes"] > 0
    assert plan["default_estimated_cost_macs"] > 0
    text = aot("inspect", str(TINY_CNN), "--max-arena", str(smallest))
    assert text.returncode == 0, text.stderr
    assert f"plan within --max-arena {smallest}: arena {plan['arena_bytes']} bytes" in text.stdout
    assert "Forms changed to fit the budget" in text.stdout
    for change in plan["changed_forms"]:
        assert change["node"] in text.stdout and change["form"] in text.stdout


def test_inspect_shows_what_changed_forms_cost() -> None:
    """A budget the forms alone meet: the estimated cost differs from the default plan's by the
    changed convolutions' costs."""
    model, _ = padded_strided_chain()
    budget = compile_model(model).manifest["arena_bytes"] - 1
    graph, _ = load(model)
    run_passes(graph)
    result = lower_and_plan_budgeted(graph, PipelineOptions(max_arena=budget)).to_json()
    assert result["patches"] is None and result["changed_forms"]
    delta = sum(c["cost_macs"] - c["default_cost_macs"] for c in result["changed_forms"])
    assert abs(result["estimated_cost_macs"] - result["default_estimated_cost_macs"] - delta) \
        <= len(result["changed_forms"])


def test_inspect_says_when_todays_plan_fits() -> None:
    default = json.loads(aot("inspect", str(TINY_CNN), "--json").stdout)
    text = aot("inspect", str(TINY_CNN), "--max-arena", str(default["arena_bytes"]))
    assert text.returncode == 0, text.stderr
    assert "the default plan fits: no node changes form" in text.stdout
