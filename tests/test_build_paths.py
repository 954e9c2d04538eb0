"""Every documented way of building a package gets the vector code its register tiles were sized
for: a plain `make`, CMake with or without a build type, cross CMake with the package's
toolchain file, the Python API. A compiler not told the ISA stops with an #error naming the flags,
instead of building code 15x slower. (The speed itself: python -m benchmarks.build_paths.)"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import aot
from aot.host import build as host_build
from aot.pipeline import PipelineOptions
from tests.helpers import run_onnxruntime

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"
X86 = platform.machine().lower() in ("x86_64", "amd64")


def sh(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def portable_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example compiled without --target."""
    return aot.compile(EXAMPLE).write(tmp_path_factory.mktemp("portable") / "pkg")


def image() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)


def host_lanes() -> int:
    """The float lanes of the tiles of a package compiled here without --target (this CPU's)."""
    return PipelineOptions().tiles.lanes


@pytest.mark.skipif(not X86 or host_lanes() < 8, reason="only x86's 8- and 16-float tiles need ISA flags")
def test_plain_gcc_without_isa_flags_stops_with_the_flags_to_add(portable_package: Path, tmp_path: Path) -> None:
    source = str(portable_package / "tiny_cnn.c")
    plain = sh(["gcc", "-O2", "-std=c99", "-c", source, "-o", str(tmp_path / "a.o")])
    assert plain.returncode != 0
    needed = ["-mavx2", "-mfma"] if host_lanes() == 8 else ["-mavx512f", "-mfma"]
    assert "#error" in plain.stderr and "-march=native" in plain.stderr and " ".join(needed) in plain.stderr
    if host_lanes() == 16:  # on another machine without AVX-512: what to compile instead
        assert "--target x86_64-v3" in plain.stderr
    machine = ["-march=x86-64-v3"] if host_lanes() == 8 else ["-march=x86-64-v4"]
    for flags in (needed, machine, ["-DAOT_ALLOW_SLOW_VECTORS"]):
        built = sh(["gcc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", *flags, "-c", source,
                    "-o", str(tmp_path / "b.o")])
        assert built.returncode == 0, (flags, built.stderr)


def test_package_for_narrow_registers_builds_with_any_flags(tmp_path: Path) -> None:
    """4-float tiles (SSE, NEON) and scalar ones (Cortex-M) fit every compiler's defaults: no check."""
    for target in ("x86_64", "rpi4", "cortex-m4f"):
        package = aot.compile(EXAMPLE, target=target)
        assert "#error" not in package.files["tiny_cnn.c"].decode(), target


def test_plain_make_builds_the_model_for_this_cpu(portable_package: Path) -> None:
    dry = sh(["make", "-n", "-B", "-C", str(portable_package), "tiny_cnn.o"])
    assert dry.returncode == 0, dry.stderr
    compile_line = next(line for line in dry.stdout.splitlines() if "tiny_cnn.c" in line)
    assert "-O3" in compile_line and "-march=native" in compile_line
    # On x86 the compiler's own loops may take the CPU's 512-bit registers (DS-CNN int8 1.37x).
    assert ("-mprefer-vector-width=512" in compile_line) == X86
    # A cross compiler gets no -march=native (its CPU is another one).
    if shutil.which("aarch64-linux-gnu-gcc") and X86:
        cross = sh(["make", "-n", "-B", "-C", str(portable_package), "CC=aarch64-linux-gnu-gcc", "tiny_cnn.o"])
        assert "-march=native" not in cross.stdout
    built = sh(["make", "-s", "-C", str(portable_package)])
    assert built.returncode == 0, built.stderr


def test_make_uses_the_targets_flags(tmp_path: Path) -> None:
    pkg = aot.compile(EXAMPLE, target="x86_64-v3").write(tmp_path / "pkg")
    dry = sh(["make", "-n", "-B", "-C", str(pkg), "CC=cc", "tiny_cnn.o"])
    assert "-march=x86-64-v3" in dry.stdout and "-march=native" not in dry.stdout


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize("build_type", ["", "Release"])
def test_cmake_add_subdirectory_is_optimised_for_this_cpu(portable_package: Path, tmp_path: Path,
                                                          build_type: str) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
                                        f"add_subdirectory({portable_package.as_posix()} model)\n")
    # Inside another project the runner is built only when asked for.
    configure = sh(["cmake", "-S", str(app), "-B", str(app / "build"), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                    f"-DCMAKE_BUILD_TYPE={build_type}", "-DTINY_CNN_BUILD_RUNNER=ON"])
    assert configure.returncode == 0, configure.stderr
    commands = json.loads((app / "build" / "compile_commands.json").read_text())
    model = next(c["command"] for c in commands if c["file"].endswith("tiny_cnn.c"))
    assert "-march=native" in model and "-ffp-contract=fast" in model
    assert ("-mprefer-vector-width=512" in model) == X86
    assert "-O3" in model  # CMake itself passes no -O flag without a build type
    built = sh(["cmake", "--build", str(app / "build")])
    assert built.returncode == 0, built.stdout + built.stderr
    out = tmp_path / "out"
    out.mkdir()
    np.save(tmp_path / "in.npy", image())
    run = sh([str(app / "build" / "model" / "tiny_cnn_runner"), "-o", str(out), str(tmp_path / "in.npy")])
    assert run.returncode == 0, run.stderr
    assert np.load(out / "output0.npy").shape == (1, 10)


CROSS = {"rpi4": ("aarch64-linux-gnu-gcc", "qemu-aarch64"), "rpi3": ("arm-linux-gnueabihf-gcc", "qemu-arm")}


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("target", sorted(CROSS))
def test_cross_cmake_with_the_toolchain_file_links_and_runs_under_qemu(tmp_path: Path, target: str,
                                                                      backend: str) -> None:
    gcc, qemu = CROSS[target]
    if not (shutil.which(gcc) and shutil.which(qemu)):
        pytest.skip(f"needs {gcc} and {qemu}")
    pkg = aot.compile(EXAMPLE, target=target, backend=backend).write(tmp_path / "pkg")
    build = tmp_path / "build"
    configure = sh(["cmake", "-S", str(pkg), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={pkg / 'toolchain.cmake'}",
                    "-DCMAKE_EXE_LINKER_FLAGS=-static", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"])
    assert configure.returncode == 0, configure.stderr
    built = sh(["cmake", "--build", str(build)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    commands = json.loads((build / "compile_commands.json").read_text())
    weights = next(c["command"] for c in commands if c["file"].endswith("_weights.c"))
    assert "-O3" in weights  # no CMAKE_BUILD_TYPE: still optimised
    np.save(tmp_path / "in.npy", image())
    run = sh([qemu, str(build / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "in.npy")])
    assert run.returncode == 0, run.stderr
    import onnx

    expected = run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": image()})["probabilities"]
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), expected, atol=1e-5)


def test_python_api_builds_for_this_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """aot.compile(..., target=...).run() builds with this CPU's vector ISA (it once cleared the
    target's flags and ran ResNet-8 9x slower than onnxruntime)."""
    commands: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(cmd, *args, **kwargs):  # noqa: ANN001, ANN202 - subprocess.run's signature
        commands.append(list(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(host_build.subprocess, "run", recording_run)
    package = aot.compile(EXAMPLE, target="x86_64-v3" if X86 else "aarch64")
    outputs = package.run({"image": image()})
    make = next(c for c in commands if c[0] == "make")
    flags = next(arg for arg in make if arg.startswith("TARGET_CFLAGS="))
    assert "-march=native" in flags and any(arg.startswith("CFLAGS=-O3") for arg in make)
    import onnx

    expected = run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": image()})["probabilities"]
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
    # The results are the caller's: a later run on other inputs leaves them as they were.
    package.run([np.zeros((1, 3, 32, 32), np.float32)])
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
