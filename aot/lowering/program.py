"""Lowering a graph into a Program: kernels in execution order and where every tensor lives."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from aot.errors import NodeError
from aot.ir.graph import Graph, Node, Tensor
from aot.ir.internal_attrs import BAND_ASSEMBLY
from aot.kernel.ir import Kernel, Load, Store
from aot.kernel.unread import untouched_params
from aot.lowering.builder import BroadcastError
from aot.lowering.concat_in_place import plan_concat_in_place
from aot.lowering.context import LoweringContext
from aot.lowering.fusion import FusionPlan, plan_fusion
from aot.lowering.registry import lowering_for
from aot.lowering.tiles import DEFAULT_TILES, TileConfig

INPUT, OUTPUT, ARENA, WEIGHT = "input", "output", "arena", "weight"


@dataclass(frozen=True)
class Storage:
    """Where a storage-root tensor lives: an input/output pointer, the arena, or the weights (the
    arena offsets are the planner's: aot/planner/arena.py)."""

    kind: str
    index: int = 0  # input/output position, or weight number


@dataclass
class Program:
    """Kernels and the storage of every tensor they bind. The lowering gives them in ONNX node
    order with no in-place pairs; the planner (aot/planner/arena.py) returns a new Program with the
    kernels in the order they run and the pairs it chose, leaving the lowered one as it was."""

    graph: Graph
    kernels: list[Kernel]
    bindings: list[list[Tensor]]  # storage-root tensor for each kernel param
    offsets: list[list[int]]      # element offset of each kernel param inside its root
    storage: dict[Tensor, Storage] = field(default_factory=dict)  # root tensor -> Storage
    weights: list[Tensor] = field(default_factory=list)
    arena_tensors: list[Tensor] = field(default_factory=list)
    # (kernel, output param, input param): the output is written over the input, which dies
    # there (decided by aot/planner/in_place.py once the kernel order is final).
    in_place: tuple[tuple[int, int, int], ...] = ()
    # The choices the lowerings made for speed, by node key (LoweringContext.choices): what a
    # shape variant of the model adopts.
    choices: tuple[tuple[Hashable, object], ...] = ()
    # For each kernel, the node whose lowering emitted it (None: a copy into a graph output), so
    # a --max-arena plan knows which node's form to change for a kernel at the peak.
    nodes: list[Node | None] = field(default_factory=list)
    # The form each node that has several was lowered in, by node key (LoweringContext.forms).
    forms: dict[str, object] = field(default_factory=dict)

    def reordered(self, order: list[int]) -> Program:
        """The same kernels run in `order` (a permutation of kernel indices)."""
        return Program(self.graph, [self.kernels[i] for i in order], [self.bindings[i] for i in order],
                       [self.offsets[i] for i in order], self.storage, self.weights, self.arena_tensors,
                       choices=self.choices, nodes=[self.nodes[i] for i in order] if self.nodes else [],
                       forms=self.forms)

    def overlapping_params(self, kernel_index: int) -> set[int]:
        """Params of one kernel whose element ranges in the same storage overlap another param's
        that is written (a Concat part copied within its own output, ...): they must not be
        declared restrict / noalias. An output written in place over an input (different tensors
        given one arena offset) shares that input's memory too, unless the kernel reads the input
        through the output's param (aot/planner/schedule.py: in_run_order), which then stays the
        buffer's only pointer."""
        kernel = self.kernels[kernel_index]
        spans = [(root, offset, offset + buf.size, buf.writable)
                 for buf, root, offset in zip(kernel.params, self.bindings[kernel_index], self.offsets[kernel_index])]
        clash: set[int] = set()
        for i, (ri, lo_i, hi_i, wi) in enumerate(spans):
            for j, (rj, lo_j, hi_j, wj) in enumerate(spans):
                if i < j and ri == rj and lo_i < hi_j and lo_j < hi_i and (wi or wj):
                    clash |= {i, j}
        pairs = self._in_place_of(kernel_index)
        untouched = set(untouched_params(kernel.params, kernel.body)) if pairs else set()
        for out_param, in_param in pairs:
            if kernel.params[in_param] not in untouched:  # the planner reads it through the output
                clash |= {out_param, in_param}
        return clash

    def _in_place_of(self, kernel_index: int) -> list[tuple[int, int]]:
        """The (output param, input param) pairs of one kernel in self.in_place."""
        return self._in_place_by_kernel.get(kernel_index, [])

    @functools.cached_property
    def _in_place_by_kernel(self) -> dict[int, list[tuple[int, int]]]:
        # Built once: looking the pairs up by a scan of in_place for every kernel was quadratic.
        index: dict[int, list[tuple[int, int]]] = {}
        for k, out_param, in_param in self.in_place:
            index.setdefault(k, []).append((out_param, in_param))
        return index


def lower_graph(graph: Graph, fuse: bool = True, tiles: TileConfig = DEFAULT_TILES,
                parallel: bool = False, conv_algorithm: str = "auto",
                preferred: Mapping[Hashable, object] | None = None,
                overrides: Mapping[str, object] | None = None) -> Program:
    """`parallel`: lowerings may mark loops that pay for splitting over threads (aot/lowering/
    parallel.py); False (the default, as `aot compile` without --parallel) for packages without
    threads, whose kernels then have none. aot/pipeline.py chooses these from the options.
    `overrides`: the forms a --max-arena plan imposes on some nodes (aot/planner/budget.py)."""
    ctx = LoweringContext(graph, tiles, parallel, conv_algorithm, preferred, overrides)
    ctx.fusion = plan_fusion(graph) if fuse else FusionPlan()
    if fuse:
        for part, whole, offset in plan_concat_in_place(graph):
            ctx.place_inside(part, whole, offset)
    for node in graph.nodes:
        if node in ctx.fusion.absorbed:
            # Part of an anchor's epilogue: the anchor's kernel runs here, at the chain's end.
            if node in ctx.fusion.last:
                _lower_node(ctx.fusion.last[node], ctx)
            continue
        if ctx.fusion.chain(node):
            continue  # lowered when its chain ends
        _lower_node(node, ctx)
    output_roots = _route_outputs(ctx)
    nodes: list[Node | None] = [*ctx.kernel_nodes, *[None] * (len(ctx.kernels) - len(ctx.kernel_nodes))]  # copies
    program = Program(graph, ctx.kernels, ctx.kernel_bindings, ctx.kernel_offsets, choices=tuple(ctx.choices),
                      nodes=nodes, forms=dict(ctx.forms))
    _assign_storage(program, output_roots)
    order = _band_copies_early(program)
    return program if order == sorted(order) else program.reordered(order)


def _band_copies_early(program: Program) -> list[int]:
    """The kernel order with each copy of a band into its gathered tensor (aot/passes/
    row_patches.py) right after the kernel that made the band, so the band dies there: the
    Concat node comes after all the bands, and so would its copies."""
    order: list[int] = []
    for k, node in enumerate(program.nodes):
        if node is None or not node.attr(BAND_ASSEMBLY, 0):
            order.append(k)
            continue
        kernel = program.kernels[k]
        parts = {root for buf, root in zip(kernel.params, program.bindings[k]) if not buf.writable}
        writers = [i for i, j in enumerate(order) if parts & _written_roots(program, j)]
        order.insert(writers[-1] + 1 if writers else len(order), k)
    return order


def _written_roots(program: Program, k: int) -> set[Tensor]:
    return {root for buf, root in zip(program.kernels[k].params, program.bindings[k]) if buf.writable}


def _lower_node(node: Node, ctx: LoweringContext) -> None:
    before = len(ctx.kernels)
    try:
        lowering_for(node.op_type, node.domain)(node, ctx)
        ctx.kernel_nodes += [node] * (len(ctx.kernels) - before)
    except BroadcastError as e:
        chain = ctx.fusion.chain(node)
        where = f" (with the fused {', '.join(repr(n.name) for n in chain)})" if chain else ""
        raise NodeError(node.describe(), f"shapes do not broadcast{where}: {e}") from e


def _route_outputs(ctx: LoweringContext) -> dict[Tensor, int]:
    """Let the kernel producing a graph output write straight into the caller's buffer; copy
    only where that is impossible (the output is an input, a constant, or listed twice).
    Returns storage root -> output position."""
    output_roots: dict[Tensor, int] = {}
    produced = {t for bindings in ctx.kernel_bindings for t in bindings}
    inputs = set(ctx.graph.inputs)
    for position, out in enumerate(ctx.graph.outputs):
        root, offset = ctx.resolve(out)
        whole = offset == 0 and root.size == out.size  # not a slice of a bigger (Concat) buffer
        if (whole and root in produced and root not in inputs and not root.is_constant
                and root not in output_roots):
            output_roots[root] = position
            continue
        dest = Tensor(f"{out.name}__out{position}", out.dtype, out.shape)
        kb = ctx.builder(None, "Copy", [f"graph output {out.name}"])
        src = kb.input(out).buffer
        dst = kb.output(dest).buffer
        ctx.emit(kb, kb.loops([out.size], lambda i, src=src, dst=dst: [Store(dst, i[0], Load(src, i[0]))]))
        output_roots[dest] = position
    return output_roots


def _assign_storage(program: Program, output_roots: dict[Tensor, int]) -> None:
    graph = program.graph
    for position, t in enumerate(graph.inputs):
        program.storage[t] = Storage(INPUT, position)
    for root, position in output_roots.items():
        program.storage[root] = Storage(OUTPUT, position)
    seen: set[Tensor] = set()
    for bindings in program.bindings:
        for t in bindings:
            if t in seen or t in program.storage:
                continue
            seen.add(t)
            if t.is_constant:
                program.storage[t] = Storage(WEIGHT, len(program.weights))
                program.weights.append(t)
            else:
                program.arena_tensors.append(t)
                program.storage[t] = Storage(ARENA)
