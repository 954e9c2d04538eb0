"""The LLVM lowering of the kernel IR's special operations (aot/kernel/intrinsics.py), beside the
core of kernel_emitter.py, which looks each one up here by the name its table entry gives
(LLVM_BUILDERS). A builder takes the function emitter and the node and returns its value; what
it computes is the node's numpy meaning, bit for bit, in the instructions of the module's target
where they exist (NEON's vld2 / smull / sadalp, aarch64's sdot, x86's vpmaddubsw) and in
portable LLVM IR elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from llvmlite import ir

import aot.backends.llvm.types as t
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
from aot.kernel.ir import Buffer, Expr, VecLoad


class Emitter(Protocol):
    """What a builder uses of aot/backends/llvm/kernel_emitter.py's function emitter."""

    b: ir.IRBuilder
    fn: ir.Function
    buffers: dict[str, tuple[Buffer, ir.Argument]]
    paired_loads: bool  # 32-bit Arm NEON
    rounds_lanes: bool  # llvm.roundeven of a vector is an instruction
    dot_product: bool  # aarch64's sdot
    avx2: bool

    @property
    def math(self) -> MathLibraryLike: ...

    def expr(self, e: Expr) -> ir.Value: ...

    def splat(self, value: ir.Value, vector: ir.VectorType) -> ir.Value: ...

    def shuffle(self, a: ir.Value, b: ir.Value, lanes: list[int]) -> ir.Value: ...


class MathLibraryLike(Protocol):
    module: ir.Module

    def vector_intrinsic(self, name: str, vector: ir.VectorType, arity: int) -> ir.Function: ...

    def declared(self, symbol: str, result: ir.Type, args: list[ir.Type]) -> ir.Function: ...


def _mask(lanes: list[int]) -> ir.Constant:
    """A shufflevector mask picking these lanes."""
    return ir.Constant(ir.VectorType(t.I32, len(lanes)), lanes)


def _pointer(fe: Emitter, load: VecLoad) -> tuple[Buffer, ir.Value]:
    """The load's buffer and the address of its first element."""
    buf, arg = fe.buffers[load.buffer.name]
    return buf, fe.b.gep(arg, [fe.expr(load.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))


# -- the builders the table names -----------------------------------------------------------------


def widen_load(fe: Emitter, e: WidenLoad) -> ir.Value:
    buf, ptr = _pointer(fe, e)
    integers = ir.VectorType(t.storage_type(buf.dtype), e.lanes)
    raw = fe.b.load(ptr, typ=integers, align=t.itemsize(buf.dtype))
    return fe.b.sitofp(raw, t.storage_type(e.dtype))


def extend_load(fe: Emitter, e: ExtendLoad) -> ir.Value:
    buf, ptr = _pointer(fe, e)
    raw = fe.b.load(ptr, typ=ir.VectorType(t.I8, e.lanes), align=1)
    extend = fe.b.sext if buf.dtype == "int8" else fe.b.zext
    return extend(raw, t.storage_type(e.dtype))


def quad_load(fe: Emitter, e: QuadLoad) -> ir.Value:
    """4 * lanes bytes as int32 lanes."""
    _, ptr = _pointer(fe, e)
    return fe.b.load(ptr, typ=t.storage_type(e.dtype), align=1)


def quad_splat(fe: Emitter, e: QuadSplat) -> ir.Value:
    _, ptr = _pointer(fe, e)
    return fe.splat(fe.b.load(ptr, typ=t.I32, align=1), t.storage_type(e.dtype))


def dot_add(fe: Emitter, e: DotAdd) -> ir.Value:
    return dot_add_values(fe, fe.expr(e.acc), fe.expr(e.a), fe.expr(e.b), e.signed)


def pair_halves_part(fe: Emitter, e: PairHalvesPart) -> ir.Value:
    a = fe.expr(e.a)
    part = _mask(list(range(16 * e.part, 16 * e.part + 16)))
    return fe.b.shuffle_vector(a, ir.Constant(a.type, ir.Undefined), part)


def pair_dot_add(fe: Emitter, e: PairDotAdd) -> ir.Value:
    return pair_dot_add_values(fe, fe.expr(e.acc), fe.expr(e.a), fe.expr(e.b), e.half)


def widen_add(fe: Emitter, e: WidenAdd) -> ir.Value:
    """vaddw.s16: the half, sign-extended, added."""
    a = fe.expr(e.a)
    lanes = _mask(list(range(4 * e.half, 4 * e.half + 4)))
    half = fe.b.shuffle_vector(a, ir.Constant(a.type, ir.Undefined), lanes)
    acc = fe.expr(e.acc)
    return fe.b.add(acc, fe.b.sext(half, acc.type))


def lane_splat(fe: Emitter, e: LaneSplat) -> ir.Value:
    vector = fe.expr(e.vector)
    return fe.shuffle(vector, vector, [e.lane] * vector.type.count)


def vec_zip(fe: Emitter, e: VecZip) -> ir.Value:
    a, b = fe.expr(e.a), fe.expr(e.b)
    count = a.type.count
    first = count // 2 if e.high else 0
    return fe.shuffle(a, b, [index for i in range(first, first + count // 2) for index in (i, count + i)])


def round_even_lanes(fe: Emitter, e: VecRoundEven) -> ir.Value:
    return round_even_vector(fe, fe.expr(e.a))


# -- their instruction sequences ------------------------------------------------------------------


def round_even_vector(fe: Emitter, v: ir.Value) -> ir.Value:
    """Each lane of float vector v rounded half to even: llvm.roundeven (vrintn on an ARMv8
    core's 32-bit NEON, rpi3's Cortex-A53), but on ARMv7 NEON, which has no such instruction
    (LLVM calls roundevenf per lane), by adding and subtracting 2^23 with v's sign where
    |v| < 2^23 (NEON rounds to nearest even; larger values are integers already), v's sign
    kept (as runtime_c/aot_kernels.h does)."""
    if fe.rounds_lanes:
        return fe.b.call(fe.math.vector_intrinsic("llvm.roundeven", v.type, 1), [v])
    copysign = fe.math.vector_intrinsic("llvm.copysign", v.type, 2)
    big = ir.Constant(v.type, [8388608.0] * v.type.count)
    magic = fe.b.call(copysign, [big, v])
    rounded = fe.b.fsub(fe.b.fadd(v, magic), magic)
    small = fe.b.fcmp_ordered("<", fe.b.call(fe.math.vector_intrinsic("llvm.fabs", v.type, 1), [v]), big)
    return fe.b.call(copysign, [fe.b.select(small, rounded, v), v])


def dot_add_values(fe: Emitter, acc: ir.Value, a: ir.Value, b: ir.Value, signed: bool = False) -> ir.Value:
    """acc + per lane the dot product of a's four bytes (unsigned; `signed`: signed) and b's
    (signed), in the portable form: the bytes widened, multiplied, each lane's four products
    summed (wrapping); aarch64's 4 lanes as sdot (the dot-product extension) or NEON's
    sequence (neon_dot)."""
    lanes = acc.type.count
    as_bytes = ir.VectorType(t.I8, 4 * lanes)
    if signed and lanes == 4 and fe.dot_product:
        sdot = fe.math.declared("llvm.aarch64.neon.sdot.v4i32.v16i8", acc.type, [acc.type, as_bytes, as_bytes])
        return fe.b.call(sdot, [acc, fe.b.bitcast(a, as_bytes), fe.b.bitcast(b, as_bytes)])
    if not signed and lanes == 4 and neon_pairwise_add(fe) is not None:
        return neon_dot(fe, acc, a, b)
    if signed and lanes == 8 and fe.avx2:
        return signed_dot_avx2(fe, acc, fe.b.bitcast(a, as_bytes), fe.b.bitcast(b, as_bytes))
    wide = ir.VectorType(t.I32, 4 * lanes)
    widen_a = fe.b.sext if signed else fe.b.zext
    products = fe.b.mul(widen_a(fe.b.bitcast(a, as_bytes), wide),
                          fe.b.sext(fe.b.bitcast(b, as_bytes), wide))
    total = acc
    for j in range(4):
        mask = ir.Constant(ir.VectorType(t.I32, lanes), [4 * i + j for i in range(lanes)])
        total = fe.b.add(total, fe.b.shuffle_vector(products, ir.Constant(wide, ir.Undefined), mask))
    return total

def signed_dot_avx2(fe: Emitter, acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """The header's AOT_I32X8_SDOTADD: |a| by b with a's signs (vpabsb, vpsignb), two
    products summed in 16 bits by vpmaddubsw, then pairs of those by vpmaddwd by ones. Exact
    only when no byte of b is -128: the signed 8-lane steps come from AVX2 tiles over weights
    in -127..127 (integer_tiles.fits_pairs), whose pair sums are at most 2 * 128 * 127."""
    v16, v8 = ir.VectorType(t.I16, 16), acc.type
    absolute = fe.math.declared("llvm.abs.v32i8", a.type, [a.type, ir.IntType(1)])
    sign = fe.math.declared("llvm.x86.avx2.psign.b", a.type, [a.type, a.type])
    pairs = fe.math.declared("llvm.x86.avx2.pmadd.ub.sw", v16, [a.type, a.type])
    quads = fe.math.declared("llvm.x86.avx2.pmadd.wd", v8, [v16, v16])
    products = fe.b.call(pairs, [fe.b.call(absolute, [a, ir.Constant(ir.IntType(1), 0)]),
                                   fe.b.call(sign, [b, a])])
    return fe.b.add(acc, fe.b.call(quads, [products, ir.Constant(v16, [1] * 16)]))


def neon_pairwise_add(fe: Emitter) -> str | None:
    """The intrinsic that adds a vector of 8 int16 pairwise into 4 int32 (saddlp, armv7's
    vpaddl.s16) where the module's target has NEON, else None. (paired_loads is set for
    32-bit Arm with NEON: module.py.)"""
    if fe.fn.module.triple.startswith("aarch64"):
        return "llvm.aarch64.neon.saddlp.v4i32.v8i16"
    return "llvm.arm.neon.vpaddls.v4i32.v8i16" if fe.paired_loads else None

def tap_products(fe: Emitter, e: TapProducts) -> ir.Value:
    """TapProducts: each tap's 8 bytes times its weight in 16 bits, the two products
    added. 32-bit Arm NEON: vld1.8 and vmull.s8 themselves (LLVM folds the add into vmlal.s8;
    a plain unaligned <8 x i8> load became two ldr through the stack, and the products of
    sign-extended vectors vmovl.s8 + vmla.i16); elsewhere the same sums from extended bytes."""
    wide, bytes8 = ir.VectorType(t.I16, 8), ir.VectorType(t.I8, 8)

    def product(taps: VecLoad, weight: Expr) -> ir.Value:
        buf, arg = fe.buffers[taps.buffer.name]
        ptr = fe.b.gep(arg, [fe.expr(taps.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
        w = fe.expr(weight)  # an int8 value, which the emitter may hold in a wider integer
        w = fe.splat(fe.b.trunc(w, t.I8) if w.type.width > 8 else w, bytes8)
        if not fe.paired_loads:
            loaded = fe.b.load(ptr, typ=bytes8, align=1)
            return fe.b.mul(fe.b.sext(loaded, wide), fe.b.sext(w, wide))
        vld1 = fe.math.declared("llvm.arm.neon.vld1.v8i8.p0", bytes8, [t.PTR, t.I32])
        multiply = fe.math.declared("llvm.arm.neon.vmulls.v8i16", wide, [bytes8, bytes8])
        return fe.b.call(multiply, [fe.b.call(vld1, [ptr, ir.Constant(t.I32, 1)]), w])

    first = product(e.a, e.w)
    return first if e.b is None or e.v is None else fe.b.add(first, product(e.b, e.v))

def pair_order(fe: Emitter, e: PairLoad | PairSplat) -> ir.Value:
    """PairLoad (16 bytes, the quads' 16-bit halves de-interleaved) or PairSplat (one quad's
    halves, each in 4 elements) as an int32x4. armv7: vld2.16 (with duplication for a
    splat), whose two d registers make the q register: the shuffles of the plain form became
    element moves there (int8 ResNet-8 on rpi3: 13.9 M instructions). Elsewhere a load and a
    shuffle (aarch64: one tbl)."""
    buf, arg = fe.buffers[e.buffer.name]
    ptr = fe.b.gep(arg, [fe.expr(e.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
    splat = isinstance(e, PairSplat)
    halves = ir.VectorType(t.I16, 4)
    if fe.paired_loads:  # 32-bit Arm NEON (module.py)
        name = f"llvm.arm.neon.{'vld2dup' if splat else 'vld2'}.v4i16.p0"
        vld2 = fe.math.module.declare_intrinsic(
            name, fnty=ir.FunctionType(ir.LiteralStructType([halves, halves]), [t.PTR, t.I32]))
        pair = fe.b.call(vld2, [ptr, ir.Constant(t.I32, 1)])
        both = fe.b.shuffle_vector(fe.b.extract_value(pair, 0), fe.b.extract_value(pair, 1),
                                     _mask(list(range(8))))
    elif splat:
        quad = fe.b.load(ptr, typ=ir.VectorType(t.I16, 2), align=1)
        both = fe.b.shuffle_vector(quad, ir.Constant(quad.type, ir.Undefined), _mask([0] * 4 + [1] * 4))
    else:
        quads = fe.b.load(ptr, typ=ir.VectorType(t.I16, 8), align=1)
        both = fe.b.shuffle_vector(quads, ir.Constant(quads.type, ir.Undefined),
                                     _mask([0, 2, 4, 6, 1, 3, 5, 7]))
    return fe.b.bitcast(both, t.storage_type(e.dtype))

def pair_halves(fe: Emitter, e: PairHalvesLoad | PairHalvesSplat) -> ir.Value:
    """PairHalvesLoad (eight quads' 16-bit halves de-interleaved) or PairHalvesSplat (one
    or two quads' halves, each in 8 elements) as 16 or 32 int16: aarch64's ld2 / ld2r / ld4r
    .8h, whose registers the dot steps then read directly; elsewhere a load and a shuffle."""
    buf, arg = fe.buffers[e.buffer.name]
    ptr = fe.b.gep(arg, [fe.expr(e.index)], inbounds=True, source_etype=t.storage_type(buf.dtype))
    splat = isinstance(e, PairHalvesSplat)
    count = e.lanes // 2 if splat else 2  # the registers (halves of quads) it loads
    if fe.paired_loads:  # 32-bit Arm NEON: vld2.16 of four d registers, vld2.16 / vld4.16 to all lanes
        return arm_pair_halves(fe, ptr, splat, count)
    if fe.fn.module.triple.startswith("aarch64"):
        halves = ir.VectorType(t.I16, 8)
        ld = fe.math.module.declare_intrinsic(
            f"llvm.aarch64.neon.{f'ld{count}r' if splat else 'ld2'}.v8i16.p0",
            fnty=ir.FunctionType(ir.LiteralStructType([halves] * count), [t.PTR]))
        loaded = fe.b.call(ld, [ptr])
        parts = [fe.b.shuffle_vector(fe.b.extract_value(loaded, i), fe.b.extract_value(loaded, i + 1),
                                       _mask(list(range(16)))) for i in range(0, count, 2)]
        return parts[0] if count == 2 else fe.b.shuffle_vector(parts[0], parts[1], _mask(list(range(32))))
    if splat:
        quad = fe.b.load(ptr, typ=ir.VectorType(t.I16, count), align=1)
        return fe.b.shuffle_vector(quad, ir.Constant(quad.type, ir.Undefined),
                                     _mask([i for i in range(count) for _ in range(8)]))
    quads = fe.b.load(ptr, typ=ir.VectorType(t.I16, 16), align=1)
    return fe.b.shuffle_vector(quads, ir.Constant(quads.type, ir.Undefined),
                                 _mask(list(range(0, 16, 2)) + list(range(1, 16, 2))))

def arm_pair_halves(fe: Emitter, ptr: ir.Value, splat: bool, count: int) -> ir.Value:
    """pair_halves on 32-bit Arm NEON: eight quads by vld2.16 into two q registers; one or two
    splat weight quads by vld2.16 / vld4.16 to all lanes of d registers, each register's 4
    elements then doubled to 8, which the dot steps' halves read back as that d register."""
    halves = ir.VectorType(t.I16, 4 if splat else 8)
    name = f"llvm.arm.neon.vld{count}dup.v4i16.p0" if splat else "llvm.arm.neon.vld2.v8i16.p0"
    ld = fe.math.module.declare_intrinsic(
        name, fnty=ir.FunctionType(ir.LiteralStructType([halves] * count), [t.PTR, t.I32]))
    loaded = fe.b.call(ld, [ptr, ir.Constant(t.I32, 1)])
    registers = [fe.b.extract_value(loaded, i) for i in range(count)]
    if splat:
        registers = [fe.b.shuffle_vector(r, ir.Constant(halves, ir.Undefined), _mask(list(range(4)) * 2))
                     for r in registers]
    parts = [fe.b.shuffle_vector(registers[i], registers[i + 1], _mask(list(range(16))))
             for i in range(0, count, 2)]
    return parts[0] if count == 2 else fe.b.shuffle_vector(parts[0], parts[1], _mask(list(range(32))))

def pair_dot_add_values(fe: Emitter, acc: ir.Value, a: ir.Value, b: ir.Value, half: int = 0) -> ir.Value:
    """PairDotAdd: the bytes of a and b's first and second 16-bit halves (of four
    quads: the low and high 8 bytes; of eight, those of quads 4 * half to 4 * half + 3)
    multiplied as signed bytes, the two products of each byte position summed in 16 bits
    (smull, smlal: exact when b has no -128), those added pairwise into acc's int32 lanes
    (sadalp / vpadal.s16). Without NEON the same sums in int32."""
    count = a.type.count * a.type.element.width // 8
    as_bytes = ir.VectorType(t.I8, count)
    sa, sb = fe.b.bitcast(a, as_bytes), fe.b.bitcast(b, as_bytes)
    undef = ir.Constant(as_bytes, ir.Undefined)
    first, second = 8 * half, count // 2 + 8 * half
    low, high = _mask(list(range(first, first + 8))), _mask(list(range(second, second + 8)))
    neon = neon_pairwise_add(fe)
    wide = ir.VectorType(t.I16 if neon else t.I32, 8)

    def product(mask: ir.Constant) -> ir.Value:
        return fe.b.mul(fe.b.sext(fe.b.shuffle_vector(sa, undef, mask), wide),
                          fe.b.sext(fe.b.shuffle_vector(sb, undef, mask), wide))

    sums = fe.b.add(product(low), product(high))
    if fe.paired_loads:  # armv7: vpadal.s16 itself (the add of vpaddl.s16 stayed apart)
        accumulate = fe.math.declared("llvm.arm.neon.vpadals.v4i32.v8i16", acc.type, [acc.type, sums.type])
        return fe.b.call(accumulate, [acc, sums])
    if neon is not None:
        widening = fe.math.declared(neon, acc.type, [sums.type])
        return fe.b.add(acc, fe.b.call(widening, [sums]))
    even = fe.b.shuffle_vector(sums, ir.Constant(wide, ir.Undefined), _mask([0, 2, 4, 6]))
    odd = fe.b.shuffle_vector(sums, ir.Constant(wide, ir.Undefined), _mask([1, 3, 5, 7]))
    return fe.b.add(acc, fe.b.add(even, odd))

def neon_dot(fe: Emitter, acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """acc + per lane the dot product of a's four bytes (unsigned) and b's (signed), as aarch64
    NEON computes it (runtime_c/aot_kernels.h AOT_I32X4_DOTADD): in 16-bit lanes, the even
    bytes' products and the odd bytes' (exact: |255 * -128| = 32640), each added pairwise
    into the int32 lanes (saddlp, or armv7's vpaddl.s16; LLVM folds each with its add into
    sadalp / vpadal.s16). LLVM lowered the
    plain form (products in int32, four shuffled adds) to smull and zip/uzp/trn shuffles:
    rpi4 int8 ResNet-8 ran 21.9 M instructions under qemu, 7.95 M with saddlp and addp."""
    halves = ir.VectorType(t.I16, 8)
    ua, sb = fe.b.bitcast(a, halves), fe.b.bitcast(b, halves)
    eight = ir.Constant(halves, 8)
    even = fe.b.mul(fe.b.and_(ua, ir.Constant(halves, 0xFF)), fe.b.ashr(fe.b.shl(sb, eight), eight))
    odd = fe.b.mul(fe.b.lshr(ua, eight), fe.b.ashr(sb, eight))
    widening = fe.math.declared(neon_pairwise_add(fe), acc.type, [halves])
    return fe.b.add(fe.b.add(acc, fe.b.call(widening, [even])), fe.b.call(widening, [odd]))


LLVM_BUILDERS: dict[str, Callable[..., ir.Value]] = {builder.__name__: builder for builder in (
    widen_load, extend_load, quad_load, quad_splat, dot_add, pair_order, pair_halves, pair_halves_part,
    pair_dot_add, tap_products, widen_add, lane_splat, vec_zip, round_even_lanes)}
