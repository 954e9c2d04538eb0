#!/usr/bin/env bash
# The test suite: lint, then pytest (parallel over the machine's cores). Sets up .venv on first use.
# Extra arguments go to pytest, e.g.  bash tests/run.sh -k conv   or   bash tests/run.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup_env.sh
ruff check aot tests examples
python -m pytest -n auto -q "$@"
