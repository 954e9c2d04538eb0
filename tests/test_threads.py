"""Multi-threading: parallel loops, the executor interface and the pthread pool.

A threaded run must give the bytes of a serial run (every output element is computed by the
same code, only on another thread), on each convolution mode, Gemm/MatMul and elementwise
kernels, through both backends; bare-metal packages must carry no threads at all.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import aot
from aot.compiler import compile as compile_model
from aot.host.build import STRICT_CFLAGS, host_cc
from aot.host.run import HostModel
from aot.kernel.ir import INDEX, Buffer, Kernel, Loop, Store, Var, const
from aot.kernel.parallel import segments
from tests.helpers import SANITIZE_FLAGS, make_model, rand, run_onnxruntime

ROOT = Path(__file__).resolve().parents[1]


def _conv(name: str, x: str, cin: int, cout: int, k: tuple[int, int], seed: int, **attrs) -> tuple:
    w = rand(cout, cin // attrs.get("group", 1), *k, seed=seed) * 0.2
    b = rand(cout, seed=seed + 1)
    node = helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], name=name, **attrs)
    return node, {f"{name}_w": w, f"{name}_b": b}


def mixed_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, str]]:
    """Independent sub-graphs, one per kind of parallel kernel (register tiles sized for 8 lanes,
    the default of a package without --target). Returns the model, inputs and, per output, the
    kernel kind that must be split."""
    inputs = {
        "rows_in": rand(1, 16, 32, 32, seed=1),      # 3x3 pad 1 on 32-wide rows: "rows" tiles
        "grid_in": rand(1, 32, 10, 10, seed=2),      # ragged rows, few channels: "grid" + scratch slots
        "point_in": rand(1, 32, 16, 16, seed=3),     # 1x1: "pointwise"
        "chan_in": rand(1, 128, 3, 3, seed=4),       # 1x1 on 9 pixels: "channels" + scratch slots
        "stride_in": rand(1, 8, 33, 33, seed=5),     # stride 2: phase-split copy, then rows
        "big_in": rand(1, 40, 64, 64, seed=13),      # 3x3 on an image beyond L2: output rows split
        "kws_in": rand(1, 1, 49, 10, seed=6),        # stride 2, tiny output: im2col
        "dw_in": rand(1, 32, 32, 32, seed=7),        # depthwise: the groups loop
        "fc_in": rand(1, 256, seed=8),               # Gemm, one row: column panels
        "mm_in": rand(4, 32, 64, seed=9),            # batched MatMul: the batch loop
        "mm1_in": rand(96, 64, seed=10),             # one MatMul: its row blocks (one column panel)
        "ew_in": rand(1, 64, 32, 32, seed=11),       # elementwise, broadcast: the outer loop
        "pool_in": rand(1, 64, 32, 32, seed=12),     # MaxPool (plane scratch slots), AveragePool
    }
    nodes, inits = [], {}
    kinds = {}
    for name, x, cin, cout, k, attrs in (
        ("rows", "rows_in", 16, 32, (3, 3), {"pads": [1, 1, 1, 1]}),
        ("grid", "grid_in", 32, 12, (3, 3), {"pads": [1, 1, 1, 1]}),
        ("point", "point_in", 32, 64, (1, 1), {}),
        ("chan", "chan_in", 128, 128, (1, 1), {}),
        ("stride", "stride_in", 8, 32, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("big", "big_in", 40, 24, (3, 3), {"pads": [1, 1, 1, 1]}),
        ("kws", "kws_in", 1, 64, (10, 4), {"strides": [2, 2]}),
        ("dw", "dw_in", 32, 32, (3, 3), {"pads": [1, 1, 1, 1], "group": 32}),
    ):
        node, weights = _conv(name, x, cin, cout, k, seed=len(nodes) * 10 + 20, **attrs)
        relu = helper.make_node("Relu", [name], [f"{name}_out"], name=f"{name}_relu")
        nodes += [node, relu]
        inits.update(weights)
        kinds[f"{name}_out"] = name
    inits["fc_w"] = rand(256, 512, seed=50) * 0.1
    inits["fc_b"] = rand(512, seed=51)
    nodes.append(helper.make_node("Gemm", ["fc_in", "fc_w", "fc_b"], ["fc_out"], name="fc"))
    inits["mm_w"] = rand(64, 48, seed=52)
    nodes.append(helper.make_node("MatMul", ["mm_in", "mm_w"], ["mm_out"], name="mm"))
    inits["mm1_w"] = rand(64, 16, seed=53)
    nodes.append(helper.make_node("MatMul", ["mm1_in", "mm1_w"], ["mm1_out"], name="mm1"))
    inits["ew_b"] = rand(1, 64, 1, 1, seed=54)
    nodes += [helper.make_node("Mul", ["ew_in", "ew_b"], ["ew_mul"], name="ew"),
              helper.make_node("Sigmoid", ["ew_mul"], ["ew_out"], name="ew_sigmoid")]
    nodes += [helper.make_node("MaxPool", ["pool_in"], ["mp_out"], name="mp", kernel_shape=[3, 3], strides=[2, 2]),
              helper.make_node("AveragePool", ["pool_in"], ["ap_out"], name="ap", kernel_shape=[3, 3],
                               pads=[1, 1, 1, 1])]
    kinds.update(fc_out="fc", mm_out="mm", mm1_out="mm1", ew_out="ew", mp_out="mp", ap_out="ap")
    model = make_model(nodes, inputs, list(kinds), inits)
    return model, inputs, kinds


@pytest.fixture(scope="module")
def mixed() -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, str]]:
    return mixed_model()


def parallel_sources(c_source: str) -> set[str]:
    """The ONNX node names of kernels that have a parallel segment in a package's <name>.c."""
    names = set()
    kernel = r"/\* [^<]*<- ONNX ([^*]*) \*/\n(?:AOT_\w+ )*static void \w+\([^)]*int32_t first"
    for match in re.finditer(kernel, c_source):
        names |= set(re.findall(r"'([^']*)'", match.group(1)))
    return names


@pytest.mark.parametrize("algorithm", ["direct", "auto"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_threaded_run_is_bitwise_the_serial_run(mixed, backend: str, algorithm: str, tmp_path: Path) -> None:
    """With conv_algorithm="auto" the 3x3 convolutions "rows", "grid" and "big" run as Winograd:
    split by output channels (one block of tile rows) or by blocks of tile rows ("big")."""
    model, inputs, kinds = mixed
    # AVX2's tiles (8 floats), for which the layers' sizes were chosen: each kind splits into
    # several blocks (with AVX-512's the small Gemm is one block, nothing to split)
    target = "x86_64-v3" if platform.machine().lower() in ("x86_64", "amd64") else None
    package = compile_model(model, backend=backend, parallel=True, conv_algorithm=algorithm, target=target)
    source = package.files[f"{package.name}.c"].decode()
    winograd = {"rows", "grid", "big"} if algorithm == "auto" else set()
    assert {name for name in kinds.values() if f"Conv/winograd+Relu <- ONNX '{name}'" in source} == winograd
    split = parallel_sources(source)
    assert set(kinds.values()) <= split, f"not split over threads: {set(kinds.values()) - split}"
    # Without threads each split kernel runs as one function with constant loop bounds (the
    # reference run below), with threads as segments: both must give the same bytes.
    assert source.count("if (aot_runs_serially(executor)) {") == source.count("_task(void *context")
    serial = HostModel.build(package, tmp_path / "pkg", opt="-O2", extra_cflags="-pedantic")
    assert serial.backend == backend
    reference = serial.run(inputs)
    expected = run_onnxruntime(model, inputs)
    for name in kinds:
        np.testing.assert_allclose(reference[name], expected[name], rtol=1e-4, atol=1e-4, err_msg=name)
    for threads in (2, 3):
        with HostModel(package, serial.directory, threads=threads) as threaded:
            for _ in range(3):  # a different split of the work each time, the same bytes
                out = threaded.run(inputs)
                for name in kinds:
                    assert out[name].tobytes() == reference[name].tobytes(), f"{name} with {threads} threads"


def test_serial_entry_points_ignore_threads_and_tiny_kernels_stay_serial(tmp_path: Path) -> None:
    x = rand(1, 4, 8, 8, seed=1)
    node = helper.make_node("Relu", ["x"], ["y"], name="small")
    package = compile_model(make_model([node], {"x": x}, ["y"]), parallel=True)
    source = package.files[f"{package.name}.c"].decode()
    assert "aot_parallel_for" not in source and "int32_t first" not in source
    with HostModel.build(package, tmp_path / "pkg", threads=2) as host:
        np.testing.assert_array_equal(host.run({"x": x})["y"], np.maximum(x, 0))


def test_packages_are_deterministic_with_parallel_loops(mixed) -> None:
    model = mixed[0]
    first, second = compile_model(model, parallel=True), compile_model(model, parallel=True)
    assert first.files.keys() == second.files.keys()
    for path in first.files:
        assert bytes(first.files[path]) == bytes(second.files[path]), path


def _sanitizer_works(cc: str, flags: str, tmp_path: Path) -> bool:
    probe = tmp_path / "probe.c"
    probe.write_text("#include <pthread.h>\nstatic void *f(void *p) { return p; }\n"
                     "int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n")
    built = subprocess.run([cc, *flags.split(), "-pthread", str(probe), "-o", str(tmp_path / "probe")],
                           capture_output=True)
    return built.returncode == 0 and subprocess.run([str(tmp_path / "probe")], capture_output=True).returncode == 0


def _runner(package_dir: Path, name: str, cflags: str, ldflags: str = "") -> Path:
    subprocess.run(["make", "-s", "-C", str(package_dir), f"CC={host_cc()}", f"CFLAGS={cflags}",
                    f"LDFLAGS={ldflags}", f"{name}_runner"], check=True, capture_output=True, text=True)
    return package_dir / f"{name}_runner"


def _run_runner(runner: Path, inputs: list[Path], out: Path, *args: str, env: dict | None = None) -> list[bytes]:
    out.mkdir(exist_ok=True)
    proc = subprocess.run([str(runner), "-o", str(out), *args, *map(str, inputs)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0 and "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, \
        proc.stderr[-4000:]
    return [p.read_bytes() for p in sorted(out.glob("output*.npy"))]


def _conv_package(tmp_path: Path) -> tuple[Path, str, list[Path]]:
    """A small CNN (grid, channels and pointwise convolutions, all split) written to tmp_path/pkg."""
    nodes, inits = [], {}
    for name, x, cin, cout, k, pads in (("c1", "x", 8, 12, (3, 3), [1, 1, 1, 1]),
                                        ("c2", "c1", 12, 32, (3, 3), [0, 0, 0, 0]),
                                        ("c3", "c2", 32, 48, (1, 1), [0, 0, 0, 0])):
        node, weights = _conv(name, x, cin, cout, k, seed=len(nodes), pads=pads)
        nodes.append(node)
        inits.update(weights)
    x = rand(1, 8, 10, 10, seed=3)
    package = compile_model(make_model(nodes, {"x": x}, ["c3"], inits), parallel=True)
    assert {"c1", "c2", "c3"} <= parallel_sources(package.files[f"{package.name}.c"].decode())
    directory = package.write(tmp_path / "pkg")
    np.save(tmp_path / "x.npy", x)
    return directory, package.name, [tmp_path / "x.npy"]


def test_runner_threads_flag_gives_the_serial_bytes_under_asan_ubsan(tmp_path: Path) -> None:
    directory, name, inputs = _conv_package(tmp_path)
    flags = f"-O1 -g {STRICT_CFLAGS} -pedantic"
    sanitize = _sanitizer_works(host_cc(), SANITIZE_FLAGS, tmp_path)
    runner = _runner(directory, name, f"{flags} {SANITIZE_FLAGS}" if sanitize else flags,
                     "-fsanitize=address,undefined" if sanitize else "")
    serial = _run_runner(runner, inputs, tmp_path / "t1", "-t", "1")
    assert _run_runner(runner, inputs, tmp_path / "t2", "-t", "2", "-r", "5", "-w", "1") == serial
    assert _run_runner(runner, inputs, tmp_path / "t3", "-t", "3") == serial
    bad = subprocess.run([str(runner), "-t", "0", *map(str, inputs)], capture_output=True, text=True)
    assert bad.returncode != 0 and "-t 0" in bad.stderr


def test_thread_sanitizer_finds_no_race_in_a_threaded_conv(tmp_path: Path) -> None:
    cc = host_cc()
    tsan = "-fsanitize=thread -fno-omit-frame-pointer"
    if not _sanitizer_works(cc, tsan, tmp_path):
        pytest.skip(f"{cc} has no working ThreadSanitizer here")
    directory, name, inputs = _conv_package(tmp_path)
    # Workers that spin (instead of sleeping) between jobs take their chunks even on a busy
    # machine: the two threads then really share every job, which is what TSan must see.
    runner = _runner(directory, name, f"-O1 -g {STRICT_CFLAGS} {tsan} -DAOT_THREADS_SPIN_US=10000000",
                     "-fsanitize=thread")
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    serial = _run_runner(runner, inputs, tmp_path / "t1", env=env)
    proc = subprocess.run([str(runner), "-o", str(tmp_path), "-t", "2", "-r", "200", "-w", "2", *map(str, inputs)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert [p.read_bytes() for p in sorted(tmp_path.glob("output*.npy"))] == serial


def test_bare_metal_package_has_no_threads(mixed, tmp_path: Path) -> None:
    model = mixed[0]
    package = compile_model(model, target="cortex-m4f", parallel=True)
    files = {path: bytes(data) for path, data in package.files.items() if not path.endswith((".bin", ".o"))}
    assert not any(path.startswith("runtime/aot_threads") for path in files)
    for build_file in ("Makefile", "CMakeLists.txt"):
        text = files[build_file].decode()
        assert "aot_threads" not in text and "pthread" not in text.lower(), build_file
    source = files[f"{package.name}.c"].decode()
    assert "aot_parallel_for" not in source and "int32_t first" not in source
    # The model code is freestanding C: it builds without a hosted C library's headers beyond
    # the freestanding ones (and math.h) and references no threads.
    directory = package.write(tmp_path / "pkg")
    obj = tmp_path / "model.o"
    subprocess.run([host_cc(), "-c", "-ffreestanding", "-O1", *STRICT_CFLAGS.split(), "-pedantic", "-I", str(directory),
                    str(directory / f"{package.name}.c"), "-o", str(obj)], check=True, capture_output=True)
    undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
    assert "pthread" not in undefined


def test_host_package_build_files_use_the_pool(mixed) -> None:
    package = compile_model(mixed[0], target="rpi4", parallel=True)
    assert "runtime/aot_threads.c" in package.files
    assert "aot_threads.c" in bytes(package.files["Makefile"]).decode()
    assert "Threads::Threads" in bytes(package.files["CMakeLists.txt"]).decode()


def test_parallel_loops_only_at_the_top_level() -> None:
    out = Buffer("out0", "float32", 8, True)
    i, j = Var("i0", INDEX), Var("j0", INDEX)
    nested = Kernel("k0", [out], [Loop(i, 2, [Loop(j, 4, [Store(out, i * 4 + j, const(0.0, "float32"))],
                                                   parallel=True)])], [], "Test")
    with pytest.raises(ValueError, match="top level"):
        segments(nested)
    top = Kernel("k1", [out], [Store(out, const(0, INDEX), const(1.0, "float32")),
                               Loop(i, 7, [Store(out, i + 1, const(0.0, "float32"))], parallel=True)], [], "Test")
    parts = segments(top)
    assert [p.extent for p in parts] == [None, 7] and [p.kernel.name for p in parts] == ["k1_0", "k1_1"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_bench_threads_json(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    path = tmp_path / "relu.onnx"
    onnx.save(make_model([node], {"x": rand(1, 64, 32, 32)}, ["y"]), path)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "aot", "bench", str(path), "--threads", "2", "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert {"ours_ms", "onnxruntime_ms", "ratio", "threads"} <= result.keys() and result["threads"] == 2


def test_public_compile_takes_parallel() -> None:
    """docs/package.md's `aot.compile(..., parallel=True)`: the package gets the thread pool, and its
    run over 2 threads gives the serial outputs."""
    example = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"
    threaded, serial = aot.compile(str(example), parallel=True), aot.compile(str(example))
    assert "runtime/aot_threads.c" in threaded.files and "runtime/aot_threads.c" not in serial.files
    x = rand(1, 3, 32, 32, seed=3)
    name = threaded.manifest["inputs"][0]["name"]
    model = HostModel.build(threaded, threads=2)
    got = model.run({name: x})
    want = serial.run({name: x})
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
