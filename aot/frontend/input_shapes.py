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
        raise InputShapeError("symbolic dimensions need fixed sizes: " + ", ".join(missing) + "; " + _sizes_hint(model))


def _sizes_hint(model: onnx.ModelProto) -> str:
    """How to give the symbolic dimensions sizes, written for this model's inputs: --dim for named
    dimensions, --input-shape with an example of the first dynamic input's own rank."""
    names = symbolic_dims(model)
    dynamic = [vi for vi in runtime_inputs(model) if not is_static_input(vi)]
    hints = []
    if names:
        hints.append("give each named one a size with --dim NAME=SIZE, e.g. "
                     + " ".join(f"--dim {n}={_example_size(n, i)}" for n, i in _dim_positions(model)))
    if dynamic and dynamic[0].type.tensor_type.HasField("shape"):
        dims = dynamic[0].type.tensor_type.shape.dim
        example = "x".join(str(d.dim_value) if _fixed(d) else str(_example_size(d.dim_param, i))
                           for i, d in enumerate(dims))
        hints.append(f"fix an input's whole shape with --input-shape, e.g. --input-shape {dynamic[0].name}={example} "
                     f"(its dimensions: {', '.join(_shape_text([d]) for d in dims)})")
    return ", or ".join(hints) if hints else "give every input a shape with --input-shape NAME=D0xD1x..."


def _fixed(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return dim.HasField("dim_value") and dim.dim_value >= 0


def is_static_input(vi: onnx.ValueInfoProto) -> bool:
    tensor_type = vi.type.tensor_type
    return tensor_type.HasField("shape") and all(_fixed(d) for d in tensor_type.shape.dim)


def _example_size(name: str, index: int) -> int:
    """A plausible size for an example: 1 for a batch, 224 for an image side, 128 otherwise."""
    if index == 0 or "batch" in name.lower():
        return 1
    return 224 if any(k in name.lower() for k in ("height", "width")) or name in ("h", "w", "H", "W") else 128


def _dim_positions(model: onnx.ModelProto) -> list[tuple[str, int]]:
    """Each named symbolic dimension of the runtime inputs, with its first position, in order."""
    seen: dict[str, int] = {}
    for vi in runtime_inputs(model):
        for i, dim in enumerate(vi.type.tensor_type.shape.dim):
            if not _fixed(dim) and dim.dim_param:
                seen.setdefault(dim.dim_param, i)
    return list(seen.items())


def symbolic_dims(model: onnx.ModelProto) -> list[str]:
    """The named (dim_param) dimensions of the model's runtime inputs, in order of appearance."""
    return [name for name, _ in _dim_positions(model)]


def parse_dims(options: Iterable[str]) -> dict[str, int]:
    """Parse repeated `--dim NAME=SIZE` options."""
    dims: dict[str, int] = {}
    for opt in options:
        name, sep, size = opt.partition("=")
        if not sep or not name:
            raise InputShapeError(f"--dim {opt!r}: expected NAME=SIZE, e.g. sequence=128")
        if not is_utf8(name):
            raise InputShapeError(f"--dim {opt!r}: the dimension name is not valid UTF-8 (ONNX names are)")
        if not re.fullmatch(r"[0-9]{1,19}", size) or not 0 < int(size) <= MAX_DIMENSION:
            raise InputShapeError(f"--dim {opt!r}: the size must be one positive integer, e.g. {name}=128")
        if name in dims:
            raise InputShapeError(f"--dim {opt!r}: dimension {name!r} is given twice")
        dims[name] = int(size)
    return dims


def shapes_with_dims(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], dims: Mapping[str, int],
                     source: str = "the model", skip: Iterable[str] = ()) -> dict[str, tuple[int, ...]]:
    """`shapes` plus the shape --dim gives each other runtime input with named dimensions (an
    input's own --input-shape wins; inputs in `skip`, bound by --input-value, are left alone). A
    dimension name the model does not have is an error naming the ones it has."""
    bad = [n for n, size in dims.items() if not 0 < size <= MAX_DIMENSION]
    if bad:
        raise InputShapeError(f"--dim {bad[0]}={dims[bad[0]]}: the size must be a positive integer")
    known = symbolic_dims(model)
    unknown = [n for n in dims if n not in known]
    if unknown:
        listed = ", ".join(known) if known else "none: every input dimension is fixed or unnamed"
        raise InputShapeError(f"--dim {unknown[0]}={dims[unknown[0]]}: {source} has no symbolic dimension "
                              f"{unknown[0]!r} (its symbolic dimensions: {listed})")
    result = dict(shapes)
    for vi in runtime_inputs(model):
        tensor_type = vi.type.tensor_type
        if vi.name in shapes or vi.name in set(skip) or is_static_input(vi) or not tensor_type.HasField("shape"):
            continue
        if not any(d.dim_param in dims for d in tensor_type.shape.dim if not _fixed(d)):
            continue
        result[vi.name] = tuple(d.dim_value if _fixed(d) else dims.get(d.dim_param, 0) for d in tensor_type.shape.dim)
        unset = [f"{i} ({d.dim_param or '?'})" for i, d in enumerate(tensor_type.shape.dim)
                 if not _fixed(d) and d.dim_param not in dims]
        if unset:
            raise InputShapeError(f"--dim: input {vi.name!r} of {source} still has symbolic dimension "
                                  f"{', '.join(unset)} ({_shape_text(tensor_type.shape.dim)}); give it with --dim "
                                  f"or the whole shape with --input-shape {vi.name}=...")
    return result


def _shape_text(dims: Iterable[onnx.TensorShapeProto.Dimension]) -> str:
    parts = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    return "x".join(parts)
