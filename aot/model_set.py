"""The models of one package, from the command line: which --input-shape, --input-value and
--name go to which model, and the shape variants (one input given several shapes).

`aot compile a.onnx b.onnx -o pkg` puts several models in one package; an option naming an input
goes to every model that has that input, or, written `a:image=...` (the model file's name or stem,
a colon, the input), to that model alone. `--input-shape x=1x3x224x224 --input-shape x=1x3x320x320`
compiles the model once per shape, as models named `<name>_1x3x224x224` and `<name>_1x3x320x320`
whose weights the package stores once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import onnx

from aot.errors import AotError, InputShapeError, InputValueError
from aot.frontend.input_shapes import parse_input_shape_variants, runtime_inputs
from aot.frontend.input_values import InputValue, parse_input_values
from aot.frontend.loader import load_onnx

V = TypeVar("V")


@dataclass(frozen=True)
class ModelSpec:
    """One model of a package: the file (or ModelProto), its input shapes and values, its name."""

    model: str | os.PathLike[str] | onnx.ModelProto
    input_shapes: Mapping[str, tuple[int, ...]] | None = None
    name: str | None = None
    input_values: Mapping[str, InputValue] | None = None


def model_specs(models: Sequence[Path], names: Sequence[str], shape_options: Sequence[str],
                value_options: Sequence[str]) -> list[ModelSpec]:
    """The package's models in order (a model given several shapes is one spec per shape)."""
    if names and len(names) != len(models):
        raise AotError(f"--name: given {len(names)} time(s) for {len(models)} models "
                       "(give one --name per model, in the models' order)")
    shapes = parse_input_shape_variants(shape_options)
    values = parse_input_values(value_options)
    if len(models) == 1:
        routed_shapes, routed_values = [shapes], [values]
    else:
        inputs = _input_names(models)
        routed_shapes = _route(models, inputs, shapes, "--input-shape", InputShapeError)
        routed_values = _route(models, inputs, values, "--input-value", InputValueError)
    specs: list[ModelSpec] = []
    for i, model in enumerate(models):
        name = names[i] if names else None
        specs += [ModelSpec(model, variant, variant_name, routed_values[i]) for variant_name, variant in
                  _variants(model, name, routed_shapes[i])]
    return specs


def _input_names(models: Sequence[Path]) -> list[set[str]]:
    """Each model's runtime inputs (to route options by input name)."""
    return [{vi.name for vi in runtime_inputs(load_onnx(m))} for m in models]


def _route(models: Sequence[Path], inputs: list[set[str]], given: Mapping[str, V], option: str,
           error: type[AotError]) -> list[dict[str, V]]:
    """Each model's share of `given` (by input name): an input's option goes to every model with
    that input; `<model>:<input>` (the model file's name or stem) to that model only."""
    routed: list[dict[str, V]] = [{} for _ in models]
    for name, value in given.items():
        takers = [i for i, own in enumerate(inputs) if name in own]
        key = name
        if not takers and ":" in name:
            prefix, key = name.split(":", 1)
            takers = [i for i, m in enumerate(models) if prefix in (m.name, m.stem) and key in inputs[i]]
        if not takers:
            known = "; ".join(f"{m}: {', '.join(sorted(own)) or 'none'}" for m, own in zip(models, inputs))
            raise error(f"{option} {name}=...: no model has an input {name!r} ({known})")
        for i in takers:
            if key in routed[i]:
                raise error(f"{option} {name}=...: input {key!r} of {models[i]} is given twice")
            routed[i][key] = value
    return routed


def _variants(model: Path, name: str | None, shapes: Mapping[str, list[tuple[int, ...]]],
              ) -> list[tuple[str | None, dict[str, tuple[int, ...]]]]:
    """(name, input shapes) of each variant: one, unless some input is given several shapes."""
    varied = [n for n, options in shapes.items() if len(options) > 1]
    if not varied:
        return [(name, {n: options[0] for n, options in shapes.items()})]
    counts = {len(shapes[n]) for n in varied}
    if len(counts) > 1:
        listed = ", ".join(f"{n!r} {len(shapes[n])}" for n in varied)
        raise InputShapeError(f"--input-shape: the inputs given several shapes must be given as many each "
                              f"(variant k takes the k-th shape of every such input); {model} has {listed}")
    base = name if name is not None else model.stem
    variants = []
    for k in range(counts.pop()):
        chosen = {n: options[k] if n in varied else options[0] for n, options in shapes.items()}
        suffix = "_".join("x".join(map(str, chosen[n])) or "scalar" for n in varied)
        variants.append((f"{base}_{suffix}", chosen))
    return variants


def default_package_name(models: Sequence[Path], names: Sequence[str], specs: Sequence[ModelSpec]) -> str | None:
    """The package's default name: a model's own for its shape variants (its header declares them
    all), the models' names joined by "_" for several; None for one model (compile_models names it
    after the model)."""
    if len(specs) == 1:
        return None
    return "_".join(names) if names else "_".join(m.stem for m in models)
