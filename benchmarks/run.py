"""The benchmark suite: `aot bench` (ours vs onnxruntime, one thread each, interleaved in one
process) over the given models, printed as the markdown table of benchmarks/RESULTS.md.

    python -m benchmarks.run MODEL.onnx ... [--threads 1] [--target x86_64-v3 [--onnxruntime-isa target]]

The shared models live outside the repository (../shared/models); the light models ship inside
the onnx package (onnx/backend/test/data/light, `--light` adds them).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from aot.commands.bench import bench
from aot.host.peak import peak_gflops
from aot.targets import host_preset_name


def light_models() -> list[Path]:
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(root.glob("light_*.onnx"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--light", action="store_true", help="add the onnx package's light models")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--conv-algorithm", default="auto", choices=["auto", "direct"])
    parser.add_argument("--target", help="a preset this machine runs (aot bench --target); default: the host's")
    parser.add_argument("--onnxruntime-isa", default="native", choices=["native", "target"],
                        help="target: onnxruntime's kernels for --target's vector features (aot bench)")
    args = parser.parse_args(argv)
    models = list(args.models) + (light_models() if args.light else [])
    peak = peak_gflops(preset=args.target)
    kernels = f"{args.target or 'its'} kernels" if args.onnxruntime_isa == "target" else "this CPU's kernels"
    print(f"machine: {platform.machine()} ({host_preset_name()}), aot built for {args.target or 'it'}, onnxruntime "
          f"with {kernels}, measured single-core peak {peak:.0f} GFLOP/s, {args.threads} thread(s)\n")
    print("| model | aot ms | onnxruntime ms | ratio | aot GFLOP/s | % of peak | arena KB | onnxruntime peak RSS KB |")
    print("|---|---|---|---|---|---|---|---|")
    for path in models:
        r = bench(str(path), threads=args.threads, conv_algorithm=args.conv_algorithm, target=args.target,
                  onnxruntime_isa=args.onnxruntime_isa)
        print(f"| {path.stem} | {r.ours_ms:.3f} | {r.onnxruntime_ms:.3f} | {r.ratio:.2f} | {r.ours_gflops:.1f} | "
              f"{100 * r.ours_gflops / peak:.0f}% | {r.arena_bytes / 1024:.0f} | "
              f"{r.onnxruntime_peak_rss_delta_bytes / 1024:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
