"""The model options the commands share (--input-shape, --dim, --input-value, --name), read against
the model files, and the files a command reads, which an existing -o may not replace."""

from __future__ import annotations

import os
from pathlib import Path

from aot.errors import AotError


def check_name(name: str | None) -> None:
    from aot.frontend.input_shapes import is_utf8

    if name is not None and not is_utf8(name):
        raise AotError(f"--name {name!r}: not valid UTF-8")


def shapes(options: list[str] | None) -> dict[str, tuple[int, ...]]:
    from aot.frontend.input_shapes import parse_input_shapes

    return parse_input_shapes(options or [])


def with_dims(models: list[Path], input_shape: list[str] | None, input_value: list[str] | None,
              dim: list[str] | None) -> list[str]:
    """The --input-shape options plus the shapes --dim gives the models' other inputs."""
    from aot.frontend.dim_options import dim_shape_options

    return dim_shape_options(models, input_shape or [], input_value or [], dim or [])


def with_array_shapes(model: Path, inputs: Path | None, input_shape: list[str] | None,
                      input_value: list[str] | None) -> list[str]:
    """verify and bench --inputs: the model's symbolic dimensions take the arrays' sizes."""
    if inputs is None:
        return list(input_shape or [])
    from aot.commands.verify import array_shape_options

    return array_shape_options(model, inputs, input_shape or [], input_value or [])


def model_shapes(model: Path, input_shape: list[str] | None, input_value: list[str] | None,
                 dim: list[str] | None) -> dict[str, tuple[int, ...]]:
    """One model's input shapes from --input-shape and --dim."""
    return shapes(with_dims([model], input_shape, input_value, dim))


def refuse_existing(output: Path, force: bool) -> None:
    """report and quantize, as compile and build: an existing -o file is replaced only with --force."""
    if not force and os.path.lexists(output):
        raise AotError(f"-o {output}: already exists; give --force to replace it")


def values(options: list[str] | None) -> dict[str, str]:
    from aot.frontend.input_values import parse_input_values

    return parse_input_values(options or [])


def value_files(options: list[str] | None) -> list[Path]:
    """--input-value .npy files: an existing -o holding one is never replaced, as for the model."""
    from aot.frontend.input_values import value_files as npy_files

    return npy_files(values(options))


def files_read(model: Path, output: Path, force: bool, targets: list[str]) -> list[Path]:
    """The files a command reads (the model, its external data, a --target .toml): an existing
    -o that holds one is never replaced. Listed only when -o exists and may be replaced, as
    listing external data parses the model once more."""
    if not (force and os.path.lexists(output)):
        return []
    from aot.frontend.loader import external_data_files

    tomls = [Path(t) for t in targets if t.endswith(".toml") or os.sep in t]
    return [model, *external_data_files(model), *tomls]


def host_preset() -> str:
    """The preset `aot targets` finds for this CPU: build's target without --target."""
    from aot.targets import host_preset_name

    return host_preset_name()
