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
from aot.lowering.builder import View
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
        _emit_recurrence(ctx, node, d, reverse, step, shapes, projected, r, bias, peep, lens_tensor, h0, c0,
                         hidden_state, cell_state, y, gate_row)


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


def _emit_recurrence(ctx: LoweringContext, node: Node, d: int, reverse: bool, step: _Step, s: _Shapes,
                     projected: Tensor, r: Tensor, bias: Tensor | None, peep: Tensor | None,
                     lens: Tensor | None, h0: Tensor | None, c0: Tensor | None, hidden_state: Tensor,
                     cell_state: Tensor | None, y: Tensor | None, gate_row: Tensor) -> None:
    kb = ctx.builder(node)
    dt = projected.dtype.name
    H = s.hidden
    xw, rv = kb.input(projected), kb.input(r)
    bv = kb.input(bias) if bias is not None and step.linear_before_reset else None
    pv = kb.input(peep) if peep is not None else None
    lv = kb.input(lens) if lens is not None else None
    h0v = _state_view(kb.input(h0), s) if h0 is not None else None
    c0v = _state_view(kb.input(c0), s) if c0 is not None else None
    hv = _state_view(kb.output(hidden_state), s)
    cv = _state_view(kb.output(cell_state), s) if cell_state is not None else None
    gv = kb.output(gate_row)
    yv = None
    if y is not None:
        yv = kb.output(y)
        if s.layout == 1:
            yv = yv.permute([1, 2, 0, 3])  # (batch, seq, dir, hidden) seen as (seq, dir, batch, hidden)
    zero = const(0.0, dt)

    # Initial state.
    def init(idx: list[Expr]) -> list[Stmt]:
        b, j = idx
        stmts = [hv.store([d, b, j], h0v.load([d, b, j]) if h0v is not None else zero)]
        if cv is not None:
            stmts.append(cv.store([d, b, j], c0v.load([d, b, j]) if c0v is not None else zero))
        return stmts

    body: list[Stmt] = kb.loops([s.batch, H], init)

    def local(stmts: list[Stmt], prefix: str, value: Expr) -> Expr:
        v = kb.var(prefix, value.dtype)
        stmts.append(Declare(v, value))
        return v

    def recurrent_sum(b: Expr, t: Expr, rows: int) -> list[Stmt]:
        """gate_row[g] = projected[d, t, b, g] + sum_k H[b, k] R[d, g, k] for the first `rows` gates."""
        def unit(g: list[Expr]) -> list[Stmt]:
            acc = kb.var("acc", dt)
            red = kb.loops([H], lambda k: [Assign(acc, acc + hv.load([d, b, k[0]]) * rv.load([d, g[0], k[0]]))],
                           prefix="k")
            return [Declare(acc, xw.load([d, t, b, g[0]])), *red, gv.store([g[0]], acc)]
        return kb.loops([rows], unit, prefix="g")

    def store_state(stmts: list[Stmt], b: Expr, t: Expr, j: Expr, h_new: Expr) -> None:
        value = local(stmts, "hnew", h_new)
        stmts.append(hv.store([d, b, j], value))
        if yv is not None:
            stmts.append(yv.store([t, d, b, j], value))

    def rnn_row(b: Expr, t: Expr) -> list[Stmt]:
        f = step.activations[0]

        def unit(j: list[Expr]) -> list[Stmt]:
            stmts: list[Stmt] = []
            pre = local(stmts, "pre", step.clipped(gv.load([j[0]])))
            store_state(stmts, b, t, j[0], f(pre))
            return stmts
        return recurrent_sum(b, t, H) + kb.loops([H], unit, prefix="j")

    def gru_row(b: Expr, t: Expr) -> list[Stmt]:
        f, g = step.activations
        stmts = recurrent_sum(b, t, 2 * H)

        def gates_zr(j: list[Expr]) -> list[Stmt]:  # z and r in place
            out: list[Stmt] = []
            for offset in (0, H):
                pre = local(out, "pre", step.clipped(gv.load([j[0] + offset])))
                out.append(gv.store([j[0] + offset], f(pre)))
            return out

        def candidate(j: list[Expr]) -> list[Stmt]:  # the hidden gate's pre-activation into gate_row[2H + j]
            acc = kb.var("acc", dt)
            row = j[0] + 2 * H
            if step.linear_before_reset:
                # r (.) (H R_h^T + Rb_h) + (X W_h^T + Wb_h)
                red = kb.loops([H], lambda k: [
                    Assign(acc, acc + hv.load([d, b, k[0]]) * rv.load([d, row, k[0]]))], prefix="k")
                rb = bv.load([d, j[0] + 5 * H]) if bv is not None else zero
                value = xw.load([d, t, b, row]) + gv.load([j[0] + H]) * (acc + rb)
                return [Declare(acc, zero), *red, gv.store([row], value)]
            # (r (.) H) R_h^T + X W_h^T + Wb_h + Rb_h
            red = kb.loops([H], lambda k: [
                Assign(acc, acc + (gv.load([k[0] + H]) * hv.load([d, b, k[0]])) * rv.load([d, row, k[0]]))],
                prefix="k")
            return [Declare(acc, xw.load([d, t, b, row])), *red, gv.store([row], acc)]

        def update(j: list[Expr]) -> list[Stmt]:
            out: list[Stmt] = []
            pre = local(out, "pre", step.clipped(gv.load([j[0] + 2 * H])))
            cand = local(out, "cand", g(pre))
            z = local(out, "z", gv.load([j[0]]))
            store_state(out, b, t, j[0], (const(1.0, dt) - z) * cand + z * hv.load([d, b, j[0]]))
            return out

        return (stmts + kb.loops([H], gates_zr, prefix="j") + kb.loops([H], candidate, prefix="j")
                + kb.loops([H], update, prefix="j"))

    def lstm_row(b: Expr, t: Expr) -> list[Stmt]:
        f, g, h = step.activations
        assert cv is not None

        def unit(j: list[Expr]) -> list[Stmt]:
            out: list[Stmt] = []
            c_prev = local(out, "cprev", cv.load([d, b, j[0]]))

            def gate_in(row: int, peep_row: int | None, c: Expr) -> Expr:
                """Gate rows of W/R/B: i, o, f, c; peephole rows of P: i, o, f."""
                value = gv.load([j[0] + row * H])
                if pv is not None and peep_row is not None:
                    value = value + pv.load([d, j[0] + peep_row * H]) * c
                return local(out, "pre", step.clipped(value))

            i_gate = local(out, "ig", f(gate_in(0, 0, c_prev)))
            if step.input_forget:
                f_gate = local(out, "fg", const(1.0, dt) - i_gate)
            else:
                f_gate = local(out, "fg", f(gate_in(2, 2, c_prev)))
            cand = local(out, "cand", g(gate_in(3, None, c_prev)))
            c_new = local(out, "cnew", f_gate * c_prev + i_gate * cand)
            # The output gate's peephole sees the new cell state.
            o_gate = local(out, "og", f(gate_in(1, 1, c_new)))
            out.append(cv.store([d, b, j[0]], c_new))
            store_state(out, b, t, j[0], o_gate * h(c_new))
            return out

        return recurrent_sum(b, t, 4 * H) + kb.loops([H], unit, prefix="j")

    row_fn: Callable[[Expr, Expr], list[Stmt]] = {"RNN": rnn_row, "GRU": gru_row, "LSTM": lstm_row}[step.kind]

    def time_step(idx: list[Expr]) -> list[Stmt]:
        si, b = idx
        if lv is None:
            t = (s.seq - 1) - si if reverse else si
            return row_fn(b, t)
        # Per-row length, clamped into [0, seq] so that a bad runtime value cannot index outside X.
        stmts: list[Stmt] = []
        length = local(stmts, "len", minimum(maximum(cast(lv.load([b]), INDEX), const(0, INDEX)),
                                             const(s.seq, INDEX)))
        active = row_fn(b, (length - 1) - si if reverse else si)
        padding: list[Stmt] = []
        if yv is not None:
            padding = kb.loops([H], lambda j: [yv.store([si, d, b, j[0]], zero)], prefix="j")
        stmts.append(If(lt(si, length), active, padding))
        return stmts

    body += kb.loops([s.seq, s.batch], time_step, prefix="s")
    if lv is not None and not (lens is not None and lens.is_constant and bool(np.all(lens.data > 0))):
        # A row of length 0 has no last step: onnxruntime gives it a zero final state (not the
        # initial one), and so do we.
        def empty_rows(idx: list[Expr]) -> list[Stmt]:
            b, j = idx
            reset = [hv.store([d, b, j], zero)] + ([cv.store([d, b, j], zero)] if cv is not None else [])
            return [If(le(cast(lv.load([b]), INDEX), const(0, INDEX)), reset)]
        body += kb.loops([s.batch, H], empty_rows)
    ctx.emit(kb, body)

