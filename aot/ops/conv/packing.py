"""Conv weights repacked at compile time for the register tiles (tiled.py, winograd.py): block by
block of output channels, so that a tile's broadcasts walk memory contiguously. The packed tensor
replaces the ONNX weights in the package (same size)."""

from __future__ import annotations

import numpy as np


def pack_weights(w: np.ndarray, groups: int, rows: int) -> np.ndarray:
    """[OC, group_in, kh, kw] -> per group, per block of `rows` output channels, [K][rows]."""
    out_channels = w.shape[0]
    per_group = out_channels // groups
    flat = w.reshape(groups, per_group, -1)
    parts = []
    for g in range(groups):
        for oc0 in range(0, per_group, rows):
            parts.append(np.ascontiguousarray(flat[g, oc0:oc0 + rows].T).reshape(-1))
    return np.concatenate(parts).astype(w.dtype, copy=False)
