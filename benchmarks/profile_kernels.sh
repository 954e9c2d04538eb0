#!/usr/bin/env bash
# Where a compiled model spends its time, kernel by kernel: compiles MODEL for the host preset,
# keeps every kernel out of line (noinline, no identical-code folding) so that perf attributes
# samples to it, runs the package's runner under `perf record` and prints each kernel's share
# with the ONNX nodes it implements. Needs `aot` on PATH, make, a C compiler and perf.
#     bash benchmarks/profile_kernels.sh MODEL.onnx [REPEAT] [TOP]
# Compare with onnxruntime's own per-node times: python -m benchmarks.ort_profile MODEL.onnx
# PROFILE_TARGET=x86_64-v3: that preset's code, built with its own flags (-march=x86-64-v3).
set -euo pipefail
model=$1; repeat=${2:-1000}; top=${3:-25}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ -n "${PROFILE_TARGET:-}" ]; then
  target=$PROFILE_TARGET  # refused (AotError) if this machine cannot run it
  march=$(python -c "import sys; from aot.bench import native_target as n; print(' '.join(n(sys.argv[1]).cflags))" \
    "$target")
else
  target=$(python -c 'from aot.targets import host_preset_name as h; print(h())')
  march=$(python -c 'from aot.host.build import host_target_cflags as f; print(f())')  # -march=native, 512-bit loops on AVX-512
fi
aot compile "$model" -o "$dir/pkg" --target "$target" >/dev/null
cd "$dir/pkg"
src=$(ls ./*.c | grep -v -e _runner -e _weights)
sed -i -E 's/^((AOT_[A-Z_]+ )*)static void /\1__attribute__((noinline)) static void /' "$src"
make -s OPT="-O3 $march -fno-ipa-icf" TARGET_CFLAGS= "$(basename "${src%.c}")_runner" >/dev/null
python - <<'PY'
import json
import numpy as np
manifest = json.load(open("manifest.json"))
for i, t in enumerate(manifest["inputs"]):
    np.save(f"in{i}.npy", np.random.default_rng(i).standard_normal(t["shape"]).astype(t["dtype"]))
PY
runner=./$(basename "${src%.c}")_runner
"$runner" -o . -r "$repeat" in*.npy
perf record -q -o perf.data "$runner" -o . -r "$repeat" in*.npy >/dev/null 2>&1
# each kernel function's samples, as k<N> (its position in the run) with its op and ONNX nodes
perf report -i perf.data --stdio 2>/dev/null |
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python -m benchmarks.kernel_profile . "$top" "${PROFILE_WIDTH:-110}"
