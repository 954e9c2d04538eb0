"""RNN, GRU and LSTM: one-layer recurrent networks, forward, reverse or bidirectional.

Each node becomes a short sequence of kernels:

1. the input projection X W^T + biases for every direction and time step at once, a
   register-tiled matrix product (projection.py) into an arena scratch tensor;
2. per direction, the recurrence (recurrence.py): a loop over time in kernel IR whose steps are
   a register-tiled product H_{t-1} R^T over R packed at compile time (panels.py), for all batch
   rows at once, then the gates and the state update as vectorisable loops over the hidden units.

Gate activations (and their activation_alpha/activation_beta, consumed in order by the
activations that take them) are kernel-IR expressions (activations.py); `clip` bounds every
gate's input.
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.recurrent.activations import GATES, parse_activations
from aot.ops.recurrent.projection import emit_projection, projection_segments
from aot.ops.recurrent.recurrence import RecurrenceTensors, Shapes, Step, emit_recurrence
from aot.ops.scratch import scratch_tensor


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
    shapes = Shapes(seq, batch, input_size, hidden, directions, gates, layout)
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
    projected = scratch_tensor(ctx, node, (directions, seq * batch, gates * hidden), dt, "xw")
    emit_projection(ctx, node, x, w, bias, projected, directions,
                    projection_segments(gates, hidden, linear_before_reset))
    hidden_state = y_h if y_h is not None else scratch_tensor(ctx, node, state_shape, dt, "h")
    cell_state = None
    if kind == "LSTM":
        cell_state = y_c if y_c is not None else scratch_tensor(ctx, node, state_shape, dt, "c")
    gate_rows = scratch_tensor(ctx, node, (batch, gates * hidden), dt, "gates")
    reset_state = None
    if kind == "GRU" and not linear_before_reset:
        reset_state = scratch_tensor(ctx, node, (batch, hidden), dt, "rh")
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        step = Step(kind, activations[d], clip, input_forget, linear_before_reset)
        emit_recurrence(ctx, node, d, reverse, step, shapes, RecurrenceTensors(
            projected, r, bias, peep, lens_tensor, h0, c0, hidden_state, cell_state, y, gate_rows, reset_state))
