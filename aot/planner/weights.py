"""The byte layout of a model's weights struct: which member each weight is, at which offset.

Both backends address weights by it (the C backend by member name, the LLVM backend by byte
offset into the `<name>_weights` object), and the package's weights files (C text, or binary
bytes + assembler) lay the struct out by it, so the two agree whichever format is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.codegen.c_names import weight_member_names
from aot.ir.graph import Tensor
from aot.planner.memory import align_up

# Every member starts on a 64-byte boundary: a cache line, and the widest vector load (AVX-512).
WEIGHT_ALIGN = 64


@dataclass(frozen=True)
class WeightSlot:
    tensor: Tensor
    member: str
    offset: int  # byte offset inside the weights struct
    pad: int     # padding bytes before this member


def layout_weights(weights: list[Tensor], macro_prefix: str = "") -> tuple[list[WeightSlot], int]:
    """Byte layout of the weights struct: each member 64-byte aligned by explicit padding, and
    named after its tensor (`macro_prefix`: the model's, "TINY_CNN_", whose macros it avoids).
    The names do not change the layout: the offsets depend on the sizes alone."""
    slots = []
    offset = 0
    members = weight_member_names([t.name for t in weights], macro_prefix)
    for t, member in zip(weights, members):
        start = align_up(offset, WEIGHT_ALIGN)
        slots.append(WeightSlot(t, member, start, start - offset))
        offset = start + max(t.nbytes, t.dtype.itemsize)
    return slots, offset
