"""The time loop of one direction of an RNN, GRU or LSTM.

Each step is, for all batch rows at once, the recurrent product into a [batch, gate rows]
scratch, then per batch row a loop over the hidden units applying the gates and updating the
state:

    gates[b, g] = projected[d, row(t_b, b), g] + sum_k H[b, k] R[d, g, k]

The product is register tiles (panels.panel_product) over R^T packed into column panels: the
accumulators stay in registers for the whole sum over k, the batch rows of a tile share every
vector load of R, and the projected gates are added as the tile is stored. A GRU without
linear_before_reset sums its hidden gate over (r (.) H) instead, so its step is two products
with the reset gate in between. The gate loops are plain element-wise code over the hidden
units (exp/tanh are polynomials, selects eager, no libm call), which gcc 12 and the LLVM
backend vectorise (checked: vector divides only, for LSTM, GRU and RNN at hidden 128). clang 14
(the C backend built with clang) keeps a gate loop scalar when the product before it is one
unrolled panel (an RNN or a GRU's z/r rows at hidden 128 on AVX2): it forwards the tile's
constant-address stores into the loop's first iteration and cannot vectorise the recurrence
that makes. The full panels of a product are a loop (panels.panel_product), which avoids this
for the wider products (an LSTM's 4H rows).

The hidden and cell states live in the Y_h / Y_c outputs when the graph reads them (the final
state is the last step's state), else in scratch tensors. Y rows a sequence does not reach
(sequence_lens shorter than the sequence) are zero, and the state stops at the last valid step,
as in onnxruntime; the product still runs over every row (its results for a finished row are
not used). For a reverse direction each batch row runs from its own last valid step back to 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Declare, Expr, If, Stmt, Var, cast, const, le, lt, maximum, minimum
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.ops.recurrent.activations import Activation
from aot.ops.recurrent.panels import panel_product, tile_shape, transposed_panels


@dataclass
class Shapes:
    seq: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    gates: int
    layout: int


def state_view(buffer_view: View, shapes: Shapes) -> View:
    """A (directions, batch, hidden) view of initial_h/c or Y_h/Y_c in the node's layout."""
    if shapes.layout == 0:
        return View(buffer_view.buffer, (shapes.directions, shapes.batch, shapes.hidden))
    return View(buffer_view.buffer, (shapes.batch, shapes.directions, shapes.hidden)).permute([1, 0, 2])


@dataclass
class Step:
    kind: str
    activations: list[Activation]
    clip: float | None
    input_forget: bool
    linear_before_reset: bool

    def clipped(self, x: Expr) -> Expr:
        if self.clip is None:
            return x
        return minimum(maximum(x, const(-self.clip, x.dtype)), const(self.clip, x.dtype))


@dataclass(frozen=True)
class RecurrenceTensors:
    """What one direction's recurrence kernel reads and writes."""

    projected: Tensor  # X W^T + biases, [dir][X row][gate row]
    r: Tensor
    bias: Tensor | None
    peep: Tensor | None
    lens: Tensor | None
    h0: Tensor | None
    c0: Tensor | None
    hidden_state: Tensor
    cell_state: Tensor | None
    y: Tensor | None
    gate_rows: Tensor  # scratch: [batch][gate row]
    reset_state: Tensor | None  # scratch: r (.) H_{t-1}, [batch][hidden] (GRU without linear_before_reset)


def emit_recurrence(ctx: LoweringContext, node: Node, d: int, reverse: bool, step: Step, s: Shapes,
                    tensors: RecurrenceTensors) -> None:
    recurrence = _Recurrence(ctx, node, d, reverse, step, s, tensors)
    ctx.emit(recurrence.kb, recurrence.body())


@dataclass(frozen=True)
class _Product:
    """One recurrent product of a step: gate rows [lo, hi) of R over the state `a_at(b, k)`,
    `init(b, g)` added to each sum (None: nothing)."""

    lo: int
    hi: int
    panels: Buffer
    a_at: Callable[[int, Expr], Expr]
    init: Callable[[int, Expr], Expr] | None


class _Recurrence:
    def __init__(self, ctx: LoweringContext, node: Node, d: int, reverse: bool, step: Step, s: Shapes,
                 t: RecurrenceTensors) -> None:
        kb = ctx.builder(node)
        self.ctx, self.node, self.kb, self.d, self.reverse, self.step, self.s, self.t = (
            ctx, node, kb, d, reverse, step, s, t)
        self.dt = t.projected.dtype.name
        self.H = s.hidden
        self.gh = s.gates * s.hidden
        self.xw = kb.input(t.projected)
        self.bv = kb.input(t.bias) if t.bias is not None and step.linear_before_reset else None
        self.pv = kb.input(t.peep) if t.peep is not None else None
        self.lv = kb.input(t.lens) if t.lens is not None else None
        self.h0v = state_view(kb.input(t.h0), s) if t.h0 is not None else None
        self.c0v = state_view(kb.input(t.c0), s) if t.c0 is not None else None
        self.hv = state_view(kb.output(t.hidden_state), s)
        self.cv = state_view(kb.output(t.cell_state), s) if t.cell_state is not None else None
        self.gv = kb.output(t.gate_rows)
        self.rhv = kb.output(t.reset_state) if t.reset_state is not None else None
        self.yv = None
        if t.y is not None:
            self.yv = kb.output(t.y)
            if s.layout == 1:
                self.yv = self.yv.permute([1, 2, 0, 3])  # (batch, seq, dir, hidden) seen as (seq, dir, batch, hidden)
        self.zero = const(0.0, self.dt)
        self.packing: list[Stmt] = []
        # Per step: each batch row's time index and the offset of its projected row.
        self.times: list[Expr] = []
        self.rows: list[Var] = []

    # -- the kernel ------------------------------------------------------------------------------
    def body(self) -> list[Stmt]:
        kb, s, t = self.kb, self.s, self.t
        self.products = self.plan_products()
        body: list[Stmt] = list(self.packing)
        body += kb.loops([s.batch, self.H], self.init)
        body += kb.loops([s.seq], lambda si: self.time_step(si[0]), prefix="s")
        if self.lv is not None and not (t.lens is not None and t.lens.is_constant and bool(np.all(t.lens.data > 0))):
            # A row of length 0 has no last step: onnxruntime gives it a zero final state (not the
            # initial one), and so do we.
            body += kb.loops([s.batch, self.H], self.empty_rows)
        return body

    def panels(self, lo: int, hi: int) -> Buffer:
        shape = tile_shape(self.ctx.tiles, self.dt, self.s.batch, hi - lo)
        buffer, stmts = transposed_panels(self.ctx, self.kb, self.node, self.t.r, self.d, lo, hi, shape[1],
                                          role="r_panels")
        self.packing += stmts
        return buffer

    def hidden_at(self, b: int, k: Expr) -> Expr:
        return self.hv.load([self.d, b, k])

    def projected_at(self, b: int, g: Expr) -> Expr:
        return self.xw.load_flat(self.rows[b] + g)

    def plan_products(self) -> list[_Product]:
        H, gh, step = self.H, self.gh, self.step
        if step.kind != "GRU":
            return [_Product(0, gh, self.panels(0, gh), self.hidden_at, self.projected_at)]
        zr = _Product(0, 2 * H, self.panels(0, 2 * H), self.hidden_at, self.projected_at)
        if not step.linear_before_reset:
            assert self.rhv is not None
            rhv = self.rhv
            return [zr, _Product(2 * H, gh, self.panels(2 * H, gh), lambda b, k: rhv.load([b, k]),
                                 self.projected_at)]
        bv = self.bv
        rb = None if bv is None else (lambda b, g: bv.load([self.d, g + 3 * H]))  # Rb_h: rows 5H.. of B
        return [zr, _Product(2 * H, gh, self.panels(2 * H, gh), self.hidden_at, rb)]

    def product(self, p: _Product) -> list[Stmt]:
        """gate_rows[b, g] = init(b, g) + sum_k a_at(b, k) R[d, g, k] for g in [p.lo, p.hi)."""
        s = self.s
        init = p.init
        finish = None if init is None else (lambda b, j, value: value + init(b, j + p.lo))
        shape = tile_shape(self.ctx.tiles, self.dt, s.batch, p.hi - p.lo)
        return panel_product(self.kb, self.ctx.tiles.lanes, self.dt, s.batch, p.hi - p.lo, self.H, shape, p.panels,
                             a_at=p.a_at, out=self.gv.buffer, out_at=lambda b, j: self.gv.index([b, j + p.lo]),
                             finish=finish)

    # -- per step --------------------------------------------------------------------------------
    def time_step(self, si: Expr) -> list[Stmt]:
        s, kb = self.s, self.kb
        stmts: list[Stmt] = []
        self.times, self.rows, lengths = [], [], []
        for b in range(s.batch):
            length = None
            if self.lv is not None:
                # Clamped into [0, seq] so that a bad runtime value cannot index outside X.
                length = self.local(stmts, "len", minimum(maximum(cast(self.lv.load([b]), INDEX), const(0, INDEX)),
                                                          const(s.seq, INDEX)))
            if not self.reverse:
                time: Expr = si
            elif length is None:
                time = (s.seq - 1) - si
            else:  # a finished row (time < 0) still reads a valid row; its results are not used
                time = maximum((length - 1) - si, const(0, INDEX))
            time = self.local(stmts, "t", time) if length is not None and self.reverse else time
            row = time * s.batch + b if s.layout == 0 else time + b * s.seq
            self.times.append(time)
            self.rows.append(self.local(stmts, "xrow", (row + self.d * self.xw.shape[1]) * self.gh))
            lengths.append(length)
        kind = self.step.kind
        if kind == "GRU" and not self.step.linear_before_reset:
            first, second = self.products
            stmts += self.product(first)
            for b in range(s.batch):
                stmts += kb.loops([self.H], lambda j, b=b: self.gru_reset(b, j[0]), prefix="j")
            stmts += self.product(second)
        else:
            for p in self.products:
                stmts += self.product(p)
        row_fn = {"RNN": self.rnn_unit, "GRU": self.gru_unit, "LSTM": self.lstm_unit}[kind]
        for b in range(s.batch):
            active = kb.loops([self.H], lambda j, b=b: row_fn(b, self.times[b], j[0]), prefix="j")
            if lengths[b] is None:
                stmts += active
                continue
            padding: list[Stmt] = []
            if self.yv is not None:
                padding = kb.loops([self.H], lambda j, b=b, yv=self.yv: [yv.store([si, self.d, b, j[0]], self.zero)],
                                   prefix="j")
            stmts.append(If(lt(si, lengths[b]), active, padding))
        return stmts

    def init(self, idx: list[Expr]) -> list[Stmt]:
        """The initial state."""
        b, j = idx
        d, zero = self.d, self.zero
        stmts = [self.hv.store([d, b, j], self.h0v.load([d, b, j]) if self.h0v is not None else zero)]
        if self.cv is not None:
            stmts.append(self.cv.store([d, b, j], self.c0v.load([d, b, j]) if self.c0v is not None else zero))
        return stmts

    def empty_rows(self, idx: list[Expr]) -> list[Stmt]:
        b, j = idx
        assert self.lv is not None
        reset = [self.hv.store([self.d, b, j], self.zero)]
        reset += [self.cv.store([self.d, b, j], self.zero)] if self.cv is not None else []
        return [If(le(cast(self.lv.load([b]), INDEX), const(0, INDEX)), reset)]

    def local(self, stmts: list[Stmt], prefix: str, value: Expr) -> Var:
        v = self.kb.var(prefix, value.dtype)
        stmts.append(Declare(v, value))
        return v

    def gate(self, b: int, g: Expr) -> Expr:
        return self.gv.load([b, g])

    def store_state(self, stmts: list[Stmt], b: int, t: Expr, j: Expr, h_new: Expr) -> None:
        value = self.local(stmts, "hnew", h_new)
        stmts.append(self.hv.store([self.d, b, j], value))
        if self.yv is not None:
            stmts.append(self.yv.store([t, self.d, b, j], value))

    # -- RNN -------------------------------------------------------------------------------------
    def rnn_unit(self, b: int, t: Expr, j: Expr) -> list[Stmt]:
        stmts: list[Stmt] = []
        pre = self.local(stmts, "pre", self.step.clipped(self.gate(b, j)))
        self.store_state(stmts, b, t, j, self.step.activations[0](pre))
        return stmts

    # -- GRU (gate rows z, r, h) -----------------------------------------------------------------
    def gru_reset(self, b: int, j: Expr) -> list[Stmt]:
        """z and r activated in place, and r (.) H_{t-1} for the hidden gate's product."""
        assert self.rhv is not None
        f = self.step.activations[0]
        out: list[Stmt] = []
        for offset in (0, self.H):
            pre = self.local(out, "pre", self.step.clipped(self.gate(b, j + offset)))
            out.append(self.gv.store([b, j + offset], f(pre)))
        out.append(self.rhv.store([b, j], self.gate(b, j + self.H) * self.hv.load([self.d, b, j])))
        return out

    def gru_unit(self, b: int, t: Expr, j: Expr) -> list[Stmt]:
        f, g = self.step.activations
        H = self.H
        out: list[Stmt] = []
        if self.step.linear_before_reset:
            # (X W_h^T + Wb_h) + r (.) (H R_h^T + Rb_h)
            z = self.local(out, "z", f(self.local(out, "pre", self.step.clipped(self.gate(b, j)))))
            r = self.local(out, "r", f(self.local(out, "pre", self.step.clipped(self.gate(b, j + H)))))
            hidden_pre = self.projected_at(b, j + 2 * H) + r * self.gate(b, j + 2 * H)
        else:
            z = self.local(out, "z", self.gate(b, j))
            hidden_pre = self.gate(b, j + 2 * H)
        cand = self.local(out, "cand", g(self.local(out, "pre", self.step.clipped(hidden_pre))))
        self.store_state(out, b, t, j, (const(1.0, self.dt) - z) * cand + z * self.hv.load([self.d, b, j]))
        return out

    # -- LSTM (gate rows i, o, f, c; peephole rows i, o, f) --------------------------------------
    def lstm_unit(self, b: int, t: Expr, j: Expr) -> list[Stmt]:
        f, g, h = self.step.activations
        cv, dt = self.cv, self.dt
        assert cv is not None
        out: list[Stmt] = []
        c_prev = self.local(out, "cprev", cv.load([self.d, b, j]))
        i_gate = self.local(out, "ig", f(self.lstm_gate_in(out, b, j, 0, 0, c_prev)))
        if self.step.input_forget:
            f_gate = self.local(out, "fg", const(1.0, dt) - i_gate)
        else:
            f_gate = self.local(out, "fg", f(self.lstm_gate_in(out, b, j, 2, 2, c_prev)))
        cand = self.local(out, "cand", g(self.lstm_gate_in(out, b, j, 3, None, c_prev)))
        c_new = self.local(out, "cnew", f_gate * c_prev + i_gate * cand)
        # The output gate's peephole sees the new cell state.
        o_gate = self.local(out, "og", f(self.lstm_gate_in(out, b, j, 1, 1, c_new)))
        out.append(cv.store([self.d, b, j], c_new))
        self.store_state(out, b, t, j, o_gate * h(c_new))
        return out

    def lstm_gate_in(self, out: list[Stmt], b: int, j: Expr, row: int, peep_row: int | None, c: Expr) -> Expr:
        value = self.gate(b, j + row * self.H)
        if self.pv is not None and peep_row is not None:
            value = value + self.pv.load([self.d, j + peep_row * self.H]) * c
        return self.local(out, "pre", self.step.clipped(value))
