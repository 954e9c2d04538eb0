"""The ONNX backend conformance cases (tests/conformance.py) as tests.

* test_case: one test per case that is in scope and uses only ops in aot's registry; it must pass.
* test_light_model (slow): the light model zoo (ResNet-50, DenseNet-121, ...), each built in a child
  process with a memory limit and a deadline.
* test_cases_outside_the_targets_are_classified: the other cases (out of scope, or needing ops
  outside the registry) are run for the report; none may crash the compiler.

Every case's result is recorded (tests/conformance.py: record_result) and the run ends with the
summary (tests/conftest.py): counts, every failure with its reason, every unsupported case with its
missing ops. Cases with unsupported ops are counted and listed there, never turned into failing
tests. Each case runs once: the summary reads what test_case found instead of running it again.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.compiler import load
from tests import conformance as cf
from tests.conftest import conformance_results_dir
from tests.helpers import assert_matches_onnxruntime, rand

# Light models: VGG-19, the biggest, takes about 80 s to compile, build and run on one core.
LIGHT_TIMEOUT = 1200.0

ALL_CASES = cf.all_cases()
TARGETS = [c for c in ALL_CASES if cf.is_test_target(c)]
FAST_TARGETS = [c for c in TARGETS if c.suite != cf.LIGHT]
LIGHT_TARGETS = [c for c in TARGETS if c.suite == cf.LIGHT]


def _case_id(case: cf.Case) -> str:
    return case.id


@pytest.mark.parametrize("case", FAST_TARGETS, ids=_case_id)
def test_case(case: cf.Case, request: pytest.FixtureRequest) -> None:
    result = cf.run_case(case)
    record(request, result, target=True)
    assert result.status == cf.PASSED, result.line()


@pytest.mark.slow
@pytest.mark.parametrize("case", LIGHT_TARGETS, ids=_case_id)
def test_light_model(case: cf.Case, request: pytest.FixtureRequest) -> None:
    result = cf.run_case_isolated(case, memory_limit=cf.LIGHT_MEMORY_LIMIT, timeout=LIGHT_TIMEOUT)
    record(request, result, target=True)
    assert result.status == cf.PASSED, result.line()


def record(request: pytest.FixtureRequest, result: cf.CaseResult, target: bool) -> None:
    directory = conformance_results_dir(request.config)
    if directory is not None:
        cf.record_result(directory, result, target)


def test_cases_outside_the_targets_are_classified(request: pytest.FixtureRequest) -> None:
    """The cases test_case does not run are classified for the summary: out of scope (an element
    type, a non-default domain) or needing ops aot lacks. Each must come out as one of those, not as
    a crash: a case that passed or failed here belongs among the test targets."""
    directory = conformance_results_dir(request.config)
    if directory is not None:
        cf.record_node_target_count(directory, sum(c.suite == cf.NODE for c in FAST_TARGETS))
    others = [c for c in ALL_CASES if c.suite != cf.LIGHT and not cf.is_test_target(c)]
    results = cf.run_cases(others)
    for result in results:
        record(request, result, target=False)
    misplaced = [r.line() for r in results if r.status not in (cf.OUT_OF_SCOPE, cf.UNSUPPORTED)]
    assert not misplaced, f"{len(misplaced)} cases outside the test targets ran: {misplaced[:10]}"
    # Light models outside the targets are listed by what keeps them out, without building them.
    light_target_ids = {c.id for c in LIGHT_TARGETS}
    for case in ALL_CASES:
        if case.suite == cf.LIGHT and case.id not in light_target_ids:
            record(request, light_outside_the_targets(case), target=False)


def light_outside_the_targets(case: cf.Case) -> cf.CaseResult:
    problem = cf.scope_problem(case.model)
    if problem:
        return cf.CaseResult(case.id, case.suite, cf.OUT_OF_SCOPE, problem)
    return cf.CaseResult(case.id, case.suite, cf.UNSUPPORTED, unsupported_ops=cf.registry_missing_ops(case.model))


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
