"""benchmarks/arm.py: guest instruction counts of an aot package for rpi4 under qemu-aarch64.

Runs only where qemu-aarch64, the aarch64 cross compiler and the qemu plugin header (in the
benchmark's cache or the system; the benchmark itself fetches it, this test does not) exist.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.arm import Package, build_package, runner_counts
from benchmarks.arm_apt import ArmBenchError
from benchmarks.arm_qemu import build_plugin

TINY_CNN = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def plugin() -> Path:
    for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (tests/setup_env.sh installs it)")
    try:
        built = build_plugin(fetch=False)
    except ArmBenchError as e:
        pytest.skip(f"the qemu plugin cannot be built here: {e}")
    if built is None:
        pytest.skip("qemu-plugin.h is neither in the system nor in the benchmark's cache "
                    "(python -m benchmarks.arm fetches it)")
    return built


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory, plugin: Path) -> dict[str, Package]:
    folder = tmp_path_factory.mktemp("arm")
    return {backend: build_package(TINY_CNN, "rpi4", backend, folder) for backend in ("c", "llvm")}


def test_counts_are_per_inference_and_scale_with_runs(plugin: Path, packages: dict[str, Package]) -> None:
    package = packages["c"]
    one, eleven, twentyone = (runner_counts(plugin, package, runs) for runs in (1, 11, 21))
    ten = (eleven - one).insns
    assert one.insns > 0 and ten > 0
    # Start-up and file I/O cancel out in the difference: 20 more runs cost twice 10 more.
    assert (twentyone - one).insns == pytest.approx(2 * ten, rel=0.05)


def test_llvm_backend_runs_simd_instructions(plugin: Path, packages: dict[str, Package]) -> None:
    package = packages["llvm"]
    per_inference = (runner_counts(plugin, package, 11) - runner_counts(plugin, package, 1)).scaled(0.1)
    assert per_inference.insns > 0
    assert 0 < per_inference.simd_share < 1


# A loop of N iterations with exactly one vector load and one vector add (SIMD), then one
# of N iterations with one scalar float load and one scalar add (FP): the classification
# the table's SIMD shares rest on, in each instruction set the targets use.
CLASSES_C = r"""
#include <arm_neon.h>
#include <stdio.h>
float buf[64];
__attribute__((noinline)) float32x4_t vector_loop(float32x4_t a, const float *p, int n) {
    for (int i = 0; i < n; i++) {
        float32x4_t b = vld1q_f32(p + (i & 7) * 4);
        a = vaddq_f32(a, b);
        __asm__ volatile("" : "+w"(a));
    }
    return a;
}
__attribute__((noinline)) float scalar_loop(float a, const float *p, int n) {
    for (int i = 0; i < n; i++) {
        float b = p[i & 7];
        a = a + b;
        __asm__ volatile("" : "+w"(a));
    }
    return a;
}
int main(void) {
    float32x4_t a = vector_loop(vdupq_n_f32(1), buf, ITERATIONS);
    printf("%f %f\n", vgetq_lane_f32(a, 0), scalar_loop(1, buf, ITERATIONS));
    return 0;
}
"""


@pytest.mark.parametrize(("gcc", "qemu", "flags"), [
    ("aarch64-linux-gnu-gcc", "qemu-aarch64", []),
    ("arm-linux-gnueabihf-gcc", "qemu-arm", ["-mthumb", "-mfpu=neon", "-mfloat-abi=hard"]),
    ("arm-linux-gnueabihf-gcc", "qemu-arm", ["-marm", "-mfpu=neon", "-mfloat-abi=hard"]),
], ids=["aarch64", "armv7-thumb", "armv7-arm"])
def test_plugin_tells_simd_from_scalar_float(plugin: Path, tmp_path: Path, gcc: str, qemu: str,
                                             flags: list[str]) -> None:
    import subprocess

    from benchmarks.arm_qemu import count

    if shutil.which(gcc) is None or shutil.which(qemu) is None:
        pytest.skip(f"{gcc} or {qemu} not installed")
    (tmp_path / "classes.c").write_text(CLASSES_C)
    iterations = 100_000
    subprocess.run([gcc, "-O2", "-std=gnu99", "-static", f"-DITERATIONS={iterations}", *flags,
                    str(tmp_path / "classes.c"), "-o", str(tmp_path / "classes")], check=True)
    counts = count(qemu, plugin, [str(tmp_path / "classes")])
    # Two per iteration of each loop, plus start-up's few (the C library's memcpy uses SIMD).
    assert 2 * iterations <= counts.simd < 2 * iterations + 2000
    assert 2 * iterations <= counts.fp < 2 * iterations + 2000


def test_profile_puts_an_rpi3_c_package_in_its_neon_kernels(plugin: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/arm_profile.py on the example for rpi3 (armv7, C backend): the instructions land
    in the model's kernels, those run NEON multiply-adds, and the register tiles fit the 16
    registers (few d-register loads and stores: spills made them 36% of a kernel when the tiles did
    not fit, 10% of the model when gcc hoisted a tile's loads; scalar float code uses them too)."""
    from benchmarks.arm_profile import attribute, block_profile, disassemble

    for tool in ("qemu-arm", "arm-linux-gnueabihf-gcc", "arm-linux-gnueabihf-objdump"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    package = build_package(TINY_CNN, "rpi3", "c", tmp_path)
    blocks = block_profile("qemu-arm", plugin, [str(package.runner), "-r", "10", "-w", "0", "-o", str(tmp_path),
                                                *map(str, package.inputs)])
    per_symbol, per_mnemonic = attribute(disassemble("arm-linux-gnueabihf-objdump", package.runner), blocks)
    model = {s: n for s, n in per_symbol.items() if s.startswith("tiny_cnn_")}
    assert sum(model.values()) > 0.8 * sum(per_symbol.values())
    mnemonics = sum((per_mnemonic[s] for s in model), start=type(per_mnemonic[next(iter(model))])())
    total = sum(mnemonics.values())
    simd = sum(n for m, n in mnemonics.items() if m.startswith(("vfma.f32", "vmla.f32", "vld1.", "vst1.", "vmax.f32")))
    spills = sum(n for m, n in mnemonics.items() if m in ("vldr", "vstr", "vldmia", "vstmia"))
    assert simd > 0.25 * total, mnemonics.most_common(10)
    print(f"SIMD {simd / total:.3f}, d-register loads/stores {spills / total:.3f}")
    assert spills < 0.08 * total, mnemonics.most_common(10)


def test_profile_takes_a_compiled_package_edited_by_hand(plugin: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`arm_profile --package DIR`: a package compiled for rpi4 whose C is edited (an experiment's
    kernel) is made and profiled as it stands: the edit's mnemonic shows in the kernel's counts.
    Neither or both of MODEL and --package is a usage error (exit 2)."""
    import subprocess
    import sys

    from benchmarks.arm_profile import main

    if shutil.which("aarch64-linux-gnu-objdump") is None:
        pytest.skip("aarch64-linux-gnu-objdump not installed")
    folder = tmp_path / "pkg"
    subprocess.run([sys.executable, "-m", "aot", "compile", str(TINY_CNN), "--target", "rpi4", "-o", str(folder)],
                   check=True, capture_output=True)
    source = folder / "tiny_cnn.c"
    # every run's first kernel also executes 1000 `yield`s (a no-op hint, which nothing else uses)
    text = source.read_text()
    first = text.index("{", text.index("static void tiny_cnn_stem_conv_relu6(")) + 1
    source.write_text(text[:first] + '\n    for (int i = 0; i < 1000; ++i) __asm__ volatile("yield");' + text[first:])
    assert main(["--package", str(folder), "--target", "rpi4", "--top", "30", "--mnemonics", "30"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pkg: ")
    kernel = next(line for line in out.splitlines()[out.splitlines().index(next(
        line for line in out.splitlines() if "tiny_cnn_stem_conv_relu6" in line)) + 1:])
    assert "yield" in kernel, out
    for argv in ([], [str(TINY_CNN), "--package", str(folder)]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
