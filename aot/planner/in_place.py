"""In-place reuse: a kernel may write its output over an input that dies at that kernel.

A pair (output param, input param) of one kernel qualifies when

* the kernel's code makes it safe, which is read from the kernel IR itself, so it holds for any
  op whatever its loop structure (elementwise chains, register-tiled Conv and Gemm whose fused
  epilogue adds a residual, a Winograd output transform ...). Sharing memory changes nothing the
  kernel computes when no load of input element e happens after a store to output element e.
  in_place_candidates proves that conservatively, from two facts it checks:

  1. each output element is stored in one run of one block only (once, or several times by
     statements of that block: a ragged register tile's overlapping last vector re-stores some
     columns), and every element is stored: every store's index (an expression of its enclosing
     loops' variables) is evaluated over all their iterations, each store counted as executed
     whatever the conditions around it; a vector store covers its lanes;
  2. every load of the input sits in a statement S of some block, a store to the output of the
     elements it loads (the same index up to a constant, inside the stored lanes) follows in the
     same block at or after S, in the same iteration, and no store of that block before S touches
     them (indices a constant apart): by 1 those stores are all of element e's, so the load comes
     first. A load in the stored value itself is evaluated before the store. (A ragged tile that
     loads the residual of its overlapping vector after storing the previous one fails here;
     aot/ops/contraction/register_tiles.py loads a row's residual before its stores.)

  Anything else (an input load with no such store, an index depending on a local, a load in a
  second pass over already stored outputs) declines the pair;
* both params are whole arena tensors of the same size and dtype (not a graph input, output or
  weight, not a slice of a Concat output), each bound by no other param of the kernel;
* the input tensor's lifetime ends at this kernel and the output's starts there. Lifetimes are
  those of storage roots, so a view (Reshape, Flatten, a Concat part) of the input read later
  keeps the input alive and rules the pair out.

The planner then treats the input and the output as one buffer (their live ranges merged), so
the lower bound it reports is the bound of the merged buffers: in-place reuse lowers the bound
itself, not only the arena. verify_in_place is the planner's own check of each pair it took, by
another route: it orders every store of the output and load of the input of the kernel's whole
run (all iterations, over-approximating conditions) and finds, per element, the last load before
the first store.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Tensor
from aot.kernel.affine import affine
from aot.kernel.ir import (
    VECTOR_DTYPES,
    Assign,
    Binary,
    Buffer,
    Const,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    Stmt,
    Store,
    Var,
    VecLoad,
    VecStore,
)
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
    readable = [(p, b) for p, b in enumerate(kernel.params) if not b.writable]
    if not readable:
        return []
    leaves: list[_Leaf] | None = None
    pairs = []
    for out_param, out in enumerate(kernel.params):
        # a kernel proven by its whole run may write a smaller output over a larger input (a
        # strided depthwise conv: each channel's output lies within the inputs it has read)
        inputs = [(p, b) for p, b in readable if b.dtype == out.dtype
                  and (b.size == out.size or (kernel.whole_run_in_place and b.size > out.size))]
        if not out.writable or not inputs:
            continue
        leaves = leaves if leaves is not None else list(_leaves(kernel.body))
        stores = [leaf for leaf in leaves if leaf.stored is not None and leaf.stored[0] == out]
        # The cheap test first: fact 2 compares index expressions, fact 1 evaluates them.
        safe = [in_param for in_param, buf in inputs if _loads_precede_their_store(leaves, buf, out)
                or (kernel.whole_run_in_place and _load_after_store(kernel, out, buf) is None)]
        if safe and _stored_once(stores, out.size):
            pairs += [(out_param, in_param) for in_param in safe]
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
            sized = out_t.nbytes == in_t.nbytes or (kernel.whole_run_in_place and out_t.nbytes < in_t.nbytes)
            if whole and alone and sized and last[in_t] == step \
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


@dataclass(frozen=True)
class _Leaf:
    """A statement that is not a loop (or an If's condition), where it sits and what it touches.

    `path`: its place in the run, outermost first: for each enclosing Loop or If, the position in
    the block and then the loop's variable or the If's branch (1 then, 2 else); last the position
    of the statement itself. Runs are ordered by these paths, lexicographically, with each Var at
    its iteration's value. `block` is the statement list holding it (by identity)."""

    loops: tuple[Loop, ...]
    path: tuple[int | Var, ...]
    block: int
    position: int
    loads: tuple[Load | VecLoad, ...]
    stored: tuple[Buffer, Expr, int] | None  # (buffer, index, lanes) of a Store / VecStore


def _leaves(body: Sequence[Stmt], loops: tuple[Loop, ...] = (), path: tuple[int | Var, ...] = ()) -> Iterator[_Leaf]:
    stack: list[tuple[Sequence[Stmt], tuple[Loop, ...], tuple[int | Var, ...]]] = [(body, loops, path)]
    while stack:
        block, loops, path = stack.pop()
        for i, s in enumerate(block):
            if isinstance(s, Loop):
                stack.append((s.body, (*loops, s), (*path, i, s.var)))
            elif isinstance(s, If):
                yield _Leaf(loops, (*path, i, 0), id(block), i, tuple(_loads(s.cond)), None)
                stack.append((s.then, loops, (*path, i, 1)))
                stack.append((s.orelse, loops, (*path, i, 2)))
            elif isinstance(s, (Store, VecStore)):
                lanes = VECTOR_DTYPES[s.value.dtype][1] if isinstance(s, VecStore) else 1
                stored = (s.buffer, s.index, lanes)
                yield _Leaf(loops, (*path, i), id(block), i, tuple(_loads(s.index, s.value)), stored)
            elif isinstance(s, Declare):
                yield _Leaf(loops, (*path, i), id(block), i, tuple(_loads(s.init)), None)
            elif isinstance(s, Assign):
                yield _Leaf(loops, (*path, i), id(block), i, tuple(_loads(s.value)), None)
            else:
                raise TypeError(f"unknown statement {type(s).__name__}")


def _stored_once(stores: Sequence[_Leaf], size: int) -> bool:
    """Whether the stores write every element of the buffer, each in one run of one block only
    (a ragged register tile's overlapping vectors store some columns twice, in one run of the
    tile's block). A kernel that leaves part of its output to another kernel is declined."""
    total = sum(_iterations(leaf.loops) * leaf.stored[2] for leaf in stores if leaf.stored is not None)
    if total < size or total > 2 * size:
        return False  # some element missed, or written far more often than once
    if len(stores) == 1 and total == size and _bijective(stores[0]):
        return True  # an elementwise loop nest: no need to enumerate its elements
    owner = np.full(size, -1, dtype=np.int64)  # element -> the block run that writes it
    runs: dict[int, int] = {}  # block -> the number of its first run (its runs numbered in a row)
    numbered = 0
    for leaf in stores:
        assert leaf.stored is not None
        starts = _evaluate(leaf.stored[1], leaf.loops)
        if starts is None:
            return False
        if leaf.block not in runs:  # a block's statements share its loops, so its runs are theirs
            runs[leaf.block] = numbered
            numbered += starts.size
        first = runs[leaf.block]
        run = np.repeat(first + np.arange(starts.size, dtype=np.int64), leaf.stored[2])
        elements = (starts.reshape(-1, 1) + np.arange(leaf.stored[2])).ravel()
        if elements.size and (elements.min() < 0 or elements.max() >= size):
            return False
        mine = owner[elements]
        if np.any((mine >= 0) & (mine != run)):
            return False
        owner[elements] = run
    return bool(np.all(owner >= 0))


def _bijective(store: _Leaf) -> bool:
    """Whether a store inside its loop nest hits each element once, read from its index: each loop
    variable a digit of a mixed-radix number (coefficients 1, e0, e0*e1, ...), lanes the lowest."""
    assert store.stored is not None
    index = affine(store.stored[1])
    if index is None or index[1] != 0:
        return False
    terms, lanes = dict(index[0]), store.stored[2]
    extents = {loop.var.name: loop.extent for loop in store.loops}
    if len(terms) != len(extents) or set(terms) != set(extents):
        return False
    expected = lanes
    for var, coefficient in sorted(terms.items(), key=lambda t: t[1]):
        if coefficient != expected:
            return False
        expected *= extents[var]
    return True


def _loads_precede_their_store(leaves: Sequence[_Leaf], buf: Buffer, out: Buffer) -> bool:
    """Whether every load of `buf` is followed, in its own block, by a store to `out` of the
    elements it loads (at the load's statement or later), with no store of the block before it
    touching them; at least one load must exist."""
    stores_by_block: dict[int, list[_Leaf]] = {}
    for leaf in leaves:
        if leaf.stored is not None and leaf.stored[0] == out:
            stores_by_block.setdefault(leaf.block, []).append(leaf)
    found = False
    for leaf in leaves:
        for load in leaf.loads:
            if load.buffer != buf:
                continue
            found = True
            lanes = load.lanes if isinstance(load, VecLoad) else 1
            block = stores_by_block.get(leaf.block, ())
            if not any(store.position >= leaf.position and _inside(load.index, lanes, *store.stored[1:])
                       for store in block if store.stored is not None):
                return False
            if not all(_apart(load.index, lanes, *store.stored[1:])
                       for store in block if store.stored is not None and store.position < leaf.position):
                return False
    return found


def _apart(index: Expr, lanes: int, store_index: Expr, store_lanes: int) -> bool:
    """Whether [index, index + lanes) and [store_index, store_index + store_lanes) are disjoint in
    every iteration (the two indices differ by a constant)."""
    a, b = affine(index), affine(store_index)
    if a is None or b is None or a[0] != b[0]:
        return False
    shift = a[1] - b[1]
    return shift >= store_lanes or shift + lanes <= 0


def _inside(index: Expr, lanes: int, store_index: Expr, store_lanes: int) -> bool:
    """Whether elements [index, index + lanes) lie within [store_index, store_index + store_lanes)
    in every iteration (the two indices differ by a constant)."""
    if index == store_index:
        return lanes <= store_lanes
    a, b = affine(index), affine(store_index)
    if a is None or b is None or a[0] != b[0]:
        return False
    shift = a[1] - b[1]
    return shift >= 0 and shift + lanes <= store_lanes


def _iterations(loops: Sequence[Loop]) -> int:
    return int(np.prod([loop.extent for loop in loops], dtype=np.int64))


def _grid(loops: Sequence[Loop]) -> dict[str, np.ndarray]:
    """Each loop variable's value over all iterations of the nest, as arrays of the nest's shape."""
    shape = [loop.extent for loop in loops]
    return {loop.var.name: np.arange(loop.extent, dtype=np.int64).reshape(
        [loop.extent if d == i else 1 for d in range(len(shape))]) * np.ones(shape, dtype=np.int64)
        for i, loop in enumerate(loops)}


def _evaluate(index: Expr, loops: Sequence[Loop]) -> np.ndarray | None:
    """An index expression's value in every iteration of `loops` (flattened), or None when it
    depends on anything but their variables and constants."""
    env = _grid(loops)
    shape = [loop.extent for loop in loops]
    value = _eval(index, env)
    return None if value is None else np.broadcast_to(value, shape).ravel()


_INDEX_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _eval(e: Expr, env: Mapping[str, np.ndarray]) -> np.ndarray | None:
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return np.asarray(e.value, dtype=np.int64)
    if isinstance(e, Var):
        return env.get(e.name)
    if not isinstance(e, Binary):
        return None
    a, b = _eval(e.a, env), _eval(e.b, env)
    if a is None or b is None:
        return None
    if e.op in _INDEX_OPS:
        return _INDEX_OPS[e.op](a, b)
    if e.op in ("div", "mod") and np.all(b != 0):
        quotient = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))  # C: truncate toward zero
        return quotient if e.op == "div" else a - b * quotient
    return None


def _loads(*exprs: Expr) -> list[Load | VecLoad]:
    found: list[Load | VecLoad] = []
    seen: set[int] = set()  # by identity: fused chains share operands, their trees are exponential
    stack = list(exprs)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (Load, VecLoad)):
            found.append(x)
        stack += [v for name in _fields(type(x)) if isinstance(v := getattr(x, name), Expr)]
    return found


@functools.cache
def _fields(kind: type) -> tuple[str, ...]:
    """The field names of an Expr class (dataclasses.fields is slow enough to matter per node)."""
    return tuple(f.name for f in dataclasses.fields(kind))


# -- the planner's check of the pairs it took ----------------------------------------------------


def verify_in_place(program: Program, pairs: Sequence[InPlace]) -> None:
    """Each pair's kernel, run over all iterations with every condition taken as true, loads no
    element of the input after storing that element of the output."""
    for pair in pairs:
        kernel = program.kernels[pair.kernel]
        out, buf = kernel.params[pair.out_param], kernel.params[pair.in_param]
        problem = _load_after_store(kernel, out, buf)
        if problem is not None:
            raise AssertionError(f"kernel {kernel.name} ({kernel.op}) writes {pair.output} over {pair.input} "
                                 f"but {problem}")


def _load_after_store(kernel: Kernel, out: Buffer, buf: Buffer) -> str | None:
    """Why sharing `out` with `buf` would change what `kernel` computes, or None."""
    events: list[tuple[np.ndarray, list[np.ndarray]]] = []  # (elements, sort keys) for loads, then stores
    kinds: list[int] = []
    for leaf in _leaves(kernel.body):
        accesses = [(load.index, load.lanes if isinstance(load, VecLoad) else 1, 0)
                    for load in leaf.loads if load.buffer == buf]
        if leaf.stored is not None and leaf.stored[0] == out:
            accesses.append((leaf.stored[1], leaf.stored[2], 1))  # after the statement's loads
        for index, lanes, kind in accesses:
            starts = _evaluate(index, leaf.loops)
            if starts is None:
                return f"an index of {'its output' if kind else 'its input'} is not computable from its loops"
            env = _grid(leaf.loops)
            keys = [np.full(starts.shape, step, dtype=np.int64) if isinstance(step, int)
                    else np.broadcast_to(env[step.name], [lp.extent for lp in leaf.loops]).ravel()
                    for step in leaf.path]
            keys.append(np.full(starts.shape, kind, dtype=np.int64))
            elements = (starts.reshape(-1, 1) + np.arange(lanes)).ravel()
            events.append((elements, [np.repeat(k, lanes) for k in keys]))
            kinds.append(kind)
    if not any(kinds) or not events:
        return None
    depth = max(len(keys) for _, keys in events)
    columns = [np.concatenate([keys[d] if d < len(keys) else np.zeros(len(e), dtype=np.int64)
                               for e, keys in events]) for d in range(depth)]
    elements = np.concatenate([e for e, _ in events])
    is_store = np.concatenate([np.full(len(e), kind, dtype=bool) for (e, _), kind in zip(events, kinds)])
    size = max(out.size, buf.size)
    if elements.min() < 0 or elements.max() >= size:
        return "an access falls outside the buffers"
    rank = np.empty(len(elements), dtype=np.int64)
    rank[np.lexsort(columns[::-1])] = np.arange(len(elements))
    first_store = np.full(size, len(elements), dtype=np.int64)
    np.minimum.at(first_store, elements[is_store], rank[is_store])
    last_load = np.full(size, -1, dtype=np.int64)
    np.maximum.at(last_load, elements[~is_store], rank[~is_store])
    late = np.nonzero(last_load > first_store)[0]
    if late.size:
        return f"loads element {int(late[0])} of the input after storing it"
    return None


# -- the kernel a pair runs ------------------------------------------------------------------------


def reading_through_output(kernel: Kernel, pairs: Sequence[tuple[int, int]]) -> Kernel:
    """`kernel` with each pair's input loaded through its output param instead (a copy; the same
    memory once the pair shares it, and every such load comes before the store over it). The
    input param is then untouched, so the output keeps its restrict / noalias: two pointers into
    one buffer would cost both (measured on ResNet-8's Winograd residual convs: 10% slower)."""
    swap = {kernel.params[in_param]: kernel.params[out_param] for out_param, in_param in pairs}
    done: dict[int, Expr] = {}

    def expr(e: Expr) -> Expr:
        # Iterative post-order, memoised by identity: fused chains are DAGs with shared operands.
        stack = [(e, False)]
        while stack:
            x, ready = stack.pop()
            if id(x) in done:
                continue
            names = [name for name in _fields(type(x)) if isinstance(getattr(x, name), Expr)]
            if not ready:
                stack.append((x, True))
                stack += [(getattr(x, name), False) for name in names]
                continue
            changes: dict[str, object] = {name: done[id(getattr(x, name))] for name in names
                                          if done[id(getattr(x, name))] is not getattr(x, name)}
            if isinstance(x, (Load, VecLoad)) and x.buffer in swap:
                changes["buffer"] = swap[x.buffer]
            done[id(x)] = dataclasses.replace(x, **changes) if changes else x  # type: ignore[type-var]
        return done[id(e)]

    def stmts(body: Sequence[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in body:
            if isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=stmts(s.body)))
            elif isinstance(s, If):
                out.append(If(expr(s.cond), stmts(s.then), stmts(s.orelse)))
            elif isinstance(s, (Store, VecStore)):
                out.append(dataclasses.replace(s, index=expr(s.index), value=expr(s.value)))
            elif isinstance(s, Declare):
                out.append(Declare(s.var, expr(s.init)))
            elif isinstance(s, Assign):
                out.append(Assign(s.var, expr(s.value)))
            else:
                raise TypeError(f"unknown statement {type(s).__name__}")
        return out

    return dataclasses.replace(kernel, body=stmts(kernel.body))
