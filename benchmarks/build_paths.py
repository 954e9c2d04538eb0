"""The speed a user gets on each documented build path, against what `aot bench` measures.

    python -m benchmarks.build_paths MODEL.onnx ... [--runs 2000]

Per model, one row of medians (microseconds per run, one thread):
- bench: `aot bench`'s aot median (the host preset's tiles, -O3 -march=native, through ctypes);
- make: `aot compile` without --target, then a plain `make`, timed by the package's runner;
- cmake: the same package through CMake `add_subdirectory` with no CMAKE_BUILD_TYPE, runner timed;
- python: `aot.compile(...).run()` after warm-up, per call (ctypes and output arrays included);
- aot build: `aot build --target <this machine's preset>`, its static runner timed.
Each path's ratio to bench follows its time. Figures are medians of one run each: run on a quiet
machine, and more than once.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aot
from aot.commands.bench import bench
from aot.commands.verify import random_inputs
from aot.targets import host_preset_name

PARENT_CMAKE = """cmake_minimum_required(VERSION 3.13)
project(user_app C)
add_subdirectory({package} model)
"""


def _runner_median_us(runner: Path, inputs: list[Path], runs: int, out: Path) -> float:
    proc = subprocess.run([str(runner), "-o", str(out), "-r", str(runs), *map(str, inputs)],
                          capture_output=True, text=True, check=True)
    match = re.search(r"median_us ([0-9.]+)", proc.stdout + proc.stderr)
    if not match:
        raise RuntimeError(f"{runner}: no median in its output: {proc.stdout[-200:]}")
    return float(match.group(1))


def _sh(*cmd: str | Path, cwd: Path | None = None) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, cwd=cwd)


def _aot(*args: str | Path) -> None:
    _sh(sys.executable, "-m", "aot", *args)


def measure(model: Path, runs: int, work: Path) -> dict[str, float]:
    times = {"bench": bench(str(model)).ours_ms * 1000}
    package = aot.compile(model)
    inputs = random_inputs(package, 0)
    files = []
    for i, spec in enumerate(package.inputs):
        files.append(work / f"input{i}.npy")
        np.save(files[-1], np.asarray(inputs[spec["name"]]).reshape(spec["shape"]))

    plain = work / "plain"
    _aot("compile", model, "-o", plain)
    _sh("make", "-s", "-C", plain)
    times["make"] = _runner_median_us(plain / f"{package.name}_runner", files, runs, work)

    app = work / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(PARENT_CMAKE.format(package=plain.resolve()))
    # Inside another project the package builds its runner only when asked for.
    _sh("cmake", "-S", app, "-B", app / "build", f"-D{package.name.upper()}_BUILD_RUNNER=ON")
    _sh("cmake", "--build", app / "build")
    times["cmake"] = _runner_median_us(app / "build" / "model" / f"{package.name}_runner", files, runs, work)

    package.run(inputs)  # builds once
    for _ in range(10):
        package.run(inputs)
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        package.run(inputs)
        samples.append((time.perf_counter_ns() - start) / 1000)
    times["python"] = statistics.median(samples)

    built = work / "built"
    _aot("build", model, "--target", host_preset_name(), "-o", built)
    times["aot build"] = _runner_median_us(built / f"{package.name}_runner", files, runs, work)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args(argv)
    paths = ["make", "cmake", "python", "aot build"]
    print(f"this machine: {host_preset_name()}; microseconds per run (median), ratio to aot bench\n")
    print("| model | aot bench | " + " | ".join(paths) + " |")
    print("|---|---|" + "---|" * len(paths))
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="aot-build-paths-") as tmp:
            times = measure(model, args.runs, Path(tmp))
        cells = [f"{times[p]:.1f} ({times[p] / times['bench']:.2f})" for p in paths]
        print(f"| {model.stem} | {times['bench']:.1f} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
