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
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT


def argument_text(model: str, arg: Argument) -> str:
    """One kernel argument as the run function (or a task) computes it."""
    ctype = c_type(arg.dtype)
    qual = "" if arg.writable else "const "
    # A param may be a slice of its root (a Concat part written in place): element offset.
    shift = f" + {arg.elements}" if arg.elements else ""
    if arg.kind == INPUT:
        return f"({qual}{ctype} *)inputs[{arg.index}]{shift}"
    if arg.kind == OUTPUT:
        return f"({qual}{ctype} *)outputs[{arg.index}]{shift}"
    if arg.kind == ARENA:
        return f"({qual}{ctype} *)(a + {arg.start})"
    if arg.kind == WEIGHT and arg.weight is not None:
        return f"{model}_weights.{arg.weight.member}{shift}"
    raise AssertionError(arg)


def call_text(printer: KernelPrinter, model: str, call: Call, extra: Sequence[str] = ()) -> str:
    """The C statement of one kernel call."""
    args = [argument_text(model, a) for a in call.arguments]
    return f"{printer.function_name(call.kernel)}({', '.join([*args, *extra])});"


def _step_code(printer: KernelPrinter, model: str, step: Step, kernels: list[str],
               tasks: list[dict[str, str]]) -> list[str]:
    """The run function's statements for one kernel; adds its functions and tasks."""
    threaded = []
    for call in step.calls:
        kernels.append(printer.kernel(call.kernel, call.may_alias))
        if not call.parallel:
            threaded.append(call_text(printer, model, call))
            continue
        task = f"{printer.function_name(call.kernel)}_task"
        tasks.append({"name": task, "call": call_text(printer, model, call, ("first", "last"))})
        threaded.append(f"aot_parallel_for(executor, {task}, &context, {call.extent});")
    if step.serial is None:
        return threaded
    # Without threads, the kernel as one function whose loops all have constant bounds: the
    # segments' [first, last) bounds cost up to 2x on a small kernel (a 1x1 conv with two
    # blocks of channels) and 2% of SqueezeNet, so they are only for threaded runs.
    kernels.append(printer.kernel(step.serial.kernel, step.serial.may_alias))
    return ["\n    ".join([
        "if (aot_runs_serially(executor)) {",
        "    " + call_text(printer, model, step.serial),
        "} else {", *("    " + c for c in threaded), "}"])]


def model_source_context(run: RunPlan) -> dict[str, Any]:
    """What templates/c/model.c.j2 needs beyond the package's shared context: the kernel
    functions, the run function's statements, the task trampolines and the vector types."""
    printer = KernelPrinter(run.name)
    kernels: list[str] = []
    calls: list[str] = []
    tasks: list[dict[str, str]] = []
    for step in run.steps:
        calls += _step_code(printer, run.name, step, kernels, tasks)
    return {
        "kernels": kernels, "calls": calls, "tasks": tasks,
        "vector_lanes": vector_lanes(printer.helpers),
        "isa_check": vector_isa_check(f"{run.name}.c", widest_vector(printer.helpers)),
    }
