"""The C backend's model module: what templates/c/model.c.j2 writes around the kernels.

It prints a RunPlan (aot/backends/run_plan.py): each kernel function, the run function's calls
with their arguments computed from `inputs`, `outputs` and the arena base `a`, and the task
trampolines of parallel segments. The vector types the kernels use come from
runtime/aot_kernels.h, which defines those the model asks for (AOT_WANT_F32X<lanes>).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aot.backends.c.isa_check import vector_isa_check, vector_lanes, widest_vector
from aot.backends.c.kernel_printer import KernelPrinter, c_type
from aot.backends.run_plan import Argument, Call, RunPlan, Step
from aot.codegen.c_names import UniqueNames, c_identifier, short_tensor_name
from aot.codegen.kernel_names import kernel_symbols
from aot.ir.graph import Tensor
from aot.kernel.ir import Kernel
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT

# A package with more inputs or outputs than this copies their pointers from the structs into
# arrays in functions of this many stores each (a wide Concat's build, tests/test_memory.py).
POINTER_CHUNK = 256
# The identifiers of the run function and of the task trampolines (templates/c/model.c.j2),
# which the locals naming the regions the kernels are passed must not take.
_RUN_LOCALS = {"inputs", "outputs", "arena", "executor", "a", "i", "in", "out", "c", "context", "first", "last"}


class Regions:
    """What the kernel calls pass, named: one local per tensor of the inputs, the outputs and the
    arena (`float *conv1_out = (float *)(a + 16384);`), named after the tensor and declared before
    the first call that passes it; weights as members of the weights struct."""

    def __init__(self, model: str, weights_owner: str | None = None) -> None:
        self.model = model
        self.weights_owner = weights_owner or model  # the weights object is <owner>_weights
        # Public-style names: no keyword or standard macro, no NAME_ macro of the model's header.
        self._names = UniqueNames(_RUN_LOCALS, public=True, own_macro_prefix=f"{model.upper()}_")
        self._local: dict[Tensor, str] = {}

    def local(self, tensor: Tensor) -> str:
        """The local naming `tensor` (the same in the run function and in every task)."""
        if tensor not in self._local:
            base = c_identifier(short_tensor_name(tensor.name), "t", public=True)
            # Not the name of a function of the file (<name>_k0, aot_parallel_for ...).
            clashes = base.startswith((f"{self.model}_", f"{self.weights_owner}_", "aot_"))
            self._local[tensor] = self._names.make(f"t_{base}" if clashes else base, "t")
        return self._local[tensor]

    def declarations(self, call: Call, declared: set[str]) -> list[str]:
        """The declarations of the locals `call` passes that `declared` lacks (added to it)."""
        lines = []
        for arg in call.arguments:
            if arg.kind == WEIGHT or self.local(arg.tensor) in declared:
                continue
            ctype = c_type(arg.tensor.dtype.name)
            if arg.kind == INPUT:
                value = f"(const {ctype} *)inputs[{arg.index}]"
            elif arg.kind == OUTPUT:
                value = f"({ctype} *)outputs[{arg.index}]"
            elif arg.kind == ARENA:
                value = f"({ctype} *)(a + {arg.start - arg.elements * arg.tensor.dtype.itemsize})"
            else:
                raise AssertionError(arg)
            const = "const " if arg.kind == INPUT else ""
            lines.append(f"{const}{ctype} *{self.local(arg.tensor)} = {value};")
            declared.add(self.local(arg.tensor))
        return lines

    def argument(self, arg: Argument) -> str:
        """One kernel argument: its tensor's local, or the weights member."""
        # A param may be a slice of its root (a Concat part written in place): element offset.
        shift = f" + {arg.elements}" if arg.elements else ""
        if arg.kind == WEIGHT and arg.weight is not None:
            return f"{self.weights_owner}_weights.{arg.weight.member}{shift}"
        return f"{self.local(arg.tensor)}{shift}"


def call_text(printer: KernelPrinter, regions: Regions, call: Call, extra: Sequence[str] = ()) -> str:
    """The C statement of one kernel call."""
    args = [regions.argument(a) for a in call.arguments]
    return f"{printer.function_name(call.kernel)}({', '.join([*args, *extra])});"


def _step_code(printer: KernelPrinter, regions: Regions, step: Step, declared: set[str], kernels: list[str],
               tasks: list[dict[str, str]]) -> list[str]:
    """The run function's statements for one kernel (`declared`: its locals so far); adds the
    kernel's functions and tasks."""
    lines = regions.declarations(step.serial, declared) if step.serial else []
    threaded = []
    for call in step.calls:
        kernels.append(printer.kernel(call.kernel, call.may_alias))
        if step.serial is None:
            lines += regions.declarations(call, declared)
        if not call.parallel:
            threaded.append(call_text(printer, regions, call))
            continue
        task = f"{printer.function_name(call.kernel)}_task"
        body = [*regions.declarations(call, set()), call_text(printer, regions, call, ("first", "last"))]
        tasks.append({"name": task, "call": "\n    ".join(body)})
        threaded.append(f"aot_parallel_for(executor, {task}, &context, {call.extent});")
    if step.serial is None:
        return lines + threaded
    # Without threads, the kernel as one function whose loops all have constant bounds: the
    # segments' [first, last) bounds slow a small kernel (a 1x1 conv with two blocks of
    # channels), so they are only for threaded runs (benchmark: SqueezeNet).
    kernels.append(printer.kernel(step.serial.kernel, step.serial.may_alias))
    return lines + ["\n    ".join([
        "if (aot_runs_serially(executor)) {",
        "    " + call_text(printer, regions, step.serial),
        "} else {", *("    " + c for c in threaded), "}"])]


def run_kernels(run: RunPlan) -> list[Kernel]:
    """Every kernel function of the run, in the order they are printed."""
    return [call.kernel for step in run.steps for call in (*step.calls, *([step.serial] if step.serial else []))]


def model_source_context(run: RunPlan) -> dict[str, Any]:
    """What templates/c/model.c.j2 needs beyond the package's shared context: the kernel
    functions, the run function's statements, the task trampolines and the vector types."""
    printer = KernelPrinter(run.name, kernel_symbols(run.name, run_kernels(run)))
    kernels: list[str] = []
    calls: list[str] = []
    tasks: list[dict[str, str]] = []
    regions = Regions(run.name, run.weights_name)
    declared: set[str] = set()  # the run function's locals so far
    for step in run.steps:
        calls += _step_code(printer, regions, step, declared, kernels, tasks)
    return {
        "kernels": kernels, "calls": calls, "tasks": tasks,
        "vector_lanes": vector_lanes(printer.helpers),
        "int_vector_lanes": sorted(int(h[len("aot_i32x"):]) for h in printer.helpers if h.startswith("aot_i32x")),
        "isa_check": vector_isa_check(f"{run.name}.c", widest_vector(printer.helpers)),
        "pointer_chunk": POINTER_CHUNK,
    }
