"""Fold per-channel affine ops into the weights of the Conv / Gemm / MatMul before them.

BatchNormalization in inference mode is y = x * a + b per channel; so are the Mul/Add (and
Sub/Div by a constant) chains some exporters emit instead. When they follow a Conv or Gemm whose
weights are constants and whose output nothing else reads, W' = W * a and bias' = bias * a + b
compute the same thing with no extra pass over memory. Arithmetic is done in float64 and rounded
once, which is at least as accurate as evaluating the two ops in float32.
"""

from __future__ import annotations

import numpy as np

from aot.ir.affine import ANCHORS, batchnorm_affine
from aot.ir.graph import Graph, Node, Tensor

# Anchors whose output channels are axis 1 of their output.
CHANNELS_FIRST = ("Conv", "ConvTranspose")


def _channel_count(anchor: Node) -> int | None:
    out = anchor.outputs[0]
    if out is None:
        return None
    if anchor.op_type in CHANNELS_FIRST:
        return out.shape[1]
    return out.shape[-1] if out.rank == 2 else None


def _per_channel(value: np.ndarray, out: Tensor, channels: int, conv: bool) -> np.ndarray | None:
    """`value` as one number per output channel, if it broadcasts that way against `out`."""
    if value.ndim > out.rank:
        return None
    shape = (1,) * (out.rank - value.ndim) + value.shape
    axis = 1 if conv else out.rank - 1
    for i, d in enumerate(shape):
        if d != 1 and (i != axis or d != channels):
            return None
    return np.broadcast_to(value.reshape(-1) if value.size == channels else value.reshape(-1)[:1],
                           (channels,)).astype(np.float64)


def _affine_of(node: Node, chain: Tensor, channels: int, conv: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) with node(chain) == chain * a + b per channel, or None."""
    out = node.outputs[0]
    if out is None or out.shape != chain.shape or out.dtype.kind != "f":
        return None
    if node.op_type == "BatchNormalization":
        if node.inputs[0] is not chain or len([o for o in node.outputs if o is not None]) != 1:
            return None
        params = node.inputs[1:5]
        if len(params) != 4 or any(p is None or not p.is_constant for p in params):
            return None
        if params[0].size != channels:  # type: ignore[union-attr]
            return None
        return batchnorm_affine(*(p.data for p in params), float(node.attr("epsilon", 1e-5)))  # type: ignore[union-attr]
    if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(node.inputs) != 2:
        return None
    other_index = 1 if node.inputs[0] is chain else 0
    if node.inputs[1 - other_index] is not chain:
        return None
    other = node.inputs[other_index]
    if other is None or not other.is_constant or other is chain:
        return None
    v = _per_channel(other.data, chain, channels, conv)  # type: ignore[arg-type]
    if v is None:
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    if node.op_type == "Mul":
        return v, zeros
    if node.op_type == "Add":
        return ones, v
    if node.op_type == "Sub":
        return (ones, -v) if other_index == 1 else (-ones, v)
    if other_index == 1 and np.all(v != 0):  # Div by a constant
        return 1.0 / v, zeros
    return None


def _fold_into(graph: Graph, anchor: Node, a: np.ndarray, b: np.ndarray) -> bool:
    """Rewrite the anchor's weights and bias so that its output becomes out * a + b."""
    out = anchor.outputs[0]
    assert out is not None
    dtype = out.dtype
    if anchor.op_type == "Conv":
        w, bias = anchor.inputs[1], anchor.input(2)
        if w is None or not w.is_constant or (bias is not None and not bias.is_constant):
            return False
        if w.rank < 1 or w.shape[0] != len(a) or (bias is not None and bias.shape != (len(a),)):
            return False  # shapes the lowering refuses, naming the node: nothing to fold
        new_w = w.data.astype(np.float64) * a.reshape((-1,) + (1,) * (w.rank - 1))  # type: ignore[union-attr]
        old_b = bias.data.astype(np.float64) if bias is not None else np.zeros(len(a))  # type: ignore[union-attr]
        graph.set_input(anchor, 1, graph.add_constant(new_w.astype(dtype), f"{w.name}_folded"))
        graph.set_input(anchor, 2, graph.add_constant((old_b * a + b).astype(dtype), f"{anchor.name}_bias_folded"))
        return True
    if anchor.op_type == "ConvTranspose":
        return _fold_into_transposed(graph, anchor, a, b)
    if anchor.op_type == "Gemm":
        w, c = anchor.inputs[1], anchor.input(2)
        if w is None or not w.is_constant or (c is not None and not c.is_constant):
            return False
        if not _broadcasts_to(c.shape if c is not None else (), out.shape) or w.rank != 2:
            return False  # shapes the lowering refuses, naming the node: nothing to fold
        trans_b = bool(anchor.attr("transB", 0))
        new_w = w.data.astype(np.float64) * (a[:, None] if trans_b else a[None, :])  # type: ignore[union-attr]
        beta = float(anchor.attr("beta", 1.0))
        old_c = (c.data.astype(np.float64) * beta) if c is not None else np.zeros(len(a))  # type: ignore[union-attr]
        new_c = old_c * a + b  # broadcasts over a (1,N)/(N,)/(M,N)/scalar C alike
        graph.set_input(anchor, 1, graph.add_constant(new_w.astype(dtype), f"{w.name}_folded"))
        graph.set_input(anchor, 2, graph.add_constant(np.asarray(new_c).astype(dtype), f"{anchor.name}_bias_folded"))
        anchor.attrs["beta"] = 1.0
        return True
    if anchor.op_type == "MatMul":
        x, w = anchor.inputs[0], anchor.inputs[1]
        if x is None or w is None or x.rank != 2 or w.rank != 2 or not w.is_constant:
            return False
        new_w = w.data.astype(np.float64) * a[None, :]  # type: ignore[union-attr]
        anchor.op_type = "Gemm"  # 2-D MatMul with a bias is exactly Gemm
        anchor.attrs = {}
        graph.set_input(anchor, 1, graph.add_constant(new_w.astype(dtype), f"{w.name}_folded"))
        graph.set_input(anchor, 2, graph.add_constant(b.astype(dtype), f"{anchor.name}_bias_folded"))
        return True
    return False


def _fold_into_transposed(graph: Graph, anchor: Node, a: np.ndarray, b: np.ndarray) -> bool:
    """ConvTranspose: W is [C, OC / group, k...], output channel g * (OC / group) + m."""
    w, bias = anchor.inputs[1], anchor.input(2)
    out = anchor.outputs[0]
    assert out is not None
    if w is None or not w.is_constant or (bias is not None and not bias.is_constant) or w.rank < 2:
        return False
    groups = int(anchor.attr("group", 1))
    if groups <= 0 or w.shape[1] * groups != len(a) or w.shape[0] % groups \
            or (bias is not None and bias.shape != (len(a),)):
        return False  # shapes the lowering refuses, naming the node: nothing to fold
    per_group = w.data.reshape(groups, w.shape[0] // groups, w.shape[1], -1).astype(np.float64)  # type: ignore[union-attr]
    new_w = (per_group * a.reshape(groups, 1, w.shape[1], 1)).reshape(w.shape)
    old_b = bias.data.astype(np.float64) if bias is not None else np.zeros(len(a))  # type: ignore[union-attr]
    graph.set_input(anchor, 1, graph.add_constant(new_w.astype(out.dtype), f"{w.name}_folded"))
    graph.set_input(anchor, 2, graph.add_constant((old_b * a + b).astype(out.dtype), f"{anchor.name}_bias_folded"))
    return True


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def fold_affine_into_weights(graph: Graph) -> None:
    changed = True
    while changed:
        changed = False
        removed = []  # followers folded away, dropped together after the sweep
        for anchor in list(graph.nodes):
            if anchor.op_type not in ANCHORS:
                continue
            out = anchor.outputs[0]
            channels = _channel_count(anchor)
            if out is None or channels is None or out.dtype.kind != "f" or graph.is_output(out):
                continue
            if len(out.consumers) != 1:
                continue
            follower = out.consumers[0]
            affine = _affine_of(follower, out, channels, anchor.op_type in CHANNELS_FIRST)
            if affine is None or not _fold_into(graph, anchor, *affine):
                continue
            result = follower.outputs[0]
            assert result is not None
            removed.append(follower)
            graph.set_output(anchor, 0, result)
            del graph.tensors[out.name]
            changed = True
        graph.remove_nodes(removed)
    graph.prune()
