"""ONNX Attention (opset 23): Q, K, V of 4-D [batch, heads, sequence, head] or 3-D [batch, sequence,
heads x head], a bool or additive mask, is_causal (aligned to the end of a past cache), softcap,
grouped-query heads (kv heads shared by q_num_heads / kv_num_heads query heads), past_key and
past_value with present_key and present_value outputs. A query whose every key is masked gives
zeros. Lowered to aot/ops/attention/kernel.py: one kernel, no queries x keys scores in the arena.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attention.kernel import AttentionMath, AttentionViews, attention_kernel, worth_threads
from aot.ops.attrs import fail, required_input
from aot.ops.scratch import scratch_tensor


@register("Attention")
def lower_attention(node: Node, ctx: LoweringContext) -> None:
    q, k, v = (required_input(node, i, name) for i, name in enumerate(("Q", "K", "V")))
    mask, past_key, past_value = node.input(3), node.input(4), node.input(5)
    y = node.outputs[0]
    assert y is not None
    _check(node, q, k, v)
    kb = ctx.builder(node)
    heads = _heads(node, q, k, v)
    keys, values = with_past(node, ctx, kb, (k, past_key, 1), (v, past_value, 2), heads)
    batch, kv_heads, reps = q.shape[0], heads.kv, heads.q // heads.kv
    q4 = heads.split(kb.input(q), heads.q)
    queries, total = q4.shape[2], keys.shape[2]
    qv = group(q4, kv_heads, reps, shared=False)
    yv = group(heads.split(kb.output(y), heads.q), kv_heads, reps, shared=False)
    kg, vg = group(keys, kv_heads, reps, shared=True), group(values, kv_heads, reps, shared=True)
    masks = _masks(node, kb, mask, (batch, heads.q, queries, total), (kv_heads, reps))
    counts = node.input(6)
    key_counts = None
    if counts is not None:
        if counts.shape != (batch,):
            raise fail(node, f"nonpad_kv_seqlen {list(counts.shape)} should be [{batch}]")
        key_counts = View(kb.input(counts).buffer, qv.shape[:3], (1, 0, 0))
    scores_out, mode = _scores_output(node, kb, (kv_heads, reps))
    scale = node.attr("scale")
    head = q.shape[-1] if q.rank == 4 else q.shape[-1] // heads.q
    math_ = AttentionMath(scale=float(scale) if scale is not None else 1.0 / math.sqrt(head),
                          softcap=float(node.attr("softcap", 0.0)), empty_rows_zero=True,
                          mask_keys=mask.shape[-1] if mask is not None and mask.shape[-1] != total else None,
                          causal=bool(node.attr("is_causal", 0)),
                          offset=past_key.shape[2] if past_key is not None else 0,
                          window=(int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))),
                          scores_out=mode)
    views = AttentionViews(batch=qv.shape[:3], q=qv, keys_t=kg.permute([0, 1, 2, 4, 3]), v=vg, y=yv,
                           bias=masks[0], keep=masks[1], key_counts=key_counts, scores_out=scores_out)
    ctx.emit(kb, attention_kernel(
        kb, ctx.tiles, views, math_, parallel=worth_threads(ctx, views),
        scratch=lambda shape, hint: kb.output(scratch_tensor(ctx, node, shape, y.dtype, hint)).buffer))


def _check(node: Node, q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dtype.name != "float32":
        raise fail(node, f"dtype {q.dtype}: Attention is implemented for float32")
    if not (q.rank == k.rank == v.rank and q.rank in (3, 4)):
        raise fail(node, f"Q, K and V must all be 3-D or all 4-D, not {q.rank}-D, {k.rank}-D, {v.rank}-D")
    if node.input(6) is not None and node.input(4) is not None:
        raise fail(node, "nonpad_kv_seqlen cannot be combined with past_key and past_value")


# qk_matmul_output_mode -> what the kernel writes to the qk_matmul_output output.
SCORES_OUTPUT = {0: "scaled", 1: "scaled", 2: "masked", 3: "probabilities"}


def _masks(node: Node, kb: KernelBuilder, mask: Tensor | None, scores: tuple[int, int, int, int],
           groups: tuple[int, int]) -> tuple[View | None, View | None]:
    """(additive mask, bool mask) grouped by key/value head; a mask may cover fewer keys."""
    if mask is None:
        return None, None
    if mask.shape[-1] > scores[-1]:
        raise fail(node, f"attn_mask {list(mask.shape)} covers more than the {scores[-1]} keys")
    try:
        view = group(kb.input(mask).broadcast_to((*scores[:3], mask.shape[-1])), *groups, shared=False)
    except ValueError as e:
        raise fail(node, f"attn_mask {list(mask.shape)} does not broadcast to {list(scores)}") from e
    return (None, view) if mask.dtype.kind == "b" else (view, None)


def _scores_output(node: Node, kb: KernelBuilder, groups: tuple[int, int]) -> tuple[View | None, str]:
    out = node.outputs[3] if len(node.outputs) > 3 else None
    if out is None:
        return None, ""
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in SCORES_OUTPUT:
        raise fail(node, f"qk_matmul_output_mode {mode}: must be 0, 1, 2 or 3")
    return group(kb.output(out), *groups, shared=False), SCORES_OUTPUT[mode]


@dataclass(frozen=True)
class Heads:
    """Query and key/value head counts; 3-D tensors [batch, sequence, heads x head] are seen as
    [batch, heads, sequence, head], 4-D ones are that already."""
    q: int
    kv: int

    def shape(self, tensor: Tensor, heads: int) -> tuple[int, ...]:
        """The 4-D shape `split` gives `tensor`."""
        if tensor.rank == 4:
            return tensor.shape
        batch, sequence, hidden = tensor.shape
        return (batch, heads, sequence, hidden // heads)

    def split(self, view: View, heads: int) -> View:
        """A 4-D view [batch, heads, sequence, head] of a 3-D or 4-D tensor's view."""
        if len(view.shape) == 4:
            return view
        batch, sequence, hidden = view.shape
        return View(view.buffer, (batch, sequence, heads, hidden // heads), offset=view.offset).permute([0, 2, 1, 3])


def _heads(node: Node, q: Tensor, k: Tensor, v: Tensor) -> Heads:
    if q.rank == 4:
        heads = Heads(q.shape[1], k.shape[1])
    else:
        heads = Heads(int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0)))
        if heads.q <= 0 or heads.kv <= 0:
            raise fail(node, "3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        for t, h in ((q, heads.q), (k, heads.kv), (v, heads.kv)):
            if t.shape[2] % h:
                raise fail(node, f"{t.name} {list(t.shape)}: hidden size not divisible by {h} heads")
    if heads.q % heads.kv:
        raise fail(node, f"{heads.q} query heads are not a multiple of {heads.kv} key/value heads")
    return heads


def group(view: View, kv_heads: int, reps: int, shared: bool) -> View:
    """[batch, heads, ...] as [batch, kv_heads, reps, ...]: query head h is h // reps's group
    (`shared`: a key/value view of kv_heads heads, the same for every query head of a group)."""
    if shared:
        return View(view.buffer, (view.shape[0], kv_heads, reps, *view.shape[2:]),
                    (view.strides[0], view.strides[1], 0, *view.strides[2:]), view.offset)
    stride = view.strides[1]
    return View(view.buffer, (view.shape[0], kv_heads, reps, *view.shape[2:]),
                (view.strides[0], stride * reps, stride, *view.strides[2:]), view.offset)


def with_past(node: Node, ctx: LoweringContext, kb: KernelBuilder, key: tuple[Tensor, Tensor | None, int],
               value: tuple[Tensor, Tensor | None, int], heads: Heads) -> tuple[View, View]:
    """The 4-D key and value views the attention reads: K and V, or the present_key and
    present_value outputs (past then new, written first by copy kernels) where a past is given."""
    views = []
    for tensor, past, out_index in (key, value):
        present = node.outputs[out_index] if len(node.outputs) > out_index else None
        if past is None and present is None:
            views.append(heads.split(kb.input(tensor), heads.kv))
            continue
        new = heads.shape(tensor, heads.kv)
        if past is not None and (past.rank != 4 or past.shape[:2] != new[:2] or past.shape[3] != new[3]):
            raise fail(node, f"{past.name} {list(past.shape)} does not match the new keys/values {list(new)}")
        rows = (past.shape[2] if past is not None else 0) + new[2]
        shape = (new[0], new[1], rows, new[3])
        target = present if present is not None else scratch_tensor(ctx, node, shape, tensor.dtype, "present")
        if target.shape != shape:
            raise fail(node, f"{target.name} {list(target.shape)} should be {list(shape)}")
        _copy_present(node, ctx, tensor, past, target, heads)
        views.append(kb.input(target))
    return views[0], views[1]


def _copy_present(node: Node, ctx: LoweringContext, new: Tensor, past: Tensor | None, present: Tensor,
                  heads: Heads) -> None:
    """present = concat(past, new) along the sequence, as its own kernel."""
    kb = ctx.builder(node, op="Attention.present")
    out = kb.output(present)
    stmts = []
    offset = 0
    if past is not None:
        pv = kb.input(past)
        stmts += kb.loops(list(past.shape), lambda i: [out.store(i, pv.load(i))], prefix="p")
        offset = past.shape[2]
    nv = heads.split(kb.input(new), heads.kv)
    stmts += kb.loops(list(nv.shape), lambda i: [out.store([i[0], i[1], i[2] + offset, i[3]], nv.load(i))],
                      prefix="n")
    ctx.emit(kb, stmts)
