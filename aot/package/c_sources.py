"""Renders a RunPlan into the C and build files of a package: the header, the model (the C
backend's aot/backends/c/model_source.py), the weights, the runner, Makefile and CMakeLists."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import numpy as np

from aot import c_api
from aot.backends.c.kernel_printer import c_type, float_literal, int_literal
from aot.backends.c.model_source import model_source_context
from aot.backends.run_plan import Port, RunPlan
from aot.codegen.build_text import FILTERS as BUILD_FILE_FILTERS
from aot.codegen.c_names import c_comment, c_string
from aot.errors import AotError
from aot.ir.graph import Tensor
from aot.package.blob import FileData, WeightsBlob
from aot.planner.memory import align_up
from aot.planner.weights import WEIGHT_ALIGN, WeightSlot
from aot.resources import resource_dir
from aot.targets import Target
from aot.version import __version__

WEIGHTS_FORMATS = ("auto", "c", "binary")
# Above this many bytes of weights, --weights-format auto writes them as binary: as C text they
# take gigabytes of compiler memory (VGG-19's 575 MB did not compile at all).
BINARY_WEIGHTS_THRESHOLD = 16 * 2**20


@functools.cache
def _environment() -> jinja2.Environment:
    """One per process: jinja2 caches the compiled templates in it (recompiling them took about
    0.1 s of every compile, half of a small model's compile time)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(BUILD_FILE_FILTERS)  # |make_comment, |make_value, |cmake_comment, |cmake_quoted
    return env


def numeric_version(version: str) -> str:
    """`version`'s leading release numbers ("0.2.0" of "0.2.0.dev1"): what CMake's project(VERSION)
    and pkg-config's comparisons understand. The package's version is that of the aot that made it."""
    match = re.match(r"\d+(\.\d+){0,3}", version)
    return match.group(0) if match else "0"


def _port_context(port: Port) -> dict[str, Any]:
    """One input or output as the templates print it (header macros, structs, info tables)."""
    shape_text = "x".join(map(str, port.shape)) or "scalar"
    return {
        "kind": port.kind, "KIND": port.kind.upper(), "index": port.index, "name": port.name,
        "name_literal": c_string(port.name), "field": port.field,
        "ctype": c_type(port.dtype), "dtype": port.dtype, "dtype_enum": port.dtype_code.enum,
        "rank": port.rank, "dims_text": ", ".join(str(d) for d in port.shape), "shape": list(port.shape),
        "size": port.size, "bytes": port.nbytes,
        "comment": c_comment(f"{port.name!r} {port.dtype}[{shape_text}]"),
    }


def _literal_blocks(t: Tensor) -> Iterator[str]:
    """The initializer of one weights member, in blocks of lines, so that only one block of
    Python strings exists at a time however big the tensor."""
    flat = t.data.reshape(-1) if t.data is not None else np.zeros(0)
    if flat.size == 0:
        yield "        0\n"
        return
    kind, dtype = t.dtype.kind, t.dtype.name
    per_line, per_block = 8, 8 * 1024
    for start in range(0, flat.size, per_block):
        values = flat[start:start + per_block].tolist()
        if kind == "f":
            literals = [float_literal(float(v), dtype) for v in values]
        elif kind == "b":
            literals = ["1" if v else "0" for v in values]
        else:
            literals = [int_literal(int(v), dtype) for v in values]
        lines = [", ".join(literals[i:i + per_line]) for i in range(0, len(literals), per_line)]
        last = start + per_block >= flat.size
        yield ",\n".join("        " + line for line in lines) + ("\n" if last else ",\n")


def check_weights_format(requested: str) -> None:
    if requested not in WEIGHTS_FORMATS:
        raise AotError(f"--weights-format {requested!r}: unknown format (use {', '.join(WEIGHTS_FORMATS)})")


def resolve_weights_format(requested: str, weights_struct_bytes: int) -> str:
    """"c" or "binary" for --weights-format `requested` (auto: binary above the threshold)."""
    check_weights_format(requested)
    if requested == "auto":
        return "binary" if weights_struct_bytes > BINARY_WEIGHTS_THRESHOLD else "c"
    return requested


def weights_blob(slots: Sequence[WeightSlot], weights_struct_bytes: int) -> WeightsBlob:
    """The image of the weights struct for <name>_weights.bin. It is padded to a multiple of 64
    bytes, which covers the C struct's size (its tail padding to its strictest member alignment)."""
    # The tensor's declared dtype is what the C struct member has (no copy when the data has it).
    parts = [(s.offset, np.asarray(s.tensor.data, dtype=s.tensor.dtype))
             for s in slots if s.tensor.data is not None and s.tensor.size]
    return WeightsBlob(parts, align_up(max(weights_struct_bytes, 1), WEIGHT_ALIGN))


def _render(template: jinja2.Template, context: Mapping[str, Any]) -> bytes:
    """A template's output as UTF-8, built piece by piece (weights.c can be hundreds of MB)."""
    out = bytearray()
    for piece in template.generate(context):
        out += piece.encode()
    return bytes(out)


def _weights_context(slots: Sequence[WeightSlot]) -> list[dict[str, Any]]:
    return [{
        "member": s.member, "ctype": c_type(s.tensor.dtype.name), "pad": s.pad,
        "count": max(s.tensor.size, 1), "literal_blocks": functools.partial(_literal_blocks, s.tensor),
        "comment": c_comment(f"{s.tensor.name!r} {s.tensor.dtype.name}{list(s.tensor.shape)} @ {s.offset}"),
    } for s in slots]


@dataclass(frozen=True)
class ModelSources:
    """One model of a package, as the C files need it."""

    run: RunPlan
    source: str                           # the ONNX file it came from (for comments)
    onnx_nodes: int
    llvm_targets: Sequence[Mapping[str, Any]] = ()  # its LLVM objects (aot/compiler.py `_build_entry`)


@dataclass(frozen=True)
class PackageSources:
    """What a package holds: its models, the weights struct they share, how it is built."""

    name: str                             # the library's name; the model's own for one model
    models: Sequence[ModelSources]
    weight_slots: Sequence[WeightSlot]    # every member of <name>_weights
    weights_struct_bytes: int
    target: Target | None = None
    weights_format: str = "auto"
    threads: bool = True
    shared_arena: bool = False

    @property
    def is_bundle(self) -> bool:
        """Several models (or shapes) in one package: an umbrella header <name>.h includes theirs."""
        return len(self.models) > 1

    @property
    def weights_bytes(self) -> int:
        return sum(s.tensor.nbytes for s in self.weight_slots)


def render_c_sources(run: RunPlan, source: str, onnx_nodes: int,
                     llvm_targets: Sequence[Mapping[str, Any]] = (),
                     target: Target | None = None, weights_format: str = "auto", threads: bool = True,
                     ) -> tuple[dict[str, FileData], dict]:
    """The C and build files of a one-model package, plus the weights format chosen."""
    model = ModelSources(run, source, onnx_nodes, llvm_targets)
    return render_package(PackageSources(run.name, [model], run.weight_slots, run.weights_struct_bytes,
                                         target, weights_format, threads))


def render_package(package: PackageSources) -> tuple[dict[str, FileData], dict]:
    """The package's C and build files, plus the weights format chosen, for the manifest.

    Each model has its header, model source and runner; the package has one weights struct
    (<name>_weights.c, or <name>_weights.S + <name>_weights.bin: see WEIGHTS_FORMATS), one
    Makefile and CMakeLists building one library of every model, and for several models an
    umbrella header <name>.h. `threads`: the build files compile runtime/aot_threads.c (the
    pthread pool) into the library and the runners (Linux targets; not for bare metal).
    """
    name = package.name
    weights_format = resolve_weights_format(package.weights_format, package.weights_struct_bytes)
    blob = (weights_blob(package.weight_slots, package.weights_struct_bytes) if weights_format == "binary"
            else None)
    shared = _package_context(package, weights_format, blob)
    env = _environment()
    files: dict[str, FileData] = {}
    for model in package.models:
        context = {**shared, **_model_context(package, model)}
        for path, template in _model_templates(model.run.name).items():
            files[path] = _render(env.get_template(template), context)
    for path, template in _package_templates(package, blob is not None).items():
        files[path] = _render(env.get_template(template), shared)
    if blob is not None:
        files[f"{name}_weights.bin"] = blob
    return files, {"weights_format": weights_format}


def _model_templates(name: str) -> dict[str, str]:
    return {f"{name}.h": "c/model.h.j2", f"{name}.c": "c/model.c.j2", f"{name}_runner.c": "c/runner.c.j2"}


def _package_templates(package: PackageSources, binary_weights: bool) -> dict[str, str]:
    """The package's files besides each model's: path -> template."""
    name = package.name
    templates = {
        f"{name}_weights.h": "c/weights.h.j2",
        "Makefile": "build/Makefile.j2",
        "CMakeLists.txt": "build/CMakeLists.txt.j2",
        **({f"{name}.h": "c/package.h.j2"} if package.is_bundle else {}),
        **({"toolchain.cmake": "build/toolchain.cmake.j2"} if package.target else {}),
        # The pool's header names its functions after the package (runtime/aot_threads.c, copied
        # as it is, defines them through its macros): several packages' pools in one program.
        **({"runtime/aot_threads.h": "c/threads.h.j2"} if package.threads else {}),
    }
    if binary_weights:
        templates[f"{name}_weights.S"] = "c/weights.S.j2"
    else:
        templates[f"{name}_weights.c"] = "c/weights.c.j2"
    return templates


def _model_context(package: PackageSources, model: ModelSources) -> dict[str, Any]:
    """What one model's header, source and runner print (over the package's context)."""
    run, name = model.run, model.run.name
    return {
        "name": name, "NAME": name.upper(), "entry": c_api.entry_points(name),
        "source_comment": c_comment(model.source), "name_literal": c_string(name),
        "inputs": [_port_context(p) for p in run.inputs], "outputs": [_port_context(p) for p in run.outputs],
        "arena_bytes": run.arena_bytes, "arena_align": run.arena_align, "weights_bytes": run.weights_bytes,
        **model_source_context(run),
        "onnx_nodes": model.onnx_nodes,
    }


def _package_context(package: PackageSources, weights_format: str, blob: WeightsBlob | None) -> dict[str, Any]:
    """What the package's own files print: weights, build files, umbrella header, pool header."""
    name = package.name
    models = package.models
    headers = [f"{m.run.name}.h" for m in models] + ([f"{name}.h"] if package.is_bundle else [])
    return {
        "name": name, "NAME": name.upper(), "package": name, "PACKAGE": name.upper(),
        "version": __version__, "cmake_version": numeric_version(__version__),
        "threads": package.threads, "target": package.target, "shared_arena": package.shared_arena,
        "models": [{"name": m.run.name, "NAME": m.run.name.upper(), "header": f"{m.run.name}.h",
                    "runner": f"{m.run.name}_runner", "source_comment": c_comment(m.source)} for m in models],
        "model_sources": " ".join(f"{m.run.name}.c" for m in models),
        "headers": headers,
        "runners": [f"{m.run.name}_runner" for m in models],
        "llvm_targets": _package_llvm_targets(models),
        "arena_bytes": max(m.run.arena_bytes for m in models),
        "arena_align": max(m.run.arena_align for m in models),
        "weights_bytes": package.weights_bytes,
        "weights_format": weights_format,
        "weights_source": f"{name}_weights.S" if blob else f"{name}_weights.c",
        "weights_blob_bytes": len(blob) if blob else 0,
        "weights_align": WEIGHT_ALIGN,
        "weights": _weights_context(package.weight_slots),
    }


def _package_llvm_targets(models: Sequence[ModelSources]) -> list[dict[str, Any]]:
    """The LLVM targets of the package: each with the objects of every model for it."""
    merged: dict[str, dict[str, Any]] = {}
    for model in models:
        for entry in model.llvm_targets:
            target = merged.setdefault(entry["name"], {**entry, "objects": []})
            target["objects"].append(entry["object"])
    return list(merged.values())
