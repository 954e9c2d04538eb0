#!/usr/bin/env bash
# The test suite: lint, then pytest (parallel over the machine's cores), then the op checks and the
# ONNX conformance sweep once more through the LLVM backend's objects. Sets up .venv on first use.
# Extra arguments go to pytest instead, e.g.  bash tests/run.sh -k conv   or   bash tests/run.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup_env.sh
ruff check aot tests examples
if [ $# -gt 0 ]; then
  exec python -m pytest -n auto -q "$@"
fi
python -m pytest -n auto -q
AOT_TEST_BACKEND=llvm python -m pytest -n auto -q tests/test_ops.py tests/test_ops_*.py tests/test_fusion.py \
  tests/test_memory.py tests/test_register_tiles.py tests/test_e2e_models.py tests/test_conformance.py
