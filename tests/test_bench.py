"""`aot bench`: ours against onnxruntime in one process, the figures a user compares (no timing
is asserted: the machines are shared; only that the report is complete and self-consistent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import aot

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"


def test_bench_json_reports_both_sides_the_ratio_and_the_share_of_peak() -> None:
    result = aot("bench", str(EXAMPLE), "--rounds", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("ours_ms", "onnxruntime_ms", "ratio", "ours_gflops", "peak_gflops", "ours_percent_of_peak",
                "arena_bytes", "onnxruntime_peak_rss_delta_bytes", "threads"):
        assert key in report, key
    assert report["ours_ms"] > 0 and report["onnxruntime_ms"] > 0
    assert report["ratio"] == pytest.approx(report["ours_ms"] / report["onnxruntime_ms"])
    assert report["peak_gflops"] > 1
    assert report["ours_percent_of_peak"] == pytest.approx(100 * report["ours_gflops"] / report["peak_gflops"])


def test_bench_text_names_the_peak_and_rejects_bad_options() -> None:
    result = aot("bench", str(EXAMPLE), "--rounds", "1")
    assert result.returncode == 0, result.stderr
    assert "ratio aot/onnxruntime" in result.stdout and "measured fp32 peak" in result.stdout
    bad = aot("bench", str(EXAMPLE), "--rounds", "0")
    assert bad.returncode == 2 and "--rounds" in bad.stderr


def test_bench_measures_onnxruntime_memory_per_model_in_one_process(tmp_path: Path) -> None:
    """The benchmark suite runs every model in one process: a later model's onnxruntime memory
    is measured from its own start, not hidden under the peak of what ran before it (compiling
    and benchmarking the first model). Run in a fresh process, as the suite is."""
    import subprocess
    import sys

    import numpy as np
    from onnx import helper

    from tests.helpers import make_model

    weights = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB
    x = np.zeros((1, 1024), np.float32)
    big = make_model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": weights})
    path = tmp_path / "big_fc.onnx"
    path.write_bytes(big.SerializeToString())
    script = ("from aot.commands.bench import bench\n"
              f"bench({str(EXAMPLE)!r}, rounds=1, warmup=1)\n"
              f"print(bench({str(path)!r}, rounds=1, warmup=1).onnxruntime_peak_rss_delta_bytes)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(result.stdout.split()[-1]) >= weights.nbytes


def test_bench_reports_a_model_onnxruntime_cannot_load(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(EXAMPLE))
    model.ir_version = onnx.IR_VERSION  # the onnx package's newest; onnxruntime 1.2x reads older ones only
    path = tmp_path / "future.onnx"
    onnx.save(model, str(path))
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        pytest.skip("this onnxruntime reads the newest IR version")
    except Exception:  # noqa: S110 - the failure this test needs
        pass
    result = aot("bench", str(path), "--rounds", "1")
    assert result.returncode != 0
    assert "future.onnx" in result.stderr and "onnxruntime" in result.stderr and "Traceback" not in result.stderr


def _runs_avx2() -> bool:
    from tests.helpers import host_runs

    return host_runs("x86_64-v3")


@pytest.mark.skipif(not _runs_avx2(), reason="this machine runs no x86_64-v3 code")
def test_bench_target_times_that_presets_code_here() -> None:
    result = aot("bench", str(EXAMPLE), "--rounds", "1", "--target", "x86_64-v3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["target"] == "x86_64-v3"
    assert report["ours_ms"] > 0 and report["onnxruntime_ms"] > 0
    text = aot("bench", str(EXAMPLE), "--rounds", "1", "--target", "x86_64-v3")
    assert text.returncode == 0 and "aot built for x86_64-v3" in text.stdout


@pytest.mark.skipif(not _runs_avx2(), reason="this machine runs no x86_64-v3 code")
def test_a_presets_own_flags_build_its_vector_code_only(tmp_path: Path) -> None:
    """What bench --target x86_64-v3 times on an AVX-512 machine is AVX2 code: the library is
    built with the preset's -march, so no instruction touches a zmm register (-march=native, the
    host build's default, would let the compiler use them in every scalar loop)."""
    import shutil
    import subprocess

    import aot
    from aot.host.run import HostModel
    from aot.targets import load_target

    if shutil.which("objdump") is None:
        pytest.skip("objdump not installed")
    package = aot.compile(str(EXAMPLE), target="x86_64-v3")
    flags = " ".join(load_target("x86_64-v3").cflags)
    with HostModel.build(package, tmp_path / "pkg", opt="-O3", target_cflags=flags) as built:
        library = next(built.directory.glob("*.so"))
        code = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "ymm" in code and "zmm" not in code


def test_bench_refuses_a_target_this_machine_cannot_run() -> None:
    from tests.test_cli import assert_user_error

    assert_user_error(aot("bench", str(EXAMPLE), "--rounds", "1", "--target", "rpi4"),
                      "--target rpi4", "natively")


def test_layers_counts_convtranspose_macs_alike_on_both_sides(tmp_path: Path) -> None:
    """benchmarks.layers matches our kernels to onnxruntime's nodes by multiply-adds: a 2x2
    stride-2 ConvTranspose does 24 x 4 of them per input element (59 M at 24 channels, 160x160),
    counted the same from onnxruntime's profiled shapes as from our graph."""
    import numpy as np
    from onnx import helper

    from aot.analysis import node_macs
    from aot.compiler import load
    from benchmarks.layers import onnxruntime_nodes
    from tests.helpers import make_model

    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 24, 2, 2)).astype(np.float32)
    model = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], name="up")],
                       {"x": np.zeros((1, 24, 160, 160), np.float32)}, ["y"], {"w": w})
    path = tmp_path / "up.onnx"
    path.write_bytes(model.SerializeToString())
    expected = 160 * 160 * 24 * 24 * 4
    graph, _ = load(str(path))
    assert [node_macs(n) for n in graph.nodes] == [expected]
    theirs = [macs for _, op, _, macs in onnxruntime_nodes(str(path), 2) if op == "ConvTranspose"]
    assert theirs == [expected]
