"""The int8 table of benchmarks/RESULTS.md: each float model quantised by onnxruntime.quantization in QDQ and
QOperator format (per-channel int8 weights, int8 activations, calibrated on 20 seeded inputs),
then compiled by aot and measured against onnxruntime's own run of the same int8 file.

    python -m benchmarks.int8 MODEL.onnx ... [--formats qdq,qoperator] [--no-speed]

Per model and format: whether it compiles, the share of output elements equal to onnxruntime's
(and within one quantisation step), aot's int8 time against onnxruntime's int8 time and against
aot's own float32 build (`aot bench`, one thread, interleaved in one process), and the arena and
weights bytes of the int8 package against the float one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from aot.commands.bench import bench
from aot.commands.quantizer import quantize as aot_quantize
from aot.commands.verify import verify_package
from aot.compiler import compile as compile_model
from aot.errors import AotError

CALIBRATION_SAMPLES = 20
VERIFY_SEEDS = 3


def calibration_file(model_path: Path, folder: Path, samples: int = CALIBRATION_SAMPLES) -> Path:
    """Seeded standard-normal samples of every input, as `aot quantize --calibration` takes them."""
    model = onnx.load(str(model_path), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    arrays = {vi.name: np.stack([np.random.default_rng(seed).standard_normal(
        [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]).astype(np.float32) for seed in range(samples)])
        for vi in model.graph.input if vi.name not in initializers}
    path = folder / f"{model_path.stem}_calibration.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def quantize(model_path: Path, out: Path, quant_format: str) -> None:
    """`aot quantize` (onnxruntime.quantization: pre-processing, then quantize_static)."""
    aot_quantize(model_path, calibration_file(model_path, out.parent), out, quant_format=quant_format)


def row(model_path: Path, quant_format: str, folder: Path, speed: bool) -> str:
    int8_path = folder / f"{model_path.stem}_{quant_format}.onnx"
    quantize(model_path, int8_path, quant_format)
    try:
        package = compile_model(str(int8_path))
    except AotError as e:
        return f"| {model_path.stem} | {quant_format} | does not compile: {str(e)[:120]} | | | | | |"
    exact, within = [], []
    for seed in range(VERIFY_SEEDS):
        for o in verify_package(package, str(int8_path), seed=seed).outputs:
            exact.append(o.exact_share if o.exact_share is not None else float(o.max_abs_err == 0))
            within.append(float(o.passed))
    float_package = compile_model(str(model_path))
    arena = package.arena_bytes / max(float_package.arena_bytes, 1)
    weights = package.manifest["weights_bytes"] / max(float_package.manifest["weights_bytes"], 1)
    times = "| |"
    if speed:
        ours = bench(str(int8_path))
        own_float = bench(str(model_path))
        times = f"| {ours.ours_ms:.3f} / {ours.onnxruntime_ms:.3f} ({ours.ratio:.2f}) | " \
                f"{own_float.ours_ms / ours.ours_ms:.2f}x |"
    return (f"| {model_path.stem} | {quant_format} | {100 * min(exact):.2f}% | {100 * min(within):.0f}% {times} "
            f"{arena:.2f} | {weights:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--formats", default="qdq,qoperator")
    parser.add_argument("--no-speed", action="store_true", help="skip the timings")
    args = parser.parse_args(argv)
    print("| model | format | exact (worst output) | verify passed | aot / onnxruntime int8 ms (ratio) | "
          "aot float / aot int8 | arena int8/float | weights int8/float |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.models:
            for quant_format in args.formats.split(","):
                print(row(path, quant_format, Path(tmp), not args.no_speed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
