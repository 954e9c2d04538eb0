"""The ONNX conformance cases cross-built for the Raspberry Pi presets and run under qemu-user,
through both backends, so that every change keeps the suite green on the host and under qemu for
rpi4 and rpi3.

A sample, to keep CI in bounds: every EVERY-th case of the ones tests/test_conformance.py requires
to pass (in scope, registry-supported, not light), for each (target, backend), each combination
starting at its own offset so that the four together cover 4/EVERY of the cases. The full sweep:
`python -m tests.conformance --target rpi4 --backend llvm` (benchmarks/RESULTS.md: Conformance under qemu).
Skipped with the reason when the target's cross compiler or qemu-user is missing
(tests/setup_env.sh installs them).
"""

from __future__ import annotations

import pytest

from tests import conformance as cf

# Every 7th case: about 150 per (target, backend), which keeps the four together within a few
# minutes of CI on two cores (each case is a cross build and a qemu run; the full sweeps and their
# times: benchmarks/RESULTS.md, Conformance under qemu).
EVERY = 7
COMBINATIONS = [("rpi4", "c"), ("rpi4", "llvm"), ("rpi3", "c"), ("rpi3", "llvm")]

FAST_TARGETS = [c for c in cf.all_cases() if c.suite != cf.LIGHT and cf.is_test_target(c)]
SAMPLE = [pytest.param(target, backend, case, id=f"{target}-{backend}-{case.id}")
          for offset, (target, backend) in enumerate(COMBINATIONS)
          for case in FAST_TARGETS[offset::EVERY]]


@pytest.mark.qemu
@pytest.mark.parametrize("target,backend,case", SAMPLE)
def test_case_under_qemu(target: str, backend: str, case: cf.Case) -> None:
    problem = cf.cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    result = cf.run_case(case, backend=backend, target=target)
    assert result.status == cf.PASSED, result.line()
