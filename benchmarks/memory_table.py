"""The memory table of the fusion/planning issue: for each model, ONNX nodes, kernels, unshared
bytes, lower bound and arena, from `aot.compile` (no C compiler needed).

    python -m benchmarks.memory_table MODEL.onnx ... [--light] [--target x86_64-v4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aot.compiler import compile as compile_model
from benchmarks.run import light_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--light", action="store_true", help="add the onnx package's light models")
    parser.add_argument("--target", default=None)
    args = parser.parse_args(argv)
    print("| model | ONNX nodes | kernels | unshared bytes | lower bound | arena | arena / bound |")
    print("|---|---|---|---|---|---|---|")
    for path in list(args.models) + (light_models() if args.light else []):
        m = compile_model(path, target=args.target, weights_format="binary").manifest
        print(f"| {path.stem} | {m['onnx_nodes']} | {m['kernels']} | {m['arena_unshared_bytes']} | "
              f"{m['arena_lower_bound_bytes']} | {m['arena_bytes']} | "
              f"{m['arena_bytes'] / max(1, m['arena_lower_bound_bytes']):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
