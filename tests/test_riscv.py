"""The RISC-V Linux presets (riscv64-rvv256, riscv64-rvv128, riscv64): a small convolution model
and a Gemm model built by both backends for each, run under qemu-user with the preset's vector
length, against onnxruntime; and what each toolchain and the LLVM backend make of the presets
(RVV code, the ELF machine and float ABI). Skipped with the reason when the cross compiler or
qemu-riscv64 is missing (tests/setup_env.sh installs them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.targets import load_target
from aot.toolchain.discovery import Toolchain, qemu_for
from aot.toolchain.elf import read_elf
from aot.toolchain.target_build import TargetModel
from tests import conformance as cf
from tests.helpers import make_model, rand, run_onnxruntime

REPO = Path(__file__).resolve().parent.parent
PRESETS = ["riscv64-rvv256", "riscv64-rvv128", "riscv64"]
BACKENDS = ["c", "llvm"]


def conv_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv + Relu + MaxPool over 8 channels: the register tiles and the pooling loops."""
    x = rand(1, 3, 12, 12, seed=1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    weights = {"w": rand(8, 3, 3, 3, seed=2), "b": rand(8, seed=3)}
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def gemm_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Gemm with a transposed constant B and a bias, then Softmax: the matrix-product tiles."""
    x = rand(3, 40, seed=4)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1)]
    weights = {"w": rand(24, 40, seed=5), "b": rand(24, seed=6)}
    return make_model(nodes, {"x": x}, ["y"], weights), {"x": x}


def built(model: onnx.ModelProto, target: str, backend: str) -> TargetModel:
    problem = cf.cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    preset, toolchain, _ = cf.cross_setup(target)
    return TargetModel.build(compile_model(model, target=target, backend=backend), preset, toolchain)


@pytest.mark.qemu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", PRESETS)
@pytest.mark.parametrize("make", [conv_model, gemm_model], ids=["conv", "gemm"])
def test_model_under_qemu_matches_onnxruntime(make, target: str, backend: str) -> None:  # noqa: ANN001
    model, inputs = make()
    ours = built(model, target, backend).run(inputs)["y"]
    np.testing.assert_allclose(ours, run_onnxruntime(model, inputs)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.qemu
@pytest.mark.parametrize("target,vector", [("riscv64-rvv256", True), ("riscv64", False)])
def test_runner_is_riscv_lp64d_and_vector_only_where_the_preset_has_v(target: str, vector: bool) -> None:
    """The C backend's runner is a static RISC-V executable with the double-float ABI whose code
    multiplies-adds in RVV registers where the preset has V (the toolchain `auto` picks turns the
    GNU vectors into RVV) and nowhere else (qemu's default CPU would trap on them)."""
    objdump = shutil.which("riscv64-linux-gnu-objdump")
    if objdump is None:
        pytest.skip("not installed: riscv64-linux-gnu-objdump (tests/setup_env.sh installs it)")
    model, inputs = conv_model()
    target_model = built(model, target, "c")
    if vector and cf.cross_setup(target)[1].kind == "gcc":
        pytest.skip("the riscv64 GCC found does not vectorise for RVV: pip install ziglang")
    info = read_elf(target_model.runner)
    assert (info.machine, info.bits, info.static) == ("riscv", 64, True)
    e_flags = int.from_bytes(target_model.runner.read_bytes()[48:52], "little")
    assert e_flags & 0x4, f"e_flags {e_flags:#x}: not the lp64d (double-float) ABI"
    assert target_model.run(inputs)["y"].shape == (1, 8, 6, 6)
    code = subprocess.run([objdump, "-d", str(target_model.runner)], capture_output=True, text=True,
                          check=True).stdout
    assert ("vfmacc." in code) == vector


def test_llvm_objects_are_riscv_lp64d_with_rvc() -> None:
    """The LLVM backend's object for each preset: EM_RISCV, 64-bit, the double-float ABI and RVC
    in e_flags (what the riscv64 linkers check against the C parts' objects)."""
    model, _ = gemm_model()
    for target in PRESETS:
        package = compile_model(model, target=target, backend="llvm")
        obj = next(data for name, data in package.files.items() if name.endswith(".riscv64-unknown-linux-gnu.o"))
        assert int.from_bytes(obj[18:20], "little") == 243 and obj[4] == 2, target
        assert int.from_bytes(obj[48:52], "little") == 0x5, target


@pytest.mark.parametrize("value", ["-plugin", "rv64 v=true", "/tmp/cpu", "rv64;true", "rv64,v=$(x)", ""])
def test_qemu_cpu_is_one_plain_argument(tmp_path: Path, value: str) -> None:
    """qemu_cpu reaches qemu's command line: one argument that cannot be read as an option or a
    path ("" is qemu's default CPU)."""
    board = tmp_path / "board.toml"
    text = (REPO / "targets" / "riscv64-rvv256.toml").read_text()
    board.write_text(text.replace('qemu_cpu = "rv64,v=true,vlen=256"', f"qemu_cpu = {value!r}"))
    if value == "":
        assert load_target(str(board)).qemu_cpu == ""
        return
    with pytest.raises(AotError, match="'qemu_cpu'"):
        load_target(str(board))


def test_qemu_gets_the_presets_cpu_and_zig_its_extensions() -> None:
    """qemu_for passes the preset's -cpu; zig, which takes no RISC-V ISA string, gets the CPU and
    the extensions as -mcpu (the GCC spelling stays for gcc)."""
    rvv = load_target("riscv64-rvv256")
    if shutil.which(rvv.qemu):
        assert qemu_for(rvv) == ["qemu-riscv64", "-cpu", "rv64,v=true,vlen=256"]
    zig = Toolchain("zig", ("zig", "cc"), ("zig", "ar"), True, "musl")
    assert zig.target_cflags(rvv) == ["-mcpu=generic_rv64+m+a+f+d+c+v+zvl256b"]
    gcc = Toolchain("gcc", ("riscv64-linux-gnu-gcc",), ("ar",), True, "glibc")
    assert gcc.target_cflags(rvv) == ["-march=rv64gcv_zvl256b", "-mabi=lp64d"]
