"""The flat depthwise form: each plane as one long row, per chunk of output rows, one padded plane
copied at a time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    INDEX,
    Buffer,
    Expr,
    Load,
    Stmt,
    Store,
    Var,
    VecLoad,
    cast,
    const,
)
from aot.kernel.vectorize import narrowed_store
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.operands import EXACT_FLOAT_TAPS, Finish, IntegerConv, filled, sums_in_float
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    PerIndex,
    channel_locals,
    tap_pair_vectors,
    tap_sum,
)
from aot.ops.quantized.integer_tiles import fits_pairs
from aot.ops.scratch import scratch_tensor

# Values of one chunk of a flat depthwise plane (flat_depthwise), at most: 8 KiB of int32, in L1.
FLAT_DEPTHWISE_SUMS = 2048
# A flat depthwise loop runs over a multiple of this many pixels (the extra ones read the
# planes' slack and are discarded): a remainder is scalar code, and DS-CNN's 175-pixel planes
# left 15 pixels per channel to scalar requantisation.
FLAT_DEPTHWISE_STEP = 32
# Pixels per vector of armv7's depthwise tap pairs (integer_terms.tap_pair_vectors): a d register.
TAP_PAIR_LANES = 8



def _channel_plane(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry, fill: Expr,
                   slack: int | None) -> tuple[View, list[Stmt], Callable[[Expr, Expr], tuple[list[Stmt], list[Expr]]]]:
    """padded_planes one plane at a time: a scratch of one padded plane (and `slack` elements after
    it), the statements that fill it with `fill` once (the padding and the slack keep it: each
    channel's copy writes the inside only), and for image n and channel c the statements that
    copy that plane in, with the index prefix of the plane in the view; the input itself,
    uncopied, when the convolution neither pads nor needs slack. One plane, not the whole padded
    image: DS-CNN's int8 arena held 12 KB of padded planes at once."""
    (in_h, in_w), (top, left) = g.in_spatial, g.pad_begin
    src = View(kb.input(x).buffer, (g.batch, g.channels, in_h, in_w))
    if not g.padded and slack is None:
        return src, [], lambda n, c: ([], [n, c])
    hp, wp = g.padded_hw
    plane = View(kb.output(scratch_tensor(ctx, node, (hp * wp + (slack or 0),), x.dtype, "padded")).buffer,
                 (1, 1, hp, wp))
    zero = const(0, INDEX)

    def copy(n: Expr, c: Expr) -> tuple[list[Stmt], list[Expr]]:
        rows = kb.loops([in_h, in_w], lambda i: [plane.store([zero, zero, i[0] + top, i[1] + left],
                                                             src.load([n, c, i[0], i[1]]))], prefix="s")
        return rows, [zero, zero]

    return plane, filled(kb, plane.buffer, fill), copy


def flat_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor, x_zp: Expr,
                    weights: Buffer, init: PerIndex, *, finish: Finish,
                    store: Callable[[Expr, Expr, Expr, Expr, Expr], Stmt], pairs: bool = False) -> list[Stmt]:
    """depthwise_conv over each plane as one long row, per chunk of output rows: the chunk's input
    rows are copied from the padded planes to float32 "phase planes" (PhasePlanes), where tap (kh, kw) of output pixel p
    (row p / width, column p % width) is at p + a constant, so the whole chunk is one vector loop
    per tap, including the columns past each output row and the pixels up to a whole
    FLAT_DEPTHWISE_STEP, whose results are discarded. The finished values (requantised) go to a
    scratch row, and a second loop stores the real pixels, so that small planes (DS-CNN's 25x5)
    do not run as short loops nor strided convs (VWW's) as strided loads.

    On x86 the phase planes hold floats and the taps are summed in float32: every product and
    partial sum is an integer below 2**24 (EXACT_FLOAT_TAPS), so the sum is the int32 one
    exactly, and a vector of floats takes one multiply-add per tap where int8 lanes took a
    widening, a 32-bit multiply and an add (`python -m benchmarks.int8` on DS-CNN)."""
    assert g.kernel[0] * g.kernel[1] <= EXACT_FLOAT_TAPS
    per_group = g.out_channels // g.groups
    out_h, out_w = g.out_spatial
    phases = PhasePlanes(g)
    rows = max(1, min(out_h, FLAT_DEPTHWISE_SUMS // phases.width))  # output rows per chunk
    span = _whole_steps(rows * phases.width)
    in_vectors = _hand_vectorised(ctx)
    scratch = _flat_scratch(node, ctx, kb, x, g, x_zp, phases, span=span, pairs=pairs,
                            dtype=finish(const(0, ACCUMULATOR), const(0, INDEX)).dtype)
    in_float = scratch.in_float

    def chunk(n: Expr, m: Expr, at: list[Expr], locals_: list[Var], start: Var, row0: Expr,
              count: int) -> list[Stmt]:
        base, read, copies = _chunk_source(kb, scratch, phases, at, row0, count)

        def taps(at: Expr, lanes: int = 1) -> list[Expr]:
            """Pixel `at`'s taps (Loads), or those of `lanes` pixels from it (VecLoads: armv7's pairs)."""
            starts = [base + at + phases.used.index(phase) * scratch.plane + offset for phase, offset in phases.taps]
            return [Load(read, i) if lanes == 1 else VecLoad(read, i, lanes) for i in starts]

        def output(i: list[Expr]) -> list[Stmt]:
            oh, ow = i
            return [store(n, m, row0 + oh, ow, Load(scratch.finished, oh * phases.width + ow))]

        summed = lambda i: tap_sum(taps(i[0]), locals_, start, in_float, pairs)  # noqa: E731
        in_pairs = lambda at: tap_pair_vectors(kb, taps(at, TAP_PAIR_LANES), locals_, start, scratch.sums, at)  # noqa: E731

        computed = _finished_pixels(kb, _whole_steps(count * phases.width), summed, lambda value: finish(value, m),
                                    scratch.finished, scratch.sums, in_vectors,
                                    in_pairs if in_vectors and pairs else None)
        return copies + computed + kb.loops([count, out_w], output, prefix="q")

    def channel(n: Expr, m: Expr, at: list[Expr]) -> list[Stmt]:
        body, locals_, start = channel_locals(kb, weights, init, m, len(phases.taps),
                                               "float32" if in_float else "int8" if pairs else ACCUMULATOR)
        return body + blocks(kb, out_h, rows, lambda row0, count: chunk(n, m, at, locals_, start, row0, count), "c")

    def group_planes(idx: list[Expr]) -> list[Stmt]:
        n, group = idx
        copy, at = scratch.plane_copy(n, group)
        return copy + kb.loops([per_group], lambda j: channel(n, group * per_group + j[0], at), prefix="j")

    return scratch.setup + kb.loops([g.batch, g.groups], group_planes)


@dataclass(frozen=True)
class _FlatScratch:
    """flat_depthwise's scratch: the chunk's `finished` values; the padded `planes` (or the input
    itself) and `plane_copy`, which fills them per image and channel; the phase planes `floats`,
    each `plane` elements (None when the sums read `planes` directly); the split `sums` (or None);
    and the `setup` that runs before the loops (the fills). `in_float`: the sums are float32."""

    finished: Buffer
    planes: View
    plane_copy: Callable[[Expr, Expr], tuple[list[Stmt], list[Expr]]]
    floats: Buffer | None
    plane: int
    sums: Buffer | None
    setup: list[Stmt]
    in_float: bool


def _chunk_source(kb: KernelBuilder, scratch: _FlatScratch, phases: PhasePlanes, at: list[Expr], row0: Expr,
                  count: int) -> tuple[Expr, Buffer, list[Stmt]]:
    """Where the taps of a chunk of `count` output rows from row0 (of the plane `at`) read: the
    index of its first pixel, the buffer, and the copies that fill it (into the phase planes)."""
    planes, floats = scratch.planes, scratch.floats
    if floats is None:
        return planes.index([*at, row0, const(0, INDEX)]), planes.buffer, []
    copies = [stmt for k, phase in enumerate(phases.used)
              for stmt in phases.copy(kb, planes, *at, row0, count, phase, floats, base=k * scratch.plane)]
    return const(0, INDEX), floats, copies


def _flat_scratch(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry, x_zp: Expr,
                  phases: PhasePlanes, *, span: int, pairs: bool, dtype: str) -> _FlatScratch:
    """The scratch of flat_depthwise's chunks of `span` pixels, whose finished values are `dtype`."""
    finished = kb.output(scratch_tensor(ctx, node, (span,), np.dtype(dtype), "finished")).buffer
    plane = span + phases.reach
    # Float sums where int8 lanes need a widening and a 32-bit multiply per tap (x86); the ARM
    # targets keep integer planes: their compilers' widening multiply-adds (smlal) ran fewer
    # instructions under qemu than the float form (LLVM, DS-CNN rpi4: 2.77M against 3.13M).
    in_float = sums_in_float(ctx.tiles)
    # Integer sums at unit stride read the padded planes themselves (the single phase), past
    # whose end a slack of the zero point covers the last chunk's discarded pixels.
    direct = not in_float and g.strides == (1, 1)
    slack = (g.kernel[1] - 1) * g.dilations[1] + FLAT_DEPTHWISE_STEP - 1
    planes, fills, plane_copy = _channel_plane(node, ctx, kb, x, g, x_zp, slack if direct else None)
    element = "float32" if in_float else x.dtype.name
    floats = None if direct else kb.output(scratch_tensor(ctx, node, (len(phases.used) * plane,), np.dtype(element),
                                                          "phase_planes")).buffer
    sums = kb.output(scratch_tensor(ctx, node, (span,), np.dtype(ACCUMULATOR), "sums")).buffer \
        if _split_sums(ctx, pairs) else None
    # Positions no chunk writes (past a phase's last column or row) feed discarded sums only;
    # zeroed once, they are finite numbers whatever ran before.
    zero = [] if floats is None else kb.loops([floats.size], lambda i: [Store(floats, i[0], const(0, element))],
                                              prefix="z")
    return _FlatScratch(finished, planes, plane_copy, floats, plane, sums, fills + zero, in_float)


@dataclass(frozen=True)
class PhasePlanes:
    """The padded input plane split by stride phase: phase (ph, pw) holds the padded pixels
    (s_h * r + ph, s_w * c + pw) at [r][c], rows `width` long. Output pixel (oh, ow) reads tap
    (kh, kw) in phase ((kh * d_h) % s_h, (kw * d_w) % s_w) at row oh + (kh * d_h) // s_h, column
    ow + (kw * d_w) // s_w: at a constant offset from oh * width + ow. Unit stride: one phase,
    the padded plane itself."""

    g: ConvGeometry

    @property
    def width(self) -> int:
        return -(-self.g.padded_hw[1] // self.g.strides[1])

    @property
    def taps(self) -> list[tuple[tuple[int, int], int]]:
        """(phase, offset in the phase's plane) of each tap, in the weights' order."""
        (k_h, k_w), (s_h, s_w), (d_h, d_w) = self.g.kernel, self.g.strides, self.g.dilations
        return [(((kh * d_h) % s_h, (kw * d_w) % s_w), (kh * d_h) // s_h * self.width + (kw * d_w) // s_w)
                for kh in range(k_h) for kw in range(k_w)]

    @property
    def used(self) -> list[tuple[int, int]]:
        return sorted({phase for phase, _ in self.taps})

    @property
    def reach(self) -> int:
        return max(offset for _, offset in self.taps)

    def extent(self, phase: tuple[int, int]) -> tuple[int, int]:
        """(rows past a chunk's output rows, columns) of `phase` that some output reads."""
        offsets = [offset for p, offset in self.taps if p == phase]
        return max(offsets) // self.width, self.g.out_spatial[1] + max(o % self.width for o in offsets)

    def copy(self, kb: KernelBuilder, planes: View, n: Expr, c: Expr, row0: Expr, count: int,
             phase: tuple[int, int], floats: Buffer, *, base: int) -> list[Stmt]:
        """`phase`'s rows that output rows row0 .. row0 + count - 1 read, as floats at `base`,
        from the padded planes ([n][c][row][column]): with unit stride one run of whole rows."""
        (ph, pw), (s_h, s_w) = phase, self.g.strides
        extra, columns = self.extent(phase)
        start = planes.index([n, c, row0 * s_h + ph, const(pw, INDEX)])
        if (s_h, s_w) == (1, 1) and columns == self.width:
            return kb.loops([(count + extra) * self.width], lambda i: [Store(floats, base + i[0], cast(
                Load(planes.buffer, start + i[0]), floats.dtype))], prefix="f")
        row_step = s_h * self.g.padded_hw[1]
        return kb.loops([count + extra, columns], lambda i: [Store(floats, base + i[0] * self.width + i[1], cast(
            Load(planes.buffer, start + i[0] * row_step + i[1] * s_w), floats.dtype))], prefix="f")


def _finished_pixels(kb: KernelBuilder, extent: int, summed: Callable[[list[Expr]], Expr],
                     finish_at: Callable[[Expr], Expr], finished: Buffer, sums: Buffer | None,
                     in_vectors: bool, summed_in_vectors: Callable[[Expr], list[Stmt]] | None = None) -> list[Stmt]:
    """The loop over pixels [0, extent) that stores each one's tap sum (`summed`) requantised
    (`finish_at`) into `finished`: as vectors of 4 pixels where `in_vectors`, and with a `sums`
    row (_split_sums) the sums first, in a loop of their own, written as vectors of
    TAP_PAIR_LANES pixels by `summed_in_vectors` where given."""
    def pixel(i: list[Expr]) -> list[Stmt]:
        return [Store(finished, i[0], finish_at(summed(i)))]

    if sums is not None:
        requantised = _pixels_in_vectors(kb, extent, lambda i: [Store(finished, i[0], finish_at(Load(sums, i[0])))])
        if requantised is not None:
            if summed_in_vectors is not None:
                return kb.loops([extent // TAP_PAIR_LANES], lambda i: summed_in_vectors(i[0] * TAP_PAIR_LANES),
                                prefix="p") + requantised
            return kb.loops([extent], lambda i: [Store(sums, i[0], summed(i))], prefix="p") + requantised
    vectors = _pixels_in_vectors(kb, extent, pixel) if in_vectors else None
    return vectors or kb.loops([extent], pixel, prefix="p")


def _split_sums(ctx: LoweringContext, pairs: bool) -> bool:
    """Whether flat_depthwise sums its taps in a loop of their own before requantising. Where
    the compilers vectorise no float loop (armv7 NEON), the requantisation is written as vectors
    of 4 pixels (_hand_vectorised), after the sums of a row: with tap pairs (`pairs`) written out as
    vectors of 8 pixels (integer_terms.tap_pair_vectors: vmull.s8, vmlal.s8, vaddw.s16 by
    weights in d registers), where gcc's own vectors of 16 keep each weight in a q register and
    spill them and LLVM's go through the stack; else the integer loop gcc (vectorises_loops)
    vectorises itself; LLVM's sums stay in the vectors of 4. aarch64's compilers vectorise the
    whole loop themselves, in fewer instructions than vectors written out. `python -m
    benchmarks.arm --targets rpi3 rpi4` on the int8 DS-CNN and VWW counts each form."""
    return _hand_vectorised(ctx) and (pairs or ctx.tiles.vectorises_loops)


def _hand_vectorised(ctx: LoweringContext) -> bool:
    """Whether flat_depthwise writes its loop as vectors of 4 pixels: a pairwise int8 step on a
    target whose compilers vectorise no float loop (armv7 NEON)."""
    return ctx.tiles.int8_dot.pairwise and not ctx.tiles.compilers_vectorise_floats


def tap_pairs(ctx: LoweringContext, conv: IntegerConv, weights: np.ndarray) -> bool:
    """Whether flat_depthwise's integer sums add two taps' products in int16 first
    (integer_terms.tap_sum, tap_pair_vectors): int8 input, no weight -128, integer sums (Arm)."""
    return conv.x.dtype == np.int8 and fits_pairs(weights) and not sums_in_float(ctx.tiles)


class _NoVectorForm(Exception):
    """A pixel's store has no lane-wise form."""


def _pixels_in_vectors(kb: KernelBuilder, extent: int, pixel: Callable[[list[Expr]], list[Stmt]],
                       lanes: int = 4) -> list[Stmt] | None:
    """The loop `pixel(i)` over [0, extent) (a multiple of `lanes`) as a loop over vectors of
    `lanes` pixels, each pixel's requantised int8 store one NarrowStore (kernel/vectorize), or
    None where the store has no such form."""
    def vector(i: list[Expr]) -> list[Stmt]:
        first, second = pixel([i[0] * lanes]), pixel([i[0] * lanes + 1])
        stored = narrowed_store(first[0], second[0], lanes) if len(first) == len(second) == 1 else None
        if stored is None:
            raise _NoVectorForm
        return [stored]

    try:
        return kb.loops([extent // lanes], vector, prefix="p")
    except _NoVectorForm:
        return None


def _whole_steps(count: int) -> int:
    """`count` rounded up to whole FLAT_DEPTHWISE_STEPs."""
    return -(-count // FLAT_DEPTHWISE_STEP) * FLAT_DEPTHWISE_STEP

