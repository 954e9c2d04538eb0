"""The stride phases of a transposed convolution, worked out at compile time.

Along one spatial dim, output o = p + s * q (phase p < s) receives input i = q + offset through
kernel tap k exactly when (p + pad_begin - k * dilation) is a multiple of s, with offset =
(p + pad_begin - k * dilation) / s. So each output phase is an ordinary stride-1 convolution of
the input with the sub-kernel of the taps that land on it: no zero-inserted input, no guarded
tap. Kernel == stride with no padding gives every phase one tap at offset 0 (a 1x1 convolution).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Phase:
    """One output phase along one dim: its taps as (kernel index, input offset), and how many
    outputs it has."""

    index: int
    taps: tuple[tuple[int, int], ...]
    outputs: int

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(off for _, off in self.taps)


def dim_phases(in_size: int, out_size: int, kernel: int, stride: int, dilation: int, pad: int) -> list[Phase]:
    """The `stride` phases of one dim, taps ordered by input offset."""
    phases = []
    for p in range(stride):
        taps = sorted(((k, (p + pad - k * dilation) // stride) for k in range(kernel)
                       if (p + pad - k * dilation) % stride == 0), key=lambda t: t[1])
        phases.append(Phase(p, tuple(taps), max(0, -(-(out_size - p) // stride))))
    return phases


def copy_padding(in_size: int, phases: list[Phase]) -> tuple[int, int]:
    """Zero rows (columns) before and after the input so that every tap of every phase, for
    q < the largest phase's output count, reads inside the copy."""
    offsets = [off for ph in phases for off in ph.offsets]
    if not offsets:
        return 0, 0
    last_q = max(ph.outputs for ph in phases) - 1
    return max(0, -min(offsets)), max(0, last_q + max(offsets) - (in_size - 1))


def column_sets(phases: list[Phase], most: int) -> list[tuple[Phase, ...]]:
    """Column phases computed by one tile: phases with the same input offsets read the same input
    vectors, so one tile holds their rows together (kernel == stride: every phase), at most `most`
    phases per tile."""
    by_offsets: dict[tuple[int, ...], list[Phase]] = {}
    for ph in phases:
        if ph.outputs:
            by_offsets.setdefault(ph.offsets, []).append(ph)
    sets = []
    for group in by_offsets.values():
        sets += [tuple(group[i:i + most]) for i in range(0, len(group), most)]
    return sets


def pack_phase(w: np.ndarray, groups: int, row_phase: Phase, columns: tuple[Phase, ...], block: int) -> np.ndarray:
    """The weights of one (row phase, column set) tile, [C, OC/groups, kh, kw] -> per group, per
    block of `block` output channels, [c][row tap][column tap][channel][column phase] (the order
    the tile's broadcasts walk, see aot/ops/conv/packing.py)."""
    channels, per_group = w.shape[0], w.shape[1]
    group_in = channels // groups
    col_taps = columns[0].taps
    sub = np.zeros((groups, per_group, len(columns), group_in, len(row_phase.taps), len(col_taps)), w.dtype)
    wg = w.reshape(groups, group_in, per_group, w.shape[2], w.shape[3])
    for ci, column in enumerate(columns):
        for th, (kh, _) in enumerate(row_phase.taps):
            for tw, (kw, _) in enumerate(column.taps):
                sub[:, :, ci, :, th, tw] = wg[:, :, :, kh, kw].transpose(0, 2, 1)
    flat = sub.reshape(groups, per_group * len(columns), -1)  # rows (channel, column phase)
    rows = block * len(columns)
    parts = [np.ascontiguousarray(flat[g, r0:r0 + rows].T).reshape(-1)
             for g in range(groups) for r0 in range(0, per_group * len(columns), rows)]
    return np.concatenate(parts)
