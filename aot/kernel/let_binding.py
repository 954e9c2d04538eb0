"""Shared and deep subexpressions of kernel statements computed once, into locals.

Fusion composes elementwise forms (aot/lowering/fusion.py), and a form may name its operand more
than once: Relu is `x < 0 ? 0 : x`. A chain of n fused Relus is an expression of O(n) objects in
memory (a DAG: each form refers to the same operand object twice), but a printer or a walker that
treats it as a tree sees 2**n nodes: 20 chained Relus were 28 MiB of C. A chain is also as deep as
it is long, and the printers recurse once per level (600 chained Negs exhausted Python's stack).

This pass runs on every kernel as it is emitted (aot/lowering/context.py: LoweringContext.emit).
For each statement it computes, into a fresh local declared just before the statement,

* a subexpression used more than once whose printed tree has more than SHARED_SIZE nodes (a
  Relu's doubly-used load or `a + b` stays inline, so ordinary kernels print as before), and
* a subexpression whose height reaches MAX_HEIGHT (so no printer or analysis recurses deeper),

so what the backends print is linear in the DAG and at most MAX_HEIGHT deep.

Hoisting evaluates a subexpression before the statement, unconditionally. C evaluates only the
chosen operand of `?:` and the right operand of `&&` / `||` when needed, and a lowering may rely
on that (a padded convolution's `inside ? x[i] : 0` must not load x[i] outside). So a
subexpression is hoisted only when the statement evaluates it unconditionally anyway, or when it
is speculation-safe: its loads provably inside their buffers from the enclosing loops' ranges
(the rule of the LLVM backend's may_fault), no integer division, no signed arithmetic on tensor
integers and no float-to-integer conversion (both undefined when out of range). Others stay
inline, printed as often as they are used (fused chains have none: each link's operand is either
evaluated unconditionally or loaded at the loop's own index).

Every walk here is iterative and memoised by object identity (Exprs compare structurally, which
would walk the tree), so the pass is linear in the size of the DAG.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Iterator

from aot.kernel.bounds import RANGE_OPS, combine
from aot.kernel.ir import (
    FLOAT_DTYPES,
    INDEX,
    VECTOR_DTYPES,
    Assign,
    Binary,
    Cast,
    Const,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    NarrowStore,
    Select,
    Stmt,
    Store,
    Unary,
    Var,
    VecLoad,
    VecStore,
    const,
)
from aot.kernel.parallel import has_parallel

# A subexpression used twice is computed once when its printed tree exceeds this many nodes.
SHARED_SIZE = 32
# A vector subexpression used more than once, from this many printed nodes: a lane-wise epilogue
# names its value in both arms of each saturating select (an int8 tile's requantisation printed
# its whole chain four times).
VECTOR_SHARED_SIZE = 4
# Subexpressions this tall are computed into a local: what a backend's recursion meets is bounded.
MAX_HEIGHT = 48
# Printed sizes are only compared with SHARED_SIZE: saturate instead of growing huge integers.
_SIZE_CAP = 1 << 30
# The statement fields that hold expressions, in evaluation order.
_STMT_EXPRS: dict[type, tuple[str, ...]] = {
    Declare: ("init",), Assign: ("value",), Store: ("index", "value"), VecStore: ("index", "value"), If: ("cond",),
    NarrowStore: ("index", "value"),
}
_FIELDS: dict[type, tuple[str, ...]] = {}  # Expr class -> names of its fields that hold expressions
_GETTERS: dict[type, Callable[[Expr], tuple[Expr, ...]]] = {}  # Expr class -> its operands, in field order
_SIGNED = {"int8", "int16", "int32", "int64"}  # tensor integers (not INDEX)
Ranges = dict[str, tuple[int, int]]  # loop counter -> (first, last) value


def bind_subexpressions(kernel: Kernel, share: frozenset[int] = frozenset()) -> Kernel:
    """The kernel with shared and deep subexpressions in locals (see the module docstring); the
    kernel itself when no statement has any. `share`: ids of nodes to compute into a local when
    used more than once whatever their size (the steps of a polynomial exp, used many times each:
    inline, one Sigmoid printed as 2 KB of C)."""
    names = _FreshNames(kernel.body)
    # A kernel with parallel loops may have no locals at its top level (aot/kernel/parallel.py):
    # a top-level statement that needs some gets them inside an always-taken `if`, a block.
    body = _block(kernel.body, names, {}, share, top_level_block=has_parallel(kernel))
    if body is kernel.body:
        return kernel
    return dataclasses.replace(kernel, body=body)


def _block(stmts: list[Stmt], names: _FreshNames, ranges: Ranges, share: frozenset[int],
           top_level_block: bool = False) -> list[Stmt]:
    """`ranges`: the loop counters in scope and the values they take."""
    out: list[Stmt] = []
    changed = False
    for s in stmts:
        if isinstance(s, Loop):
            body = _block(s.body, names, {**ranges, s.var.name: (0, s.extent - 1)}, share)
            rewritten: list[Stmt] = [s if body is s.body else dataclasses.replace(s, body=body)]
        else:
            declares, stmt = _statement(s, names, ranges, share)
            if isinstance(stmt, If):
                then, orelse = _block(stmt.then, names, ranges, share), _block(stmt.orelse, names, ranges, share)
                if then is not stmt.then or orelse is not stmt.orelse:
                    stmt = dataclasses.replace(stmt, then=then, orelse=orelse)
            if declares and top_level_block:
                rewritten = [If(const(True, "bool"), [*declares, stmt])]
            else:
                rewritten = [*declares, stmt]
        changed = changed or len(rewritten) != 1 or rewritten[0] is not s
        out += rewritten
    return out if changed else stmts


def _statement(s: Stmt, names: _FreshNames, ranges: Ranges, share: frozenset[int]) -> tuple[list[Declare], Stmt]:
    """The locals one statement needs, and the statement using them."""
    fields = _STMT_EXPRS.get(type(s), ())
    if not fields:
        return [], s
    roots = [getattr(s, f) for f in fields]
    if _too_small_to_bind(roots):
        return [], s
    declares, new_roots = _bind(roots, names, ranges, share)
    if not declares:
        return [], s
    return declares, dataclasses.replace(s, **dict(zip(fields, new_roots)))


def _bind(roots: list[Expr], names: _FreshNames, ranges: Ranges,
          share: frozenset[int]) -> tuple[list[Declare], list[Expr]]:
    """Declarations of the locals that `roots` (one statement's expressions, evaluated in order)
    need, in dependency order, and the roots rewritten to use them."""
    order = _post_order(roots)
    uses: dict[int, int] = {}
    for r in roots:
        uses[id(r)] = uses.get(id(r), 0) + 1
    for e in order:
        for child in _printed_operands(e):
            uses[id(child)] = uses.get(id(child), 0) + 1
    if not _choose(order, uses, None, share):  # nothing to bind even where anything could be hoisted
        return [], roots
    chosen = _choose(order, uses, _evaluated_anyway(roots, order) | _speculation_safe(order, ranges), share)
    if not chosen:
        return [], roots
    return _rewrite(order, chosen, names, roots)


def _choose(order: list[Expr], uses: dict[int, int], hoistable: set[int] | None, share: frozenset[int]) -> set[int]:
    """ids of the subexpressions to compute into locals, from the leaves up: a chosen one counts
    as a single node (its local) in the sizes and heights of the expressions above it. Only ids
    in `hoistable` may be chosen (None: any)."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    chosen: set[int] = set()
    for e in order:
        operands = _printed_operands(e)
        s = min(_SIZE_CAP, 1 + sum(size[id(c)] for c in operands))
        h = 1 + max((height[id(c)] for c in operands), default=0)
        if operands and (hoistable is None or id(e) in hoistable) and \
                (h >= MAX_HEIGHT or (uses[id(e)] > 1 and (s > _shared_size(e) or id(e) in share))):
            chosen.add(id(e))
            s = h = 1
        size[id(e)], height[id(e)] = s, h
    return chosen


def _rewrite(order: list[Expr], chosen: set[int], names: _FreshNames,
             roots: list[Expr]) -> tuple[list[Declare], list[Expr]]:
    new: dict[int, Expr] = {}
    declares: list[Declare] = []
    for e in order:  # operands first, so each local's declaration follows those it reads
        fields = _expr_fields(e)
        changes = {f: new[id(getattr(e, f))] for f in fields if new[id(getattr(e, f))] is not getattr(e, f)}
        rebuilt = dataclasses.replace(e, **changes) if changes else e  # type: ignore[type-var]
        if id(e) in chosen:
            local = names.var(rebuilt.dtype)
            declares.append(Declare(local, rebuilt))
            rebuilt = local
        new[id(e)] = rebuilt
    return declares, [new[id(r)] for r in roots]


# -- walks over one statement's DAG ----------------------------------------------------------------


def _expr_fields(e: Expr) -> tuple[str, ...]:
    fields = _FIELDS.get(type(e))
    if fields is None:
        fields = tuple(f.name for f in dataclasses.fields(e)  # type: ignore[arg-type]
                       if isinstance(getattr(e, f.name), Expr)) if dataclasses.is_dataclass(e) else ()
        _FIELDS[type(e)] = fields
        _GETTERS[type(e)] = operator.attrgetter(*fields) if len(fields) > 1 else \
            (lambda x, f=fields[0]: (getattr(x, f),)) if fields else (lambda x: ())
    return fields


def _operands(e: Expr) -> tuple[Expr, ...]:
    getter = _GETTERS.get(type(e))
    if getter is None:
        _expr_fields(e)
        getter = _GETTERS[type(e)]
    return getter(e)


def _printed_operands(e: Expr) -> tuple[Expr, ...]:
    """The operands, each as many times as the C printer writes it: an integer abs is
    `(a < 0 ? -a : a)`."""
    if type(e) is Unary:
        if e.op == "abs" and e.a.dtype not in FLOAT_DTYPES:
            return (e.a,) * 3
        if e.op in ("sign", "isposinf", "isneginf"):
            return (e.a,) * 2
    return _operands(e)


def _shared_size(e: Expr) -> int:
    return VECTOR_SHARED_SIZE if e.dtype in VECTOR_DTYPES else SHARED_SIZE


def _too_small_to_bind(roots: list[Expr]) -> bool:
    """Whether the expressions, printed as trees, have at most 2 * SHARED_SIZE + 1 nodes (what a
    subexpression of more than SHARED_SIZE printed twice needs) and are less than MAX_HEIGHT deep,
    so that nothing in them is to be bound. Cheap whatever the tree's size: this runs on every
    statement of every kernel, and the walk stops early."""
    limit = 2 * min(_shared_size(r) for r in roots) + 1
    size = _tree_size(roots, limit)
    return size <= limit and (size < MAX_HEIGHT or _tree_height(roots) < MAX_HEIGHT)


def _tree_size(roots: list[Expr], limit: int) -> int:
    """The number of nodes of the expressions printed as trees, or limit + 1 if more."""
    stack = list(roots)
    pop, push = stack.pop, stack.append
    count = 0
    while stack and count <= limit:
        count += 1
        e = pop()
        kind = type(e)  # the commonest kinds inline
        if kind is Binary:
            push(e.a)  # type: ignore[attr-defined]
            push(e.b)  # type: ignore[attr-defined]
        elif kind is Load:
            push(e.index)  # type: ignore[attr-defined]
        elif kind is not Var and kind is not Const:
            stack += _printed_operands(e)
    return count + len(stack)


def _tree_height(roots: list[Expr]) -> int:
    """The height of a small tree."""
    stack = [(r, 1) for r in roots]
    deepest = 0
    while stack:
        e, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += ((c, depth + 1) for c in _operands(e))
    return deepest


def _post_order(roots: Iterable[Expr]) -> list[Expr]:
    """Each distinct node (by identity) once, operands before the nodes that use them."""
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        e, operands_done = stack.pop()
        if operands_done:
            order.append(e)
            continue
        if id(e) in seen:
            continue
        seen.add(id(e))
        stack.append((e, True))
        stack += [(c, False) for c in reversed(_operands(e)) if id(c) not in seen]
    return order


def _conditional(e: Expr) -> list[Expr]:
    """The operands C evaluates only on some paths: a lazy select's branches, the right side of && / ||."""
    if isinstance(e, Select) and not e.eager:
        return [e.a, e.b]
    if isinstance(e, Binary) and e.op in ("and", "or"):
        return [e.b]
    return []


def _evaluated_anyway(roots: list[Expr], order: list[Expr]) -> set[int]:
    """ids of the nodes the statement evaluates whichever way its conditions go."""
    always = {id(r) for r in roots}
    for e in reversed(order):  # users before their operands
        if id(e) in always:
            maybe = {id(c) for c in _conditional(e)}
            always.update(id(c) for c in _operands(e) if id(c) not in maybe)
    return always


def _speculation_safe(order: list[Expr], ranges: Ranges) -> set[int]:
    """ids of the nodes that may be evaluated where the program would not: nothing below them can
    touch memory outside a buffer or be undefined."""
    safe: set[int] = set()
    bounds: dict[int, tuple[int, int] | None] = {}
    for e in order:
        bounds[id(e)] = _bounds(e, bounds, ranges)
        if _safe_by_itself(e, bounds) and all(id(c) in safe for c in _operands(e)):
            safe.add(id(e))
    return safe


def _bounds(e: Expr, known: dict[int, tuple[int, int] | None], ranges: Ranges) -> tuple[int, int] | None:
    """An inclusive range of the values of the integer expression `e`, if known (its operands'
    are in `known`)."""
    if isinstance(e, Const) and e.dtype not in FLOAT_DTYPES:
        return int(e.value), int(e.value)
    if isinstance(e, Var):
        return ranges.get(e.name)
    if isinstance(e, Binary) and e.op in RANGE_OPS and e.dtype == INDEX:
        return combine(e.op, known[id(e.a)], known[id(e.b)])
    return None


def _safe_by_itself(e: Expr, bounds: dict[int, tuple[int, int] | None]) -> bool:
    if isinstance(e, (Load, VecLoad)):
        at = bounds[id(e.index)]
        last = e.lanes - 1 if isinstance(e, VecLoad) else 0
        return at is not None and at[0] >= 0 and at[1] + last < e.buffer.size
    if isinstance(e, Binary) and e.op in ("div", "mod") and e.a.dtype not in FLOAT_DTYPES:
        return isinstance(e.b, Const) and int(e.b.value) not in (0, -1)
    if isinstance(e, (Binary, Unary)) and e.op in ("add", "sub", "mul", "neg", "abs"):
        return e.dtype not in _SIGNED  # signed overflow is undefined; index arithmetic stays in range
    if isinstance(e, Cast):
        return not (e.a.dtype in FLOAT_DTYPES and e.dtype not in FLOAT_DTYPES and e.dtype != "bool")
    return True


# -- fresh names -----------------------------------------------------------------------------------


def _stmt_exprs(body: list[Stmt]) -> Iterator[Expr]:
    stack = list(reversed(body))
    while stack:
        s = stack.pop()
        if isinstance(s, Loop):
            yield s.var
            stack += reversed(s.body)
            continue
        if isinstance(s, (Declare, Assign)):
            yield s.var
        if isinstance(s, If):
            stack += reversed(s.orelse)
            stack += reversed(s.then)
        yield from (getattr(s, f) for f in _STMT_EXPRS.get(type(s), ()))


def _names_in(body: list[Stmt]) -> set[str]:
    names: set[str] = set()
    seen: set[int] = set()
    stack = list(_stmt_exprs(body))
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Var):
            names.add(e.name)
        stack += _operands(e)
    return names


class _FreshNames:
    """Local names `let0`, `let1` ... that no variable of the kernel already has (collected when
    the first one is needed: most kernels need none)."""

    def __init__(self, body: list[Stmt]) -> None:
        self.body = body
        self.taken: set[str] | None = None
        self.count = 0

    def var(self, dtype: str) -> Var:
        if self.taken is None:
            self.taken = _names_in(self.body)
        while f"let{self.count}" in self.taken:
            self.count += 1
        name = f"let{self.count}"
        self.taken.add(name)
        return Var(name, dtype)


__all__ = ["MAX_HEIGHT", "SHARED_SIZE", "bind_subexpressions"]
