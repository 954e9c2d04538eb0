"""--dim NAME=SIZE: a named (symbolic) dimension set once, turned into the --input-shape options it
implies for each model's inputs (the command line's form; aot.compile(dims=) goes through
input_shapes.shapes_with_dims directly)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from aot.errors import InputShapeError
from aot.frontend.input_shapes import (
    parse_dims,
    parse_input_shape_variants,
    runtime_inputs,
    shapes_with_dims,
    symbolic_dims,
)
from aot.frontend.input_values import parse_input_values
from aot.frontend.loader import load_onnx


def dim_shape_options(models: Sequence[str | os.PathLike[str]], shape_options: Sequence[str],
                      value_options: Sequence[str], dim_options: Sequence[str]) -> list[str]:
    """The --input-shape options with those --dim implies for each model file's other inputs (as
    `<file name>:<input>=...` with several models). A --dim name no model has is an error."""
    if not dim_options:
        return list(shape_options)
    dims = parse_dims(dim_options)
    given = set(parse_input_shape_variants(shape_options)) | set(parse_input_values(value_options))
    protos = [load_onnx(m) for m in models]
    known = [set(symbolic_dims(p)) for p in protos]
    for name in dims:
        if not any(name in k for k in known):
            if len(models) == 1:
                shapes_with_dims(protos[0], {}, {name: dims[name]}, str(models[0]))  # raises, naming the dims
            listed = "; ".join(f"{m}: {', '.join(symbolic_dims(p)) or 'none'}" for m, p in zip(models, protos))
            raise InputShapeError(f"--dim {name}={dims[name]}: no model has a symbolic dimension {name!r} "
                                  f"({listed})")
    options = list(shape_options)
    for model, proto, own in zip(models, protos, known):
        path = Path(model)
        prefix = f"{path.name}:" if len(models) > 1 else ""
        skip = {n for n in given if n in {vi.name for vi in runtime_inputs(proto)}}
        skip |= {n.split(":", 1)[1] for n in given if n.split(":", 1)[0] in (path.name, path.stem)}
        implied = shapes_with_dims(proto, {}, {n: s for n, s in dims.items() if n in own}, str(model), skip)
        options += [f"{prefix}{n}={'x'.join(map(str, s))}" for n, s in implied.items()]
    return options
