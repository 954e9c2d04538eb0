"""Flat loops over elements written out in vectors for targets whose compilers leave them scalar.

armv7 NEON's compilers vectorise no float loop by themselves (gcc without
-funsafe-math-optimizations, LLVM without fast-math flags: NEON flushes denormals), so an int8
kernel that requantises element by element (a residual Add between two int8 tensors: dequantise
both, add, divide by the output's scale, round, clamp) ran as scalar VFP code, about 28
instructions per element. Written as NarrowStores of 4 lanes it runs the same arithmetic on
NEON, the division still one exact division per lane.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.kernel.ir import INDEX, Expr, Stmt, const
from aot.kernel.vectorize import narrowed_store
from aot.lowering.builder import KernelBuilder

Element = Callable[[Expr], Stmt]  # the store of element i


def requantising_loop(kb: KernelBuilder, count: int, lanes: int, element: Element) -> list[Stmt]:
    """element(i) for i in [0, count): where `lanes` > 1 and the store has a vector form (a float or
    int32 value converted to int8 or uint8, narrowed_store), the last `count % lanes` elements
    one by one, then the rest as vector stores of `lanes` elements; else one scalar loop. The
    tail is scalar rather than an overlapping last vector: the output may be an input too (an
    Add in place), whose elements must be read before they are written."""
    full, rest = divmod(count, lanes)
    if lanes <= 1 or full == 0 or narrowed_store(element(const(0, INDEX)), element(const(1, INDEX)), lanes) is None:
        return kb.loops([count], lambda i: [element(i[0])])

    def vector(i: Expr) -> Stmt:
        stored = narrowed_store(element(i), element(i + 1), lanes)
        assert stored is not None  # (element 0's store had a vector form: every element's has)
        return stored

    tail = kb.loops([rest], lambda i: [element(i[0] + full * lanes)]) if rest else []
    return tail + kb.loops([full], lambda i: [vector(i[0] * lanes)])
