"""Index expressions of the kernel IR as affine forms: sum(coefficient * variable) + constant."""

from __future__ import annotations

from aot.kernel.ir import Binary, Const, Expr, Var

Affine = tuple[tuple[tuple[str, int], ...], int]  # ((loop variable, coefficient), ...), constant


def affine(e: Expr) -> Affine | None:
    """An index expression as sum(coefficient * variable) + constant, or None if it is not one."""
    terms = _terms(e)
    if terms is None:
        return None
    constant = terms.pop("", 0)
    return tuple(sorted((v, c) for v, c in terms.items() if c != 0)), constant


def _terms(e: Expr) -> dict[str, int] | None:
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {"": e.value}
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _terms(e.a), _terms(e.b)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if set(a) == {""}:
                a, b = b, a
            if set(b) != {""}:
                return None  # a product of variables is not affine
            return {v: c * b[""] for v, c in a.items()}
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for v, c in b.items():
            out[v] = out.get(v, 0) + sign * c
        return out
    return None


def offset_form(e: Expr) -> tuple[tuple[tuple[int, str], ...], int]:
    """`e` as (its non-constant addends, a constant): the addends of a sum, each with its sign,
    whatever they are (divisions too), and the constants summed. Two indices with the same
    addends differ by the difference of their constants whatever the variables hold."""
    terms: list[tuple[int, str]] = []
    constant = 0
    pending: list[tuple[int, Expr]] = [(1, e)]
    while pending:
        sign, x = pending.pop()
        if isinstance(x, Binary) and x.op in ("add", "sub"):
            pending += [(sign, x.a), (sign if x.op == "add" else -sign, x.b)]
        elif isinstance(x, Const) and isinstance(x.value, int) and not isinstance(x.value, bool):
            constant += sign * x.value
        else:
            terms.append((sign, repr(x)))
    return tuple(sorted(terms)), constant
