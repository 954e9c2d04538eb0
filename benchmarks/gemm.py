"""GEMM micro-benchmark: a 512x512x512 fp32 product (Gemm with constant B) compiled by aot for
this machine, its achieved GFLOP/s against the measured single-core peak (aot/host/peak.py).

    python -m benchmarks.gemm [--size 512]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.host.peak import peak_gflops
from aot.host.run import HostModel
from aot.targets import host_preset_name


def gemm_model(size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    b = numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), "b")
    node = helper.make_node("Gemm", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])], [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    size = args.size
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gemm.onnx"
        onnx.save(gemm_model(size), path)
        package = compile_model(path, target=host_preset_name())
        model = HostModel.build(package, opt="-O3 -march=native")
        a = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
        run = model.runner_for({"a": a})
        for _ in range(5):
            run()
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    flops = 2.0 * size ** 3
    median = statistics.median(times)
    achieved = flops / median / 1e9
    peak = peak_gflops()
    print(f"gemm {size}x{size}x{size} ({host_preset_name()}): median {median * 1e3:.3f} ms, "
          f"{achieved:.1f} GFLOP/s = {100 * achieved / peak:.0f}% of the measured peak {peak:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
