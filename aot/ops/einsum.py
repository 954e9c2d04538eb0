"""Einsum: the equation is parsed at compile time into one loop nest.

Every label of the equation becomes a loop: the output labels form the outer nest, the labels
that appear only in inputs form the reduction nest around a product of loads. A label repeated
inside one operand (`ii->i`) indexes both of its dimensions with the same loop, which is a
diagonal. Ellipsis dimensions are labels of their own, right-aligned across operands and
broadcast where an operand has size 1 (numpy's rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Assign, Declare, Expr, Stmt, const
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail

_TERM = re.compile(r"^(?:[A-Za-z]|\.\.\.)*$")


@dataclass
class EinsumPlan:
    operand_labels: list[list[str]]  # per input, one label per dimension
    output_labels: list[str]
    sizes: dict[str, int]

    @property
    def reduced_labels(self) -> list[str]:
        seen: list[str] = []
        for labels in self.operand_labels:
            for label in labels:
                if label not in self.output_labels and label not in seen:
                    seen.append(label)
        return seen


def _split_term(node: Node, term: str) -> list[str]:
    """'b...ij' -> ['b', '...', 'i', 'j']."""
    if not _TERM.match(term):
        raise fail(node, f"einsum term {term!r} has characters other than letters and one '...'")
    if term.count("...") > 1:
        raise fail(node, f"einsum term {term!r} has more than one ellipsis")
    parts: list[str] = []
    i = 0
    while i < len(term):
        if term.startswith("...", i):
            parts.append("...")
            i += 3
        else:
            parts.append(term[i])
            i += 1
    return parts


def _ellipsis_labels(count: int, total: int) -> list[str]:
    # Right-aligned across operands: an operand with fewer ellipsis dims takes the last ones.
    return [f"...{k}" for k in range(total - count, total)]


def parse_einsum(node: Node, equation: str, shapes: list[tuple[int, ...]]) -> EinsumPlan:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise fail(node, f"equation {equation!r} has {len(terms)} operands, the node {len(shapes)} inputs")
    split = [_split_term(node, t) for t in terms]
    ellipsis_ranks = []
    for parts, shape in zip(split, shapes):
        letters = len([p for p in parts if p != "..."])
        if "..." in parts:
            if letters > len(shape):
                raise fail(node, f"term {''.join(parts)!r} has more labels than its operand's rank {len(shape)}")
            ellipsis_ranks.append(len(shape) - letters)
        else:
            if letters != len(shape):
                raise fail(node, f"term {''.join(parts)!r} has {letters} labels for an operand of rank {len(shape)}")
            ellipsis_ranks.append(0)
    total_ellipsis = max(ellipsis_ranks, default=0)
    operand_labels: list[list[str]] = []
    for parts, count in zip(split, ellipsis_ranks):
        labels: list[str] = []
        for p in parts:
            labels += _ellipsis_labels(count, total_ellipsis) if p == "..." else [p]
        operand_labels.append(labels)

    # A size-1 dimension broadcasts against its label's size elsewhere (numpy's einsum does this
    # for letters as well as for ellipsis dimensions).
    sizes: dict[str, int] = {}
    for labels, shape in zip(operand_labels, shapes):
        for label, dim in zip(labels, shape):
            known = sizes.get(label, 1)
            if dim != known and 1 not in (dim, known):
                raise fail(node, f"label {label!r} has sizes {known} and {dim} in equation {equation!r}")
            sizes[label] = max(dim, known) if 0 not in (dim, known) else 0
    ellipsis_all = _ellipsis_labels(total_ellipsis, total_ellipsis)
    for label in ellipsis_all:
        sizes.setdefault(label, 1)

    if arrow:
        out_parts = _split_term(node, rhs)
        output: list[str] = []
        for p in out_parts:
            output += ellipsis_all if p == "..." else [p]
        if "..." not in out_parts and any(sizes[label] != 1 for label in ellipsis_all):
            # numpy and onnxruntime refuse this too: the ellipsis dims would vanish unsummed.
            raise fail(node, f"equation {equation!r}: inputs have ellipsis dimensions but the output has no '...'")
        letters = [p for p in output if not p.startswith("...")]
        if len(set(letters)) != len(letters):
            raise fail(node, f"output term {rhs!r} repeats a label")
        for label in letters:
            if label not in sizes:
                raise fail(node, f"output label {label!r} does not appear in any input of {equation!r}")
    else:
        # Implicit output: the ellipsis dims, then every letter used exactly once, alphabetically.
        counts: dict[str, int] = {}
        for labels in operand_labels:
            for label in labels:
                counts[label] = counts.get(label, 0) + 1
        once = sorted(label for label, n in counts.items() if n == 1 and not label.startswith("..."))
        output = ellipsis_all + once
    return EinsumPlan(operand_labels, output, sizes)


@register("Einsum")
def lower_einsum(node: Node, ctx: LoweringContext) -> None:
    equation = node.attr("equation")
    if not isinstance(equation, str):
        raise fail(node, "attribute equation is required")
    inputs: list[Tensor] = []
    for i, t in enumerate(node.inputs):
        if t is None:
            raise fail(node, f"input {i} is omitted")
        inputs.append(t)
    y = node.outputs[0]
    assert y is not None
    if not inputs:
        raise fail(node, "Einsum needs at least one input")
    if any(t.dtype != y.dtype for t in inputs):
        raise fail(node, f"inputs have dtypes {sorted({str(t.dtype) for t in inputs})}, output {y.dtype}")
    if y.dtype.kind not in "fiu":
        raise fail(node, f"dtype {y.dtype}: Einsum is implemented for numeric types")
    plan = parse_einsum(node, equation, [t.shape for t in inputs])
    out_shape = tuple(plan.sizes[label] for label in plan.output_labels)
    if out_shape != y.shape:
        raise fail(node, f"equation {equation!r} gives shape {list(out_shape)}, the output has {list(y.shape)}")
    reduced = plan.reduced_labels
    kb = ctx.builder(node)
    views = [kb.input(t) for t in inputs]
    yv = kb.output(y)
    dt = y.dtype.name

    def product(index: dict[str, Expr]) -> Expr:
        value: Expr | None = None
        for view, labels in zip(views, plan.operand_labels):
            # A size-1 dimension under a larger label is broadcast: View.index skips extent-1 dims.
            term = view.load([index[label] for label in labels])
            value = term if value is None else value * term
        assert value is not None
        return value

    def body(out_idx: list[Expr]) -> list[Stmt]:
        index = dict(zip(plan.output_labels, out_idx))
        if not reduced:
            return [yv.store(out_idx, product(index))]
        acc = kb.var("acc", dt)

        def step(red_idx: list[Expr]) -> list[Stmt]:
            return [Assign(acc, acc + product({**index, **dict(zip(reduced, red_idx))}))]

        red = kb.loops([plan.sizes[label] for label in reduced], step, prefix="r")
        return [Declare(acc, const(0, dt)), *red, yv.store(out_idx, acc)]

    ctx.emit(kb, kb.loops(list(out_shape), body))
