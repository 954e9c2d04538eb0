"""State shared by op lowerings while a graph is turned into kernels."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, Tensor
from aot.kernel.ir import Kernel, Stmt
from aot.lowering.builder import KernelBuilder


class LoweringContext:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.kernels: list[Kernel] = []
        self.kernel_bindings: list[list[Tensor]] = []
        self._alias: dict[int, Tensor] = {}
        self._new_constants = 0

    # -- storage sharing -------------------------------------------------------------------
    def alias(self, view: Tensor, of: Tensor) -> None:
        """`view` is the same bytes as `of` (Reshape, Flatten, Identity ...): no kernel, no copy."""
        if view.nbytes != of.nbytes:
            raise ValueError(f"alias {view!r} of {of!r}: sizes differ")
        self._alias[id(view)] = self.root(of)

    def root(self, tensor: Tensor) -> Tensor:
        """The tensor that owns the storage `tensor` lives in."""
        return self._alias.get(id(tensor), tensor)

    def is_alias(self, tensor: Tensor) -> bool:
        return id(tensor) in self._alias

    # -- kernels ---------------------------------------------------------------------------
    def builder(self, node: Node | None, op: str | None = None, sources: list[str] | None = None) -> KernelBuilder:
        if sources is None:
            sources = [node.name] if node is not None else []
        if op is None:
            op = node.op_type if node is not None else "Copy"
        return KernelBuilder(op, sources, self.root)

    def emit(self, kb: KernelBuilder, body: list[Stmt]) -> None:
        if not body:
            # Nothing to compute (an empty tensor: loops over a zero extent vanish). Emitting it
            # would give a function whose parameters are all unused, which -Werror rejects; any
            # tensor it would have bound still gets storage from the kernels that read it.
            return
        kernel = kb.build(f"k{len(self.kernels)}", body)
        self.kernels.append(kernel)
        self.kernel_bindings.append(list(kb.bindings))

    def constant(self, data: np.ndarray, hint: str) -> Tensor:
        """A new compile-time constant made by a lowering (e.g. folded BatchNorm scales)."""
        data = np.require(data, requirements="C")  # keeps 0-d scalars 0-d, unlike ascontiguousarray
        self._new_constants += 1
        name = f"{hint}__aot{self._new_constants}"
        while name in self.graph.tensors:
            self._new_constants += 1
            name = f"{hint}__aot{self._new_constants}"
        return self.graph.add_tensor(Tensor(name, data.dtype, tuple(data.shape), data=data))
