"""Several models in one package (`aot compile a.onnx b.onnx -o pkg`): one header and entry points
per model, one library, one weights struct; `--shared-arena` (one arena of the largest model's
size, declared by the package's header); the same model at several input shapes, its weights
stored once. Each is checked as a user would: a C program runs the models from the built library
and its outputs match onnxruntime's, `aot verify` passes on the host and for rpi4 under qemu, and
`size` shows the weights once."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.host.build import STRICT_CFLAGS, host_cc, host_target_cflags
from aot.model_set import ModelSpec
from tests.helpers import make_model, run_onnxruntime
from tests.markdown_sections import code_blocks, markdown_section
from tests.test_cli import aot, assert_user_error
from tests.test_install import needs_cmake, sh

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"
TOLERANCE = 1e-5


def pattern(shape: Sequence[int]) -> np.ndarray:
    """What the C test program feeds: (i * 37 % 101) / 101 - 0.5 in float32, as C computes it."""
    i = np.arange(int(np.prod(shape)))
    return (((i * 37) % 101).astype(np.float32) / np.float32(101) - np.float32(0.5)).reshape(shape)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tiny_cnn (input 'image'), the same with free height and width, and a small MLP (input 'features')."""
    folder = tmp_path_factory.mktemp("models")
    free = onnx.load(str(EXAMPLE))
    dims = free.graph.input[0].type.tensor_type.shape.dim
    for i, label in ((2, "H"), (3, "W")):
        dims[i].ClearField("dim_value")
        dims[i].dim_param = label
    del free.graph.value_info[:]
    onnx.save(free, str(folder / "any_size.onnx"))
    rng = np.random.default_rng(3)
    mlp = make_model(
        [helper.make_node("MatMul", ["features", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["logits"]), helper.make_node("Softmax", ["logits"], ["scores"])],
        {"features": np.zeros((1, 64), np.float32)}, ["scores"],
        {"w1": rng.standard_normal((64, 96)).astype(np.float32) * 0.2,
         "w2": rng.standard_normal((96, 5)).astype(np.float32) * 0.2})
    onnx.save(mlp, str(folder / "mlp.onnx"))
    return {"tiny_cnn": EXAMPLE, "any_size": folder / "any_size.onnx", "mlp": folder / "mlp.onnx"}


def ok(*args: str) -> subprocess.CompletedProcess[str]:
    result = aot(*args)
    assert result.returncode == 0, result.stderr
    return result


def manifest(pkg: Path) -> dict:
    return json.loads((pkg / "manifest.json").read_text())


def run_program(pkg: Path, source: str, tmp_path: Path) -> str:
    """Build the package's library with its Makefile, then a C program against it (strict flags,
    AddressSanitizer and UBSan), and run it."""
    sh(["make", "-s", "-C", str(pkg), f"lib{manifest(pkg)['name']}.a"])
    app = tmp_path / "app.c"
    app.write_text(source)
    exe = tmp_path / "app"
    sh([host_cc(), *STRICT_CFLAGS.split(), *host_target_cflags().split(), "-O1", "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all", f"-I{pkg}", str(app), str(pkg / f"lib{manifest(pkg)['name']}.a"), "-lm",
        "-o", str(exe)])
    return sh([str(exe)])


def run_block(model: str, arena: str) -> str:
    """C statements that run `model` (one float input, one float output) on the pattern input
    with `arena` and print `<model> <status> <outputs...>`."""
    upper = model.upper()
    return f"""
    {{
        static float x[{upper}_INPUT0_SIZE], y[{upper}_OUTPUT0_SIZE];
        {model}_inputs in = {{x}};
        {model}_outputs out = {{y}};
        unsigned i;
        aot_status s;
        fill(x, {upper}_INPUT0_SIZE);
        s = {model}_run(&in, &out, {arena});
        printf("{model} %d", (int)s);
        for (i = 0; i < {upper}_OUTPUT0_SIZE; ++i) printf(" %.9g", y[i]);
        printf("\\n");
    }}"""


def program(header: str, blocks: Sequence[str], prelude: str = "") -> str:
    return (f'#include <stdio.h>\n#include "{header}"\n\n{prelude}\n'
            "static void fill(float *x, unsigned n)\n{\n    unsigned i;\n"
            "    for (i = 0; i < n; ++i) x[i] = (float)((i * 37u) % 101u) / 101.0f - 0.5f;\n}\n\n"
            "int main(void)\n{" + "".join(blocks) + "\n    return 0;\n}\n")


def printed(stdout: str) -> dict[str, tuple[int, np.ndarray]]:
    rows = {}
    for line in stdout.splitlines():
        name, status, *values = line.split()
        rows[name] = (int(status), np.array(values, dtype=np.float32))
    return rows


def reference(model: Path, input_name: str, shape: Sequence[int]) -> np.ndarray:
    outputs = run_onnxruntime(onnx.load(str(model)), {input_name: pattern(shape)})
    return next(iter(outputs.values())).reshape(-1)


def test_two_models_share_one_arena_of_the_larger_size(models: dict[str, Path], tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    ok("compile", str(models["tiny_cnn"]), str(models["mlp"]), "--shared-arena", "-o", str(pkg))
    m = manifest(pkg)
    assert m["name"] == "tiny_cnn_mlp" and m["shared_arena"] is True
    arenas = {e["name"]: e["arena_bytes"] for e in m["models"]}
    assert set(arenas) == {"tiny_cnn", "mlp"} and arenas["mlp"] < arenas["tiny_cnn"]
    assert m["arena_bytes"] == max(arenas.values())
    header = (pkg / "tiny_cnn_mlp.h").read_text()
    assert f"#define TINY_CNN_MLP_ARENA_SIZE {m['arena_bytes']}u" in header
    assert "share one arena" in header and "one at a time" in header
    assert "share one arena" in (pkg / "mlp.h").read_text()
    # One arena, both models, each run in turn: the outputs are onnxruntime's.
    blocks = [run_block("tiny_cnn", "arena"), run_block("mlp", "arena")]
    source = program("tiny_cnn_mlp.h", blocks, "TINY_CNN_MLP_DECLARE_ARENA(arena);\n"
                     "typedef char arena_fits_tiny_cnn[TINY_CNN_MLP_ARENA_SIZE >= TINY_CNN_ARENA_SIZE ? 1 : -1];\n"
                     "typedef char arena_fits_mlp[TINY_CNN_MLP_ARENA_SIZE >= MLP_ARENA_SIZE ? 1 : -1];\n")
    rows = printed(run_program(pkg, source, tmp_path))
    for name, input_name, shape in (("tiny_cnn", "image", (1, 3, 32, 32)), ("mlp", "features", (1, 64))):
        status, values = rows[name]
        assert status == 0, name
        np.testing.assert_allclose(values, reference(models[name], input_name, shape), atol=TOLERANCE, err_msg=name)


def test_shape_variants_store_the_weights_once(models: dict[str, Path], tmp_path: Path) -> None:
    pkg, single = tmp_path / "variants", tmp_path / "single"
    ok("compile", str(models["any_size"]), "--input-shape", "image=1x3x32x32", "--input-shape", "image=1x3x64x64",
        "-o", str(pkg))
    ok("compile", str(models["any_size"]), "--input-shape", "image=1x3x32x32", "-o", str(single))
    m = manifest(pkg)
    assert m["name"] == "any_size" and [e["name"] for e in m["models"]] == ["any_size_1x3x32x32",
                                                                             "any_size_1x3x64x64"]
    assert [e["inputs"][0]["shape"] for e in m["models"]] == [[1, 3, 32, 32], [1, 3, 64, 64]]
    one_model_weights = manifest(single)["weights_bytes"]
    assert m["weights_bytes"] == one_model_weights
    blocks = [run_block("any_size_1x3x32x32", "arena32"), run_block("any_size_1x3x64x64", "arena64")]
    source = program("any_size.h", blocks, "ANY_SIZE_1X3X32X32_DECLARE_ARENA(arena32);\n"
                     "ANY_SIZE_1X3X64X64_DECLARE_ARENA(arena64);\n")
    rows = printed(run_program(pkg, source, tmp_path))
    for name, shape in (("any_size_1x3x32x32", (1, 3, 32, 32)), ("any_size_1x3x64x64", (1, 3, 64, 64))):
        status, values = rows[name]
        assert status == 0
        np.testing.assert_allclose(values, reference(models["any_size"], "image", shape), atol=TOLERANCE,
                                   err_msg=name)
    # `size`: the library's constant data is one model's weights, not two.
    sh(["make", "-s", "-C", str(single), "libany_size.a"])
    assert library_data_bytes(pkg / "libany_size.a") < library_data_bytes(single / "libany_size.a") + 4096
    assert library_data_bytes(pkg / "libany_size.a") >= one_model_weights


def library_data_bytes(library: Path) -> int:
    """The bytes of constant and initialised data in a static library, as `size` (Berkeley) counts
    them: .rodata is in its text column, so text + data minus the code (.text sections)."""
    total = 0
    for line in sh(["size", "-A", str(library)]).splitlines():
        match = re.match(r"^(\.rodata\S*|\.data\S*)\s+(\d+)", line)
        if match:
            total += int(match.group(2))
    return total


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_verify_checks_every_model_of_the_package(models: dict[str, Path], backend: str) -> None:
    result = ok("verify", str(models["any_size"]), str(models["mlp"]), "--input-shape", "image=1x3x40x40",
                 "--input-shape", "image=1x3x24x24", "--shared-arena", "--backend", backend, "--json")
    payload = json.loads(result.stdout)
    assert payload["passed"] is True and payload["package"] == "any_size_mlp"
    assert [p["name"] for p in payload["models"]] == ["any_size_1x3x40x40", "any_size_1x3x24x24", "mlp"]
    assert all(p["reference"] == "onnxruntime" and p["passed"] for p in payload["models"])


@pytest.mark.skipif(shutil.which("qemu-aarch64") is None or shutil.which("aarch64-linux-gnu-gcc") is None,
                    reason="needs qemu-aarch64 and aarch64-linux-gnu-gcc")
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_verify_a_package_of_models_for_rpi4_under_qemu(models: dict[str, Path], backend: str) -> None:
    result = ok("verify", str(models["tiny_cnn"]), str(models["any_size"]), str(models["mlp"]),
                 "--input-shape", "any_size:image=1x3x48x48", "--shared-arena", "--target", "rpi4",
                 "--backend", backend, "--json")
    payload = json.loads(result.stdout)
    assert payload["passed"] is True
    assert [p["name"] for p in payload["models"]] == ["tiny_cnn", "any_size", "mlp"]
    assert all("qemu-aarch64" in p["ran_on"] for p in payload["models"])


def test_python_api_runs_each_model(models: dict[str, Path]) -> None:
    import aot as aot_api

    package = aot_api.compile_models([ModelSpec(models["any_size"], {"image": (1, 3, 32, 32)}, "small"),
                                      ModelSpec(models["mlp"])], package_name="two", shared_arena=True)
    assert [m.name for m in package.models] == ["small", "mlp"]
    with pytest.raises(Exception, match="holds 2 models"):
        package.run({"image": pattern((1, 3, 32, 32))})
    small, mlp = package.models
    np.testing.assert_allclose(small.run({"image": pattern((1, 3, 32, 32))})["probabilities"].reshape(-1),
                               reference(models["any_size"], "image", (1, 3, 32, 32)), atol=TOLERANCE)
    np.testing.assert_allclose(mlp.run({"features": pattern((1, 64))})["scores"].reshape(-1),
                               reference(models["mlp"], "features", (1, 64)), atol=TOLERANCE)


@needs_cmake
def test_cmake_builds_the_library_and_a_runner_per_model(models: dict[str, Path], tmp_path: Path) -> None:
    pkg, build, prefix = tmp_path / "pkg", tmp_path / "build", tmp_path / "prefix"
    ok("compile", str(models["tiny_cnn"]), str(models["mlp"]), "--name", "vision", "--name", "scores",
        "--package-name", "assistant", "--parallel", "-o", str(pkg))
    sh(["cmake", "-S", str(pkg), "-B", str(build)])
    sh(["cmake", "--build", str(build)])
    assert (build / "vision_runner").exists() and (build / "scores_runner").exists()
    sh(["cmake", "--install", str(build), "--prefix", str(prefix)])
    installed = sorted(p.name for p in (prefix / "include" / "assistant").iterdir())
    assert installed == ["assistant.h", "runtime", "scores.h", "vision.h"]
    assert "assistant_thread_pool_create" in (pkg / "assistant.h").read_text()


def test_runner_of_each_model_runs(models: dict[str, Path], tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    ok("compile", str(models["tiny_cnn"]), str(models["mlp"]), "-o", str(pkg), "--parallel")
    sh(["make", "-s", "-C", str(pkg)])
    np.save(tmp_path / "features.npy", pattern((1, 64)))
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([str(pkg / "mlp_runner"), "-t", "2", "-o", str(out), str(tmp_path / "features.npy")], check=True,
                   capture_output=True)
    (result,) = out.glob("*.npy")
    np.testing.assert_allclose(np.load(result).reshape(-1), reference(models["mlp"], "features", (1, 64)),
                               atol=TOLERANCE)


@pytest.mark.parametrize(("args", "message"), [
    (["--name", "a"], "--name: given 1 time(s) for 2 models"),
    (["--name", "a", "--name", "a"], "both named 'a'"),
    (["--package-name", "mlp", "--input-shape", "image=1x3x32x32"], "the package's own files are named 'mlp'"),
    ([], "any_size.onnx: symbolic dimensions need fixed sizes"),
    (["--input-shape", "nothing=1x2"], "no model has an input 'nothing'"),
    (["--input-shape", "image=1x3x32x32", "--input-shape", "image=1x3x32x32"], "given this shape twice"),
])
def test_bad_package_options_are_one_line_errors(models: dict[str, Path], tmp_path: Path, args: list[str],
                                                 message: str) -> None:
    out = tmp_path / "pkg"
    assert_user_error(aot("compile", str(models["any_size"]), str(models["mlp"]), "-o", str(out), *args), message)
    assert not out.exists()


def test_shared_arena_needs_several_models(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    assert_user_error(aot("compile", str(models["mlp"]), "--shared-arena", "-o", str(out)),
                      "--shared-arena: the package has one model")
    assert not out.exists()


def test_variant_counts_must_agree(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Add", ["a", "b"], ["c"])],
                       {"a": np.zeros((1, 4), np.float32), "b": np.zeros((1, 4), np.float32)}, ["c"])
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[1].dim_param = "n"
    path = tmp_path / "add.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "pkg"
    assert_user_error(aot("compile", str(path), "--input-shape", "a=1x4", "--input-shape", "a=1x8",
                          "--input-shape", "b=1x4", "--input-shape", "b=1x8", "--input-shape", "b=1x16",
                          "-o", str(out)), "must be given as many each")
    assert not out.exists()


DOCS_PAGE, DOCS_SECTION = "docs/package.md", "### Several models in one package"


def test_readme_multi_model_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """docs/package.md's commands, literally, from a copy of the examples with this checkout's aot on
    PATH; the figures its prose gives are the package's for the x86_64-v3 preset."""
    import os
    import sys

    section = markdown_section(DOCS_PAGE, DOCS_SECTION)
    ((_, commands),) = code_blocks(section, "sh")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aot").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m aot "$@"\n')
    (bin_dir / "aot").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + commands], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("PASSED") == 3 and "FAILED" not in result.stdout
    pkg = tmp_path / "assistant"
    assert (pkg / "libassistant.a").exists() and (pkg / "keyword_cnn_1x40x196_runner").exists()
    # The figures are the x86_64-v3 preset's, which is what the walkthrough compiles for on an AVX2
    # machine (without --target a package takes this machine's preset's tiles): the same command
    # with that target.
    compile_line = next(line for line in commands.splitlines() if line.startswith("aot compile "))
    assert " -o assistant" in compile_line
    result = subprocess.run(["bash", "-c", compile_line.replace(" -o assistant", " --target x86_64-v3 -o v3")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    m = manifest(tmp_path / "v3")
    arenas = [e["arena_bytes"] for e in m["models"]]
    weights = [e["weights_bytes"] for e in m["models"]]
    prose = " ".join(section.split())
    assert f"share {m['weights_bytes']} bytes of weights" in prose
    assert f"one arena of {m['arena_bytes']} bytes" in prose and m["arena_bytes"] == max(arenas)
    assert f"take {sum(weights)} bytes of weights" in prose
    assert f"{' + '.join(map(str, arenas))} = {sum(arenas)} bytes of arenas" in prose


def test_shape_variants_adopt_the_first_shapes_convolution_algorithms(tmp_path: Path) -> None:
    """keyword_cnn at 49 and 98 frames: its strided conv would run im2col at one length and
    tiled rows at the other, packing its weights two ways; the second shape adopts the first's
    algorithm, so the package holds one copy of every weight, read by both shapes, and both still
    match onnxruntime. Only the tables of tap offsets (AVX2's looped taps, TileConfig.steps_in_a_loop)
    are per shape: they follow each shape's rows."""
    model = REPO / "examples" / "keyword_cnn.onnx"
    shapes = ("--input-shape", "features=1x40x49", "--input-shape", "features=1x40x98")
    pkg = tmp_path / "pkg"
    ok("compile", str(model), *shapes, "-o", str(pkg), "--target", "x86_64-v3")
    fields = re.findall(r"^ +(?:float|int32_t) (\w+)\[\d+\];", (pkg / "keyword_cnn_weights.h").read_text(), re.M)
    weights = [name for name in fields if "_taps" not in name]
    assert len(weights) == 6 and len(fields) > len(weights)
    for frames in (49, 98):
        code = (pkg / f"keyword_cnn_1x40x{frames}.c").read_text()
        assert all(f"keyword_cnn_weights.{name})" in code or f"keyword_cnn_weights.{name}," in code
                   for name in weights)
    payload = json.loads(ok("verify", str(model), *shapes, "--json").stdout)
    assert payload["passed"] and len(payload["models"]) == 2


def test_batch_variants_share_the_packed_matrix_weights(tmp_path: Path) -> None:
    """Gemm and MatMul pack their weights in column panels whose width depends on the row count;
    batch 1, 8 and 32 adopt the first's panels, so the package holds one copy, and all match."""
    rng = np.random.default_rng(1)
    model = make_model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                        helper.make_node("MatMul", ["r", "w2"], ["y"])],
                       {"x": np.zeros((1, 40), np.float32)}, ["y"],
                       {"w1": rng.standard_normal((40, 64)).astype(np.float32) * 0.2,
                        "b1": rng.standard_normal(64).astype(np.float32) * 0.1,
                        "w2": rng.standard_normal((64, 12)).astype(np.float32) * 0.2})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    shapes = [arg for b in (1, 8, 32) for arg in ("--input-shape", f"x={b}x40")]
    ok("compile", str(path), *shapes, "-o", str(tmp_path / "pkg"))
    m = manifest(tmp_path / "pkg")
    assert len(m["models"]) == 3 and m["weights_bytes"] == m["models"][0]["weights_bytes"]
    assert json.loads(ok("verify", str(path), *shapes, "--json").stdout)["passed"]
