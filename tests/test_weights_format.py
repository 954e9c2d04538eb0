"""--weights-format: weights as C text (<name>_weights.c) or as raw bytes (<name>_weights.bin
pulled in by <name>_weights.S with .incbin). Both define the same `<name>_weights` object, so the
rest of the package is unchanged; the binary form builds with make and with CMake from another
directory, runs like the C form, is reproducible, and cross-compiles."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
from aot.errors import AotError
from aot.host.build import STRICT_CFLAGS
from aot.package import c_sources
from aot.package.c_sources import BINARY_WEIGHTS_THRESHOLD, resolve_weights_format
from aot.planner.weights import layout_weights
from aot.targets import load_target
from aot.toolchain.elf import read_elf
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_onnxruntime

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"
STRICT = f"-O2 {STRICT_CFLAGS} -pedantic"


@pytest.fixture(scope="module")
def binary_package() -> aot.package.package.Package:  # type: ignore[name-defined]
    return aot.compile(EXAMPLE, weights_format="binary")


def sh(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def check_runner(runner: Path, tmp_path: Path, launcher: tuple[str, ...] = ()) -> None:
    x = rand(1, 3, 32, 32, seed=7)
    np.save(tmp_path / "x.npy", x)
    sh([*launcher, str(runner), "-o", str(tmp_path), str(tmp_path / "x.npy")])
    ref = run_onnxruntime(onnx.load(EXAMPLE), {"image": x})["probabilities"]
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), ref, atol=1e-5)


def test_binary_package_holds_the_weights_struct_image(binary_package, tmp_path: Path) -> None:
    c_package = aot.compile(EXAMPLE, weights_format="c")
    files = set(binary_package.files)
    assert {"tiny_cnn_weights.S", "tiny_cnn_weights.bin"} <= files and "tiny_cnn_weights.c" not in files
    assert binary_package.manifest["weights_format"] == "binary" and c_package.manifest["weights_format"] == "c"
    # Same object either way: the model code and the struct layout do not change.
    for same in ("tiny_cnn.h", "tiny_cnn.c", "tiny_cnn_weights.h", "tiny_cnn_runner.c"):
        assert binary_package.files[same] == c_package.files[same], same
    pkg = binary_package.write(tmp_path / "pkg")
    blob = (pkg / "tiny_cnn_weights.bin").read_bytes()
    assert len(blob) % 64 == 0
    from aot.compiler import load
    from aot.lowering.program import lower_graph
    from aot.passes.pipeline import run_passes

    graph, _ = load(EXAMPLE)
    run_passes(graph)
    from aot.pipeline import PipelineOptions

    slots, struct_bytes = layout_weights(lower_graph(graph, tiles=PipelineOptions().tiles).weights)
    assert struct_bytes <= len(blob) < struct_bytes + 64
    for slot in slots:
        data = slot.tensor.data.astype(slot.tensor.data.dtype.newbyteorder("<")).tobytes()
        assert blob[slot.offset:slot.offset + len(data)] == data, slot.member
    source = (pkg / "tiny_cnn_weights.S").read_text()
    assert '.incbin "tiny_cnn_weights.bin"' in source and ".balign 64" in source
    assert f".size tiny_cnn_weights, {len(blob)}" in source
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["files"]["tiny_cnn_weights.bin"] == hashlib.sha256(blob).hexdigest()


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_binary_weights_build_with_make_and_run(binary_package, tmp_path: Path, cc: str) -> None:
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    pkg = binary_package.write(tmp_path / "pkg")
    sh(["make", "-s", "-C", str(pkg), f"CC={cc}", f"CFLAGS={STRICT}", "all", "shared"])
    symbols = sh(["nm", "-S", "--defined-only", str(pkg / "libtiny_cnn.a")]).stdout
    # Read-only data ('R'), of the blob's size.
    size = len(binary_package.files["tiny_cnn_weights.bin"])
    assert any(line.split()[1:] == [f"{size:016x}", "R", "tiny_cnn_weights"] for line in symbols.splitlines()
               if len(line.split()) == 4), symbols
    check_runner(pkg / "tiny_cnn_runner", tmp_path)
    sh(["make", "-s", "-C", str(pkg), "clean"])
    assert (pkg / "tiny_cnn_weights.S").exists() and not (pkg / "tiny_cnn_weights.o").exists()


def test_binary_weights_build_with_cmake_from_another_directory(binary_package, tmp_path: Path) -> None:
    if not shutil.which("cmake"):
        pytest.skip("cmake not installed")
    pkg = binary_package.write(tmp_path / "pkg")
    build = tmp_path / "elsewhere" / "build"
    build.mkdir(parents=True)
    # Configured and built from an unrelated working directory: .incbin must still find the .bin.
    sh(["cmake", "-S", str(pkg), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_C_FLAGS={STRICT_CFLAGS} -pedantic", "-DCMAKE_ASM_FLAGS=-Werror"], cwd=tmp_path / "elsewhere")
    sh(["cmake", "--build", str(build)], cwd=tmp_path)
    check_runner(build / "tiny_cnn_runner", tmp_path)


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_binary_weights_match_onnxruntime_through_both_backends(backend: str) -> None:
    model = onnx.load(EXAMPLE)
    assert_matches_onnxruntime(model, {"image": rand(1, 3, 32, 32, seed=3)}, backend=backend,
                               weights_format="binary")


def test_binary_packages_are_byte_identical(tmp_path: Path) -> None:
    first = aot.compile(EXAMPLE, weights_format="binary")
    second = aot.compile(EXAMPLE, weights_format="binary")
    assert first.files == second.files
    a, b = first.write(tmp_path / "a"), second.write(tmp_path / "b")
    for rel in first.files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_auto_is_binary_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_weights_format("auto", BINARY_WEIGHTS_THRESHOLD) == "c"
    assert resolve_weights_format("auto", BINARY_WEIGHTS_THRESHOLD + 1) == "binary"
    assert resolve_weights_format("c", 10 * BINARY_WEIGHTS_THRESHOLD) == "c"
    assert aot.compile(EXAMPLE).manifest["weights_format"] == "c"  # 25 KB
    monkeypatch.setattr(c_sources, "BINARY_WEIGHTS_THRESHOLD", 1024)
    assert "tiny_cnn_weights.bin" in aot.compile(EXAMPLE).files


def test_bad_weights_format_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(AotError, match="--weights-format 'text'"):
        aot.compile(EXAMPLE, weights_format="text")
    out = tmp_path / "pkg"
    result = subprocess.run([sys.executable, "-m", "aot", "compile", str(EXAMPLE), "-o", str(out),
                             "--weights-format", "text"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aot: error: --weights-format 'text'"), result.stderr
    assert "c, binary" in lines[0]
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("target", ["rpi3", "rpi4", "cortex-m4f"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_binary_weights_cross_compile(tmp_path: Path, target: str, backend: str) -> None:
    """The .S assembles for armv7 hard-float / aarch64 Linux (and runs under qemu) and bare metal."""
    preset = load_target(target)
    tools = [f"{preset.gcc_prefix}gcc"] + ([] if preset.bare_metal else [preset.qemu])
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    out = tmp_path / "pkg"
    result = subprocess.run([sys.executable, "-m", "aot", "build", str(EXAMPLE), "--target", target, "--backend",
                             backend, "--toolchain", "gcc", "--weights-format", "binary", "-o", str(out)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert (out / "tiny_cnn_weights.bin").exists() and not (out / "tiny_cnn_weights.c").exists()
    if preset.bare_metal:
        symbols = sh([f"{preset.gcc_prefix}nm", "--defined-only", str(out / "libtiny_cnn.a")]).stdout
        assert " R tiny_cnn_weights" in symbols
        return
    info = read_elf(out / "tiny_cnn_runner")
    if info.machine == "arm":
        assert info.arm_hard_float is True
    check_runner(out / "tiny_cnn_runner", tmp_path, launcher=(preset.qemu,))


def test_binary_weights_of_every_width_match_onnxruntime() -> None:
    """bool (1 byte), float32, int64 and an odd-sized float32 tensor: each member at its offset."""
    x = rand(2, 3)
    k = np.array([[5, -7, 1 << 40], [0, 3, -(1 << 35)]], dtype=np.int64)
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]),
             helper.make_node("Where", ["cond", "a", "x"], ["b"]),
             helper.make_node("Cast", ["b"], ["bi"], to=TensorProto.INT64),
             helper.make_node("Add", ["bi", "k"], ["y"]),
             helper.make_node("Mul", ["b", "odd"], ["z"])]
    model = make_model(nodes, {"x": x}, ["y", "z"], initializers={
        "w": rand(2, 3, seed=1), "cond": np.array([[True, False, True], [False, True, True]]), "k": k,
        "odd": rand(1, 3, seed=2)})
    package = aot.compile(model, weights_format="binary")
    assert "test_graph_weights.bin" in package.files
    for backend in ("c", "llvm"):
        assert_matches_onnxruntime(model, {"x": x}, backend=backend, weights_format="binary")
