"""Targets and cross-compilation: presets, `aot build` for Raspberry Pi boards (the binaries are
ELF for the right machine and float ABI, and run under qemu-user with the same results as
onnxruntime), `aot verify --target`, and bare-metal Cortex-M libraries that need no libc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from aot.errors import AotError
from aot.targets import list_targets, load_target
from aot.toolchain.elf import read_elf
from tests.helpers import rand, run_onnxruntime

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"


def aot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def need(*tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (tests/setup_env.sh installs them)")


def test_every_preset_loads_and_the_list_is_complete() -> None:
    names = {t.name for t in list_targets()}
    assert {"x86_64", "x86_64-v3", "aarch64", "rpi-zero2", "rpi3", "rpi4", "rpi5", "cortex-m4f", "cortex-m7"} <= names
    rpi3 = load_target("rpi3")
    assert rpi3.triple.startswith("armv7") and rpi3.float_abi == "hard" and "-mfloat-abi=hard" in rpi3.cflags
    result = aot("targets", "--json")
    assert result.returncode == 0
    assert {t["name"] for t in json.loads(result.stdout)} == names


def test_user_target_file_is_validated(tmp_path: Path) -> None:
    good = tmp_path / "myboard.toml"
    good.write_text((REPO / "targets" / "rpi4.toml").read_text().replace("Raspberry Pi 4", "My board"))
    assert load_target(str(good)).description.startswith("My board")
    bad = tmp_path / "bad.toml"
    bad.write_text('description = "x"\ntriple = "aarch64-unknown-linux-gnu"\n')
    with pytest.raises(AotError, match="missing key 'cpu'"):
        load_target(str(bad))
    result = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "pkg"), "--target", "rpi9")
    assert result.returncode == 2 and "unknown target" in result.stderr and "rpi4" in result.stderr


@pytest.mark.parametrize("target,machine,bits", [("rpi4", "aarch64", 64), ("rpi3", "arm", 32)])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_build_for_raspberry_pi_and_run_under_qemu(tmp_path: Path, target: str, machine: str, bits: int,
                                                   backend: str) -> None:
    preset = load_target(target)
    need(f"{preset.gcc_prefix}gcc", preset.qemu)
    out = tmp_path / "pkg"
    result = aot("build", str(EXAMPLE), "--target", target, "--backend", backend, "-o", str(out), "--json")
    assert result.returncode == 0, result.stderr
    info = read_elf(out / "tiny_cnn_runner")
    assert (info.machine, info.bits, info.kind, info.static) == (machine, bits, "executable", True)
    if machine == "arm":
        assert info.arm_eabi_version == 5 and info.arm_hard_float is True
    x = rand(1, 3, 32, 32, seed=21)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run([preset.qemu, str(out / "tiny_cnn_runner"), "-o", str(tmp_path), str(tmp_path / "x.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ref = run_onnxruntime(onnx.load(EXAMPLE), {"image": x})["probabilities"]
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), ref, atol=1e-5)


@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_verify_on_target_under_qemu(target: str, backend: str) -> None:
    preset = load_target(target)
    need(f"{preset.gcc_prefix}gcc", preset.qemu)
    result = aot("verify", str(EXAMPLE), "--target", target, "--backend", backend, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["ran_on"] == f"{target} under {preset.qemu}"


def test_target_model_runs_scalar_inputs_and_reports_failures() -> None:
    """Found by the conformance sweep under qemu: a 0-d input (Clip's min) reached the runner as a
    1-d .npy, which it rejects by rank. And a runner failure names the program, target and exit."""
    from onnx import helper

    from aot.compiler import compile as compile_model
    from aot.toolchain.target_build import TargetModel
    from tests.helpers import make_model

    preset = load_target("rpi4")
    need(f"{preset.gcc_prefix}gcc", preset.qemu)
    x, low = rand(2, 3, seed=3), np.array(0.25, np.float32)
    model = make_model([helper.make_node("Clip", ["x", "low"], ["y"])], {"x": x, "low": low}, ["y"])
    built = TargetModel.build(compile_model(model, target="rpi4"), preset)
    np.testing.assert_array_equal(built.run({"x": x, "low": low})["y"], np.maximum(x, low))
    built.runner.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    with pytest.raises(AotError, match=r"_runner \(rpi4, under qemu-aarch64\) failed"):
        built.run({"x": x, "low": low})


def test_package_makefile_cross_compiles_by_default(tmp_path: Path) -> None:
    need("aarch64-linux-gnu-gcc")
    result = aot("compile", str(EXAMPLE), "--target", "rpi4", "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    subprocess.run(["make", "-s", "-C", str(tmp_path / "pkg")], check=True, capture_output=True)
    assert read_elf(tmp_path / "pkg" / "tiny_cnn_runner").machine == "aarch64"
    assert (tmp_path / "pkg" / "toolchain.cmake").read_text().count("aarch64-linux-gnu-gcc") == 1


@pytest.mark.parametrize("target", ["cortex-m4f", "cortex-m7"])
def test_bare_metal_library_needs_only_math_and_links_into_firmware(tmp_path: Path, target: str) -> None:
    need("arm-none-eabi-gcc")
    out = tmp_path / "pkg"
    result = aot("build", str(EXAMPLE), "--target", target, "-o", str(out), "--toolchain", "gcc")
    assert result.returncode == 0, result.stderr
    assert not (out / "tiny_cnn_runner").exists()
    def symbols(*flags: str) -> set[str]:
        text = subprocess.run(["arm-none-eabi-nm", *flags, str(out / "libtiny_cnn.a")], capture_output=True,
                              text=True, check=True).stdout
        return {line.split()[-1] for line in text.splitlines() if line.strip() and not line.endswith(":")}

    external = symbols("-u") - symbols("--defined-only")  # what the library needs from outside
    # GCC turns copy and fill loops into calls to the mem* functions (it may even with
    # -ffreestanding); every embedded C library has them. Everything else must be libm.
    assert external <= {"memcpy", "memmove", "memset", "expf", "logf", "sqrtf", "tanhf", "erff"}, external
    firmware = tmp_path / "firmware.c"
    firmware.write_text("#include \"tiny_cnn.h\"\nTINY_CNN_DECLARE_ARENA(arena);\n"
                        "static float image[TINY_CNN_INPUT0_SIZE], probs[TINY_CNN_OUTPUT0_SIZE];\n"
                        "int main(void) { tiny_cnn_inputs in = {image}; tiny_cnn_outputs out = {probs};\n"
                        "  return (int)tiny_cnn_run(&in, &out, arena); }\n")
    preset = load_target(target)
    subprocess.run(["arm-none-eabi-gcc", *preset.cflags, "-O2", f"-I{out}", str(firmware), str(out / "libtiny_cnn.a"),
                    "-lm", "--specs=nosys.specs", "-o", str(tmp_path / "firmware.elf")], check=True,
                   capture_output=True)
    info = read_elf(tmp_path / "firmware.elf")
    assert info.machine == "arm" and info.arm_hard_float is True


def _mlp() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from onnx import helper

    from tests.helpers import make_model

    x = rand(1, 64)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=1)]
    inits = {"w1": rand(32, 64, seed=1) * 0.2, "b1": rand(32, seed=2), "w2": rand(32, 10, seed=3) * 0.2,
             "b2": rand(10, seed=4)}
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def _lstm() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A voice-activity-style model: LSTM over 20 frames of 16 features, a Gemm head, Sigmoid."""
    from onnx import helper

    from tests.helpers import make_model

    x = rand(20, 1, 16)
    hidden = 24
    nodes = [helper.make_node("LSTM", ["x", "w", "r", "b"], ["", "h"], hidden_size=hidden),
             helper.make_node("Reshape", ["h", "shape"], ["hf"]),
             helper.make_node("Gemm", ["hf", "wo", "bo"], ["z"]), helper.make_node("Sigmoid", ["z"], ["y"])]
    inits = {"w": rand(1, 4 * hidden, 16, seed=1) * 0.3, "r": rand(1, 4 * hidden, hidden, seed=2) * 0.3,
             "b": rand(1, 8 * hidden, seed=3) * 0.1, "shape": np.array([1, hidden], np.int64),
             "wo": rand(hidden, 2, seed=4), "bo": rand(2, seed=5)}
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


@pytest.mark.parametrize("model_name", ["mlp", "lstm"])
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_verify_mlp_and_lstm_on_target(tmp_path: Path, model_name: str, target: str, backend: str) -> None:
    preset = load_target(target)
    need(f"{preset.gcc_prefix}gcc", preset.qemu)
    model, feeds = {"mlp": _mlp, "lstm": _lstm}[model_name]()
    path = tmp_path / f"{model_name}.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "in.npz", **feeds)
    result = aot("verify", str(path), "--target", target, "--backend", backend, "--inputs", str(tmp_path / "in.npz"),
                 "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["ran_on"].startswith(f"{target} under qemu")
