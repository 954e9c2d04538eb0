"""Hostile models, property-based: any mutation of a valid model's protobuf either compiles to a
package that verifies against onnxruntime, or fails with one `aot: error:` line, exit code 2 and
nothing written, within the memory and time caps (tests/fuzz_hostile.py; the long run is
`python -m tests.fuzz_hostile --count 2000`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_hostile import SEED_MODELS, Case, Chooser, mutated_case, run_isolated, warm_up

# Each example forks a child that compiles (and, when that succeeds, builds and verifies) a small
# model: about a second each. CI runs a fixed, derandomised sample; AOT_FUZZ_EXAMPLES raises it.
EXAMPLES = int(os.environ.get("AOT_FUZZ_EXAMPLES", "40"))


class HypothesisChooser(Chooser):
    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))


@pytest.fixture(scope="module")
def warm() -> None:
    warm_up()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_model_compiles_and_verifies_or_fails_cleanly(data: st.DataObject, warm: None,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    case = mutated_case(HypothesisChooser(data))
    root = tmp_path_factory.mktemp("hostile")
    outcome = run_isolated(case, root)
    assert outcome.problem is None, f"{case.seed_model}; {'; '.join(case.steps)}: {outcome.problem}"
    assert list(root.iterdir()) == [], "a case left files behind"


def test_harness_catches_a_misbehaving_compile(tmp_path: Path, warm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The property can fail: an internal error in the compiler is reported as a problem."""
    import aot.compiler

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    # The CLI's compile goes through compile_models (aot.compile too), imported when a command runs.
    monkeypatch.setattr(aot.compiler, "compile_models", broken)
    case = Case("chain", ["none"], SEED_MODELS["chain"]().SerializeToString(), None)
    outcome = run_isolated(case, tmp_path)
    assert outcome.problem is not None and "internal error" in outcome.problem, outcome
