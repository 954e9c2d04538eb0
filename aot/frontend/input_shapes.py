"""--input-shape NAME=1x3x224x224: fixing symbolic dimensions at compile time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import onnx

from aot.errors import InputShapeError

# ONNX stores a dimension as an int64.
MAX_DIMENSION = 2**63 - 1


def parse_input_shapes(options: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Parse repeated `NAME=D0xD1x...` options; a scalar input is written `NAME=` ."""
    shapes: dict[str, tuple[int, ...]] = {}
    for opt in options:
        name, sep, dims_text = opt.rpartition("=")
        if not sep or not name:
            raise InputShapeError(f"--input-shape {opt!r}: expected NAME=D0xD1x..., e.g. input=1x3x224x224")
        if not is_utf8(name):
            raise InputShapeError(f"--input-shape {opt!r}: the input name is not valid UTF-8 (ONNX names are)")
        dims = _parse_dims(opt, dims_text)
        if name in shapes:
            raise InputShapeError(f"--input-shape {opt!r}: input {name!r} is given twice")
        shapes[name] = dims
    return shapes


def parse_input_shape_variants(options: Iterable[str]) -> dict[str, list[tuple[int, ...]]]:
    """Like parse_input_shapes, but an input may be given several shapes: the model is compiled at
    each (shape variants, one entry point per shape). The same shape twice is an error."""
    variants: dict[str, list[tuple[int, ...]]] = {}
    for opt in options:
        ((name, dims),) = parse_input_shapes([opt]).items()
        if dims in variants.get(name, []):
            raise InputShapeError(f"--input-shape {opt!r}: input {name!r} is given this shape twice")
        variants.setdefault(name, []).append(dims)
    return variants


def is_utf8(text: str) -> bool:
    """False for command-line text holding bytes that are not UTF-8 (Python keeps them as lone
    surrogates, which no name read from an ONNX file can contain)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_dims(opt: str, dims_text: str) -> tuple[int, ...]:
    if not dims_text:
        return ()  # a scalar
    dims: list[int] = []
    for part in dims_text.lower().replace(",", "x").split("x"):
        if not part:
            raise InputShapeError(f"--input-shape {opt!r}: empty dimension (write NAME=D0xD1x..., e.g. "
                                  "input=1x3x224x224)")
        if not re.fullmatch(r"-?[0-9]+", part):  # ASCII digits only: int() also takes "+1", "1_0", "١"
            raise InputShapeError(f"--input-shape {opt!r}: {part!r} is not an integer dimension")
        if len(part.lstrip("-")) > 19 or int(part) > MAX_DIMENSION:
            raise InputShapeError(f"--input-shape {opt!r}: dimension {part[:24]} is too large (at most 2**63 - 1)")
        d = int(part)
        if d <= 0:
            raise InputShapeError(f"--input-shape {opt!r}: dimension {d} must be positive")
        dims.append(d)
    return tuple(dims)


def runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs the caller feeds; inputs that also have an initializer are constants."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def apply_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    inputs = {vi.name: vi for vi in runtime_inputs(model)}
    for name, dims in shapes.items():
        if name not in inputs:
            known = ", ".join(repr(n) for n in inputs) or "none"
            raise InputShapeError(f"--input-shape {name}=...: the model has no input {name!r} (inputs: {known})")
        tensor_type = inputs[name].type.tensor_type
        if tensor_type.HasField("shape"):
            declared = tensor_type.shape.dim
            if len(declared) != len(dims):
                raise InputShapeError(
                    f"--input-shape {name}={'x'.join(map(str, dims))}: input {name!r} has rank "
                    f"{len(declared)} ({_shape_text(declared)}), the option gives rank {len(dims)}"
                )
            for i, (dim, value) in enumerate(zip(declared, dims)):
                if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != value:
                    raise InputShapeError(
                        f"--input-shape {name}={'x'.join(map(str, dims))}: dimension {i} of input "
                        f"{name!r} is fixed at {dim.dim_value} by the model"
                    )
        tensor_type.shape.Clear()
        for value in dims:
            tensor_type.shape.dim.add().dim_value = value
    missing = []
    for vi in runtime_inputs(model):
        tensor_type = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise InputShapeError(f"input {vi.name!r} is not a tensor; only tensor inputs are supported")
        if not tensor_type.HasField("shape"):
            missing.append(f"{vi.name!r} (unknown rank)")
            continue
        for i, dim in enumerate(tensor_type.shape.dim):
            # A set dim_value of 0 is a known size (an empty tensor), as the importer reads it too;
            # only a dim_param or a missing value is symbolic.
            if not (dim.HasField("dim_value") and dim.dim_value >= 0):
                label = dim.dim_param or "?"
                missing.append(f"{vi.name!r} dimension {i} ({label})")
    if missing:
        example = runtime_inputs(model)[0].name if runtime_inputs(model) else "input"
        raise InputShapeError(
            "symbolic dimensions need fixed sizes: " + ", ".join(missing)
            + f"; give them with --input-shape, e.g. --input-shape {example}=1x3x224x224"
        )


def _shape_text(dims: Iterable[onnx.TensorShapeProto.Dimension]) -> str:
    parts = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    return "x".join(parts)
