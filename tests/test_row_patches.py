"""Patch-based execution under --max-arena (aot/passes/row_patches.py, aot/planner/patch_search.py).

When no choice of convolution forms fits the budget, an early segment of the network runs in bands
of rows: each band computes only the rows it needs of every tensor (halos recomputed), so only
one band's intermediates are live. These tests check that budgets only bands can meet are met,
that the packages match onnxruntime on both backends (and for rpi4 under qemu), and that random
conv/pool chains under random budgets either fit and match or name the smallest arena aot can
reach, which a budget of that size then gets.
"""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.targets import load_target
from aot.toolchain.target_build import TargetModel
from tests.conformance import cross_unavailable
from tests.helpers import assert_matches_onnxruntime, assert_outputs_match, make_model, rand
from tests.test_cli import aot

SMALLEST = re.compile(r"the smallest arena aot can plan for .+ is (\d+) bytes")


class _Chain:
    """An NCHW model built layer by layer with seeded weights."""

    def __init__(self, channels: int, height: int, width: int, seed: int = 0) -> None:
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.x = rand(1, channels, height, width, seed=seed)
        self.last, self.channels, self.seed = "x", channels, seed
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def conv(self, out: int, kernel: tuple[int, int] = (3, 3), group: int = 1, source: str | None = None,
             **attrs: object) -> str:
        name = self._name("conv")
        source = source or self.last
        self.seed += 1
        self.inits[f"{name}_w"] = rand(out, self.channels // group, *kernel, seed=self.seed) * 0.3
        self.inits[f"{name}_b"] = rand(out, seed=self.seed + 1000) * 0.1
        self.nodes.append(helper.make_node("Conv", [source, f"{name}_w", f"{name}_b"], [name], name=name,
                                           group=group, **attrs))
        self.channels, self.last = out, name
        return name

    def op(self, op_type: str, *sources: str, **attrs: object) -> str:
        name = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(sources) or [self.last], [name], name=name, **attrs))
        self.last = name
        return name

    def model(self) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        return make_model(self.nodes, {"x": self.x}, [self.last], self.inits), {"x": self.x}


def mobilenet_stage() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """VWW's shape in small: a strided stem with asymmetric padding, depthwise-separable blocks
    with strided depthwise convs, and a whole-plane average pool before a classifier."""
    c = _Chain(3, 64, 40, seed=1)
    c.conv(8, strides=[2, 2], pads=[0, 0, 1, 1])
    c.op("Relu")
    for out, stride in ((16, 1), (24, 2), (24, 1), (32, 2)):
        pads = [1, 1, 1, 1] if stride == 1 else [0, 0, 1, 1]
        c.conv(c.channels, group=c.channels, strides=[stride, stride], pads=pads)
        c.op("Relu")
        c.conv(out, kernel=(1, 1))
        c.op("Relu")
    c.op("AveragePool", kernel_shape=[8, 5])
    c.op("Flatten")
    c.inits["fc_w"] = rand(32, 10, seed=99) * 0.2
    c.op("MatMul", c.last, "fc_w")
    return c.model()


def fire_and_residual() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """SqueezeNet's and ResNet's shapes: a strided stem, a ceil-mode MaxPool, a fire module (two
    expand branches joined by a channel Concat), a residual block, a padded AveragePool."""
    c = _Chain(3, 160, 17, seed=2)
    c.conv(16, strides=[2, 2], pads=[1, 1, 1, 1])
    c.op("Relu")
    c.op("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    squeeze = c.conv(8, kernel=(1, 1))
    left = c.conv(16, kernel=(1, 1), source=squeeze)
    c.channels = 8
    right = c.conv(16, pads=[1, 1, 1, 1], source=squeeze)
    joined = c.op("Concat", left, right, axis=1)
    c.channels = 32
    c.conv(32, pads=[2, 1, 2, 1], dilations=[2, 1])
    c.op("Relu")
    c.conv(32, pads=[1, 1, 1, 1])
    c.op("Add", c.last, joined)
    c.op("Relu")
    c.op("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    c.conv(8, kernel=(1, 1))
    return c.model()


MODELS = {"mobilenet_stage": mobilenet_stage, "fire_and_residual": fire_and_residual}
# Budgets as a share of today's arena that only bands of rows reach (the forms alone cannot).
SHARES = {"mobilenet_stage": 0.4, "fire_and_residual": 0.3}  # below what the forms alone reach


def _budget(name: str) -> int:
    model, _ = MODELS[name]()
    return int(compile_model(model).manifest["arena_bytes"] * SHARES[name])


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_bands_of_rows_meet_budgets_the_forms_cannot(name: str, backend: str) -> None:
    model, inputs = MODELS[name]()
    budget = _budget(name)
    package = compile_model(model, backend=backend, max_arena=budget)
    assert package.manifest["arena_bytes"] <= budget
    assert_matches_onnxruntime(model, inputs, backend=backend, max_arena=budget)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inspect_names_the_segment_and_its_bands(name: str, tmp_path) -> None:  # noqa: ANN001
    model, _ = MODELS[name]()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    budget = _budget(name)
    result = aot("inspect", str(path), "--max-arena", str(budget), "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["max_arena"]
    patches = plan["patches"]
    assert patches is not None and patches["bands"] >= 2 and plan["arena_bytes"] <= budget
    names = {n.name for n in model.graph.node}
    assert patches["first_node"] in names and patches["last_node"] in names
    assert patches["recomputed_macs"] > 0  # the halos
    text = aot("inspect", str(path), "--max-arena", str(budget)).stdout
    assert f"run in {patches['bands']} bands of rows" in text and repr(patches["first_node"]) in text


def test_a_pool_over_whole_planes_joins_the_segment() -> None:
    """DS-CNN's case: the average pool after the last band reads only a running sum per plane, so
    the pooled tensor is never whole."""
    model, inputs = mobilenet_stage()
    # Below what bands that leave the pool whole reach (0.35 of the default plan with AVX-512 tiles).
    budget = int(compile_model(model).manifest["arena_bytes"] * 0.3)
    package = compile_model(model, max_arena=budget)
    assert package.manifest["arena_bytes"] <= budget
    c_source = "\n".join(str(text) for name, text in package.files.items() if str(name).endswith(".c"))
    assert "ReduceSum" in c_source, "the bands' rows are summed into the pool's total"
    assert "AveragePool" not in c_source, "the pool is never run on the whole tensor"
    assert_matches_onnxruntime(model, inputs, max_arena=budget)


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_bands_of_rows_match_onnxruntime_on_rpi4_under_qemu(backend: str) -> None:
    problem = cross_unavailable("rpi4")
    if problem:
        pytest.skip(problem)
    model, inputs = mobilenet_stage()
    budget = _budget("mobilenet_stage")
    package = compile_model(model, backend=backend, target="rpi4", max_arena=budget)
    assert package.manifest["arena_bytes"] <= budget
    built = TargetModel.build(package, load_target("rpi4"))
    assert_outputs_match(built.run(dict(inputs)), model, inputs, what="mobilenet_stage ")


@st.composite
def conv_chains(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, np.ndarray], float]:
    """A random chain of convolutions (any kernel, stride, dilation and padding, depthwise or
    dense), pools and activations, with residual Adds, and a budget as a share of its arena."""
    height = draw(st.integers(12, 40))
    c = _Chain(draw(st.integers(1, 4)), height, draw(st.integers(3, 12)), seed=draw(st.integers(0, 1000)))
    for _ in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["conv", "depthwise", "maxpool", "avgpool", "residual"]))
        kh = draw(st.integers(1, min(5, height)))
        dilation = draw(st.integers(1, 2)) if kind in ("conv", "depthwise") and 2 * kh - 1 <= height else 1
        stride = draw(st.integers(1, 2)) if height >= 4 else 1
        top, bottom = draw(st.integers(0, kh // 2)), draw(st.integers(0, kh // 2))
        if kind in ("conv", "depthwise"):
            group = c.channels if kind == "depthwise" else 1
            out = c.channels if kind == "depthwise" else draw(st.integers(1, 12))
            c.conv(out, kernel=(kh, 3), group=group, strides=[stride, 1], dilations=[dilation, 1],
                   pads=[top, 1, bottom, 1])
            height = (height + top + bottom - (kh - 1) * dilation - 1) // stride + 1
        elif kind in ("maxpool", "avgpool"):
            op = "MaxPool" if kind == "maxpool" else "AveragePool"
            extra = {"count_include_pad": draw(st.integers(0, 1))} if kind == "avgpool" else {}
            c.op(op, kernel_shape=[kh, 1], strides=[stride, 1], pads=[top, 0, bottom, 0], **extra)
            height = (height + top + bottom - kh) // stride + 1
        else:
            start = c.last
            c.conv(c.channels, kernel=(3, 1), pads=[1, 0, 1, 0])
            c.op("Relu")
            c.op("Add", c.last, start)
        if draw(st.booleans()):
            c.op(draw(st.sampled_from(["Relu", "Sigmoid"])))
    return (*c.model(), draw(st.floats(0.2, 0.95)))


@settings(max_examples=12, deadline=None)
@given(conv_chains())
def test_random_conv_chains_under_random_budgets_fit_and_match_or_name_the_smallest(
        case: tuple[onnx.ModelProto, dict[str, np.ndarray], float]) -> None:
    model, inputs, share = case
    default = compile_model(model).manifest["arena_bytes"]
    budget = max(1, int(default * share))
    try:
        package = compile_model(model, max_arena=budget)
    except AotError as error:
        match = SMALLEST.search(str(error))
        assert match, str(error)
        smallest = int(match[1])
        assert smallest > budget
        budget = smallest  # what the error names is a budget aot meets
        package = compile_model(model, max_arena=budget)
    assert package.manifest["arena_bytes"] <= budget
    event("bands of rows" if any("Slice" in str(t) or "Concat" in str(t) for n, t in package.files.items()
                                 if str(n).endswith("test_graph.c")) else "forms only")
    assert_matches_onnxruntime(model, inputs, max_arena=budget)


def test_report_shows_the_budgeted_plan_and_what_each_technique_saved(tmp_path) -> None:  # noqa: ANN001
    model, _ = fire_and_residual()
    path, page = tmp_path / "fire.onnx", tmp_path / "report.html"
    onnx.save(model, path)
    budget = _budget("fire_and_residual")
    result = aot("report", str(path), "-o", str(page), "--max-arena", str(budget))
    assert result.returncode == 0, result.stderr
    plan = json.loads(aot("inspect", str(path), "--max-arena", str(budget), "--json").stdout)["max_arena"]
    html = page.read_text()
    assert f"Plan within --max-arena {budget}" in html
    assert f"Arena {plan['arena_bytes']} bytes, against {plan['default_arena_bytes']}" in html
    saved = re.findall(r'<td>(convolution forms|bands of rows|in-place pairs)</td><td class="num">(\d+)</td>', html)
    by_technique = {name: int(n) for name, n in saved}
    # the forms and the bands together account for every byte the plan saved
    assert by_technique["convolution forms"] + by_technique["bands of rows"] == \
        plan["default_arena_bytes"] - plan["arena_bytes"]
    assert by_technique["bands of rows"] > 0 and f"in {plan['patches']['bands']} bands" in html
    plain = aot("report", str(path), "-o", str(tmp_path / "plain.html"))
    assert plain.returncode == 0 and "Plan within" not in (tmp_path / "plain.html").read_text()


def depthwise_sandwich(stride: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A padded depthwise conv between two pointwise ones: at its step the input and the output
    are live together, unless it writes over its input."""
    c = _Chain(16, 12, 10, seed=3)
    c.conv(16, kernel=(1, 1))
    c.conv(16, group=16, pads=[1, 1, 1, 1], strides=[stride, stride])
    c.op("Relu")
    c.conv(4, kernel=(1, 1))
    return c.model()


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_a_depthwise_conv_writes_over_its_input_under_a_budget(backend: str, stride: int, tmp_path) -> None:  # noqa: ANN001
    """TinyEngine's in-place depthwise: one channel at a time into a scratch plane, copied over
    the channel it read (a strided one's smaller output over the channels already read), so one
    tensor and a plane are live instead of two tensors."""
    model, inputs = depthwise_sandwich(stride)
    path = tmp_path / "sandwich.onnx"
    onnx.save(model, path)
    tensor = 16 * 12 * 10 * 4
    budget = tensor + 12 * 10 * 4 // stride // stride + 64  # one tensor, one output plane (aligned)
    assert compile_model(model, backend=backend).manifest["arena_bytes"] > budget  # (input, output, copy)
    report = json.loads(aot("inspect", str(path), "--json", "--max-arena", str(budget)).stdout)
    forms = {c["node"]: c["form"] for c in report["max_arena"]["changed_forms"]}
    assert forms.get("conv2") == "row updates into a channel plane, written over the input", forms
    assert report["max_arena"]["patches"] is None
    package = compile_model(model, backend=backend, max_arena=budget)
    assert package.manifest["arena_bytes"] <= budget
    assert_matches_onnxruntime(model, inputs, backend=backend, max_arena=budget)
