"""A package integrates like an installed C library: `cmake --install` then find_package() and
aot::<name> in another project (on the host and cross-built for rpi4 under qemu), `make install`
with DESTDIR then pkg-config, and several packages -- threaded or not, static or shared -- in one
program, whose shared libraries export only their own <name>_* symbols."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest

import aot
from aot.compiler import compile as compile_model
from aot.host.build import STRICT_CFLAGS, host_cc, host_target_cflags
from tests.helpers import run_onnxruntime
from tests.markdown_sections import code_blocks, markdown_section
from tests.test_build_paths import CROSS, EXAMPLE, REPO

REFERENCE_TOLERANCE = 1e-5

needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")


def sh(cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, env=env, timeout=900)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def pattern_input() -> np.ndarray:
    """The input the test programs compute themselves: (i * 37 % 101) / 101 - 0.5, in float32 as C
    computes it, so the expected outputs come from onnxruntime on the same bytes."""
    i = np.arange(1 * 3 * 32 * 32)
    values = ((i * 37) % 101).astype(np.float32) / np.float32(101) - np.float32(0.5)
    return values.reshape(1, 3, 32, 32)


def expected_probabilities() -> np.ndarray:
    return run_onnxruntime(onnx.load(str(EXAMPLE)), {"image": pattern_input()})["probabilities"].reshape(-1)


def program_source(packages: Sequence[tuple[str, bool]], in_folders: bool = False) -> str:
    """A C program that runs each package (name, threaded) on the pattern input and prints
    `<name> <status> <outputs...>`. A threaded package runs on a 2-thread pool of its own, through
    its <name>_thread_pool_* functions; the first through the generic aot_thread_pool_* names of
    its runtime/aot_threads.h. `in_folders`: the headers are included as "<name>/<name>.h"
    (the packages' parent folder on the include path), else as "<name>.h"."""
    includes, runs = [], []
    generic = True
    for name, threaded in packages:
        upper = name.upper()
        folder = f"{name}/" if in_folders else ""
        includes.append(f'#include "{folder}{name}.h"')
        if threaded:
            pool = f"{name}_thread_pool"  # declared in <name>.h
            if generic:
                includes.append(f'#include "{folder}runtime/aot_threads.h"')
                pool, generic = "aot_thread_pool", False
            call = (f"{pool} *pool_{name} = {pool}_create(2);\n"
                    f"    s = {name}_run_parallel(&in_{name}, &out_{name}, arena_{name}, "
                    f"{pool}_executor(pool_{name}));\n"
                    f"    {pool}_destroy(pool_{name});")
        else:
            call = f"s = {name}_run(&in_{name}, &out_{name}, arena_{name});"
        runs.append(f"""
    {{
        static float image[{upper}_INPUT0_SIZE], probabilities[{upper}_OUTPUT0_SIZE];
        {name}_inputs in_{name} = {{image}};
        {name}_outputs out_{name} = {{probabilities}};
        fill(image, {upper}_INPUT0_SIZE);
        {call}
        printf("{name} %d", (int)s);
        for (i = 0; i < {upper}_OUTPUT0_SIZE; ++i) printf(" %.9g", probabilities[i]);
        printf("\\n");
        if (s != AOT_OK) return 1;
    }}""")
    arenas = "".join(f"{name.upper()}_DECLARE_ARENA(arena_{name});\n" for name, _ in packages)
    return ("#include <stdio.h>\n" + "\n".join(includes) + "\n\n" + arenas + """
static void fill(float *x, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; ++i) x[i] = (float)((i * 37u) % 101u) / 101.0f - 0.5f;
}

int main(void)
{
    aot_status s;
    unsigned i;""" + "".join(runs) + "\n    return 0;\n}\n")


def check_outputs(stdout: str, names: Sequence[str]) -> None:
    """Every package printed status 0 and the outputs onnxruntime gives for the pattern input."""
    rows = {line.split()[0]: line.split()[1:] for line in stdout.splitlines() if line.strip()}
    assert sorted(rows) == sorted(names), stdout
    expected = expected_probabilities()
    for name in names:
        status, *values = rows[name]
        assert status == "0", f"{name}: status {status}"
        np.testing.assert_allclose(np.array(values, dtype=np.float32), expected, atol=REFERENCE_TOLERANCE,
                                   err_msg=name)


def consumer_project(folder: Path, name: str, threaded: bool) -> Path:
    """A CMake project of its own that finds the installed package and links aot::<name>."""
    folder.mkdir(parents=True)
    (folder / "app.c").write_text(program_source([(name, threaded)]))
    (folder / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(consumer C)\n"
        f"find_package({name} CONFIG REQUIRED)\n"
        "add_executable(app app.c)\n"
        "target_compile_options(app PRIVATE -std=c99 -Wall -Wextra -Werror -pedantic)\n"
        f"target_link_libraries(app PRIVATE aot::{name})\n")
    return folder


def build_and_install(pkg: Path, build: Path, prefix: Path, *configure: str) -> None:
    sh(["cmake", "-S", str(pkg), "-B", str(build), *configure])
    sh(["cmake", "--build", str(build)])
    sh(["cmake", "--install", str(build), "--prefix", str(prefix)])


def compile_commands(build: Path) -> dict[str, str]:
    return {Path(c["file"]).name: c["command"] for c in json.loads((build / "compile_commands.json").read_text())}


@needs_cmake
@pytest.mark.parametrize("variant", ["c-parallel", "llvm-binary-weights", "c-parallel-shared",
                                     "llvm-parallel-binary-weights-shared"])
def test_find_package_after_cmake_install(tmp_path: Path, variant: str) -> None:
    """`-shared`: configured with BUILD_SHARED_LIBS=ON, the package installs lib<name>.so (the LLVM
    object and the weights' assembly in it too), which exports only its own symbols."""
    threaded = "parallel" in variant
    shared = variant.endswith("-shared")
    backend = "llvm" if variant.startswith("llvm") else "c"
    package = compile_model(EXAMPLE, name="tiny_cnn", backend=backend, parallel=threaded,
                          weights_format="binary" if "binary" in variant else "c")
    pkg = package.write(tmp_path / "pkg")
    prefix = tmp_path / "prefix"
    build_and_install(pkg, tmp_path / "build", prefix, *(["-DBUILD_SHARED_LIBS=ON"] * shared))
    installed = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    headers = ["include/tiny_cnn/runtime/aot_runtime.h", *(["include/tiny_cnn/runtime/aot_threads.h"] * threaded),
               "include/tiny_cnn/tiny_cnn.h"]
    library = prefix / "lib" / ("libtiny_cnn.so" if shared else "libtiny_cnn.a")
    if shared:
        symbols = exported_symbols(library)
        assert "tiny_cnn_run" in symbols and all(s.startswith("tiny_cnn_") for s in symbols), symbols
        assert ("tiny_cnn_run_parallel" in symbols) == threaded
        if backend == "llvm":  # the model code is the LLVM object's, not tiny_cnn.c compiled by CMake
            assert not list((tmp_path / "build").rglob("tiny_cnn.c.o"))
    assert installed == sorted([*headers, str(library.relative_to(prefix)), "lib/pkgconfig/tiny_cnn.pc",
                                "lib/cmake/tiny_cnn/tiny_cnnConfig.cmake",
                                "lib/cmake/tiny_cnn/tiny_cnnConfigVersion.cmake",
                                "lib/cmake/tiny_cnn/tiny_cnnTargets.cmake",
                                "lib/cmake/tiny_cnn/tiny_cnnTargets-noconfig.cmake"])
    pc = (prefix / "lib/pkgconfig/tiny_cnn.pc").read_text()
    assert f"prefix={prefix}\n" in pc and ("-lpthread" in pc) == threaded

    app = consumer_project(tmp_path / "app", "tiny_cnn", threaded)
    sh(["cmake", "-S", str(app), "-B", str(app / "build"), f"-DCMAKE_PREFIX_PATH={prefix}",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"])
    sh(["cmake", "--build", str(app / "build")])
    check_outputs(sh([str(app / "build" / "app")]), ["tiny_cnn"])
    if shared:  # the program runs the installed library, not a copy linked into it
        assert str(library) in sh(["ldd", str(app / "build" / "app")])
    # The model's own flags are not the application's: only its include folders reach app.c.
    command = compile_commands(app / "build")["app.c"]
    assert f"{prefix}/include/tiny_cnn" in command
    for private in ("-march", "-O3", "-ffp-contract"):
        assert private not in command, command
    # The version is the generating aot's: an older major version is refused.
    versioned = tmp_path / "versioned"
    versioned.mkdir()
    (versioned / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.13)\nproject(v C)\n"
                                              f"find_package(tiny_cnn {aot.__version__} CONFIG REQUIRED)\n")
    sh(["cmake", "-S", str(versioned), "-B", str(versioned / "build"), f"-DCMAKE_PREFIX_PATH={prefix}"])


@needs_cmake
def test_shared_library_of_a_bare_metal_llvm_object_is_refused_at_configure(tmp_path: Path) -> None:
    """A bare-metal LLVM object has static relocations: configuring it into a shared library stops
    with a message naming the way out, not a link error."""
    pkg = compile_model(EXAMPLE, name="tiny_cnn", backend="llvm", target="cortex-m4f").write(tmp_path / "pkg")
    result = subprocess.run(["cmake", "-S", str(pkg), "-B", str(tmp_path / "build"), "-DBUILD_SHARED_LIBS=ON",
                             "-DTINY_CNN_TARGET=cortex-m4f"], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "TINY_CNN_TARGET=cortex-m4f is not position-independent" in message, result.stderr
    assert "BUILD_SHARED_LIBS=OFF" in message and "TINY_CNN_BACKEND=c" in message


@needs_cmake
def test_add_subdirectory_links_the_alias_and_builds_no_runner_or_install_rules(tmp_path: Path) -> None:
    names = ("alpha", "beta")
    for name in names:
        compile_model(EXAMPLE, name=name, parallel=True).write(tmp_path / name)
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.c").write_text(program_source([(n, True) for n in names]))
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\n"
        + "".join(f"add_subdirectory({(tmp_path / n).as_posix()} {n})\n" for n in names)
        + "add_executable(app app.c)\n"
        + f"target_link_libraries(app PRIVATE {' '.join('aot::' + n for n in names)})\n")
    sh(["cmake", "-S", str(app), "-B", str(app / "build")])
    sh(["cmake", "--build", str(app / "build")])
    check_outputs(sh([str(app / "build" / "app")]), names)
    # Inside another project the package builds no runner and installs nothing of its own.
    assert not list((app / "build").rglob("*_runner"))
    sh(["cmake", "--install", str(app / "build"), "--prefix", str(tmp_path / "prefix")])
    assert not (tmp_path / "prefix").exists()


@pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("make") is None,
                    reason="needs make and pkg-config")
def test_pkg_config_after_make_install_with_destdir(tmp_path: Path) -> None:
    pkg = compile_model(EXAMPLE, name="tiny_cnn", parallel=True).write(tmp_path / "pkg")
    destdir = tmp_path / "stage"
    sh(["make", "-s", "-C", str(pkg), "install", f"DESTDIR={destdir}", "PREFIX=/usr"])
    installed = sorted(str(p.relative_to(destdir)) for p in destdir.rglob("*") if p.is_file())
    assert installed == ["usr/include/tiny_cnn/runtime/aot_runtime.h", "usr/include/tiny_cnn/runtime/aot_threads.h",
                         "usr/include/tiny_cnn/tiny_cnn.h", "usr/lib/libtiny_cnn.a", "usr/lib/pkgconfig/tiny_cnn.pc"]
    env = {"PATH": "/usr/bin:/bin", "PKG_CONFIG_PATH": str(destdir / "usr/lib/pkgconfig"),
           "PKG_CONFIG_SYSROOT_DIR": str(destdir)}
    flags = sh(["pkg-config", "--cflags", "--libs", "tiny_cnn"], env=env).split()
    assert flags == [f"-I{destdir}/usr/include/tiny_cnn", f"-I{destdir}/usr/include/tiny_cnn/runtime",
                     f"-L{destdir}/usr/lib", "-ltiny_cnn", "-lm", "-lpthread"]
    (tmp_path / "app.c").write_text(program_source([("tiny_cnn", True)]))
    sh(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", str(tmp_path / "app.c"), "-o",
        str(tmp_path / "app"), *flags])
    check_outputs(sh([str(tmp_path / "app")]), ["tiny_cnn"])
    # Without threads the .pc asks for no pthread and no pool header is installed.
    serial = compile_model(EXAMPLE, name="serial").write(tmp_path / "serial")
    sh(["make", "-s", "-C", str(serial), "install", f"DESTDIR={destdir}", "PREFIX=/usr"])
    assert "-lpthread" not in (destdir / "usr/lib/pkgconfig/serial.pc").read_text()
    assert sorted(p.name for p in (destdir / "usr/include/serial").rglob("*.h")) == ["aot_runtime.h", "serial.h"]


def exported_symbols(library: Path) -> list[str]:
    lines = sh(["nm", "-D", "--defined-only", str(library)]).splitlines()
    return sorted(line.split()[-1] for line in lines if len(line.split()) == 3)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_four_packages_threaded_or_not_static_or_shared_in_one_program(tmp_path: Path) -> None:
    """Two --parallel packages (one static, one shared), one static and one shared without threads.
    The static threaded library is linked whole (every object in it, as when its sources go into the
    program's build): two pools with the same names would be defined twice."""
    packages = {"par_static": (True, "static"), "par_shared": (True, "shared"), "plain_static": (False, "static"),
                "plain_shared": (False, "shared")}
    link: list[str] = []
    for name, (threaded, kind) in packages.items():
        pkg = compile_model(EXAMPLE, name=name, parallel=threaded).write(tmp_path / name)
        if kind == "static":
            sh(["make", "-s", "-C", str(pkg), f"lib{name}.a"])
            link += ["-Wl,--whole-archive", str(pkg / f"lib{name}.a"), "-Wl,--no-whole-archive"]
        else:
            sh(["make", "-s", "-C", str(pkg), "shared"])
            symbols = exported_symbols(pkg / f"lib{name}.so")
            assert symbols and all(s.startswith(f"{name}_") for s in symbols), symbols
            assert (f"{name}_thread_pool_create" in symbols) == threaded
            link += [f"-L{pkg}", f"-l{name}", f"-Wl,-rpath,{pkg}"]
    (tmp_path / "main.c").write_text(program_source([(n, t) for n, (t, _) in packages.items()],
                                                    in_folders=True))
    sh(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{tmp_path}", str(tmp_path / "main.c"),
        "-o", str(tmp_path / "main"), *link, "-lm", "-lpthread"])
    check_outputs(sh([str(tmp_path / "main")]), list(packages))


def test_two_parallel_packages_sources_in_one_build(tmp_path: Path) -> None:
    """Both packages' sources, thread pools included, compiled into one program (as a firmware build
    takes them): each pool's symbols are its package's, so none is defined twice."""
    names = ("alpha", "beta")
    sources: list[str] = []
    for name in names:
        pkg = compile_model(EXAMPLE, name=name, parallel=True).write(tmp_path / name)
        sources += [str(pkg / f"{name}.c"), str(pkg / f"{name}_weights.c"), str(pkg / "runtime" / "aot_threads.c")]
    (tmp_path / "main.c").write_text(program_source([(n, True) for n in names], in_folders=True))
    sh([host_cc(), "-O1", *host_target_cflags().split(), *STRICT_CFLAGS.split(), "-pedantic", f"-I{tmp_path}",
        str(tmp_path / "main.c"), *sources, "-o", str(tmp_path / "main"), "-lm", "-lpthread"])
    check_outputs(sh([str(tmp_path / "main")]), names)


@needs_cmake
@pytest.mark.parametrize("target", ["rpi4"])
def test_find_package_cross_built_with_the_toolchain_file_runs_under_qemu(tmp_path: Path, target: str) -> None:
    gcc, qemu = CROSS[target]
    if not (shutil.which(gcc) and shutil.which(qemu)):
        pytest.skip(f"needs {gcc} and {qemu}")
    pkg = compile_model(EXAMPLE, name="tiny_cnn", target=target, parallel=True).write(tmp_path / "pkg")
    toolchain = f"-DCMAKE_TOOLCHAIN_FILE={pkg / 'toolchain.cmake'}"
    prefix = tmp_path / "prefix"
    build_and_install(pkg, tmp_path / "build", prefix, toolchain)
    app = consumer_project(tmp_path / "app", "tiny_cnn", threaded=True)
    sh(["cmake", "-S", str(app), "-B", str(app / "build"), toolchain, f"-DCMAKE_PREFIX_PATH={prefix}",
        "-DCMAKE_EXE_LINKER_FLAGS=-static"])
    sh(["cmake", "--build", str(app / "build")])
    program = app / "build" / "app"
    assert program.read_bytes()[18] == 183  # e_machine EM_AARCH64
    check_outputs(sh([qemu, str(program)]), ["tiny_cnn"])


DOCS_PAGE, DOCS_SECTION = "docs/package.md", "### Linking a package into your build"


def readme_blocks() -> dict[str, list[str]]:
    """The code blocks of the docs' integration section, by language."""
    section = markdown_section(DOCS_PAGE, DOCS_SECTION)
    blocks: dict[str, list[str]] = {}
    for kind, body in code_blocks(section):
        blocks.setdefault(kind, []).append(body)
    return blocks


@needs_cmake
@pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("make") is None,
                    reason="needs make and pkg-config")
def test_readme_integration_commands_run_as_written(tmp_path: Path) -> None:
    """docs/package.md's install / find_package / pkg-config commands, literally, with its
    app/CMakeLists.txt, HOME in a temporary folder and this checkout's aot on PATH."""
    blocks = readme_blocks()
    (commands,), (cmake_lists,) = blocks["sh"], blocks["cmake"]
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "examples")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "CMakeLists.txt").write_text(cmake_lists)
    (tmp_path / "app" / "app.c").write_text(program_source([("tiny_cnn", True)]))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aot").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m aot "$@"\n')
    (bin_dir / "aot").chmod(0o755)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PKG_CONFIG_PATH", None)
    sh(["bash", "-c", "set -euo pipefail\n" + commands], cwd=tmp_path, env=env)
    for program in ("app/build/app", "app/app_pc"):
        check_outputs(sh([str(tmp_path / program)]), ["tiny_cnn"])
