"""float32 exp, tanh, erf, log, expm1 and log1p as polynomials in kernel-IR primitives, for both backends.

A libm call inside a loop stops gcc and LLVM from vectorising it: YOLOv8n spent 11.5% of its run
in scalar expf (Sigmoid, Softmax, SiLU), and glibc's tanhf made a Tanh 55x slower than
onnxruntime's. `expand_transcendentals` rewrites every float32 Unary exp / tanh / erf / log / expm1 / log1p of a
kernel into multiplies, multiply-adds, selects and integer operations on the float's bits
(Bitcast, shl, shr, bitand, bitor), which every vector target has (AVX2, AVX-512, aarch64 NEON)
and which are plain scalar code on Cortex-M (and on armv7, where gcc and LLVM do not vectorise
IEEE floats: NEON flushes denormals). It runs on every kernel as it is emitted (aot/lowering/context.py),
so the meaning of each function is defined here once and both backends print the same formula.
float64 keeps the C library.

Each function is written once, over an `Algebra`: `IrAlgebra` builds kernel IR, `NumpyAlgebra`
evaluates the same formula on float32 arrays (with or without fused multiply-adds: a MulAdd is
fused where the target has FMA, in C through -ffp-contract=fast, in LLVM through llvm.fmuladd).
Selects are eager (both sides computed, a blend): gcc keeps a loop scalar on AVX2 and NEON when
a `?:` branch holds a float operation. The numpy model is what the figures below were measured
on, against numpy's / scipy's float64 functions (ulp: of the float32 nearest the exact value);
exp over every float32 whose exp is a finite normal float (2.24e9 inputs), tanh over every
float32 in [0, 10) (1.09e9; it is odd by construction and exactly 1 above), the others over every
997th bit pattern (4.3e6, all signs and exponents) and erf also every input in [0.75, 1.5),
where its error peaks. tests/test_transcendentals.py asserts the
bounds on such a sweep of the model and on 2^20 random bit patterns through compiled packages of
both backends, whose every output must be the model's (so the printers print the formula).

    function  max error (ulp)     bound   special values
              unfused / fused     tested
    exp       0.98 / 1.01         1.01    NaN -> NaN, x > 88.72283 (overflow) -> +inf,
                                          x < -87.3365 (result below FLT_MIN) -> 0
    tanh      1.33 / 1.33         1.5     NaN -> NaN, +-inf -> +-1, -0 -> -0
    erf       1.26 / 1.05         1.5     NaN -> NaN, +-inf -> +-1, -0 -> -0
    log       0.85 / 0.91         1.0     NaN -> NaN, +-0 -> -inf, x < 0 -> NaN, +inf -> +inf
    sigmoid   2.13 / 2.13         2.5     1 / (1 + exp(-x)) as aot/ops/elementwise.py writes it
    expm1     1.42 / 1.43         1.5     NaN -> NaN, x > 88.72283 -> +inf, x < -17.5 -> -1,
                                          -0 -> +0 (Elu, Selu, Celu use it where x < 0 only)
    log1p     1.66 / 1.66         1.75    NaN -> NaN, -1 -> -inf, x < -1 -> NaN, +inf -> +inf

expm1 and log1p: every 997th bit pattern and 6e6 random inputs in [-20, 25] / [-0.999, 4] and
[-1e-3, 1e-3]; both reuse exp's and log's polynomials (see their docstrings).

exp flushes results below the normal range (x < ln FLT_MIN) to 0 where the C library returns
subnormals down to x = -103.97; the ulp figures are over the normal results. log takes subnormal
inputs exactly. The coefficients are minimax fits (Lawson's iteration on Chebyshev points, in
float64, rounded to float32) of: exp(r) = 1 + r + r^2 q(r) on |r| <= ln2/2; tanh(x) = x + x^3 p(x^2)
on |x| < 0.625, 1 - 2 / (exp(2|x|) + 1) above; erf(x) = x + x p(x^2) on |x| < 0.9,
1 - exp(-x^2 + q(|x|)) above (q fits log(erfc(x)) + x^2 on [0.9, 4]; erf(x) rounds to 1 beyond 4);
log(m 2^e) = e ln2 + log1p(f), f = m - 1, m in [sqrt(1/2), sqrt(2)), log1p(f) = f + f^2 p(f).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aot.kernel.ir import (
    Assign,
    Binary,
    Declare,
    Expr,
    If,
    Kernel,
    Loop,
    MulAdd,
    NarrowStore,
    Stmt,
    Store,
    Unary,
    VecStore,
    bitcast,
    const,
    eq,
    expr_children,
    gt,
    le,
    lt,
    select,
    unary,
)

LOG2E = 1.4426950408889634
# Adding 1.5 * 2**23 rounds a float of magnitude below 2**22 to an integer, which the sum then holds
# in its low mantissa bits: its bits are 0x4b400000 + n, and bits << 23 is n << 23 (mod 2**32).
ROUNDING_MAGIC = 12582912.0
# ln 2 in two parts; LN2_HI has 15 significant bits, so n * LN2_HI is exact for |n| < 2**9.
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187e-06
EXP_MAX = 88.72283172607422  # the largest float whose exp is finite in float32
EXP_MIN = -87.33654022216797  # the float nearest ln(FLT_MIN): below it, results flush to 0
FLT_MIN = 1.1754943508222875e-38

# Polynomial coefficients, highest power first (see the module docstring for what each fits).
EXP_Q = (0.0013811651151627302, 0.008370140567421913, 0.04166853055357933, 0.16666509211063385,
         0.4999999403953552)
TANH_SMALL = 0.625
TANH_P = (-0.005704985465854406, 0.02063908614218235, -0.05373971536755562, 0.13331441581249237,
          -0.3333328068256378)
ERF_SMALL = 0.9
ERF_P = (8.51314325700514e-05, -0.0008175649563781917, 0.005203860346227884, -0.02686050906777382,
         0.11283715069293976, -0.37612634897232056, 0.12837916612625122)  # erf(x) = x + x p(x^2)
ERF_SATURATE = 4.0  # erfc(4) = 1.5e-8 is below half an ulp of 1: erf rounds to 1 from here
ERF_TAIL_Q = (-2.090945781674236e-05, 0.0004323019238654524, -0.0041605220176279545, 0.02509148418903351,
              -0.10823660343885422, 0.36661332845687866, -1.1294951438903809, 0.00017055062926374376)
SQRT_HALF_BITS = 0x3f3504f3  # the bits of sqrt(1/2): log splits x into m 2^e with m from here
LOG1P_P = (-0.07622111588716507, 0.1290469467639923, -0.13242977857589722, 0.14181777834892273,
           -0.16609077155590057, 0.20001976191997528, -0.25001582503318787, 0.33333325386047363,
           -0.49999988079071045)


class Algebra:
    """The primitives the formulas are written in. `f`/`u`: a float32 / uint32 constant; `muladd`:
    a * b + c (fused or not, as the target does it); the u* operations are on uint32 (wrapping);
    `bits`/`from_bits` reinterpret float32 <-> uint32."""

    def f(self, value: float) -> Any: ...
    def u(self, value: int) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def sub(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def div(self, a: Any, b: Any) -> Any: ...
    def muladd(self, a: Any, b: Any, c: Any) -> Any: ...
    def neg(self, a: Any) -> Any: ...
    def abs(self, a: Any) -> Any: ...
    def lt(self, a: Any, b: Any) -> Any: ...
    def le(self, a: Any, b: Any) -> Any: ...
    def gt(self, a: Any, b: Any) -> Any: ...
    def eq(self, a: Any, b: Any) -> Any: ...
    def select(self, cond: Any, a: Any, b: Any) -> Any: ...
    def bits(self, a: Any) -> Any: ...
    def from_bits(self, a: Any) -> Any: ...
    def uadd(self, a: Any, b: Any) -> Any: ...
    def shl(self, a: Any, n: int) -> Any: ...
    def shr(self, a: Any, n: int) -> Any: ...
    def bitand(self, a: Any, mask: int) -> Any: ...
    def bitor(self, a: Any, b: Any) -> Any: ...


class IrAlgebra(Algebra):
    """Builds float32 kernel IR; `steps` keeps every node it builds (see expand_transcendentals)."""

    def __init__(self) -> None:
        self.steps: list[Expr] = []

    def _step(self, node: Expr) -> Expr:
        self.steps.append(node)
        return node

    def f(self, value: float) -> Expr:
        return const(value, "float32")

    def u(self, value: int) -> Expr:
        return const(value, "uint32")

    def add(self, a: Expr, b: Expr) -> Expr:
        return self._step(a + b)

    def sub(self, a: Expr, b: Expr) -> Expr:
        return self._step(a - b)

    def mul(self, a: Expr, b: Expr) -> Expr:
        return self._step(a * b)

    def div(self, a: Expr, b: Expr) -> Expr:
        return self._step(a / b)

    def muladd(self, a: Expr, b: Expr, c: Expr) -> Expr:
        return self._step(MulAdd(c, a, b))

    def neg(self, a: Expr) -> Expr:
        return self._step(unary("neg", a))

    def abs(self, a: Expr) -> Expr:
        return self._step(unary("abs", a))

    def lt(self, a: Expr, b: Expr) -> Expr:
        return self._step(lt(a, b))

    def le(self, a: Expr, b: Expr) -> Expr:
        return self._step(le(a, b))

    def gt(self, a: Expr, b: Expr) -> Expr:
        return self._step(gt(a, b))

    def eq(self, a: Expr, b: Expr) -> Expr:
        return self._step(eq(a, b))

    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr:
        return self._step(select(cond, a, b, eager=True))  # both sides are computed anyway: a blend

    def bits(self, a: Expr) -> Expr:
        return self._step(bitcast(a, "uint32"))

    def from_bits(self, a: Expr) -> Expr:
        return self._step(bitcast(a, "float32"))

    def uadd(self, a: Expr, b: Expr) -> Expr:
        return self._step(a + b)

    def shl(self, a: Expr, n: int) -> Expr:
        return self._step(Binary("shl", a, self.u(n), "uint32"))

    def shr(self, a: Expr, n: int) -> Expr:
        return self._step(Binary("shr", a, self.u(n), "uint32"))

    def bitand(self, a: Expr, mask: int) -> Expr:
        return self._step(Binary("bitand", a, self.u(mask), "uint32"))

    def bitor(self, a: Expr, b: Expr) -> Expr:
        return self._step(Binary("bitor", a, b, "uint32"))


class NumpyAlgebra(Algebra):
    """Evaluates the formulas on float32 / uint32 numpy arrays, as the generated code does:
    `fused`: multiply-adds round once (a target with FMA), else twice."""

    def __init__(self, fused: bool) -> None:
        self.fused = fused

    def f(self, value: float) -> np.ndarray:
        return np.float32(value)

    def u(self, value: int) -> np.ndarray:
        return np.uint32(value)

    def add(self, a: Any, b: Any) -> Any:
        return np.add(a, b, dtype=np.result_type(a, b))

    def sub(self, a: Any, b: Any) -> Any:
        return np.subtract(a, b, dtype=np.result_type(a, b))

    def mul(self, a: Any, b: Any) -> Any:
        return np.multiply(a, b, dtype=np.float32)

    def div(self, a: Any, b: Any) -> Any:
        return np.divide(a, b, dtype=np.float32)

    def muladd(self, a: Any, b: Any, c: Any) -> Any:
        if self.fused:  # the product of two float32 is exact in float64; the sum rounds once
            return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)
        return np.add(np.multiply(a, b, dtype=np.float32), c, dtype=np.float32)

    def neg(self, a: Any) -> Any:
        return np.negative(a)

    def abs(self, a: Any) -> Any:
        return np.abs(a)

    def lt(self, a: Any, b: Any) -> Any:
        return np.less(a, b)

    def le(self, a: Any, b: Any) -> Any:
        return np.less_equal(a, b)

    def gt(self, a: Any, b: Any) -> Any:
        return np.greater(a, b)

    def eq(self, a: Any, b: Any) -> Any:
        return np.equal(a, b)

    def select(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b).astype(np.result_type(a, b))

    def bits(self, a: Any) -> Any:
        return np.asarray(a, np.float32).view(np.uint32)

    def from_bits(self, a: Any) -> Any:
        return np.asarray(a, np.uint32).view(np.float32)

    def uadd(self, a: Any, b: Any) -> Any:
        return np.add(a, b, dtype=np.uint32)

    def shl(self, a: Any, n: int) -> Any:
        return np.left_shift(a, np.uint32(n), dtype=np.uint32)

    def shr(self, a: Any, n: int) -> Any:
        return np.right_shift(a, np.uint32(n), dtype=np.uint32)

    def bitand(self, a: Any, mask: int) -> Any:
        return np.bitwise_and(a, np.uint32(mask), dtype=np.uint32)

    def bitor(self, a: Any, b: Any) -> Any:
        return np.bitwise_or(a, b, dtype=np.uint32)


def horner(alg: Algebra, x: Any, coefficients: Sequence[float]) -> Any:
    """c0 x^(n-1) + ... + c(n-1), coefficients highest power first."""
    p = alg.f(coefficients[0])
    for c in coefficients[1:]:
        p = alg.muladd(p, x, alg.f(c))
    return p


def exp(alg: Algebra, x: Any) -> Any:
    """e^x = 2^n e^r, n = round(x / ln2), |r| <= ln2 / 2. 2^n is added to the exponent bits of
    e^r, which is in [0.7, 1.5): the result is a normal float for EXP_MIN <= x <= EXP_MAX, and
    the selects give the rest (lanes outside compute garbage without trapping)."""
    t = alg.muladd(x, alg.f(LOG2E), alg.f(ROUNDING_MAGIC))
    n = alg.sub(t, alg.f(ROUNDING_MAGIC))
    r = alg.muladd(n, alg.f(-LN2_HI), x)  # exact: x and n ln2 are close
    r = alg.muladd(n, alg.f(-LN2_LO), r)
    e_r = alg.add(alg.muladd(alg.mul(r, r), horner(alg, r, EXP_Q), r), alg.f(1.0))
    scaled = alg.from_bits(alg.uadd(alg.bits(e_r), alg.shl(alg.bits(t), 23)))
    in_range = alg.select(alg.lt(x, alg.f(EXP_MIN)), alg.f(0.0), scaled)
    # x + inf: +inf above the range, NaN for NaN.
    return alg.select(alg.le(x, alg.f(EXP_MAX)), in_range, alg.add(x, alg.f(math.inf)))


def tanh(alg: Algebra, x: Any) -> Any:
    """Computed on |x|, the sign copied from x's bits last: so tanh(-0) is -0 (x + x^3 p(x^2) is
    +0 there, p being negative)."""
    a = alg.abs(x)
    a2 = alg.mul(a, a)
    small = alg.muladd(alg.mul(a2, a), horner(alg, a2, TANH_P), a)
    # exp(2a) is +inf from a = 44.4 (and NaN for NaN): 1 - 2 / inf = 1.
    large = alg.sub(alg.f(1.0), alg.div(alg.f(2.0), alg.add(exp(alg, alg.add(a, a)), alg.f(1.0))))
    magnitude = alg.select(alg.lt(a, alg.f(TANH_SMALL)), small, large)
    return alg.from_bits(alg.bitor(alg.bits(magnitude), alg.bitand(alg.bits(x), 0x80000000)))


def erf(alg: Algebra, x: Any) -> Any:
    a = alg.abs(x)
    small = alg.muladd(x, horner(alg, alg.mul(x, x), ERF_P), x)
    clamped = alg.select(alg.gt(a, alg.f(ERF_SATURATE)), alg.f(ERF_SATURATE), a)  # keeps NaN
    log_erfc = alg.muladd(alg.neg(clamped), clamped, horner(alg, clamped, ERF_TAIL_Q))
    large = alg.sub(alg.f(1.0), exp(alg, log_erfc))
    signed = alg.select(alg.lt(x, alg.f(0.0)), alg.neg(large), large)
    return alg.select(alg.lt(a, alg.f(ERF_SMALL)), small, signed)


def log(alg: Algebra, x: Any) -> Any:
    y = _log_finite(alg, x)
    positive = alg.select(alg.lt(x, alg.f(math.inf)), y, x)
    return alg.select(alg.gt(x, alg.f(0.0)), positive,
                      alg.select(alg.eq(x, alg.f(0.0)), alg.f(-math.inf), alg.f(math.nan)))


EXPM1_LARGE = 20.0  # from here e^x - 1 rounds to e^x: 2^n p + (2^n - 1) would need 2^n beyond 2^29
EXPM1_SATURATE = -17.5  # below ln(2^-25) e^x - 1 rounds to -1


def expm1(alg: Algebra, x: Any) -> Any:
    """e^x - 1 = 2^n (p + 1) - 1 = 2^n p + (2^n - 1), p = e^r - 1 from exp's polynomial without its
    final + 1 (so no cancellation near 0: n = 0 gives p itself); 2^n - 1 is exact for |n| <= 24.
    Large x go through exp's own scaling, small ones saturate at -1."""
    t = alg.muladd(x, alg.f(LOG2E), alg.f(ROUNDING_MAGIC))
    n = alg.sub(t, alg.f(ROUNDING_MAGIC))
    r = alg.muladd(n, alg.f(-LN2_HI), x)
    r = alg.muladd(n, alg.f(-LN2_LO), r)
    p = alg.muladd(alg.mul(r, r), horner(alg, r, EXP_Q), r)
    exponent = alg.shl(alg.bits(t), 23)
    two_n = alg.from_bits(alg.uadd(exponent, alg.u(0x3f800000)))  # a normal float for |n| <= 29
    moderate = alg.muladd(two_n, p, alg.sub(two_n, alg.f(1.0)))
    large = alg.sub(alg.from_bits(alg.uadd(alg.bits(alg.add(p, alg.f(1.0))), exponent)), alg.f(1.0))
    finite = alg.select(alg.lt(x, alg.f(EXPM1_LARGE)),
                        alg.select(alg.lt(x, alg.f(EXPM1_SATURATE)), alg.f(-1.0), moderate), large)
    return alg.select(alg.le(x, alg.f(EXP_MAX)), finite, alg.add(x, alg.f(math.inf)))  # +inf, NaN


def _log_finite(alg: Algebra, x: Any) -> Any:
    """log(x) for positive finite x (log's formula before its special values)."""
    subnormal = alg.lt(x, alg.f(FLT_MIN))
    normal = alg.select(subnormal, alg.mul(x, alg.f(2.0**23)), x)
    # Moving the bits by 1.0 - sqrt(1/2) puts m in [sqrt(1/2), sqrt(2)) and e in the exponent field.
    shifted = alg.uadd(alg.bits(normal), alg.u(0x3f800000 - SQRT_HALF_BITS))
    # The exponent field as a float without a conversion instruction (gcc does not if-convert
    # one, so a conversion under a select kept the loop scalar): 2^23 + field, read as bits.
    field = alg.from_bits(alg.bitor(alg.shr(shifted, 23), alg.u(0x4b000000)))
    e = alg.sub(field, alg.select(subnormal, alg.f(2.0**23 + 127 + 23), alg.f(2.0**23 + 127)))
    m = alg.from_bits(alg.uadd(alg.bitand(shifted, 0x007fffff), alg.u(SQRT_HALF_BITS)))
    f = alg.sub(m, alg.f(1.0))  # exact (Sterbenz)
    log1p_f = alg.muladd(alg.mul(f, f), horner(alg, f, LOG1P_P), f)
    return alg.muladd(e, alg.f(LN2_HI), alg.muladd(e, alg.f(LN2_LO), log1p_f))


def log1p(alg: Algebra, x: Any) -> Any:
    """log(1 + x) = log(u) + (x - (u - 1)) / u, u = 1 + x rounded: the quotient puts back what the
    rounding of u lost (to first order), so small x keep their digits (u = 1 gives x itself)."""
    u = alg.add(x, alg.f(1.0))
    correction = alg.div(alg.sub(x, alg.sub(u, alg.f(1.0))), u)
    y = alg.add(_log_finite(alg, u), correction)
    positive = alg.select(alg.lt(u, alg.f(math.inf)), y, u)
    return alg.select(alg.gt(u, alg.f(0.0)), positive,
                      alg.select(alg.eq(u, alg.f(0.0)), alg.f(-math.inf), alg.f(math.nan)))


FUNCTIONS: dict[str, Callable[[Algebra, Any], Any]] = {"exp": exp, "tanh": tanh, "erf": erf, "log": log,
                                                       "expm1": expm1, "log1p": log1p}


# -- the kernel rewrite ----------------------------------------------------------------------------

_STMT_EXPRS: dict[type, tuple[str, ...]] = {
    Declare: ("init",), Assign: ("value",), Store: ("index", "value"), VecStore: ("index", "value"), If: ("cond",),
    NarrowStore: ("index", "value"),
}


def expand_transcendentals(kernel: Kernel) -> tuple[Kernel, list[Expr]]:
    """`kernel` with every float32 Unary exp / tanh / erf / log replaced by its formula (the
    kernel itself if it has none), and the nodes the formulas are made of: each step is used
    several times, and let_binding.bind_subexpressions(kernel, share=their ids) computes those
    into locals (the list keeps them alive, so the ids stay theirs). Shared operands stay shared:
    the rewrite is memoised by identity, and iterative, so fused chains of any depth are linear."""
    rewriter = _Rewriter()
    body = rewriter.block(kernel.body)
    return (kernel if body is kernel.body else dataclasses.replace(kernel, body=body)), rewriter.alg.steps


class _Rewriter:
    def __init__(self) -> None:
        self.done: dict[int, Expr] = {}
        self.alg = IrAlgebra()

    def block(self, stmts: list[Stmt]) -> list[Stmt]:
        out = [self.stmt(s) for s in stmts]
        return stmts if all(a is b for a, b in zip(out, stmts)) else out

    def stmt(self, s: Stmt) -> Stmt:
        changes: dict[str, Any] = {}
        for name in _STMT_EXPRS.get(type(s), ()):
            old = getattr(s, name)
            new = self.expr(old)
            if new is not old:
                changes[name] = new
        if isinstance(s, Loop):
            body = self.block(s.body)
            if body is not s.body:
                changes["body"] = body
        if isinstance(s, If):
            then, orelse = self.block(s.then), self.block(s.orelse)
            if then is not s.then or orelse is not s.orelse:
                changes.update(then=then, orelse=orelse)
        return dataclasses.replace(s, **changes) if changes else s

    def expr(self, root: Expr) -> Expr:
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            e, operands_done = stack.pop()
            if id(e) in self.done:
                continue
            if not operands_done:
                stack.append((e, True))
                stack += [(c, False) for c in expr_children(e) if id(c) not in self.done]
                continue
            self.done[id(e)] = self.rebuilt(e)
        return self.done[id(root)]

    def rebuilt(self, e: Expr) -> Expr:
        changes = {}
        for f in dataclasses.fields(e):  # type: ignore[arg-type]
            old = getattr(e, f.name)
            if isinstance(old, Expr) and self.done[id(old)] is not old:
                changes[f.name] = self.done[id(old)]
        new = dataclasses.replace(e, **changes) if changes else e  # type: ignore[type-var]
        if isinstance(new, Unary) and new.op in FUNCTIONS and new.dtype == "float32":
            return FUNCTIONS[new.op](self.alg, new.a)
        return new


__all__ = ["FUNCTIONS", "IrAlgebra", "NumpyAlgebra", "expand_transcendentals"]
