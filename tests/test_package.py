"""The generated package as a C developer uses it: builds warning-free, links into C and C++
programs (two models side by side), runs clean under sanitizers, and is byte-for-byte reproducible."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import aot
from aot.host.build import STRICT_CFLAGS
from tests.helpers import SANITIZE_FLAGS, SANITIZER_REPORTS, rand, run_onnxruntime, run_sanitized

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def example_package() -> aot.package.package.Package:  # type: ignore[name-defined]
    return aot.compile(EXAMPLE)


def sh(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_package_builds_warning_free_and_runner_matches_onnxruntime(example_package, tmp_path: Path, cc: str) -> None:
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    pkg = example_package.write(tmp_path / "pkg")
    sh(["make", "-s", "-C", str(pkg), f"CC={cc}", f"CFLAGS=-O2 {STRICT_CFLAGS} -pedantic"])
    x = rand(1, 3, 32, 32, seed=11)
    np.save(tmp_path / "x.npy", x)
    result = sh([str(pkg / "tiny_cnn_runner"), "-o", str(tmp_path), "-r", "20", str(tmp_path / "x.npy")])
    assert "median_us" in result.stdout
    ours = np.load(tmp_path / "output0.npy")
    ref = run_onnxruntime(onnx.load(EXAMPLE), {"image": x})["probabilities"]
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_runner_rejects_wrong_input(example_package, tmp_path: Path) -> None:
    pkg = example_package.write(tmp_path / "pkg")
    sh(["make", "-s", "-C", str(pkg)])
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 16, 16), np.float32))
    result = subprocess.run([str(pkg / "tiny_cnn_runner"), str(tmp_path / "bad.npy")], capture_output=True, text=True)
    assert result.returncode != 0 and "dimension 2 is 16" in result.stderr


def test_model_object_has_no_malloc_no_writable_globals_and_prefixed_symbols(example_package, tmp_path: Path) -> None:
    pkg = example_package.write(tmp_path / "pkg")
    sh(["make", "-s", "-C", str(pkg), "libtiny_cnn.a"])
    # Without --parallel the library is the model code only (with it, it also holds the thread
    # pool, runtime/aot_threads.o: tests/test_threads.py).
    library = sh(["nm", "--defined-only", "-g", str(pkg / "libtiny_cnn.a")]).stdout
    assert sorted(line.split()[-1] for line in library.splitlines() if len(line.split()) == 3) == [
        "tiny_cnn_info", "tiny_cnn_run", "tiny_cnn_run_parallel", "tiny_cnn_run_parallel_ptrs", "tiny_cnn_run_ptrs",
        "tiny_cnn_weights"]
    model = [str(pkg / "tiny_cnn.o"), str(pkg / "tiny_cnn_weights.o")]
    symbols = sh(["nm", "--defined-only", "-g", *model]).stdout
    undefined = sh(["nm", "-u", *model]).stdout
    exported = [line.split()[-1] for line in symbols.splitlines() if len(line.split()) == 3]
    assert sorted(exported) == ["tiny_cnn_info", "tiny_cnn_run", "tiny_cnn_run_parallel", "tiny_cnn_run_parallel_ptrs",
                                "tiny_cnn_run_ptrs", "tiny_cnn_weights"]
    kinds = {line.split()[-1]: line.split()[1] for line in symbols.splitlines() if len(line.split()) == 3}
    assert kinds["tiny_cnn_weights"] in "Rr", "weights must be read-only"
    # Data objects must live in read-only sections (.rodata, or .data.rel.ro when they hold pointers
    # and the compiler defaults to PIE: read-only after relocation).
    table = sh(["objdump", "-t", *model]).stdout
    writable = []
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 5 and " O " in line:
            section = parts[-3]
            if section in (".data", ".bss", "*COM*") or section.startswith((".data.", ".bss.")) and \
                    not section.startswith(".data.rel.ro"):
                writable.append(line)
    assert writable == [], f"writable globals: {writable}"
    for forbidden in ("malloc", "free", "calloc", "realloc", "printf", "fopen", "pthread_create"):
        assert forbidden not in undefined.split(), f"model references {forbidden}"


def test_two_models_and_two_instances_in_one_cpp_program(tmp_path: Path) -> None:
    if not shutil.which("g++"):
        pytest.skip("g++ not installed")
    for name in ("alpha", "beta"):
        aot.compile(EXAMPLE, name=name).write(tmp_path / name)
        sh(["make", "-s", "-C", str(tmp_path / name), f"lib{name}.a"])
    program = tmp_path / "main.cpp"
    program.write_text(r"""
#include <cmath>
#include <cstdio>
#include "alpha.h"
#include "beta.h"
ALPHA_DECLARE_ARENA(arena_a1);
ALPHA_DECLARE_ARENA(arena_a2);
BETA_DECLARE_ARENA(arena_b);
int main() {
    static float image[ALPHA_INPUT0_SIZE];
    float pa1[ALPHA_OUTPUT0_SIZE], pa2[ALPHA_OUTPUT0_SIZE], pb[BETA_OUTPUT0_SIZE];
    for (unsigned i = 0; i < ALPHA_INPUT0_SIZE; ++i) image[i] = std::sin(0.1f * i);
    alpha_inputs in = {image};
    alpha_outputs o1 = {pa1}, o2 = {pa2};
    beta_inputs bin = {image};
    beta_outputs bo = {pb};
    if (alpha_run(&in, &o1, arena_a1) != AOT_OK) return 1;
    if (alpha_run(&in, &o2, arena_a2) != AOT_OK) return 2;
    if (beta_run(&bin, &bo, arena_b) != AOT_OK) return 3;
    for (unsigned i = 0; i < ALPHA_OUTPUT0_SIZE; ++i)
        if (pa1[i] != pa2[i] || pa1[i] != pb[i]) return 4;
    if (alpha_run(&in, &o1, arena_a1 + 1) != AOT_ERROR_ARENA_ALIGNMENT) return 5;
    if (alpha_run(&in, &o1, nullptr) != AOT_ERROR_NULL_POINTER) return 6;
    const aot_model_info *info = alpha_info();
    std::printf("%s %s %zu %s\n", info->name, info->inputs[0].name, info->arena_size,
                aot_status_string(AOT_ERROR_ARENA_ALIGNMENT));
    return 0;
}
""")
    sh(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path / 'alpha'}", f"-I{tmp_path / 'beta'}",
        str(program), str(tmp_path / "alpha" / "libalpha.a"), str(tmp_path / "beta" / "libbeta.a"), "-lm",
        "-o", str(tmp_path / "main")])
    out = sh([str(tmp_path / "main")]).stdout.split()
    manifest = json.loads((tmp_path / "alpha" / "manifest.json").read_text())
    assert out[:3] == ["alpha", "image", str(manifest["arena_bytes"])]


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_runs_clean_under_address_and_undefined_behaviour_sanitizers(example_package, tmp_path: Path,
                                                                     cc: str) -> None:
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    pkg = example_package.write(tmp_path / "pkg")
    flags = f"-O1 -g {STRICT_CFLAGS} -pedantic {SANITIZE_FLAGS}"
    sh(["make", "-s", "-C", str(pkg), f"CC={cc}", f"CFLAGS={flags}", "LDFLAGS=-fsanitize=address,undefined"])
    np.save(tmp_path / "x.npy", rand(1, 3, 32, 32, seed=3))
    result = subprocess.run([str(pkg / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and not any(r in result.stderr for r in SANITIZER_REPORTS), result.stderr
    # A rejected input file: a clear message and no leak (the runner once kept the array it read).
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 16, 16), np.float32))
    bad = subprocess.run([str(pkg / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "bad.npy")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "dimension 2 is 16" in bad.stderr
    assert not any(r in bad.stderr for r in SANITIZER_REPORTS), bad.stderr


def test_sanitizer_mode_of_the_op_checks_catches_an_arena_overflow(example_package) -> None:
    """AOT_TEST_SANITIZE=1 runs every op check through run_sanitized: it must fail when the model
    writes past its arena (here: the header claims 64 bytes less than the plan needs)."""
    x = rand(1, 3, 32, 32, seed=4)
    ours = run_sanitized(example_package, {"image": x})
    ref = run_onnxruntime(onnx.load(EXAMPLE), {"image": x})["probabilities"]
    np.testing.assert_allclose(ours["probabilities"], ref, atol=1e-5)
    size = example_package.arena_bytes
    files = dict(example_package.files)
    files["tiny_cnn.h"] = files["tiny_cnn.h"].replace(f"#define TINY_CNN_ARENA_SIZE {size}u".encode(),
                                                      f"#define TINY_CNN_ARENA_SIZE {size - 64}u".encode())
    assert files["tiny_cnn.h"] != example_package.files["tiny_cnn.h"]
    broken = aot.package.package.Package(example_package.name, files, example_package.manifest)
    with pytest.raises(AssertionError, match="AddressSanitizer"):
        run_sanitized(broken, {"image": x})


def test_cmake_builds_the_package(example_package, tmp_path: Path) -> None:
    if not shutil.which("cmake"):
        pytest.skip("cmake not installed")
    pkg = example_package.write(tmp_path / "pkg")
    sh(["cmake", "-S", str(pkg), "-B", str(tmp_path / "build"), "-DCMAKE_BUILD_TYPE=Release"])
    sh(["cmake", "--build", str(tmp_path / "build")])
    np.save(tmp_path / "x.npy", rand(1, 3, 32, 32, seed=2))
    sh([str(tmp_path / "build" / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")])
    assert np.load(tmp_path / "output0.npy").shape == (1, 10)


def test_compiling_twice_gives_byte_identical_packages(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "renamed.onnx"
    copy.parent.mkdir()
    shutil.copy(EXAMPLE, copy)
    first = aot.compile(EXAMPLE, name="tiny_cnn")
    second = aot.compile(copy, name="tiny_cnn")
    assert first.files.keys() == second.files.keys()
    differing = [p for p in first.files if first.files[p] != second.files[p]]
    # The manifest and header name the source file; everything else must be identical.
    assert set(differing) <= {"manifest.json", "tiny_cnn.h", "tiny_cnn.c"}
    third = aot.compile(EXAMPLE, name="tiny_cnn")
    assert first.files == third.files


def test_manifest_lists_every_file_with_its_hash(example_package, tmp_path: Path) -> None:
    import hashlib

    pkg = example_package.write(tmp_path / "pkg")
    manifest = json.loads((pkg / "manifest.json").read_text())
    on_disk = {str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((pkg / rel).read_bytes()).hexdigest() == digest
    for key in ("name", "inputs", "outputs", "arena_bytes", "weights_bytes", "onnx_nodes", "kernels", "compiler"):
        assert key in manifest
    assert manifest["inputs"] == [{"name": "image", "c_name": "image", "shape": [1, 3, 32, 32],
                                   "dtype": "float32", "bytes": 12288}]


def test_arena_guards_pass_and_catch_a_too_small_arena(example_package, tmp_path: Path) -> None:
    """make GUARDS=1 builds a runner that checks guard bytes around the arena after each run."""
    pkg = example_package.write(tmp_path / "pkg")
    np.save(tmp_path / "x.npy", rand(1, 3, 32, 32, seed=5))
    sh(["make", "-s", "-C", str(pkg), "GUARDS=1"])
    sh([str(pkg / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")])
    # Sabotage: tell the runner the arena is 64 bytes smaller than the plan needs.
    header = pkg / "tiny_cnn.h"
    size = example_package.arena_bytes
    header.write_text(header.read_text().replace(f"#define TINY_CNN_ARENA_SIZE {size}u",
                                                 f"#define TINY_CNN_ARENA_SIZE {size - 64}u"))
    sh(["make", "-s", "-C", str(pkg), "clean"])
    sh(["make", "-s", "-C", str(pkg), "GUARDS=1"])
    broken = subprocess.run([str(pkg / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")],
                            capture_output=True, text=True)
    assert broken.returncode != 0 and "arena guard" in broken.stderr
