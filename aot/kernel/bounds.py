"""Value ranges of integer index arithmetic: what both the let-binding pass (may a load move out
of a select's branch?) and the LLVM emitter (may a select read both sides?) need to prove a load
stays inside its buffer."""

from __future__ import annotations

Interval = tuple[int, int]  # inclusive
RANGE_OPS = ("add", "sub", "mul", "min", "max")


def combine(op: str, a: Interval | None, b: Interval | None) -> Interval | None:
    """The range of `a op b` for op in RANGE_OPS, given its operands' ranges (None: unknown)."""
    if a is None or b is None or op not in RANGE_OPS:
        return None
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    pick = min if op == "min" else max
    return pick(a[0], b[0]), pick(a[1], b[1])
