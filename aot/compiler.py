"""The compile pipeline: ONNX -> graph IR -> passes -> kernels -> memory plan -> package."""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from aot.analysis import model_stats
from aot.backends.run_plan import Port, RunPlan, SharedWeightsView, plan_run
from aot.codegen.c_names import model_identifier
from aot.errors import AotError
from aot.frontend.importer import import_model
from aot.frontend.input_values import InputValue, manifest_entry
from aot.frontend.loader import load_onnx
from aot.host.run import HostPackage
from aot.ir.graph import Graph
from aot.model_set import ModelSpec
from aot.package.blob import FileData
from aot.package.c_sources import ModelSources, PackageSources, check_weights_format, render_package
from aot.package.package import MANIFEST, Package, finalize_manifest
from aot.passes.pipeline import run_passes
from aot.pipeline import PipelineOptions, lower_and_plan
from aot.planner.arena import PlannedProgram
from aot.planner.budget import parse_arena_bytes
from aot.planner.weights import layout_shared_weights
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


@dataclass(frozen=True)
class _PlannedModel:
    ident: str
    source: str
    graph: Graph
    planned: PlannedProgram
    model_weights_bytes: int  # the constants as the model holds them, before aot's layouts


@_without_cyclic_gc
def compile(  # noqa: A001 - the public API name users expect: aot.compile(...)
    model: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    name: str | None = None,
    backend: str = "c",
    target: str | Sequence[str] | None = None,
    weights_format: str = "auto",
    *,
    progress: Progress | None = None,
    parallel: bool = False,
    conv_algorithm: str = "auto",
    input_values: Mapping[str, InputValue] | None = None,
    max_arena: int | str | None = None,
    dims: Mapping[str, int] | None = None,
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

    max_arena (--max-arena): the largest arena the package may have, in bytes (an int, or text with
    a k or M suffix: "200k"); aot then plans the fastest it finds within it, computing the
    convolutions at the arena's peak in forms with less scratch (aot/planner/budget.py), and
    raises AotError naming the smallest arena it can reach when none fits. None (default): the
    fastest plan, whatever its arena.

    dims={"sequence": 128} (--dim) gives a named symbolic dimension one size in every input that has
    it; an input's own entry in input_shapes wins.
    """
    if dims:
        input_shapes = _shapes_with_dims(model, input_shapes or {}, dims, input_values or {})
    return compile_models([ModelSpec(model, input_shapes, name, input_values)], backend=backend, target=target,
                          weights_format=weights_format, progress=progress, parallel=parallel,
                          conv_algorithm=conv_algorithm, max_arena=max_arena)


def _shapes_with_dims(model: str | os.PathLike[str] | onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                      dims: Mapping[str, int], values: Mapping[str, InputValue]) -> dict[str, tuple[int, ...]]:
    """compile()'s input shapes with those `dims` gives the other inputs."""
    from aot.frontend.input_shapes import shapes_with_dims

    proto = model if isinstance(model, onnx.ModelProto) else load_onnx(model)
    source = (model.graph.name or "<model>") if isinstance(model, onnx.ModelProto) else str(model)
    return shapes_with_dims(proto, shapes, {str(k): int(v) for k, v in dims.items()}, source, skip=values)


@_without_cyclic_gc
def compile_models(
    models: Sequence[ModelSpec],
    package_name: str | None = None,
    shared_arena: bool = False,
    backend: str = "c",
    target: str | Sequence[str] | None = None,
    weights_format: str = "auto",
    *,
    progress: Progress | None = None,
    parallel: bool = False,
    conv_algorithm: str = "auto",
    max_arena: int | str | None = None,
) -> HostPackage:
    """Compile several models (or one model at several input shapes, as several ModelSpecs) into
    one package: one header and set of entry points per model, one library, one weights struct in
    which a weight several models have is stored once. `package_name` names the library (default:
    the one model's name; for several, the models' names joined by "_"). `shared_arena`: the
    models never run at the same time, and the package's header declares one arena for them all,
    of the largest model's size. The other options are compile()'s, the same for every model
    (max_arena bounds each model's arena)."""
    progress = progress or SILENT
    if not models:
        raise AotError("no model to compile")
    if backend not in BACKENDS:
        raise AotError(f"--backend {backend!r}: unknown backend (available: {', '.join(BACKENDS)})")
    check_weights_format(weights_format)  # before the compile, which can take minutes
    targets = resolve_targets(target)
    if backend == "c" and len(targets) > 1:
        raise AotError("--target: the C backend takes one target (several are for --backend llvm objects)")
    if shared_arena and len(models) < 2:
        raise AotError("--shared-arena: the package has one model (it shares an arena among several)")
    _check_distinct([_package_name(spec.name) for spec in models if spec.name is not None])
    budget = parse_arena_bytes(max_arena) if max_arena is not None else None
    options = PipelineOptions(tuple(targets), parallel, conv_algorithm, max_arena=budget, backend=backend)
    objects = _llvm_objects(targets) if backend == "llvm" else []
    planned = _plan_models(models, targets, options, progress)
    package = _bundle_name([p.ident for p in planned], package_name)
    weights = layout_shared_weights([p.planned.program.weights for p in planned],
                                    tuple(f"{p.ident.upper()}_" for p in planned))
    check_address_space(targets, [("the weights", sum(s.tensor.nbytes for s in weights.slots))])
    runs = [plan_run(p.planned, p.ident, SharedWeightsView(package, own, weights.struct_bytes))
            for p, own in zip(planned, weights.per_model)]
    sources = PackageSources(package, [ModelSources(run, Path(p.source).name, p.graph.source_node_count,
                                                    [_build_entry(run.name, t) for t in objects])
                                       for run, p in zip(runs, planned)],
                             weights.slots, weights.struct_bytes, targets[0] if len(targets) == 1 else None,
                             weights_format, options.threads, shared_arena)
    files, info = _package_files(sources, runs, options, objects, progress)
    entries = [_model_entry(p, run, targets, objects) for p, run in zip(planned, runs)]
    manifest = _package_manifest(package, entries, sources, backend, conv_algorithm, info, targets, objects)
    files[MANIFEST] = finalize_manifest(files, manifest)
    progress.finish()
    bound = dict(planned[0].graph.bound_inputs) if len(planned) == 1 else {}
    return HostPackage(package, files, manifest, bound_inputs=bound)


def _plan_models(models: Sequence[ModelSpec], targets: list[Target], options: PipelineOptions,
                 progress: Progress) -> list[_PlannedModel]:
    """Every model planned; a shape variant (a model file planned before) adopts the choices of
    its first shape, so that their kernels read the weights in one layout."""
    first_choices: dict[object, tuple[tuple[Hashable, object], ...]] = {}
    planned = []
    for spec in models:
        source = _source_key(spec.model)
        own = replace(options, preferred=first_choices.get(source, ()))
        model = _plan_model_named(spec, targets, own, progress, len(models) > 1)
        first_choices.setdefault(source, model.planned.program.choices)
        planned.append(model)
    return planned


def _source_key(model: str | os.PathLike[str] | onnx.ModelProto) -> object:
    """What makes two specs the same model: its file, or the ModelProto object."""
    return id(model) if isinstance(model, onnx.ModelProto) else os.path.realpath(model)


def _plan_model_named(spec: ModelSpec, targets: list[Target], options: PipelineOptions, progress: Progress,
                      several: bool) -> _PlannedModel:
    """_plan_model; in a package of several models its errors name the model they are about."""
    try:
        return _plan_model(spec, targets, options, progress)
    except AotError as e:
        label = _spec_label(spec)
        if several and len(e.args) == 1 and not str(e).startswith(label):
            e.args = (f"{label}: {e}",)
        raise


def _spec_label(spec: ModelSpec) -> str:
    where = spec.model.graph.name or "<model>" if isinstance(spec.model, onnx.ModelProto) else str(spec.model)
    return f"{where} (as {spec.name})" if spec.name else where


def _plan_model(spec: ModelSpec, targets: list[Target], options: PipelineOptions, progress: Progress) -> _PlannedModel:
    """One model imported, through the graph passes, lowered and planned."""
    progress.start("import")
    graph, source = load(spec.model, spec.input_shapes, spec.input_values)
    _check_no_float16(graph, source)
    check_address_space(targets, ((f"tensor {t.name!r}", t.nbytes) for t in graph.tensors.values()))
    ident = _package_name(graph.name if spec.name is None else spec.name)
    model_weights = model_stats(graph).weights_bytes
    progress.start("graph passes")
    run_passes(graph)
    planned = lower_and_plan(graph, options, progress, model=source)
    check_address_space(targets, [("the arena", planned.memory.arena_bytes),
                                  ("the weights", sum(t.nbytes for t in planned.program.weights))])
    return _PlannedModel(ident, source, graph, planned, model_weights)


def _check_no_float16(graph: Graph, source: str) -> None:
    """A float16 model is refused up front, naming the file and the way out, rather than at its
    first Cast or port that has no float16 code."""
    used = {t for n in graph.nodes for t in (*n.inputs, *n.outputs) if t is not None}
    half = [t for t in (*graph.inputs, *graph.outputs, *used) if t.dtype.name == "float16"]
    if half:
        more = f" (and {len(set(half)) - 1} more)" if len(set(half)) > 1 else ""
        raise AotError(f"{source}: tensor {half[0].name!r}{more} is float16, which aot does not compile (it "
                       "computes in float32 and int8): export the model in float32 (e.g. torch.onnx.export of "
                       "model.float()), and for a smaller model quantize that with aot quantize")


def _check_distinct(idents: list[str]) -> None:
    """Every model of a package needs its own name (checked for the given names before the
    compile, which can take minutes, and for the models' own names after it)."""
    twice = sorted({i for i in idents if idents.count(i) > 1})
    if twice:
        raise AotError(f"--name: two models of the package are both named {twice[0]!r} (give each its own --name)")


def _bundle_name(idents: list[str], requested: str | None) -> str:
    """The package's name: the library's, the weights object's and the umbrella header's."""
    _check_distinct(idents)
    if len(idents) == 1:
        if requested is not None and _package_name(requested) != idents[0]:
            raise AotError("--package-name: a package of one model has that model's name (use --name)")
        return idents[0]
    package = _package_name(requested if requested is not None else "_".join(idents))
    for ident in idents:
        for taken in (package, f"{package}_weights"):
            if ident == taken:
                raise AotError(f"--name {ident}: the package's own files are named {taken!r} "
                               "(choose another model name or --package-name)")
    return package


def _model_entry(model: _PlannedModel, run: RunPlan, targets: Sequence[Target],
                 objects: Sequence[LlvmTarget]) -> dict[str, Any]:
    """One model's keys of the manifest (for one model, the manifest's own)."""
    planned = model.planned
    entry: dict[str, Any] = {
        "name": run.name,
        "source_model": Path(model.source).name,
        "inputs": [_io_entry(p) for p in run.inputs],
        "outputs": [_io_entry(p) for p in run.outputs],
        "arena_bytes": planned.memory.arena_bytes,
        "arena_alignment": planned.memory.alignment,
        "arena_lower_bound_bytes": planned.memory.lower_bound_bytes,
        "arena_unshared_bytes": planned.memory.unshared_bytes,
        "weights_bytes": run.weights_bytes,
        "model_weights_bytes": model.model_weights_bytes,
        "onnx_nodes": model.graph.source_node_count,
        "kernels": len(planned.kernels),
        "kernel_order": [{"op": k.op, "sources": k.sources} for k in planned.kernels],
        **_target_entries(run.name, targets, objects),
    }
    if model.graph.bound_inputs:  # only then: packages without bound inputs keep their manifest as it was
        entry["input_values"] = [manifest_entry(n, v) for n, v in model.graph.bound_inputs.items()]
    return entry


def _package_manifest(package: str, entries: list[dict[str, Any]], sources: PackageSources, backend: str,
                      conv_algorithm: str, info: Mapping[str, Any], targets: Sequence[Target],
                      objects: Sequence[LlvmTarget]) -> dict[str, Any]:
    """manifest.json but its file digests. One model: its keys at the top, as always. Several:
    the package's name, arena and weights at the top, each model's keys under "models"."""
    common = {"backend": backend, "conv_algorithm": conv_algorithm,
              "compiler": {"name": "aot", "version": __version__}, "weights_format": info["weights_format"]}
    if len(entries) == 1:
        return {**entries[0], **common}
    arena = {"arena_bytes": max(e["arena_bytes"] for e in entries),
             "arena_alignment": max(e["arena_alignment"] for e in entries)} if sources.shared_arena else {}
    return {"name": package, **common, "shared_arena": sources.shared_arena, **arena,
            "weights_bytes": sources.weights_bytes, "models": entries,
            **_target_entries(package, targets, objects, [e["name"] for e in entries])}


def _package_name(name: str) -> str:
    if not name or not str(name).strip():
        raise AotError("--name: the model name must not be empty")
    return model_identifier(str(name))


def _package_files(sources: PackageSources, runs: Sequence[RunPlan], options: PipelineOptions,
                   objects: Sequence[LlvmTarget], progress: Progress) -> tuple[dict[str, FileData], dict[str, Any]]:
    """The package's files but the manifest: C sources and build files, the LLVM objects, the
    runtime; and what render_package tells the manifest."""
    progress.start("C code generation")
    files, info = render_package(sources)
    if objects:
        from aot.backends.llvm import compile_objects

        progress.start(f"LLVM code generation ({', '.join(t.name for t in objects)})")
        for run in runs:
            files.update(compile_objects(run, objects))
    for runtime_file in sorted(resource_dir("runtime_c").iterdir()):
        if runtime_file.suffix in (".h", ".c") and (options.threads or not runtime_file.name.startswith("aot_threads")):
            files[f"runtime/{runtime_file.name}"] = runtime_file.read_bytes()
    return files, info


def _target_entries(ident: str, targets: Sequence[Target], objects: Sequence[LlvmTarget],
                    models: Sequence[str] = ()) -> dict[str, Any]:
    """The manifest's target/triple: the (first) target the package is built for, as its LLVM
    object names it when it has objects (LLVM spells the triple in 4 parts); targets: every object
    (for several `models`, the objects of each, as "objects")."""
    entries: dict[str, Any] = {}
    first = objects[0] if objects else targets[0] if targets else None
    if first is not None:
        entries.update(target=first.name, triple=first.triple)
    if objects:
        entries["targets"] = [{"name": t.name, "triple": t.triple, "cpu": t.cpu, "features": t.features,
                               **({"objects": [_build_entry(m, t)["object"] for m in models]} if models
                                  else {"object": _build_entry(ident, t)["object"]})} for t in objects]
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
