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
