"""Patch-based execution of a segment of the network (#22; MCUNetV2's idea, in bands of rows).

A segment is a run of row-local nodes (convolutions, pools, elementwise ops, channel Concat)
between two points of the graph where one 4-D tensor alone is live: its source X and its result
S. The rewrite runs the segment once per band of S's rows, each band computing only the rows of
every tensor it needs (the halos recomputed), so one band's intermediates are live at a time,
not the whole tensors:

    for each band k of S's rows [a_k, b_k):
        X_k = Slice(X, the rows the band reads)   (none when it reads all of X)
        each node: the same op over its band, its pads cut to the band (only the bands at the
                   edges keep the top and bottom padding)
    S = Concat(S_0, ..., S_{P-1}, axis 2): one copy per band, each right after its band

When S is read only by a pool over whole planes (DS-CNN's AveragePool 25x5, GlobalAveragePool),
the pool joins the segment: each band's rows are summed (ReduceSum) into a running total, scaled
once at the end, so no band of S outlives its own.

It is a graph rewrite, so both backends, every target and the planner's checks (lifetimes,
in-place pairs, scratch) work on the result unchanged. A tensor read by several nodes of the
band is computed over the union of their rows; a reader needing fewer gets a Slice of it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Graph, Node, Tensor
from aot.ir.internal_attrs import BAND_ASSEMBLY, BAND_OF
from aot.lowering.forms import FORMS
from aot.ops.attrs import spatial_padding, window_output_size, window_steps

WINDOW_OPS = ("Conv", "MaxPool", "AveragePool")
Rows = tuple[int, int]


@dataclass(frozen=True)
class Segment:
    """Nodes graph.nodes[start:stop], reading the tensor named `source` (X) and giving the one
    named `result` (S) as the only activations live across their ends; `pool`: the position of
    the whole-plane average pool reading S that joins the segment, or None. Names and positions,
    so that the segment found in a graph can be applied to its copy."""

    start: int
    stop: int
    source: str
    result: str
    height: int  # the rows of S the bands split
    pool: int | None = None

    def nodes(self, graph: Graph) -> list[Node]:
        return graph.nodes[self.start:self.stop]

    def pool_node(self, graph: Graph) -> Node | None:
        return None if self.pool is None else graph.nodes[self.pool]


def row_local(node: Node) -> bool:
    """Whether each output row of `node` depends only on a band of rows of its 4-D inputs
    (axis 2), with its other inputs constants that do not vary along the rows."""
    outs = [t for t in node.outputs if t is not None]
    if len(outs) != 1 or node.outputs[0] is None or node.outputs[0].rank != 4 or node.domain:
        return False
    out = node.outputs[0]
    activations = [t for t in node.inputs if t is not None and not t.is_constant]
    if not activations or any(t.rank != 4 or t.shape[0] != out.shape[0] for t in activations):
        return False
    if node.op_type in WINDOW_OPS:
        return _window_local(node, activations)
    if node.op_type == "Concat":
        axis = int(node.attr("axis", 1))
        return axis in (1, -3) and all(t.shape[2:] == out.shape[2:] for t in activations)
    if node.op_type in FORMS:
        return (all(t.shape == out.shape for t in activations)
                and all(t.rank < 2 or t.shape[-2] == 1 for t in node.inputs if t is not None and t.is_constant))
    return False


def _window_local(node: Node, activations: list[Tensor]) -> bool:
    x = node.inputs[0]
    if x is None or x.is_constant or len(activations) != 1:
        return False  # run-time weights, or a constant image
    # an AveragePool's ceil window would count its padding differently once the padding is explicit
    return not (node.op_type == "AveragePool" and int(node.attr("ceil_mode", 0))
                and int(node.attr("count_include_pad", 0)))


def pooled_whole(node: Node) -> bool:
    """A pool averaging each whole plane into one value (GlobalAveragePool, or an AveragePool whose
    window is the plane, without padding)."""
    x, out = node.inputs[0] if node.inputs else None, node.outputs[0] if node.outputs else None
    if x is None or out is None or x.rank != 4 or out.shape[2:] != (1, 1):
        return False
    if node.op_type == "GlobalAveragePool":
        return True
    if node.op_type != "AveragePool" or node.attr("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
        return False
    return (list(node.attr("kernel_shape", [])) == list(x.shape[2:])
            and not any(node.attr("pads", [0] * 4)) and all(d == 1 for d in node.attr("dilations", [1, 1])))


@dataclass(frozen=True)
class Window:
    """A Conv's or pool's geometry along the rows."""

    kernel: int
    stride: int
    dilation: int
    pad_top: int
    pads_left_right: tuple[int, int]

    @property
    def extent(self) -> int:
        return (self.kernel - 1) * self.dilation + 1

    def input_rows(self, rows: Rows) -> tuple[int, int]:
        """The input rows output rows [a, b) read, before clipping to the input's rows (reaching
        into the padding)."""
        a, b = rows
        return a * self.stride - self.pad_top, (b - 1) * self.stride - self.pad_top + self.extent


def window(node: Node) -> Window:
    x = node.inputs[0]
    assert x is not None
    spatial = tuple(x.shape[2:])
    if node.op_type == "Conv":
        w = node.inputs[1]
        assert w is not None
        kernel = [int(k) for k in w.shape[2:]]
    else:
        kernel = [int(k) for k in node.attr("kernel_shape", [])]
    strides, dilations = window_steps(node, spatial)
    begin, end = spatial_padding(node, spatial, kernel, strides, dilations)
    return Window(kernel[0], strides[0], dilations[0], begin[0], (begin[1], end[1]))


def needed_rows(node: Node, rows: Rows, tensor: Tensor) -> Rows:
    """The rows of input `tensor` that `node` reads to compute its output rows `rows`."""
    if node.op_type not in WINDOW_OPS:
        return rows
    lo, hi = window(node).input_rows(rows)
    return max(0, lo), min(tensor.shape[2], hi)


def band_ranges(nodes: Sequence[Node], result: Tensor, rows: Rows) -> dict[Tensor, Rows]:
    """The rows of every activation of the segment one band computes (or reads, for the
    source) so that `result` gets `rows`: the union of what its readers need."""
    need: dict[Tensor, Rows] = {result: rows}
    for node in reversed(nodes):
        out = node.outputs[0]
        if out is None or out not in need:
            continue
        for t in node.inputs:
            if t is None or t.is_constant:
                continue
            lo, hi = needed_rows(node, need[out], t)
            if t in need:
                lo, hi = min(lo, need[t][0]), max(hi, need[t][1])
            need[t] = (lo, hi)
    return need


def bands(height: int, count: int) -> list[Rows]:
    """`height` rows in `count` bands as even as can be (the first ones one row taller)."""
    base, extra = divmod(height, count)
    out, start = [], 0
    for k in range(count):
        size = base + (1 if k < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def band_needs(graph: Graph, segment: Segment, count: int) -> list[dict[Tensor, Rows]]:
    """band_ranges of each of the `count` bands of `segment`."""
    nodes, result = segment.nodes(graph), graph.tensors[segment.result]
    return [band_ranges(nodes, result, band) for band in bands(segment.height, count)]


def band_macs(graph: Graph, segment: Segment, needs: Sequence[dict[Tensor, Rows]], macs_of: dict[Node, int]) -> int:
    """The segment's multiply-adds when run in the bands whose rows are `needs` (band_needs;
    halos recomputed): each node's MACs scaled by the rows its bands compute over its output's
    height."""
    nodes = segment.nodes(graph)
    total = 0
    for node in nodes:
        out = node.outputs[0]
        assert out is not None
        rows_done = sum(need[out][1] - need[out][0] for need in needs if out in need)
        total += macs_of.get(node, 0) * rows_done // out.shape[2]
    return total


def copied_graph(graph: Graph) -> Graph:
    """A copy of `graph` to rewrite: its own nodes and tensors, sharing the constants' data
    (weights are not copied)."""
    twin = copy.copy(graph)
    tensors = {t: Tensor(t.name, t.dtype, t.shape, t.data) for t in graph.tensors.values()}

    def mapped(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        if t not in tensors:
            tensors[t] = Tensor(t.name, t.dtype, t.shape, t.data)
        return tensors[t]

    twin.tensors = {name: tensors[t] for name, t in graph.tensors.items()}
    twin.inputs = [tensors[t] for t in graph.inputs]
    twin.outputs = [tensors[t] for t in graph.outputs]
    twin.nodes = []
    for node in graph.nodes:
        twin.add_node(Node(node.op_type, node.name, [mapped(t) for t in node.inputs],
                           [mapped(t) for t in node.outputs], dict(node.attrs), node.domain, node.opset))
    return twin


def apply_patches(graph: Graph, segment: Segment, count: int) -> None:
    """Rewrite `graph` (a copy, copied_graph) so that `segment` (found in that graph) runs in
    `count` bands of rows."""
    nodes = segment.nodes(graph)
    source, result, pool = graph.tensors[segment.source], graph.tensors[segment.result], segment.pool_node(graph)
    before, after = graph.nodes[:segment.start], graph.nodes[segment.stop:]
    if pool is not None:
        after = [n for n in after if n is not pool]
    graph.remove_nodes(nodes + ([pool] if pool is not None else []))
    writer = _BandWriter(graph, source, result)
    results = []
    total: Tensor | None = None
    for band in bands(segment.height, count):
        band_result = writer.band(nodes, band)
        if pool is None:
            results.append(band_result)
        else:
            total = writer.add_sum(pool, band_result, total)
    if pool is None:
        writer.emit(Node("Concat", nodes[-1].name, list(results), [result],
                         {"axis": 2, BAND_ASSEMBLY: 1}, "", 13))
    else:
        assert total is not None
        writer.finish_mean(pool, total)
    graph.nodes = before + writer.nodes + after
    graph.prune()


class _BandWriter:
    """Adds one band's nodes at a time (kept in `nodes` in run order)."""

    def __init__(self, graph: Graph, source: Tensor, result: Tensor) -> None:
        self.graph, self.source, self.result = graph, source, result
        self.nodes: list[Node] = []

    def emit(self, node: Node) -> Tensor:
        self.graph.add_node(node)
        self.graph.nodes.pop()  # placed by apply_patches
        self.nodes.append(node)
        out = node.outputs[0]
        assert out is not None
        return out

    def tensor(self, like: Tensor, rows: Rows, label: str) -> Tensor:
        shape = (*like.shape[:2], rows[1] - rows[0], *like.shape[3:])
        return self.graph.add_tensor(Tensor(self.graph.unique_name(f"{like.name}@{label}"), like.dtype, shape))

    def constant(self, values: list[int] | np.ndarray, hint: str) -> Tensor:
        return self.graph.add_constant(np.asarray(values, dtype=np.int64) if isinstance(values, list) else values,
                                       hint)

    def band(self, nodes: list[Node], rows: Rows) -> Tensor:
        """One band's nodes; returns its rows of S."""
        need = band_ranges(nodes, self.result, rows)
        label = f"rows{rows[0]}-{rows[1]}"
        have: dict[Tensor, tuple[Tensor, Rows]] = {self.source: (self.source, (0, self.source.shape[2]))}
        slices: dict[tuple[Tensor, Rows], Tensor] = {}
        for node in nodes:
            out = node.outputs[0]
            assert out is not None
            out_rows = need[out]
            inputs = [t if t is None or t.is_constant
                      else self._rows_of(have, slices, t, needed_rows(node, out_rows, t), label, node.name)
                      for t in node.inputs]
            band_out = self.tensor(out, out_rows, label)
            attrs = self._attrs(node, out_rows) if node.op_type in WINDOW_OPS else dict(node.attrs)
            attrs[BAND_OF] = out.name
            # the ONNX node's own name: errors and the kernels' comments point at the user's node
            self.emit(Node(node.op_type, node.name, inputs, [band_out], attrs, node.domain, node.opset))
            have[out] = (band_out, out_rows)
        return have[self.result][0]

    def _rows_of(self, have: dict[Tensor, tuple[Tensor, Rows]], slices: dict[tuple[Tensor, Rows], Tensor],
                 t: Tensor, rows: Rows, label: str, reader: str) -> Tensor:
        """Rows `rows` of the segment tensor `t`: its band when that is exactly those rows, else a
        Slice of it."""
        band, band_rows = have[t]
        if band_rows == rows:
            return band
        if (t, rows) not in slices:
            lo = rows[0] - band_rows[0]
            starts, ends = self.constant([lo], "band_start"), self.constant([lo + rows[1] - rows[0]], "band_end")
            axes = self.constant([2], "band_axis")
            slices[t, rows] = self.emit(Node("Slice", reader, [band, starts, ends, axes],
                                             [self.tensor(t, rows, label)], {}, "", 13))
        return slices[t, rows]

    def _attrs(self, node: Node, rows: Rows) -> dict[str, object]:
        """A window op's attributes for output rows `rows`: explicit pads, the top and bottom
        ones only where the band reaches the padding."""
        x, out = node.inputs[0], node.outputs[0]
        assert x is not None and out is not None
        geometry = window(node)
        lo, hi = geometry.input_rows(rows)
        top, bottom = max(0, -lo), max(0, hi - x.shape[2])
        left, right = geometry.pads_left_right
        attrs = {k: v for k, v in node.attrs.items() if k not in ("auto_pad", "pads", "ceil_mode")}
        attrs["pads"] = [top, left, bottom, right]
        if node.op_type == "Conv":
            attrs["kernel_shape"] = [int(k) for k in node.inputs[1].shape[2:]]  # type: ignore[union-attr]
        return attrs

    def add_sum(self, pool: Node, rows: Tensor, total: Tensor | None) -> Tensor:
        """The running sum over the bands of each plane (the pool's numerator so far)."""
        out = pool.outputs[0]
        assert out is not None
        partial = self.graph.add_tensor(Tensor(self.graph.unique_name(f"{out.name}@sum"), out.dtype, out.shape))
        axes = self.constant([2, 3], "band_sum_axes")
        self.emit(Node("ReduceSum", pool.name, [rows, axes], [partial], {"keepdims": 1}, "", 13))
        if total is None:
            return partial
        running = self.graph.add_tensor(Tensor(self.graph.unique_name(f"{out.name}@total"), out.dtype, out.shape))
        return self.emit(Node("Add", pool.name, [total, partial], [running], {}, "", 14))

    def finish_mean(self, pool: Node, total: Tensor) -> None:
        x, out = pool.inputs[0], pool.outputs[0]
        assert x is not None and out is not None
        scale = self.graph.add_constant(np.asarray(1.0 / (x.shape[2] * x.shape[3]), dtype=out.dtype), "band_mean")
        self.emit(Node("Mul", pool.name, [total, scale], [out], {}, "", 14))


def check_band_shapes(graph: Graph) -> None:
    """Every window op's declared output rows match what its pads and stride give (an internal
    check of the rewrite)."""
    for node in graph.nodes:
        if node.op_type not in WINDOW_OPS or "@rows" not in (node.outputs[0].name if node.outputs[0] else ""):
            continue
        x, out = node.inputs[0], node.outputs[0]
        assert x is not None and out is not None
        g = window(node)
        strides, dilations = window_steps(node, tuple(x.shape[2:]))
        kernel = [g.kernel, int(node.attrs.get("kernel_shape", [0, 0])[1])]
        begin, end = spatial_padding(node, tuple(x.shape[2:]), kernel, strides, dilations)
        got = window_output_size(node, tuple(x.shape[2:]), kernel, strides, dilations, begin, end)
        if got[0] != out.shape[2]:
            raise AssertionError(f"{node!r}: {got[0]} rows, declared {out.shape[2]}")
