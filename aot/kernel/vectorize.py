"""Scalar expressions of one output element turned into lane-wise vector expressions.

A register tile applies its fused epilogue (Relu, Clip, a residual Add ...) to the accumulators
before they are stored, instead of in a second pass that reloads and stores every output again.
The epilogue comes as a scalar expression of the output column j; `lanewise` rewrites it for a
vector of `lanes` consecutive columns from the expressions built for two neighbouring columns,
j and j + 1: a load whose index moves by one with j becomes a vector load, a load that does not
move (a per-channel scale, a scalar bound) a broadcast. Anything else (another stride, an op
without a vector form) returns None and the caller keeps the scalar pass, so the rewrite can only
ever decline, never change what is computed.
"""

from __future__ import annotations

from aot.kernel.affine import affine
from aot.kernel.intrinsics import ExtendLoad, VecRoundEven
from aot.kernel.ir import (
    VECTOR_ARITHMETIC,
    VECTOR_COMPARISONS,
    Binary,
    Cast,
    Const,
    Expr,
    Load,
    MulAdd,
    NarrowStore,
    Select,
    Splat,
    Stmt,
    Store,
    Unary,
    Var,
    VecArith,
    VecConvert,
    VecLoad,
    VecMax,
    VecMin,
    VecSelect,
    vector_of,
)

# Deeper epilogues (hostile chains of thousands of fused ops) keep the scalar pass, where
# aot/kernel/let_binding.py bounds what the backends see; real epilogues are a few ops deep.
MAX_DEPTH = 64


class _Decline(Exception):
    """The epilogue has no lane-wise form (or is too deep to look for one)."""


def lanewise(at_j: Expr, at_next: Expr, value: Var | None, vector: Expr | None, lanes: int,
             integers: bool = False) -> Expr | None:
    """The vector form of `at_j` (an expression of the output at column j, in which `value`
    stands for the accumulator) over columns j .. j + lanes - 1, where `at_next` is the same
    expression built for column j + 1 and `vector` holds the accumulators; None if not possible.
    `integers`: int32 values may take part too (an int8 tile's requantisation: the int32 sum and
    its bias added, converted to float, or a depthwise loop's int8 taps times int32 weights; 4
    lanes, the header's NEON forms). `value` None: the expressions stand for no accumulator."""
    try:
        return _Lanewise(value, vector, lanes, integers).pair(at_j, at_next, 0)
    except _Decline:
        return None


class _Lanewise:
    """One rewrite. Fused forms share operands (Relu names its operand twice), so each pair of
    nodes is rewritten once, memoised by identity: linear in the DAG, not in its tree."""

    def __init__(self, value: Var | None, vector: Expr | None, lanes: int, integers: bool) -> None:
        self.value = value
        self.vector = vector
        self.lanes = lanes
        self.dtypes = ("float32", "int32") if integers else ("float32",)
        self.done: dict[tuple[int, int], Expr] = {}

    def pair(self, at_j: Expr, at_next: Expr, depth: int) -> Expr:
        key = (id(at_j), id(at_next))
        found = self.done.get(key)
        if found is None:
            if depth > MAX_DEPTH:
                raise _Decline
            found = self.done[key] = self._rewrite(at_j, at_next, depth + 1)
        return found

    def _rewrite(self, at_j: Expr, at_next: Expr, depth: int) -> Expr:
        lanes = self.lanes
        if isinstance(at_j, Var) and at_j == self.value:
            if not (isinstance(at_next, Var) and at_next == self.value) or self.vector is None:
                raise _Decline
            return self.vector
        if isinstance(at_j, Var) and at_j == at_next and at_j.dtype in self.dtypes:
            return Splat(at_j, lanes)  # a local of the loop around: the same in every lane
        if type(at_j) is not type(at_next) or at_j.dtype not in self.dtypes:
            raise _Decline
        if isinstance(at_j, Const):
            if at_j != at_next:
                raise _Decline
            return Splat(at_j, lanes)
        if isinstance(at_j, Load):
            assert isinstance(at_next, Load)
            if at_j.buffer != at_next.buffer:
                raise _Decline
            step = index_step(at_j.index, at_next.index)
            if step == 0:
                return Splat(at_j, lanes)
            if step != 1:  # (float32, or with `integers` int32: a depthwise loop's stored sums)
                raise _Decline
            return VecLoad(at_j.buffer, at_j.index, lanes)
        if isinstance(at_j, Binary):
            assert isinstance(at_next, Binary)
            if at_j.op != at_next.op or at_j.op not in (*VECTOR_ARITHMETIC, "min", "max"):
                raise _Decline
            if at_j.dtype == "int32" and at_j.op not in ("add", "sub", "mul"):
                raise _Decline
            a, b = self.pair(at_j.a, at_next.a, depth), self.pair(at_j.b, at_next.b, depth)
            if at_j.op == "max":
                return VecMax(a, b)
            if at_j.op == "min":
                return VecMin(a, b)
            return VecArith(at_j.op, a, b)
        if isinstance(at_j, Select):
            assert isinstance(at_next, Select)
            cond, cond_next = at_j.cond, at_next.cond
            if not (isinstance(cond, Binary) and isinstance(cond_next, Binary) and cond.op == cond_next.op
                    and cond.op in VECTOR_COMPARISONS and cond.a.dtype == "float32"):
                raise _Decline
            a, b, x, y = (self.pair(p, q, depth) for p, q in
                          ((cond.a, cond_next.a), (cond.b, cond_next.b), (at_j.a, at_next.a), (at_j.b, at_next.b)))
            return VecSelect(cond.op, a, b, x, y, at_j.numbers and at_next.numbers)
        if isinstance(at_j, Cast) and at_j.dtype == "int32" and isinstance(at_j.a, Load):
            return self._extended(at_j.a, at_next)
        if isinstance(at_j, Cast) and at_j.dtype == "int32" and at_j.a.dtype == "float32":
            assert isinstance(at_next, Cast)  # an integral float sum (int8 depthwise taps) as int32
            return VecConvert(self.pair(at_j.a, at_next.a, depth), vector_of("int32", lanes))
        if isinstance(at_j, Cast) and at_j.dtype == "float32" and isinstance(at_j.a, Load) \
                and at_j.a.dtype in ("int8", "uint8"):  # an int8 tensor's element dequantised
            return VecConvert(self._extended(at_j.a, at_next), vector_of("float32", lanes))
        if isinstance(at_j, Cast) and at_j.dtype == "float32":
            assert isinstance(at_next, Cast)
            if at_j.a.dtype != "int32":
                raise _Decline
            return VecConvert(self.pair(at_j.a, at_next.a, depth), vector_of("float32", lanes))
        if isinstance(at_j, MulAdd):
            assert isinstance(at_next, MulAdd)
            return MulAdd(*(self.pair(p, q, depth) for p, q in
                            ((at_j.acc, at_next.acc), (at_j.a, at_next.a), (at_j.b, at_next.b))))
        if isinstance(at_j, Unary) and at_j.op == "round_even":
            assert isinstance(at_next, Unary)
            if at_next.op != "round_even":
                raise _Decline
            return VecRoundEven(self.pair(at_j.a, at_next.a, depth))
        raise _Decline

    def _extended(self, at_j: Load, at_next: Expr) -> Expr:
        """An int8 or uint8 load widened to int32: a broadcast where it does not move with the
        lane, an ExtendLoad where it moves by one."""
        if not (isinstance(at_next, Cast) and isinstance(at_next.a, Load) and at_j.buffer == at_next.a.buffer
                and at_j.dtype in ("int8", "uint8")):
            raise _Decline
        step = index_step(at_j.index, at_next.a.index)
        if step == 0:
            return Splat(Cast(at_j, "int32"), self.lanes)
        if step != 1:
            raise _Decline
        return ExtendLoad(at_j.buffer, at_j.index, self.lanes)


def narrowed_store(first: Stmt, second: Stmt, lanes: int, value: Var | None = None,
                   vector: Expr | None = None) -> Stmt | None:
    """The vector form of the stores of two neighbouring outputs, each a float value (or an int32
    one within the type's range) converted to int8 or uint8 (a requantisation): NarrowStore of
    the int32 lanes, or None where it has none. `value` stands for the accumulator `vector`
    holds (lanewise)."""
    if not (isinstance(first, Store) and isinstance(second, Store) and first.buffer == second.buffer
            and first.buffer.dtype in ("int8", "uint8") and index_step(first.index, second.index) == 1):
        return None
    a, b = first.value, second.value
    if not (isinstance(a, Cast) and isinstance(b, Cast) and a.dtype == b.dtype == first.buffer.dtype
            and a.a.dtype in ("float32", "int32")):
        return None
    rewritten = lanewise(a.a, b.a, value, vector, lanes, integers=True)
    if rewritten is None:
        return None
    if a.a.dtype == "int32":
        return NarrowStore(first.buffer, first.index, rewritten)
    return NarrowStore(first.buffer, first.index, VecConvert(rewritten, vector_of("int32", lanes)))


def index_step(first: Expr, second: Expr) -> int | None:
    """second - first if both are affine in the same variables with the same coefficients
    (so the difference is one integer whatever the variables hold), else None."""
    a, b = affine(first), affine(second)
    if a is None or b is None or a[0] != b[0]:
        return None
    return b[1] - a[1]
