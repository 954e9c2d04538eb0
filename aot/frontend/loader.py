"""Reading an ONNX file safely: parse errors, checker errors and external data confined to the
model's own folder all become one-line errors naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from aot.errors import ModelLoadError

# Below this opset the model is first upgraded by onnx's version converter; the ops are
# written against opsets 7 and later.
MIN_OPSET = 7


def load_onnx(path: str | os.PathLike[str]) -> onnx.ModelProto:
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file")
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory, expected an .onnx file")
    if not p.is_file():
        raise ModelLoadError(f"{p}: not a regular file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ModelLoadError(f"{p}: cannot read: {e.strerror}") from e
    if not raw:
        raise ModelLoadError(f"{p}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelLoadError(f"{p}: not an ONNX model (protobuf parse failed: {e})") from e
    if not model.HasField("graph") or (not model.graph.output and not model.graph.node):
        raise ModelLoadError(f"{p}: not an ONNX model (no graph with outputs)")
    if model.ir_version <= 0:
        raise ModelLoadError(f"{p}: not an ONNX model (no ir_version)")
    _load_external_data(model, p)
    supported = onnx.defs.onnx_opset_version()
    if default_opset(model) > supported:
        raise ModelLoadError(f"{p}: model uses opset {default_opset(model)}, newer than the {supported} this "
                             f"installation of onnx knows (pip install -U onnx)")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, Exception) as e:  # checker raises several types
        raise ModelLoadError(f"{p}: model fails ONNX checks: {one_line(str(e)) or type(e).__name__}") from e
    return model


def one_line(text: str, limit: int = 300) -> str:
    """onnx's messages span lines (the node is printed after a newline): keep them on one."""
    flat = " ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1  # IR without an explicit default domain import means opset 1


def upgrade_opset(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """Models older than MIN_OPSET go through onnx's version converter first."""
    if default_opset(model) >= MIN_OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:
        raise ModelLoadError(
            f"{source}: opset {default_opset(model)} cannot be upgraded to opset {MIN_OPSET}: {e}"
        ) from e


def _load_external_data(model: onnx.ModelProto, p: Path) -> None:
    """Resolve external weights, refusing any path that leaves the model's folder."""
    base = p.parent.resolve()
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        location = info.location
        where = f"{p}: initializer {tensor.name!r} external data {location!r}"
        if not location or os.path.isabs(location) or location.startswith(("/", "\\")):
            raise ModelLoadError(f"{where}: absolute paths are not allowed")
        target = (base / location).resolve()
        if base != target and base not in target.parents:
            raise ModelLoadError(f"{where}: path leaves the model's folder")
        if not target.is_file():
            raise ModelLoadError(f"{where}: file not found")
        offset = int(info.offset or 0)
        length = info.length
        available = target.stat().st_size - offset
        if length is not None and int(length) > available or available < 0:
            raise ModelLoadError(f"{where}: file is shorter than the tensor's data")
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(int(length)) if length is not None else f.read()
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
        expected = _expected_nbytes(tensor)
        if expected is not None and len(data) != expected:
            raise ModelLoadError(
                f"{where}: holds {len(data)} bytes, the tensor needs {expected}"
            )


def _expected_nbytes(tensor: onnx.TensorProto) -> int | None:
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:
        return None
    n = 1
    for d in tensor.dims:
        n *= int(d)
    return n * itemsize
