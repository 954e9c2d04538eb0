"""On Arm and on AVX2 every kernel stays a function of its own in the built library (on Arm with
both backends): a profiler on the board shows each kernel by name, and the compilers' loops ran
fewer instructions than inlined into the run function (AOT_KERNEL in templates/c/model.c.j2,
noinline in aot/backends/llvm/module.py)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aot.compiler import compile as compile_model
from aot.targets import load_target
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
            re.findall(r"^AOT_KERNEL .*?static void (tiny_cnn_k\d+)(\(.*?^\})", source, re.MULTILINE | re.DOTALL)}


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
