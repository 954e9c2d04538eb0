"""The whole model as one LLVM module: kernels, the tensor-info tables and the public C API.

The module defines exactly the functions <name>.h declares (aot/c_api.py ENTRY_POINTS) for the
RunPlan of aot/backends/run_plan.py, which the C backend prints as <name>.c: the same kernel
calls in the same order, the same arguments, the same NULL and alignment checks and status codes
(from runtime_c/aot_runtime.h). It takes the weights from the external `<name>_weights` object
that <name>_weights.c (or, with binary weights, <name>_weights.S) defines, addressing members by
their byte offsets (aot/planner/weights.py), which both formats lay out identically.

The run function hands each parallel segment to the executor through a task trampoline: the
context is three pointers (inputs, outputs, arena), as the C backend's <name>_context, and
`aot_parallel_for` of aot_runtime.h is an internal function here.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

import aot.backends.llvm.types as t
from aot import c_api
from aot.backends.c.model_source import run_kernels
from aot.backends.llvm.kernel_emitter import KernelEmitter, MathLibrary, ParamInfo
from aot.backends.llvm.target import LlvmTarget
from aot.backends.run_plan import Argument, Call, Port, RunPlan
from aot.codegen.kernel_names import kernel_symbols
from aot.lowering.program import ARENA, INPUT, OUTPUT, WEIGHT
from aot.planner.weights import WEIGHT_ALIGN
from aot.targets.capabilities import instruction_set

# Models with more inputs and outputs than this keep their run function unoptimised.
MANY_PORTS = 256


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


@dataclass
class _Frame:
    """Where the run function's code is being built, and the values its calls use."""

    function: ir.Function
    builder: ir.IRBuilder
    in_ptrs: list[ir.Value]
    out_ptrs: list[ir.Value]
    arena: ir.Value
    executor: ir.Value
    context: ir.Value | None = None          # with tasks: the <name>_context the tasks read
    parallel_for: ir.Function | None = None
    runs_serially: ir.Value | None = None


class ModelModule:
    """Builds the LLVM IR of one model for one target."""

    def __init__(self, run: RunPlan, spec: LlvmTarget) -> None:
        self.run = run
        self.name = run.name
        self.spec = spec
        self.size_t = ir.IntType(spec.pointer_bits)
        self.module = ir.Module(name=run.name)
        self.module.triple = spec.triple
        self._weights: ir.GlobalVariable | None = None
        # The kernels' function names, as the C backend's (after their ONNX nodes).
        self._symbols = kernel_symbols(run.name, run_kernels(run))

    @property
    def weights_symbol(self) -> str:
        return f"{self.run.weights_name}_weights"

    def build(self) -> ir.Module:
        isa = instruction_set(self.spec.arch, self.spec.features)
        # 32-bit Arm NEON: vld1 loads up to four d registers at once (kernel_emitter._load_pairs).
        paired_loads = isa.family == "arm" and isa.neon
        # On Arm the kernels stay functions of their own: inlined, their loops get more address
        # arithmetic and spills, as in the C backend (AOT_KERNEL in runtime_c/aot_compiler_hints.h;
        # benchmark: ResNet-8 on rpi3).
        emitter = KernelEmitter(self.module, MathLibrary(self.module), paired_loads,
                                separate_kernels=isa.family in ("arm", "aarch64"), dot_product=isa.dot_product,
                                avx2=isa.avx2, rounds_lanes=not paired_loads or isa.fp_armv8)
        kernels: list[list[tuple[Call, ir.Function]]] = []
        serial_forms: list[tuple[Call, ir.Function] | None] = []
        for step in self.run.steps:
            kernels.append([(call, self._emit(emitter, call)) for call in step.calls])
            # A split kernel also as one function with constant loop bounds, for runs without
            # threads (as in the C backend).
            serial_forms.append((step.serial, self._emit(emitter, step.serial)) if step.serial else None)
        info = self._info_tables()
        impl = self._run_impl(kernels, serial_forms)
        self._api(impl, info)
        return self.module

    def has_weights_reference(self) -> bool:
        return self._weights is not None

    # -- kernel arguments --------------------------------------------------------------------
    def _emit(self, emitter: KernelEmitter, call: Call) -> ir.Function:
        fn = emitter.emit(call.kernel, self._symbols[call.kernel.name], self._param_facts(call))
        self._function_attributes(fn)
        return fn

    def _param_facts(self, call: Call) -> list[ParamInfo]:
        facts = []
        for i, arg in enumerate(call.arguments):
            if arg.kind == ARENA:
                # run_ptrs has checked the arena against ARENA_ALIGN before any kernel runs.
                align = _power_of_two_dividing(arg.start, self.run.arena_align)
            elif arg.kind == WEIGHT:
                align = _power_of_two_dividing(arg.start, WEIGHT_ALIGN)
            else:
                align = 1  # caller's buffers: only the element alignment C itself assumes
            # `noalias` only matters against memory written during the call (like C restrict).
            facts.append(ParamInfo(max(align, t.itemsize(arg.dtype)), noalias=i not in call.may_alias))
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
            typ = ir.ArrayType(t.I8, max(self.run.weights_struct_bytes, 1))
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
        tables = [self._constant(f"{self.name}_{kind}_info", self._tensor_rows(kind, ports, tensor_info))
                  for kind, ports in (("input", self.run.inputs), ("output", self.run.outputs))]
        model_info = ir.LiteralStructType([t.PTR, t.I32, t.I32, t.PTR, t.PTR, self.size_t, self.size_t,
                                           self.size_t])
        return self._constant(f"{self.name}_model_info", ir.Constant(model_info, [
            self._string(f"{self.name}_model_name", self.name),
            ir.Constant(t.I32, len(self.run.inputs)), ir.Constant(t.I32, len(self.run.outputs)),
            tables[0], tables[1],
            ir.Constant(self.size_t, self.run.arena_bytes), ir.Constant(self.size_t, self.run.arena_align),
            ir.Constant(self.size_t, self.run.weights_bytes)]))

    def _tensor_rows(self, kind: str, ports: tuple[Port, ...], tensor_info: ir.LiteralStructType) -> ir.Constant:
        """The aot_tensor_info array of the inputs or the outputs."""
        rows = []
        for port in ports:
            dims = list(port.shape) or [0]  # rank 0: C declares dims[1] = { 0 }
            dims_global = self._constant(
                f"{self.name}_{kind}{port.index}_dims",
                ir.Constant(ir.ArrayType(t.I64, len(dims)), [ir.Constant(t.I64, d) for d in dims]))
            label = self._string(f"{self.name}_{kind}{port.index}_name", port.name)
            rows.append(ir.Constant(tensor_info, [
                label, ir.Constant(t.I32, port.dtype_code.value), ir.Constant(t.I32, port.rank),
                dims_global, ir.Constant(self.size_t, port.size), ir.Constant(self.size_t, port.nbytes)]))
        if not rows:  # C: a one-element placeholder array, as C has no empty arrays
            empty = self._string(f"{self.name}_{kind}_none", "")
            rows.append(ir.Constant(tensor_info, [
                empty, ir.Constant(t.I32, c_api.dtype_codes()["float32"].value), ir.Constant(t.I32, 0),
                ir.Constant(t.PTR, None), ir.Constant(self.size_t, 0), ir.Constant(self.size_t, 0)]))
        return ir.Constant(ir.ArrayType(tensor_info, len(rows)), rows)

    # -- run ---------------------------------------------------------------------------------
    def _run_impl(self, kernels: list[list[tuple[Call, ir.Function]]],
                  serial_forms: list[tuple[Call, ir.Function] | None]) -> ir.Function:
        """`aot_status impl(const void *const *inputs, void *const *outputs, void *arena,
        const aot_executor *executor)`.

        Shared by the four run functions (all tail-call it), so the model code exists once; the
        checks and their order are model.c.j2's.
        """
        fn = ir.Function(self.module, ir.FunctionType(t.I32, [t.PTR] * 4), f"{self.name}_run_impl")
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        if len(self.run.inputs) + len(self.run.outputs) > MANY_PORTS:
            # LLVM's O3 passes take quadratic time over thousands of pointer checks (a 10,000-input
            # Concat: minutes); the kernels it calls are optimised on their own.
            fn.attributes.add("optnone")
        self._function_attributes(fn)
        inputs, outputs, arena, executor = fn.args
        inputs.name, outputs.name, arena.name, executor.name = "inputs", "outputs", "arena", "executor"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        null_block = fn.append_basic_block("null_pointer")
        misaligned_block = fn.append_basic_block("misaligned")
        in_ptrs, out_ptrs = self._checks(fn, b, null_block, misaligned_block)
        frame = _Frame(fn, b, in_ptrs, out_ptrs, arena, executor)
        if self.run.has_tasks:
            # model.c.j2's <name>_context: the pointers the tasks compute their arguments from.
            # Three pointers in a row: the layout of the C struct.
            frame.context = b.alloca(t.PTR, size=ir.Constant(t.I32, 3), name="context")
            for field, value in enumerate((inputs, outputs, arena)):
                b.store(value, b.gep(frame.context, [ir.Constant(t.I32, field)], inbounds=True, source_etype=t.PTR))
            frame.parallel_for = self._parallel_for()
            frame.runs_serially = b.call(self._runs_serially(), [executor])
        for i, parts in enumerate(kernels):
            self._step(frame, i, parts, serial_forms[i])
        b.ret(ir.Constant(t.I32, c_api.status_code("AOT_OK")))

        ir.IRBuilder(null_block).ret(ir.Constant(t.I32, c_api.status_code("AOT_ERROR_NULL_POINTER")))
        ir.IRBuilder(misaligned_block).ret(ir.Constant(t.I32, c_api.status_code("AOT_ERROR_ARENA_ALIGNMENT")))
        return fn

    def _checks(self, fn: ir.Function, b: ir.IRBuilder, null_block: ir.Block,
                misaligned_block: ir.Block) -> tuple[list[ir.Value], list[ir.Value]]:
        """The run function's checks: no NULL list, input, output or (if used) arena, an aligned
        arena. Leaves `b` where they have passed; returns the input and output pointers."""
        inputs, outputs, arena, _ = fn.args
        null = ir.Constant(t.PTR, None)
        lists_ok = fn.append_basic_block("lists_ok")
        either = b.or_(b.icmp_unsigned("==", inputs, null), b.icmp_unsigned("==", outputs, null))
        b.cbranch(either, null_block, lists_ok)

        b.position_at_end(lists_ok)
        in_ptrs, out_ptrs = self._load_pointers(b, inputs, outputs)
        missing = [b.icmp_unsigned("==", p, null) for p in in_ptrs + out_ptrs]
        if self.run.arena_bytes > 0:
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
        low_bits = b.and_(address, ir.Constant(self.size_t, self.run.arena_align - 1))
        aligned = fn.append_basic_block("aligned")
        b.cbranch(b.icmp_unsigned("!=", low_bits, ir.Constant(self.size_t, 0)), misaligned_block, aligned)
        b.position_at_end(aligned)
        return in_ptrs, out_ptrs

    def _step(self, frame: _Frame, i: int, parts: list[tuple[Call, ir.Function]],
              serial: tuple[Call, ir.Function] | None) -> None:
        """The calls of kernel `i`: its serial form when the run has no threads, else its segments."""
        fn, b = frame.function, frame.builder
        done = None
        if serial is not None:
            assert frame.runs_serially is not None
            serial_block = fn.append_basic_block(f"k{i}_serial")
            threaded_block = fn.append_basic_block(f"k{i}_threaded")
            done = fn.append_basic_block(f"k{i}_done")
            b.cbranch(frame.runs_serially, serial_block, threaded_block)
            b.position_at_end(serial_block)
            serial_call, serial_fn = serial
            b.call(serial_fn, [self._argument(b, a, frame.in_ptrs, frame.out_ptrs, frame.arena)
                               for a in serial_call.arguments])
            b.branch(done)
            b.position_at_end(threaded_block)
        for call, kernel_fn in parts:
            if call.parallel:
                assert frame.parallel_for is not None and frame.context is not None and call.extent is not None
                task = self._task(call, kernel_fn)
                b.call(frame.parallel_for, [frame.executor, task, frame.context, ir.Constant(t.I32, call.extent)])
            else:
                b.call(kernel_fn, [self._argument(b, a, frame.in_ptrs, frame.out_ptrs, frame.arena)
                                   for a in call.arguments])
        if done is not None:
            b.branch(done)
            b.position_at_end(done)

    def _load_pointers(self, b: ir.IRBuilder, inputs: ir.Value,
                       outputs: ir.Value) -> tuple[list[ir.Value], list[ir.Value]]:
        in_ptrs = [b.load(b.gep(inputs, [ir.Constant(t.I32, i)], inbounds=True, source_etype=t.PTR), typ=t.PTR,
                          name=f"in{i}") for i in range(len(self.run.inputs))]
        out_ptrs = [b.load(b.gep(outputs, [ir.Constant(t.I32, i)], inbounds=True, source_etype=t.PTR), typ=t.PTR,
                           name=f"out{i}") for i in range(len(self.run.outputs))]
        return in_ptrs, out_ptrs

    def _task(self, call: Call, kernel_fn: ir.Function) -> ir.Function:
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
        args = [self._argument(b, a, in_ptrs, out_ptrs, arena) for a in call.arguments]
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

    def _argument(self, b: ir.IRBuilder, arg: Argument, in_ptrs: list[ir.Value], out_ptrs: list[ir.Value],
                  arena: ir.Value) -> ir.Value:
        if arg.kind in (INPUT, OUTPUT):
            base = (in_ptrs if arg.kind == INPUT else out_ptrs)[arg.index]
        else:
            base = arena if arg.kind == ARENA else self._weights_global()
        if arg.start == 0:
            return base
        return b.gep(base, [ir.Constant(t.I32, arg.start)], inbounds=True, source_etype=t.I8)

    def _api(self, impl: ir.Function, info: ir.GlobalVariable) -> None:
        # <name>_inputs / <name>_outputs are structs of N object pointers, laid out exactly like
        # the arrays run_ptrs takes, so run needs no copy (model.c.j2 copies only because C
        # cannot portably index a struct); with no inputs impl never reads the inputs list.
        for suffix in (c_api.RUN_PTRS, c_api.RUN, c_api.RUN_PARALLEL_PTRS, c_api.RUN_PARALLEL):
            parallel = suffix in c_api.TAKES_EXECUTOR
            fn = ir.Function(self.module, ir.FunctionType(t.I32, [t.PTR] * (4 if parallel else 3)),
                             c_api.entry_point(self.name, suffix))
            self._function_attributes(fn)
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            args = list(fn.args) if parallel else [*fn.args, ir.Constant(t.PTR, None)]
            b.ret(b.call(impl, args, tail=True))
        info_fn = ir.Function(self.module, ir.FunctionType(t.PTR, []), c_api.entry_point(self.name, c_api.INFO))
        self._function_attributes(info_fn)
        ir.IRBuilder(info_fn.append_basic_block("entry")).ret(info)


def build_model_module(run: RunPlan, spec: LlvmTarget) -> tuple[str, tuple[str, ...]]:
    """The model's LLVM IR text, and the external symbols it references with hidden visibility."""
    model = ModelModule(run, spec)
    module = model.build()
    hidden = (model.weights_symbol,) if model.has_weights_reference() else ()
    return f'source_filename = "{run.name}"\n{module}', hidden
