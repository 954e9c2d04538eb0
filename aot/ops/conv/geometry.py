"""The shape of one convolution, as the algorithms see it.

ConvGeometry is the validated node (any rank); ConvSpec is the 2-D view that the row and tile
kernels compute over (a 1-D convolution is the 2-D one with a single row), either over the input
as it is or over its zero-bordered copy (aot/ops/conv/copies.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConvSpec:
    batch: int
    channels: int
    groups: int
    group_in: int
    per_group: int
    out_channels: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    k_h: int
    k_w: int
    s_h: int
    s_w: int
    d_h: int
    d_w: int
    p_h: int
    p_w: int
    nd: int


@dataclass(frozen=True)
class ConvGeometry:
    batch: int
    channels: int
    out_channels: int
    groups: int
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]
    nd: int  # the node's spatial rank (planar() keeps it: a 1-D output has no row dimension)

    @property
    def group_in(self) -> int:
        return self.channels // self.groups

    @property
    def padded(self) -> bool:
        return any(self.pad_begin) or any(self.pad_end)

    def planar(self) -> ConvGeometry:
        """The 2-D form: a 1-D convolution gets a row dimension of height 1 (no vertical stride,
        dilation or padding)."""
        if len(self.in_spatial) != 1:
            return self
        return ConvGeometry(self.batch, self.channels, self.out_channels, self.groups, (1, *self.in_spatial),
                            (1, *self.out_spatial), (1, *self.kernel), (1, *self.strides), (1, *self.dilations),
                            (0, *self.pad_begin), (0, *self.pad_end), self.nd)

    @property
    def padded_hw(self) -> tuple[int, int]:
        """The 2-D input's height and width with its padding."""
        (in_h, in_w), (top, left), (bottom, right) = self.in_spatial, self.pad_begin, self.pad_end
        return in_h + top + bottom, in_w + left + right

    def spec(self, over_padded_copy: bool) -> ConvSpec:
        """The 2-D convolution (of a planar geometry) over its input, or over the copy of the input
        with the padding filled in (no padding left)."""
        in_h, in_w = self.padded_hw if over_padded_copy else self.in_spatial
        p_h, p_w = (0, 0) if over_padded_copy else self.pad_begin
        (out_h, out_w), (k_h, k_w) = self.out_spatial, self.kernel
        return ConvSpec(
            batch=self.batch, channels=self.channels, groups=self.groups, group_in=self.group_in,
            per_group=self.out_channels // self.groups, out_channels=self.out_channels, in_h=in_h, in_w=in_w,
            out_h=out_h, out_w=out_w, k_h=k_h, k_w=k_w, s_h=self.strides[0], s_w=self.strides[1],
            d_h=self.dilations[0], d_w=self.dilations[1], p_h=p_h, p_w=p_w, nd=self.nd)
