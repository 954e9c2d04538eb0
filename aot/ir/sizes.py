"""Element counts and byte sizes of shapes, in Python integers.

A product of dimensions taken in int64 (numpy's np.prod) wraps silently: 2^31 x 2^31 x 8 is 0
in int64, and a tensor of that shape would compile to a 0-byte buffer and no kernel. Every size
of a shape goes through here, where Python's integers cannot overflow, and is checked against
MAX_ELEMENTS before anything is allocated or generated for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Index arithmetic in generated code is 32-bit (the kernel IR's indices are int32).
MAX_ELEMENTS = 2**31 - 1


def element_count(shape: Iterable[int]) -> int:
    """The number of elements of `shape` (1 for a scalar), exact for any dimensions."""
    return math.prod(int(d) for d in shape)


def too_many_elements(shape: Iterable[int]) -> str | None:
    """Why a tensor of `shape` cannot be compiled, or None if its size is within the limit."""
    dims = [int(d) for d in shape]
    count = element_count(dims)
    if count > MAX_ELEMENTS:
        return (f"shape {'x'.join(map(str, dims))} has {count} elements, "
                f"more than the supported {MAX_ELEMENTS} (2^31-1)")
    return None
