"""The compile pipeline: ONNX -> graph IR -> passes -> kernels -> memory plan -> package."""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from aot.backends.run_plan import Port, RunPlan, plan_run
from aot.codegen.c_names import model_identifier
from aot.errors import AotError
from aot.frontend.importer import import_model
from aot.frontend.input_values import InputValue, manifest_entry
from aot.frontend.loader import load_onnx
from aot.host.run import HostPackage
from aot.ir.graph import Graph
from aot.package.blob import FileData
from aot.package.c_sources import check_weights_format, render_c_sources
from aot.package.package import MANIFEST, Package, finalize_manifest
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan
from aot.progress import SILENT, Progress
from aot.resources import resource_dir
from aot.targets import Target, resolve_targets
from aot.version import __version__

if TYPE_CHECKING:  # the LLVM backend (llvmlite) is imported only when it is used
    from aot.backends.llvm import LlvmTarget

BACKENDS = ("c", "llvm")


def load(model: str | os.PathLike[str] | onnx.ModelProto,
         input_shapes: Mapping[str, tuple[int, ...]] | None = None,
         input_values: Mapping[str, InputValue] | None = None) -> tuple[Graph, str]:
    """The graph IR of a model file or ModelProto, and a label for messages."""
    if isinstance(model, onnx.ModelProto):
        source = model.graph.name or "<model>"
        return import_model(model, input_shapes, source=source, name=model.graph.name or "model",
                            input_values=input_values), source
    path = Path(model)
    proto = load_onnx(path)
    return import_model(proto, input_shapes, source=str(path), name=path.stem, input_values=input_values), str(path)


def _without_cyclic_gc(function: Callable[..., Package]) -> Callable[..., Package]:
    """Run `function` with Python's cyclic garbage collector paused. A compile builds millions of
    objects that live to its end (the graph, kernel IR, plans); each full collection walks them
    all, which took 40% of a 40,000-node compile (64 -> 37 s). The IR makes little cyclic garbage
    (measured: the same peak memory), and what there is goes at the next collection after."""
    @functools.wraps(function)
    def paused(*args: Any, **kwargs: Any) -> Package:
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()
    return paused


@_without_cyclic_gc
def compile(  # noqa: A001 - the public API name users expect: aot.compile(...)
    model: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    name: str | None = None,
    backend: str = "c",
    target: str | Sequence[str] | None = None,
    weights_format: str = "auto",
    progress: Progress | None = None,
    parallel: bool = False,
    conv_algorithm: str = "auto",
    input_values: Mapping[str, InputValue] | None = None,
) -> HostPackage:
    """Compile an ONNX model (path or ModelProto) into an in-memory Package (a HostPackage, whose
    run() builds and runs it on this machine).

    backend="llvm" adds `<name>.<triple>.o` for each `target` (default: the host's) next to the
    C sources, which stay as the fallback for other targets. `progress` hears of each stage
    (see aot/progress.py); by default nothing is reported.

    weights_format="c" writes the weights as C text (<name>_weights.c), "binary" as raw bytes
    (<name>_weights.bin, pulled in by <name>_weights.S), "auto" (default) binary only when they
    exceed BINARY_WEIGHTS_THRESHOLD (16 MiB).

    parallel=True marks the loops of large kernels that <name>_run_parallel may split over the
    threads of an executor (the package's pthread pool on Linux targets); without it the package
    still has <name>_run_parallel, which then runs serially.

    conv_algorithm="auto" (default) computes the 3x3 unit-stride convolutions with enough channels
    as Winograd F(2x2, 3x3) (aot/ops/conv/winograd.py: 2.25x fewer multiply-adds, results within
    rounding of a direct sum); "direct" sums every convolution's taps directly.

    input_values={"name": value} binds graph inputs at compile time (--input-value): each is a constant
    before shape inference and folding, so the shapes it decides are static, and is no package input.
    A value (array, list, number or the option's text) fits the input's declared type.
    """
    progress = progress or SILENT
    if backend not in BACKENDS:
        raise AotError(f"--backend {backend!r}: unknown backend (available: {', '.join(BACKENDS)})")
    check_weights_format(weights_format)  # before the compile, which can take minutes
    targets = resolve_targets(target)
    if backend == "c" and len(targets) > 1:
        raise AotError("--target: the C backend takes one target (several are for --backend llvm objects)")
    options = PipelineOptions(tuple(targets), parallel, conv_algorithm)
    objects = _llvm_objects(targets) if backend == "llvm" else []
    progress.start("import")
    graph, source = load(model, input_shapes, input_values)
    check_address_space(targets, ((f"tensor {t.name!r}", t.nbytes) for t in graph.tensors.values()))
    ident = _package_name(graph.name if name is None else name)
    progress.start("graph passes")
    run_passes(graph)
    planned = lower_and_plan(graph, options, progress)
    check_address_space(targets, [("the arena", planned.memory.arena_bytes),
                                  ("the weights", sum(t.nbytes for t in planned.program.weights))])
    run = plan_run(planned, ident)
    files, info = _package_files(run, Path(source).name, graph.source_node_count, options, objects,
                                 weights_format, progress)
    manifest: dict[str, Any] = {
        "name": ident,
        "source_model": Path(source).name,
        "backend": backend,
        "conv_algorithm": conv_algorithm,
        "compiler": {"name": "aot", "version": __version__},
        "inputs": [_io_entry(p) for p in run.inputs],
        "outputs": [_io_entry(p) for p in run.outputs],
        "arena_bytes": planned.memory.arena_bytes,
        "arena_alignment": planned.memory.alignment,
        "arena_lower_bound_bytes": planned.memory.lower_bound_bytes,
        "arena_unshared_bytes": planned.memory.unshared_bytes,
        "weights_bytes": run.weights_bytes,
        "weights_format": info["weights_format"],
        "onnx_nodes": graph.source_node_count,
        "kernels": len(planned.kernels),
        "kernel_order": [{"op": k.op, "sources": k.sources} for k in planned.kernels],
        **_target_entries(ident, targets, objects),
    }
    if graph.bound_inputs:  # only then: packages without bound inputs keep their manifest as it was
        manifest["input_values"] = [manifest_entry(n, v) for n, v in graph.bound_inputs.items()]
    files[MANIFEST] = finalize_manifest(files, manifest)
    progress.finish()
    return HostPackage(ident, files, manifest, bound_inputs=dict(graph.bound_inputs))


def _package_name(name: str) -> str:
    if not name or not str(name).strip():
        raise AotError("--name: the model name must not be empty")
    return model_identifier(str(name))


def _package_files(run: RunPlan, source: str, onnx_nodes: int, options: PipelineOptions,
                   objects: Sequence[LlvmTarget], weights_format: str,
                   progress: Progress) -> tuple[dict[str, FileData], dict[str, Any]]:
    """The package's files but the manifest: C sources and build files, the LLVM objects, the
    runtime; and what render_c_sources tells the manifest."""
    progress.start("C code generation")
    targets = options.targets
    files, info = render_c_sources(run, source, onnx_nodes, llvm_targets=[_build_entry(run.name, t) for t in objects],
                                   target=targets[0] if len(targets) == 1 else None,
                                   weights_format=weights_format, threads=options.threads)
    if objects:
        from aot.backends.llvm import compile_objects

        progress.start(f"LLVM code generation ({', '.join(t.name for t in objects)})")
        files.update(compile_objects(run, objects))
    for runtime_file in sorted(resource_dir("runtime_c").iterdir()):
        if runtime_file.suffix in (".h", ".c") and (options.threads or not runtime_file.name.startswith("aot_threads")):
            files[f"runtime/{runtime_file.name}"] = runtime_file.read_bytes()
    return files, info


def _target_entries(ident: str, targets: Sequence[Target], objects: Sequence[LlvmTarget]) -> dict[str, Any]:
    """The manifest's target/triple: the (first) target the package is built for, as its LLVM
    object names it when it has objects (LLVM spells the triple in 4 parts); targets: every object."""
    entries: dict[str, Any] = {}
    first = objects[0] if objects else targets[0] if targets else None
    if first is not None:
        entries.update(target=first.name, triple=first.triple)
    if objects:
        entries["targets"] = [{"name": t.name, "triple": t.triple, "cpu": t.cpu, "features": t.features,
                               "object": _build_entry(ident, t)["object"]} for t in objects]
    return entries


def check_address_space(presets: Sequence[Target], objects: Iterable[tuple[str, int]]) -> None:
    """Every tensor, the arena and the weights must fit in one object on each target (on 32-bit
    targets 2 GiB - 1 bytes: beyond that C compilers reject the array and pointer differences
    overflow)."""
    limits = sorted({(p.max_object_bytes, p.name, p.pointer_bits) for p in presets})
    if not limits:
        return
    limit, target, bits = limits[0]
    for what, nbytes in objects:
        if nbytes > limit:
            raise AotError(f"{what} needs {nbytes} bytes ({nbytes / 2**30:.3g} GiB), more than one object can "
                           f"have in the {bits}-bit address space of target {target} ({limit} bytes)")


def _llvm_objects(targets: list[Target]) -> list[LlvmTarget]:
    """The LLVM objects' targets (the LLVM backend, and llvmlite, load only when used)."""
    from aot.backends.llvm import llvm_targets

    return llvm_targets(targets)


def _build_entry(model: str, spec: LlvmTarget) -> dict[str, Any]:
    """What the package's Makefile and CMakeLists need to know about one LLVM object."""
    from aot.backends.llvm import object_name

    return {"name": spec.name, "triple": spec.triple,
            "object": object_name(model, spec), "cc_machines": list(spec.cc_machines),
            "cc_regexes": [f"^{p.replace('%', '.*')}$" for p in spec.cc_machines], "cflags": list(spec.cflags),
            "pic": spec.reloc == "pic"}


def _io_entry(port: Port) -> dict[str, Any]:
    return {"name": port.name, "c_name": port.field, "shape": list(port.shape), "dtype": port.dtype,
            "bytes": port.nbytes}
