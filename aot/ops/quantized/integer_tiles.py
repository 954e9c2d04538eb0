"""The int8 register tile of QLinearConv and ConvInteger (group 1, constant weights): int32
accumulators for `channels` output channels x `vectors` x `lanes` pixels of one output row, each
step a dot product of four input channels (kernel IR DotAdd: x86's vpdpbusd, or an exact
sequence of the preset's instructions, aot/lowering/tiles.py int8_dot; on NEON with weights in
-127..127, PairDotAdd of signed bytes).

Pixels are the lanes, so a tile's outputs are contiguous runs of the NCHW output and its
requantisation (the existing exact one) is a loop the compilers vectorise, or on NEON (4 lanes)
the same expression applied to the accumulators in registers (stores_in_registers). The operands:

* the input is copied once into a quad image [n][row][channel / 4][column phase][column][4]
  bytes (int8 x as uint8 x + 128, integer_terms.unsigned_byte; for PairDotAdd signed bytes,
  uint8 x as x - 128, integer_terms.signed_byte), padded with x_zero_point: the
  four channels of a pixel are one int32 lane, and the pixels of an output row under one
  kernel tap are contiguous (columns are split by phase modulo the stride, so stride 2 reads
  contiguous quads too). The copy is 1x the input, not an im2col;
* the weights (w - w_zero_point, int8) are packed at compile time [channel block][kh][kw]
  [channel / 4][channels][4], each output channel's quad broadcast to every lane. Input
  channels past the last group of four get weight 0, so whatever the image holds there adds 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from aot.ir.graph import Node
from aot.kernel.intrinsics import (
    DotAdd,
    LaneSplat,
    PairDotAdd,
    PairHalvesLoad,
    PairHalvesPart,
    PairHalvesSplat,
    PairLoad,
    PairSplat,
    QuadLoad,
    QuadSplat,
)
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Load,
    Loop,
    Splat,
    Stmt,
    Store,
    Var,
    VecStore,
    const,
    lt,
)
from aot.kernel.vectorize import narrowed_store
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.integer_terms import ACCUMULATOR, PerIndex, signed_byte, unsigned_byte
from aot.ops.scratch import scratch_tensor

QUAD = 4  # input channels per int32 lane
Finish = Callable[[Expr, Expr], Expr]
StoreAt = Callable[[Expr, Expr, Expr, Expr, Expr], Stmt]  # (n, m, oh, ow, value)


@dataclass(frozen=True)
class TileShape:
    lanes: int      # pixels per int32 vector
    vectors: int    # vectors along the output row
    channels: int   # output channels

    @property
    def width(self) -> int:
        return self.lanes * self.vectors


@dataclass(frozen=True)
class Layout:
    """The quad image's geometry: rows and columns as padded, columns split by phase."""

    batch: int
    rows: int
    quads: int       # channel groups of four
    phases: int      # the column stride
    columns: int     # columns per phase

    @property
    def size(self) -> int:
        return self.batch * self.rows * self.quads * self.phases * self.columns * QUAD

    def at(self, n: Expr, row: Expr, quad: Expr, phase: int, column: Expr) -> Expr:
        """The byte offset of (n, row, quad, phase, column)'s first channel."""
        return ((((n * self.rows + row) * self.quads + quad) * self.phases + phase) * self.columns + column) * QUAD


def fits(weights: np.ndarray) -> bool:
    """Whether w - w_zero_point fits the signed bytes the dot-product instructions multiply."""
    return weights.size == 0 or (int(weights.min()) >= -128 and int(weights.max()) <= 127)


def fits_pairs(weights: np.ndarray) -> bool:
    """Whether w - w_zero_point fits PairDotAdd's weight bytes: signed, never -128 (the weights of
    onnxruntime.quantization's symmetric int8, -127..127), so two products of 16 bits sum
    exactly in 16 bits."""
    return weights.size == 0 or (int(weights.min()) >= -127 and int(weights.max()) <= 127)


def tile_shape(lanes: int, accumulators: int, out_w: int, out_channels: int) -> TileShape:
    """Vectors of `lanes` pixels (8 for rows of at most 8: no half-empty 16-lane vectors), two
    along the row where it is that wide (NEON's 4 lanes: up to four, 16 pixels), then as many
    channels as the accumulators allow."""
    if lanes > 8 and out_w <= 8:
        lanes = 8
    vectors = 2 if out_w > lanes else 1
    if vectors == 2 and lanes >= 8 and accumulators // 3 >= min(8, out_channels) and \
            _computed(out_w, 3 * lanes) < _computed(out_w, 2 * lanes):
        # three vectors where they waste fewer lanes: a 6x6 plane's 36 pixels as 48, not twice 32
        # (an overlapping last tile), a 48-pixel row as 48, not 64
        vectors = 3
    if lanes == 4:
        # gcc vectorises the epilogue's loop over a tile's 16 pixels, not over 8 ("not
        # worthwhile": its int8 stores fill 16-byte vectors): with 8, VWW's int8 C code ran
        # 10.7 M instructions, more than the portable loops' 9.49 M.
        vectors = min(4, -(-out_w // lanes))
    channels = max(1, min(out_channels, accumulators // vectors, 8))
    return TileShape(lanes, vectors, channels)


def _computed(out_w: int, width: int) -> int:
    """The pixels tiles `width` wide compute over a row of `out_w` (the last one a whole tile)."""
    return -(-out_w // width) * width


def packed_weights(weights: np.ndarray, channels: int) -> np.ndarray:
    """[M][C][kh][kw] (w - w_zero_point) as int8 [M/channels][kh][kw][C/4][channels][4], zero
    where M or C run past a multiple of the block."""
    m, c, k_h, k_w = weights.shape
    blocks, quads = -(-m // channels), -(-c // QUAD)
    padded = np.zeros((blocks * channels, quads * QUAD, k_h, k_w), np.int64)
    padded[:m, :c] = weights
    shaped = padded.reshape(blocks, channels, quads, QUAD, k_h, k_w)
    return np.ascontiguousarray(shaped.transpose(0, 4, 5, 2, 1, 3)).astype(np.int8)


def banded(g: ConvGeometry) -> bool:
    """Whether the quad image can hold one band of a tile's pixels at a time: 1x1 convolutions
    without padding (an output pixel reads one input pixel only), whose band is copied in just
    before the tiles over it. DS-CNN's int8 arena held a whole 8000-byte quad image beside the
    conv's input and output; ResNet-8's strided 1x1 shortcuts copied every input pixel, though
    they read one in four (12% of its int8 run for 3% of its multiply-adds)."""
    return (g.kernel == (1, 1) and tuple(g.pad_begin) == (0, 0)
            and tuple(g.padded_hw) == tuple(g.in_spatial))


def quad_image(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, fill: Expr,
               width: int) -> tuple[list[Stmt], Buffer, Layout]:
    """The quad image of the input (banded: of `width` columns of one row) and the statements
    that fill it with `fill` (x_zero_point, as uint8 for DotAdd, as int8 for PairDotAdd: the
    image's type); copy_rows and copy_band put the input's values in. `width` bytes of slack at
    the end cover the lanes a ragged last tile reads past a row."""
    hp, wp = g.padded_hw
    s_w = g.strides[1]
    batch, rows, phases, columns = (1, 1, 1, width) if banded(g) else (g.batch, hp, s_w, -(-wp // s_w))
    layout = Layout(batch, rows, -(-g.channels // QUAD), phases, columns)
    image = kb.output(scratch_tensor(ctx, node, (layout.size + width * QUAD,), np.dtype(fill.dtype), "quads")).buffer
    return kb.loops([image.size], lambda i: [Store(image, i[0], fill)], prefix="z"), image, layout


def copy_band(kb: KernelBuilder, x: View, g: ConvGeometry, image: Buffer, layout: Layout, n: Expr, row: Expr,
              col0: Expr, *, count: int) -> list[Stmt]:
    """The input pixels under output columns [col0, col0 + count) of output row `row` in image n
    copied into a banded quad image's columns [0, count)."""
    zero = const(0, INDEX)
    s_h, s_w = g.strides

    def copy(i: list[Expr], lanes: int = QUAD, quad_base: int = 0) -> list[Stmt]:
        quad, col = i[0] + quad_base, i[1]
        return [Store(image, layout.at(zero, zero, quad, 0, col) + j, _byte(
                    x.load([n, quad * QUAD + min(j, lanes - 1), row * s_h, (col0 + col) * s_w]), image.dtype))
                for j in range(QUAD)]

    return _quads(kb, [], g.channels, count, copy)


def _quads(kb: KernelBuilder, outer: list[int], channels: int, count: int,
           copy: Callable[..., list[Stmt]]) -> list[Stmt]:
    """`copy(index, lanes, quad_base)` over the loops `outer` x channel quads x `count` columns:
    the whole quads, then the channels past the last one as a quad of fewer lanes."""
    whole, rest = divmod(channels, QUAD)
    body = kb.loops([*outer, whole, count], copy, prefix="s") if whole else []
    if rest:
        body += kb.loops([*outer, 1, count], lambda i: copy(i, lanes=rest, quad_base=whole), prefix="s")
    return body


def _byte(value: Expr, dtype: str) -> Expr:
    """An input value as the quad image's byte (`dtype`): uint8 for DotAdd, int8 for PairDotAdd."""
    if dtype == "int8":
        return signed_byte(value)
    return value if value.dtype == "uint8" else unsigned_byte(value)


def copy_rows(kb: KernelBuilder, x: View, g: ConvGeometry, image: Buffer, layout: Layout) -> list[Stmt]:
    """The input ([n][c][h][w]) copied to its padded places in the quad image."""
    (in_h, in_w), (top, left), s_w = g.in_spatial, g.pad_begin, g.strides[1]
    body: list[Stmt] = []
    for phase in range(s_w):
        # padded columns q * s_w + phase that hold an input column (left <= col < left + in_w)
        first = max(0, -(-(left - phase) // s_w))
        last = (left + in_w - 1 - phase) // s_w
        if last < first:
            continue

        def copy(i: list[Expr], lanes: int = QUAD, quad_base: int = 0, phase: int = phase,
                 first: int = first) -> list[Stmt]:
            # A quad's bytes as statements of one loop body, not a loop of four: compilers then
            # vectorise along the columns, loading each channel's run and interleaving the four
            # (a byte at a time before: 40% of VWW's int8 8 -> 16 channel 1x1 conv). A last quad
            # of fewer channels repeats its last channel in the rest (whose weights are zero):
            # storing 3 bytes of 4, or a constant in the fourth, gcc wrote VWW's first layer's
            # image a byte at a time.
            n, r, q, col = i
            quad = q + quad_base
            column = col + first
            return [Store(image, layout.at(n, r + top, quad, phase, column) + j, _byte(
                        x.load([n, quad * QUAD + min(j, lanes - 1), r, column * s_w + phase - left]), image.dtype))
                    for j in range(QUAD)]

        body += _quads(kb, [g.batch, in_h], g.channels, last - first + 1, copy)
    return body


def tiled_conv(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: View,
               weights: np.ndarray, fill: Expr, init: PerIndex, *, finish: Finish, store: StoreAt,
               lanes: int, accumulators: int, overlap: bool) -> list[Stmt]:
    """The convolution (geometry `g`, planar, group 1) as int8 tiles: the quad image, then per
    (n, output row, channel block) the full tiles along the row and a last one, narrower, or
    when `overlap` (storing an output twice is harmless: the epilogue reads no other tensor,
    which the output could share memory with) as wide, ending at the row's end."""
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = g.kernel, g.strides, g.dilations
    (out_h, out_w), m_count = g.out_spatial, g.out_channels
    shape = tile_shape(lanes, accumulators, out_w, m_count)
    fills, image, layout = quad_image(node, ctx, kb, g, fill, shape.width)
    signed = image.dtype == "int8"  # (fill's type decides): sdot's DotAdd, or NEON's PairDotAdd
    pairs = signed and ctx.tiles.int8_dot.pairwise
    halves = pairs and pair_halves(ctx)
    by_lane = signed and ctx.tiles.int8_dot.by_lane and shape.lanes == 4
    band = banded(g)
    packed = kb.input(ctx.constant(packed_weights(weights, shape.channels), f"{node.name}_tiles")).buffer
    blocks = -(-m_count // shape.channels)
    @cache
    def scratch() -> Buffer:
        """The sums of a tile whose epilogue has no vector form: made on first use, then shared."""
        return kb.output(scratch_tensor(ctx, node, (shape.channels * shape.width,), np.int32, "tile")).buffer

    def tile(n: Expr, oh: Expr, block: Expr, ow0: Expr, pixels: int, column: Expr) -> list[Stmt]:
        """Output pixels [ow0, ow0 + pixels) of row oh, read from the image's `column` on."""
        vectors = -(-pixels // shape.lanes)
        accs = [[kb.var("acc", f"int32x{shape.lanes}") for _ in range(vectors)] for _ in range(shape.channels)]
        first = block * shape.channels
        # The sums start from their channel's bias (one broadcast per channel, where adding it in
        # the epilogue took a broadcast and an add per vector), except in a ragged last block,
        # whose channels past m_count have no bias to read.
        start = (lambda m: init(m)) if m_count % shape.channels == 0 else (lambda m: const(0, ACCUMULATOR))
        body: list[Stmt] = [Declare(a, Splat(start(first + c), shape.lanes))
                            for c, row in enumerate(accs) for a in row]
        rest = (lambda m: const(0, ACCUMULATOR)) if m_count % shape.channels == 0 else init

        def step(kh: Expr, kw: int, quad: Expr) -> list[Stmt]:
            image_n, row = (const(0, INDEX), kh) if band else (n, oh * s_h + kh * d_h)
            shift, phase = divmod(kw * d_w, s_w)  # the padded column (ow + shift) * s_w + phase
            at = (((block * k_h + kh) * k_w + kw) * layout.quads + quad) * shape.channels
            if halves and vectors > 1:
                return pair_halves_step(kb, accs, image, packed, lambda v: layout.at(
                    image_n, row, quad, phase, column + (v * shape.lanes + shift)), lambda c: (at + c) * QUAD)
            load = PairLoad if pairs else QuadLoad
            operands = [load(image, layout.at(image_n, row, quad, phase, column + (v * shape.lanes + shift)),
                             shape.lanes * QUAD) for v in range(vectors)]
            out: list[Stmt] = []
            for c, row_accs in enumerate(accs):
                if pairs:
                    w: Expr = PairSplat(packed, (at + c) * QUAD, QUAD)
                    out += [Assign(a, PairDotAdd(a, operand, w)) for a, operand in zip(row_accs, operands)]
                else:
                    w = weight_quad(packed, at, c, shape, by_lane)
                    out += [Assign(a, DotAdd(a, operand, w, signed)) for a, operand in zip(row_accs, operands)]
            return out

        body += unrolled_taps(kb, k_h, k_w, layout.quads, step)
        # Requantised in registers (armv7 vectorises no float loop by itself, and over 8-pixel rows
        # gcc leaves x86's loop scalar: `python -m benchmarks.int8` on ResNet-8), else by a loop
        # over stored sums.
        store_at = lambda m, p, value: store(n, m, oh, ow0 + p, value)  # noqa: E731
        stored = stores_in_registers(accs, first, shape.lanes, pixels, m_count, rest, finish, store_at)
        return body + (stored if stored is not None else requantised_by_loop(
            kb, accs, scratch(), shape, first, m_count, pixels, rest, finish=finish, store_at=store_at))

    def pieces(piece: Callable[[Expr, int], list[Stmt]]) -> list[Stmt]:
        return along_row(kb, out_w, shape.width, overlap, piece)

    if band:  # each band of pixels copied in just before the tiles over it, of every block
        def band_tiles(n: Expr, oh: Expr, ow0: Expr, pixels: int) -> list[Stmt]:
            return copy_band(kb, x, g, image, layout, n, oh, ow0, count=pixels) + kb.loops(
                [blocks], lambda b: tile(n, oh, b[0], ow0, pixels, const(0, INDEX)), prefix="t")

        return fills + kb.loops([g.batch, out_h], lambda i: pieces(
            lambda ow0, pixels: band_tiles(i[0], i[1], ow0, pixels)), prefix="r")
    return fills + copy_rows(kb, x, g, image, layout) + kb.loops([g.batch, out_h, blocks], lambda i: pieces(
        lambda ow0, pixels: tile(i[0], i[1], i[2], ow0, pixels, ow0)), prefix="t")


def weight_quad(packed: Buffer, at: Expr, channel: int, shape: TileShape, by_lane: bool) -> Expr:
    """Channel `channel`'s weight quad (at (at + channel) * 4 in `packed`) in every lane: where
    `by_lane` (sdot's 4 lanes) and the tile's channels fill the group of four it is in, a lane of
    the group's one 16-byte load (sdot by element, `sdot v.4s, v.16b, v.4b[i]`, where each quad
    would take a load and a dup; `python -m benchmarks.arm --targets rpi5`), else a splat."""
    first = channel - channel % 4
    if by_lane and first + 4 <= shape.channels:
        return LaneSplat(QuadLoad(packed, (at + first) * QUAD, 4 * QUAD), channel - first)
    return QuadSplat(packed, (at + channel) * QUAD, QUAD, shape.lanes)


def pair_halves(ctx: LoweringContext) -> bool:
    """Whether NEON's PairDotAdds read eight-quad operands (PairHalvesLoad, PairHalvesSplat): on
    aarch64 ld2 and ld2r / ld4r load them, against a load and a tbl per four-quad operand; on
    armv7 vld2.16 of four d registers and vld2.16 / vld4.16 to all lanes, half the loads and
    their address arithmetic (`python -m benchmarks.arm` on the int8 DS-CNN and ResNet-8)."""
    return ctx.tiles.int8_dot.pairwise


def pair_halves_step(kb: KernelBuilder, accs: list[list[Var]], pixels: Buffer, weights: Buffer,
                     pixels_at: Callable[[int], Expr], weight_at: Callable[[int], Expr]) -> list[Stmt]:
    """One step of PairDotAdds (accs[channel][vector] of 4 lanes, at least two vectors) over
    eight-quad operands: vectors 2i and 2i + 1 from one PairHalvesLoad at pixels_at(2i), an odd
    last vector as the high half of the load one vector before it (bytes the tile reads anyway);
    the weight quads of channels 2j and 2j + 1 (at weight_at(2j), adjacent) in one two-quad
    PairHalvesSplat, each then a PairHalvesPart of it (ld4r: one load and one address for two
    channels, where ld2r, which takes no offset, took an add and a load for each)."""
    vectors, channels = len(accs[0]), len(accs)
    body: list[Stmt] = []
    operands: list[tuple[Var, int]] = []
    for v in range(0, vectors, 2):
        first = min(v, vectors - 2)
        loaded = kb.var("pixels", "int16x16")
        body.append(Declare(loaded, PairHalvesLoad(pixels, pixels_at(first), 8 * QUAD)))
        operands += [(loaded, u - first) for u in range(v, min(v + 2, vectors))]
    for c in range(0, channels, 2):
        quads = min(2, channels - c)
        weight = kb.var("weights", "int16x32" if quads == 2 else "int16x16")
        body.append(Declare(weight, PairHalvesSplat(weights, weight_at(c), quads * QUAD)))
        for part in range(quads):
            quad: Expr = PairHalvesPart(weight, part) if quads == 2 else weight
            body += [Assign(a, PairDotAdd(a, loaded, quad, half))
                     for a, (loaded, half) in zip(accs[c + part], operands)]
    return body


def stores_in_registers(accs: list[list[Var]], first_channel: Expr, lanes: int, pixels: int, m_count: int,
                        init: PerIndex, finish: Finish,
                        store_at: Callable[[Expr, Expr, Expr], Stmt]) -> list[Stmt] | None:
    """Each accumulator vector (`accs[c][v]`: channel first_channel + c, pixels from v * lanes)
    requantised and stored as `lanes` bytes (NarrowStore), the last one's first pixels only when
    the tile's `pixels` end inside it (x86's 8 and 16 lanes), where the output's store
    (`store_at(m, pixel, value)`) has a lane-wise form: consecutive elements, a float value
    converted to int8 or uint8 (kernel/vectorize.lanewise). None where it has not: the caller
    keeps the scalar loop. Channels past `m_count` (a ragged last block) store nothing."""
    if pixels % lanes and lanes < 8:
        return None
    probe = Var("probe", ACCUMULATOR)
    out: list[Stmt] = []
    for c, row in enumerate(accs):
        m = first_channel + c
        value = finish(probe + init(m), m)
        stores: list[Stmt] = []
        for v, acc in enumerate(row):
            first, second = (store_at(m, const(v * lanes + k, INDEX), value) for k in (0, 1))
            stored = narrowed_store(first, second, lanes, probe, acc)
            if stored is None:
                return None
            count = pixels - v * lanes
            stores.append(stored if count >= lanes else replace(stored, count=count))
        out += stores if m_count % len(accs) == 0 else [If(lt(m, const(m_count, INDEX)), stores)]
    return out


def requantised_by_loop(kb: KernelBuilder, accs: list[list[Var]], sums: Buffer, shape: TileShape,
                        first_channel: Expr, m_count: int, pixels: int, init: PerIndex, *, finish: Finish,
                        store_at: Callable[[Expr, Expr, Expr], Stmt]) -> list[Stmt]:
    """The tile's sums stored to `sums`, then a loop over its channels and `pixels` that
    requantises each (`finish`) and stores it (`store_at(m, pixel, value)`); the channels past
    `m_count` (a ragged last block) store nothing."""
    body: list[Stmt] = [VecStore(sums, const((c * shape.vectors + v) * shape.lanes, INDEX), a)
                        for c, row in enumerate(accs) for v, a in enumerate(row)]

    def output(i: list[Expr]) -> list[Stmt]:
        c, p = i
        m = first_channel + c
        return [store_at(m, p, finish(Load(sums, c * shape.width + p) + init(m), m))]

    if m_count % shape.channels == 0:
        return body + kb.loops([shape.channels, pixels], output, prefix="q")

    def guarded(i: list[Expr]) -> list[Stmt]:
        c = i[0]
        return [If(lt(first_channel + c, const(m_count, INDEX)),
                   kb.loops([pixels], lambda p: output([c, p[0]]), prefix="q"))]

    return body + kb.loops([shape.channels], guarded, prefix="c")


def along_row(kb: KernelBuilder, out_w: int, width: int, overlap: bool,
              piece: Callable[[Expr, int], list[Stmt]]) -> list[Stmt]:
    """`piece(ow0, pixels)` over an output row: the full tiles, then a last one, narrower, or
    when `overlap` (storing an output twice is harmless) as wide, ending at the row's end (a
    tail of 24 of 32 pixels took 12% of a 3x3 conv's time: as wide, its outputs are one loop
    the compilers vectorise whole)."""
    full, tail = divmod(out_w, width)
    out = kb.loops([full], lambda b: piece(b[0] * width, width), prefix="b") if full else []
    if tail and full and overlap:
        out += piece(const(out_w - width, INDEX), width)
    elif tail:
        out += piece(const(full * width, INDEX), tail)
    return out


def unrolled_taps(kb: KernelBuilder, k_h: int, k_w: int, quads: int,
                  step: Callable[[Expr, int, Expr], list[Stmt]]) -> list[Stmt]:
    """The reduction loops (kh, channel quad) once per kernel column, a constant: its column
    phase is then known at compile time."""
    out: list[Stmt] = []
    for kw in range(k_w):
        kh, quad = kb.var("kh"), kb.var("k4")
        out.append(Loop(kh, k_h, [Loop(quad, quads, step(kh, kw, quad))]))
    return out
