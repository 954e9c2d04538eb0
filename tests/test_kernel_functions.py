"""On Arm and on AVX2 every kernel stays a function of its own in the built library (on Arm with
both backends): a profiler on the board shows each kernel by name, and the compilers' loops ran
fewer instructions than inlined into the run function (AOT_KERNEL in runtime_c/aot_compiler_hints.h,
noinline in aot/backends/llvm/module.py)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.targets import load_target
from tests.helpers import make_model, rand
from tests.test_cli import EXAMPLE


def _local_functions(library: str) -> set[str]:
    listing = subprocess.run(["nm", library], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^\S* *t (\S+)$", listing, re.MULTILINE))


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
def test_arm_kernels_are_functions_of_their_own(target: str, backend: str) -> None:
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable

    problem = cross_unavailable(target) or (None if shutil.which("nm") else "no nm here")
    if problem:
        pytest.skip(problem)
    package = compile_model(str(EXAMPLE), backend=backend, target=target)
    kernels = _kernel_texts(package.files["tiny_cnn.c"].decode())
    assert len(kernels) >= 5
    built = TargetModel.build(package, load_target(target))
    found = {name.split(".")[0] for name in _local_functions(str(built.directory / "libtiny_cnn.a"))}
    # gcc folds a kernel identical to another one (same shapes, other weights) into it
    folded = {name for name, text in kernels.items() if name not in found
              and any(text == kernels[other] for other in found & kernels.keys())}
    assert set(kernels) - folded <= found, f"inlined: {sorted(set(kernels) - folded - found)}"


def _kernel_texts(source: str) -> dict[str, str]:
    """Each kernel's parameters and body, by name."""
    return {name: text for name, text in
            re.findall(r"^AOT_KERNEL .*?static void (tiny_cnn_\w+)(\(.*?^\})", source, re.MULTILINE | re.DOTALL)}


def _disassembly_by_function(library: str) -> dict[str, str]:
    listing = subprocess.run(["objdump", "-d", library], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0]: body for name, body in
            re.findall(r"^[0-9a-f]+ <([^>]+)>:\n(.*?)(?=\n\n|\Z)", listing, re.MULTILINE | re.DOTALL)}


@pytest.mark.skipif(platform.machine() != "x86_64" or not shutil.which("gcc") or not shutil.which("objdump"),
                    reason="needs gcc and objdump on x86-64")
def test_avx2_kernels_are_functions_of_their_own_with_vector_copies(tmp_path: Path) -> None:
    """x86-64-v3's 16 vector registers: a kernel inlined into the run body spilled its register
    tile, and gcc's generic tuning turned the padded copies of a conv's input into rep movsq."""
    from aot.host.build import run_make

    package = compile_model(str(EXAMPLE), target="x86_64-v3")
    package.write(tmp_path / "pkg")
    run_make(tmp_path / "pkg", ["libtiny_cnn.a"], opt="-O3", target_cflags="-march=x86-64-v3",
             variables={"CC": "gcc"})
    library = str(tmp_path / "pkg" / "libtiny_cnn.a")
    kernels = _kernel_texts(package.files["tiny_cnn.c"].decode())
    functions = _disassembly_by_function(library)
    found = set(functions) & set(kernels)
    folded = {name for name, text in kernels.items() if name not in found
              and any(text == kernels[other] for other in found)}
    assert set(kernels) - folded <= found, f"inlined: {sorted(set(kernels) - folded - found)}"
    string_ops = {name for name in found if re.search(r"\brep (movs|stos)", functions[name])}
    assert not string_ops, f"rep movs / rep stos in {sorted(string_ops)}"


def _depthwise_model() -> onnx.ModelProto:
    """A 3x3 depthwise conv (24 channels at 80x80, 'same' padding) + Relu: TiledConv's flat mode, a
    register tile of 8 vectors whose 9 taps are written out."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=24, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, {"x": rand(1, 24, 80, 80)}, ["y"],
                      {"w": rng.standard_normal((24, 1, 3, 3)).astype(np.float32),
                       "b": rng.standard_normal(24).astype(np.float32)})


def _hottest_loop(disassembly: str, multiply_add: str) -> list[str]:
    """The instructions of the backward-branching loop with the largest share of vector
    multiply-adds: a register tile's reduction."""
    lines = [(int(address, 16), text.strip()) for address, text in
             re.findall(r"^\s*([0-9a-f]+):\s*(?:[0-9a-f]{2,8} )*\s*(.*)$", disassembly, re.MULTILINE)]
    best: tuple[float, list[str]] = (0.0, [])
    for address, text in lines:
        branch = re.match(r"(?:j\w+|b\.\w+|b|cbn?z|tbn?z)\s+(?:\w+, )*(?:#\w+, )?([0-9a-f]+) <", text)
        if branch and int(branch.group(1), 16) < address:
            body = [t for a, t in lines if int(branch.group(1), 16) <= a <= address]
            share = sum(t.startswith(multiply_add) for t in body) / len(body)
            if share > best[0]:
                best = (share, body)
    return best[1]


@pytest.mark.parametrize("target, compiler, objdump, multiply_add, stack", [
    ("x86_64-v3", "gcc", "objdump", "vfmadd", "(%rsp)"),
    ("rpi4", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", "fmla", "[sp"),
])
def test_gcc_keeps_a_register_tile_out_of_the_stack(target: str, compiler: str, objdump: str, multiply_add: str,
                                                    stack: str, tmp_path: Path) -> None:
    """gcc -O3's predictive commoning carried loads of a depthwise tile from one iteration to the
    next in registers the tile had filled: 200 stack accesses per iteration with AVX2, 267 on
    aarch64 (AOT_KERNEL_OPTIONS in runtime_c/aot_compiler_hints.h turns it off for the kernels)."""
    if not (shutil.which(compiler) and shutil.which(objdump)):
        pytest.skip(f"needs {compiler} and {objdump}")
    from aot.host.build import run_make

    package = compile_model(_depthwise_model(), name="dw", target=target)
    package.write(tmp_path / "pkg")
    # The package's own Makefile (its -O3 and -ffp-contract=fast), with the target's flags.
    run_make(tmp_path / "pkg", ["dw.o"], opt="-O3", target_cflags=" ".join(load_target(target).cflags),
             variables={"CC": compiler})
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(tmp_path / "pkg" / "dw.o")],
                             capture_output=True, text=True, check=True).stdout
    loop = _hottest_loop(listing, multiply_add)
    fmas = sum(line.startswith(multiply_add) for line in loop)
    assert fmas >= 72, f"no register tile of 9 taps x 8 vectors found:\n{chr(10).join(loop)}"
    spilled = [line for line in loop if stack in line]
    assert len(spilled) <= fmas // 8, f"{len(spilled)} stack accesses in a loop of {fmas} multiply-adds"
