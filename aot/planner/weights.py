"""The byte layout of a model's weights struct: which member each weight is, at which offset.

Both backends address weights by it (the C backend by member name, the LLVM backend by byte
offset into the `<name>_weights` object), and the package's weights files (C text, or binary
bytes + assembler) lay the struct out by it, so the two agree whichever format is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

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


def layout_weights(weights: list[Tensor], macro_prefix: str | tuple[str, ...] = "") -> tuple[list[WeightSlot], int]:
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


@dataclass(frozen=True)
class SharedWeights:
    """One weights struct for several models (a multi-model package, shape variants): a weight
    whose dtype, shape and bytes another model already has is stored once, in that model's member."""

    slots: list[WeightSlot]                  # the struct's members, in layout order
    struct_bytes: int
    per_model: list[dict[Tensor, WeightSlot]]  # for each model: its weight tensors' members


def layout_shared_weights(weight_lists: list[list[Tensor]],
                          macro_prefix: str | tuple[str, ...] = "") -> SharedWeights:
    """The weights struct of several models. Weights are merged only across models, never within
    one, so a one-model package has the layout layout_weights gives it."""
    if len(weight_lists) == 1:  # nothing to merge: no need to hash every weight's bytes
        slots, struct_bytes = layout_weights(weight_lists[0], macro_prefix)
        return SharedWeights(slots, struct_bytes, [{s.tensor: s for s in slots}])
    stored: list[Tensor] = []
    owners: dict[tuple[str, tuple[int, ...], bytes], list[int]] = {}  # content -> stored indices
    chosen: list[dict[Tensor, int]] = []
    for weights in weight_lists:
        mine: dict[Tensor, int] = {}
        used: set[int] = set()
        for t in weights:
            key = _content_key(t)
            reuse = next((i for i in owners.get(key, []) if i not in used), None)
            if reuse is None:
                reuse = len(stored)
                stored.append(t)
                owners.setdefault(key, []).append(reuse)
            used.add(reuse)
            mine[t] = reuse
        chosen.append(mine)
    slots, struct_bytes = layout_weights(stored, macro_prefix)
    per_model = [{t: slots[i] for t, i in mine.items()} for mine in chosen]
    return SharedWeights(slots, struct_bytes, per_model)


def _content_key(t: Tensor) -> tuple[str, tuple[int, ...], bytes]:
    digest = hashlib.sha256()
    if t.data is not None:
        digest.update(np.ascontiguousarray(np.asarray(t.data, dtype=t.dtype)).view(np.uint8).reshape(-1))
    return t.dtype.name, tuple(t.shape), digest.digest()
