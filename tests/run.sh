#!/usr/bin/env bash
# The test suite: lint, then pytest (parallel over the machine's cores), then the op checks and the
# ONNX conformance sweep once more through the LLVM backend's objects, then the op checks under
# AddressSanitizer + UBSan. Sets up .venv on first use. Each pass ends with its slowest tests
# (--durations), to see where the suite's time goes.
# Extra arguments go to pytest instead, e.g.  bash tests/run.sh -k conv   or   bash tests/run.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup_env.sh
ruff check aot tests examples benchmarks
if [ $# -gt 0 ]; then
  exec python -m pytest -n auto -q "$@"
fi
# (This includes tests/test_conformance_cross.py: every 7th conformance case cross-built for rpi4
# and rpi3 with both backends and run under qemu-user, about 2 minutes on 2 cores, and every 42nd
# for each RISC-V preset and backend, about 80 s more on one core.)
python -m pytest -n auto --dist worksteal -q --durations=30
# The LLVM pass: the op checks and the conformance cases through the LLVM backend's objects. (Each
# conformance case runs once per pass: the summary at the end reads what test_case recorded.)
AOT_TEST_BACKEND=llvm python -m pytest -n auto --dist worksteal -q --durations=15 tests/test_ops.py tests/test_ops_*.py tests/test_fusion.py \
  tests/test_memory.py tests/test_register_tiles.py tests/test_e2e_models.py tests/test_conformance.py
# Sanitizer pass: the model of each op check (and fuzz graph) built with
# -fsanitize=address,undefined, strict warnings and -pedantic, and run through the package's runner
# (tests/helpers.py: run_sanitized); with clang when installed, so every op also builds warning-free
# under clang. Sampled to keep the suite's time in bounds: every 4th case of each parametrised test
# (AOT_TEST_SAMPLE=4: the 1st, 5th, ... in collection order; unparametrised tests all run); run the
# whole op suite with AOT_TEST_SAMPLE=1. The runners are built at -O0 (tests/helpers.py: SANITIZE_OPT):
# on a 2-core Zen 3 the pass takes about 5 minutes, 13 when they were built at -O1. (--dist
# worksteal: idle workers take queued tests from busy ones, so a slow test near the end does not
# leave a core idle.)
sanitize_cc=gcc
if command -v clang >/dev/null 2>&1; then sanitize_cc=clang; fi
CC=$sanitize_cc AOT_TEST_SANITIZE=1 AOT_TEST_SAMPLE=${AOT_TEST_SAMPLE:-4} python -m pytest -n auto --dist worksteal -q --durations=15 \
  tests/test_ops.py tests/test_ops_*.py tests/test_fusion.py tests/test_register_tiles.py tests/test_fuzz.py
