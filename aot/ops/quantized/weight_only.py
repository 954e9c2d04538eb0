"""com.microsoft MatMulNBits: a float product whose weights stay 4-bit or 8-bit in the package.

Y[..., n] = sum_k A[..., k] * (u[k, n] - z[k / block, n]) * s[k / block, n] (+ bias[n]), the codes
u, scales s and zero points z as aot/ops/quantized/weight_only_pack.py packs them. The
passes turn a DequantizeLinear of constant int4/int8 weights read by MatMul or Gemm into this op
too (aot/passes/quantized_ops.py), so both keep their quantised bytes.

The codes, scales and zero points are stored as column panels of the register tiles' width
(aot/ops/gemm.py's pack_column_panels). For each panel the kernel dequantises its K rows into a
float scratch panel (a loop along the panel's contiguous columns: load bytes, take the nibble,
convert, subtract, scale), then runs Gemm's register tiles over it for every row of A: the
quantised weights are read once whatever the number of rows, and a prompt's many rows share
one dequantisation. (That kernel is serial: its one scratch panel is not per thread.)
accuracy_level is ignored: the products are float32, as at level 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Declare, Expr, Load, Loop, Stmt, Store, Var, binary, cast, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import parallel_blocks, pays
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.contraction.register_tiles import Reduction, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.gemm import pack_column_panels, packed_tile_shape
from aot.ops.quantized.tensor_params import MS_DOMAIN
from aot.ops.quantized.weight_only_pack import PackedWeight, from_matmul_nbits
from aot.ops.scratch import scratch_tensor

BITS = (4, 8)
# Up to this many rows of A (a decode step's one) take the streaming kernel, more the panels.
FEW_ROWS = 4
# Rows of K summed per pass over a row of Y in the streaming kernel (even: whole bytes of 4 bits).
STEPS = 8
# Columns per parallel task of the streaming kernel (with threads only).
COLUMN_CHUNK = 256


def _constant(node: Node, index: int, what: str) -> np.ndarray | None:
    t = node.input(index)
    if t is None:
        return None
    if t.data is None:
        raise fail(node, f"{what} {t.name!r} must be a constant (an initializer)")
    return t.data


def packed_weight(node: Node) -> PackedWeight:
    """The node's weights checked against its attributes, packed for the kernel."""
    k, n = int(node.attr("K", 0)), int(node.attr("N", 0))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 0))
    if bits not in BITS:
        raise fail(node, f"bits={bits}: MatMulNBits is implemented for 4 and 8 bits")
    if block < 1 or block * bits % 8:
        raise fail(node, f"block_size={block}: must be a positive number of whole bytes of {bits}-bit values")
    if k <= 0 or n <= 0:
        raise fail(node, f"attributes K={k} and N={n} must be positive")
    if node.input(4) is not None:
        raise fail(node, "g_idx (act-order weights) is not supported; quantize without act_order")
    blocks, blob = -(-k // block), block * bits // 8
    b = _constant(node, 1, "B")
    scales = _constant(node, 2, "scales")
    zero = _constant(node, 3, "zero_points")
    assert b is not None and scales is not None  # required_input checked them
    if b.dtype != np.uint8 or b.size != n * blocks * blob:
        raise fail(node, f"B {list(b.shape)} {b.dtype}: expected uint8 [{n}, {blocks}, {blob}] for K={k}, N={n}, "
                         f"bits={bits}, block_size={block}")
    if scales.size != n * blocks or scales.dtype.kind != "f":
        raise fail(node, f"scales {list(scales.shape)} {scales.dtype}: expected {n * blocks} floats")
    zero_bytes = n * (-(-blocks * bits // 8))
    if zero is not None and zero.size != (zero_bytes if zero.dtype == np.uint8 else n * blocks):
        raise fail(node, f"zero_points {list(zero.shape)} {zero.dtype}: does not match N={n} and "
                         f"{blocks} blocks of {bits} bits")
    return from_matmul_nbits(b, scales, zero, k=k, n=n, bits=bits, block=block)


@register("MatMulNBits", domain=MS_DOMAIN)
def lower_matmul_nbits(node: Node, ctx: LoweringContext) -> None:
    a = required_input(node, 0, "A")
    required_input(node, 1, "B")
    required_input(node, 2, "scales")
    y = node.outputs[0]
    assert y is not None
    if a.dtype != np.float32:
        raise fail(node, f"A has dtype {a.dtype}: MatMulNBits is implemented for float32")
    weight = packed_weight(node)
    if a.rank < 1 or a.shape[-1] != weight.k:
        raise fail(node, f"A {list(a.shape)}: its last dimension must be K={weight.k}")
    m = int(np.prod(a.shape[:-1], dtype=np.int64))
    if y.shape != (*a.shape[:-1], weight.n):
        raise fail(node, f"output {list(y.shape)} does not match A {list(a.shape)} and N={weight.n}")
    bias = node.input(5)
    if bias is not None and bias.size != weight.n:
        raise fail(node, f"bias {list(bias.shape)}: expected {weight.n} values")
    _emit(node, ctx, a, weight, bias, m)


@dataclass(frozen=True)
class _Panels:
    """The packed weight's buffers in the kernel, each a run of column panels (pack_column_panels:
    panel j0 of width w starts at j0 * rows and holds [rows][w]), and the float scratch panel."""

    weight: PackedWeight
    codes: Buffer
    scales: Buffer
    zero: Buffer | None
    scratch: Buffer


def _emit(node: Node, ctx: LoweringContext, a: Tensor, weight: PackedWeight, bias: Tensor | None, m: int) -> None:
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    n, k = weight.n, weight.k
    av = View(kb.input(a).buffer, (m, k))
    yv = View(kb.output(final).buffer, (m, n))
    rows, cols = packed_tile_shape(node, ctx, m, n, (k, n)) if m > FEW_ROWS else (m, n)

    def stored(data: np.ndarray, what: str) -> Buffer:
        return kb.input(ctx.constant(pack_column_panels(data, cols), f"{node.name}_{what}")).buffer

    bias_view = View(kb.input(bias).buffer, (n,)) if bias is not None else None
    out_rows = final.shape[:-1]

    def finish(value: Expr, i: Expr, j: Expr) -> Expr:
        result = value + bias_view.load([j]) if bias_view is not None else value
        return epilogue.apply(result, [*_unflatten(i, out_rows), j])

    probe = Var("probe", "float32")
    needs_finish = finish(probe, const(0, INDEX), const(0, INDEX)) is not probe
    if m <= FEW_ROWS:
        ctx.emit(kb, _few_rows(kb, ctx, node, weight, av, yv, finish if needs_finish else None))
        return

    zero = stored(weight.zero, "zero_points") if isinstance(weight.zero, np.ndarray) else None
    scratch = kb.output(scratch_tensor(ctx, node, (k * cols,), np.float32, "weights")).buffer
    panels = _Panels(weight, stored(weight.codes, "codes"), stored(weight.scales, "scales"), zero, scratch)

    def column_block(j0: Expr, width: int) -> list[Stmt]:
        def row_block(i0: Expr, count: int) -> list[Stmt]:
            def tail(i: int, j: Expr, value: Expr) -> Expr:
                return finish(value, i0 + i, j0 + j)
            return register_tile(kb, "float32", ctx.tiles.lanes, count, width, Reduction((k,)),
                                 TileOperands(a_at=lambda i, kk: av.load([i0 + i, kk[0]]),
                                              b_base=lambda kk: (scratch, kk[0] * width)),
                                 TileOutput(init=[const(0.0, "float32")] * count, out=yv.buffer,
                                            out_at=lambda i, j: yv.index([i0 + i, j0]) + j,
                                            finish=tail if needs_finish else None))
        return _dequantize_panel(kb, panels, j0, width) + blocks(kb, m, rows, row_block, "i")

    ctx.emit(kb, blocks(kb, n, cols, column_block, "j"))


def _dequantize_panel(kb: KernelBuilder, panels: _Panels, j0: Expr, width: int) -> list[Stmt]:
    """scratch[r][j] = (u[r][j0 + j] - z) * s for the panel's K rows, block by block: the inner
    loop runs along the panel's contiguous columns (vector loads, converts, multiplies)."""
    weight = panels.weight
    code_rows = weight.codes.shape[0]

    def block(k0: Expr, count: int) -> list[Stmt]:
        b = binary("div", k0, const(weight.block, INDEX))
        j = kb.var("c")
        s = Load(panels.scales, j0 * weight.blocks + b * width + j)
        z: Expr = const(float(weight.zero), "float32") if panels.zero is None else \
            as_float(Load(panels.zero, j0 * weight.blocks + b * width + j))
        body: list[Stmt] = []
        if weight.bits == 8:
            r = kb.var("r")
            code = as_float(Load(panels.codes, j0 * code_rows + (k0 + r) * width + j))
            store = Store(panels.scratch, (k0 + r) * width + j, (code - z) * s)
            return [Loop(r, count, [Loop(j, width, [store])])]
        pair = kb.var("r")
        byte = Load(panels.codes, j0 * code_rows + (binary("div", k0, const(2, INDEX)) + pair) * width + j)
        for half in (0, 1):
            nibble = binary("bitand", binary("shr", byte, const(4 * half, "uint8")), const(15, "uint8"))
            row = k0 + pair * 2 + half
            body.append(Store(panels.scratch, row * width + j, (as_float(nibble) - z) * s))
        stmts: list[Stmt] = [Loop(pair, count // 2, [Loop(j, width, body)])] if count // 2 else []
        if count % 2:  # an odd K's last row: the low nibble of its byte
            last = kb.var("c")
            one = Load(panels.codes, j0 * code_rows + (binary("div", k0, const(2, INDEX)) + count // 2) * width + last)
            nibble = binary("bitand", one, const(15, "uint8"))
            z_last = z if panels.zero is None else as_float(Load(panels.zero, j0 * weight.blocks + b * width + last))
            s_last = Load(panels.scales, j0 * weight.blocks + b * width + last)
            stmts.append(Loop(last, width, [Store(panels.scratch, (k0 + count - 1) * width + last,
                                                  (as_float(nibble) - z_last) * s_last)]))
        return stmts

    return blocks(kb, weight.k, weight.block, block, "kb")


@dataclass(frozen=True)
class _Stream:
    """The streaming kernel's operands: the packed weight's buffers ([K][N] codes, [blocks][N]
    scales and zero points), A and Y as [rows, K] and [rows, N]."""

    weight: PackedWeight
    codes: Buffer
    scales: Buffer
    zero: Buffer | None
    av: View
    yv: View


def _few_rows(kb: KernelBuilder, ctx: LoweringContext, node: Node, weight: PackedWeight, av: View, yv: View,
              finish: Callable[[Expr, Expr, Expr], Expr] | None) -> list[Stmt]:
    """A decode step's product (a few rows of A): the codes [K][N] streamed once, row after row,
    each group of STEPS rows of one block summed as s * (sum_t a_t u_t - z sum_t a_t) into Y's
    rows along N, so that a weight costs a load, a convert and a multiply-add. With threads,
    runs of COLUMN_CHUNK columns are the parallel tasks."""
    n, m = weight.n, av.shape[0]
    zero = kb.input(ctx.constant(weight.zero, f"{node.name}_zero_points")).buffer \
        if isinstance(weight.zero, np.ndarray) else None
    stream = _Stream(weight, kb.input(ctx.constant(weight.codes, f"{node.name}_codes")).buffer,
                     kb.input(ctx.constant(weight.scales, f"{node.name}_scales")).buffer, zero, av, yv)
    rows = [const(i, INDEX) for i in range(m)]

    def columns(c0: Expr, width: int) -> list[Stmt]:
        j = kb.var("j")
        stmts: list[Stmt] = [Loop(j, width, [yv.store([i, c0 + j], const(0.0, "float32")) for i in rows])]

        def block(k0: Expr, count: int) -> list[Stmt]:
            b = binary("div", k0, const(weight.block, INDEX))
            return blocks(kb, count, STEPS, lambda g0, steps: _group(kb, stream, k0 + g0, steps, b, c0, width), "t")

        stmts += blocks(kb, weight.k, weight.block, block, "kb")
        if finish is not None:
            q = kb.var("q")
            stmts.append(Loop(q, width, [yv.store([i, c0 + q], finish(yv.load([i, c0 + q]), i, c0 + q)) for i in rows]))
        return stmts

    if pays(ctx, m * n * weight.k) and n > COLUMN_CHUNK:
        return parallel_blocks(kb, n, COLUMN_CHUNK, columns, "cc")
    return columns(const(0, INDEX), n)


def _group(kb: KernelBuilder, stream: _Stream, k0: Expr, count: int, b: Expr, c0: Expr, width: int) -> list[Stmt]:
    """Y[i][c0 + p] += s * (sum_t a_it u_tp - z sum_t a_it) for rows k0 .. k0 + count of block b."""
    weight, m, n = stream.weight, stream.av.shape[0], stream.weight.n
    a = [[kb.var("a", "float32") for _ in range(count)] for _ in range(m)]
    total = [kb.var("asum", "float32") for _ in range(m)]
    decls: list[Stmt] = [Declare(a[i][t], stream.av.load([const(i, INDEX), k0 + t]))
                         for i in range(m) for t in range(count)]
    for i in range(m):
        summed: Expr = a[i][0]
        for t in range(1, count):
            summed = summed + a[i][t]
        decls.append(Declare(total[i], summed))
    p = kb.var("p")
    column = c0 + p
    at = b * n + column
    s = kb.var("s", "float32")
    z = const(float(weight.zero), "float32") if stream.zero is None else as_float(Load(stream.zero, at))
    body: list[Stmt] = [Declare(s, Load(stream.scales, at))]
    u = [_code(stream.codes, weight, k0, t, n, column) for t in range(count)]
    for i in range(m):
        dot: Expr = a[i][0] * u[0]
        for t in range(1, count):
            dot = dot + a[i][t] * u[t]
        y = stream.yv.index([const(i, INDEX), column])
        body.append(Store(stream.yv.buffer, y, Load(stream.yv.buffer, y) + s * (dot - z * total[i])))
    return [*decls, Loop(p, width, body)]


def _code(codes: Buffer, weight: PackedWeight, k0: Expr, t: int, n: int, p: Expr) -> Expr:
    """Code u[k0 + t][p] as float; k0 is even (blocks and groups hold whole bytes of 4-bit codes)."""
    if weight.bits == 8:
        return as_float(Load(codes, (k0 + t) * n + p))
    byte = Load(codes, (binary("div", k0, const(2, INDEX)) + t // 2) * n + p)
    shifted = binary("shr", byte, const(4, "uint8")) if t % 2 else binary("bitand", byte, const(15, "uint8"))
    return as_float(shifted)


def as_float(value: Expr) -> Expr:
    return value if value.dtype == "float32" else cast(value, "float32")


def _unflatten(i: Expr, dims: tuple[int, ...]) -> list[Expr]:
    """The index into `dims` of flat row i (the epilogue indexes the output's own shape)."""
    out: list[Expr] = []
    stride = int(np.prod(dims, dtype=np.int64))
    for d in dims:
        stride //= d
        out.append(binary("mod", binary("div", i, const(stride, INDEX)), const(d, INDEX)))
    return out
