"""What a model's entry points do, as every backend prints it: the facts that are not C or LLVM.

The run function checks its pointers, then calls the kernels in the planned order; a kernel with
parallel loops (aot/kernel/parallel.py) is a series of segments, the parallel ones called by a
task over [first, last) through aot_parallel_for, and is also kept whole with constant loop bounds
for runs without threads. Each call's arguments are addresses in one of four objects: an input,
an output, the arena, or the weights struct (laid out by aot/planner/weights.py).

`plan_run` works this out once per package; the C backend prints it as <name>.c
(aot/backends/c/model_source.py), the LLVM backend as IR (aot/backends/llvm/module.py), and the
package's header, runner and manifest describe the same `Port`s. So the two backends cannot
disagree on an offset, an order or which arguments may alias.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.c_api import DtypeCode, dtype_codes
from aot.codegen.c_names import UniqueNames
from aot.errors import AotError
from aot.ir.graph import Tensor
from aot.kernel.ir import Kernel
from aot.kernel.parallel import Segment, has_parallel, segments, serial_copy
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT, Program
from aot.planner.arena import PlannedProgram
from aot.planner.memory import MemoryPlan
from aot.planner.weights import WeightSlot, layout_weights


@dataclass(frozen=True)
class Port:
    """One model input or output as the C API describes it (aot_tensor_info, <name>_inputs)."""

    kind: str                # "input" or "output"
    index: int               # position in the model's inputs or outputs
    name: str                # the ONNX name
    field: str               # its member of <name>_inputs / <name>_outputs (a C identifier)
    dtype: str
    shape: tuple[int, ...]
    size: int                # elements
    nbytes: int

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype_code(self) -> DtypeCode:
        return dtype_codes()[self.dtype]


@dataclass(frozen=True)
class Argument:
    """The memory one kernel argument points to."""

    kind: str                # INPUT, OUTPUT, ARENA or WEIGHT (aot/lowering/program.py)
    tensor: Tensor           # the tensor whose storage it is in (a Concat output for its parts)
    index: int               # input/output position; 0 for the arena and the weights
    dtype: str
    writable: bool
    elements: int            # element offset inside its tensor (a slice: a Concat part written in place)
    start: int               # byte offset inside its object (the I/O buffer, arena or weights struct)
    stop: int
    weight: WeightSlot | None  # the weights member, for WEIGHT


@dataclass(frozen=True)
class Call:
    """One call of a kernel function: a whole kernel, one of its segments, or its serial form."""

    kernel: Kernel                   # the function's kernel IR
    arguments: tuple[Argument, ...]  # one per kernel param
    may_alias: frozenset[int]        # arguments sharing memory with a written one: no restrict/noalias
    extent: int | None               # a parallel segment's trip count: called by a task

    @property
    def parallel(self) -> bool:
        return self.extent is not None


@dataclass(frozen=True)
class Step:
    """One kernel of the program, in run order."""

    calls: tuple[Call, ...]  # its segments in order (one call, the kernel itself, without parallel loops)
    serial: Call | None      # with parallel loops: the whole kernel, for runs without threads


@dataclass(frozen=True)
class RunPlan:
    name: str                # the model identifier, prefix of every symbol
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    steps: tuple[Step, ...]
    arena_bytes: int
    arena_align: int
    weight_slots: tuple[WeightSlot, ...]  # the members this model uses
    weights_struct_bytes: int  # the weights struct with its padding
    weights_bytes: int         # the weights' own bytes
    weights_name: str          # the weights object is <weights_name>_weights: the package's

    @property
    def has_tasks(self) -> bool:
        return any(call.parallel for step in self.steps for call in step.calls)


def plan_run(planned: PlannedProgram, name: str, weights: SharedWeightsView | None = None) -> RunPlan:
    """The entry points of the planned program (kernels in run order) with its arena. `weights`:
    where its weights are in a struct several models share (by default its own `<name>_weights`)."""
    program, plan = planned.program, planned.memory
    if weights is None:
        slot_list, struct_bytes = layout_weights(program.weights, f"{name.upper()}_")
        weights = SharedWeightsView(name, {s.tensor: s for s in slot_list}, struct_bytes)
    slots = weights.slots
    inputs, outputs = describe_ports(program, name)
    steps = tuple(_step(program, plan, slots, i) for i in range(len(program.kernels)))
    used = tuple(sorted({slots[t] for t in program.weights}, key=lambda s: s.offset))
    return RunPlan(name, inputs, outputs, steps, plan.arena_bytes, plan.alignment, used,
                   weights.struct_bytes, sum(t.nbytes for t in program.weights), weights.owner)


@dataclass(frozen=True)
class SharedWeightsView:
    """One model's view of a weights struct: the object's owner (`<owner>_weights`), the member
    of each of the model's weight tensors, and the struct's size."""

    owner: str
    slots: dict[Tensor, WeightSlot]
    struct_bytes: int


def describe_ports(program: Program, name: str) -> tuple[tuple[Port, ...], tuple[Port, ...]]:
    """The model's inputs and outputs; AotError for a dtype the C API has no code for."""
    described = []
    for kind, tensors in (("input", program.graph.inputs), ("output", program.graph.outputs)):
        # The fields are the package's API: no keyword of C or C++, no standard macro (see
        # aot/codegen/reserved_names.py), not the name of one of the header's own NAME_... macros.
        fields = UniqueNames(public=True, own_macro_prefix=f"{name.upper()}_")
        ports = []
        for index, t in enumerate(tensors):
            if t.dtype.name not in dtype_codes():
                raise AotError(f"{kind} {t.name!r} has dtype {t.dtype}, which aot cannot pass to C")
            ports.append(Port(kind, index, t.name, fields.make(t.name, kind), t.dtype.name, tuple(t.shape),
                              t.size, t.nbytes))
        described.append(tuple(ports))
    return described[0], described[1]


def _step(program: Program, plan: MemoryPlan, slots: dict[Tensor, WeightSlot], kernel_index: int) -> Step:
    kernel = program.kernels[kernel_index]
    arguments = tuple(_argument(program, plan, slots, kernel_index, i) for i in range(len(kernel.params)))
    alias = frozenset(program.overlapping_params(kernel_index))
    calls = tuple(_segment_call(seg, arguments, alias) for seg in segments(kernel))
    if not has_parallel(kernel):
        return Step(calls, None)
    return Step(calls, Call(serial_copy(kernel), arguments, alias, None))


def _segment_call(seg: Segment, arguments: tuple[Argument, ...], alias: frozenset[int]) -> Call:
    """A segment's call: its params are a subset of the kernel's, renumbered from 0."""
    local_alias = frozenset(j for j, whole in enumerate(seg.params) if whole in alias)
    return Call(seg.kernel, tuple(arguments[j] for j in seg.params), local_alias, seg.extent)


def _argument(program: Program, plan: MemoryPlan, slots: dict[Tensor, WeightSlot], kernel_index: int,
              param_index: int) -> Argument:
    buf = program.kernels[kernel_index].params[param_index]
    tensor: Tensor = program.bindings[kernel_index][param_index]
    elements = program.offsets[kernel_index][param_index]
    storage = program.storage[tensor]
    shift = elements * tensor.dtype.itemsize
    weight = None
    if storage.kind in (INPUT, OUTPUT):
        index, start = storage.index, shift
    elif storage.kind == ARENA:
        index, start = 0, plan.offsets[tensor.name] + shift
    elif storage.kind == WEIGHT:
        weight = slots[tensor]
        index, start = 0, weight.offset + shift
    else:
        raise AssertionError(storage)
    stop = start + buf.size * tensor.dtype.itemsize
    return Argument(storage.kind, tensor, index, buf.dtype, buf.writable, elements, start, stop, weight)
