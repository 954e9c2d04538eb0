#!/usr/bin/env bash
# Train -> ONNX -> aot -> C program that classifies the test split; prints both accuracies.
#   bash examples/digits/run.sh [BUILD_DIR]       (needs scikit-learn: pip install scikit-learn)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/digits}"
mkdir -p "$out"
python "$here/train.py" "$out"
aot compile "$out/digits.onnx" -o "$out/pkg" --force > /dev/null
make -s -C "$out/pkg" libdigits.a
${CC:-cc} -std=c99 -O2 -Wall -Wextra -Werror -I"$out/pkg" "$here/classify.c" "$out/pkg/runtime/aot_npy.c" \
    "$out/pkg/libdigits.a" -lm -o "$out/classify"
"$out/classify" "$out/test_x.npy" "$out/test_y.npy"
