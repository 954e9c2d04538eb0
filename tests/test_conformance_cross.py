"""The ONNX conformance cases cross-built for the Raspberry Pi and RISC-V presets and run under
qemu-user, through both backends, so that every change keeps the suite green on the host and under
qemu for rpi4, rpi3 and the three RISC-V presets.

A sample, to keep CI in bounds: every EVERY-th case of the ones tests/test_conformance.py requires
to pass (in scope, registry-supported, not light), for each (target, backend), each combination
starting at its own offset so that the four together cover 4/EVERY of the cases. The six RISC-V
(preset, backend) combinations take every RISCV_EVERY-th case the same way. The full sweep:
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
# Every 42nd case for each RISC-V combination: about 28 each, 1/7 of the cases in all, about 80 s
# of CI for the six (RVV at 256 and 128 bits and scalar code, the vector widths the Arm sweeps
# do not reach, share the kernels those sweeps already cover).
RISCV_EVERY = 42
RISCV_COMBINATIONS = [(target, backend) for target in ("riscv64-rvv256", "riscv64-rvv128", "riscv64")
                      for backend in ("c", "llvm")]

# Debian 12's qemu 7.2 aborts translating some RVV instructions (vfncvt.rtz, the narrowing float
# -> integer conversion LLVM vectorises quantisation with), a qemu bug fixed in qemu 8.1.
QEMU_ABORT = "decode_save_opc: Assertion"
QEMU_ABORT_REASON = ("qemu before 8.1 aborts on some RVV instructions "
                     "(https://gitlab.com/qemu-project/qemu/-/issues/1441)")

FAST_TARGETS = [c for c in cf.all_cases() if c.suite != cf.LIGHT and cf.is_test_target(c)]
SAMPLE = [pytest.param(target, backend, case, id=f"{target}-{backend}-{case.id}")
          for offset, (target, backend) in enumerate(COMBINATIONS)
          for case in FAST_TARGETS[offset::EVERY]] + [
    pytest.param(target, backend, case, id=f"{target}-{backend}-{case.id}")
    for offset, (target, backend) in enumerate(RISCV_COMBINATIONS)
    for case in FAST_TARGETS[offset::RISCV_EVERY]]


@pytest.mark.qemu
@pytest.mark.parametrize("target,backend,case", SAMPLE)
def test_case_under_qemu(target: str, backend: str, case: cf.Case) -> None:
    problem = cf.cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    result = cf.run_case(case, backend=backend, target=target)
    if result.status != cf.PASSED and QEMU_ABORT in result.line():
        pytest.xfail(QEMU_ABORT_REASON)
    assert result.status == cf.PASSED, result.line()
