"""The attention aot/passes/fuse_attention.py finds in a model's MatMul / Softmax / MatMul nodes.

Inputs: Q [..., queries, head], K^T [..., head, keys] (as the model's MatMul reads it), V [...,
keys, value head], an optional additive float mask and an optional bool mask, each broadcasting
to [..., queries, keys]; the batch dims broadcast as MatMul's do. Attributes: `scale`, `fill`
(the score a False of the bool mask gives), `causal_offset` (present: key j is seen by query i
only where j <= i + offset); `q_perm`, `keys_perm`, `v_perm`: inputs read through a Transpose of
that perm; `y_perm`: the node writes Transpose(Y, y_perm).
"""

from __future__ import annotations

from aot.ir.graph import Node, Tensor
from aot.ir.internal_attrs import FUSED_FROM, INTERNAL_DOMAIN
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attention.kernel import AttentionMath, AttentionViews, attention_kernel, worth_threads
from aot.ops.attrs import fail, required_input
from aot.ops.scratch import scratch_tensor

OP_TYPE = "ScaledDotProductAttention"


@register(OP_TYPE, domain=INTERNAL_DOMAIN)
def lower_fused_attention(node: Node, ctx: LoweringContext) -> None:
    q = required_input(node, 0, "Q")
    keys_t = required_input(node, 1, "K^T")
    v = required_input(node, 2, "V")
    bias, keep = node.input(3), node.input(4)
    y = node.outputs[0]
    assert y is not None
    if y.dtype.name != "float32":
        raise fail(node, f"dtype {y.dtype}: attention is implemented for float32")
    kb = ctx.builder(node, sources=list(node.attr(FUSED_FROM, [node.name])))
    q_view, keys_view, v_view = (_read(kb, t, node.attr(perm)) for t, perm in (
        (q, "q_perm"), (keys_t, "keys_perm"), (v, "v_perm")))
    y_view = kb.output(y)
    y_perm = node.attr("y_perm")
    if y_perm is not None:  # the node writes Transpose(Y, y_perm): Y is its inverse view
        y_view = y_view.permute([list(y_perm).index(axis) for axis in range(len(y_perm))])
    batch = y_view.shape[:-2]
    queries, head = q_view.shape[-2:]
    keys, value_head = v_view.shape[-2:]
    scores = (*batch, queries, keys)
    views = AttentionViews(
        batch=batch, q=q_view.broadcast_to((*batch, queries, head)),
        keys_t=keys_view.broadcast_to((*batch, head, keys)),
        v=v_view.broadcast_to((*batch, keys, value_head)), y=y_view,
        bias=kb.input(bias).broadcast_to(scores) if bias is not None else None,
        keep=kb.input(keep).broadcast_to(scores) if keep is not None else None)
    offset = node.attr("causal_offset")
    math_ = AttentionMath(scale=float(node.attr("scale", 1.0)), fill=float(node.attr("fill", float("-inf"))),
                          causal=offset is not None, offset=int(offset or 0))
    ctx.emit(kb, attention_kernel(
        kb, ctx.tiles, views, math_, parallel=worth_threads(ctx, views),
        scratch=lambda shape, hint: kb.output(scratch_tensor(ctx, node, shape, y.dtype, hint)).buffer))


def _read(kb: KernelBuilder, tensor: Tensor, perm: list[int] | None) -> View:
    """A view of an input as the attention reads it (through the Transpose the pass absorbed)."""
    view = kb.input(tensor)
    return view.permute(list(perm)) if perm is not None else view
