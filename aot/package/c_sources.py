"""Renders a planned Program into the C files of a package (header, model, weights, runner)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import numpy as np

from aot import __version__
from aot.backends.c.kernel_printer import HELPER_DEFINITIONS, KernelPrinter, c_type, float_literal, int_literal
from aot.codegen.c_names import UniqueNames, c_comment, c_string
from aot.errors import AotError
from aot.ir.graph import Tensor
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT, Program
from aot.planner.memory import MemoryPlan, align_up
from aot.resources import resource_dir
from aot.targets import Target

WEIGHT_ALIGN = 64

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


def layout_weights(weights: list[Tensor]) -> tuple[list[WeightSlot], int]:
    """Byte layout of the weights struct: each member 64-byte aligned by explicit padding."""
    slots = []
    offset = 0
    for i, t in enumerate(weights):
        start = align_up(offset, WEIGHT_ALIGN)
        slots.append(WeightSlot(t, f"w{i}", start, start - offset))
        offset = start + max(t.nbytes, t.dtype.itemsize)
    return slots, offset


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _io_descriptors(program: Program) -> tuple[list[dict], list[dict]]:
    described = []
    for kind, tensors in (("input", program.graph.inputs), ("output", program.graph.outputs)):
        fields = UniqueNames()
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


def _weight_values(t: Tensor) -> str:
    flat = t.data.reshape(-1) if t.data is not None else np.zeros(0)
    if flat.size == 0:
        return "        0"
    kind = t.dtype.kind
    if kind == "f":
        dtype = t.dtype.name
        literals = [float_literal(float(v), dtype) for v in flat.tolist()]
    elif kind == "b":
        literals = ["1" if v else "0" for v in flat.tolist()]
    else:
        dtype = t.dtype.name
        literals = [int_literal(int(v), dtype) for v in flat.tolist()]
    per_line = 8
    lines = [", ".join(literals[i:i + per_line]) for i in range(0, len(literals), per_line)]
    return ",\n".join("        " + line for line in lines)


def kernel_call(printer: KernelPrinter, program: Program, plan: MemoryPlan, kernel_index: int,
                name: str, slots: dict[int, WeightSlot]) -> str:
    kernel = program.kernels[kernel_index]
    args = []
    for buf, t, elements in zip(kernel.params, program.bindings[kernel_index], program.offsets[kernel_index]):
        storage = program.storage[id(t)]
        ctype = c_type(buf.dtype)
        qual = "" if buf.writable else "const "
        # A param may be a slice of its root (a Concat part written in place): element offset.
        shift = f" + {elements}" if elements else ""
        if storage.kind == INPUT:
            args.append(f"({qual}{ctype} *)inputs[{storage.index}]{shift}")
        elif storage.kind == OUTPUT:
            args.append(f"({qual}{ctype} *)outputs[{storage.index}]{shift}")
        elif storage.kind == ARENA:
            args.append(f"({qual}{ctype} *)(a + {plan.offsets[t.name] + elements * t.dtype.itemsize})")
        elif storage.kind == WEIGHT:
            args.append(f"{name}_weights.{slots[id(t)].member}{shift}")
        else:
            raise AssertionError(storage)
    return f"{printer.function_name(kernel)}({', '.join(args)});"


def render_c_sources(program: Program, plan: MemoryPlan, name: str, source: str,
                     llvm_targets: Sequence[Mapping[str, Any]] = (),
                     target: Target | None = None) -> tuple[dict[str, str], dict]:
    """The package's C and build files, plus the I/O descriptors and weight sizes for the manifest.

    `llvm_targets` describes the LLVM objects the package carries, so that the build files can
    use them instead of <name>.c (see aot/compiler.py `_build_entry`).
    """
    env = _environment()
    inputs, outputs = _io_descriptors(program)
    slot_list, weights_struct_bytes = layout_weights(program.weights)
    slots = {id(s.tensor): s for s in slot_list}
    printer = KernelPrinter(name)
    kernels_text = [printer.kernel(k, program.overlapping_params(i)) for i, k in enumerate(program.kernels)]
    calls = [kernel_call(printer, program, plan, i, name, slots) for i in range(len(program.kernels))]
    weights_bytes = sum(t.nbytes for t in program.weights)
    context = {
        "name": name, "NAME": name.upper(), "version": __version__,
        "source_comment": c_comment(source), "name_literal": c_string(name),
        "inputs": inputs, "outputs": outputs,
        "arena_bytes": plan.arena_bytes, "arena_align": plan.alignment, "weights_bytes": weights_bytes,
        "kernels": kernels_text, "calls": calls,
        "helpers": [HELPER_DEFINITIONS[h] for h in sorted(printer.helpers)],
        "onnx_nodes": program.graph.source_node_count,
        "llvm_targets": list(llvm_targets),
        "target": target,
        "weights": [{
            "member": s.member, "ctype": c_type(s.tensor.dtype.name), "pad": s.pad,
            "count": max(s.tensor.size, 1), "literals": _weight_values(s.tensor),
            "comment": c_comment(f"{s.tensor.name!r} {s.tensor.dtype.name}{list(s.tensor.shape)} @ {s.offset}"),
        } for s in slot_list],
    }
    return {
        f"{name}.h": env.get_template("c/model.h.j2").render(context),
        f"{name}.c": env.get_template("c/model.c.j2").render(context),
        f"{name}_weights.h": env.get_template("c/weights.h.j2").render(context),
        f"{name}_weights.c": env.get_template("c/weights.c.j2").render(context),
        f"{name}_runner.c": env.get_template("c/runner.c.j2").render(context),
        "Makefile": env.get_template("build/Makefile.j2").render(context),
        "CMakeLists.txt": env.get_template("build/CMakeLists.txt.j2").render(context),
        **({"toolchain.cmake": env.get_template("build/toolchain.cmake.j2").render(context)} if target else {}),
    }, {"inputs": inputs, "outputs": outputs, "weights_bytes": weights_bytes,
        "weights_struct_bytes": weights_struct_bytes}
