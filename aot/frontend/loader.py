"""Reading an ONNX file safely: parse errors, checker errors and external data confined to the
model's own folder all become one-line errors naming the file."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import external_data_helper

from aot.errors import ModelLoadError
from aot.ir.sizes import too_many_elements

# Below this opset the model is first upgraded by onnx's version converter; the ops are
# written against opsets 7 and later.
MIN_OPSET = 7
# protobuf's hard limit on a serialized message: 2 GiB - 1
PROTOBUF_LIMIT = 2**31 - 1
# Linux's PATH_MAX and NAME_MAX: a longer location cannot name a file.
MAX_LOCATION_BYTES, MAX_NAME_BYTES = 4096, 255
# onnxruntime's contrib ops that its tools write in the ai.onnx domain, where onnx's checker
# knows no schema for them: the checker sees them as com.microsoft ops instead.
ONNXRUNTIME_DEFAULT_DOMAIN_OPS = frozenset({"SimplifiedLayerNormalization"})
_PACKED_4BIT = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)}


def load_onnx(path: str | os.PathLike[str]) -> onnx.ModelProto:
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file")
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory, expected an .onnx file")
    if not p.is_file():
        raise ModelLoadError(f"{p}: not a regular file")
    raw = _read_capped(p)
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
    bad_text = first_non_utf8_string(model)
    if bad_text is not None:
        raise ModelLoadError(f"{p}: {bad_text[0]} is not valid UTF-8 text ({bad_text[1][:60]!r})")
    _load_external_data(model, p)
    supported = onnx.defs.onnx_opset_version()
    if default_opset(model) > supported:
        raise ModelLoadError(f"{p}: model uses opset {default_opset(model)}, newer than the {supported} this "
                             f"installation of onnx knows (pip install -U onnx)")
    try:
        onnx.checker.check_model(_as_checked(model))
    except (onnx.checker.ValidationError, Exception) as e:  # checker raises several types
        raise ModelLoadError(f"{p}: model fails ONNX checks: {one_line(str(e)) or type(e).__name__}") from e
    return model


def _as_checked(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or where it has onnxruntime's ai.onnx-domain contrib ops, a copy with them in the
    com.microsoft domain (whose ops the checker leaves to their runtime)."""
    if not any(n.domain in ("", "ai.onnx") and n.op_type in ONNXRUNTIME_DEFAULT_DOMAIN_OPS for n in model.graph.node):
        return model
    checked = onnx.ModelProto()
    checked.CopyFrom(model)
    for node in checked.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in ONNXRUNTIME_DEFAULT_DOMAIN_OPS:
            node.domain = "com.microsoft"
    if not any(o.domain == "com.microsoft" for o in checked.opset_import):
        checked.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return checked


def first_non_utf8_string(message: Message) -> tuple[str, bytes] | None:
    """The path and bytes of the first string field that is not valid UTF-8 (protobuf hands such
    proto2 strings over as bytes, where the rest of aot expects text), or None. Iterative: a
    graph's nesting (subgraphs in attributes) must not grow Python's stack."""
    stack: list[tuple[str, Message]] = [("model", message)]
    while stack:
        path, current = stack.pop()
        for field, value in current.ListFields():
            if field.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING):
                continue  # numbers and raw bytes (weights): nothing to decode, and long
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
            values = list(value) if repeated else [value]
            for i, item in enumerate(values):
                where = f"{path}.{field.name}[{i}]" if repeated else f"{path}.{field.name}"
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    stack.append((where, item))
                elif field.type == FieldDescriptor.TYPE_STRING and isinstance(item, bytes):
                    return where, item
    return None


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


def _read_capped(p: Path) -> bytes:
    """The file's bytes, refused by its size before reading: a protobuf cannot exceed 2 GiB, so a
    bigger file is not a model (its weights belong in external data files)."""
    try:
        size = p.stat().st_size
        if size > PROTOBUF_LIMIT:
            raise ModelLoadError(f"{p}: {size} bytes, more than the 2 GiB an ONNX protobuf can hold (keep the "
                                 "weights in external data files: onnx.save(..., save_as_external_data=True))")
        with open(p, "rb") as f:
            return f.read(PROTOBUF_LIMIT + 1)
    except OSError as e:
        raise ModelLoadError(f"{p}: cannot read: {e.strerror or e}") from e


def external_data_files(path: str | os.PathLike[str]) -> list[Path]:
    """The external data files the model at `path` names (those inside its folder), without
    reading them: the files a command reads besides the model itself."""
    p = Path(path)
    if not p.is_file():
        return []
    model = onnx.ModelProto()
    try:
        model.ParseFromString(_read_capped(p))
    except (DecodeError, RuntimeError, ValueError, ModelLoadError):
        return []
    base = p.parent.resolve()
    files = []
    for tensor in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(tensor):
            with contextlib.suppress(ModelLoadError):
                files.append(_external_file(base, _external_entries(tensor), ""))
    return files


def _load_external_data(model: onnx.ModelProto, p: Path) -> None:
    """Resolve external weights, refusing any path that leaves the model's folder and any
    declared size that does not fit the file, before reading a byte of it."""
    base = p.parent.resolve()
    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    pieces = []
    for tensor in tensors:
        entries = _external_entries(tensor)
        where = f"{p}: initializer {tensor.name!r} external data {entries.get('location', '')[:200]!r}"
        target = _external_file(base, entries, where)
        offset = _entry_int(entries, "offset", where)
        length = _entry_int(entries, "length", where)
        why = too_many_elements(tensor.dims)
        if why is not None:
            raise ModelLoadError(f"{where}: {why}")
        expected = _expected_nbytes(tensor, where)
        if length is not None and length != expected:
            raise ModelLoadError(f"{where}: length {length} bytes, the tensor's dims {list(tensor.dims)} "
                                 f"need {expected}")
        available = target.stat().st_size - (offset or 0)
        if available < expected:
            raise ModelLoadError(f"{where}: file is shorter than the tensor's data ({max(available, 0)} bytes from "
                                 f"offset {offset or 0}, the tensor needs {expected})")
        pieces.append((tensor, target, offset or 0, expected, where))
    total = sum(piece[3] for piece in pieces)
    if total > PROTOBUF_LIMIT:  # onnx's checker and shape inference serialize the whole model
        raise ModelLoadError(f"{p}: external data of {total} bytes; aot compiles models whose weights fit "
                             f"protobuf's {PROTOBUF_LIMIT}-byte limit (2 GiB)")
    memory = _physical_memory()
    if memory and total > memory:
        raise ModelLoadError(f"{p}: external data of {total} bytes, more than this machine's {memory} bytes of memory")
    for tensor, target, offset, expected, where in pieces:
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(expected)
        if len(data) != expected:  # the file shrank since it was measured
            raise ModelLoadError(f"{where}: holds {len(data)} bytes, the tensor needs {expected}")
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _external_entries(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _external_file(base: Path, entries: dict[str, str], where: str) -> Path:
    """The file a tensor's `location` names, which must be a file inside the model's folder."""
    if "location" not in entries or not entries["location"]:
        raise ModelLoadError(f"{where}: the external data has no location (the file holding the tensor)")
    location = entries["location"]
    if "\0" in location:
        raise ModelLoadError(f"{where}: location contains a NUL byte")
    if len(location.encode("utf-8", "surrogateescape")) > MAX_LOCATION_BYTES or any(
            len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in re.split(r"[/\\]", location)):
        raise ModelLoadError(f"{where}: location is too long ({len(location)} characters) to be a file name")
    if os.path.isabs(location) or location.startswith(("/", "\\")):
        raise ModelLoadError(f"{where}: absolute paths are not allowed")
    try:
        target = (base / location).resolve()
    except (OSError, RuntimeError, ValueError) as e:
        raise ModelLoadError(f"{where}: cannot resolve the location: {e}") from e
    if base != target and base not in target.parents:
        raise ModelLoadError(f"{where}: path leaves the model's folder")
    if not target.is_file():
        raise ModelLoadError(f"{where}: file not found" if not target.exists() else f"{where}: not a regular file")
    return target


def _entry_int(entries: dict[str, str], key: str, where: str) -> int | None:
    """`offset` and `length` are decimal strings in the protobuf: anything else is refused."""
    if key not in entries or entries[key] == "":
        return None
    text = entries[key]
    if not re.fullmatch(r"[0-9]{1,19}", text.strip()):
        raise ModelLoadError(f"{where}: {key} {text[:40]!r} is not a non-negative integer")
    return int(text)


def _expected_nbytes(tensor: onnx.TensorProto, where: str) -> int:
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except Exception:
        dtype = None
    if dtype is None or dtype.kind in "OSU":
        raise ModelLoadError(f"{where}: data type {tensor.data_type} cannot be stored as external data")
    if any(int(d) < 0 for d in tensor.dims):
        raise ModelLoadError(f"{where}: negative dimension in dims {list(tensor.dims)}")
    n = 1
    for d in tensor.dims:
        n *= int(d)
    if tensor.data_type in _PACKED_4BIT:  # two elements to a byte
        return (n + 1) // 2
    return n * dtype.itemsize


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0
