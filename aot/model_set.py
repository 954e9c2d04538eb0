"""The models of one package, from the command line: which --input-shape, --input-value and
--name go to which model, and the shape variants (one input given several shapes).

`aot compile a.onnx b.onnx -o pkg` puts several models in one package; an option naming an input
goes to every model that has that input. `--input-shape x=1x3x224x224 --input-shape x=1x3x320x320`
compiles the model once per shape, as models named `<name>_1x3x224x224` and `<name>_1x3x320x320`
whose weights the package stores once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from aot.errors import AotError, InputShapeError, InputValueError
from aot.frontend.input_shapes import parse_input_shape_variants, runtime_inputs
from aot.frontend.input_values import InputValue, parse_input_values
from aot.frontend.loader import load_onnx


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
    inputs = _input_names(models) if len(models) > 1 else [set(shapes) | set(values)]
    _check_routed(models, inputs, shapes, "--input-shape", InputShapeError)
    _check_routed(models, inputs, values, "--input-value", InputValueError)
    specs: list[ModelSpec] = []
    for i, (model, own) in enumerate(zip(models, inputs)):
        name = names[i] if names else None
        mine = {n: v for n, v in shapes.items() if n in own}
        bound = {n: v for n, v in values.items() if n in own}
        specs += [ModelSpec(model, variant, variant_name, bound) for variant_name, variant in
                  _variants(model, name, mine)]
    return specs


def _input_names(models: Sequence[Path]) -> list[set[str]]:
    """Each model's runtime inputs (to route options by input name)."""
    return [{vi.name for vi in runtime_inputs(load_onnx(m))} for m in models]


def _check_routed(models: Sequence[Path], inputs: list[set[str]], given: Mapping[str, object], option: str,
                  error: type[AotError]) -> None:
    for name in given:
        if not any(name in own for own in inputs):
            known = "; ".join(f"{m}: {', '.join(sorted(own)) or 'none'}" for m, own in zip(models, inputs))
            raise error(f"{option} {name}=...: no model has an input {name!r} ({known})")


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
    """A package of one model's shape variants is named after the model (its header declares them
    all); otherwise None: compile_models names it (the one model's name, or the names joined)."""
    if len(models) == 1 and len(specs) > 1:
        return names[0] if names else models[0].stem
    return None
