#!/usr/bin/env bash
# Build the C++ app with CMake, which compiles the example model through aot_add_model, and run it.
#   bash examples/cpp_app/run.sh [BUILD_DIR] [rpi4]
# With rpi4 the app is cross-built for the Raspberry Pi 4 (aarch64-linux-gnu-g++, static) with the
# toolchain file of a package compiled for it, and run here under qemu-aarch64.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/cpp_app}"
board="${2:-}"
# aot from PATH, else from the repository's virtual environment (made by examples/run_example.sh).
if command -v aot > /dev/null; then
  aot="$(command -v aot)"
elif [ -x "$here/../../.venv/bin/aot" ]; then
  aot="$here/../../.venv/bin/aot"
else
  echo "run.sh: aot not found: run '. .venv/bin/activate' in the repository, or 'pip install .'" >&2
  exit 1
fi
cross=()
run=()
if [ "$board" = rpi4 ]; then
  "$aot" compile "$here/../tiny_cnn.onnx" --target rpi4 -o "$out/rpi4_toolchain" --force > /dev/null
  cross=(-DMODEL_TARGET=rpi4 -DCMAKE_TOOLCHAIN_FILE="$out/rpi4_toolchain/toolchain.cmake"
         -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_EXE_LINKER_FLAGS=-static)
  run=(qemu-aarch64)
elif [ -n "$board" ]; then
  echo "run.sh: unknown board '$board' (this example knows rpi4)" >&2
  exit 2
fi
cmake -S "$here" -B "$out" -Daot_DIR="$("$aot" --cmake-dir)" -DAOT_EXECUTABLE="$aot" "${cross[@]}" > /dev/null
cmake --build "$out" > /dev/null
"${run[@]}" "$out/cpp_app"
