"""The validated shape of one ConvTranspose node (any spatial rank)."""

from __future__ import annotations

from dataclasses import dataclass

from aot.ir.graph import Node
from aot.ops.attrs import conv_operands, fail


@dataclass(frozen=True)
class TransposeGeometry:
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

    @property
    def group_in(self) -> int:
        return self.channels // self.groups

    @property
    def per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def nd(self) -> int:
        return len(self.in_spatial)


def transpose_padding(node: Node, in_spatial: tuple[int, ...], out_spatial: tuple[int, ...], kernel: list[int],
                      strides: list[int], dilations: list[int], output_padding: list[int]) -> list[int]:
    """The begin pad of each spatial dim (the end pad is whatever makes the output size).

    Per the ONNX spec: explicit `pads`, or, with auto_pad SAME_* or an output_shape, the total
    padding (full size - output size) split in half, the odd element going to the end for
    SAME_UPPER and to the beginning otherwise."""
    nd = len(in_spatial)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    full = [s * (size - 1) + op + (k - 1) * d + 1
            for size, k, s, d, op in zip(in_spatial, kernel, strides, dilations, output_padding)]
    if auto_pad == "VALID":
        return [0] * nd
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or (auto_pad == "NOTSET" and node.attr("output_shape") is not None
                                                    and node.attr("pads") is None):
        begin = []
        for f, out in zip(full, out_spatial):
            # An output larger than the full result is extended at the end (never a negative
            # begin pad): what onnxruntime and onnx's reference compute.
            total = max(0, f - out)
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begin
    if auto_pad != "NOTSET":
        raise fail(node, f"unknown auto_pad {auto_pad!r}")
    pads = list(node.attr("pads", [0] * (2 * nd)))
    if len(pads) != 2 * nd:
        raise fail(node, f"pads has {len(pads)} values, expected {2 * nd}")
    return pads[:nd]


def transpose_geometry(node: Node) -> TransposeGeometry:
    """The shape of the ConvTranspose `node`, its attributes checked against its operands."""
    x, w, bias, y, nd = conv_operands(node, "transposed convolution")
    batch, in_channels = x.shape[0], x.shape[1]
    groups = int(node.attr("group", 1))
    if groups <= 0 or w.shape[0] != in_channels or in_channels % groups:
        raise fail(node, f"W {list(w.shape)} does not fit X channels {in_channels} with group={groups}")
    out_channels = w.shape[1] * groups
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        raise fail(node, f"kernel_shape {kernel} differs from the weight shape {list(w.shape[2:])}")
    strides = list(node.attr("strides", [1] * nd))
    dilations = list(node.attr("dilations", [1] * nd))
    output_padding = list(node.attr("output_padding", [0] * nd))
    if not len(strides) == len(dilations) == len(output_padding) == nd:
        raise fail(node, f"strides/dilations/output_padding must each have {nd} values")
    in_spatial = x.shape[2:]
    if y.rank != x.rank or y.shape[:2] != (batch, out_channels):
        raise fail(node, f"output shape {list(y.shape)} should start with [{batch}, {out_channels}]")
    out_spatial = y.shape[2:]
    pad_begin = transpose_padding(node, in_spatial, out_spatial, kernel, strides, dilations, output_padding)
    if bias is not None and bias.shape != (out_channels,):
        raise fail(node, f"bias shape {list(bias.shape)} should be [{out_channels}]")
    return TransposeGeometry(batch=int(batch), channels=int(in_channels), out_channels=int(out_channels),
                             groups=groups, in_spatial=_ints(in_spatial), out_spatial=_ints(out_spatial),
                             kernel=_ints(kernel), strides=_ints(strides), dilations=_ints(dilations),
                             pad_begin=_ints(pad_begin))


def _ints(values: object) -> tuple[int, ...]:
    return tuple(int(v) for v in values)  # type: ignore[attr-defined]
