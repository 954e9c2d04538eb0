"""Which segment to run in bands of rows, and in how many, when no choice of convolution forms
fits --max-arena (aot/planner/budget.py): the patch plans of aot/passes/row_patches.py.

Candidates are the runs of row-local nodes that start and end where one 4-D tensor alone is live
(from the first such point of each run to every later one), each in each of BAND_COUNTS bands up
to its result's height. A candidate's peak is estimated without lowering, by walking the graph
with the segment expanded into its bands: every activation from its producer to its last reader
(an elementwise node's output taking the place of an input that dies there, as fusion or an
in-place pair would), a band's tensors only within the band, S whole from the first band on
(aligned sizes, no scratch). Its cost is the graph's MACs with the bands' recomputed halos. The
cheapest candidates whose estimate fits, then those with the smallest estimates, are lowered
and planned for real with the form search on top (aot/pipeline.py); the cheapest plan that
fits wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aot.analysis import node_macs
from aot.ir.graph import Graph, Node, Tensor
from aot.lowering.forms import FORMS
from aot.passes.row_patches import Rows, Segment, band_macs, band_needs, pooled_whole, row_local
from aot.planner.memory import align_up

# The band counts tried: more than 64 bands recompute too much to be worth it, and between the
# larger counts the arena changes little.
BAND_COUNTS = (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
# Candidates lowered and planned (each with the form search on top, the costly part): the
# cheapest whose estimates fit (the cheapest plan that fits wins), then the smallest estimates.
FITTING_TRIALS = 3
SMALLEST_TRIALS = 2


@dataclass(frozen=True)
class PatchCandidate:
    segment: Segment
    count: int       # bands
    macs: int        # the whole graph's, halos included
    estimate: int    # estimated arena bytes
    recomputed: int  # the MACs the halos add

    def to_json(self, graph: Graph) -> dict[str, object]:
        nodes = self.segment.nodes(graph)
        return {"source": self.segment.source, "result": self.segment.result,
                "first_node": nodes[0].name, "last_node": nodes[-1].name,
                "nodes": len(nodes) + (self.segment.pool is not None), "bands": self.count,
                "rows": self.segment.height, "recomputed_macs": self.recomputed}


def segments(graph: Graph) -> list[Segment]:
    """Every candidate segment of `graph` (module docstring)."""
    nodes = graph.nodes
    last_use = _last_uses(graph)
    live = [t for t in graph.inputs if not t.is_constant and t in last_use]
    found: list[Segment] = []
    start: tuple[int, Tensor] | None = None  # where the current run of row-local nodes began
    for i, node in enumerate(nodes):
        single = live[0] if len(live) == 1 and live[0].rank == 4 else None
        if not row_local(node):
            start = None
        elif start is None and single is not None:
            start = (i, single)
        live = [t for t in live if last_use[t] > i]
        live += [t for t in node.outputs if t is not None and last_use.get(t, -1) > i]
        if start is None or len(live) != 1 or live[0].rank != 4 or live[0].shape[2] < 2:
            continue
        result = live[0]
        if result.consumers and all(c.op_type in FORMS for c in result.consumers):
            continue  # an elementwise op after the last node would fuse into it: end after it
        found.append(Segment(start[0], i + 1, start[1].name, result.name, result.shape[2]))
        readers = result.consumers
        if len(readers) == 1 and pooled_whole(readers[0]) and not graph.is_output(result):
            found.append(Segment(start[0], i + 1, start[1].name, result.name, result.shape[2],
                                 nodes.index(readers[0])))
    return [s for s in found if any(n.op_type in ("Conv", "MaxPool", "AveragePool") for n in s.nodes(graph))]


def _last_uses(graph: Graph) -> dict[Tensor, int]:
    last: dict[Tensor, int] = {}
    for i, node in enumerate(graph.nodes):
        for t in node.inputs:
            if t is not None and not t.is_constant:
                last[t] = i
    for t in graph.outputs:
        last[t] = len(graph.nodes)
    return last


def candidates(graph: Graph, alignment: int) -> list[PatchCandidate]:
    """Every segment in every band count, with its cost and estimated arena."""
    macs = {n: node_macs(n) for n in graph.nodes}
    total = sum(macs.values())
    last_use = _last_uses(graph)
    found = []
    for segment in segments(graph):
        own = sum(macs[n] for n in segment.nodes(graph))
        for count in [c for c in BAND_COUNTS if c <= segment.height]:
            needs = band_needs(graph, segment, count)
            if not _bands_read_rows(needs):
                continue
            cost = total - own + band_macs(graph, segment, needs, macs)
            found.append(PatchCandidate(segment, count, cost,
                                        estimate_arena(graph, segment, needs, alignment, last_use), cost - total))
    return found


def _bands_read_rows(needs: list[dict[Tensor, Rows]]) -> bool:
    """Whether every band reads at least one row of every tensor it needs (a band of output rows
    computed from padding alone, under pads taller than the kernel, cannot be cut out)."""
    return all(lo < hi for need in needs for lo, hi in need.values())


def estimate_arena(graph: Graph, segment: Segment, needs: list[dict[Tensor, Rows]], alignment: int,
                   last_use: dict[Tensor, int]) -> int:
    """The largest total of activations live at one step with `segment` in the bands whose rows
    are `needs` (band_needs; `last_use`: _last_uses of the graph), as the module docstring says."""
    walk = _Walk(graph, alignment)
    nodes = graph.nodes
    pool = segment.pool_node(graph)
    source, result = graph.tensors[segment.source], graph.tensors[segment.result]
    inside = set(segment.nodes(graph))
    for i, node in enumerate(nodes):
        if node in inside:
            if i == segment.start:
                _walk_bands(walk, graph, segment, needs, source, result, pool)
                walk.free([t for t in walk.live if t is source and last_use[t] < segment.stop])
            continue
        if node is pool:
            continue
        reused = _reused_input(node, lambda t, i=i: last_use.get(t, -1) <= i)
        if reused is not None and reused in walk.live:
            walk.live[node.outputs[0]] = walk.live.pop(reused)  # type: ignore[index]
        else:
            walk.add(t for t in node.outputs if t is not None)
        walk.free([t for t in walk.live if last_use.get(t, -1) <= i])
    return walk.peak


def _reused_input(node: Node, dies: Callable[[Tensor], bool]) -> Tensor | None:
    """The input an elementwise node's output can take the place of (fused into its producer's
    kernel, or written in place): an activation of the same shape and dtype that dies there."""
    out = node.outputs[0] if node.outputs else None
    if out is None or node.op_type not in FORMS:
        return None
    return next((t for t in node.inputs if t is not None and not t.is_constant and t.shape == out.shape
                 and t.dtype == out.dtype and dies(t)), None)


def _walk_bands(walk: _Walk, graph: Graph, segment: Segment, needs: list[dict[Tensor, Rows]], source: Tensor,
                result: Tensor, pool: Node | None) -> None:
    nodes = segment.nodes(graph)
    outer = set(walk.live)
    if pool is None:
        walk.add([result])
    else:
        walk.add(t for t in pool.outputs if t is not None)
    for need in needs:
        last = {t: i for i, n in enumerate(nodes) for t in n.inputs if t is not None and t in need}
        band_live: dict[Tensor, int] = {}
        rows = need.get(source)
        if rows is not None and rows != (0, source.shape[2]):
            band_live[source] = _band_bytes(source, rows, walk.alignment)  # its Slice
            walk.add_bytes(band_live[source])
        for i, node in enumerate(nodes):
            out = node.outputs[0]
            if out is None or out not in need:
                continue
            reused = _reused_input(node, lambda t, i=i, last=last: last.get(t, len(nodes)) <= i and t is not result)
            if reused is not None and reused in band_live and need.get(reused) == need[out]:
                band_live[out] = band_live.pop(reused)
                continue
            band_live[out] = _band_bytes(out, need[out], walk.alignment)
            walk.add_bytes(band_live[out])
            for t in [t for t in band_live if last.get(t, len(nodes)) <= i and t is not result]:
                walk.add_bytes(-band_live.pop(t))
        walk.add_bytes(-sum(band_live.values()))
    assert set(walk.live) >= outer


def _band_bytes(t: Tensor, rows: tuple[int, int], alignment: int) -> int:
    return align_up(t.nbytes // t.shape[2] * (rows[1] - rows[0]), alignment)


class _Walk:
    """Bytes live as the walk goes, and the most at any step; only arena tensors count (not
    inputs, outputs or constants)."""

    def __init__(self, graph: Graph, alignment: int) -> None:
        self.alignment = alignment
        self.outside = set(graph.inputs) | set(graph.outputs)
        self.live: dict[Tensor, int] = {}
        self.now = self.peak = 0

    def add(self, tensors: object) -> None:
        for t in tensors:  # type: ignore[attr-defined]
            if t.is_constant or t in self.outside or t in self.live:
                continue
            self.live[t] = align_up(max(t.nbytes, 1), self.alignment)
            self.add_bytes(self.live[t])

    def add_bytes(self, n: int) -> None:
        self.now += n
        self.peak = max(self.peak, self.now)

    def free(self, tensors: list[Tensor]) -> None:
        for t in tensors:
            self.now -= self.live.pop(t, 0)


def ranked(found: list[PatchCandidate], budget: int) -> list[PatchCandidate]:
    """The candidates to try for `budget`, in order: those whose estimate fits, cheapest first
    (fewer bands, then the shorter segment, on a tie); then the smallest estimates, so that the
    smallest arena named when nothing fits is one the same search reaches for that budget."""
    fitting = sorted((c for c in found if c.estimate <= budget),
                     key=lambda c: (c.macs, c.count, c.segment.stop, c.segment.start))[:FITTING_TRIALS]
    smallest = sorted(found, key=lambda c: (c.estimate, c.macs, c.count, c.segment.stop,
                                            c.segment.start))[:SMALLEST_TRIALS]
    return fitting + [c for c in smallest if c not in fitting]
