#!/usr/bin/env bash
# Compile the example model, build the C++ app with CMake (add_subdirectory of the package), run it.
#   bash examples/cpp_app/run.sh [BUILD_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/cpp_app}"
mkdir -p "$out"
aot compile "$here/../tiny_cnn.onnx" -o "$out/tiny_cnn" --force > /dev/null
cmake -S "$here" -B "$out/app" -DMODEL_PACKAGE="$out/tiny_cnn" > /dev/null
cmake --build "$out/app" > /dev/null
"$out/app/cpp_app"
