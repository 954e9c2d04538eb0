"""Renders kernel IR as LLVM functions (the LLVM counterpart of aot/backends/c/kernel_printer.py).

Semantics follow the C the C backend prints, expression by expression, so both backends compute
bit-identical results whenever the C compiler does not itself reassociate or contract floats:

* Integer promotions, truncation on store and signedness are C's (see types.py).
* Float arithmetic carries no fast-math flags: no reassociation, no FMA contraction, NaN/Inf and
  signed zeros behave as IEEE 754 requires (what -std=c99 without -ffast-math gives). The one
  exception is the register tiles' vector MulAdd, which is llvm.fmuladd: fused where the target
  has FMA, as the C backend's `acc + a * b` is under -ffp-contract=fast.
* min/max are the C helpers `(a < b || a != a) ? a : b`, which propagate NaN from either side.
* C evaluates only the chosen operand of `?:` and the right operand of `&&`/`||` when needed.
  Those operands become branches when they could fault if evaluated speculatively (a load whose
  index is not provably inside its buffer, such as a padded convolution tap, or an integer
  division), and plain `select`s otherwise; LLVM's SimplifyCFG flattens what it can prove safe.

Scalar locals live in allocas (mem2reg/SROA promote them); loop counters are phis of
constant-trip-count loops in rotated form (`do { } while (++i < n)`), which is what LLVM's loop
passes expect and saves them the work of rotating.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

import aot.backends.llvm.types as t
import aot.kernel.ir as kernel_ir
from aot.backends.llvm.intrinsics import LLVM_BUILDERS
from aot.kernel.bounds import RANGE_OPS, combine
from aot.kernel.intrinsics import DotAdd, intrinsic_of
from aot.kernel.parallel import has_parallel
from aot.kernel.vectorize import index_step

# Unary ops that LLVM has exact intrinsics for (same results as the libm call the C backend makes;
# nearbyint honours the current rounding mode exactly like C's nearbyint()).
_INTRINSICS = {"sqrt": "llvm.sqrt", "abs": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil",
               "round_even": "llvm.nearbyint"}
# The rest are libm calls, named as in C: expf/exp, tanhf/tanh, ...
_LIBM = {"exp", "log", "tanh", "erf", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "log1p", "expm1"}
_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@dataclass(frozen=True)
class ParamInfo:
    """What the caller guarantees about one kernel pointer parameter."""

    align: int      # bytes; at least the element size
    noalias: bool   # no other parameter of the same call overlaps it (C's `restrict`)


@dataclass
class _Binding:
    """A name in scope: a loop counter (an SSA value with a known range) or a local variable slot."""

    dtype: str
    value: ir.Value | None = None          # loop counter
    slot: ir.AllocaInstr | None = None     # declared local
    bounds: tuple[int, int] | None = None  # loop counter range, for proving loads in bounds


class MathLibrary:
    """Declares the intrinsics and libm functions a module calls, once each."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module
        self._cache: dict[str, ir.Function] = {}

    def intrinsic(self, name: str, typ: ir.Type) -> ir.Function:
        return self.module.declare_intrinsic(name, [typ])

    def vector_intrinsic(self, name: str, vector: ir.VectorType, arity: int) -> ir.Function:
        """An intrinsic over a vector type, e.g. llvm.fmuladd.v8f32 (llvmlite cannot name those)."""
        element = {t.F32: "f32", t.F64: "f64"}[vector.element]
        symbol = f"{name}.v{vector.count}{element}"
        fn = self._cache.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(vector, [vector] * arity), symbol)
            self._cache[symbol] = fn
        return fn

    def declared(self, symbol: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
        """A function or target intrinsic of that type, declared once."""
        fn = self._cache.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(result, args), symbol)
            self._cache[symbol] = fn
        return fn

    def libm(self, name: str, typ: ir.Type, arity: int = 1) -> ir.Function:
        symbol = name + ("f" if typ == t.F32 else "")
        fn = self._cache.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(typ, [typ] * arity), symbol)
            # These functions only compute a value from their arguments. Declaring them readnone
            # (like -fno-math-errno) lets LLVM hoist and vectorise around them; results are the
            # same libm results, and the model never reads errno.
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")
            self._cache[symbol] = fn
        return fn


class KernelEmitter:
    """Emits each kernel of a module as an internal function `void name(ptr, ...)`."""

    def __init__(self, module: ir.Module, math: MathLibrary, paired_loads: bool = False,
                 separate_kernels: bool = False, dot_product: bool = False, avx2: bool = False,
                 rounds_lanes: bool = True) -> None:
        self.module = module
        self.math = math
        self.paired_loads = paired_loads
        # Whether llvm.roundeven of a vector is an instruction (vrintn, roundps...): everywhere but
        # 32-bit Arm NEON without ARMv8's floating point (+fp-armv8), see intrinsics.round_even_vector.
        self.rounds_lanes = rounds_lanes
        self.dot_product = dot_product  # aarch64's sdot (the target's +dotprod)
        self.avx2 = avx2  # x86's signed dot steps as vpmaddubsw (signed_dot_avx2)
        # Kernels kept out of the run function (noinline): see module.py's build.
        self.separate_kernels = separate_kernels

    def emit(self, kernel: kernel_ir.Kernel, name: str, params: Sequence[ParamInfo]) -> ir.Function:
        if len(params) != len(kernel.params):
            raise ValueError(f"{kernel.name}: {len(params)} parameter facts for {len(kernel.params)} params")
        # A parallel segment (aot/kernel/parallel.py) also takes the range [first, last) of its loop.
        parallel = has_parallel(kernel)
        bounds = [t.I32, t.I32] if parallel else []
        fn = ir.Function(self.module, ir.FunctionType(t.VOID, [t.PTR] * len(kernel.params) + bounds), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        if self.separate_kernels:
            fn.attributes.add("noinline")
        if parallel:
            fn.args[-2].name, fn.args[-1].name = "first", "last"
        for arg, buf, info in zip(fn.args, kernel.params, params):
            arg.name = buf.name
            arg.attributes.add("captures(none)")
            if info.noalias:
                arg.attributes.add("noalias")
            arg.attributes.align = info.align
            nbytes = buf.size * t.itemsize(buf.dtype)
            if nbytes > 0:
                # The caller passes whole tensors: lets LLVM speculate loads it can prove in range.
                arg.attributes.dereferenceable = nbytes
        _FunctionEmitter(fn, kernel, self.math, self.paired_loads, self.dot_product, self.avx2, self.rounds_lanes).run()
        return fn


class _FunctionEmitter:
    def __init__(self, fn: ir.Function, kernel: kernel_ir.Kernel, math: MathLibrary, paired_loads: bool,
                 dot_product: bool = False, avx2: bool = False, rounds_lanes: bool = True) -> None:
        self.fn = fn
        self.kernel = kernel
        self.math = math
        self.paired_loads = paired_loads
        self.rounds_lanes = rounds_lanes
        self.dot_product = dot_product
        self.avx2 = avx2
        self.buffers = {b.name: (b, arg) for b, arg in zip(kernel.params, fn.args)}
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        # Allocas go in the entry block, where mem2reg looks for them; code starts in `body`.
        self.allocas = ir.IRBuilder(entry)
        self.entry_exit = body
        self.b = ir.IRBuilder(body)
        self.scopes: list[dict[str, _Binding]] = []

    def run(self) -> None:
        self.block(self.kernel.body)
        self.b.ret_void()
        self.allocas.branch(self.entry_exit)

    # -- scopes ------------------------------------------------------------------------------
    def lookup(self, var: kernel_ir.Var) -> _Binding:
        for scope in reversed(self.scopes):
            if var.name in scope:
                return scope[var.name]
        raise NameError(f"{self.kernel.name}: variable {var.name} used outside its scope")

    def block(self, body: list[kernel_ir.Stmt]) -> None:
        """A C block `{ ... }`: declarations inside it end with it."""
        self.scopes.append({})
        paired = self.paired_loads and _load_pairs(body)
        for i, stmt in enumerate(body):
            if paired and i in paired:
                self.load_pair(stmt, body[i + 1])
            elif not (paired and i - 1 in paired):
                self.stmt(stmt)
        self.scopes.pop()

    def load_pair(self, first: kernel_ir.Stmt, second: kernel_ir.Stmt) -> None:
        """Two Declares of consecutive float32x4 vectors (_load_pairs) as one vld1 of four
        d registers: armv7's register tiles load a row's two operand vectors with one instruction
        (and LLVM then steps the row pointer in it), where two loads take three instructions
        (`python -m benchmarks.arm --targets rpi3` counts them)."""
        assert isinstance(first, kernel_ir.Declare) and isinstance(second, kernel_ir.Declare)
        assert isinstance(first.init, kernel_ir.VecLoad)
        buf, arg = self.buffers[first.init.buffer.name]
        ptr = self.b.gep(arg, [self.expr(first.init.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
        vector = t.storage_type(first.var.dtype)
        pair = ir.LiteralStructType([vector, vector])
        signature = ir.FunctionType(pair, [t.PTR])
        vld1x2 = self.math.module.declare_intrinsic("llvm.arm.neon.vld1x2.v4f32.p0", fnty=signature)
        loaded = self.b.call(vld1x2, [ptr])
        for half, declare in enumerate((first, second)):
            slot = self.allocas.alloca(vector, name=declare.var.name)
            self.b.store(self.b.extract_value(loaded, half), slot)
            self.scopes[-1][declare.var.name] = _Binding(declare.var.dtype, slot=slot)

    # -- statements --------------------------------------------------------------------------
    def stmt(self, s: kernel_ir.Stmt) -> None:
        if isinstance(s, kernel_ir.Loop):
            self.loop(s)
        elif isinstance(s, kernel_ir.Declare):
            slot = self.allocas.alloca(t.storage_type(s.var.dtype), name=s.var.name)
            self.b.store(self.to_storage(self.expr(s.init), s.var.dtype), slot)
            self.scopes[-1][s.var.name] = _Binding(s.var.dtype, slot=slot)
        elif isinstance(s, kernel_ir.Assign):
            binding = self.lookup(s.var)
            if binding.slot is None:
                raise TypeError(f"{self.kernel.name}: assignment to loop counter {s.var.name}")
            self.b.store(self.to_storage(self.expr(s.value), s.var.dtype), binding.slot)
        elif isinstance(s, kernel_ir.Store):
            buf, arg = self.buffers[s.buffer.name]
            ptr = self.b.gep(arg, [self.expr(s.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
            self.b.store(self.to_storage(self.expr(s.value), buf.dtype), ptr, align=t.itemsize(buf.dtype))
        elif isinstance(s, kernel_ir.NarrowStore):
            buf, arg = self.buffers[s.buffer.name]
            ptr = self.b.gep(arg, [self.expr(s.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
            value = self.expr(s.value)
            lanes = value.type.count
            narrow = self.b.trunc(value, ir.VectorType(t.I8, lanes))
            if s.count is not None:  # the first `count` lanes: a store of that many bytes
                first = ir.Constant(ir.VectorType(t.I32, s.count), list(range(s.count)))
                narrow = self.b.shuffle_vector(narrow, ir.Constant(narrow.type, ir.Undefined), first)
            self.b.store(narrow, ptr, align=1)
        elif isinstance(s, kernel_ir.VecStore):
            buf, arg = self.buffers[s.buffer.name]
            ptr = self.b.gep(arg, [self.expr(s.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
            self.b.store(self.expr(s.value), ptr, align=t.itemsize(buf.dtype))
        elif isinstance(s, kernel_ir.If):
            self.if_stmt(s)
        else:
            raise TypeError(f"{self.kernel.name}: cannot emit statement {s!r}")

    def loop(self, s: kernel_ir.Loop) -> None:
        if s.extent <= 0:  # C's `for (i = 0; i < 0; ++i)` runs no iteration
            return
        name = s.var.name
        typ = t.value_type(s.var.dtype)
        if not isinstance(typ, ir.IntType):
            raise TypeError(f"{self.kernel.name}: loop counter {name} has non-integer dtype {s.var.dtype}")
        header = self.fn.append_basic_block(f"{name}.loop")
        done = self.fn.append_basic_block(f"{name}.done")
        if s.parallel:
            # Iterations [first, last) of [0, extent): the caller guarantees 0 <= first <= last <= extent.
            start, stop = self.fn.args[-2], self.fn.args[-1]
            self.b.cbranch(self.b.icmp_signed("<", start, stop), header, done)
        else:
            start, stop = ir.Constant(typ, 0), ir.Constant(typ, s.extent)
            self.b.branch(header)
        before = self.b.block
        self.b.position_at_end(header)
        counter = self.b.phi(typ, name=name)
        counter.add_incoming(start, before)
        self.scopes.append({name: _Binding(s.var.dtype, value=counter, bounds=(0, s.extent - 1))})
        self.block(s.body)
        self.scopes.pop()
        # The counter stays in [0, extent], so the increment cannot wrap either way.
        step = self.b.add(counter, ir.Constant(typ, 1), name=f"{name}.next", flags=["nuw", "nsw"])
        counter.add_incoming(step, self.b.block)
        more = self.b.icmp_signed("<", step, stop)
        self.b.cbranch(more, header, done)
        self.b.position_at_end(done)

    def if_stmt(self, s: kernel_ir.If) -> None:
        cond = self.condition(s.cond)
        then_block = self.fn.append_basic_block("if.then")
        else_block = self.fn.append_basic_block("if.else") if s.orelse else None
        merge = self.fn.append_basic_block("if.end")
        self.b.cbranch(cond, then_block, else_block or merge)
        self.b.position_at_end(then_block)
        self.block(s.then)
        self.b.branch(merge)
        if else_block is not None:
            self.b.position_at_end(else_block)
            self.block(s.orelse)
            self.b.branch(merge)
        self.b.position_at_end(merge)

    # -- conversions between C types ---------------------------------------------------------
    def to_storage(self, value: ir.Value, dtype: str) -> ir.Value:
        """C assignment of a (promoted) value into a `dtype` object: truncates narrow integers."""
        target = t.storage_type(dtype)
        return self.b.trunc(value, target) if value.type != target else value

    def promote(self, raw: ir.Value, dtype: str) -> ir.Value:
        """C integer promotion of a stored `dtype` value."""
        if not t.is_narrow(dtype):
            return raw
        return self.b.zext(raw, t.I32) if t.zero_extends(dtype) else self.b.sext(raw, t.I32)

    def truth(self, value: ir.Value, dtype: str) -> ir.Value:
        """C's `value != 0` as i1 (for floats `!=`, so NaN is true)."""
        if t.is_float(dtype):
            return self.b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
        return self.b.icmp_signed("!=", value, ir.Constant(value.type, 0))

    def as_int(self, flag: ir.Value) -> ir.Value:
        """An i1 as the int 0/1 C comparisons and logical operators yield."""
        return self.b.zext(flag, t.I32)

    def condition(self, e: kernel_ir.Expr) -> ir.Value:
        """`e` as an i1, without the int round trip for comparisons and logical operators."""
        if isinstance(e, kernel_ir.Binary) and (e.op in kernel_ir.COMPARISONS or e.op == "xor"):
            return self.compare("ne" if e.op == "xor" else e.op, e.a, e.b)
        if isinstance(e, kernel_ir.Binary) and e.op in ("and", "or"):
            return self.logical(e)
        if isinstance(e, kernel_ir.Unary) and e.op in ("not", "isnan", "isinf", "isposinf", "isneginf"):
            return self.predicate(e)
        if isinstance(e, kernel_ir.Const):
            return ir.Constant(t.I1, 1 if e.value else 0)
        return self.truth(self.expr(e), e.dtype)

    # -- expressions -------------------------------------------------------------------------
    def expr(self, e: kernel_ir.Expr) -> ir.Value:
        if isinstance(e, kernel_ir.Const):
            return self.const(e)
        if isinstance(e, kernel_ir.Var):
            binding = self.lookup(e)
            if binding.value is not None:
                return binding.value
            assert binding.slot is not None
            raw = self.b.load(binding.slot, typ=t.storage_type(binding.dtype))
            return self.promote(raw, binding.dtype)
        if isinstance(e, kernel_ir.Load):
            buf, arg = self.buffers[e.buffer.name]
            ptr = self.b.gep(arg, [self.expr(e.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
            raw = self.b.load(ptr, typ=t.storage_type(buf.dtype), align=t.itemsize(buf.dtype))
            return self.promote(raw, buf.dtype)
        special = intrinsic_of(e)
        if special is not None:  # an instruction-shaped node: aot/backends/llvm/intrinsics.py
            return LLVM_BUILDERS[special.llvm](self, e)
        if isinstance(e, kernel_ir.VecLoad):
            buf, arg = self.buffers[e.buffer.name]
            ptr = self.b.gep(arg, [self.expr(e.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
            return self.b.load(ptr, typ=t.storage_type(e.dtype), align=t.itemsize(buf.dtype))
        if isinstance(e, kernel_ir.Splat):
            return self.splat(self.expr(e.a), t.storage_type(e.dtype))
        if isinstance(e, kernel_ir.VecConvert):
            a = self.expr(e.a)
            if e.dtype.startswith("float"):
                return self.b.sitofp(a, t.storage_type(e.dtype))
            return self.b.fptosi(a, t.storage_type(e.dtype))
        if isinstance(e, kernel_ir.VecMax):
            a, b = self.expr(e.a), self.expr(e.b)
            pick_a = self.b.or_(self.b.fcmp_ordered(">", a, b), self.b.fcmp_unordered("uno", a, a))
            return self.b.select(pick_a, a, b)
        if isinstance(e, kernel_ir.VecMin):
            a, b = self.expr(e.a), self.expr(e.b)
            pick_a = self.b.or_(self.b.fcmp_ordered("<", a, b), self.b.fcmp_unordered("uno", a, a))
            return self.b.select(pick_a, a, b)
        if isinstance(e, kernel_ir.VecReduce):
            return self.reduce_lanes(e)
        if isinstance(e, kernel_ir.VecArith) and e.dtype.startswith("int"):
            method = {"add": self.b.add, "sub": self.b.sub, "mul": self.b.mul}[e.op]
            return method(self.expr(e.a), self.expr(e.b))
        if isinstance(e, kernel_ir.VecArith):
            method = {"add": self.b.fadd, "sub": self.b.fsub, "mul": self.b.fmul, "div": self.b.fdiv}[e.op]
            return method(self.expr(e.a), self.expr(e.b))
        if isinstance(e, kernel_ir.VecSelect) and e.extremum and self.extrema_of_numbers:
            return self.extremum(e.extremum, self.expr(e.a), self.expr(e.b))
        if isinstance(e, kernel_ir.VecSelect):
            sign = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.cmp]
            holds = self.b.fcmp_ordered(sign, self.expr(e.a), self.expr(e.b))
            return self.b.select(holds, self.expr(e.x), self.expr(e.y))
        if isinstance(e, kernel_ir.MulAdd):
            typ = t.storage_type(e.dtype)
            if isinstance(typ, ir.VectorType):
                fmuladd = self.math.vector_intrinsic("llvm.fmuladd", typ, 3)
            else:  # the scalar ones of aot/kernel/transcendentals.py
                fmuladd = self.math.module.declare_intrinsic("llvm.fmuladd", [typ], ir.FunctionType(typ, [typ] * 3))
            return self.b.call(fmuladd, [self.expr(e.a), self.expr(e.b), self.expr(e.acc)])
        if isinstance(e, kernel_ir.Bitcast):
            return self.b.bitcast(self.expr(e.a), t.storage_type(e.dtype))
        if isinstance(e, kernel_ir.Binary):
            return self.binary(e)
        if isinstance(e, kernel_ir.Unary):
            return self.unary(e)
        if isinstance(e, kernel_ir.Select):
            return self.select(e)
        if isinstance(e, kernel_ir.Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.dtype)
        raise TypeError(f"{self.kernel.name}: cannot emit expression {e!r}")

    def reduce_lanes(self, e: kernel_ir.VecReduce) -> ir.Value:
        """VecReduce's halving tree as shuffles (not llvm.vector.reduce.fadd, whose order is
        sequential unless reassociation is allowed, which would leave the order to LLVM): lane i
        with lane i + half, until one lane is left."""
        v = self.expr(e.a)
        width = v.type.count
        while width > 1:
            width //= 2
            low = self.b.shuffle_vector(v, v, ir.Constant(ir.VectorType(t.I32, width), list(range(width))))
            high = self.b.shuffle_vector(v, v, ir.Constant(ir.VectorType(t.I32, width), list(range(width, 2 * width))))
            if e.op == "add":
                v = self.b.fadd(low, high)
            else:  # as VecMax: a NaN wins
                pick = self.b.or_(self.b.fcmp_ordered(">", low, high), self.b.fcmp_unordered("uno", low, low))
                v = self.b.select(pick, low, high)
        return self.b.extract_element(v, ir.Constant(t.I32, 0))

    def shuffle(self, a: ir.Value, b: ir.Value, lanes: list[int]) -> ir.Value:
        """The lanes of a, then b (numbered on from a's), picked in this order."""
        return self.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes))

    def splat(self, value: ir.Value, vector: ir.VectorType) -> ir.Value:
        lane0 = self.b.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(t.I32, 0))
        mask = ir.Constant(ir.VectorType(t.I32, vector.count), [0] * vector.count)
        return self.b.shuffle_vector(lane0, ir.Constant(vector, ir.Undefined), mask)

    @property
    def extrema_of_numbers(self) -> bool:
        """Whether a min or max of numbers (kernel IR Select, VecSelect with `numbers`) is one
        instruction, fminnm / fmaxnm: aarch64, and ARMv8's NEON in 32-bit mode (rpi3, +fp-armv8:
        vminnm.f32), one instruction where a compare and a pick took two. (Elsewhere LLVM's minnum
        can be a call or several instructions: the select stays.)"""
        return self.fn.module.triple.startswith("aarch64") or (self.paired_loads and self.rounds_lanes)

    def extremum(self, kind: str, a: ir.Value, b: ir.Value) -> ir.Value:
        """llvm.minnum / maxnum (`kind` min or max) of a and b, float32 scalars or vectors."""
        if isinstance(a.type, ir.VectorType):
            fn = self.math.vector_intrinsic(f"llvm.{kind}num", a.type, 2)
        else:
            fn = self.math.module.declare_intrinsic(f"llvm.{kind}num", [a.type], ir.FunctionType(a.type, [a.type] * 2))
        return self.b.call(fn, [a, b])

    def const(self, e: kernel_ir.Const) -> ir.Value:
        typ = t.value_type(e.dtype)
        if t.is_float(e.dtype):
            value = float(e.value)
            if e.dtype == "float32":
                with np.errstate(over="ignore"):  # rounds like the C printer: 1e40 -> INFINITY
                    value = float(np.float32(value))
            # The C printer writes every NaN as NAN (the positive quiet NaN); do the same.
            return ir.Constant(typ, float("nan") if value != value else value)
        return t.int_constant(int(bool(e.value)) if e.dtype == "bool" else int(e.value), typ)

    def binary(self, e: kernel_ir.Binary) -> ir.Value:
        op, operand = e.op, e.a.dtype
        if op in kernel_ir.COMPARISONS or op == "xor":
            # C: `a < b` is an int 0/1; the IR's xor of two bools is printed as `a != b`.
            return self.as_int(self.compare("ne" if op == "xor" else op, e.a, e.b))
        if op in ("and", "or"):
            return self.as_int(self.logical(e))
        a, b = self.expr(e.a), self.expr(e.b)
        if op in ("min", "max"):
            return self.min_max(op, a, b, operand)
        if t.is_float(operand):
            if op == "pow":
                return self.b.call(self.math.libm("pow", a.type, 2), [a, b])
            # frem is C's fmod exactly (and lowers to fmodf/fmod where there is no instruction).
            method = {"add": self.b.fadd, "sub": self.b.fsub, "mul": self.b.fmul, "div": self.b.fdiv,
                      "mod": self.b.frem}[op]
            return method(a, b)
        if op == "pow":
            raise TypeError(f"{self.kernel.name}: integer pow is not part of the kernel IR")
        unsigned = t.unsigned_value(operand)
        # Index arithmetic cannot overflow (the IR verifier caps tensors at 2**31-1 elements), and
        # telling LLVM so (nsw, as C's signed int rules do) lets it widen offsets to 64-bit
        # addresses. Tensor data arithmetic wraps, which is what C compilers do in practice.
        flags = ["nsw"] if operand == kernel_ir.INDEX and op in ("add", "sub", "mul") else []
        if op == "add":
            return self.b.add(a, b, flags=flags)
        if op == "sub":
            return self.b.sub(a, b, flags=flags)
        if op == "mul":
            return self.b.mul(a, b, flags=flags)
        if op in kernel_ir.BITWISE_OPS:  # C's << >> & | (>> of a signed value: arithmetic, as gcc's)
            if op == "shr":
                return self.b.lshr(a, b) if unsigned else self.b.ashr(a, b)
            return {"shl": self.b.shl, "bitand": self.b.and_, "bitor": self.b.or_}[op](a, b)
        if op == "div":
            return self.b.udiv(a, b) if unsigned else self.b.sdiv(a, b)
        if op == "mod":
            return self.b.urem(a, b) if unsigned else self.b.srem(a, b)
        raise TypeError(f"{self.kernel.name}: cannot emit binary {op}")

    def compare(self, op: str, ea: kernel_ir.Expr, eb: kernel_ir.Expr) -> ir.Value:
        a, b = self.expr(ea), self.expr(eb)
        if t.is_float(ea.dtype):
            # Ordered comparisons are false with a NaN operand; C's != is the unordered one.
            if op == "ne":
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(_FCMP[op], a, b)
        if t.unsigned_value(ea.dtype):
            return self.b.icmp_unsigned(_FCMP[op], a, b)
        return self.b.icmp_signed(_FCMP[op], a, b)

    def logical(self, e: kernel_ir.Binary) -> ir.Value:
        """C's `a && b` / `a || b` as i1. The right side is evaluated only when needed if it could
        fault; otherwise a select (the poison-safe form of and/or) lets LLVM pick the best code."""
        lhs = self.condition(e.a)
        if not self.may_fault(e.b):
            rhs = self.condition(e.b)
            if e.op == "and":
                return self.b.select(lhs, rhs, ir.Constant(t.I1, 0))
            return self.b.select(lhs, ir.Constant(t.I1, 1), rhs)
        start = self.b.block
        rhs_block = self.fn.append_basic_block(f"{e.op}.rhs")
        merge = self.fn.append_basic_block(f"{e.op}.end")
        if e.op == "and":
            self.b.cbranch(lhs, rhs_block, merge)
        else:
            self.b.cbranch(lhs, merge, rhs_block)
        self.b.position_at_end(rhs_block)
        rhs = self.condition(e.b)
        rhs_end = self.b.block
        self.b.branch(merge)
        self.b.position_at_end(merge)
        phi = self.b.phi(t.I1)
        phi.add_incoming(ir.Constant(t.I1, 0 if e.op == "and" else 1), start)
        phi.add_incoming(rhs, rhs_end)
        return phi

    def min_max(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        if t.is_float(dtype):
            # aot_min_float32: (a < b || a != a) ? a : b -- NaN in either operand propagates.
            first = self.b.fcmp_ordered("<" if op == "min" else ">", a, b)
            a_nan = self.b.fcmp_unordered("uno", a, a)
            return self.b.select(self.b.or_(first, a_nan), a, b)
        # The C helper takes its arguments as the dtype's own C type, so narrow values are
        # truncated on the way in and compared with that type's signedness.
        storage = t.storage_type(dtype)
        if a.type != storage:
            a, b = self.b.trunc(a, storage), self.b.trunc(b, storage)
        cmp = self.b.icmp_unsigned if t.unsigned_storage(dtype) else self.b.icmp_signed
        chosen = self.b.select(cmp("<" if op == "min" else ">", a, b), a, b)
        return self.promote(chosen, dtype)

    def unary(self, e: kernel_ir.Unary) -> ir.Value:
        op, operand = e.op, e.a.dtype
        if op in ("not", "isnan", "isinf", "isposinf", "isneginf"):
            return self.as_int(self.predicate(e))
        a = self.expr(e.a)
        floating = t.is_float(operand)
        if op == "neg":
            return self.b.fneg(a) if floating else self.b.sub(ir.Constant(a.type, 0), a)
        if op == "sign":
            # C: ((a > 0) - (a < 0)), an int; convert it to the result dtype right away (exact).
            zero = ir.Constant(a.type, 0.0 if floating else 0)
            if floating:
                pos, neg = self.b.fcmp_ordered(">", a, zero), self.b.fcmp_ordered("<", a, zero)
            else:
                cmp = self.b.icmp_unsigned if t.unsigned_value(operand) else self.b.icmp_signed
                pos, neg = cmp(">", a, zero), cmp("<", a, zero)
            diff = self.b.sub(self.as_int(pos), self.as_int(neg))
            return self.cast(diff, "int32", e.dtype)
        if op == "abs" and not floating:
            # C: (a < 0 ? -a : a) on the promoted value (unsigned values are never below 0).
            if t.unsigned_value(operand):
                return a
            negative = self.b.icmp_signed("<", a, ir.Constant(a.type, 0))
            return self.b.select(negative, self.b.sub(ir.Constant(a.type, 0), a), a)
        if not floating:
            raise TypeError(f"{self.kernel.name}: unary {op} on {operand} has no C meaning")
        if op in _INTRINSICS:
            return self.b.call(self.math.intrinsic(_INTRINSICS[op], a.type), [a])
        if op in _LIBM:
            return self.b.call(self.math.libm(op, a.type), [a])
        raise TypeError(f"{self.kernel.name}: cannot emit unary {op}")

    def predicate(self, e: kernel_ir.Unary) -> ir.Value:
        """The i1 of the boolean unary ops."""
        a = self.expr(e.a)
        if e.op == "not":
            return self.b.not_(self.truth(a, e.a.dtype))
        if not t.is_float(e.a.dtype):
            # isnan/isinf of an integer converts it to floating point first: never NaN or Inf.
            return ir.Constant(t.I1, 0)
        if e.op == "isnan":
            return self.b.fcmp_unordered("uno", a, a)
        inf = ir.Constant(a.type, float("inf"))
        if e.op == "isinf":
            return self.b.fcmp_ordered("==", self.b.call(self.math.intrinsic("llvm.fabs", a.type), [a]), inf)
        if e.op == "isposinf":
            return self.b.fcmp_ordered("==", a, inf)
        return self.b.fcmp_ordered("==", a, ir.Constant(a.type, float("-inf")))

    def select(self, e: kernel_ir.Select) -> ir.Value:
        if e.extremum and e.dtype == "float32" and self.extrema_of_numbers:
            return self.extremum(e.extremum, self.expr(e.a), self.expr(e.b))
        cond = self.condition(e.cond)
        if e.eager or not (self.may_fault(e.a) or self.may_fault(e.b)):
            return self.b.select(cond, self.expr(e.a), self.expr(e.b))
        # C's ?: evaluates only the chosen operand, and one of them could fault here.
        then_block = self.fn.append_basic_block("sel.then")
        else_block = self.fn.append_basic_block("sel.else")
        merge = self.fn.append_basic_block("sel.end")
        self.b.cbranch(cond, then_block, else_block)
        self.b.position_at_end(then_block)
        a = self.expr(e.a)
        then_end = self.b.block
        self.b.branch(merge)
        self.b.position_at_end(else_block)
        b = self.expr(e.b)
        else_end = self.b.block
        self.b.branch(merge)
        self.b.position_at_end(merge)
        phi = self.b.phi(a.type)
        phi.add_incoming(a, then_end)
        phi.add_incoming(b, else_end)
        return phi

    def cast(self, value: ir.Value, src: str, dst: str) -> ir.Value:
        """C's `(dst)value` for a value of dtype `src`, yielding a promoted `dst` value."""
        if dst == "bool":  # printed as (uint8_t)(value != 0)
            return self.as_int(self.truth(value, src))
        target = t.storage_type(dst)
        if t.is_float(dst):
            if t.is_float(src):
                if value.type == target:
                    return value
                return self.b.fpext(value, target) if dst == "float64" else self.b.fptrunc(value, target)
            return self.b.uitofp(value, target) if t.unsigned_value(src) else self.b.sitofp(value, target)
        if t.is_float(src):
            if t.is_narrow(dst):
                # Float to a type narrower than int: convert to int, then wrap -- what C compilers
                # emit (the out-of-range case is undefined in C; this keeps it deterministic).
                return self.promote(self.b.trunc(self.b.fptosi(value, t.I32), target), dst)
            converted = self.b.fptoui(value, target) if t.unsigned_storage(dst) else self.b.fptosi(value, target)
            return converted
        # Integer to integer: C converts the value modulo 2^n of the target type.
        if value.type.width > target.width:
            converted = self.b.trunc(value, target)
        elif value.type.width < target.width:
            extend = self.b.zext if t.unsigned_value(src) else self.b.sext
            converted = extend(value, target)
        else:
            converted = value
        return self.promote(converted, dst)

    # -- speculation safety ------------------------------------------------------------------
    def may_fault(self, e: kernel_ir.Expr) -> bool:
        """Whether evaluating `e` unconditionally could touch memory outside a buffer or trap.

        Loads are safe when their index range, from the enclosing loop counters, lies inside the
        buffer. Operands of a nested select or of && / || are guarded by their own branches.
        """
        if isinstance(e, kernel_ir.Load):
            bounds = self.bounds(e.index)
            if bounds is None or bounds[0] < 0 or bounds[1] >= e.buffer.size:
                return True
            return self.may_fault(e.index)
        if isinstance(e, kernel_ir.Binary):
            if e.op in ("div", "mod") and not t.is_float(e.a.dtype):
                divisor = e.b
                if not (isinstance(divisor, kernel_ir.Const) and int(divisor.value) not in (0, -1)):
                    return True
            if e.op in ("and", "or"):
                return self.may_fault(e.a)
            return self.may_fault(e.a) or self.may_fault(e.b)
        if isinstance(e, kernel_ir.Select):
            return self.may_fault(e.cond)
        if isinstance(e, (kernel_ir.Unary, kernel_ir.Cast, kernel_ir.Bitcast)):
            return self.may_fault(e.a)
        if isinstance(e, (kernel_ir.MulAdd, DotAdd)):
            return self.may_fault(e.acc) or self.may_fault(e.a) or self.may_fault(e.b)
        return False

    def bounds(self, e: kernel_ir.Expr) -> tuple[int, int] | None:
        """An inclusive range containing every value the index expression `e` can take, if known."""
        if isinstance(e, kernel_ir.Const) and not t.is_float(e.dtype):
            return int(e.value), int(e.value)
        if isinstance(e, kernel_ir.Var):
            return self.lookup(e).bounds
        if isinstance(e, kernel_ir.Binary) and e.op in RANGE_OPS:
            return combine(e.op, self.bounds(e.a), self.bounds(e.b))
        return None


__all__ = ["KernelEmitter", "MathLibrary", "ParamInfo"]


def _load_pairs(body: list[kernel_ir.Stmt]) -> set[int]:
    """Positions i of `body` where statement i declares a float32x4 loaded from memory and
    statement i + 1 the next 4 floats of the same buffer (a register tile's row of operands)."""
    pairs: set[int] = set()
    i = 0
    while i + 1 < len(body):
        first, second = body[i], body[i + 1]
        if (isinstance(first, kernel_ir.Declare) and isinstance(second, kernel_ir.Declare)
                and type(first.init) is kernel_ir.VecLoad and type(second.init) is kernel_ir.VecLoad
                and first.init.dtype == second.init.dtype == "float32x4"
                and first.init.buffer == second.init.buffer
                and index_step(first.init.index, second.init.index) == 4):
            pairs.add(i)
            i += 2
        else:
            i += 1
    return pairs
