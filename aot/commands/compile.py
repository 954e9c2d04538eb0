"""`aot compile`: the package of MODEL... written to -o, and its summary (sizes, entry points)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aot.commands.model_options import check_name, files_read, value_files, with_dims
from aot.progress import Progress
from aot.terminal import printable


def compile_package(models: list[Path], names: list[str] | None, package_name: str | None, shared_arena: bool,
                    input_shape: list[str] | None, input_value: list[str] | None, *, progress: Progress,
                    **options: Any) -> Any:
    """compile, build and verify: the package of MODEL... (one or several, or one at several shapes);
    its .models are in the order of the model files' specs (aot/model_set.py)."""
    from aot.compiler import compile_models
    from aot.model_set import default_package_name, model_specs

    for n in [*(names or []), *([package_name] if package_name is not None else [])]:
        check_name(n)
    specs = model_specs(models, names or [], input_shape or [], input_value or [])
    return compile_models(specs, package_name or default_package_name(models, names or [], specs),
                          shared_arena=shared_arena, progress=progress, **options)


def compile_command(model: list[Path], output: Path, *, input_shape: list[str] | None, dim: list[str] | None,
                    input_value: list[str] | None, name: list[str] | None, package_name: str | None,
                    shared_arena: bool, target: list[str] | None, force: bool, as_json: bool,
                    progress: Progress, **options: Any) -> None:
    """Compile MODEL... into the package folder `output` and print what it holds. `options` are
    compile_models()' (backend, weights_format, parallel, conv_algorithm, max_arena)."""
    from aot.package.output_dir import check_output_folder

    read = [f for m in model for f in files_read(m, output, force, target or [])] + value_files(input_value)
    check_output_folder(output, force, read)  # before compiling: a refusal costs nothing
    input_shape = with_dims(model, input_shape, input_value, dim)
    package = compile_package(model, name, package_name, shared_arena, input_shape, input_value,
                              progress=progress, target=target or None, **options)
    with progress.step("writing the package"):
        written = package.write(output, force=force, inputs=read)
    m = package.manifest
    if as_json:
        print(json.dumps({"package": str(written), **{k: v for k, v in m.items() if k != "files"}}, sort_keys=True))
        return
    _print_package_summary(package, model, written)


def _print_package_summary(package: Any, model: list[Path], written: Path) -> None:
    m = package.manifest
    print(f"compiled {', '.join(printable(p) for p in model)} -> {printable(written)}/")
    for view in package.models:
        _print_model_summary(view.manifest, len(package.models) > 1)
    if "models" in m:
        arena = (f"one arena of {m['arena_bytes']} bytes (--shared-arena)" if m["shared_arena"]
                 else "an arena per model")
        print(f"  package: {len(m['models'])} models, {arena}, weights {m['weights_bytes']} bytes "
              "(each distinct array once)")
    print(f"  C API: {package.name}.h  build: make -C {printable(written)}")
    for entry in m.get("targets", []):
        objects = entry.get("objects", [entry.get("object")])
        print(printable(f"  LLVM object{'s' if len(objects) > 1 else ''} for {entry['name']} ({entry['triple']}, "
                        f"cpu {entry['cpu']}): {', '.join(objects)}"))


def _print_model_summary(m: dict[str, Any], named: bool) -> None:
    prefix = f"  {printable(m['name'])}: " if named else "  "
    print(f"{prefix}{m['onnx_nodes']} ONNX nodes -> {m['kernels']} kernels")
    print(f"{' ' * len(prefix) if named else '  '}arena {m['arena_bytes']} bytes (lower bound "
          f"{m['arena_lower_bound_bytes']}, unshared {m['arena_unshared_bytes']}), weights {m['weights_bytes']} bytes")
    grown = m["weights_bytes"] - m.get("model_weights_bytes", m["weights_bytes"])
    if grown > 0 and any("/winograd" in k["op"] for k in m.get("kernel_order", [])):
        print(f"{' ' * len(prefix) if named else '  '}weights {_size(m['weights_bytes'])} "
              f"({_size(m['model_weights_bytes'])} as in the model; Winograd layers add {_size(grown)}: "
              "--conv-algorithm direct keeps them as is)")


def _size(n: int) -> str:
    """Bytes as a user reads them: 17.3 MB, 25.9 kB."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} bytes"
