"""com.microsoft MultiHeadAttention, as onnxruntime's transformer optimizer and exporters write it:
query [batch, sequence, heads x head]; key and value 3-D the same way or 4-D [batch, heads, keys,
head] (cross-attention over precomputed keys); `bias` (the Q, K and V projection biases, one
vector); `key_padding_mask` [batch, keys] (0: padding); `attention_bias` broadcasting to [batch,
heads, sequence, keys]; `unidirectional` (causal); past_key / past_value with present_key /
present_value. As onnxruntime computes it, padding and future keys get `mask_filter_value`
(-10000 by default) added to their scores rather than -inf. Lowered to aot/ops/attention/kernel.py.
"""

from __future__ import annotations

import math

from aot.ir.graph import Node, Tensor
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attention.kernel import AttentionMath, AttentionViews, attention_kernel, worth_threads
from aot.ops.attention.onnx_attention import Heads, group, with_past
from aot.ops.attrs import fail, required_input
from aot.ops.scratch import scratch_tensor

MS_DOMAIN = "com.microsoft"
MASK_FILTER_VALUE = -10000.0  # the schema's default


@register("MultiHeadAttention", domain=MS_DOMAIN)
def lower_multi_head_attention(node: Node, ctx: LoweringContext) -> None:
    q = required_input(node, 0, "query")
    k, v = _key_value(node)
    y = node.outputs[0]
    assert y is not None
    heads = int(node.attr("num_heads", 0))
    _check(node, q, k, v, heads)
    kb = ctx.builder(node)
    shape = Heads(heads, heads)
    keys, values = with_past(node, ctx, kb, (k, node.input(6), 1), (v, node.input(7), 2), shape)
    batch, queries, total = q.shape[0], q.shape[1], keys.shape[2]
    head = q.shape[2] // heads
    qv = group(shape.split(kb.input(q), heads), heads, 1, shared=False)
    scores = (batch, heads, queries, total)
    past = node.input(6).shape[2] if node.input(6) is not None else 0
    scale = node.attr("scale")
    math_ = AttentionMath(scale=float(scale) if scale else 1.0 / math.sqrt(head),
                          fill=float(node.attr("mask_filter_value", MASK_FILTER_VALUE)), masks_add=True,
                          causal=bool(node.attr("unidirectional", 0)), offset=past)
    views = AttentionViews(
        batch=qv.shape[:3], q=qv, keys_t=group(keys, heads, 1, shared=True).permute([0, 1, 2, 4, 3]),
        v=group(values, heads, 1, shared=True), y=group(shape.split(kb.output(y), heads), heads, 1, shared=False),
        bias=_grouped(node, kb, node.input(5), scores, "attention_bias", heads),
        keep=_padding(node, kb, scores, heads), projection_bias=_projection_bias(node, kb, heads, head))
    ctx.emit(kb, attention_kernel(
        kb, ctx.tiles, views, math_, parallel=worth_threads(ctx, views),
        scratch=lambda shape_, hint: kb.output(scratch_tensor(ctx, node, shape_, y.dtype, hint)).buffer))


def _key_value(node: Node) -> tuple[Tensor, Tensor]:
    k, v = node.input(1), node.input(2)
    if k is None or v is None:
        raise fail(node, "packed query/key/value (no separate key and value inputs) is not supported")
    return k, v


def _check(node: Node, q: Tensor, k: Tensor, v: Tensor, heads: int) -> None:
    if q.dtype.name != "float32":
        raise fail(node, f"dtype {q.dtype}: MultiHeadAttention is implemented for float32")
    if heads <= 0 or q.rank != 3 or q.shape[2] % heads:
        raise fail(node, f"query {list(q.shape)} must be [batch, sequence, num_heads ({heads}) x head size]")
    if k.rank not in (3, 4) or v.rank != k.rank:
        raise fail(node, f"key {list(k.shape)} and value {list(v.shape)} must both be 3-D or both 4-D")
    if len(node.outputs) > 3 and node.outputs[3] is not None:
        raise fail(node, "the qk output is not supported")
    if node.input(9) is not None:
        raise fail(node, "cache_indirection (beam search) is not supported")
    if node.input(3) is not None and node.input(6) is not None:
        raise fail(node, "a projection bias together with past_key/past_value is not supported")


def _grouped(node: Node, kb: KernelBuilder, t: Tensor | None, scores: tuple[int, ...], what: str,
             heads: int) -> View | None:
    if t is None:
        return None
    try:
        return group(kb.input(t).broadcast_to(scores), heads, 1, shared=False)
    except ValueError as e:
        raise fail(node, f"{what} {list(t.shape)} does not broadcast to {list(scores)}") from e


def _padding(node: Node, kb: KernelBuilder, scores: tuple[int, ...], heads: int) -> View | None:
    """key_padding_mask [batch, keys] as a keep mask over the scores."""
    mask = node.input(4)
    if mask is None:
        return None
    batch, _, queries, keys = scores
    if mask.shape != (batch, keys):
        raise fail(node, f"key_padding_mask {list(mask.shape)}: only the [batch, keys] = {[batch, keys]} form is "
                         "supported")
    view = View(kb.input(mask).buffer, (batch, 1, 1, keys))
    return group(view.broadcast_to(scores), heads, 1, shared=False)


def _projection_bias(node: Node, kb: KernelBuilder, heads: int, head: int) -> tuple[View, View, View] | None:
    bias = node.input(3)
    if bias is None:
        return None
    width = heads * head
    if bias.shape != (3 * width,):
        raise fail(node, f"bias {list(bias.shape)} should be [{3 * width}] (query, key and value biases)")
    buffer = kb.input(bias).buffer
    # [batch 1, kv heads, reps 1, head], one per projection
    return tuple(View(buffer, (1, heads, 1, head), (0, head, 0, 1), offset=part * width)  # type: ignore[return-value]
                 for part in range(3))
