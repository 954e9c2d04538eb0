"""The ONNX backend conformance cases (tests/conformance.py) as tests.

* test_case: one test per case that is in scope and uses only ops in aot's registry; it must pass.
* test_light_model (slow): the light model zoo (ResNet-50, DenseNet-121, ...), each built in a child
  process with a memory limit and a deadline.
* test_node_pass_rate: runs every node case (and the model folders, for the report), prints the
  summary (counts, every failure with its reason, every unsupported case with its missing ops) and
  requires >= 97% of the in-scope, registry-supported node cases to pass. Cases with unsupported
  ops are counted and listed there, never turned into failing tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.compiler import load
from tests import conformance as cf
from tests.conftest import conformance_summary_path
from tests.helpers import assert_matches_onnxruntime, rand

PASS_RATE_REQUIRED = 0.97
# Light models: VGG-19, the biggest, takes about 80 s to compile, build and run on one core.
LIGHT_TIMEOUT = 1200.0

ALL_CASES = cf.all_cases()
TARGETS = [c for c in ALL_CASES if cf.is_test_target(c)]
FAST_TARGETS = [c for c in TARGETS if c.suite != cf.LIGHT]
LIGHT_TARGETS = [c for c in TARGETS if c.suite == cf.LIGHT]


def _case_id(case: cf.Case) -> str:
    return case.id


@pytest.mark.parametrize("case", FAST_TARGETS, ids=_case_id)
def test_case(case: cf.Case) -> None:
    result = cf.run_case(case)
    assert result.status == cf.PASSED, result.line()


@pytest.mark.slow
@pytest.mark.parametrize("case", LIGHT_TARGETS, ids=_case_id)
def test_light_model(case: cf.Case) -> None:
    result = cf.run_case_isolated(case, memory_limit=cf.LIGHT_MEMORY_LIMIT, timeout=LIGHT_TIMEOUT)
    assert result.status == cf.PASSED, result.line()


def test_node_pass_rate(request: pytest.FixtureRequest) -> None:
    report_cases = [c for c in ALL_CASES if c.suite != cf.LIGHT]
    results = cf.run_cases(report_cases, jobs=1)
    summary = cf.summarize(results)
    # Light models are only built by the slow tests; here they are listed by what they need.
    light = [c for c in ALL_CASES if c.suite == cf.LIGHT]
    lines = [f"light: {len(LIGHT_TARGETS)} built by the slow tests (-m slow): "
             + ", ".join(c.name for c in LIGHT_TARGETS)]
    light_target_ids = {c.id for c in LIGHT_TARGETS}
    for c in light:
        if c.id not in light_target_ids:
            why = cf.scope_problem(c.model) or f"ops not in the registry: {', '.join(cf.registry_missing_ops(c.model))}"
            lines.append(f"  {c.id}: {why}")
    summary += "\n" + "\n".join(lines)

    node_targets = {c.id for c in TARGETS if c.suite == cf.NODE}
    target_results = [r for r in results if r.case in node_targets]
    passed = sum(r.status == cf.PASSED for r in target_results)
    rate = passed / len(target_results)
    headline = (f"node cases in scope with registry-supported ops: {passed}/{len(target_results)} passed "
                f"({rate:.1%}, required {PASS_RATE_REQUIRED:.0%})")
    summary = f"{headline}\n{summary}"
    print(summary)
    path = conformance_summary_path(request.config)
    if path is not None:
        path.write_text(summary + "\n")
    assert len(target_results) == len(node_targets)
    assert rate >= PASS_RATE_REQUIRED, summary


def test_folding_evaluates_ops_at_the_model_opset() -> None:
    """Found by the light models (opset 9): constant Unsqueeze nodes were folded with the newest
    Unsqueeze, which reads axes from an input, and failed. The fast suites have no such case."""
    nodes = [
        helper.make_node("ConstantOfShape", ["n"], ["ones"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Unsqueeze", ["ones"], ["scale"], axes=[1, 2]),
        helper.make_node("Mul", ["x", "scale"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "opset9", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2, 2])],
                              [numpy_helper.from_array(np.array([3], np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    folded, _ = load(model)
    assert [n.op_type for n in folded.nodes] == ["Mul"]
    assert_matches_onnxruntime(model, {"x": rand(1, 3, 2, 2)})


def test_compile_time_inputs_are_bound_with_input_values() -> None:
    """Inputs the registry says an op needs at compile time (TopK's k, Reduce axes, Resize scales)
    are bound with each data set's value, as --input-value binds them; data inputs, and indices
    read at run time, stay inputs of the package."""
    cases = {c.name: c for c in ALL_CASES if c.suite == cf.NODE}
    for name, bound, runtime in (("test_top_k", ("k",), ["x"]),
                                 ("test_reduce_sum_keepdims_example", ("axes",), ["data"]),
                                 ("test_resize_upsample_scales_nearest", ("scales",), ["X"]),
                                 ("test_gather_0", (), ["data", "indices"])):
        case = cases[name]
        assert case.bound == bound, name
        assert not case.model.graph.initializer, name  # the case's model as onnx ships it
        inputs, _ = case.data_sets()[0]
        values = {n: v for n, v in zip([vi.name for vi in cf.runtime_inputs(case.model)], inputs) if n in bound}
        package = compile_model(case.model, input_values=values)
        assert [i["name"] for i in package.inputs] == runtime, name
        assert [v["name"] for v in package.manifest.get("input_values", [])] == list(bound), name
