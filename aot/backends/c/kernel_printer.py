"""Prints kernel IR as C99. Only printing happens here; what an op means lives in aot/ops."""

from __future__ import annotations

import math

import numpy as np

from aot.codegen.c_names import c_comment
from aot.kernel.ir import (
    INDEX,
    VECTOR_DTYPES,
    Assign,
    Binary,
    Buffer,
    Cast,
    Const,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    MulAdd,
    Select,
    Splat,
    Stmt,
    Store,
    Unary,
    Var,
    VecArith,
    VecLoad,
    VecMax,
    VecMin,
    VecSelect,
    VecStore,
    walk_stmts,
)
from aot.kernel.parallel import has_parallel

# Vector multiply-adds in one loop body from which the body counts as long (see long_fma_body).
LONG_FMA_BODY = 64


def long_fma_body(kernel: Kernel) -> bool:
    """Whether a loop of the kernel has a long straight-line body of vector multiply-adds: a
    register tile whose kernel window is written out (a 3x3 conv: 9 steps of 24). gcc 12 moves
    such a body's broadcasts and operand vectors through the stack unless it schedules
    instructions before register allocation with the pressure in mind (AOT_LONG_FMA_BODY in
    templates/c/model.c.j2: a ResNet-50's 3x3 convs 6% faster); on short bodies (a 1x1 conv's
    one step) that same scheduling measured up to 25% slower, so it is per kernel."""
    return any(isinstance(stmt, Loop) and sum(isinstance(s, Assign) and isinstance(s.value, MulAdd)
                                              for s in stmt.body) >= LONG_FMA_BODY
               for stmt in walk_stmts(kernel.body))

C_TYPES = {
    "float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
    "uint64": "uint64_t", "bool": "uint8_t", INDEX: "int32_t",
}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||", "xor": "!="}
_MATH = {"exp", "log", "sqrt", "tanh", "erf", "floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan",
         "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1"}


def c_type(dtype: str) -> str:
    if dtype in VECTOR_DTYPES:
        return "aot_" + dtype.replace("float", "f")
    return C_TYPES[dtype]


def float_literal(value: float, dtype: str) -> str:
    suffix = "f" if dtype == "float32" else ""
    if math.isnan(value):
        return "NAN" if dtype == "float32" else "((double)NAN)"
    if math.isinf(value):
        text = "INFINITY" if dtype == "float32" else "((double)INFINITY)"
        return f"(-{text})" if value < 0 else text
    if value == 0.0:
        return ("-0.0" if math.copysign(1.0, value) < 0 else "0.0") + suffix
    if dtype == "float32":
        value = float(np.float32(value))
    mantissa, _, exponent = value.hex().partition("p")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    text = f"{mantissa}p{exponent}{suffix}"
    return f"({text})" if value < 0 else text


def int_literal(value: int, dtype: str) -> str:
    if dtype == "int64":
        if value == -(2**63):
            return "(-INT64_C(9223372036854775807) - 1)"
        return f"INT64_C({value})" if value >= 0 else f"(-INT64_C({-value}))"
    if dtype == "uint64":
        return f"UINT64_C({value})"
    if dtype in ("int32", INDEX) and value == -(2**31):
        return "(-2147483647 - 1)"
    if dtype in ("uint32",):
        return f"{value}u"
    return str(value) if value >= 0 else f"({value})"


class KernelPrinter:
    """Prints kernels; records which helpers of runtime_c/aot_kernels.h the printed code uses
    (aot_min_float32, the vector type aot_f32x8, ...)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.helpers: set[str] = set()

    def function_name(self, kernel: Kernel) -> str:
        return f"{self.prefix}_{kernel.name}"

    def signature(self, kernel: Kernel, may_alias: set[int] | frozenset[int] = frozenset()) -> str:
        params = []
        for i, b in enumerate(kernel.params):
            const = "" if b.writable else "const "
            restrict = "" if i in may_alias else "restrict "
            params.append(f"{const}{c_type(b.dtype)} *{restrict}{b.name}")
        hint = "AOT_LONG_FMA_BODY " if long_fma_body(kernel) else ""
        if has_parallel(kernel):
            # A parallel segment (aot/kernel/parallel.py): runs iterations [first, last).
            params += ["int32_t first", "int32_t last"]
            hint += "AOT_PARALLEL_SEGMENT "
        return f"{hint}static void {self.function_name(kernel)}({', '.join(params) or 'void'})"

    def kernel(self, kernel: Kernel, may_alias: set[int] | frozenset[int] = frozenset()) -> str:
        """`may_alias`: params that share memory with another param (printed without restrict)."""
        origin = ", ".join(repr(s) for s in kernel.sources)
        lines = [f"/* {kernel.name}: {c_comment(kernel.op)} <- ONNX {c_comment(origin)} */",
                 self.signature(kernel, may_alias), "{"]
        for stmt in kernel.body:
            self._stmt(stmt, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    # -- statements ------------------------------------------------------------------------
    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        if isinstance(s, Loop):
            v = s.var.name
            start, stop = ("first", "last") if s.parallel else ("0", str(s.extent))
            note = f" /* parallel: [first, last) of [0, {s.extent}) */" if s.parallel else ""
            out.append(f"{pad}for ({c_type(s.var.dtype)} {v} = {start}; {v} < {stop}; ++{v}) {{{note}")
            for inner in s.body:
                self._stmt(inner, depth + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, Declare):
            out.append(f"{pad}{c_type(s.var.dtype)} {s.var.name} = {self.expr(s.init)};")
        elif isinstance(s, Assign):
            out.append(f"{pad}{s.var.name} = {self.expr(s.value)};")
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer.name}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, VecStore):
            macro = self._vector(s.value.dtype)
            out.append(f"{pad}{macro}_STORE(&{s.buffer.name}[{self._bare(s.index)}], {self._bare(s.value)});")
        elif isinstance(s, If):
            out.append(f"{pad}if ({self._bare(s.cond)}) {{")
            for inner in s.then:
                self._stmt(inner, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}}} else {{")
                for inner in s.orelse:
                    self._stmt(inner, depth + 1, out)
            out.append(f"{pad}}}")
        else:
            raise TypeError(f"cannot print {s!r}")

    # -- expressions -----------------------------------------------------------------------
    def _bare(self, e: Expr) -> str:
        text = self.expr(e)
        return text[1:-1] if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]) else text

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            if e.dtype in ("float32", "float64"):
                return float_literal(float(e.value), e.dtype)
            if e.dtype == "bool":
                return "1" if e.value else "0"
            return int_literal(int(e.value), e.dtype)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            return f"{e.buffer.name}[{self._bare(e.index)}]"
        if isinstance(e, VecLoad):
            return f"{self._vector(e.dtype)}_LOAD(&{e.buffer.name}[{self._bare(e.index)}])"
        if isinstance(e, Splat):
            return f"{self._vector(e.dtype)}_SPLAT({self._bare(e.a)})"
        if isinstance(e, VecMax):
            return f"{self._vector(e.dtype)}_MAX({self._bare(e.a)}, {self._bare(e.b)})"
        if isinstance(e, VecMin):
            return f"{self._vector(e.dtype)}_MIN({self._bare(e.a)}, {self._bare(e.b)})"
        if isinstance(e, VecArith):
            return f"{self._vector(e.dtype)}_{e.op.upper()}({self._bare(e.a)}, {self._bare(e.b)})"
        if isinstance(e, VecSelect):
            return (f"{self._vector(e.dtype)}_SELECT_{e.cmp.upper()}({self._bare(e.a)}, {self._bare(e.b)}, "
                    f"{self._bare(e.x)}, {self._bare(e.y)})")
        if isinstance(e, MulAdd):
            return f"{self._vector(e.dtype)}_MULADD({self._bare(e.acc)}, {self._bare(e.a)}, {self._bare(e.b)})"
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            return self._unary(e)
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, Cast):
            if e.dtype == "bool":
                return f"((uint8_t)({self.expr(e.a)} != 0))"
            return f"(({c_type(e.dtype)}){self.expr(e.a)})"
        raise TypeError(f"cannot print {e!r}")

    def _vector(self, dtype: str) -> str:
        """The macro prefix of a vector dtype (AOT_F32X8), whose definitions the file then needs."""
        name = c_type(dtype)
        self.helpers.add(name)
        return name.upper()

    def _binary(self, e: Binary) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        operand = e.a.dtype
        if e.op in ("min", "max"):
            helper = f"aot_{e.op}_{operand}"
            self.helpers.add(helper)
            return f"{helper}({a}, {b})"
        if e.op == "pow":
            return f"{'powf' if operand == 'float32' else 'pow'}({a}, {b})"
        if e.op == "mod" and operand in ("float32", "float64"):
            return f"{'fmodf' if operand == 'float32' else 'fmod'}({a}, {b})"
        return f"({a} {_INFIX[e.op]} {b})"

    def _unary(self, e: Unary) -> str:
        a = self.expr(e.a)
        operand = e.a.dtype
        f = "f" if operand == "float32" else ""
        if e.op == "neg":
            return f"(-{a})"
        if e.op == "not":
            return f"(!{a})"
        if e.op == "abs":
            return f"fabs{f}({a})" if operand in ("float32", "float64") else f"({a} < 0 ? -{a} : {a})"
        if e.op in _MATH:
            return f"{e.op}{f}({a})"
        if e.op == "round_even":
            return f"nearbyint{f}({a})"
        # The classification macros return "nonzero" (glibc's isinf gives -1 for -inf): normalise to 0/1.
        if e.op == "isnan":
            return f"(isnan({a}) != 0)"
        if e.op == "isinf":
            return f"(isinf({a}) != 0)"
        if e.op in ("isposinf", "isneginf"):
            sign = ">" if e.op == "isposinf" else "<"
            return f"((isinf({a}) != 0) && {a} {sign} 0)"
        if e.op == "sign":
            zero = "0"
            return f"(({a} > {zero}) - ({a} < {zero}))"
        raise TypeError(f"cannot print unary {e.op}")


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


__all__ = ["KernelPrinter", "c_type", "float_literal", "int_literal", "Buffer"]
