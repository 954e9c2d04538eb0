"""Prints kernel IR as C99. Only printing happens here; what an op means lives in aot/ops."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

import numpy as np

from aot.backends.c.load_walks import WalkStep, load_walks
from aot.codegen.kernel_names import kernel_comment
from aot.codegen.reserved_names import MATH_UNARY_FUNCTIONS
from aot.kernel.intrinsics import (
    DotAdd,
    ExtendLoad,
    LaneSplat,
    PairDotAdd,
    PairHalvesLoad,
    PairHalvesPart,
    PairHalvesSplat,
    PairLoad,
    PairSplat,
    QuadLoad,
    QuadSplat,
    TapProducts,
    VecRoundEven,
    VecZip,
    WidenAdd,
    WidenLoad,
)
from aot.kernel.ir import (
    INDEX,
    VECTOR_DTYPES,
    Assign,
    Binary,
    Bitcast,
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
    VecReduce,
    VecSelect,
    VecStore,
    walk_stmts,
)
from aot.kernel.parallel import has_parallel
from aot.kernel.unread import drop_unread_locals, untouched_params

# Vector multiply-adds in one loop body from which the body counts as long (see long_fma_body).
LONG_FMA_BODY = 64
# Selects of one of the two values compared (a < b ? a : b): the header's _PICK_ macros, x86's
# minps and maxps.
PICKS = {"lt": "PICK_LESS", "gt": "PICK_GREATER"}


def long_fma_body(kernel: Kernel) -> bool:
    """Whether a loop of the kernel has a long straight-line body of vector multiply-adds: a
    register tile whose kernel window is written out (a 3x3 conv: 9 steps of 24). gcc 12 moves
    such a body's broadcasts and operand vectors through the stack unless it schedules
    instructions before register allocation with the pressure in mind (AOT_LONG_FMA_BODY in
    runtime_c/aot_compiler_hints.h); short bodies (a 1x1 conv's one step) run slower scheduled
    so, so it is per kernel (benchmark: ResNet-50's convolutions)."""
    return any(isinstance(stmt, Loop) and sum(isinstance(s, Assign) and isinstance(s.value, MulAdd)
                                              for s in stmt.body) >= LONG_FMA_BODY
               for stmt in walk_stmts(kernel.body))


def _short_tile_steps(loop: Loop) -> bool:
    """Whether `loop` is a register tile's short reduction: at most 16 steps of at most 16
    multiply-adds, straight-line. LLVM unrolls such a loop whole; armv7 gcc keeps it rolled, its
    counter, compare and branch a large share of each step (AOT_UNROLL_STEPS in
    runtime_c/aot_compiler_hints.h; benchmark: ResNet-8's Winograd products on rpi3)."""
    body = loop.body
    fmas = sum(isinstance(s, Assign) and isinstance(s.value, MulAdd) for s in body)
    return (not loop.parallel and 2 <= loop.extent <= 16 and 0 < fmas <= 16
            and all(isinstance(s, (Declare, Assign)) for s in body))


C_TYPES = {
    "float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
    "uint64": "uint64_t", "bool": "uint8_t", INDEX: "int32_t",
}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||", "xor": "!=", "shl": "<<", "shr": ">>",
          "bitand": "&", "bitor": "|"}


def c_type(dtype: str) -> str:
    if dtype in VECTOR_DTYPES:
        return "aot_" + dtype.replace("float", "f").replace("int", "i")
    return C_TYPES[dtype]


def float_literal(value: float, dtype: str) -> str:
    """A C constant of exactly `value`: the shortest decimal when it is `value` exactly (6.0f,
    0.5f), hex otherwise. Only an exact decimal: one that merely rounds back to `value` (1e-05f)
    may be evaluated in a wider format where FLT_EVAL_METHOD is 2 (x87), and would not be the
    same number there; hex floats are exact in every format."""
    suffix = "f" if dtype == "float32" else ""
    if math.isnan(value):
        return "NAN" if dtype == "float32" else "(double)NAN"
    if math.isinf(value):
        text = "INFINITY" if dtype == "float32" else "(double)INFINITY"
        return f"-{text}" if value < 0 else text
    if value == 0.0:
        return ("-0.0" if math.copysign(1.0, value) < 0 else "0.0") + suffix
    if dtype == "float32":
        value = float(np.float32(value))
    decimal = str(np.float32(value)) if dtype == "float32" else repr(value)
    if Decimal(decimal) == Decimal(value):
        return decimal + suffix
    mantissa, _, exponent = value.hex().partition("p")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}p{exponent}{suffix}"


def int_literal(value: int, dtype: str) -> str:
    if dtype == "int64":
        if value == -(2**63):
            return "-INT64_C(9223372036854775807) - 1"
        return f"INT64_C({value})" if value >= 0 else f"-INT64_C({-value})"
    if dtype == "uint64":
        return f"UINT64_C({value})"
    if dtype in ("int32", INDEX) and value == -(2**31):
        return "-2147483647 - 1"
    if dtype in ("uint32",):
        return f"{value}u"
    return str(value)


# C operator precedence, tightest first (C99 6.5); an expression printed as an operand gets
# parentheses only when its own operator binds less tightly than its place needs.
PRIMARY, UNARY, MULTIPLICATIVE, ADDITIVE, SHIFT, RELATIONAL, EQUALITY, BITWISE_AND, BITWISE_OR, LOGICAL_AND, \
    LOGICAL_OR, CONDITIONAL = (16, 14, 13, 12, 11, 10, 9, 8, 6, 5, 4, 3)
_LEVEL = {"add": ADDITIVE, "sub": ADDITIVE, "mul": MULTIPLICATIVE, "div": MULTIPLICATIVE, "mod": MULTIPLICATIVE,
          "lt": RELATIONAL, "le": RELATIONAL, "gt": RELATIONAL, "ge": RELATIONAL, "eq": EQUALITY, "ne": EQUALITY,
          "xor": EQUALITY, "and": LOGICAL_AND, "or": LOGICAL_OR, "shl": SHIFT, "shr": SHIFT, "bitand": BITWISE_AND,
          "bitor": BITWISE_OR}
_BITWISE = (SHIFT, BITWISE_AND, BITWISE_OR)
_COMPARING = (RELATIONAL, EQUALITY)

# A printed expression and the precedence level of its outermost operator.
Printed = tuple[str, int]


def literal_level(text: str) -> int:
    """The precedence level of a literal as float_literal / int_literal print it."""
    if " - " in text:
        return ADDITIVE  # -2147483647 - 1
    return UNARY if text.startswith(("-", "(")) else PRIMARY  # -6.0f, (double)NAN


def operand(printed: Printed, minimum: int) -> str:
    """`printed` as an operand of an operator that needs at least level `minimum` there."""
    text, level = printed
    return text if level >= minimum else f"({text})"


def infix(op: str, a: Printed, b: Printed) -> Printed:
    """`a op b` for a left-associative operator: the right operand needs a tighter level than
    the operator's own, so `a - (b - c)` and `a + (b + c)` keep their parentheses (and the
    floating-point evaluation order). Chained comparisons and && inside || keep them too: they
    read ambiguously (and gcc's -Wparentheses rejects them)."""
    level = _LEVEL[op]
    minimum = [level, level + 1]
    if level in _BITWISE:  # every operand of << >> & | in parentheses: their precedence misleads
        minimum = [UNARY, UNARY]
    for side, (_, inner) in enumerate((a, b)):
        if (level in _COMPARING and inner in _COMPARING) or (level == LOGICAL_OR and inner == LOGICAL_AND):
            minimum[side] = max(minimum[side], RELATIONAL + 1 if level in _COMPARING else LOGICAL_AND + 1)
    return f"{operand(a, minimum[0])} {_INFIX[op]} {operand(b, minimum[1])}", level


def unary_prefix(sign: str, a: Printed) -> Printed:
    """`-a`, `!a` or a cast: `- -a` would read as a decrement, so a negative operand gets parentheses."""
    text = operand(a, UNARY)
    return f"{sign}({text})" if sign == "-" and text.startswith("-") else f"{sign}{text}", UNARY


def conditional(cond: Printed, a: Printed, b: Printed) -> Printed:
    return f"{operand(cond, CONDITIONAL + 1)} ? {operand(a, CONDITIONAL + 1)} : {operand(b, CONDITIONAL + 1)}", \
        CONDITIONAL


class KernelPrinter:
    """Prints kernels; records which helpers of runtime_c/aot_kernels.h the printed code uses
    (aot_min_float32, the vector type aot_f32x8, ...)."""

    def __init__(self, prefix: str, symbols: Mapping[str, str] | None = None) -> None:
        self.prefix = prefix
        self.symbols = symbols or {}  # kernel name -> function name (aot/codegen/kernel_names.py)
        self.helpers: set[str] = set()
        self._walks = 0  # walking pointers declared in the kernel being printed (load_walks.py)

    def function_name(self, kernel: Kernel) -> str:
        return self.symbols.get(kernel.name) or f"{self.prefix}_{kernel.name}"

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
        return f"AOT_KERNEL {hint}static void {self.function_name(kernel)}({', '.join(params) or 'void'})"

    def kernel(self, kernel: Kernel, may_alias: set[int] | frozenset[int] = frozenset()) -> str:
        """`may_alias`: params that share memory with another param (printed without restrict)."""
        lines = [f"/* {kernel_comment(kernel.sources, kernel.op)} */", self.signature(kernel, may_alias), "{"]
        # Only what is read is printed: -Werror rejects unused locals and parameters (aot/kernel/unread.py).
        body = drop_unread_locals(kernel.body)
        lines += [f"    (void){p.name}; /* not read here */" for p in untouched_params(kernel.params, body)]
        self._walks = 0
        self._block(body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    # -- statements ------------------------------------------------------------------------
    def _block(self, stmts: list[Stmt], depth: int, out: list[str]) -> None:
        walks = load_walks(stmts, self._walk_pointer)
        paired = -1  # the position of a step printed with the one before it
        for position, s in enumerate(stmts):
            step = walks.get(position)
            if step is None:
                self._stmt(s, depth, out)
            elif position != paired:
                assert isinstance(s, Declare) and isinstance(s.init, VecLoad)
                after = walks.get(position + 1)
                if after is not None and after.pointer == step.pointer and not after.first:
                    self._walk_pair(s, stmts[position + 1], step, depth, out)
                    paired = position + 1
                else:
                    self._walk_step(s, step, depth, out)

    def _walk_pointer(self, buffer: str) -> str:
        self._walks += 1
        return f"{buffer}_walk{self._walks - 1}"

    def _walk_step(self, s: Declare, step: WalkStep, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        load = s.init
        assert isinstance(load, VecLoad)
        if step.first:
            out.append(f"{pad}const float *{step.pointer} = &{load.buffer.name}[{self.expr(load.index)}];")
        out.append(f"{pad}{c_type(s.var.dtype)} {s.var.name} = {self._vector(load.dtype)}_LOAD_STEP({step.pointer});")

    def _walk_pair(self, s: Declare, second: Stmt, step: WalkStep, depth: int, out: list[str]) -> None:
        """Two steps of a walk in one: armv7 gcc loads them with one vld1 of four d registers."""
        assert isinstance(second, Declare) and isinstance(s.init, VecLoad)
        pad = "    " * depth
        if step.first:
            out.append(f"{pad}const float *{step.pointer} = &{s.init.buffer.name}[{self.expr(s.init.index)}];")
        out.append(f"{pad}{c_type(s.var.dtype)} {s.var.name}, {second.var.name};")
        out.append(f"{pad}{self._vector(s.init.dtype)}_LOAD2_STEP({step.pointer}, {s.var.name}, {second.var.name});")

    def _stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        if isinstance(s, Loop):
            v = s.var.name
            start, stop = ("first", "last") if s.parallel else ("0", str(s.extent))
            note = f" /* parallel: [first, last) of [0, {s.extent}) */" if s.parallel else ""
            if _short_tile_steps(s):
                out.append(f"{pad}AOT_UNROLL_STEPS")
            out.append(f"{pad}for ({c_type(s.var.dtype)} {v} = {start}; {v} < {stop}; ++{v}) {{{note}")
            self._block(s.body, depth + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, Declare):
            out.append(f"{pad}{c_type(s.var.dtype)} {s.var.name} = {self.expr(s.init)};")
        elif isinstance(s, Assign):
            out.append(f"{pad}{s.var.name} = {self.expr(s.value)};")
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer.name}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, NarrowStore):
            macro = self._vector(s.value.dtype)
            at, value = f"&{s.buffer.name}[{self.expr(s.index)}]", self.expr(s.value)
            if s.count is None:
                out.append(f"{pad}{macro}_STORE_NARROW({at}, {value});")
            else:
                out.append(f"{pad}{macro}_STORE_NARROW_FIRST({at}, {value}, {s.count});")
        elif isinstance(s, VecStore):
            macro = self._vector(s.value.dtype)
            out.append(f"{pad}{macro}_STORE(&{s.buffer.name}[{self.expr(s.index)}], {self.expr(s.value)});")
        elif isinstance(s, If):
            out.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self._block(s.then, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}}} else {{")
                self._block(s.orelse, depth + 1, out)
            out.append(f"{pad}}}")
        else:
            raise TypeError(f"cannot print {s!r}")

    # -- expressions -----------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        """`e` as C text, with parentheses only where precedence needs them."""
        return self._printed(e)[0]

    def _printed(self, e: Expr) -> Printed:
        if isinstance(e, Const):
            if e.dtype in ("float32", "float64"):
                text = float_literal(float(e.value), e.dtype)
            elif e.dtype == "bool":
                text = "1" if e.value else "0"
            else:
                text = int_literal(int(e.value), e.dtype)
            return text, literal_level(text)
        if isinstance(e, Var):
            return e.name, PRIMARY
        if isinstance(e, Load):
            return f"{e.buffer.name}[{self.expr(e.index)}]", PRIMARY
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            return self._unary(e)
        if isinstance(e, Select):
            if e.eager and e.dtype == "float32" and e.extremum:
                helper = f"aot_{e.extremum}_numbers_float32"
                self.helpers.add(helper)
                return f"{helper}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
            if e.eager and e.dtype == "float32":  # a function's arguments are all evaluated
                self.helpers.add("aot_select_float32")
                return f"aot_select_float32({self.expr(e.cond)}, {self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
            return conditional(self._printed(e.cond), self._printed(e.a), self._printed(e.b))
        if isinstance(e, Bitcast):
            helper = "aot_bits_float32" if e.dtype == "uint32" else "aot_float32_bits"
            self.helpers.add(helper)
            return f"{helper}({self.expr(e.a)})", PRIMARY
        if isinstance(e, MulAdd) and e.dtype == "float32":  # a scalar one: contracted under -ffp-contract=fast
            return infix("add", self._printed(e.acc), infix("mul", self._printed(e.a), self._printed(e.b)))
        if isinstance(e, Cast):
            if e.dtype == "bool":
                return unary_prefix("(uint8_t)", infix("ne", self._printed(e.a), ("0", PRIMARY)))
            return unary_prefix(f"({c_type(e.dtype)})", self._printed(e.a))
        return self._vector_expr(e), PRIMARY

    def _vector_expr(self, e: Expr) -> str:
        if isinstance(e, PairLoad):  # (a VecLoad too)
            return f"{self._vector(e.dtype)}_PAIRS(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, PairSplat):
            return f"{self._vector(e.dtype)}_SPLAT_PAIRS(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, (PairHalvesLoad, PairHalvesSplat)):  # (VecLoads too)
            step = "SPLAT_PAIRS" if isinstance(e, PairHalvesSplat) else "PAIRS"
            return f"{self._vector(e.dtype)}_{step}(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, PairHalvesPart):
            return f"{self._vector(e.a.dtype)}_PART({self.expr(e.a)}, {e.part})"
        if isinstance(e, PairDotAdd):
            step = "PAIR_DOTADD" if e.a.dtype != "int16x16" else ("PAIR_DOTADD_HIGH" if e.half else "PAIR_DOTADD_LOW")
            return f"{self._vector(e.dtype)}_{step}({self.expr(e.acc)}, {self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, TapProducts):  # (armv7's depthwise taps: vmull.s8, vmlal.s8)
            first = f"&{e.a.buffer.name}[{self.expr(e.a.index)}], {self.expr(e.w)}"
            if e.b is None or e.v is None:
                return f"{self._vector(e.dtype)}_TAP({first})"
            second = f"&{e.b.buffer.name}[{self.expr(e.b.index)}], {self.expr(e.v)}"
            return f"{self._vector(e.dtype)}_TAP_PAIR({first}, {second})"
        if isinstance(e, WidenAdd):
            half = "HIGH" if e.half else "LOW"
            return f"{self._vector(e.dtype)}_ADD_WIDE_{half}({self.expr(e.acc)}, {self.expr(e.a)})"
        if isinstance(e, QuadLoad):  # (a VecLoad too)
            return f"{self._vector(e.dtype)}_QUADS(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, QuadSplat):
            return f"{self._vector(e.dtype)}_SPLAT_QUAD(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, DotAdd) and e.signed and isinstance(e.b, LaneSplat):  # by a lane: sdot v.4b[i]
            return (f"{self._vector(e.dtype)}_SDOTADD_LANE({self.expr(e.acc)}, {self.expr(e.a)}, "
                    f"{self.expr(e.b.vector)}, {e.b.lane})")
        if isinstance(e, DotAdd):
            step = "SDOTADD" if e.signed else "DOTADD"
            return f"{self._vector(e.dtype)}_{step}({self.expr(e.acc)}, {self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, ExtendLoad):  # (a VecLoad too)
            signed = "I8" if e.buffer.dtype == "int8" else "U8"
            return f"{self._vector(e.dtype)}_EXTEND_{signed}(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, WidenLoad):  # (a VecLoad too)
            return f"{self._vector(e.dtype)}_WIDEN(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, VecLoad):
            return f"{self._vector(e.dtype)}_LOAD(&{e.buffer.name}[{self.expr(e.index)}])"
        if isinstance(e, LaneSplat):
            return f"{self._vector(e.dtype)}_LANE({self.expr(e.vector)}, {e.lane})"
        if isinstance(e, Splat) and isinstance(e.a, Load) and e.a.buffer.dtype == "float32":
            return f"{self._vector(e.dtype)}_SPLAT_LOAD(&{e.a.buffer.name}[{self.expr(e.a.index)}])"
        if isinstance(e, Splat):
            return f"{self._vector(e.dtype)}_SPLAT({self.expr(e.a)})"
        if isinstance(e, VecMax):
            return f"{self._vector(e.dtype)}_MAX({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecMin):
            return f"{self._vector(e.dtype)}_MIN({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecConvert) and isinstance(e.a, VecRoundEven):  # one instruction where there is one
            self._vector(e.a.dtype)
            return f"{self._vector(e.dtype)}_ROUND_CONVERT({self.expr(e.a.a)})"
        if isinstance(e, VecConvert):  # (the header's conversions need both vector types)
            self._vector(e.a.dtype)
            return f"{self._vector(e.dtype)}_CONVERT({self.expr(e.a)})"
        if isinstance(e, VecRoundEven):
            return f"{self._vector(e.dtype)}_ROUND_EVEN({self.expr(e.a)})"
        if isinstance(e, VecArith):
            return f"{self._vector(e.dtype)}_{e.op.upper()}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecSelect) and e.extremum:
            return f"{self._vector(e.dtype)}_{e.extremum.upper()}_NUMBERS({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecSelect) and e.cmp in PICKS and e.x == e.a and e.y == e.b:  # a < b ? a : b
            return f"{self._vector(e.dtype)}_{PICKS[e.cmp]}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecSelect):
            return (f"{self._vector(e.dtype)}_SELECT_{e.cmp.upper()}({self.expr(e.a)}, {self.expr(e.b)}, "
                    f"{self.expr(e.x)}, {self.expr(e.y)})")
        if isinstance(e, VecZip):
            return f"{self._vector(e.dtype)}_ZIP_{'HI' if e.high else 'LO'}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VecReduce):  # the lanes' halving tree (the header's _REDUCE_ macros)
            return f"{self._vector(e.a.dtype)}_REDUCE_{e.op.upper()}({self.expr(e.a)})"
        if isinstance(e, MulAdd) and isinstance(e.a, LaneSplat):  # by a lane (armv7: vmla by scalar)
            return (f"{self._vector(e.dtype)}_MULADD_LANE({self.expr(e.acc)}, {self.expr(e.b)}, "
                    f"{self.expr(e.a.vector)}, {e.a.lane})")
        if isinstance(e, MulAdd):
            return f"{self._vector(e.dtype)}_MULADD({self.expr(e.acc)}, {self.expr(e.a)}, {self.expr(e.b)})"
        raise TypeError(f"cannot print {e!r}")

    def _vector(self, dtype: str) -> str:
        """The macro prefix of a vector dtype (AOT_F32X8), whose definitions the file then needs."""
        name = c_type(dtype)
        self.helpers.add(name)
        return name.upper()

    def _binary(self, e: Binary) -> Printed:
        if e.dtype == INDEX and e.op in ("add", "sub", "mul"):
            return self._index_sum(e)
        return self._plain_binary(e)

    def _index_sum(self, e: Binary) -> Printed:
        """Integer index arithmetic with its constants folded: `((oy + 1) * 2 + -1) * 32` prints as
        `oy * 64 + 32`: a sum of terms in the order they first appear, then the constant."""
        terms: dict[Expr, int] = {}
        constant = _index_terms(e, 1, terms)
        printed: Printed | None = None
        for atom, coefficient in terms.items():
            if coefficient == 0:
                continue
            term = self._index_atom(atom)
            if abs(coefficient) != 1:
                term = infix("mul", term, (int_literal(abs(coefficient), INDEX), PRIMARY))
            if printed is None:
                printed = unary_prefix("-", term) if coefficient < 0 else term
            else:
                printed = infix("sub" if coefficient < 0 else "add", printed, term)
        if printed is None:
            text = int_literal(constant, INDEX)
            return text, literal_level(text)
        if constant:
            printed = infix("sub" if constant < 0 else "add", printed, (str(abs(constant)), PRIMARY))
        return printed

    def _index_atom(self, atom: Expr) -> Printed:
        """A term of a folded index sum: a product of two variables prints as it is (its operands
        folded), anything else as itself."""
        if isinstance(atom, Binary) and atom.op in ("add", "sub", "mul"):
            return infix(atom.op, self._printed(atom.a), self._printed(atom.b))
        return self._printed(atom)

    def _plain_binary(self, e: Binary) -> Printed:
        operand_dtype = e.a.dtype
        if e.op in ("min", "max"):
            helper = f"aot_{e.op}_{operand_dtype}"
            self.helpers.add(helper)
            return f"{helper}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
        if e.op == "pow":
            return f"{'powf' if operand_dtype == 'float32' else 'pow'}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
        if e.op == "mod" and operand_dtype in ("float32", "float64"):
            function = "fmodf" if operand_dtype == "float32" else "fmod"
            return f"{function}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY
        printed = infix(e.op, self._printed(e.a), self._printed(e.b))
        if e.dtype == "int16" and e.op in ("add", "sub", "mul"):
            # C computes it in int: the cast keeps the IR's 16-bit result, and tells the compilers
            # the sum fits 16-bit lanes (integer_terms.tap_sum's pairs: smull + smlal)
            return unary_prefix("(int16_t)", printed)
        return printed

    def _unary(self, e: Unary) -> Printed:
        a = self._printed(e.a)
        operand_dtype = e.a.dtype
        f = "f" if operand_dtype == "float32" else ""
        if e.op == "neg":
            return unary_prefix("-", a)
        if e.op == "not":
            return unary_prefix("!", a)
        if e.op == "abs" and operand_dtype in ("float32", "float64"):
            return f"fabs{f}({a[0]})", PRIMARY
        if e.op == "abs":
            return conditional(infix("lt", a, ("0", PRIMARY)), unary_prefix("-", a), a)
        if e.op in MATH_UNARY_FUNCTIONS:
            return f"{e.op}{f}({a[0]})", PRIMARY
        if e.op == "round_even":
            return f"nearbyint{f}({a[0]})", PRIMARY
        # The classification macros return "nonzero" (glibc's isinf gives -1 for -inf): normalise to 0/1.
        if e.op in ("isnan", "isinf"):
            return infix("ne", (f"{e.op}({a[0]})", PRIMARY), ("0", PRIMARY))
        if e.op in ("isposinf", "isneginf"):
            finite = infix("ne", (f"isinf({a[0]})", PRIMARY), ("0", PRIMARY))
            return infix("and", finite, infix("gt" if e.op == "isposinf" else "lt", a, ("0", PRIMARY)))
        if e.op == "sign":
            zero = ("0", PRIMARY)
            return infix("sub", infix("gt", a, zero), infix("lt", a, zero))
        raise TypeError(f"cannot print unary {e.op}")


def _index_terms(e: Expr, coefficient: int, terms: dict[Expr, int]) -> int:
    """Adds `coefficient * e` to `terms` (term -> its coefficient, in first-appearance order) as
    far as `e` is a sum of constant multiples; returns its constant part. Exact: integer
    arithmetic is a ring, and the index values of a kernel fit int32 in any order of summing."""
    if isinstance(e, Const) and e.dtype == INDEX:
        return coefficient * int(e.value)
    if isinstance(e, Binary) and e.dtype == INDEX and e.op in ("add", "sub"):
        sign = 1 if e.op == "add" else -1
        return _index_terms(e.a, coefficient, terms) + _index_terms(e.b, sign * coefficient, terms)
    if isinstance(e, Binary) and e.dtype == INDEX and e.op == "mul":
        if isinstance(e.b, Const):
            return _index_terms(e.a, coefficient * int(e.b.value), terms)
        if isinstance(e.a, Const):
            return _index_terms(e.b, coefficient * int(e.a.value), terms)
    terms[e] = terms.get(e, 0) + coefficient
    return 0


__all__ = ["KernelPrinter", "c_type", "float_literal", "int_literal", "Buffer"]
