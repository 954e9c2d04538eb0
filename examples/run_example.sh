#!/usr/bin/env bash
# The main job on the bundled example: compile examples/tiny_cnn.onnx into a C package, build it
# with the system C compiler, run it on an input image, print the result and the arena size, and
# check it against onnxruntime. Sets up its own virtual environment (.venv) on first use, with aot,
# its dependencies and onnxruntime only (tests/setup_env.sh, AOT_SETUP_MINIMAL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
AOT_SETUP_MINIMAL=1 source tests/setup_env.sh

out=build/tiny_cnn
aot compile examples/tiny_cnn.onnx -o "$out" --force
make -s -C "$out"
python - "$out" <<'PY'
import sys
import numpy as np
image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
np.save(f"{sys.argv[1]}/input0.npy", image)          # for the C runner
np.savez(f"{sys.argv[1]}/inputs.npz", image=image)    # for aot verify, by input name
PY
"$out/tiny_cnn_runner" -o "$out" -r 200 "$out/input0.npy"
python - "$out" <<'PY'
import json, sys
import numpy as np
out = sys.argv[1]
probs = np.load(f"{out}/output0.npy")[0]
manifest = json.load(open(f"{out}/manifest.json"))
print("class probabilities:", np.array2string(probs, precision=4, suppress_small=True))
print(f"predicted class {int(probs.argmax())} (p={probs.max():.4f})")
print(f"arena: {manifest['arena_bytes']} bytes (lower bound {manifest['arena_lower_bound_bytes']}), "
      f"weights: {manifest['weights_bytes']} bytes, {manifest['onnx_nodes']} ONNX nodes -> {manifest['kernels']} kernels")
PY
aot verify examples/tiny_cnn.onnx --inputs "$out/inputs.npz"
