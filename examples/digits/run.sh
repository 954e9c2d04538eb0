#!/usr/bin/env bash
# Train -> ONNX -> aot -> C program that classifies the test split; prints both accuracies, and on
# the host those of the int8 variant too (aot quantize, calibrated on 20 training images).
#   bash examples/digits/run.sh [BUILD_DIR] [TARGET]     (needs scikit-learn: pip install scikit-learn)
# With TARGET (rpi4, rpi3, ...) the program is cross-compiled for that board, statically linked,
# and run under qemu-user (apt-get install qemu-user gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/digits}"
target="${2:-}"
mkdir -p "$out"
python "$here/train.py" "$out"
if [ -z "$target" ]; then
  aot compile "$out/digits.onnx" -o "$out/pkg" --force > /dev/null
  make -s -C "$out/pkg" libdigits.a
  ${CC:-cc} -std=c99 -O2 -Wall -Wextra -Werror -I"$out/pkg" "$here/classify.c" "$out/pkg/runtime/aot_npy.c" \
      "$out/pkg/libdigits.a" -lm -o "$out/classify"
  "$out/classify" "$out/test_x.npy" "$out/test_y.npy"
  # The int8 variant: same C API (--name digits), float in and out, int8 inside.
  aot quantize "$out/digits.onnx" --calibration "$out/calibration.npz" -o "$out/digits_int8.onnx" --force > /dev/null
  aot compile "$out/digits_int8.onnx" --name digits -o "$out/pkg-int8" --force > /dev/null
  make -s -C "$out/pkg-int8" libdigits.a
  ${CC:-cc} -std=c99 -O2 -Wall -Wextra -Werror -I"$out/pkg-int8" "$here/classify.c" "$out/pkg-int8/runtime/aot_npy.c" \
      "$out/pkg-int8/libdigits.a" -lm -o "$out/classify-int8"
  printf 'int8 '
  "$out/classify-int8" "$out/test_x.npy" "$out/test_y.npy"
else
  # The package's Makefile cross-compiles for its --target; the program uses the same compiler.
  aot compile "$out/digits.onnx" -o "$out/pkg-$target" --target "$target" --force > /dev/null
  make -s -C "$out/pkg-$target" libdigits.a
  cc_cross=$(make -s -C "$out/pkg-$target" -f Makefile -f - print-cc <<'MK'
print-cc:
	@echo $(CC) $(TARGET_CFLAGS)
MK
)
  $cc_cross -std=c99 -O2 -Wall -Wextra -Werror -static -I"$out/pkg-$target" "$here/classify.c" \
      "$out/pkg-$target/runtime/aot_npy.c" "$out/pkg-$target/libdigits.a" -lm -o "$out/classify-$target"
  qemu=$(python -c "from aot.targets import load_target; print(load_target('$target').qemu)")
  echo "running the $target build under $qemu:"
  "$qemu" "$out/classify-$target" "$out/test_x.npy" "$out/test_y.npy"
fi
