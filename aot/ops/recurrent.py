"""RNN, GRU and LSTM: one-layer recurrent networks, forward, reverse or bidirectional.

Each node becomes a short sequence of kernels:

1. the input projection XW[d, t, b, :] = X[t, b, :] W[d]^T + biases for every direction and
   time step at once (a plain matrix product, the bulk of the work for short hidden sizes), into
   an arena scratch tensor;
2. per direction, the recurrence: a loop over time in kernel IR. Each step adds H_{t-1} R^T to
   the projected gates of each batch row (into a small scratch row, since every hidden unit
   reads the whole previous state), then applies the gate activations and updates the state.

The hidden and cell states live in the Y_h / Y_c outputs when the graph reads them (the final
state is the last step's state), else in scratch tensors. Y rows a sequence does not reach
(sequence_lens shorter than the sequence) are zero, and the state stops at the last valid step,
as in onnxruntime. For a reverse direction each batch row runs from its own last valid step
back to 0.

Gate activations (and their activation_alpha/activation_beta, consumed in order by the
activations that take them) are kernel-IR expressions; `clip` bounds every gate's input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    INDEX,
    Assign,
    Declare,
    Expr,
    If,
    Stmt,
    cast,
    const,
    gt,
    le,
    lt,
    maximum,
    minimum,
    select,
    unary,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.registry import register
from aot.ops.scratch import scratch_tensor

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}

# Which activations take alpha / beta, and their defaults when the attribute lists run out
# (onnxruntime's table: the ones not listed default to 0).
_TAKES = {"affine": (True, True), "relu": (False, False), "leakyrelu": (True, False),
          "thresholdedrelu": (True, False), "tanh": (False, False), "scaledtanh": (True, True),
          "sigmoid": (False, False), "hardsigmoid": (True, True), "elu": (True, False),
          "softsign": (False, False), "softplus": (False, False)}
_DEFAULTS = {"leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}


@dataclass(frozen=True)
class Activation:
    name: str  # lower case
    alpha: float
    beta: float

    def __call__(self, x: Expr) -> Expr:
        dt = x.dtype

        def f(v: float) -> Expr:
            return const(v, dt)

        zero, one = f(0.0), f(1.0)
        if self.name == "sigmoid":
            return one / (one + unary("exp", -x))
        if self.name == "tanh":
            return unary("tanh", x)
        if self.name == "relu":
            return select(lt(x, zero), zero, x)
        if self.name == "affine":
            return f(self.alpha) * x + f(self.beta)
        if self.name == "leakyrelu":
            return select(lt(x, zero), f(self.alpha) * x, x)
        if self.name == "thresholdedrelu":
            return select(gt(x, f(self.alpha)), x, zero)
        if self.name == "scaledtanh":
            return f(self.alpha) * unary("tanh", f(self.beta) * x)
        if self.name == "hardsigmoid":
            return maximum(zero, minimum(one, f(self.alpha) * x + f(self.beta)))
        if self.name == "elu":
            return select(lt(x, zero), f(self.alpha) * (unary("exp", x) - one), x)
        if self.name == "softsign":
            return x / (one + unary("abs", x))
        if self.name == "softplus":
            # log(1 + e^x) without overflowing for large x: max(x, 0) + log(1 + e^-|x|).
            return maximum(x, zero) + unary("log", one + unary("exp", -unary("abs", x)))
        raise AssertionError(self.name)


def parse_activations(node: Node, directions: int) -> list[list[Activation]]:
    """The gate activations of each direction, with their alpha/beta."""
    count = len(DEFAULT_ACTIVATIONS[node.op_type])
    names = node.attr("activations")
    if names is None:
        names = DEFAULT_ACTIVATIONS[node.op_type] * directions
    names = list(names)
    if len(names) == count and directions == 2:
        names = names * 2  # one set given for a bidirectional node: both directions use it
    if len(names) != count * directions:
        raise fail(node, f"activations lists {len(names)} functions, expected {count} per direction "
                         f"for {directions} direction(s)")
    alphas = iter(float(a) for a in node.attr("activation_alpha", []))
    betas = iter(float(b) for b in node.attr("activation_beta", []))
    parsed = []
    for raw in names:
        name = str(raw).lower()
        if name not in _TAKES:
            raise fail(node, f"unsupported activation {raw!r} (supported: Affine, Relu, LeakyRelu, ThresholdedRelu, "
                             "Tanh, ScaledTanh, Sigmoid, HardSigmoid, Elu, Softsign, Softplus)")
        takes_alpha, takes_beta = _TAKES[name]
        default_alpha, default_beta = _DEFAULTS.get(name, (0.0, 0.0))
        alpha = next(alphas, default_alpha) if takes_alpha else 0.0
        beta = next(betas, default_beta) if takes_beta else 0.0
        parsed.append(Activation(name, alpha, beta))
    return [parsed[d * count:(d + 1) * count] for d in range(directions)]


@dataclass
class _Shapes:
    seq: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    gates: int
    layout: int


def _state_view(buffer_view: View, shapes: _Shapes) -> View:
    """A (directions, batch, hidden) view of initial_h/c or Y_h/Y_c in the node's layout."""
    if shapes.layout == 0:
        return View(buffer_view.buffer, (shapes.directions, shapes.batch, shapes.hidden))
    return View(buffer_view.buffer, (shapes.batch, shapes.directions, shapes.hidden)).permute([1, 0, 2])


def _check_shape(node: Node, t: Tensor | None, what: str, expected: tuple[int, ...]) -> None:
    if t is not None and t.shape != expected:
        raise fail(node, f"{what} has shape {list(t.shape)}, expected {list(expected)}")


@register("RNN", "GRU", "LSTM")
def lower_recurrent(node: Node, ctx: LoweringContext) -> None:
    kind = node.op_type
    x = required_input(node, 0, "X")
    w = required_input(node, 1, "W")
    r = required_input(node, 2, "R")
    bias, seq_lens, h0 = node.input(3), node.input(4), node.input(5)
    c0 = node.input(6) if kind == "LSTM" else None
    peep = node.input(7) if kind == "LSTM" else None
    outs = list(node.outputs) + [None] * 3
    y, y_h = outs[0], outs[1]
    y_c = outs[2] if kind == "LSTM" else None
    if x.dtype.kind != "f" or any(t is not None and t.dtype != x.dtype for t in (w, r, bias, h0, c0, peep)):
        raise fail(node, f"X/W/R/B/initial states must share one float dtype (X is {x.dtype})")
    if x.rank != 3:
        raise fail(node, f"X has rank {x.rank}, expected 3")
    layout = int(node.attr("layout", 0))
    if layout not in (0, 1):
        raise fail(node, f"layout {layout} is not 0 or 1")
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise fail(node, f"unknown direction {direction!r}")
    directions = 2 if direction == "bidirectional" else 1
    gates = GATES[kind]
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    input_size = x.shape[2]
    hidden = int(node.attr("hidden_size", w.shape[1] // gates if w.rank == 3 else 0))
    shapes = _Shapes(seq, batch, input_size, hidden, directions, gates, layout)
    _check_shape(node, w, "W", (directions, gates * hidden, input_size))
    _check_shape(node, r, "R", (directions, gates * hidden, hidden))
    _check_shape(node, bias, "B", (directions, 2 * gates * hidden))
    _check_shape(node, seq_lens, "sequence_lens", (batch,))
    state_shape = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
    for t, what in ((h0, "initial_h"), (c0, "initial_c"), (y_h, "Y_h"), (y_c, "Y_c")):
        _check_shape(node, t, what, state_shape)
    _check_shape(node, peep, "P", (directions, 3 * hidden))
    _check_shape(node, y, "Y", (seq, directions, batch, hidden) if layout == 0 else (batch, seq, directions, hidden))
    if seq_lens is not None and seq_lens.dtype.kind not in "iu":
        raise fail(node, f"sequence_lens has dtype {seq_lens.dtype}, expected int32")
    activations = parse_activations(node, directions)
    clip_attr = node.attr("clip")
    clip = float(clip_attr) if clip_attr is not None else None
    if clip is not None and not clip > 0:
        raise fail(node, f"clip {clip} must be positive")
    input_forget = bool(node.attr("input_forget", 0)) if kind == "LSTM" else False
    linear_before_reset = bool(node.attr("linear_before_reset", 0)) if kind == "GRU" else False
    if seq == 0 or batch == 0 or hidden == 0:
        raise fail(node, "empty sequence, batch or hidden size")

    # sequence_lens equal to the full length everywhere (the common export) needs no masking.
    lens_tensor = seq_lens
    if seq_lens is not None and seq_lens.is_constant:
        assert seq_lens.data is not None
        values = seq_lens.data.reshape(-1)
        if np.any(values < 0) or np.any(values > seq):
            raise fail(node, f"sequence_lens {values.tolist()} must lie in [0, {seq}]")
        if np.all(values == seq):
            lens_tensor = None

    dt = x.dtype
    projected = scratch_tensor(ctx, node, (directions, seq, batch, gates * hidden), dt, "xw")
    _emit_projection(ctx, node, x, w, bias, projected, shapes, linear_before_reset)
    hidden_state = y_h if y_h is not None else scratch_tensor(ctx, node, state_shape, dt, "h")
    cell_state = None
    if kind == "LSTM":
        cell_state = y_c if y_c is not None else scratch_tensor(ctx, node, state_shape, dt, "c")
    gate_row = scratch_tensor(ctx, node, (gates * hidden,), dt, "gates")
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        step = _Step(kind, activations[d], clip, input_forget, linear_before_reset)
        _emit_recurrence(ctx, node, d, reverse, step, shapes, _RecurrenceTensors(
            projected, r, bias, peep, lens_tensor, h0, c0, hidden_state, cell_state, y, gate_row))


def _emit_projection(ctx: LoweringContext, node: Node, x: Tensor, w: Tensor, bias: Tensor | None,
                     projected: Tensor, s: _Shapes, linear_before_reset: bool) -> None:
    """projected[d, t, b, g] = sum_i X[t, b, i] W[d, g, i] + Wb[d, g] + Rb[d, g], except that the
    GRU hidden gate with linear_before_reset keeps Rb out (it is added inside the reset product)."""
    kb = ctx.builder(node)
    xv = kb.input(x)
    if s.layout == 1:
        xv = xv.permute([1, 0, 2])
    wv, pv = kb.input(w), kb.output(projected)
    bv = kb.input(bias) if bias is not None else None
    dt = projected.dtype.name
    gh = s.gates * s.hidden

    def body(idx: list[Expr]) -> list[Stmt]:
        d, t, b = idx
        stmts: list[Stmt] = []
        for gate in range(s.gates):
            def unit(j: list[Expr], gate: int = gate) -> list[Stmt]:
                g = j[0] + gate * s.hidden
                acc = kb.var("acc", dt)
                init: Expr = const(0.0, dt)
                if bv is not None:
                    init = bv.load([d, g])
                    if not (linear_before_reset and gate == 2):
                        init = init + bv.load([d, g + gh])
                red = kb.loops([s.input_size], lambda i: [
                    Assign(acc, acc + xv.load([t, b, i[0]]) * wv.load([d, g, i[0]]))], prefix="r")
                return [Declare(acc, init), *red, pv.store([d, t, b, g], acc)]
            stmts += kb.loops([s.hidden], unit, prefix="j")
        return stmts

    ctx.emit(kb, kb.loops([s.directions, s.seq, s.batch], body))


@dataclass
class _Step:
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
class _RecurrenceTensors:
    """What one direction's recurrence kernel reads and writes."""

    projected: Tensor  # X W^T + biases, [dir][t][batch][gate row]
    r: Tensor
    bias: Tensor | None
    peep: Tensor | None
    lens: Tensor | None
    h0: Tensor | None
    c0: Tensor | None
    hidden_state: Tensor
    cell_state: Tensor | None
    y: Tensor | None
    gate_row: Tensor  # scratch: one batch row's gates


def _emit_recurrence(ctx: LoweringContext, node: Node, d: int, reverse: bool, step: _Step, s: _Shapes,
                     tensors: _RecurrenceTensors) -> None:
    recurrence = _Recurrence(ctx.builder(node), d, reverse, step, s, tensors)
    ctx.emit(recurrence.kb, recurrence.body())


class _Recurrence:
    """The time loop of one direction of an RNN, GRU or LSTM: per step and batch row, the
    recurrent product into the gate row, then the gates and the new state."""

    def __init__(self, kb: KernelBuilder, d: int, reverse: bool, step: _Step, s: _Shapes,
                 t: _RecurrenceTensors) -> None:
        self.kb, self.d, self.reverse, self.step, self.s, self.t = kb, d, reverse, step, s, t
        self.dt = t.projected.dtype.name
        self.H = s.hidden
        self.xw, self.rv = kb.input(t.projected), kb.input(t.r)
        self.bv = kb.input(t.bias) if t.bias is not None and step.linear_before_reset else None
        self.pv = kb.input(t.peep) if t.peep is not None else None
        self.lv = kb.input(t.lens) if t.lens is not None else None
        self.h0v = _state_view(kb.input(t.h0), s) if t.h0 is not None else None
        self.c0v = _state_view(kb.input(t.c0), s) if t.c0 is not None else None
        self.hv = _state_view(kb.output(t.hidden_state), s)
        self.cv = _state_view(kb.output(t.cell_state), s) if t.cell_state is not None else None
        self.gv = kb.output(t.gate_row)
        self.yv = None
        if t.y is not None:
            self.yv = kb.output(t.y)
            if s.layout == 1:
                self.yv = self.yv.permute([1, 2, 0, 3])  # (batch, seq, dir, hidden) seen as (seq, dir, batch, hidden)
        self.zero = const(0.0, self.dt)
        self.row_fn: Callable[[Expr, Expr], list[Stmt]] = {
            "RNN": self.rnn_row, "GRU": self.gru_row, "LSTM": self.lstm_row}[step.kind]

    def body(self) -> list[Stmt]:
        kb, s, t = self.kb, self.s, self.t
        body: list[Stmt] = kb.loops([s.batch, self.H], self.init)
        body += kb.loops([s.seq, s.batch], self.time_step, prefix="s")
        if self.lv is not None and not (t.lens is not None and t.lens.is_constant and bool(np.all(t.lens.data > 0))):
            # A row of length 0 has no last step: onnxruntime gives it a zero final state (not the
            # initial one), and so do we.
            body += kb.loops([s.batch, self.H], self.empty_rows)
        return body

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

    def time_step(self, idx: list[Expr]) -> list[Stmt]:
        si, b = idx
        s = self.s
        if self.lv is None:
            t = (s.seq - 1) - si if self.reverse else si
            return self.row_fn(b, t)
        # Per-row length, clamped into [0, seq] so that a bad runtime value cannot index outside X.
        stmts: list[Stmt] = []
        length = self.local(stmts, "len", minimum(maximum(cast(self.lv.load([b]), INDEX), const(0, INDEX)),
                                                  const(s.seq, INDEX)))
        active = self.row_fn(b, (length - 1) - si if self.reverse else si)
        padding: list[Stmt] = []
        if self.yv is not None:
            yv = self.yv
            padding = self.kb.loops([self.H], lambda j: [yv.store([si, self.d, b, j[0]], self.zero)], prefix="j")
        stmts.append(If(lt(si, length), active, padding))
        return stmts

    def local(self, stmts: list[Stmt], prefix: str, value: Expr) -> Expr:
        v = self.kb.var(prefix, value.dtype)
        stmts.append(Declare(v, value))
        return v

    def recurrent_sum(self, b: Expr, t: Expr, rows: int) -> list[Stmt]:
        """gate_row[g] = projected[d, t, b, g] + sum_k H[b, k] R[d, g, k] for the first `rows` gates."""
        kb, d, hv, rv = self.kb, self.d, self.hv, self.rv

        def unit(g: list[Expr]) -> list[Stmt]:
            acc = kb.var("acc", self.dt)
            red = kb.loops([self.H], lambda k: [Assign(acc, acc + hv.load([d, b, k[0]]) * rv.load([d, g[0], k[0]]))],
                           prefix="k")
            return [Declare(acc, self.xw.load([d, t, b, g[0]])), *red, self.gv.store([g[0]], acc)]
        return kb.loops([rows], unit, prefix="g")

    def store_state(self, stmts: list[Stmt], b: Expr, t: Expr, j: Expr, h_new: Expr) -> None:
        value = self.local(stmts, "hnew", h_new)
        stmts.append(self.hv.store([self.d, b, j], value))
        if self.yv is not None:
            stmts.append(self.yv.store([t, self.d, b, j], value))

    # -- RNN ---------------------------------------------------------------------------------
    def rnn_row(self, b: Expr, t: Expr) -> list[Stmt]:
        f = self.step.activations[0]

        def unit(j: list[Expr]) -> list[Stmt]:
            stmts: list[Stmt] = []
            pre = self.local(stmts, "pre", self.step.clipped(self.gv.load([j[0]])))
            self.store_state(stmts, b, t, j[0], f(pre))
            return stmts
        return self.recurrent_sum(b, t, self.H) + self.kb.loops([self.H], unit, prefix="j")

    # -- GRU ---------------------------------------------------------------------------------
    def gru_row(self, b: Expr, t: Expr) -> list[Stmt]:
        kb, H = self.kb, self.H
        stmts = self.recurrent_sum(b, t, 2 * H)
        return (stmts + kb.loops([H], self.gru_gates_zr, prefix="j")
                + kb.loops([H], lambda j: self.gru_candidate(b, t, j[0]), prefix="j")
                + kb.loops([H], lambda j: self.gru_update(b, t, j[0]), prefix="j"))

    def gru_gates_zr(self, j: list[Expr]) -> list[Stmt]:
        """z and r, in place."""
        f = self.step.activations[0]
        out: list[Stmt] = []
        for offset in (0, self.H):
            pre = self.local(out, "pre", self.step.clipped(self.gv.load([j[0] + offset])))
            out.append(self.gv.store([j[0] + offset], f(pre)))
        return out

    def gru_candidate(self, b: Expr, t: Expr, j: Expr) -> list[Stmt]:
        """The hidden gate's pre-activation into gate_row[2H + j]."""
        kb, d, H, hv, rv, gv = self.kb, self.d, self.H, self.hv, self.rv, self.gv
        acc = kb.var("acc", self.dt)
        row = j + 2 * H
        if self.step.linear_before_reset:
            # r (.) (H R_h^T + Rb_h) + (X W_h^T + Wb_h)
            red = kb.loops([H], lambda k: [
                Assign(acc, acc + hv.load([d, b, k[0]]) * rv.load([d, row, k[0]]))], prefix="k")
            rb = self.bv.load([d, j + 5 * H]) if self.bv is not None else self.zero
            value = self.xw.load([d, t, b, row]) + gv.load([j + H]) * (acc + rb)
            return [Declare(acc, self.zero), *red, gv.store([row], value)]
        # (r (.) H) R_h^T + X W_h^T + Wb_h + Rb_h
        red = kb.loops([H], lambda k: [
            Assign(acc, acc + (gv.load([k[0] + H]) * hv.load([d, b, k[0]])) * rv.load([d, row, k[0]]))],
            prefix="k")
        return [Declare(acc, self.xw.load([d, t, b, row])), *red, gv.store([row], acc)]

    def gru_update(self, b: Expr, t: Expr, j: Expr) -> list[Stmt]:
        g = self.step.activations[1]
        out: list[Stmt] = []
        pre = self.local(out, "pre", self.step.clipped(self.gv.load([j + 2 * self.H])))
        cand = self.local(out, "cand", g(pre))
        z = self.local(out, "z", self.gv.load([j]))
        self.store_state(out, b, t, j, (const(1.0, self.dt) - z) * cand + z * self.hv.load([self.d, b, j]))
        return out

    # -- LSTM --------------------------------------------------------------------------------
    def lstm_row(self, b: Expr, t: Expr) -> list[Stmt]:
        assert self.cv is not None
        return self.recurrent_sum(b, t, 4 * self.H) + self.kb.loops([self.H], lambda j: self.lstm_unit(b, t, j[0]),
                                                                      prefix="j")

    def lstm_unit(self, b: Expr, t: Expr, j: Expr) -> list[Stmt]:
        f, g, h = self.step.activations
        cv, dt = self.cv, self.dt
        assert cv is not None
        out: list[Stmt] = []
        c_prev = self.local(out, "cprev", cv.load([self.d, b, j]))
        i_gate = self.local(out, "ig", f(self.lstm_gate_in(out, j, 0, 0, c_prev)))
        if self.step.input_forget:
            f_gate = self.local(out, "fg", const(1.0, dt) - i_gate)
        else:
            f_gate = self.local(out, "fg", f(self.lstm_gate_in(out, j, 2, 2, c_prev)))
        cand = self.local(out, "cand", g(self.lstm_gate_in(out, j, 3, None, c_prev)))
        c_new = self.local(out, "cnew", f_gate * c_prev + i_gate * cand)
        # The output gate's peephole sees the new cell state.
        o_gate = self.local(out, "og", f(self.lstm_gate_in(out, j, 1, 1, c_new)))
        out.append(cv.store([self.d, b, j], c_new))
        self.store_state(out, b, t, j, o_gate * h(c_new))
        return out

    def lstm_gate_in(self, out: list[Stmt], j: Expr, row: int, peep_row: int | None, c: Expr) -> Expr:
        """Gate rows of W/R/B: i, o, f, c; peephole rows of P: i, o, f."""
        value = self.gv.load([j + row * self.H])
        if self.pv is not None and peep_row is not None:
            value = value + self.pv.load([self.d, j + peep_row * self.H]) * c
        return self.local(out, "pre", self.step.clipped(value))

