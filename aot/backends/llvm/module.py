"""The whole model as one LLVM module: kernels, the tensor-info tables and the public C API.

The module defines exactly the functions <name>.h declares -- `<name>_run`, `<name>_run_ptrs`,
`<name>_run_parallel`, `<name>_run_parallel_ptrs` and `<name>_info` -- with the behaviour of the
C backend's model.c.j2 (same NULL checks, alignment check and status codes), and takes the
weights from the external `<name>_weights` object that <name>_weights.c (or, with binary
weights, <name>_weights.S) defines, addressing members by the byte offsets of `layout_weights`
-- which both formats lay out identically.

Kernels with parallel loops are emitted as segments (aot/kernel/parallel.py), and the run
function hands each parallel one to the executor through a task trampoline, as model.c.j2 does:
the context is the same three pointers (inputs, outputs, arena), and `aot_parallel_for` of
aot_runtime.h is an internal function here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from aot.backends.llvm import types as t
from aot.backends.llvm.kernel_emitter import KernelEmitter, MathLibrary, ParamInfo
from aot.backends.llvm.target import LlvmTarget
from aot.kernel.parallel import Segment, has_parallel, segments, serial_copy
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT, Program
from aot.planner.memory import MemoryPlan
from aot.planner.weights import WEIGHT_ALIGN, WeightSlot, layout_weights

# aot_dtype values (runtime_c/aot_runtime.h: ONNX TensorProto numbers).
DTYPE_CODES = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
               "bool": 9, "float64": 11, "uint32": 12, "uint64": 13}
AOT_OK, AOT_ERROR_NULL_POINTER, AOT_ERROR_ARENA_ALIGNMENT = 0, 1, 2


@dataclass(frozen=True)
class _Region:
    """The memory one kernel argument covers, to tell which arguments may overlap."""

    kind: str
    index: int   # input/output position; unused for arena and weights
    start: int   # byte offset in the arena or the weights struct
    stop: int

    def overlaps(self, other: _Region) -> bool:
        if self.kind != other.kind:
            return False  # inputs, outputs, arena and weights are distinct objects by contract
        if self.kind in (INPUT, OUTPUT) and self.index != other.index:
            return False
        return self.start < other.stop and other.start < self.stop


def _power_of_two_dividing(offset: int, cap: int) -> int:
    """The alignment a pointer `offset` bytes past a `cap`-aligned base is known to have."""
    if offset == 0:
        return cap
    return min(offset & -offset, cap)


def _indirect_call(b: ir.IRBuilder, pointer: ir.Value, ftype: ir.FunctionType, args: list[ir.Value]) -> None:
    """A call through a function pointer. llvmlite takes the callee's type from the callee
    value, which an opaque pointer does not have: a stand-in gives it one."""
    b.call(_Callee(pointer, ftype), args)


class _Callee:
    """A function pointer value with the function type llvmlite's call instruction asks for."""

    def __init__(self, value: ir.Value, ftype: ir.FunctionType) -> None:
        self.value = value
        self.function_type = ftype
        self.type = value.type

    def get_reference(self) -> str:
        return self.value.get_reference()


def _c_string(text: str) -> ir.Constant:
    data = text.encode("utf-8") + b"\0"
    return ir.Constant(ir.ArrayType(t.I8, len(data)), bytearray(data))


class ModelModule:
    """Builds the LLVM IR of one model for one target."""

    def __init__(self, program: Program, plan: MemoryPlan, name: str, inputs: Sequence[dict[str, Any]],
                 outputs: Sequence[dict[str, Any]], spec: LlvmTarget) -> None:
        self.program = program
        self.plan = plan
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.spec = spec
        self.size_t = ir.IntType(spec.pointer_bits)
        self.module = ir.Module(name=name)
        self.module.triple = spec.triple
        slot_list, self.weights_struct_bytes = layout_weights(program.weights)
        self.slots: dict[int, WeightSlot] = {id(s.tensor): s for s in slot_list}
        self._weights: ir.GlobalVariable | None = None

    @property
    def weights_symbol(self) -> str:
        return f"{self.name}_weights"

    def build(self) -> ir.Module:
        math = MathLibrary(self.module)
        emitter = KernelEmitter(self.module, math)
        kernels: list[list[tuple[Segment, ir.Function]]] = []
        serial_forms: list[ir.Function | None] = []
        for i, k in enumerate(self.program.kernels):
            facts = self._param_facts(i)
            parts = []
            for seg in segments(k):
                fn = emitter.emit(seg.kernel, f"{self.name}_{seg.kernel.name}", [facts[j] for j in seg.params])
                self._function_attributes(fn)
                parts.append((seg, fn))
            kernels.append(parts)
            # A split kernel also as one function with constant loop bounds, for runs without
            # threads (as in the C backend, aot/package/c_sources.py).
            serial_fn = None
            if has_parallel(k):
                serial = serial_copy(k)
                serial_fn = emitter.emit(serial, f"{self.name}_{serial.name}", facts)
                self._function_attributes(serial_fn)
            serial_forms.append(serial_fn)
        info = self._info_tables()
        impl = self._run_impl(kernels, serial_forms)
        self._api(impl, info)
        return self.module

    def has_weights_reference(self) -> bool:
        return self._weights is not None

    # -- kernel arguments --------------------------------------------------------------------
    def _region(self, kernel_index: int, param_index: int) -> _Region:
        tensor = self.program.bindings[kernel_index][param_index]
        buf = self.program.kernels[kernel_index].params[param_index]
        storage = self.program.storage[id(tensor)]
        # A param may be a slice of its root tensor (a Concat part written in place).
        shift = self.program.offsets[kernel_index][param_index] * tensor.dtype.itemsize
        nbytes = buf.size * tensor.dtype.itemsize
        if storage.kind in (INPUT, OUTPUT):
            return _Region(storage.kind, storage.index, shift, shift + nbytes)
        if storage.kind == ARENA:
            start = self.plan.offsets[tensor.name] + shift
            return _Region(ARENA, 0, start, start + nbytes)
        if storage.kind == WEIGHT:
            start = self.slots[id(tensor)].offset + shift
            return _Region(WEIGHT, 0, start, start + nbytes)
        raise AssertionError(storage)

    def _param_facts(self, kernel_index: int) -> list[ParamInfo]:
        kernel = self.program.kernels[kernel_index]
        regions = [self._region(kernel_index, i) for i in range(len(kernel.params))]
        facts = []
        for i, (buf, region) in enumerate(zip(kernel.params, regions, strict=True)):
            # `noalias` only matters against memory written during the call (like C restrict).
            clash = any(region.overlaps(other) and (buf.writable or kernel.params[j].writable)
                        for j, other in enumerate(regions) if j != i)
            if region.kind == ARENA:
                # run_ptrs has checked the arena against ARENA_ALIGN before any kernel runs.
                align = _power_of_two_dividing(region.start, self.plan.alignment)
            elif region.kind == WEIGHT:
                align = _power_of_two_dividing(region.start, WEIGHT_ALIGN)
            else:
                align = 1  # caller's buffers: only the element alignment C itself assumes
            facts.append(ParamInfo(max(align, t.itemsize(buf.dtype)), noalias=not clash))
        return facts

    def _function_attributes(self, fn: ir.Function) -> None:
        fn.attributes.add("nounwind")
        if self.spec.unwind_tables:
            fn.attributes.add("uwtable")

    def _weights_global(self) -> ir.GlobalVariable:
        if self._weights is None:
            # Declared as bytes: only the address matters, members are reached by byte offset.
            # weights.c defines it with AOT_ALIGNED(64) (weights.S with .balign 64), and every
            # member offset is a multiple of 64.
            typ = ir.ArrayType(t.I8, max(self.weights_struct_bytes, 1))
            g = ir.GlobalVariable(self.module, typ, self.weights_symbol)
            g.linkage = "external"
            g.global_constant = True
            g.align = WEIGHT_ALIGN
            self._weights = g
        return self._weights

    # -- aot_model_info ----------------------------------------------------------------------
    def _constant(self, name: str, value: ir.Constant, linkage: str = "internal") -> ir.GlobalVariable:
        g = ir.GlobalVariable(self.module, value.type, name)
        g.linkage = linkage
        g.global_constant = True
        g.initializer = value
        return g

    def _string(self, name: str, text: str) -> ir.GlobalVariable:
        g = self._constant(name, _c_string(text), linkage="private")
        g.unnamed_addr = True  # like a C string literal
        return g

    def _info_tables(self) -> ir.GlobalVariable:
        """The same constant tables model.c.j2 defines, laid out by LLVM with the target's C ABI.

        aot_dtype is an enum, written as a 32-bit int. Targets whose C compiler uses short enums
        (arm-none-eabi GCC) read its first byte, which holds the same value on these
        little-endian targets, and the following int32 rank has the same offset either way.
        """
        tensor_info = ir.LiteralStructType([t.PTR, t.I32, t.I32, t.PTR, self.size_t, self.size_t])
        tables = []
        for kind, items in (("input", self.inputs), ("output", self.outputs)):
            rows = []
            for item in items:
                dims = [int(d) for d in item["shape"]] or [0]  # rank 0: C declares dims[1] = { 0 }
                dims_global = self._constant(
                    f"{self.name}_{kind}{item['index']}_dims",
                    ir.Constant(ir.ArrayType(t.I64, len(dims)), [ir.Constant(t.I64, d) for d in dims]))
                label = self._string(f"{self.name}_{kind}{item['index']}_name", item["name"])
                rows.append(ir.Constant(tensor_info, [
                    label, ir.Constant(t.I32, DTYPE_CODES[item["dtype"]]), ir.Constant(t.I32, int(item["rank"])),
                    dims_global, ir.Constant(self.size_t, int(item["size"])),
                    ir.Constant(self.size_t, int(item["bytes"]))]))
            if not rows:  # C: a one-element placeholder array, as C has no empty arrays
                empty = self._string(f"{self.name}_{kind}_none", "")
                rows.append(ir.Constant(tensor_info, [
                    empty, ir.Constant(t.I32, DTYPE_CODES["float32"]), ir.Constant(t.I32, 0),
                    ir.Constant(t.PTR, None), ir.Constant(self.size_t, 0), ir.Constant(self.size_t, 0)]))
            tables.append(self._constant(f"{self.name}_{kind}_info",
                                         ir.Constant(ir.ArrayType(tensor_info, len(rows)), rows)))
        model_info = ir.LiteralStructType([t.PTR, t.I32, t.I32, t.PTR, t.PTR, self.size_t, self.size_t,
                                           self.size_t])
        weights_bytes = sum(w.nbytes for w in self.program.weights)
        return self._constant(f"{self.name}_model_info", ir.Constant(model_info, [
            self._string(f"{self.name}_model_name", self.name),
            ir.Constant(t.I32, len(self.inputs)), ir.Constant(t.I32, len(self.outputs)),
            tables[0], tables[1],
            ir.Constant(self.size_t, self.plan.arena_bytes), ir.Constant(self.size_t, self.plan.alignment),
            ir.Constant(self.size_t, weights_bytes)]))

    # -- run ---------------------------------------------------------------------------------
    def _run_impl(self, kernels: list[list[tuple[Segment, ir.Function]]],
                  serial_forms: list[ir.Function | None]) -> ir.Function:
        """`aot_status impl(const void *const *inputs, void *const *outputs, void *arena,
        const aot_executor *executor)`.

        Shared by the four run functions (all tail-call it), so the model code exists once; the
        checks and their order are model.c.j2's.
        """
        fn = ir.Function(self.module, ir.FunctionType(t.I32, [t.PTR] * 4), f"{self.name}_run_impl")
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        self._function_attributes(fn)
        inputs, outputs, arena, executor = fn.args
        inputs.name, outputs.name, arena.name, executor.name = "inputs", "outputs", "arena", "executor"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        null_block = fn.append_basic_block("null_pointer")
        misaligned_block = fn.append_basic_block("misaligned")
        null = ir.Constant(t.PTR, None)

        lists_ok = fn.append_basic_block("lists_ok")
        either = b.or_(b.icmp_unsigned("==", inputs, null), b.icmp_unsigned("==", outputs, null))
        b.cbranch(either, null_block, lists_ok)

        b.position_at_end(lists_ok)
        in_ptrs, out_ptrs = self._load_pointers(b, inputs, outputs)
        missing = [b.icmp_unsigned("==", p, null) for p in in_ptrs + out_ptrs]
        if self.plan.arena_bytes > 0:
            missing.append(b.icmp_unsigned("==", arena, null))
        pointers_ok = fn.append_basic_block("pointers_ok")
        if missing:
            any_missing = missing[0]
            for flag in missing[1:]:
                any_missing = b.or_(any_missing, flag)
            b.cbranch(any_missing, null_block, pointers_ok)
        else:
            b.branch(pointers_ok)

        b.position_at_end(pointers_ok)
        address = b.ptrtoint(arena, self.size_t)
        low_bits = b.and_(address, ir.Constant(self.size_t, self.plan.alignment - 1))
        aligned = fn.append_basic_block("aligned")
        b.cbranch(b.icmp_unsigned("!=", low_bits, ir.Constant(self.size_t, 0)), misaligned_block, aligned)

        b.position_at_end(aligned)
        context = None
        if any(seg.parallel for parts in kernels for seg, _ in parts):
            # model.c.j2's <name>_context: the pointers the tasks compute their arguments from.
            # Three pointers in a row: the layout of the C struct.
            context = b.alloca(t.PTR, size=ir.Constant(t.I32, 3), name="context")
            for field, value in enumerate((inputs, outputs, arena)):
                b.store(value, b.gep(context, [ir.Constant(t.I32, field)], inbounds=True, source_etype=t.PTR))
        parallel_for = self._parallel_for() if context is not None else None
        runs_serially = b.call(self._runs_serially(), [executor]) if context is not None else None
        for i, parts in enumerate(kernels):
            serial_fn = serial_forms[i]
            done = None
            if serial_fn is not None:
                assert runs_serially is not None
                serial_block = fn.append_basic_block(f"k{i}_serial")
                threaded_block = fn.append_basic_block(f"k{i}_threaded")
                done = fn.append_basic_block(f"k{i}_done")
                b.cbranch(runs_serially, serial_block, threaded_block)
                b.position_at_end(serial_block)
                b.call(serial_fn, [self._argument(b, i, j, in_ptrs, out_ptrs, arena)
                                   for j in range(len(self.program.kernels[i].params))])
                b.branch(done)
                b.position_at_end(threaded_block)
            for seg, kernel_fn in parts:
                if seg.parallel:
                    assert parallel_for is not None and context is not None and seg.extent is not None
                    task = self._task(i, seg, kernel_fn)
                    b.call(parallel_for, [executor, task, context, ir.Constant(t.I32, seg.extent)])
                else:
                    args = [self._argument(b, i, j, in_ptrs, out_ptrs, arena) for j in seg.params]
                    b.call(kernel_fn, args)
            if done is not None:
                b.branch(done)
                b.position_at_end(done)
        b.ret(ir.Constant(t.I32, AOT_OK))

        ir.IRBuilder(null_block).ret(ir.Constant(t.I32, AOT_ERROR_NULL_POINTER))
        ir.IRBuilder(misaligned_block).ret(ir.Constant(t.I32, AOT_ERROR_ARENA_ALIGNMENT))
        return fn

    def _load_pointers(self, b: ir.IRBuilder, inputs: ir.Value,
                       outputs: ir.Value) -> tuple[list[ir.Value], list[ir.Value]]:
        in_ptrs = [b.load(b.gep(inputs, [ir.Constant(t.I32, i)], inbounds=True, source_etype=t.PTR), typ=t.PTR,
                          name=f"in{i}") for i in range(len(self.inputs))]
        out_ptrs = [b.load(b.gep(outputs, [ir.Constant(t.I32, i)], inbounds=True, source_etype=t.PTR), typ=t.PTR,
                           name=f"out{i}") for i in range(len(self.outputs))]
        return in_ptrs, out_ptrs

    def _task(self, kernel_index: int, seg: Segment, kernel_fn: ir.Function) -> ir.Function:
        """`void <segment>_task(void *context, int32_t first, int32_t last)`: model.c.j2's
        trampoline, computing the segment's arguments from the context like the run function."""
        fn = ir.Function(self.module, ir.FunctionType(t.VOID, [t.PTR, t.I32, t.I32]), f"{kernel_fn.name}_task")
        fn.linkage = "internal"
        self._function_attributes(fn)
        context, first, last = fn.args
        context.name, first.name, last.name = "context", "first", "last"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        inputs, outputs, arena = (
            b.load(b.gep(context, [ir.Constant(t.I32, field)], inbounds=True, source_etype=t.PTR), typ=t.PTR,
                   name=label)
            for field, label in enumerate(("inputs", "outputs", "arena")))
        in_ptrs, out_ptrs = self._load_pointers(b, inputs, outputs)
        args = [self._argument(b, kernel_index, j, in_ptrs, out_ptrs, arena) for j in seg.params]
        b.call(kernel_fn, [*args, first, last])
        b.ret_void()
        return fn

    def _runs_serially(self) -> ir.Function:
        """aot_runtime.h's aot_runs_serially: no executor, no parallel_for, or one thread (one
        function per module, shared by the run function and _parallel_for)."""
        existing = self.module.globals.get(f"{self.name}_runs_serially")
        if isinstance(existing, ir.Function):
            return existing
        fn = ir.Function(self.module, ir.FunctionType(t.I1, [t.PTR]), f"{self.name}_runs_serially")
        fn.linkage = "internal"
        self._function_attributes(fn)
        executor = fn.args[0]
        executor.name = "executor"
        entry, check = fn.append_basic_block("entry"), fn.append_basic_block("check")
        b = ir.IRBuilder(entry)
        null = ir.Constant(t.PTR, None)
        yes = ir.Constant(t.I1, 1)
        b.cbranch(b.icmp_unsigned("==", executor, null), fn.append_basic_block("none"), check)
        ir.IRBuilder(fn.blocks[-1]).ret(yes)
        b.position_at_end(check)
        # Its two pointers, then the int32 (at twice the pointer size on every target).
        method = b.load(executor, typ=t.PTR, name="method")
        threads = b.load(b.gep(executor, [ir.Constant(t.I32, 2)], inbounds=True, source_etype=t.PTR), typ=t.I32,
                         name="threads")
        b.ret(b.or_(b.icmp_unsigned("==", method, null), b.icmp_signed("<=", threads, ir.Constant(t.I32, 1))))
        return fn

    def _parallel_for(self) -> ir.Function:
        """aot_runtime.h's aot_parallel_for: through executor->parallel_for when the executor has
        several threads and there are several iterations, else one call fn(context, 0, count).
        aot_executor is { parallel_for, state, threads } with the target's C layout."""
        fn = ir.Function(self.module, ir.FunctionType(t.VOID, [t.PTR, t.PTR, t.PTR, t.I32]),
                         f"{self.name}_parallel_for")
        fn.linkage = "internal"
        self._function_attributes(fn)
        executor, task, context, count = fn.args
        executor.name, task.name, context.name, count.name = "executor", "task", "context", "count"
        entry = fn.append_basic_block("entry")
        split = fn.append_basic_block("split")
        serial = fn.append_basic_block("serial")
        b = ir.IRBuilder(entry)
        threaded = b.not_(b.call(self._runs_serially(), [executor]))
        b.cbranch(b.and_(threaded, b.icmp_signed(">", count, ir.Constant(t.I32, 1))), split, serial)
        b.position_at_end(split)
        method = b.load(executor, typ=t.PTR, name="method")
        method_type = ir.FunctionType(t.VOID, [t.PTR, t.PTR, t.PTR, t.I32])
        _indirect_call(b, method, method_type, [executor, task, context, count])
        b.ret_void()
        b.position_at_end(serial)
        _indirect_call(b, task, ir.FunctionType(t.VOID, [t.PTR, t.I32, t.I32]), [context, ir.Constant(t.I32, 0), count])
        b.ret_void()
        return fn

    def _argument(self, b: ir.IRBuilder, kernel_index: int, param_index: int, in_ptrs: list[ir.Value],
                  out_ptrs: list[ir.Value], arena: ir.Value) -> ir.Value:
        region = self._region(kernel_index, param_index)
        if region.kind in (INPUT, OUTPUT):
            base = (in_ptrs if region.kind == INPUT else out_ptrs)[region.index]
        else:
            base = arena if region.kind == ARENA else self._weights_global()
        if region.start == 0:
            return base
        return b.gep(base, [ir.Constant(t.I32, region.start)], inbounds=True, source_etype=t.I8)

    def _api(self, impl: ir.Function, info: ir.GlobalVariable) -> None:
        # <name>_inputs / <name>_outputs are structs of N object pointers, laid out exactly like
        # the arrays run_ptrs takes, so run needs no copy (model.c.j2 copies only because C
        # cannot portably index a struct); with no inputs impl never reads the inputs list.
        for suffix, parallel in (("run_ptrs", False), ("run", False), ("run_parallel_ptrs", True),
                                 ("run_parallel", True)):
            fn = ir.Function(self.module, ir.FunctionType(t.I32, [t.PTR] * (4 if parallel else 3)),
                             f"{self.name}_{suffix}")
            self._function_attributes(fn)
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            args = list(fn.args) if parallel else [*fn.args, ir.Constant(t.PTR, None)]
            b.ret(b.call(impl, args, tail=True))
        info_fn = ir.Function(self.module, ir.FunctionType(t.PTR, []), f"{self.name}_info")
        self._function_attributes(info_fn)
        ir.IRBuilder(info_fn.append_basic_block("entry")).ret(info)


def build_model_module(program: Program, plan: MemoryPlan, name: str, inputs: Sequence[dict[str, Any]],
                       outputs: Sequence[dict[str, Any]], spec: LlvmTarget) -> tuple[str, tuple[str, ...]]:
    """The model's LLVM IR text, and the external symbols it references with hidden visibility."""
    model = ModelModule(program, plan, name, inputs, outputs, spec)
    module = model.build()
    hidden = (model.weights_symbol,) if model.has_weights_reference() else ()
    return f'source_filename = "{name}"\n{module}', hidden
