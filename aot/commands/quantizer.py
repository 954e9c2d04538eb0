"""`aot quantize`: a float ONNX model to an int8 one, with onnxruntime's own quantiser.

The quantisation itself is onnxruntime.quantization's (pre-processing, then quantize_static with
MinMax calibration), not a quantiser of aot's: what it writes is what onnxruntime's int8 kernels
and every other tool expect. What aot adds: inputs checked before anything runs, one-line
errors, an output file that appears whole or not at all, and the measured accuracy change of
the int8 model against the float one on the calibration samples.

The calibration .npz holds one array per model input, named by the input; the first axis counts
the samples, each one run of the model (an input of shape [1, 3, 32, 32] takes [N, 1, 3, 32, 32]).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from aot.commands.exact_int8_reference import onnxruntime_int8_saturates, reference_model
from aot.errors import AotError, OutputError
from aot.progress import SILENT, Progress

FORMATS = ("qdq", "qoperator")
ACTIVATION_TYPES = ("int8", "uint8")
# The doc_string of every model aot quantize writes starts with this: -o may replace such a file.
MARKER = "aot quantize: "
# ModelProto's doc_string (field 6) is serialized before its graph (7): it is in the first bytes.
_SNIFF_BYTES = 4096
_PROTOBUF_LIMIT = 2**31 - 1
# The samples are read whole (and each run's outputs kept): a few hundred samples calibrate a
# model, and an archive that declares more than this is refused from its headers.
MAX_CALIBRATION_BYTES = 2**30


@dataclass(frozen=True)
class OutputChange:
    """How far one output of the int8 model is from the float model's, over every sample."""

    name: str
    max_abs_err: float
    mean_abs_err: float
    max_abs_float: float
    top1_agree: int | None = None  # rows whose argmax agrees, for [N, C] class scores
    top1_rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "max_abs_err": _finite(self.max_abs_err),
                                "mean_abs_err": _finite(self.mean_abs_err),
                                "max_abs_float": _finite(self.max_abs_float)}
        if self.top1_rows is not None:
            data.update(top1_agree=self.top1_agree, top1_rows=self.top1_rows,
                        top1_agreement=(self.top1_agree or 0) / self.top1_rows)
        return data


@dataclass
class QuantizeSummary:
    """What `aot quantize` did and measured (aot.quantize(...) returns it; --json prints to_json())."""

    model: str
    output: str
    quant_format: str
    per_channel: bool
    activation_type: str
    samples: int
    float_bytes: int
    int8_bytes: int
    float_nodes: int
    ops: dict[str, int] = field(default_factory=dict)  # the int8 model's nodes by op type
    new_ops: dict[str, int] = field(default_factory=dict)  # those of op types the float model has not
    outputs: list[OutputChange] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "output": self.output, "format": self.quant_format,
                "per_channel": self.per_channel, "activation_type": self.activation_type, "weight_type": "int8",
                "calibration_method": "minmax", "samples": self.samples, "float_bytes": self.float_bytes,
                "int8_bytes": self.int8_bytes, "float_nodes": self.float_nodes, "ops": self.ops,
                "new_ops": self.new_ops,
                "outputs": [o.to_json() for o in self.outputs]}


def _finite(value: float) -> float | None:
    """JSON has no NaN or Inf: a non-finite error is null."""
    return value if np.isfinite(value) else None


QUANTIZATION_OPSET = 13


def quantize(model: str | os.PathLike[str], calibration: str | os.PathLike[str], output: str | os.PathLike[str],
             quant_format: str = "qdq", per_channel: bool = True, activation_type: str = "int8",
             input_shapes: Mapping[str, tuple[int, ...]] | None = None,
             progress: Progress | None = None) -> QuantizeSummary:
    """Quantize `model` to int8 with onnxruntime.quantization.quantize_static (int8 weights,
    per channel unless per_channel=False; `activation_type` int8 or uint8; MinMax calibration on
    the samples of the `calibration` .npz, see the module's docstring), write it to `output`
    and measure how far its outputs are from the float model's on those samples."""
    progress = progress or SILENT
    _check_options(quant_format, activation_type)
    from aot.frontend.loader import external_data_files

    model_path, output_path = Path(model), Path(output)
    read = [model_path, Path(calibration)]
    if model_path.is_file():
        read += external_data_files(model_path)
    _check_output(output_path, read)  # before any work: a refusal costs nothing
    float_model = _load_model(model_path, input_shapes or {})
    samples = load_calibration(calibration, float_model)
    float_bytes = _serialize(float_model, model_path)
    with progress.step("quantization (onnxruntime.quantization, MinMax calibration)"):
        int8_model = _quantize_bytes(float_bytes, samples, model_path, quant_format, per_channel, activation_type)
    int8_bytes = int8_model.SerializeToString()
    with progress.step("running the float and the int8 model on the calibration samples"):
        changes = measure_change(float_bytes, int8_bytes, samples, model_path)
    from aot.package.writer import write_file_atomically

    write_file_atomically(output_path, int8_bytes, inputs=read, replaceable=is_aot_quantized_model,
                          kind="a model aot quantize wrote")
    ops = _op_counts(int8_model)
    float_ops = _op_counts(float_model)
    return QuantizeSummary(str(model_path), str(output_path), quant_format, per_channel, activation_type,
                           _sample_count(samples), len(float_bytes), len(int8_bytes), len(float_model.graph.node),
                           ops, {op: n for op, n in ops.items() if op not in float_ops}, changes)


def _op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def _check_options(quant_format: str, activation_type: str) -> None:
    if quant_format not in FORMATS:
        raise AotError(f"--format {quant_format!r}: use {' or '.join(FORMATS)}")
    if activation_type not in ACTIVATION_TYPES:
        raise AotError(f"--activation-type {activation_type!r}: use {' or '.join(ACTIVATION_TYPES)}")


def _check_output(output: Path, inputs: list[Path]) -> None:
    """-o is a file to create in an existing folder, or one aot quantize wrote (checked again
    when it is written)."""
    from aot.package.output_dir import check_output_file

    check_output_file(output, inputs, replaceable=is_aot_quantized_model, kind="a model aot quantize wrote")
    parent = Path(os.path.abspath(output)).parent
    if not parent.is_dir():
        raise OutputError(f"{output}: its folder {parent} does not exist")


def is_aot_quantized_model(path: Path) -> bool:
    """True when `path` is an ONNX file aot quantize wrote: its doc_string starts with MARKER."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False
    return _leading_doc_string(head).startswith(MARKER.encode())


def _leading_doc_string(head: bytes) -> bytes:
    """ModelProto's doc_string from the first bytes of a file, read field by field up to the
    graph (protobuf writes fields in number order); b"" when it is not there or not protobuf."""
    pos = 0
    try:
        while pos < len(head):
            key, pos = _varint(head, pos)
            number, wire = key >> 3, key & 7
            if number >= 7 or number == 0:
                return b""
            if wire == 0:
                _, pos = _varint(head, pos)
            elif wire == 2:
                size, pos = _varint(head, pos)
                if number == 6:
                    return head[pos:pos + size]
                pos += size
            else:
                return b""
    except IndexError:
        return b""
    return b""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80 or shift > 63:
            return value, pos
        shift += 7


def _load_model(path: Path, input_shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """The float model with its inputs' shapes fixed (--input-shape), as aot compile takes it."""
    from aot.frontend.input_shapes import apply_input_shapes
    from aot.frontend.loader import load_onnx

    model = load_onnx(path)
    apply_input_shapes(model, input_shapes)
    return model


def input_specs(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Name, shape and numpy dtype of each input the caller feeds."""
    from aot.frontend.input_shapes import runtime_inputs

    specs = []
    for vi in runtime_inputs(model):
        tensor_type = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        specs.append({"name": vi.name, "shape": [d.dim_value for d in tensor_type.shape.dim], "dtype": str(dtype)})
    return specs


def load_calibration(path: str | os.PathLike[str], model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The calibration samples: an array per model input, [samples, *input shape], each header
    checked before its data is read; every input given, the same number of samples each,
    floats finite (MinMax calibration would take a NaN or Inf as a range)."""
    from aot.errors import VerifyError
    from aot.npz import load_npz

    specs = input_specs(model)
    where = f"--calibration {Path(path)}"
    arrays = load_npz(path, "--calibration", specs, samples=True, max_bytes=MAX_CALIBRATION_BYTES)
    missing = [s["name"] for s in specs if s["name"] not in arrays]
    if missing:
        raise VerifyError(f"{where}: no array for model input(s) {missing} (one array per input, named by it)")
    counts = {name: len(a) for name, a in arrays.items()}
    if len(set(counts.values())) > 1:
        raise VerifyError(f"{where}: the inputs' arrays hold different numbers of samples (first axis): {counts}")
    for name, array in arrays.items():
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise VerifyError(f"{where}: input {name!r} holds NaN or Inf values")
    return {s["name"]: arrays[s["name"]] for s in specs}


def _sample_count(samples: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(samples.values()))) if samples else 0


def _serialize(model: onnx.ModelProto, path: Path) -> bytes:
    if model.ByteSize() > _PROTOBUF_LIMIT:
        raise AotError(f"{path}: the model with its weights is 2 GiB or more; aot quantize takes smaller models")
    return model.SerializeToString()


def _quantize_bytes(float_bytes: bytes, samples: Mapping[str, np.ndarray], source: Path, quant_format: str,
                    per_channel: bool, activation_type: str) -> onnx.ModelProto:
    """onnxruntime's pre-processing (shape inference; its basic graph optimisations, which fold
    BatchNormalization into Conv among others) then quantize_static, in a private temporary
    folder; the result marked as aot's and stripped of the opset imports no node uses."""
    try:
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as e:
        raise AotError("aot quantize needs onnxruntime: pip install onnxruntime (or aot[verify])") from e
    formats = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    with tempfile.TemporaryDirectory(prefix="aot-quantize-") as tmp, _quiet_onnxruntime():
        float_path, prepared, quantized = (Path(tmp) / n for n in ("float.onnx", "prepared.onnx", "int8.onnx"))
        float_path.write_bytes(_prepared_for_quantizer(float_bytes, source))

        try:
            # Symbolic shape inference (which needs sympy) is skipped: every input shape is fixed.
            quant_pre_process(str(float_path), str(prepared), skip_symbolic_shape=True)
            quantize_static(str(prepared), str(quantized), _Samples(samples), quant_format=formats[quant_format],
                            per_channel=per_channel, activation_type=types[activation_type],
                            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
            result = onnx.load(str(quantized))
        except Exception as e:  # onnxruntime raises many types for a model it cannot quantize
            raise AotError(f"{source}: onnxruntime could not quantize the model: {_first_line(e)}") from e
    _drop_unused_opsets(result)
    options = (f"{quant_format}, {'per-channel' if per_channel else 'per-tensor'} int8 weights, {activation_type} "
               f"activations, MinMax calibration on {_sample_count(samples)} samples (onnxruntime.quantization)")
    result.doc_string = MARKER + options + (f"\n\n{result.doc_string}" if result.doc_string else "")
    return result


def _prepared_for_quantizer(float_bytes: bytes, source: Path) -> bytes:
    """The model as onnxruntime's quantiser handles it: at opset 13 or later (per-channel
    DequantizeLinear has its `axis` from opset 13, and the quantiser writes one for older models
    too, a file no checker accepts), and with Gemm biases of shape [1, N] as [N] (the same values
    under broadcasting; onnxruntime 1.32 fails on 2-D int32 biases, e.g. CNTK's MNIST's)."""
    from aot.frontend.loader import default_opset

    model = onnx.load_from_string(float_bytes)
    changed = _flatten_gemm_biases(model)
    if default_opset(model) < QUANTIZATION_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, QUANTIZATION_OPSET)
        except Exception as e:
            raise AotError(f"{source}: opset {default_opset(model)} cannot be upgraded to opset "
                           f"{QUANTIZATION_OPSET} for quantization: {_first_line(e)}") from e
        # IR version 3 files must list initializers as graph inputs; opset 13 needs IR version 7.
        model.ir_version = max(model.ir_version, 7)
        changed = True
    return model.SerializeToString() if changed else float_bytes


def _flatten_gemm_biases(model: onnx.ModelProto) -> bool:
    """Gemm biases C of shape [1, N] read by nothing else become [N]; whether any did."""
    from onnx import numpy_helper

    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    initializers = {t.name: t for t in model.graph.initializer}
    changed = False
    for node in model.graph.node:
        bias = initializers.get(node.input[2]) if node.op_type == "Gemm" and len(node.input) > 2 else None
        if bias is None or len(bias.dims) != 2 or bias.dims[0] != 1 or readers[bias.name] != 1:
            continue
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias).reshape(-1), bias.name))
        changed = True
    return changed


class _Samples:
    """onnxruntime's CalibrationDataReader protocol: one feed dict per sample, then None."""

    def __init__(self, samples: Mapping[str, np.ndarray]) -> None:
        self._feeds = iter([{name: array[i] for name, array in samples.items()}
                            for i in range(_sample_count(samples))])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


@contextlib.contextmanager
def _quiet_onnxruntime() -> Iterator[None]:
    """onnxruntime.quantization logs advice through the root logger (which, unconfigured, makes
    logging print to stderr) and its sessions log warnings: aot's errors are its one line."""
    import onnxruntime as ort

    root = logging.getLogger()
    silencer = logging.NullHandler()  # a handler keeps logging.warning from configuring stderr output
    root.addHandler(silencer)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    ort.set_default_logger_severity(3)
    try:
        yield
    finally:
        ort.set_default_logger_severity(2)
        logging.disable(previous)
        root.removeHandler(silencer)


def _drop_unused_opsets(model: onnx.ModelProto) -> None:
    """onnxruntime's optimiser imports a dozen domains (training, nchwc, aten...) no node uses."""
    nodes = [*model.graph.node, *(node for function in model.functions for node in function.node)]
    used = {"", "ai.onnx"} | {node.domain for node in nodes} | {function.domain for function in model.functions}
    kept = [o for o in model.opset_import if o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)


def _first_line(error: BaseException) -> str:
    from aot.frontend.loader import one_line

    return one_line(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)


def run_samples(model_bytes: bytes, samples: Mapping[str, np.ndarray], source: Path) -> dict[str, np.ndarray]:
    """Every output of the model run by onnxruntime (one thread) on each sample, stacked."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        # int8 products exact also where onnxruntime's own would saturate (an x86 CPU without VNNI),
        # so that the accuracy change printed is the quantisation's, the same on every machine
        exact = reference_model(onnx.load_from_string(model_bytes)) if onnxruntime_int8_saturates() else None
        session = ort.InferenceSession(exact.model.SerializeToString() if exact else model_bytes, options,
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        runs = []
        for i in range(_sample_count(samples)):
            feeds = {name: a[i] for name, a in samples.items()}
            runs.append(session.run(names, exact.feeds(feeds) if exact else feeds))
    except Exception as e:
        raise AotError(f"{source}: onnxruntime could not run the model: {_first_line(e)}") from e
    return {name: np.stack([exact.result(name, run[k]) if exact else run[k] for run in runs])
            for k, name in enumerate(names)}


def measure_change(float_bytes: bytes, int8_bytes: bytes, samples: Mapping[str, np.ndarray],
                   source: Path) -> list[OutputChange]:
    """Each output of the int8 model against the float model's, over the samples."""
    floats = run_samples(float_bytes, samples, source)
    quantized = run_samples(int8_bytes, samples, source)
    return [output_change(name, floats[name], quantized[name]) for name in floats]


def output_change(name: str, floats: np.ndarray, quantized: np.ndarray) -> OutputChange:
    """Errors over every element of the stacked runs [samples, ...]; top-1 agreement when each run's
    output is class scores, [N, C] with C > 1."""
    f, q = floats.astype(np.float64), quantized.astype(np.float64)
    err = np.abs(q - f)
    max_err = float(err.max()) if err.size else 0.0
    mean_err = float(err.mean()) if err.size else 0.0
    scale = float(np.abs(f).max()) if f.size else 0.0
    if f.ndim == 3 and f.shape[2] > 1:
        agree = int((f.argmax(axis=-1) == q.argmax(axis=-1)).sum())
        return OutputChange(name, max_err, mean_err, scale, agree, f.shape[0] * f.shape[1])
    return OutputChange(name, max_err, mean_err, scale)


def quantize_command(model: Path, calibration: Path, output: Path, *, quant_format: str, per_tensor: bool,
                     activation_type: str, input_shape: list[str] | None, dim: list[str] | None, force: bool,
                     as_json: bool, progress: Progress) -> None:
    """`aot quantize`: quantize MODEL to `output` and print how far its outputs move on the samples."""
    import json

    from aot.commands.model_options import model_shapes, refuse_existing
    from aot.package.output_dir import check_output_file

    # The input and foreign-file checks first, as quantize() makes them again when it writes.
    check_output_file(output, [model, calibration], replaceable=is_aot_quantized_model,
                      kind="a model aot quantize wrote")
    refuse_existing(output, force)
    summary = quantize(model, calibration, output, quant_format=quant_format, per_channel=not per_tensor,
                       activation_type=activation_type, input_shapes=model_shapes(model, input_shape, None, dim),
                       progress=progress)
    if as_json:
        print(json.dumps(summary.to_json(), sort_keys=True))
        return
    _print_quantize_summary(summary)


def _print_quantize_summary(s: QuantizeSummary) -> None:
    from aot.terminal import printable

    weights = "per-channel" if s.per_channel else "per-tensor"
    print(printable(f"quantized {s.model} -> {s.output} ({s.quant_format}, {weights} int8 weights, "
                    f"{s.activation_type} activations)"))
    added = ", ".join(f"{op} {n}" for op, n in s.new_ops.items())
    print(f"  {s.float_nodes} ONNX nodes -> {sum(s.ops.values())} ({printable(added)})")
    print(f"  model file {s.float_bytes} bytes -> {s.int8_bytes} bytes")
    print(f"accuracy change on the {s.samples} calibration samples (int8 against float, both run by onnxruntime):")
    for o in s.outputs:
        top1 = (f", top-1 agreement {o.top1_agree}/{o.top1_rows} ({100 * o.top1_agree / o.top1_rows:.1f}%)"
                if o.top1_rows else "")
        print(f"  {printable(o.name)}: max abs err {o.max_abs_err:.3g}, mean abs err {o.mean_abs_err:.3g} "
              f"(float outputs up to {o.max_abs_float:.3g}){top1}")
