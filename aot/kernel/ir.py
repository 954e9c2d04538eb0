"""The kernel IR: what an op *means*, written once and printed by each backend.

A Kernel is a function over flat buffers whose body is a tree of statements (constant-trip loops,
scalar locals, conditionals, stores) over expressions (constants, loop variables, loads, arithmetic,
math functions, selects, casts). Everything is typed; all loop bounds and strides are constants,
which is what lets the C compiler and LLVM unroll and vectorise.

dtypes are numpy dtype names ("float32", "int64", "bool", ...) plus INDEX for loop counters and
element offsets (32-bit signed in generated code; the IR verifier caps tensors at 2**31-1 elements).

The special, instruction-shaped operations (DotAdd, PairLoad, TapProducts ...) are declared in
aot/kernel/intrinsics.py, each once with its numpy meaning; this module holds the core.

Short vectors ("float32x4/x8/x16", as wide as the target's vector registers) exist for register
tiles (aot/ops/contraction/register_tiles.py): loads and stores of contiguous elements, a
broadcast, and a multiply-add; and for the running max and sum of Softmax (aot/ops/softmax.py),
whose lanes VecReduce combines. They make a tile's
accumulators explicit vector registers instead of leaving that to the compilers' SLP vectorisers,
which give up on some loop nests (gcc 12 kept whole tiles in scalar registers and on the stack).
A package for no particular target uses 8 lanes, which 128-bit targets split into two registers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

INDEX = "index"
FLOAT_DTYPES = {"float32", "float64"}
INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", INDEX}
COMPARISONS = {"lt", "le", "gt", "ge", "eq", "ne"}
# Bitwise integer ops (C's << >> & |), for the bit manipulations of aot/kernel/transcendentals.py.
# They are used on uint32 (wrapping, no undefined shifts); `shr` of a negative signed value would
# be implementation-defined in C, so the IR uses it on unsigned values only.
BITWISE_OPS = {"shl", "shr", "bitand", "bitor"}
# Unary ops map one-to-one onto C math library functions / LLVM intrinsics in the renderers.
VECTOR_DTYPES = {f"float32x{n}": ("float32", n) for n in (4, 8, 16)}
# int32 vectors hold the int8 tiles' accumulators and their operands, four bytes per lane
# (aot/ops/quantized/integer_tiles.py).
VECTOR_DTYPES.update({f"int32x{n}": ("int32", n) for n in (4, 8, 16)})
# The 16-bit halves of eight quads, two NEON registers (PairHalvesLoad, PairHalvesSplat), and
# two splat quads' halves, four registers (a PairHalvesSplat of two quads).
VECTOR_DTYPES.update({"int16x16": ("int16", 16), "int16x32": ("int16", 32)})
# Eight bytes (a d register) and their 16-bit products (TapProducts: armv7's depthwise taps).
VECTOR_DTYPES.update({"int8x8": ("int8", 8), "int16x8": ("int16", 8)})
UNARY_OPS = {
    "neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "tanh", "erf", "floor", "ceil", "round_even",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "not", "isnan", "isinf", "isposinf", "isneginf", "sign",
}


class Expr:
    dtype: str

    # Arithmetic operators build the IR; comparisons use the functions below so that Exprs stay
    # hashable dataclasses with structural equality.
    def __add__(self, other: ExprLike) -> Expr:
        return binary("add", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary("add", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary("sub", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary("sub", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary("mul", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary("mul", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary("div", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary("div", other, self)

    def __neg__(self) -> Expr:
        return unary("neg", self)


ExprLike = Expr | int | float | bool


class OperandDtype(Expr):
    """An Expr whose dtype is one operand's, the one _DTYPE_OPERAND names (Select, the vector
    lane-wise ops)."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return inherited_dtype(self)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: float | int | bool
    dtype: str


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str
    dtype: str


@dataclass(frozen=True, eq=True)
class Buffer:
    """A kernel parameter: a flat array of `size` elements."""

    name: str
    dtype: str
    size: int
    writable: bool


@dataclass(frozen=True, eq=True)
class Load(Expr):
    buffer: Buffer
    index: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    op: str
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=True)
class Select(OperandDtype):
    """cond ? a : b. Like C's `?:`, only the chosen operand is evaluated (a padded convolution's
    `inside ? x[i] : 0` must not load x[i] outside), unless `eager`: then both are, and the
    compilers can turn it into a blend. gcc does not if-convert a lazy select whose operand has
    a floating-point operation that may trap, so on targets without masked vector instructions
    (AVX2, NEON) a loop with one stays scalar; the polynomials of aot/kernel/transcendentals.py,
    whose operands are all evaluated anyway, use eager ones. `numbers`: neither operand is ever
    NaN, so a select of the lesser (a < b ? a : b) or greater of its two operands may be a
    min or max instruction that returns the number of a NaN pair (aarch64's fminnm)."""

    cond: Expr
    a: Expr
    b: Expr
    eager: bool = False
    numbers: bool = False

    @property
    def extremum(self) -> str | None:
        """min or max where this is a < b ? a : b or a > b ? a : b of `numbers`, else None."""
        cond = self.cond
        if not isinstance(cond, Binary) or (cond.a, cond.b) != (self.a, self.b):
            return None
        return extremum_of_numbers(cond.op, self.numbers)


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    a: Expr
    dtype: str


@dataclass(frozen=True, eq=True)
class Bitcast(Expr):
    """The bits of `a` read as `dtype`, of the same width (float32 <-> uint32): C's union type
    pun (aot_kernels.h), LLVM's bitcast. Not a value conversion: 1.0f is 0x3f800000u."""

    a: Expr
    dtype: str


@dataclass(frozen=True, eq=True)
class VecLoad(Expr):
    """`lanes` contiguous elements of `buffer` starting at `index` (no alignment assumed)."""

    buffer: Buffer
    index: Expr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of(self.buffer.dtype, self.lanes)


@dataclass(frozen=True, eq=True)
class Splat(Expr):
    """A scalar copied into every lane."""

    a: Expr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of(self.a.dtype, self.lanes)


@dataclass(frozen=True, eq=True)
class MulAdd(OperandDtype):
    """acc + a * b (lane by lane for vectors), which the backends may fuse into one rounding (FMA):
    C's `acc + a * b` under -ffp-contract=fast, LLVM's llvm.fmuladd. Scalar ones are float32 only
    (the polynomials of aot/kernel/transcendentals.py)."""

    acc: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class VecMax(OperandDtype):
    """Lane-wise (a > b || a is NaN) ? a : b: the NaN-propagating running maximum of MaxPool,
    with the new value as `a`."""

    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class VecMin(OperandDtype):
    """Lane-wise (a < b || a is NaN) ? a : b: the scalar float `min` of the kernel IR, by lanes."""

    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class VecConvert(Expr):
    """Lane-wise conversion between int32xN and float32xN (`dtype`): int32 to float rounds to
    nearest as C's cast does; float to int32 truncates, and is used on integral values in range
    only (a requantised output). An int8 tile's requantisation in registers."""

    a: Expr
    dtype: str


VECTOR_ARITHMETIC = ("add", "sub", "mul", "div")
VECTOR_COMPARISONS = ("lt", "le", "gt", "ge")


@dataclass(frozen=True, eq=True)
class VecArith(OperandDtype):
    """Lane-wise a op b, op one of VECTOR_ARITHMETIC (an epilogue applied in registers)."""

    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class VecSelect(OperandDtype):
    """Lane-wise (a cmp b) ? x : y, cmp one of VECTOR_COMPARISONS, false where a or b is NaN
    (the scalar Select over an ordered comparison, by lanes: Relu is x < 0 ? 0 : x). `numbers`:
    as Select's, never NaN, so a < b ? a : b may be a min instruction of numbers (fminnm)."""

    cmp: str
    a: Expr
    b: Expr
    x: Expr
    y: Expr
    numbers: bool = False

    @property
    def extremum(self) -> str | None:
        """min or max where this is a < b ? a : b or a > b ? a : b of `numbers`, else None."""
        return extremum_of_numbers(self.cmp, self.numbers) if (self.x, self.y) == (self.a, self.b) else None


VECTOR_REDUCTIONS = ("add", "max")


@dataclass(frozen=True, eq=True)
class VecReduce(Expr):
    """The lanes of vector `a` combined into one scalar, op one of VECTOR_REDUCTIONS ("max" as
    VecMax: NaN-propagating), always in the same order, a halving tree: lane i is combined with
    lane i + lanes/2, then the lower half with itself again, down to one lane (for 8 lanes:
    ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7))). Both backends print that tree (C: lane
    expressions, LLVM: shuffles), so a sum is the same in both and on every target; it is not the
    sequential sum of the lanes (Softmax's row sums: see aot/ops/softmax.py)."""

    op: str
    a: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return VECTOR_DTYPES[self.a.dtype][0]


# Nodes whose dtype is one operand's (the field named here): a chain of them (fused Where,
# ThresholdedRelu: x > a ? x : 0 ...) is as long as the model's chain, so it is followed by a loop.
# The special operations of aot/kernel/intrinsics.py add theirs (dtype_follows_operand).
_DTYPE_OPERAND: dict[type, str] = {Select: "a", MulAdd: "acc", VecMax: "a", VecMin: "a", VecArith: "a",
                                   VecSelect: "x"}


def dtype_follows_operand(node: type, field_name: str) -> None:
    """Declares that `node`'s dtype is that of its operand `field_name` (an OperandDtype)."""
    _DTYPE_OPERAND[node] = field_name


def inherited_dtype(e: Expr) -> str:
    """The dtype of `e`, following operands whose dtype it takes without recursing."""
    while True:
        field_name = _DTYPE_OPERAND.get(type(e))
        if field_name is None:
            return e.dtype
        e = getattr(e, field_name)


def extremum_of_numbers(cmp: str, numbers: bool) -> str | None:
    """The min or max that picking the operand compared less (lt) or greater (gt) is, where the
    operands are numbers (never NaN: a min instruction may then return either of equal ones)."""
    return {"lt": "min", "gt": "max"}.get(cmp) if numbers else None


def vector_of(scalar: str, lanes: int) -> str:
    name = f"{scalar}x{lanes}"
    if name not in VECTOR_DTYPES:
        raise TypeError(f"no vector type of {lanes} {scalar}")
    return name


class Stmt:
    pass


@dataclass
class VecStore(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass
class NarrowStore(VecStore):
    """The int32xN `value`'s lanes stored as N consecutive elements of an int8 or uint8 `buffer`
    from `index`, each lane already within the buffer type's range (a requantised output); only
    the first `count` lanes where it is set (8 and 16 lanes). A VecStore of N elements for every
    analysis of what a kernel writes (for a `count`, more than it writes: on the safe side)."""

    count: int | None = None


@dataclass
class Loop(Stmt):
    """`for var in [0, extent)`. `parallel`: the iterations are independent (none reads what
    another writes, none writes what another writes), so the run function may split them over
    threads (see aot/kernel/parallel.py). Only a loop at the top level of a kernel's body may be
    parallel; statements before it finish before any iteration starts."""

    var: Var
    extent: int
    body: list[Stmt]
    parallel: bool = False


@dataclass
class Declare(Stmt):
    var: Var
    init: Expr


@dataclass
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass
class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt] = field(default_factory=list)


@dataclass
class Kernel:
    """One generated function. `sources` names the ONNX nodes it implements (for comments)."""

    name: str
    params: list[Buffer]
    body: list[Stmt]
    sources: list[str]
    op: str
    # Whether the planner may prove an in-place pair by running every access of the kernel
    # (aot/planner/in_place.py) where the per-statement rule cannot see it: a kernel that reads a
    # whole channel of its input before storing that channel (a depthwise conv through a plane).
    whole_run_in_place: bool = False


# ---------------------------------------------------------------------------------------------
# Constructors with light simplification, so index arithmetic stays readable in generated code.


def const(value: float | int | bool, dtype: str) -> Const:
    if dtype == "bool":
        return Const(bool(value), dtype)
    if dtype in INT_DTYPES:
        return Const(int(value), dtype)
    return Const(float(value), dtype)


def as_expr(value: ExprLike, like: str) -> Expr:
    if isinstance(value, Expr):
        return value
    return const(value, like)


def _result_dtype(a: ExprLike, b: ExprLike) -> str:
    if isinstance(a, Expr):
        return a.dtype
    if isinstance(b, Expr):
        return b.dtype
    return INDEX if isinstance(a, int) and isinstance(b, int) else "float32"


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    dtype = _result_dtype(a, b)
    ea, eb = as_expr(a, dtype), as_expr(b, dtype)
    if ea.dtype != eb.dtype:
        raise TypeError(f"binary {op}: dtype mismatch {ea.dtype} vs {eb.dtype}")
    if dtype == INDEX:  # integer index arithmetic: fold and drop identities
        if isinstance(ea, Const) and isinstance(eb, Const):
            return Const(_fold_int(op, int(ea.value), int(eb.value)), dtype)
        if op == "add":
            if _is(ea, 0):
                return eb
            if _is(eb, 0):
                return ea
        if op == "sub" and _is(eb, 0):
            return ea
        if op == "mul":
            if _is(ea, 0) or _is(eb, 0):
                return Const(0, dtype)
            if _is(ea, 1):
                return eb
            if _is(eb, 1):
                return ea
        if op in ("div", "mod") and _is(eb, 1):
            return ea if op == "div" else Const(0, dtype)
    result = "bool" if op in COMPARISONS else dtype
    return Binary(op, ea, eb, result)


def _is(e: Expr, v: int) -> bool:
    return isinstance(e, Const) and e.value == v


def _fold_int(op: str, a: int, b: int) -> int:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":  # C semantics: truncate toward zero
        return int(a / b)
    if op == "mod":
        return a - b * int(a / b)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if op in COMPARISONS:
        return int({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[op])
    raise ValueError(op)


def unary(op: str, a: Expr) -> Expr:
    if op not in UNARY_OPS:
        raise ValueError(f"unknown unary op {op}")
    if op in ("isnan", "isinf", "isposinf", "isneginf", "not"):
        return Unary(op, a, "bool")
    return Unary(op, a, a.dtype)


def lt(a: ExprLike, b: ExprLike) -> Expr:
    return binary("lt", a, b)


def le(a: ExprLike, b: ExprLike) -> Expr:
    return binary("le", a, b)


def gt(a: ExprLike, b: ExprLike) -> Expr:
    return binary("gt", a, b)


def ge(a: ExprLike, b: ExprLike) -> Expr:
    return binary("ge", a, b)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return binary("eq", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def logical_and(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value:
        return b
    if isinstance(b, Const) and b.value:
        return a
    return Binary("and", a, b, "bool")


def logical_or(a: Expr, b: Expr) -> Expr:
    return Binary("or", a, b, "bool")


def select(cond: Expr, a: ExprLike, b: ExprLike, eager: bool = False, numbers: bool = False) -> Expr:
    dtype = _result_dtype(a, b)
    return Select(cond, as_expr(a, dtype), as_expr(b, dtype), eager, numbers)


def bitcast(a: Expr, dtype: str) -> Expr:
    if {a.dtype, dtype} != {"float32", "uint32"}:
        raise TypeError(f"bitcast {a.dtype} -> {dtype}: only float32 <-> uint32")
    return Bitcast(a, dtype)


def cast(a: Expr, dtype: str) -> Expr:
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        return const(a.value, dtype)
    return Cast(a, dtype)


def expr_children(e: Expr) -> list[Expr]:
    """The operands of an expression node (its fields that are expressions), for walkers that
    must see every node kind, including ones added later."""
    return [getattr(e, f.name) for f in dataclasses.fields(e) if isinstance(getattr(e, f.name), Expr)] \
        if dataclasses.is_dataclass(e) else []


def walk_stmts(body: list[Stmt]):
    """Every statement in a body, depth first."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)
