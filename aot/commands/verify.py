"""Checking a compiled model against onnxruntime (or given expected outputs) on the host."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from aot.commands.exact_int8_reference import Reencoded, onnxruntime_int8_saturates, reference_model
from aot.errors import AotError, VerifyError
from aot.host.run import HostModel
from aot.package.package import Package
from aot.progress import SILENT, Progress

DEFAULT_TOLERANCE = 1e-4
# Quantised outputs (int8 ones, or float ones a DequantizeLinear produces) match when at most one
# quantisation step off on this share of elements: an int8 kernel and onnxruntime's may round a
# value that falls on a half step differently, and one such difference moves later layers too.
QUANTIZED_MATCH_SHARE = 0.999
_QUANTIZED_OUTPUT_TYPES = {"int8", "uint8", "int16", "uint16"}


@dataclass
class OutputComparison:
    name: str
    max_abs_err: float
    max_rel_err: float
    scale: float
    passed: bool
    detail: str = ""
    step: float | None = None  # a quantised output's quantisation step
    exact_share: float | None = None  # quantised outputs: the share of elements that match exactly


@dataclass
class VerifyResult:
    passed: bool
    reference: str
    tolerance: float
    outputs: list[OutputComparison] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reference": self.reference,
            "tolerance": self.tolerance,
            "outputs": [
                {"name": o.name, "max_abs_err": o.max_abs_err, "max_rel_err": o.max_rel_err,
                 "scale": o.scale, "passed": o.passed, **({"detail": o.detail} if o.detail else {}),
                 **({"quantization_step": o.step, "exact_share": o.exact_share} if o.step is not None else {})}
                for o in self.outputs
            ],
        }


def random_inputs(package: Package, seed: int = 0) -> dict[str, np.ndarray]:
    """Reproducible inputs: standard normal floats, small non-negative ints, random bools."""
    rng = np.random.default_rng(seed)
    values = {}
    for spec in package.inputs:
        dtype = np.dtype(spec["dtype"])
        shape = spec["shape"]
        if dtype.kind == "f":
            values[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            values[spec["name"]] = rng.integers(0, 2, shape).astype(bool)
        else:
            values[spec["name"]] = rng.integers(0, 4, shape).astype(dtype)
    return values


# What to do when onnxruntime rejects random inputs (token ids out of a vocabulary's range, ...).
RANDOM_INPUTS_HINT = ("; the inputs were random: give the model's own with --inputs FILE.npz (FILE.npy for "
                      "a one-input model) or bind one with --input-value NAME=...")


def onnxruntime_outputs(model_path: str, inputs: dict[str, np.ndarray], names: list[str],
                        random: bool = False) -> dict[str, np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise AotError("verification against onnxruntime needs it installed: pip install onnxruntime "
                       "(or pass --expected outputs.npz)") from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # Fatal messages only: a model onnxruntime refuses is reported once, in aot's one line below
    # (its logger wrote the same error to stderr itself).
    options.log_severity_level = 4
    if _weight_only_quantized(model_path):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        exact = _exact_int8_reference(model_path)
        session = ort.InferenceSession(exact.model.SerializeToString() if exact else model_path, options,
                                       providers=["CPUExecutionProvider"])
        results = session.run(names, exact.feeds(inputs) if exact else inputs)
    except Exception as e:
        hint = RANDOM_INPUTS_HINT if random else ""
        raise AotError(f"{model_path}: onnxruntime could not run the model: {str(e).splitlines()[0]}{hint}") from e
    return {n: exact.result(n, r) if exact else r for n, r in zip(names, results)}


def _weight_only_quantized(model_path: str) -> bool:
    """Whether the model dequantizes weights but never quantizes activations: onnxruntime's
    extended optimizations then quantize the activations on the fly (MatMulIntegerToFloat),
    which is not what the graph says, so the reference runs with its basic ones only."""
    try:
        ops = {node.op_type for node in onnx.load(model_path, load_external_data=False).graph.node}
    except Exception:  # onnxruntime reports a file it cannot read itself
        return False
    quantizes = "QuantizeLinear" in ops or "DynamicQuantizeLinear" in ops or any(op.startswith("QLinear") for op in ops)
    return "DequantizeLinear" in ops and not quantizes


def _exact_int8_reference(model_path: str) -> Reencoded | None:
    """Where onnxruntime's int8 products saturate on this machine, the model re-encoded so that
    it runs exact ones (aot/commands/exact_int8_reference.py); float models are not even loaded."""
    if not onnxruntime_int8_saturates():
        return None
    return reference_model(onnx.load(model_path))


def compare(name: str, ours: np.ndarray, expected: np.ndarray, tolerance: float,
            step: float | None = None) -> OutputComparison:
    """Pass when max |ours - expected| <= tolerance * max(1, max |expected|); NaNs must coincide;
    integer and bool outputs must match exactly. A quantised output (`step`: its quantisation
    step) passes when QUANTIZED_MATCH_SHARE of its elements are at most one step off."""
    expected = np.asarray(expected)
    if tuple(ours.shape) != tuple(expected.shape):
        return OutputComparison(name, float("inf"), float("inf"), 0.0, False,
                                f"shape {list(ours.shape)} vs expected {list(expected.shape)}")
    if step is not None:
        return _compare_quantized(name, ours, expected, step)
    if expected.dtype.kind in "iub" or ours.dtype.kind in "iub":
        diff = np.abs(ours.astype(np.float64) - expected.astype(np.float64))
        err = float(diff.max()) if diff.size else 0.0
        return OutputComparison(name, err, err, 0.0, err == 0.0)
    o = ours.astype(np.float64)
    e = expected.astype(np.float64)
    nan_mismatch = bool(np.any(np.isnan(o) != np.isnan(e)))
    finite = np.isfinite(e) & np.isfinite(o)
    inf_mismatch = bool(np.any((np.isinf(o) | np.isinf(e)) & (o != e) & ~np.isnan(o) & ~np.isnan(e)))
    diff = np.abs(o[finite] - e[finite])
    scale = float(np.abs(e[finite]).max()) if finite.any() else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    passed = max_abs <= tolerance * max(1.0, scale) and not nan_mismatch and not inf_mismatch
    detail = "NaN positions differ" if nan_mismatch else ("infinities differ" if inf_mismatch else "")
    if passed and e.size and not finite.any():
        # Agreeing on NaNs is agreement, but it checks no arithmetic: say so rather than a bare "ok"
        # (random inputs outside a model's domain, e.g. an attention mask of 0..3, do this).
        detail = ("every value is NaN or infinite on both sides, so nothing was compared: "
                  "give --inputs the model expects")
    return OutputComparison(name, max_abs, max_rel, scale, passed, detail)


def _compare_quantized(name: str, ours: np.ndarray, expected: np.ndarray, step: float) -> OutputComparison:
    diff = np.abs(ours.astype(np.float64) - expected.astype(np.float64))
    steps = diff / step if step > 0 else np.where(diff == 0, 0.0, np.inf)
    count = max(diff.size, 1)
    exact = float(np.count_nonzero(steps == 0)) / count
    within = float(np.count_nonzero(steps <= 1.0 + 1e-3)) / count  # float steps: a hair of slack
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    detail = f"exact on {exact:.2%}, within one step ({step:.3g}) on {within:.2%}"
    return OutputComparison(name, max_abs, max_abs / scale if scale > 0 else 0.0, scale,
                            within >= QUANTIZED_MATCH_SHARE and not np.isnan(diff).any(), detail, step, exact)


def quantization_steps(model_path: str) -> dict[str, float]:
    """The quantisation step of each quantised graph output of the ONNX model: 1 for an int8/
    uint8/int16/uint16 output, the scale of the per-tensor DequantizeLinear that computes a float
    one. Other outputs are not listed."""
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(model_path, load_external_data=False)
    except Exception:
        return {}  # verify compares the outputs as floats; loading errors are reported elsewhere
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    steps: dict[str, float] = {}
    for output in graph.output:
        elem = output.type.tensor_type.elem_type
        if elem and onnx.helper.tensor_dtype_to_np_dtype(elem).name in _QUANTIZED_OUTPUT_TYPES:
            steps[output.name] = 1.0
            continue
        node = producers.get(output.name)
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        scale = initializers.get(node.input[1]) if len(node.input) > 1 else None
        if scale is not None and int(np.prod(scale.dims)) == 1:
            steps[output.name] = float(numpy_helper.to_array(scale).reshape(-1)[0])
    return steps


class Runnable(Protocol):
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def verify_package(package: Package, model_path: str, inputs: dict[str, np.ndarray] | None = None,
                   expected: dict[str, np.ndarray] | None = None, tolerance: float = DEFAULT_TOLERANCE,
                   seed: int = 0, built: Runnable | None = None, progress: Progress | None = None) -> VerifyResult:
    """Run `built` (default: the package built for this machine) and compare with the reference
    (onnxruntime runs the original model, fed also the inputs the package has bound: --input-value)."""
    progress = progress or SILENT
    random = inputs is None
    inputs = inputs if inputs is not None else random_inputs(package, seed)
    if built is None:
        progress.start("host build")
    model = built or HostModel.build(package)
    where = getattr(model, "where", "")
    progress.start(f"running the compiled model ({where})" if where else "running the compiled model")
    ours = model.run(inputs)
    names = [o["name"] for o in package.outputs]
    if expected is None:
        progress.start("running onnxruntime")
        feeds = {**inputs, **getattr(package, "bound_inputs", {})}
        reference = onnxruntime_outputs(model_path, feeds, names, random=random)
        source = "onnxruntime"
    else:
        missing = [n for n in names if n not in expected]
        if missing:
            raise VerifyError(f"--expected has no array for output(s) {missing}")
        reference = expected
        source = "expected"
    steps = quantization_steps(model_path)
    comparisons = [compare(n, ours[n], reference[n], tolerance, steps.get(n)) for n in names]
    progress.finish()
    return VerifyResult(all(c.passed for c in comparisons), source, tolerance, comparisons)


def array_shape_options(model_path: str | os.PathLike[str], inputs_path: str | os.PathLike[str],
                        shape_options: Sequence[str], value_options: Sequence[str]) -> list[str]:
    """verify --inputs on a model with symbolic dimensions: the --input-shape options plus the
    arrays' shapes for the inputs they do not name (read from the arrays' headers)."""
    from aot.frontend.input_shapes import is_static_input, parse_input_shape_variants, runtime_inputs
    from aot.frontend.input_values import parse_input_values
    from aot.frontend.loader import load_onnx
    from aot.npz import array_shapes

    bound = set(parse_input_values(value_options))
    given = set(parse_input_shape_variants(shape_options)) | bound
    fed = [vi for vi in runtime_inputs(load_onnx(model_path)) if vi.name not in bound]
    dynamic = [vi.name for vi in fed if not is_static_input(vi) and vi.name not in given]
    if not dynamic:
        return list(shape_options)
    shapes = array_shapes(inputs_path, "--inputs", [vi.name for vi in fed])
    return [*shape_options, *(f"{n}={'x'.join(map(str, shapes[n]))}" for n in dynamic if n in shapes)]
