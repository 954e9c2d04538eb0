"""The attention aot/passes/fuse_attention.py finds in a model's MatMul / Softmax / MatMul nodes.

Inputs: Q [..., queries, head], K^T [..., head, keys] (as the model's MatMul reads it), V [...,
keys, value head], an optional additive float mask and an optional bool mask, each broadcasting
to [..., queries, keys]; the batch dims broadcast as MatMul's do. Attributes: `scale`, `fill`
(the score a False of the bool mask gives), `causal_offset` (present: key j is seen by query i
only where j <= i + offset).
"""

from __future__ import annotations

from aot.ir.graph import Node
from aot.ir.internal_attrs import FUSED_FROM, INTERNAL_DOMAIN
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
    batch = y.shape[:-2]
    queries, head = q.shape[-2:]
    keys, value_head = v.shape[-2:]
    scores = (*batch, queries, keys)
    views = AttentionViews(
        batch=batch, q=kb.input(q).broadcast_to((*batch, queries, head)),
        keys_t=kb.input(keys_t).broadcast_to((*batch, head, keys)),
        v=kb.input(v).broadcast_to((*batch, keys, value_head)), y=kb.output(y),
        bias=kb.input(bias).broadcast_to(scores) if bias is not None else None,
        keep=kb.input(keep).broadcast_to(scores) if keep is not None else None)
    offset = node.attr("causal_offset")
    math_ = AttentionMath(scale=float(node.attr("scale", 1.0)), fill=float(node.attr("fill", float("-inf"))),
                          causal=offset is not None, offset=int(offset or 0))
    ctx.emit(kb, attention_kernel(
        kb, ctx.tiles, views, math_, parallel=worth_threads(ctx, views),
        scratch=lambda shape, hint: kb.output(scratch_tensor(ctx, node, shape, y.dtype, hint)).buffer))
