"""`aot bench --onnxruntime-isa target`: onnxruntime's CPU checks see only what the target's code
may use (aot.host.cpu_mask), so that x86_64-v3 code is compared with onnxruntime's AVX2 kernels
on an AVX-512 machine, as on an AVX2 one. What the hidden CPUID answers are is checked through
numpy, which reads CPUID when it is loaded, as onnxruntime's MLAS does."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from aot.host.cpu_mask import AVX, AVX512, VNNI, HiddenBits, hidden_for
from aot.targets import load_target
from tests.test_cli import aot

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


needs_hiding = pytest.mark.skipif(
    platform.machine() != "x86_64" or not {"avx512f", "cpuid_fault"} <= _cpu_flags(),
    reason="needs an x86-64 Linux CPU with AVX-512 and CPUID faulting")


def test_each_preset_hides_what_its_code_cannot_use() -> None:
    assert hidden_for(load_target("x86_64-v3")) == AVX512 | VNNI
    assert hidden_for(load_target("x86_64-v4")) == VNNI
    assert hidden_for(load_target("x86_64-v4-vnni")) == HiddenBits()
    assert hidden_for(load_target("x86_64")) == AVX512 | VNNI | AVX
    assert not hidden_for(load_target("rpi4")).any()
    assert AVX512.leaf7_ebx & (1 << 16)  # AVX512F
    assert not AVX512.leaf7_ebx & (1 << 5)  # AVX2 stays


_NUMPY_FEATURES = """
import sys
from aot.host.cpu_mask import HiddenBits, hide_cpu_features
hide_cpu_features(HiddenBits(*map(int, sys.argv[1:])))
import numpy
from numpy._core._multiarray_umath import __cpu_features__ as features
print(" ".join(name for name, on in sorted(features.items()) if on))
"""


def _numpy_sees(hidden: HiddenBits) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _NUMPY_FEATURES, *map(str, hidden.masks())], capture_output=True,
                          text=True, check=True)
    return set(done.stdout.split())


@needs_hiding
def test_hidden_features_are_gone_for_code_loaded_afterwards() -> None:
    assert {"AVX512F", "AVX2", "FMA3"} <= _numpy_sees(HiddenBits())
    seen = _numpy_sees(AVX512 | VNNI)
    assert "AVX2" in seen and "FMA3" in seen
    assert not any(name.startswith("AVX512") for name in seen), seen
    assert not {"AVX", "AVX2", "FMA3", "F16C"} & _numpy_sees(AVX512 | VNNI | AVX)


@needs_hiding
def test_other_segmentation_faults_still_reach_the_handler_before() -> None:
    script = ("import ctypes, faulthandler\n"
              "faulthandler.enable()\n"
              "from aot.host.cpu_mask import AVX512, hide_cpu_features\n"
              "hide_cpu_features(AVX512)\n"
              "ctypes.string_at(0)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Segmentation fault" in done.stderr


@needs_hiding
def test_bench_compares_x86_64_v3_code_with_onnxruntimes_avx2_kernels() -> None:
    """onnxruntime is loaded in pytest's process already: the comparison runs in a fresh one."""
    from aot.commands.bench import bench

    result = bench(str(EXAMPLE), rounds=1, warmup=1, target="x86_64-v3", onnxruntime_isa="target")
    assert result.onnxruntime_isa == "x86_64-v3" and result.target == "x86_64-v3"
    assert result.ours_ms > 0 and result.onnxruntime_ms > 0
    native = aot("bench", str(EXAMPLE), "--rounds", "1", "--target", "x86_64-v3", "--json")
    assert native.returncode == 0, native.stderr
    assert json.loads(native.stdout)["onnxruntime_isa"] == "native"
    text = aot("bench", str(EXAMPLE), "--rounds", "1", "--target", "x86_64-v3", "--onnxruntime-isa", "target")
    assert text.returncode == 0, text.stderr
    assert "(kernels for x86_64-v3)" in text.stdout


def test_bench_names_a_bad_onnxruntime_isa() -> None:
    bad = aot("bench", str(EXAMPLE), "--onnxruntime-isa", "avx2")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--onnxruntime-isa avx2" in bad.stderr
