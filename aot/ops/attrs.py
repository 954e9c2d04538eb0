"""Reading attributes and compile-time-constant inputs, with errors that name the node."""

from __future__ import annotations

import numpy as np

from aot.errors import NodeError
from aot.ir.graph import Node, Tensor


def fail(node: Node, message: str) -> NodeError:
    return NodeError(node.describe(), message)


def constant_input(node: Node, index: int, what: str) -> np.ndarray | None:
    """The value of an input that must be known at compile time (None if the input is omitted)."""
    t = node.input(index)
    if t is None:
        return None
    if not t.is_constant:
        sources = graph_inputs_behind(t)
        if sources:
            first = sources[0]
            where = f"is the graph input {first!r}" if first == t.name else \
                f"is computed from the graph input{'s' if len(sources) > 1 else ''} {', '.join(map(repr, sources))}"
            raise fail(node, f"input {index} ({what}, tensor {t.name!r}) must be a compile-time constant and "
                             f"{where}: give its value with --input-value {first}=... (FILE.npy, 1,2,3 or a "
                             "number)")
        raise fail(node, f"input {index} ({what}, tensor {t.name!r}) must be a compile-time constant "
                         "(an initializer or computable from initializers and shapes)")
    return t.data


def graph_inputs_behind(t: Tensor) -> list[str]:
    """The graph inputs (non-constant tensors nothing produces) whose values `t` is computed from,
    in the order first met."""
    found: list[str] = []
    seen: set[Tensor] = set()
    stack = [t]
    while stack:
        tensor = stack.pop()
        if tensor in seen or tensor.is_constant:  # Tensors hash by identity (eq=False)
            continue
        seen.add(tensor)
        if tensor.producer is None:
            found.append(tensor.name)
        else:
            stack.extend(reversed([i for i in tensor.producer.inputs if i is not None]))
    return found


def required_input(node: Node, index: int, what: str) -> Tensor:
    t = node.input(index)
    if t is None:
        raise fail(node, f"missing required input {index} ({what})")
    return t


def normalize_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise fail(node, f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def window_steps(node: Node, in_spatial: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Strides and dilations of a Conv or pool window, one per spatial dim, checked (whole numbers
    from 1). A stride longer than its padded axis leaves one output along it, wherever the next
    window would start, so it is taken as that length: the lowerings size copies by the stride
    (a stride of 2^32 on a 16-wide axis asked for 2^32 column phases)."""
    nd = len(in_spatial)
    steps = []
    for key in ("strides", "dilations"):
        values = [int(v) for v in node.attr(key, [1] * nd)]
        if len(values) != nd or any(not 1 <= v < 2**31 for v in values):
            raise fail(node, f"{key} {values} must be {nd} whole numbers from 1 to 2^31-1")
        steps.append(values)
    strides, dilations = steps
    pads = [int(p) for p in node.attr("pads", [0] * (2 * nd))] if node.attr("auto_pad", "NOTSET") in ("NOTSET", "") \
        else [0] * (2 * nd)
    if len(pads) == 2 * nd:
        extents = [size + pads[i] + pads[i + nd] for i, size in enumerate(in_spatial)]
        strides = [min(s, max(1, extent)) for s, extent in zip(strides, extents)]
    return strides, dilations


def window_output_size(node: Node, in_spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                 dilations: list[int], pad_begin: list[int], pad_end: list[int]) -> tuple[int, ...]:
    """The output extent per spatial dim of a Conv or pool window (ONNX: floor, or with a pool's
    ceil_mode ceil, and then no window that starts in the end padding)."""
    ceil_mode = int(node.attr("ceil_mode", 0)) == 1
    sizes = []
    for size, k, s, d, pb, pe in zip(in_spatial, kernel, strides, dilations, pad_begin, pad_end):
        span = size + pb + pe - ((k - 1) * d + 1)
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and out > 1 and (out - 1) * s >= size + pb:
            out -= 1
        sizes.append(out)
    return tuple(sizes)


def spatial_padding(node: Node, in_spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                    dilations: list[int]) -> tuple[list[int], list[int]]:
    """Begin and end pads per spatial dim, from `pads` or `auto_pad` (ONNX Conv/Pool rules)."""
    nd = len(in_spatial)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(node.attr("pads", [0] * (2 * nd)))
        if len(pads) != 2 * nd:
            raise fail(node, f"pads has {len(pads)} values, expected {2 * nd}")
        return pads[:nd], pads[nd:]
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small)
                end.append(total - small)
            else:
                begin.append(total - small)
                end.append(small)
        return begin, end
    raise fail(node, f"unknown auto_pad {auto_pad!r}")


def constant_ints(node: Node, index: int, what: str) -> list[int] | None:
    """An integer input that must be known at compile time (axes, pads, starts, k, split sizes)
    as a list of Python ints; None if the input is omitted."""
    value = constant_input(node, index, what)
    if value is None:
        return None
    if value.dtype.kind not in "iu":
        raise fail(node, f"input {index} ({what}) has dtype {value.dtype}; expected an integer tensor")
    return [int(v) for v in value.reshape(-1)]


def constant_scalar_int(node: Node, index: int, what: str) -> int | None:
    """A compile-time integer scalar input (CumSum axis, TopK k); None if omitted."""
    values = constant_ints(node, index, what)
    if values is None:
        return None
    if len(values) != 1:
        raise fail(node, f"input {index} ({what}) has {len(values)} values; expected a single integer")
    return values[0]


def conv_operands(node: Node, what: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor, int]:
    """X, W, optional bias, Y and the number of spatial dims of a Conv-like node (float only)."""
    x = required_input(node, 0, "X")
    w = required_input(node, 1, "W")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f":
        raise fail(node, f"input X has dtype {x.dtype}; {node.op_type} is implemented for float types")
    nd = x.rank - 2
    if nd < 1 or w.rank != x.rank:
        raise fail(node, f"X of rank {x.rank} and W of rank {w.rank} do not form a {what}")
    return x, w, node.input(2), y, nd
