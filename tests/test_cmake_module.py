"""aot's CMake module: find_package(aot) + aot_add_model compile a model in the user's build,
rerun aot only when the model or the options change, cross-build for a board; docs/cmake.md runs
as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
OUTPUT = r"tiny_cnn: class \d, p=0\.\d{4}, arena \d+ bytes\n"
COMPILE_STEP = "aot compile"  # the build log's line for the model's step (the custom command's comment)

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                                 reason="needs cmake and a C compiler")
needs_cross = pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None or shutil.which("qemu-aarch64") is None,
                                 reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")

APP_C = r"""
#include <stdio.h>
#include <stdlib.h>

#include "tiny_cnn.h"

int main(void) {
    const aot_model_info *info = tiny_cnn_info();
    void *memory = malloc(aot_arena_padded_size(info));
    static float image[TINY_CNN_INPUT0_SIZE], probabilities[TINY_CNN_OUTPUT0_SIZE];
    for (size_t i = 0; i < TINY_CNN_INPUT0_SIZE; ++i) image[i] = (float)(i % 7) * 0.25f - 0.5f;
    tiny_cnn_inputs in = {image};
    tiny_cnn_outputs out = {probabilities};
    if (tiny_cnn_run(&in, &out, aot_arena_align(info, memory)) != AOT_OK) return 1;
    size_t best = 0;
    for (size_t k = 1; k < TINY_CNN_OUTPUT0_SIZE; ++k) if (probabilities[k] > probabilities[best]) best = k;
    printf("%s: class %zu, p=%.4f, arena %zu bytes\n", info->name, best, probabilities[best], info->arena_size);
    free(memory);
    return 0;
}
"""


def app_project(folder: Path, arguments: str = "", languages: str = "C") -> Path:
    """A C program linking tiny_cnn through aot_add_model; -DMODEL_OPTIONS=a;b passes OPTIONS."""
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLES / "tiny_cnn.onnx", folder / "tiny_cnn.onnx")
    (folder / "main.c").write_text(APP_C)
    (folder / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\n"
        f"project(app {languages})\n"
        "find_package(aot REQUIRED)\n"
        'set(MODEL_OPTIONS "" CACHE STRING "aot compile options")\n'
        f"aot_add_model(tiny_cnn MODEL tiny_cnn.onnx {arguments} OPTIONS ${{MODEL_OPTIONS}})\n"
        "add_executable(app main.c)\n"
        "target_link_libraries(app PRIVATE tiny_cnn)\n")
    return folder


def cmake(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["cmake", *args], capture_output=True, text=True, cwd=cwd)
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def configure(source: Path, build: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Configure with this interpreter's aot (AOT_PYTHON: no aot on PATH needed)."""
    return cmake("-S", str(source), "-B", str(build), f"-Daot_DIR={REPO / 'aot' / 'cmake'}",
                 f"-DAOT_PYTHON={sys.executable}", *extra, check=check)


def build(folder: Path) -> str:
    return cmake("--build", str(folder)).stdout


def change_weights(model: Path) -> None:
    """New bytes for the model file: its first initializer scaled."""
    proto = onnx.load(str(model))
    first = proto.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * np.float32(1.5), first.name))
    onnx.save(proto, str(model))


def manifest(build_dir: Path) -> dict:
    return json.loads((build_dir / "tiny_cnn_aot" / "manifest.json").read_text())


def test_cmake_dir_prints_the_folder_find_package_reads(tmp_path: Path) -> None:
    aot = Path(sys.executable).parent / "aot"
    printed = {subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
               for command in ([str(aot), "--cmake-dir"], [sys.executable, "-m", "aot", "--cmake-dir"])}
    (folder,) = printed
    shipped = {p.name for p in Path(folder).iterdir()}
    assert {"aotConfig.cmake", "aotConfigVersion.cmake", "AotAddModel.cmake"} <= shipped
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    from aot.version import __version__

    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.19)\nproject(x NONE)\n"
                                             f"find_package(aot {__version__} EXACT REQUIRED)\n"
                                             'message(STATUS "aot ${aot_VERSION}")\n'
                                             "find_package(aot 99 QUIET)\n"
                                             'message(STATUS "aot 99 found: ${aot_FOUND}")\n')
    out = cmake("-S", str(tmp_path), "-B", str(tmp_path / "b"), f"-Daot_DIR={folder}").stdout
    assert f"aot {__version__}" in out and "aot 99 found: 0" in out


def test_wheel_carries_the_cmake_module(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("aot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("aotConfig.cmake", "aotConfigVersion.cmake", "AotAddModel.cmake", "AotBuildModel.cmake"):
        assert f"aot/cmake/{name}" in names
    assert "aot/version.py" in names  # aotConfigVersion.cmake reads the version from it


@needs_cmake
def test_host_app_recompiles_the_model_only_when_the_model_or_options_change(tmp_path: Path) -> None:
    """With Ninja where installed (docs/cmake.md's test covers the Makefile generator)."""
    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    source, out = app_project(tmp_path / "app"), tmp_path / "build"
    configure(source, out, "-G", generator)
    assert COMPILE_STEP in build(out)
    assert re.fullmatch(OUTPUT, subprocess.run([str(out / "app")], capture_output=True, text=True, check=True).stdout)
    first = manifest(out)

    # Nothing changed: aot does not run and the package stays as it was.
    stamp = (out / "tiny_cnn_aot" / "manifest.json").stat().st_mtime_ns
    assert COMPILE_STEP not in build(out)
    assert (out / "tiny_cnn_aot" / "manifest.json").stat().st_mtime_ns == stamp

    # New model bytes: the package is compiled again (new weights) and the program relinked.
    change_weights(source / "tiny_cnn.onnx")
    log = build(out)
    assert COMPILE_STEP in log and re.search(r"Linking C executable app", log), log
    second = manifest(out)
    assert second["files"]["tiny_cnn_weights.c"] != first["files"]["tiny_cnn_weights.c"]
    assert re.fullmatch(OUTPUT, subprocess.run([str(out / "app")], capture_output=True, text=True, check=True).stdout)

    # New options: compiled again with them (--parallel: the thread pool is linked too); then nothing to do.
    configure(source, out, "-DMODEL_OPTIONS=--conv-algorithm;direct;--parallel")
    assert COMPILE_STEP in build(out)
    assert manifest(out)["conv_algorithm"] == "direct" and first["conv_algorithm"] == "auto"
    assert re.fullmatch(OUTPUT, subprocess.run([str(out / "app")], capture_output=True, text=True, check=True).stdout)
    assert COMPILE_STEP not in build(out)


@needs_cmake
def test_a_change_to_the_data_file_alone_recompiles_the_model(tmp_path: Path) -> None:
    """A model whose weights sit in an external data file (DATA): new bytes there rerun aot."""
    source, out = app_project(tmp_path / "app", "DATA tiny_cnn.data"), tmp_path / "build"
    proto = onnx.load(str(source / "tiny_cnn.onnx"))
    onnx.save(proto, str(source / "tiny_cnn.onnx"), save_as_external_data=True, location="tiny_cnn.data",
              size_threshold=0)
    configure(source, out)
    build(out)
    first = manifest(out)["files"]["tiny_cnn_weights.c"]
    model_bytes = (source / "tiny_cnn.onnx").read_bytes()
    data = np.frombuffer((source / "tiny_cnn.data").read_bytes(), np.uint8).copy()
    data[:64] ^= 0x01  # low mantissa bits of the first weights: other values, same shapes
    (source / "tiny_cnn.data").write_bytes(data.tobytes())
    assert (source / "tiny_cnn.onnx").read_bytes() == model_bytes
    assert COMPILE_STEP in build(out)
    assert manifest(out)["files"]["tiny_cnn_weights.c"] != first


@needs_cmake
def test_name_and_llvm_backend_reach_aot_compile(tmp_path: Path) -> None:
    source, out = app_project(tmp_path / "app", "BACKEND llvm NAME net"), tmp_path / "build"
    (source / "main.c").write_text(APP_C.replace("tiny_cnn", "net").replace("TINY_CNN", "NET"))
    configure(source, out)
    build(out)
    assert manifest(out)["backend"] == "llvm" and manifest(out)["name"] == "net"
    assert any(name.endswith(".o") for name in manifest(out)["files"]) and "net.h" in manifest(out)["files"]
    result = subprocess.run([str(out / "app")], capture_output=True, text=True, check=True)
    assert re.fullmatch(OUTPUT.replace("tiny_cnn", "net"), result.stdout)


@needs_cmake
@needs_cross
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_cross_build_for_rpi4_with_the_package_toolchain_runs_under_qemu(tmp_path: Path, backend: str) -> None:
    """The toolchain file of a package compiled for rpi4 cross-builds the app; TARGET rpi4 tunes the model."""
    aot = [sys.executable, "-m", "aot"]
    subprocess.run([*aot, "compile", str(EXAMPLES / "tiny_cnn.onnx"), "--target", "rpi4", "-o", str(tmp_path / "tc")],
                   check=True, capture_output=True)
    source, out = app_project(tmp_path / "app", f"TARGET rpi4 BACKEND {backend}"), tmp_path / "build"
    configure(source, out, f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'tc' / 'toolchain.cmake'}",
              "-DCMAKE_EXE_LINKER_FLAGS=-static")
    build(out)
    program = out / "app"
    assert program.read_bytes()[18] == 183  # ELF e_machine: EM_AARCH64
    assert manifest(out)["backend"] == backend and manifest(out)["target"] == "rpi4"
    result = subprocess.run(["qemu-aarch64", str(program)], capture_output=True, text=True, check=True)
    assert re.fullmatch(OUTPUT, result.stdout)


@needs_cmake
@pytest.mark.parametrize(("arguments", "error"), [
    ("", "aot_add_model(tiny_cnn): MODEL is required"),
    ("MODEL missing.onnx", "aot_add_model(tiny_cnn): "),
    ("MODEL tiny_cnn.onnx BACKEND fortran", "aot_add_model(tiny_cnn): BACKEND fortran: use c or llvm"),
    ("MODEL tiny_cnn.onnx --target rpi4", "aot_add_model(tiny_cnn): unknown arguments: --target;rpi4"),
])
def test_bad_arguments_stop_the_configure_naming_the_function(tmp_path: Path, arguments: str, error: str) -> None:
    source = tmp_path / "app"
    source.mkdir()
    shutil.copy(EXAMPLES / "tiny_cnn.onnx", source)
    (source / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.19)\nproject(app C)\n"
                                           f"find_package(aot REQUIRED)\naot_add_model(tiny_cnn {arguments})\n")
    result = configure(source, tmp_path / "build", check=False)
    assert result.returncode != 0
    flat = " ".join(result.stderr.split())
    assert error in flat, result.stderr
    if "missing" in arguments:
        assert "missing.onnx: no such file" in flat


@needs_cmake
def test_a_failing_model_compile_fails_the_build_with_aots_error(tmp_path: Path) -> None:
    source, out = app_project(tmp_path / "app"), tmp_path / "build"
    (source / "tiny_cnn.onnx").write_bytes(b"not a model")
    configure(source, out)
    result = cmake("--build", str(out), check=False)
    assert result.returncode != 0
    assert "not an ONNX model" in result.stdout + result.stderr


def _doc_blocks() -> list[tuple[str, str, str]]:
    """docs/cmake.md's fenced blocks in order: (language, title, body)."""
    text = (REPO / "docs" / "cmake.md").read_text()
    return [(kind, title or "", body)
            for kind, title, body in re.findall(r'```(\w*)(?: title="([^"]+)")?\n(.*?)```', text, re.S)]


@needs_cmake
@needs_cross
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("c++") is None, reason="needs make and a C++ compiler")
def test_docs_cmake_md_runs_as_written(tmp_path: Path) -> None:
    """Every sh block of docs/cmake.md, literally and in order, from a copy of examples/ with this
    environment's aot on PATH; the files it shows are written there (the CMakeLists.txt of cpp_app
    must be the example's own); the outputs it shows have the format the commands print."""
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work, ignore=shutil.ignore_patterns("build", "__pycache__"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    outputs, shown = [], []
    for kind, title, body in _doc_blocks():
        if title:
            if (work / title).exists():
                assert (work / title).read_text() == body, f"docs/cmake.md's {title} differs from examples/{title}"
            (work / title).parent.mkdir(parents=True, exist_ok=True)
            (work / title).write_text(body)
        elif kind == "sh":
            result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + body], cwd=work, env=env,
                                    capture_output=True, text=True)
            assert result.returncode == 0, body + result.stdout[-3000:] + result.stderr[-3000:]
            outputs.append((body, result.stdout))
        elif kind == "text":
            shown.append(body)
    assert len(outputs) == 5 and shown
    for text in shown:
        assert re.fullmatch(OUTPUT, text)
    touched = next(out for body, out in outputs if body.startswith("touch tiny_cnn.onnx"))
    assert COMPILE_STEP in touched  # the edited model was compiled again
    for body, out in outputs:
        if body.rstrip().endswith(("cpp_app/cpp_app", "qemu-aarch64 build/rpi4/app", "./app/app")):
            assert re.search(OUTPUT.rstrip(r"\n") + "$", out), (body, out)
    # The Make rule reruns aot compile only when the model changes.
    make = ["make", "-C", str(work / "app")]
    assert "aot compile" not in subprocess.run(make, env=env, capture_output=True, text=True, check=True).stdout
    change_weights(work / "tiny_cnn.onnx")
    rerun = subprocess.run(make, env=env, capture_output=True, text=True, check=True).stdout
    assert "aot compile ../tiny_cnn.onnx -o tiny_cnn --force" in rerun
