"""In-place reuse: a kernel may write its output over an input that dies at that kernel.

A pair (output param, input param) of one kernel qualifies when

* the kernel's code makes it safe, which is read from the kernel IR itself, so it holds for any
  op that lowers to such a loop (elementwise ops and their fused chains, whatever produced them):
  the body is a perfect loop nest around a single store to the output, the store index visits
  every output element exactly once (an affine map that is a bijection onto the buffer), the
  output is never loaded, and every load of the input sits in the stored value at exactly the
  store's index. So element e of the input is read, in the same statement, just before element
  e of the output is written, and never again: the two may be the same memory. A broadcast input
  is loaded at another index and is excluded by the same rule;
* both params are whole arena tensors of the same size and dtype (not a graph input, output or
  weight, not a slice of a Concat output), each bound by no other param of the kernel;
* the input tensor's lifetime ends at this kernel and the output's starts there. Lifetimes are
  those of storage roots, so a view (Reshape, Flatten, a Concat part) of the input read later
  keeps the input alive and rules the pair out.

The planner then treats the input and the output as one buffer (their live ranges merged), so
the lower bound it reports is the bound of the merged buffers: in-place reuse lowers the bound
itself, not only the arena.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aot.ir.graph import Tensor
from aot.kernel.affine import Affine, affine
from aot.kernel.ir import Declare, Expr, Kernel, Load, Loop, Store, expr_children
from aot.lowering.program import ARENA, Program


@dataclass(frozen=True)
class InPlace:
    """Kernel `kernel` writes param `out_param` (tensor `output`) over param `in_param` (tensor `input`)."""

    kernel: int
    out_param: int
    in_param: int
    output: str
    input: str


def in_place_candidates(kernel: Kernel) -> list[tuple[int, int]]:
    """(output param, input param) pairs the kernel's code allows to share memory."""
    loops: list[Loop] = []
    body = kernel.body
    while len(body) == 1 and isinstance(body[0], Loop):
        loops.append(body[0])
        body = body[0].body
    # Locals declared just before the store (aot/kernel/let_binding.py: parts of a long fused
    # chain) are computed in the same iteration, so their loads count as the stored value's.
    if not body or not isinstance(body[-1], Store) or not all(isinstance(d, Declare) for d in body[:-1]):
        return []
    store, declares = body[-1], body[:-1]
    out = store.buffer
    index = affine(store.index)
    if index is None or not _bijective(index, loops, out.size) or _loads(store.index):
        return []
    loads = _loads(store.value, *(d.init for d in declares if isinstance(d, Declare)))
    if any(load.buffer == out for load in loads):
        return []
    pairs = []
    out_param = kernel.params.index(out)
    for in_param, buf in enumerate(kernel.params):
        if buf.writable or buf.dtype != out.dtype or buf.size != out.size:
            continue
        mine = [load for load in loads if load.buffer == buf]
        if mine and all(affine(load.index) == index for load in mine):
            pairs.append((out_param, in_param))
    return pairs


def find_in_place(program: Program,
                  candidates: Mapping[int, Sequence[tuple[int, int]]] | None = None) -> list[InPlace]:
    """The in-place pairs of `program` in its current kernel order, at most one per output and per
    input tensor. `candidates` (id(kernel) -> in_place_candidates) saves re-reading kernels when
    the scheduler tries several orders."""
    first: dict[Tensor, int] = {}
    last: dict[Tensor, int] = {}
    for step, bindings in enumerate(program.bindings):
        for t in bindings:
            first.setdefault(t, step)
            last[t] = step
    found = []
    for step, kernel in enumerate(program.kernels):
        pairs = candidates[id(kernel)] if candidates is not None else in_place_candidates(kernel)
        if not pairs:
            continue
        bindings, offsets = program.bindings[step], program.offsets[step]
        used: set[int] = set()
        for out_param, in_param in pairs:
            out_t, in_t = bindings[out_param], bindings[in_param]
            if out_param in used or in_param in used or out_t is in_t:
                continue
            if any(program.storage[t].kind != ARENA for t in (out_t, in_t)):
                continue
            whole = all(offsets[p] == 0 and kernel.params[p].size == bindings[p].size for p in (out_param, in_param))
            alone = sum(1 for t in bindings if t is out_t) == 1 and sum(1 for t in bindings if t is in_t) == 1
            if whole and alone and out_t.nbytes == in_t.nbytes and last[in_t] == step \
                    and first[out_t] == step:
                used |= {out_param, in_param}
                found.append(InPlace(step, out_param, in_param, out_t.name, in_t.name))
    return found


def groups(pairs: Sequence[InPlace]) -> dict[str, str]:
    """Tensor name -> the name of the first tensor of its chain of in-place pairs (a -> b -> c all
    map to a); tensors not in any pair are absent."""
    leader: dict[str, str] = {}
    for p in pairs:  # in kernel order, so an input's leader is known before its output's
        leader[p.output] = leader.setdefault(p.input, p.input)
    return leader


# -- reading kernel IR ---------------------------------------------------------------------------


def _loads(*exprs: Expr) -> list[Load]:
    found: list[Load] = []
    seen: set[int] = set()  # by identity: fused chains share operands, their trees are exponential
    stack = list(exprs)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Load):
            found.append(x)
            stack.append(x.index)
        else:  # every operand, whatever the node (Binary, Select, the Bitcasts and MulAdds of exp ...)
            stack += expr_children(x)
    return found


def _bijective(index: Affine, loops: Sequence[Loop], size: int) -> bool:
    """Whether the loop nest's store index hits each of the buffer's `size` elements exactly once:
    each loop variable is a digit of a mixed-radix number (coefficients 1, e0, e0*e1, ...)."""
    terms, constant = index
    extents = {loop.var.name: loop.extent for loop in loops}
    if constant != 0 or len(terms) != len(loops) or set(v for v, _ in terms) != set(extents):
        return False
    expected = 1
    for var, coefficient in sorted(terms, key=lambda t: t[1]):
        if coefficient != expected:
            return False
        expected *= extents[var]
    return expected == size
