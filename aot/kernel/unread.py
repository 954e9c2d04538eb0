"""What a kernel declares but never reads: locals nothing reads, and parameters nothing touches.

A lowering declares a local for a value its statements may use, and simplification can remove the
use: a view drops a coordinate into a 1-element axis, so a Gather's position along it is never
read. C compilers reject such code under -Werror (unused variable 'k0', unused-but-set variable,
unused parameter 'in1'), so the C printer prints only the locals something reads, and marks the
parameters nothing reads or writes as deliberately unused. Every expression is free of side
effects (loads, arithmetic, conversions), so a local nothing reads can go with its initialiser
and its assignments, whatever it computes.

Names, not objects, decide: a name read anywhere in the kernel keeps every declaration of it.
Walks are iterative and memoised by object identity (expressions are DAGs; see let_binding.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from aot.kernel.ir import (
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Loop,
    NarrowStore,
    Stmt,
    Store,
    Var,
    VecStore,
    expr_children,
    walk_stmts,
)

# The statement fields that hold expressions.
_STMT_EXPRS: dict[type, tuple[str, ...]] = {
    Declare: ("init",), Assign: ("value",), Store: ("index", "value"), VecStore: ("index", "value"), If: ("cond",),
    NarrowStore: ("index", "value"),
}


def drop_unread_locals(body: list[Stmt]) -> list[Stmt]:
    """`body` without the Declares (and Assigns) of locals that no expression reads. Repeated
    until nothing changes: a dropped local may have been the only reader of another."""
    while True:
        unread = _declared(body) - _read_names(body)
        if not unread:
            return body
        body = _without(body, unread)


def untouched_params(params: list[Buffer], body: list[Stmt]) -> list[Buffer]:
    """The parameters that no statement of `body` loads from or stores to."""
    touched = _buffer_names(body)
    return [p for p in params if p.name not in touched]


def _declared(body: list[Stmt]) -> set[str]:
    return {s.var.name for s in walk_stmts(body) if isinstance(s, Declare)}


def _exprs(body: list[Stmt]) -> Iterator[Expr]:
    """Every expression node of the statements' expressions, each object once."""
    seen: set[int] = set()
    stack = [getattr(s, f) for s in walk_stmts(body) for f in _STMT_EXPRS.get(type(s), ())]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += expr_children(e)


def _read_names(body: list[Stmt]) -> set[str]:
    return {e.name for e in _exprs(body) if isinstance(e, Var)}


def _buffer_names(body: list[Stmt]) -> set[str]:
    loaded = {e.buffer.name for e in _exprs(body) if isinstance(getattr(e, "buffer", None), Buffer)}
    stored = {s.buffer.name for s in walk_stmts(body) if isinstance(s, (Store, VecStore))}
    return loaded | stored


def _without(body: list[Stmt], unread: set[str]) -> list[Stmt]:
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, (Declare, Assign)) and s.var.name in unread:
            continue
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_without(s.body, unread))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_without(s.then, unread), orelse=_without(s.orelse, unread))
        out.append(s)
    return out


__all__ = ["drop_unread_locals", "untouched_params"]
