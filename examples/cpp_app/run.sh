#!/usr/bin/env bash
# Build the C++ app with CMake, which compiles the example model through aot_add_model, and run it.
#   bash examples/cpp_app/run.sh [BUILD_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/cpp_app}"
# aot from PATH, else from the repository's virtual environment (made by examples/run_example.sh).
if command -v aot > /dev/null; then
  aot="$(command -v aot)"
elif [ -x "$here/../../.venv/bin/aot" ]; then
  aot="$here/../../.venv/bin/aot"
else
  echo "run.sh: aot not found: run '. .venv/bin/activate' in the repository, or 'pip install .'" >&2
  exit 1
fi
cmake -S "$here" -B "$out" -Daot_DIR="$("$aot" --cmake-dir)" -DAOT_EXECUTABLE="$aot" > /dev/null
cmake --build "$out" > /dev/null
"$out/cpp_app"
