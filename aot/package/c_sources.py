"""Renders a planned Program into the C files of a package (header, model, weights, runner)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import numpy as np

from aot import __version__
from aot.backends.c.kernel_printer import HELPER_DEFINITIONS, KernelPrinter, c_type, float_literal, int_literal
from aot.codegen.build_text import FILTERS as BUILD_FILE_FILTERS
from aot.codegen.c_names import (
    UniqueNames,
    c_comment,
    c_identifier,
    c_string,
    short_tensor_name,
    weight_member_names,
)
from aot.errors import AotError
from aot.ir.graph import Tensor
from aot.kernel.parallel import Segment, has_parallel, segments, serial_copy
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT, Program
from aot.package.blob import FileData, WeightsBlob
from aot.package.isa_check import vector_isa_check, widest_vector
from aot.planner.memory import MemoryPlan, align_up
from aot.resources import resource_dir
from aot.targets import Target

WEIGHT_ALIGN = 64
WEIGHTS_FORMATS = ("auto", "c", "binary")
# Above this many bytes of weights, --weights-format auto writes them as binary: as C text they
# take gigabytes of compiler memory (VGG-19's 575 MB did not compile at all).
BINARY_WEIGHTS_THRESHOLD = 16 * 2**20

DTYPE_ENUM = {
    "float32": "AOT_DTYPE_FLOAT32", "uint8": "AOT_DTYPE_UINT8", "int8": "AOT_DTYPE_INT8",
    "uint16": "AOT_DTYPE_UINT16", "int16": "AOT_DTYPE_INT16", "int32": "AOT_DTYPE_INT32",
    "int64": "AOT_DTYPE_INT64", "bool": "AOT_DTYPE_BOOL", "float64": "AOT_DTYPE_FLOAT64",
    "uint32": "AOT_DTYPE_UINT32", "uint64": "AOT_DTYPE_UINT64",
}


@dataclass(frozen=True)
class WeightSlot:
    tensor: Tensor
    member: str
    offset: int  # byte offset inside the weights struct
    pad: int     # padding bytes before this member


def layout_weights(weights: list[Tensor], macro_prefix: str = "") -> tuple[list[WeightSlot], int]:
    """Byte layout of the weights struct: each member 64-byte aligned by explicit padding, and
    named after its tensor (`macro_prefix`: the model's, "TINY_CNN_", whose macros it avoids)."""
    slots = []
    offset = 0
    members = weight_member_names([t.name for t in weights], macro_prefix)
    for t, member in zip(weights, members):
        start = align_up(offset, WEIGHT_ALIGN)
        slots.append(WeightSlot(t, member, start, start - offset))
        offset = start + max(t.nbytes, t.dtype.itemsize)
    return slots, offset


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


def _io_descriptors(program: Program, name: str) -> tuple[list[dict], list[dict]]:
    described = []
    for kind, tensors in (("input", program.graph.inputs), ("output", program.graph.outputs)):
        # The fields are the package's API: no keyword of C or C++, no standard macro (see
        # aot/codegen/reserved_names.py), not the name of one of the header's own NAME_... macros.
        fields = UniqueNames(public=True, own_macro_prefix=f"{name.upper()}_")
        items = []
        for index, t in enumerate(tensors):
            if t.dtype.name not in DTYPE_ENUM:
                raise AotError(f"{kind} {t.name!r} has dtype {t.dtype}, which aot cannot pass to C")
            shape_text = "x".join(map(str, t.shape)) or "scalar"
            items.append({
                "kind": kind, "KIND": kind.upper(), "index": index, "name": t.name,
                "name_literal": c_string(t.name), "field": fields.make(t.name, kind),
                "ctype": c_type(t.dtype.name), "dtype": t.dtype.name, "dtype_enum": DTYPE_ENUM[t.dtype.name],
                "rank": t.rank, "dims_text": ", ".join(str(d) for d in t.shape), "shape": list(t.shape),
                "size": t.size, "bytes": t.nbytes,
                "comment": c_comment(f"{t.name!r} {t.dtype.name}[{shape_text}]"),
            })
        described.append(items)
    return described[0], described[1]


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


# The identifiers of the run function and of the task trampolines (templates/c/model.c.j2),
# which the locals naming the regions the kernels are passed must not take.
_RUN_LOCALS = {"inputs", "outputs", "arena", "executor", "a", "i", "in", "out", "c", "context", "first", "last"}


class Regions:
    """What the kernel calls pass, named: one local per tensor of the inputs, the outputs and the
    arena (`float *conv1_out = (float *)(a + 16384);`), named after the tensor and declared before
    the first call that passes it; weights as members of the weights struct."""

    def __init__(self, program: Program, plan: MemoryPlan, name: str, slots: dict[int, WeightSlot]) -> None:
        self.program, self.plan, self.name, self.slots = program, plan, name, slots
        # Public-style names: no keyword or standard macro, no NAME_ macro of the model's header.
        self._names = UniqueNames(_RUN_LOCALS, public=True, own_macro_prefix=f"{name.upper()}_")
        self._local: dict[Tensor, str] = {}

    def local(self, tensor: Tensor) -> str:
        """The local naming `tensor` (the same in the run function and in every task)."""
        if tensor not in self._local:
            base = c_identifier(short_tensor_name(tensor.name), "t", public=True)
            # Not the name of a function of the file (<name>_k0, aot_parallel_for ...).
            clashes = base.startswith((f"{self.name}_", "aot_"))
            self._local[tensor] = self._names.make(f"t_{base}" if clashes else base, "t")
        return self._local[tensor]

    def declarations(self, kernel_index: int, params: Sequence[int], declared: set[str]) -> list[str]:
        """The declarations of the locals the call of these params needs and `declared` lacks."""
        lines = []
        for i in params:
            t = self.program.bindings[kernel_index][i]
            storage = self.program.storage[id(t)]
            if storage.kind == WEIGHT or self.local(t) in declared:
                continue
            ctype = c_type(t.dtype.name)
            if storage.kind == INPUT:
                value = f"(const {ctype} *)inputs[{storage.index}]"
            elif storage.kind == OUTPUT:
                value = f"({ctype} *)outputs[{storage.index}]"
            elif storage.kind == ARENA:
                value = f"({ctype} *)(a + {self.plan.offsets[t.name]})"
            else:
                raise AssertionError(storage)
            const = "const " if storage.kind == INPUT else ""
            lines.append(f"{const}{ctype} *{self.local(t)} = {value};")
            declared.add(self.local(t))
        return lines

    def argument(self, kernel_index: int, i: int) -> str:
        t, elements = self.program.bindings[kernel_index][i], self.program.offsets[kernel_index][i]
        # A param may be a slice of its root (a Concat part written in place): element offset.
        shift = f" + {elements}" if elements else ""
        if self.program.storage[id(t)].kind == WEIGHT:
            return f"{self.name}_weights.{self.slots[id(t)].member}{shift}"
        return f"{self.local(t)}{shift}"


def kernel_call(printer: KernelPrinter, regions: Regions, kernel_index: int, segment: Segment | None = None,
                extra: Sequence[str] = ()) -> str:
    """The call of one kernel (or one of its segments), its arguments the locals `regions` names."""
    kernel = regions.program.kernels[kernel_index]
    indices = segment.params if segment is not None else range(len(kernel.params))
    args = [regions.argument(kernel_index, i) for i in indices]
    function = printer.function_name(segment.kernel if segment is not None else kernel)
    return f"{function}({', '.join([*args, *extra])});"


def _model_code(printer: KernelPrinter, regions: Regions) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """The kernel functions, the run function's statements, and the task trampolines.

    A kernel's parallel loops (aot/kernel/parallel.py) become tasks: `<name>_<kernel>_task`
    unpacks the run function's context (inputs, outputs, arena) into the segment's arguments and
    runs iterations [first, last); the run function passes it to aot_parallel_for."""
    kernels, calls, tasks = [], [], []
    declared: set[str] = set()  # the run function's locals so far
    for i, kernel in enumerate(regions.program.kernels):
        alias = regions.program.overlapping_params(i)
        calls += regions.declarations(i, range(len(kernel.params)), declared)
        threaded = []
        for seg in segments(kernel):
            local_alias = {j for j, whole in enumerate(seg.params) if whole in alias}
            kernels.append(printer.kernel(seg.kernel, local_alias))
            if not seg.parallel:
                threaded.append(kernel_call(printer, regions, i, seg))
                continue
            task = f"{printer.function_name(seg.kernel)}_task"
            call = kernel_call(printer, regions, i, seg, ("first", "last"))
            tasks.append({"name": task, "call": "\n    ".join([*regions.declarations(i, seg.params, set()), call])})
            threaded.append(f"aot_parallel_for(executor, {task}, &context, {seg.extent});")
        if not has_parallel(kernel):
            calls += threaded
            continue
        # Without threads, the kernel as one function whose loops all have constant bounds: the
        # segments' [first, last) bounds cost up to 2x on a small kernel (a 1x1 conv with two
        # blocks of channels) and 2% of SqueezeNet, so they are only for threaded runs.
        serial = serial_copy(kernel)
        kernels.append(printer.kernel(serial, alias))
        whole = Segment(serial, tuple(range(len(kernel.params))), None)
        calls.append("\n    ".join([
            "if (aot_runs_serially(executor)) {",
            "    " + kernel_call(printer, regions, i, whole),
            "} else {", *("    " + c for c in threaded), "}"]))
    return kernels, calls, tasks


def render_c_sources(program: Program, plan: MemoryPlan, name: str, source: str,
                     llvm_targets: Sequence[Mapping[str, Any]] = (),
                     target: Target | None = None, weights_format: str = "auto", threads: bool = True,
                     ) -> tuple[dict[str, FileData], dict]:
    """The package's C and build files, plus the I/O descriptors and weight sizes for the manifest.

    `llvm_targets` describes the LLVM objects the package carries, so that the build files can
    use them instead of <name>.c (see aot/compiler.py `_build_entry`). `weights_format` (see
    WEIGHTS_FORMATS) chooses between <name>_weights.c and <name>_weights.S + <name>_weights.bin;
    either defines the same <name>_weights object, so the rest of the package is the same.
    `threads`: the build files compile runtime/aot_threads.c (the pthread pool) into the library
    and the runner (Linux targets; not for bare metal).
    """
    env = _environment()
    inputs, outputs = _io_descriptors(program, name)
    slot_list, weights_struct_bytes = layout_weights(program.weights, f"{name.upper()}_")
    slots = {id(s.tensor): s for s in slot_list}
    weights_format = resolve_weights_format(weights_format, weights_struct_bytes)
    blob = weights_blob(slot_list, weights_struct_bytes) if weights_format == "binary" else None
    printer = KernelPrinter(name)
    kernels_text, calls, tasks = _model_code(printer, Regions(program, plan, name, slots))
    weights_bytes = sum(t.nbytes for t in program.weights)
    context = {
        "name": name, "NAME": name.upper(), "version": __version__,
        "source_comment": c_comment(source), "name_literal": c_string(name),
        "inputs": inputs, "outputs": outputs,
        "arena_bytes": plan.arena_bytes, "arena_align": plan.alignment, "weights_bytes": weights_bytes,
        "kernels": kernels_text, "calls": calls, "tasks": tasks, "threads": threads,
        "helpers": [HELPER_DEFINITIONS[h] for h in sorted(printer.helpers)],
        "isa_check": vector_isa_check(f"{name}.c", widest_vector(printer.helpers)),
        "onnx_nodes": program.graph.source_node_count,
        "llvm_targets": list(llvm_targets),
        "target": target,
        "weights_format": weights_format,
        "weights_source": f"{name}_weights.S" if blob else f"{name}_weights.c",
        "weights_blob_bytes": len(blob) if blob else 0,
        "weights_align": WEIGHT_ALIGN,
        "weights": [{
            "member": s.member, "ctype": c_type(s.tensor.dtype.name), "pad": s.pad,
            "count": max(s.tensor.size, 1), "literal_blocks": functools.partial(_literal_blocks, s.tensor),
            "comment": c_comment(f"{s.tensor.name!r} {s.tensor.dtype.name}{list(s.tensor.shape)} @ {s.offset}"),
        } for s in slot_list],
    }
    templates = {
        f"{name}.h": "c/model.h.j2",
        f"{name}.c": "c/model.c.j2",
        f"{name}_weights.h": "c/weights.h.j2",
        f"{name}_runner.c": "c/runner.c.j2",
        "Makefile": "build/Makefile.j2",
        "CMakeLists.txt": "build/CMakeLists.txt.j2",
        **({"toolchain.cmake": "build/toolchain.cmake.j2"} if target else {}),
    }
    if blob is None:
        templates[f"{name}_weights.c"] = "c/weights.c.j2"
    else:
        templates[f"{name}_weights.S"] = "c/weights.S.j2"
    files: dict[str, FileData] = {path: _render(env.get_template(t), context) for path, t in templates.items()}
    if blob is not None:
        files[f"{name}_weights.bin"] = blob
    return files, {"inputs": inputs, "outputs": outputs, "weights_bytes": weights_bytes,
                   "weights_struct_bytes": weights_struct_bytes, "weights_format": weights_format}
