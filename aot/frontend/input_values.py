"""--input-value NAME=FILE.npy | NAME=1,2,3 | NAME=16000: binding a graph input at compile time.

A bound input becomes an initializer before shape inference and folding, so an input that decides
a shape (Resize scales, Slice starts, TopK k, Reduce axes, Pad pads, a sample rate) is a constant
like any other and folds; the package no longer has that input. The value's dtype and shape come
from the input's declared type: the value must fit it (count, shape, range of the dtype).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aot.errors import InputValueError
from aot.frontend.input_shapes import is_utf8, runtime_inputs
from aot.npz import read_npy_header

# What aot.compile(input_values=...) takes per input: an array (or anything np.asarray takes), or
# the text of the command-line option after `NAME=`.
InputValue = np.ndarray | str | int | float | bool | list | tuple
# Text values are for small vectors; bigger ones go in an .npy file.
MAX_TEXT_VALUES = 4096
# The manifest lists a bound value's numbers up to this many, and a sha256 of its bytes beyond.
MANIFEST_VALUES = 64
# A .npy bound at compile time becomes weights; more than this is not a shape-deciding input.
MAX_NPY_BYTES = 2**31
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:inf|nan)|true|false"
_TEXT_LIST = re.compile(rf"(?:{_NUMBER})(?:,(?:{_NUMBER}))*", re.IGNORECASE)


def parse_input_values(options: Iterable[str]) -> dict[str, str]:
    """Repeated `NAME=VALUE` options, keyed by input name (values are checked against the model's
    declared input later, in bind_input_values)."""
    values: dict[str, str] = {}
    for opt in options:
        name, sep, text = opt.partition("=")
        if not sep or not name:
            raise InputValueError(f"--input-value {opt!r}: expected NAME=FILE.npy, NAME=1,2,3 or NAME=16000")
        if not is_utf8(name):
            raise InputValueError(f"--input-value {opt!r}: the input name is not valid UTF-8 (ONNX names are)")
        if not text:
            raise InputValueError(f"--input-value {opt!r}: no value after '=' (give FILE.npy, 1,2,3 or a number)")
        if name in values:
            raise InputValueError(f"--input-value {opt!r}: input {name!r} is given twice")
        values[name] = text
    return values


def value_files(values: Mapping[str, str]) -> list[Path]:
    """The .npy files among parsed option values (what a command reads besides the model)."""
    return [Path(text) for text in values.values() if not _TEXT_LIST.fullmatch(text)]


def bind_input_values(model: onnx.ModelProto, values: Mapping[str, InputValue]) -> dict[str, np.ndarray]:
    """Turn each named runtime input of `model` (changed in place) into an initializer holding its
    value, checked against the input's declared type; returns the bound arrays by name."""
    inputs = {vi.name: vi for vi in runtime_inputs(model)}
    for name in values:
        if name not in inputs:
            known = ", ".join(repr(n) for n in inputs) or "none"
            raise InputValueError(f"--input-value {name}=...: the model has no input {name!r} (inputs: {known})")
    # In the model's input order, whatever the options' order: the same package either way.
    bound = {name: _value_for(vi, values[name]) for name, vi in inputs.items() if name in values}
    if not bound:
        return bound
    kept = [vi for vi in model.graph.input if vi.name not in bound]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in bound.items())
    return bound


def manifest_entry(name: str, array: np.ndarray) -> dict[str, Any]:
    """How manifest.json records a bound input: its values when small, else their sha256."""
    entry: dict[str, Any] = {"name": name, "dtype": str(array.dtype), "shape": list(array.shape)}
    if array.size <= MANIFEST_VALUES:
        entry["values"] = [_json_number(v) for v in array.reshape(-1).tolist()]
    else:
        entry["sha256"] = hashlib.sha256(array.tobytes()).hexdigest()
    return entry


def _json_number(v: Any) -> Any:
    """JSON has no NaN or infinity: those are written as strings, as numpy prints them."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _value_for(vi: onnx.ValueInfoProto, value: InputValue) -> np.ndarray:
    name = vi.name
    where = f"--input-value {name}"
    if not vi.type.HasField("tensor_type"):
        raise InputValueError(f"{where}: input {name!r} is not a tensor")
    tensor_type = vi.type.tensor_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        raise InputValueError(f"{where}: input {name!r} has an element type aot cannot bind") from None
    if dtype.kind not in "biuf":
        raise InputValueError(f"{where}: input {name!r} has dtype {dtype}; only number and bool inputs can be bound")
    declared = _declared_dims(tensor_type)
    if isinstance(value, str):
        if _TEXT_LIST.fullmatch(value):
            return _from_text(where, name, value, dtype, declared)
        array = _load_npy(where, value)
    else:
        array = np.asarray(value)
    return _fitted(where, name, array, dtype, declared)


def _declared_dims(tensor_type: onnx.TypeProto.Tensor) -> list[int | None] | None:
    """The declared dimensions (None where symbolic); None for an unknown rank."""
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tensor_type.shape.dim]


def _from_text(where: str, name: str, text: str, dtype: np.dtype[Any], declared: list[int | None] | None
               ) -> np.ndarray:
    parts = text.split(",")
    if len(parts) > MAX_TEXT_VALUES:
        raise InputValueError(f"{where}=...: {len(parts)} values; more than {MAX_TEXT_VALUES} go in an .npy file")
    numbers = [_number(where, name, p, dtype) for p in parts]
    if declared is None:
        shape: tuple[int, ...] = () if len(numbers) == 1 else (len(numbers),)
    elif not declared:
        shape = ()
    elif len(declared) == 1:
        shape = (len(numbers),)
    elif all(d is not None for d in declared):
        shape = tuple(d for d in declared if d is not None)
    else:
        raise InputValueError(f"{where}=...: input {name!r} has rank {len(declared)} with symbolic "
                              "dimensions; give its value as an .npy file")
    count = math.prod(shape)
    if count != len(numbers):
        raise InputValueError(f"{where}={text[:40]}: {len(numbers)} value(s), input {name!r} "
                              f"(declared {_dims_text(declared)}) takes {count}")
    return _fitted(where, name, np.array(numbers, dtype=dtype).reshape(shape), dtype, declared)


def _number(where: str, name: str, part: str, dtype: np.dtype[Any]) -> int | float | bool:
    lower = part.lower()
    if dtype.kind == "b":
        if lower in ("0", "1", "true", "false"):
            return lower in ("1", "true")
        raise InputValueError(f"{where}: {part!r} is not a bool (0, 1, true or false) for input {name!r}")
    if dtype.kind in "iu":
        if not re.fullmatch(r"[-+]?[0-9]+", part):
            raise InputValueError(f"{where}: {part!r} is not an integer, input {name!r} is {dtype}")
        value = int(part)
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise InputValueError(f"{where}: {part[:24]} does not fit input {name!r}'s dtype {dtype} "
                                  f"({info.min} to {info.max})")
        return value
    if lower in ("true", "false"):
        raise InputValueError(f"{where}: {part!r} is not a number for input {name!r} ({dtype})")
    number = float(part)
    if math.isfinite(number) and abs(number) > float(np.finfo(dtype).max):
        raise InputValueError(f"{where}: {part[:24]} overflows input {name!r}'s dtype {dtype}")
    return number


def _fitted(where: str, name: str, array: np.ndarray, dtype: np.dtype[Any], declared: list[int | None] | None
            ) -> np.ndarray:
    """`array` as `dtype`, refused when its shape does not fit the declared one or its values do
    not fit the dtype (a cast never wraps or truncates silently)."""
    if array.dtype.hasobject or array.dtype.kind not in "biuf":
        raise InputValueError(f"{where}: the value has dtype {array.dtype}; input {name!r} needs {dtype} numbers")
    if declared is not None:
        fits = len(declared) == array.ndim and all(d is None or d == s for d, s in zip(declared, array.shape))
        if not fits:
            raise InputValueError(f"{where}: the value has shape {list(array.shape)}, input {name!r} is declared "
                                  f"{_dims_text(declared)}")
    if array.dtype == dtype:
        return array.copy(order="C")  # (np.ascontiguousarray makes a scalar 1-D)
    with np.errstate(all="ignore"):
        cast = array.astype(dtype, order="C")
        if dtype.kind == "f":  # rounding to the float type is fine; a finite value turned infinite is not
            fits = bool(np.all(np.isfinite(cast) | ~np.isfinite(array)))
        else:  # integers and bools: every value exactly as given
            fits = bool(np.all(np.isfinite(array))) and np.array_equal(cast.astype(np.float64),
                                                                       array.astype(np.float64))
    if not fits:
        raise InputValueError(f"{where}: the value ({array.dtype}) does not fit input {name!r}'s dtype {dtype} "
                              "without changing it")
    return cast


def _dims_text(declared: list[int | None] | None) -> str:
    if declared is None:
        return "(unknown rank)"
    if not declared:
        return "a scalar"
    return "[" + ", ".join("?" if d is None else str(d) for d in declared) + "]"


def _load_npy(where: str, text: str) -> np.ndarray:
    """One array from an .npy file, its header read with numpy's bound and checked before any data
    (never pickled objects, never more data than the header declares)."""
    path = Path(text)
    label = f"{where}={text}"
    if not path.exists():
        raise InputValueError(f"{label}: not a list of numbers, and no such .npy file")
    if not path.is_file():
        raise InputValueError(f"{label}: not a regular file")
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            if dtype.hasobject or dtype.kind not in "biuf":
                raise InputValueError(f"{label}: the array has dtype {dtype}; only numbers and bools can be bound")
            count = math.prod(int(d) for d in shape)
            nbytes = count * dtype.itemsize
            if nbytes > MAX_NPY_BYTES:
                raise InputValueError(f"{label}: the array takes {nbytes} bytes, more than {MAX_NPY_BYTES}")
            if os.fstat(f.fileno()).st_size - f.tell() != nbytes:
                raise InputValueError(f"{label}: the file holds {os.fstat(f.fileno()).st_size - f.tell()} bytes of "
                                      f"data, its shape {list(shape)} and dtype {dtype} need {nbytes}")
            raw = f.read(nbytes)
    except InputValueError:
        raise
    except OSError as e:
        raise InputValueError(f"{label}: cannot read: {e.strerror or e}") from e
    except (ValueError, EOFError, SyntaxError) as e:
        raise InputValueError(f"{label}: not a readable .npy file ({str(e).splitlines()[0] if str(e) else e})") from e
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")
