"""The kernel IR's special operations, declared once: the instruction-shaped nodes (DotAdd,
PairLoad, TapProducts ...) that name one vector instruction or a short sequence of one ISA, beside
the core of aot/kernel/ir.py (loads, stores, arithmetic, selects, casts, loops, and their lane-wise
vector forms, which mean the same on every ISA).

INTRINSICS holds one Intrinsic per special node: its operands and result, its meaning as a numpy
function, the runtime_c/aot_kernels.h macros the C backend prints it as, and the builder of
aot/backends/llvm/intrinsics.py that emits it. The header is written by hand; tests/
test_intrinsics.py checks that it defines every macro named here on every ISA branch, and runs
each operation through both backends against its numpy meaning.

Numpy values: a vector is a 1-D array of its element type (int32x4: 4 int32, int16x16: 16 int16),
a scalar a numpy scalar. A load's meaning reads `memory`, the buffer from the load's index on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.kernel.ir import Expr, OperandDtype, VecLoad, dtype_follows_operand, vector_of


@dataclass(frozen=True, eq=True)
class WidenLoad(VecLoad):
    """`lanes` contiguous integer elements of `buffer` (weights kept as int8 or int16) as a float32
    vector, each converted exactly: the register tiles' operand load for quantised weights. A
    VecLoad for every analysis of what a kernel reads (bounds, hazards, threads)."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("float32", self.lanes)


@dataclass(frozen=True, eq=True)
class ExtendLoad(VecLoad):
    """`lanes` contiguous int8 or uint8 elements of `buffer` as an int32 vector, each sign- or
    zero-extended: the taps of an int8 depthwise loop written as vectors. A VecLoad for every
    analysis of what a kernel reads."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("int32", self.lanes)


@dataclass(frozen=True, eq=True)
class QuadLoad(VecLoad):
    """`lanes` contiguous bytes of a uint8 `buffer` as an int32 vector of lanes / 4 lanes, each
    lane four consecutive bytes (a quad): the activation operand of DotAdd. A VecLoad of `lanes`
    elements for every analysis of what a kernel reads."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("int32", self.lanes // 4)


@dataclass(frozen=True, eq=True)
class QuadSplat(VecLoad):
    """The four bytes (`lanes` = 4) of an int8 `buffer` at `index` copied into every lane of an
    int32 vector of `width` lanes: the weight operand of DotAdd (one output channel's quad)."""

    width: int = 8

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("int32", self.width)


@dataclass(frozen=True, eq=True)
class DotAdd(OperandDtype):
    """acc + the dot product of each lane's quads, a's four bytes unsigned (`signed`: signed, as
    b's always are), exactly in int32 (the sum of four products fits; acc wraps as the integer
    ops' accumulation does): x86's vpdpbusd, Arm's sdot (signed), or an exact sequence for the
    preset's instructions (aot/lowering/tiles.py)."""

    acc: Expr
    a: Expr
    b: Expr
    signed: bool = False


@dataclass(frozen=True, eq=True)
class PairLoad(VecLoad):
    """A QuadLoad (`lanes` = 16 bytes, four quads, of an int8 `buffer`) in pair order: the 16-bit
    halves of the quads de-interleaved, the first halves of quads 0-3 (bytes 0-1 of each) in
    16-bit elements 0-3 and the second halves (bytes 2-3) in elements 4-7. The activation operand
    of PairDotAdd: NEON's vld2.16 loads it in one instruction."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("int32", self.lanes // 4)


@dataclass(frozen=True, eq=True)
class PairSplat(VecLoad):
    """The four bytes (`lanes` = 4) of an int8 `buffer` at `index` in pair order in every lane of
    an int32x4: bytes 0-1 in 16-bit elements 0-3, bytes 2-3 in elements 4-7 (NEON: vld2.16 with
    the halves duplicated). The weight operand of PairDotAdd."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return vector_of("int32", 4)


@dataclass(frozen=True, eq=True)
class PairHalvesLoad(VecLoad):
    """Eight quads (`lanes` = 32 bytes of an int8 `buffer`, two PairLoads' worth) as 16 int16
    elements: the first 16-bit halves of quads 0-7 in elements 0-7, the second halves in elements
    8-15. aarch64 loads it in one ld2 .8h (armv7: one vld2.16 of four d registers), where two
    PairLoads take two loads (and on aarch64 two tbl)."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "int16x16"


@dataclass(frozen=True, eq=True)
class PairHalvesSplat(VecLoad):
    """One quad (`lanes` = 4 bytes of an int8 `buffer`) as 16 int16 elements: bytes 0-1 in
    elements 0-7, bytes 2-3 in elements 8-15 (aarch64: one ld2r .8h; armv7: vld2.16 to all lanes).
    The weight operand of a PairDotAdd over a PairHalvesLoad. Two quads (`lanes` = 8) make 32 elements, the second
    quad's in elements 16-31 (one ld4r .8h; vld4.16), of which PairHalvesPart takes either."""

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "int16x16" if self.lanes == 4 else "int16x32"


@dataclass(frozen=True, eq=True)
class PairHalvesPart(Expr):
    """Quad `part` (elements 16 * part to 16 * part + 15) of a two-quad PairHalvesSplat, as a
    one-quad one."""

    a: Expr
    part: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "int16x16"


@dataclass(frozen=True, eq=True)
class PairDotAdd(OperandDtype):
    """acc (int32x4) + in lane p the dot product of a's and b's signed bytes of 16-bit elements p
    and p + 4 (PairLoad, PairSplat: one quad of each), exactly in int32 (acc wraps as the integer
    ops' accumulation does), where no byte of b is -128. NEON multiplies signed bytes into 16 bits
    (vmull.s8 / smull), adds the other half's products there (vmlal.s8 / smlal: two products of
    which at most one is 128 * 128 fit in int16 when b is never -128), then adds those pairwise
    into the int32 lanes (vpadal.s16 / sadalp): 3 instructions per vector and weight quad, where
    DotAdd's unsigned-by-signed bytes take 6 (splitting a's bytes by masks and shifts).
    Operands of 16 int16 (PairHalvesLoad, PairHalvesSplat) hold eight quads: lane p then reads
    quad 4 * `half` + p, elements 4 * half + p and 8 + 4 * half + p (smull2, smlal2 for half 1)."""

    acc: Expr
    a: Expr
    b: Expr
    half: int = 0


@dataclass(frozen=True, eq=True)
class TapProducts(Expr):
    """Eight int16 elements: in element e the signed byte of `a` (an int8 VecLoad of 8 lanes) times
    the int8 weight `w`, plus with a second tap the byte of `b` times `v`; exact where no weight
    is -128 (at most 2 x 128 x 127: integer_terms.tap_sum's pairs). NEON's vmull.s8 and
    vmlal.s8 of d registers, the weight in every lane: a depthwise convolution's taps in pairs
    for 8 pixels (integer_terms.tap_pair_vectors), which WidenAdd then adds to int32 sums."""

    a: VecLoad
    w: Expr
    b: VecLoad | None = None
    v: Expr | None = None

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "int16x8"


@dataclass(frozen=True, eq=True)
class WidenAdd(OperandDtype):
    """acc (int32x4) + elements 4 * half to 4 * half + 3 of a (int16x8), sign-extended and added
    with wrapping as the integer ops' accumulation does (NEON's vaddw.s16)."""

    acc: Expr
    a: Expr
    half: int


@dataclass(frozen=True, eq=True)
class LaneSplat(Expr):
    """Lane `lane` of `vector` copied into every lane. A register tile's broadcasts of four
    consecutive floats become one vector load and four of these, which aarch64 folds into its
    by-element fused multiply-add (`fmla v.4s, v.4s, v.s[lane]`): one load where there were four."""

    vector: Expr
    lane: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.vector.dtype


@dataclass(frozen=True, eq=True)
class VecZip(OperandDtype):
    """Two vectors interleaved lane by lane, one half of the result: a0 b0 a1 b1 ... from their
    lower halves (`high` False) or from their upper halves (True). Values bound for every other
    element (Winograd F(2x2, 3x3)'s two output columns per tile) are then stored as whole
    vectors: NEON's vzip, LLVM's shufflevector."""

    a: Expr
    b: Expr
    high: bool


@dataclass(frozen=True, eq=True)
class VecRoundEven(OperandDtype):
    """Lane-wise round half to even of a float32xN (the scalar Unary "round_even")."""

    a: Expr


for _node, _field in ((DotAdd, "acc"), (PairDotAdd, "acc"), (WidenAdd, "acc"), (VecZip, "a"), (VecRoundEven, "a")):
    dtype_follows_operand(_node, _field)


# ---------------------------------------------------------------------------------------------
# Meanings in numpy. Integer sums are taken in int64, then wrapped to int32 as the integer ops'
# accumulation does.


def _wrap32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64).astype(np.uint32).view(np.int32)


def _lane_bytes(vector: np.ndarray, signed: bool) -> np.ndarray:
    """The bytes of an integer vector (little-endian lanes), as int64."""
    raw = np.ascontiguousarray(vector).view(np.int8 if signed else np.uint8)
    return raw.astype(np.int64)


def _halves(memory: np.ndarray, count: int) -> np.ndarray:
    """The first `count` 16-bit halves of the bytes at memory."""
    return np.ascontiguousarray(memory[:2 * count]).view("<i2").astype(np.int16)


def _require(holds: bool, what: str) -> None:
    if not holds:
        raise ValueError(f"outside the operation's domain: {what}")


def widen_load(node: WidenLoad, memory: np.ndarray) -> np.ndarray:
    return memory[:node.lanes].astype(np.float32)


def extend_load(node: ExtendLoad, memory: np.ndarray) -> np.ndarray:
    return memory[:node.lanes].astype(np.int32)


def quad_load(node: QuadLoad, memory: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(memory[:node.lanes]).view("<i4").astype(np.int32)


def quad_splat(node: QuadSplat, memory: np.ndarray) -> np.ndarray:
    return np.full(node.width, np.ascontiguousarray(memory[:4]).view("<i4")[0], dtype=np.int32)


def dot_add(node: DotAdd, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if node.signed:
        _require(bool(np.all(_lane_bytes(b, True) != -128)), "a signed DotAdd's b has a byte -128")
    products = _lane_bytes(a, node.signed) * _lane_bytes(b, True)
    return _wrap32(acc.astype(np.int64) + products.reshape(-1, 4).sum(axis=1))


def pair_load(node: PairLoad, memory: np.ndarray) -> np.ndarray:
    return _halves(memory, 8)[[0, 2, 4, 6, 1, 3, 5, 7]].view(np.int32)


def pair_splat(node: PairSplat, memory: np.ndarray) -> np.ndarray:
    return np.repeat(_halves(memory, 2), 4).view(np.int32)


def pair_halves_load(node: PairHalvesLoad, memory: np.ndarray) -> np.ndarray:
    halves = _halves(memory, 16)
    return np.concatenate([halves[0::2], halves[1::2]])


def pair_halves_splat(node: PairHalvesSplat, memory: np.ndarray) -> np.ndarray:
    return np.repeat(_halves(memory, node.lanes // 2), 8)


def pair_halves_part(node: PairHalvesPart, a: np.ndarray) -> np.ndarray:
    return a[16 * node.part:16 * node.part + 16]


def pair_dot_add(node: PairDotAdd, acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lane p: the bytes of 16-bit elements 4 * half + p and n / 2 + 4 * half + p of a and b (n
    elements), multiplied as signed bytes and summed."""
    _require(bool(np.all(_lane_bytes(b, True) != -128)), "PairDotAdd's b has a byte -128")
    a16, b16 = np.ascontiguousarray(a).view(np.int16), np.ascontiguousarray(b).view(np.int16)
    first = 4 * node.half + np.arange(4)
    elements = np.concatenate([first, len(a16) // 2 + first])
    products = (_lane_bytes(a16[elements], True) * _lane_bytes(b16[elements], True)).reshape(2, 4, 2)
    return _wrap32(acc.astype(np.int64) + products.sum(axis=(0, 2)))


def tap_products(node: TapProducts, a: np.ndarray, w: np.integer, b: np.ndarray | None = None,
                 v: np.integer | None = None) -> np.ndarray:
    _require(int(w) != -128 and (v is None or int(v) != -128), "a TapProducts weight is -128")
    total = a.astype(np.int64) * int(w)
    if b is not None and v is not None:
        total = total + b.astype(np.int64) * int(v)
    return total.astype(np.int16)


def widen_add(node: WidenAdd, acc: np.ndarray, a: np.ndarray) -> np.ndarray:
    return _wrap32(acc.astype(np.int64) + a[4 * node.half:4 * node.half + 4].astype(np.int64))


def lane_splat(node: LaneSplat, vector: np.ndarray) -> np.ndarray:
    return np.full_like(vector, vector[node.lane])


def vec_zip(node: VecZip, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    half = len(a) // 2
    first = half if node.high else 0
    return np.stack([a[first:first + half], b[first:first + half]], axis=1).reshape(-1)


def vec_round_even(node: VecRoundEven, a: np.ndarray) -> np.ndarray:
    return np.rint(a).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# The table.


@dataclass(frozen=True)
class CForm:
    """The macros of runtime_c/aot_kernels.h one form of an operation prints as (C printer:
    aot/backends/c/kernel_printer.py), and the vector types (AOT_WANT_<type>) a model asks for
    to have them defined."""

    lanes: int
    macros: tuple[str, ...]
    wants: tuple[str, ...]


@dataclass(frozen=True)
class Intrinsic:
    """One special operation. `operands`: each operand's type (N: the lanes, `lanes` lists them);
    `semantics(node, **operands)` its meaning in numpy (a load's operand is `memory`); `domain`:
    the inputs it is defined for, where not all (the numpy meaning raises outside them); `llvm`:
    its builder in aot/backends/llvm/intrinsics.py (LLVM_BUILDERS)."""

    node: type[Expr]
    operands: tuple[tuple[str, str], ...]
    result: str
    lanes: tuple[int, ...]
    semantics: Callable[..., np.ndarray]
    c_forms: tuple[CForm, ...]
    llvm: str
    domain: str = ""

    @property
    def name(self) -> str:
        return self.node.__name__

    @property
    def is_load(self) -> bool:
        return issubclass(self.node, VecLoad)


def _forms(lanes: tuple[int, ...], pattern: tuple[str, ...], wants: tuple[str, ...]) -> tuple[CForm, ...]:
    """A form per lane count, `{n}` in the macro and type names standing for it."""
    return tuple(CForm(n, tuple(m.format(n=n) for m in pattern), tuple(w.format(n=n) for w in wants)) for n in lanes)


_ALL = (4, 8, 16)
_I32, _F32, _BOTH = ("I32X{n}",), ("F32X{n}",), ("I32X{n}", "F32X{n}")
_QUAD_BYTES = (("memory", "bytes"),)

INTRINSICS: dict[type[Expr], Intrinsic] = {spec.node: spec for spec in (
    Intrinsic(WidenLoad, (("memory", "int8 or int16"),), "float32xN", _ALL, widen_load,
              _forms(_ALL, ("AOT_F32X{n}_WIDEN",), _F32), "widen_load"),
    Intrinsic(ExtendLoad, (("memory", "int8 or uint8"),), "int32xN", _ALL, extend_load,
              _forms(_ALL, ("AOT_I32X{n}_EXTEND_I8", "AOT_I32X{n}_EXTEND_U8"), _BOTH), "extend_load"),
    Intrinsic(QuadLoad, (("memory", "uint8 (int8 for a signed DotAdd)"),), "int32xN", _ALL, quad_load,
              _forms(_ALL, ("AOT_I32X{n}_QUADS",), _I32), "quad_load"),
    Intrinsic(QuadSplat, (("memory", "int8"),), "int32xN", _ALL, quad_splat,
              _forms(_ALL, ("AOT_I32X{n}_SPLAT_QUAD",), _I32), "quad_splat"),
    Intrinsic(DotAdd, (("acc", "int32xN"), ("a", "int32xN quads"), ("b", "int32xN quads")), "int32xN", _ALL,
              dot_add, _forms((16,), ("AOT_I32X{n}_DOTADD",), _I32)
              + _forms((8,), ("AOT_I32X{n}_DOTADD", "AOT_I32X{n}_SDOTADD"), _I32)
              + _forms((4,), ("AOT_I32X{n}_DOTADD", "AOT_I32X{n}_SDOTADD", "AOT_I32X{n}_SDOTADD_LANE"), _I32),
              "dot_add", domain="signed: no byte of b is -128 (x86's 8-lane form)"),
    Intrinsic(PairLoad, _QUAD_BYTES, "int32x4", (4,), pair_load,
              _forms((4,), ("AOT_I32X4_PAIRS",), _I32), "pair_order"),
    Intrinsic(PairSplat, _QUAD_BYTES, "int32x4", (4,), pair_splat,
              _forms((4,), ("AOT_I32X4_SPLAT_PAIRS",), _I32), "pair_order"),
    Intrinsic(PairHalvesLoad, _QUAD_BYTES, "int16x16", (4,), pair_halves_load,
              _forms((4,), ("AOT_I16X16_PAIRS",), _I32), "pair_halves"),
    Intrinsic(PairHalvesSplat, _QUAD_BYTES, "int16x16 or int16x32", (4,), pair_halves_splat,
              _forms((4,), ("AOT_I16X16_SPLAT_PAIRS", "AOT_I16X32_SPLAT_PAIRS"), _I32), "pair_halves"),
    Intrinsic(PairHalvesPart, (("a", "int16x32"),), "int16x16", (4,), pair_halves_part,
              _forms((4,), ("AOT_I16X32_PART",), _I32), "pair_halves_part"),
    Intrinsic(PairDotAdd, (("acc", "int32x4"), ("a", "int32x4 or int16x16"), ("b", "int32x4 or int16x16")),
              "int32x4", (4,), pair_dot_add,
              _forms((4,), ("AOT_I32X4_PAIR_DOTADD", "AOT_I32X4_PAIR_DOTADD_LOW", "AOT_I32X4_PAIR_DOTADD_HIGH"), _I32),
              "pair_dot_add", domain="no byte of b is -128"),
    Intrinsic(TapProducts, (("a", "int8x8"), ("w", "int8"), ("b", "int8x8"), ("v", "int8")), "int16x8", (4,),
              tap_products, _forms((4,), ("AOT_I16X8_TAP", "AOT_I16X8_TAP_PAIR"), _I32), "tap_products",
              domain="no weight is -128"),
    Intrinsic(WidenAdd, (("acc", "int32x4"), ("a", "int16x8")), "int32x4", (4,), widen_add,
              _forms((4,), ("AOT_I32X4_ADD_WIDE_LOW", "AOT_I32X4_ADD_WIDE_HIGH"), _I32), "widen_add"),
    Intrinsic(LaneSplat, (("vector", "float32x4 (int32x4 as a signed DotAdd's b)"),), "as vector", (4,), lane_splat,
              _forms((4,), ("AOT_F32X4_LANE", "AOT_F32X4_MULADD_LANE"), _F32), "lane_splat"),
    Intrinsic(VecZip, (("a", "float32x4"), ("b", "float32x4")), "float32x4", (4,), vec_zip,
              _forms((4,), ("AOT_F32X4_ZIP_LO", "AOT_F32X4_ZIP_HI"), _F32), "vec_zip"),
    Intrinsic(VecRoundEven, (("a", "float32xN"),), "float32xN", _ALL, vec_round_even,
              _forms(_ALL, ("AOT_F32X{n}_ROUND_EVEN", "AOT_I32X{n}_ROUND_CONVERT"), _BOTH), "round_even_lanes"),
)}


def intrinsic_of(e: Expr) -> Intrinsic | None:
    """The table's entry for a special node, None for a core one."""
    return INTRINSICS.get(type(e))

