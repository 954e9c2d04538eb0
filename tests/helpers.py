"""Shared test helpers: build small ONNX models and check aot against onnxruntime."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.commands.verify import compare
from aot.compiler import compile as compile_model
from aot.host.build import run_make
from aot.host.run import HostModel, host_variant, prepare_inputs
from aot.package.package import Package
from aot.targets import host_target_name

# This architecture's baseline preset (x86_64: SSE2, no FMA). Bit-for-bit comparisons of the C
# and LLVM backends build both for it: the LLVM object for this machine's own preset fuses the
# register tiles' multiply-adds (llvm.fmuladd), which the C build at -O1 does not.
BIT_EXACT_TARGET = host_target_name()

NP_TO_ONNX = {
    np.dtype("float32"): TensorProto.FLOAT, np.dtype("float64"): TensorProto.DOUBLE,
    np.dtype("int64"): TensorProto.INT64, np.dtype("int32"): TensorProto.INT32,
    np.dtype("bool"): TensorProto.BOOL, np.dtype("uint8"): TensorProto.UINT8, np.dtype("int8"): TensorProto.INT8,
}


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, np.ndarray],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
    output_shapes: Mapping[str, Sequence[int | str] | None] | None = None,
) -> onnx.ModelProto:
    """A model over `nodes`; input types come from the example arrays, output types are inferred."""
    graph_inputs = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], list(a.shape)) for n, a in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()]
    graph_outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    graph = helper.make_graph(list(nodes), "test_graph", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="aot-tests")
    model.ir_version = 8 if opset < 21 else 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    # Give the graph outputs their inferred types so onnxruntime accepts the model.
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if out.name in known and known[out.name].type.tensor_type.elem_type:
            out.CopyFrom(known[out.name])
    return model


def run_onnxruntime(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs, exact for int8 models also where its int8 kernels saturate
    (aot/commands/exact_int8_reference.py)."""
    from aot.commands.exact_int8_reference import reference_model

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    exact = reference_model(model)
    feeds = exact.feeds(inputs) if exact else dict(inputs)
    session = ort.InferenceSession((exact.model if exact else model).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, feeds)
    return {n: exact.result(n, r) if exact else r for n, r in zip(names, results)}


def host_runs(target: str) -> bool:
    """Whether this machine runs `target`'s code natively (x86_64-v3 on an AVX2 or AVX-512 host)."""
    from aot.backends.llvm.target import runs_on_host
    from aot.targets import load_target

    preset = load_target(target)
    return runs_on_host(preset.triple, preset.cpu, preset.features)


def selected_backend(backend: str | None = None) -> str:
    """The backend a check runs: given, else $AOT_TEST_BACKEND (so that e.g.
    `AOT_TEST_BACKEND=llvm pytest tests/test_ops.py` runs every op check through LLVM), else c."""
    return backend or os.environ.get("AOT_TEST_BACKEND") or "c"


def run_aot(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray], backend: str | None = None,
            **compile_args: Any) -> dict[str, np.ndarray]:
    """Compile with aot, build with -Werror (and -pedantic), run on the host through ctypes.

    With backend="llvm" the library is built from the host's LLVM object, never the C fallback;
    where that object is for a target this machine cannot run (x86_64-v4's on an AVX2 host), the
    check is skipped: the C variant would run instead, which the C pass checks."""
    backend = selected_backend(backend)
    target = compile_args.get("target")
    if backend == "llvm" and isinstance(target, str) and not host_runs(target):
        pytest.skip(f"the LLVM objects for {target} do not run on this machine")
    package = compile_model(model, backend=backend, **compile_args)
    if sanitize_mode():
        assert host_variant(package)[0] == backend, f"no {backend} variant runs on this machine"
        return run_sanitized(package, inputs)
    host = HostModel.build(package, opt="-O1", extra_cflags="-pedantic")
    assert host.backend == backend, f"built the {host.backend} variant for backend={backend}"
    return host.run(dict(inputs))


SANITIZE_FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# The op checks' sanitized runners are built unoptimised: every access and check stays in the code,
# and the builds are fast. At -O1 clang 14 took 6 minutes on one register-tiled conv (a 3x3 kernel
# over 5 channels with an output-channel tail): UBSan's thousands of signed-overflow and
# pointer-overflow checks on the unrolled taps' indices send LLVM's induction-variable pass into
# ScalarEvolution::isImpliedCond over every dominating check. The sampled sanitizer pass's register
# tile and fuzz tests took 119 s at -O1 and 54 s at -O0 on 2 cores.
SANITIZE_OPT = "-O0"
SANITIZER_REPORTS = ("runtime error:", "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer")


def sanitize_mode() -> bool:
    """$AOT_TEST_SANITIZE=1: run_aot (so every op check) builds the package's runner program with
    AddressSanitizer and UBSan and runs the model through it (.npy in and out) instead of ctypes."""
    return os.environ.get("AOT_TEST_SANITIZE", "") == "1"


def run_sanitized(package: Package, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Build `package`'s runner with -fsanitize=address,undefined (strict flags, -pedantic), run it
    on `inputs`, fail on any sanitizer report and return the outputs it wrote.

    The runner's arena is a static array (ASan puts redzones around it), inputs and outputs are
    heap buffers of exactly their size, so any access outside them is caught."""
    arrays = prepare_inputs(package.inputs, dict(inputs))
    with tempfile.TemporaryDirectory(prefix=f"aot-asan-{package.name}-") as tmp:
        directory = package.write(Path(tmp) / "pkg")
        backend, target = host_variant(package)
        variables = {"LDFLAGS": "-fsanitize=address,undefined"}
        if package.manifest.get("targets"):
            variables.update(BACKEND=backend, TARGET=target or "")
        run_make(directory, [f"{package.name}_runner"], opt=SANITIZE_OPT,
                 extra_cflags=f"-g -pedantic {SANITIZE_FLAGS}", variables=variables)
        files = []
        for i, (spec, array) in enumerate(zip(package.inputs, arrays)):
            files.append(str(Path(tmp) / f"input{i}.npy"))
            np.save(files[-1], array.reshape(spec["shape"]))  # ascontiguousarray made 0-d arrays 1-d
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
        proc = subprocess.run([str(directory / f"{package.name}_runner"), "-o", tmp, *files],
                              capture_output=True, text=True, env=env, timeout=600)
        reports = [r for r in SANITIZER_REPORTS if r in proc.stderr]
        assert proc.returncode == 0 and not reports, (
            f"sanitized runner failed (exit {proc.returncode}, {reports}):\n{proc.stderr[-6000:]}")
        return {o["name"]: np.load(Path(tmp) / f"output{i}.npy") for i, o in enumerate(package.outputs)}


def assert_matches_onnxruntime(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                               tolerance: float = 1e-4, backend: str | None = None,
                               **compile_args: Any) -> dict[str, np.ndarray]:
    ours = run_aot(model, inputs, backend=backend, **compile_args)
    assert_outputs_match(ours, model, inputs, tolerance)
    return ours


def assert_outputs_match(ours: Mapping[str, np.ndarray], model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                         tolerance: float = 1e-4, what: str = "") -> None:
    """`ours` (outputs however aot ran: host, qemu) against onnxruntime's run of `model`."""
    for name, expected in run_onnxruntime(model, inputs).items():
        result = compare(name, ours[name], expected, tolerance)
        assert result.passed, (f"{what}output {name!r}: max abs err {result.max_abs_err:.3g} "
                               f"(scale {result.scale:.3g}) {result.detail}")


def rand(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def matmul_model_file(folder: Path, weight: onnx.TensorProto) -> Path:
    """folder/model.onnx: y[2,3] = x[2,4] @ `weight` (an initializer "w", e.g. with external data)."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path
