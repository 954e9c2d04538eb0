"""State shared by op lowerings while a graph is turned into kernels."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from aot.ir.graph import Graph, Node, Tensor
from aot.kernel.ir import INDEX, Expr, Kernel, Stmt, const
from aot.kernel.let_binding import bind_subexpressions
from aot.kernel.transcendentals import expand_transcendentals
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.forms import ScalarFn, form_for
from aot.lowering.fusion import FusionPlan
from aot.lowering.param_roles import ParamRoles
from aot.lowering.tiles import DEFAULT_TILES, TileConfig


class Epilogue:
    """The elementwise nodes fused after an anchor (a chain, or a small DAG over the anchor's
    output such as SiLU's `Mul(x, Sigmoid(x))`: aot/lowering/fusion.py): `apply` turns the
    anchor's value at an output index into the last node's value, loading side inputs
    (residuals, scales) through the anchor's kernel builder."""

    def __init__(self, ctx: LoweringContext, chain: Sequence[Node], kb: KernelBuilder, start: Tensor) -> None:
        self.shape = start.shape
        self.inputs: list[Tensor] = []
        # Per node: its form, and each operand as the position of the DAG value it reads (0: the
        # anchor's, i: the i-th node's) or None for a side input (operands then name the tensor).
        self._steps: list[tuple[ScalarFn, list[int | None], list[Tensor]]] = []
        computed = {start: 0}
        for node in chain:
            form = form_for(node, ctx)
            assert form is not None
            slots = [computed.get(t) for t in form.inputs]
            self.inputs += [t for t, slot in zip(form.inputs, slots) if slot is None]
            self._steps.append((form.fn, slots, list(form.inputs)))
            out = node.outputs[0]
            assert out is not None
            computed[out] = len(computed)
        self._views = {t: kb.input(t).broadcast_to(self.shape) for t in self.inputs}

    def views(self) -> list[View]:
        """The side inputs' views, broadcast to the chain's shape."""
        return list(self._views.values())

    def merge_dimensions(self, groups: Sequence[Sequence[int]]) -> None:
        """Index the side inputs by the chain's dimensions merged in `groups` (builder.merge_groups)
        from now on: `apply`'s `index` is then one per group."""
        self._views = {t: v.merged(groups) for t, v in self._views.items()}

    def apply(self, value: Expr, index: Sequence[Expr] | None = None, flat_index: Expr | None = None) -> Expr:
        """`index` is the multi-dimensional output index; `flat_index` may be given instead when
        every side input is the chain's shape or a single element."""
        values = [value]
        for fn, slots, tensors in self._steps:
            args = []
            for slot, t in zip(slots, tensors):
                if slot is not None:
                    args.append(values[slot])
                elif flat_index is not None:
                    view = self._views[t]
                    args.append(view.load_flat(flat_index if t.shape == self.shape else const(0, INDEX)))
                else:
                    assert index is not None
                    args.append(self._views[t].load(list(index)))
            values.append(fn(args))
        return values[-1]


class LoweringContext:
    def __init__(self, graph: Graph, tiles: TileConfig = DEFAULT_TILES, parallel: bool = False,
                 conv_algorithm: str = "auto", preferred: Mapping[Hashable, object] | None = None,
                 overrides: Mapping[str, object] | None = None) -> None:
        self.graph = graph
        # Choices lowerings make for speed (a Conv's algorithm), by node key (see choice_key): those
        # of this lowering, and those another shape of the same model made, which its variants
        # adopt where they fit (aot/compiler.py), so that they pack the weights alike.
        self.choices: list[tuple[Hashable, object]] = []
        self.preferred: Mapping[Hashable, object] = preferred or {}
        # Forms a --max-arena plan imposes (aot/planner/budget.py), by node key (a Conv's: its
        # output's name, aot/ops/conv/lowering.py conv_key): they win over every other choice.
        self.overrides: Mapping[str, object] = overrides or {}
        self.forms: dict[str, object] = {}  # the form each of those nodes took, overridden or not
        # "auto": Winograd for the 3x3 convolutions where it pays (aot/ops/conv/winograd.py);
        # "direct": every convolution sums its taps directly.
        self.conv_algorithm = conv_algorithm
        self.tiles = tiles  # register-tile shape for the target's vector registers
        self.parallel = parallel  # whether lowerings may mark parallel loops (threads exist)
        self.kernels: list[Kernel] = []
        self.kernel_bindings: list[list[Tensor]] = []
        self.kernel_nodes: list[Node] = []  # the node each kernel was lowered for (lower_graph)
        self._alias: dict[Tensor, tuple[Tensor, int]] = {}  # view -> (tensor it lives in, element offset)
        self.kernel_offsets: list[list[int]] = []  # element offset into the root, per kernel param
        self._new_constants = 0
        # Names of the tensors lowerings make (scratch, views, folded constants): they stay out of
        # the graph, so one graph can be lowered again (for other register tiles) unchanged.
        self._new_names: set[str] = set()
        self.fusion = FusionPlan()

    def choice_key(self, node: Node, *facts: Hashable) -> Hashable:
        """The key of a choice for `node`, the same in every shape variant of the model: its op,
        how many choices for that op came before, its name, and `facts` that must agree too."""
        ordinal = sum(1 for key, _ in self.choices if isinstance(key, tuple) and key[0] == node.op_type)
        return (node.op_type, ordinal, node.name, *facts)

    # -- storage sharing -------------------------------------------------------------------
    def alias(self, view: Tensor, of: Tensor) -> None:
        """`view` is the same bytes as `of` (Reshape, Flatten, Identity ...): no kernel, no copy."""
        if view.nbytes != of.nbytes:
            raise ValueError(f"alias {view!r} of {of!r}: sizes differ")
        self._alias[view] = (of, 0)

    def place_inside(self, part: Tensor, whole: Tensor, element_offset: int) -> None:
        """`part` lives in a contiguous slice of `whole`, starting at `element_offset` (a Concat
        input written straight into its place in the Concat output)."""
        if part.dtype != whole.dtype or element_offset < 0 or element_offset + part.size > whole.size:
            raise ValueError(f"{part!r} does not fit in {whole!r} at {element_offset}")
        self._alias[part] = (whole, element_offset)

    def resolve(self, tensor: Tensor) -> tuple[Tensor, int]:
        """The tensor owning the storage `tensor` lives in, and the element offset inside it."""
        offset = 0
        while tensor in self._alias:
            tensor, step = self._alias[tensor]
            offset += step
        return tensor, offset

    def root(self, tensor: Tensor) -> Tensor:
        """The tensor that owns the storage `tensor` lives in."""
        return self.resolve(tensor)[0]

    def aliased_tensors(self) -> list[Tensor]:
        """Every tensor living in another's storage so far (views, Concat parts)."""
        return list(self._alias)

    # -- kernels ---------------------------------------------------------------------------
    def builder(self, node: Node | None, op: str | None = None, sources: list[str] | None = None) -> KernelBuilder:
        chain = self.fusion.chain(node) if node is not None else []
        if sources is None:
            sources = [node.name] if node is not None else []
            sources += [n.name for n in chain]
        if op is None:
            op = "+".join([node.op_type, *(n.op_type for n in chain)]) if node is not None else "Copy"
        kb = KernelBuilder(op, sources, self.resolve, ParamRoles(node, chain))
        kb.lane_broadcasts = self.tiles.lane_broadcasts
        kb.lanes_across_steps = self.tiles.lanes_across_steps
        return kb

    def epilogue(self, node: Node, kb: KernelBuilder) -> tuple[Tensor, Epilogue]:
        """Where `node`'s kernel stores its result (its own output, or the fused chain's last
        output) and the epilogue to apply to each value before storing it."""
        out = node.outputs[0]
        assert out is not None
        chain = self.fusion.chain(node)
        final = chain[-1].outputs[0] if chain else out
        assert final is not None
        return final, Epilogue(self, chain, kb, out)

    def emit(self, kb: KernelBuilder, body: list[Stmt]) -> None:
        if not body:
            # Nothing to compute (an empty tensor: loops over a zero extent vanish). Emitting it
            # would give a function whose parameters are all unused, which -Werror rejects; any
            # tensor it would have bound still gets storage from the kernels that read it.
            return
        # Fused chains share subexpressions (Relu names its operand twice): printed as trees they
        # would grow exponentially with the chain, so shared and deep parts go into locals.
        # float32 exp/tanh/erf/log become polynomials the compilers vectorise (no libm call in the
        # loop), whose steps go into locals.
        kernel, steps = expand_transcendentals(kb.build(f"k{len(self.kernels)}", body))
        kernel = bind_subexpressions(kernel, share=frozenset(map(id, steps)))
        self.kernels.append(kernel)
        self.kernel_bindings.append(list(kb.bindings))
        self.kernel_offsets.append(list(kb.offsets))

    def constant(self, data: np.ndarray, hint: str) -> Tensor:
        """A new compile-time constant made by a lowering (e.g. folded BatchNorm scales)."""
        data = np.require(data, requirements="C")  # keeps 0-d scalars 0-d, unlike ascontiguousarray
        self._new_constants += 1
        name = f"{hint}__aot{self._new_constants}"
        while self._name_taken(name):
            self._new_constants += 1
            name = f"{hint}__aot{self._new_constants}"
        self._new_names.add(name)
        return Tensor(name, data.dtype, tuple(data.shape), data=data)

    def new_tensor(self, hint: str, dtype: np.dtype, shape: Sequence[int]) -> Tensor:
        """A new tensor without data (scratch or a view) named `hint`, or `hint_1`, `hint_2`, ...
        when that name is taken (names must be unique: the planner keys on them)."""
        name, n = hint, 1
        while self._name_taken(name):
            name = f"{hint}_{n}"
            n += 1
        self._new_names.add(name)
        return Tensor(name, np.dtype(dtype), tuple(int(d) for d in shape))

    def _name_taken(self, name: str) -> bool:
        return name in self.graph.tensors or name in self._new_names
