"""Resize (opsets 10 to 19) and Upsample (opsets 7 to 9).

Resize is separable: along each resized axis, output position o reads a few input positions
with weights, and the N-d result is the sum over every combination of per-axis taps of the
product of their weights. Shapes are static and scales/sizes/roi must be constants, so the
per-axis taps (input offsets, already multiplied by the axis stride) and their weights are
computed here once, in float64, and stored as constant tables; the kernel only gathers and
accumulates. Nearest mode needs one tap and no weights: a pure gather, exact for any dtype.

The coordinate mapping, tap selection and coefficients follow the ONNX specification (the
vectorised reference, onnx/reference/ops/op_resize.py): coordinate_transformation_mode,
nearest_mode roundings, linear and cubic (cubic_coeff_a, exclude_outside), antialias filters
widened by 1/scale when downsampling, edge clamping, and tf_crop_and_resize's roi and
extrapolation_value. Before opset 11 (Upsample, Resize-10) coordinates are asymmetric and nearest
rounds down when upsampling and up when downsampling along an axis, as onnxruntime does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Assign, Buffer, Declare, Expr, Load, Stmt, cast, const, logical_or, select
from aot.lowering.builder import contiguous_strides
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import constant_input, fail, normalize_axis, required_input

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class ResizeParams:
    mode: str  # nearest, linear, cubic
    coordinate_mode: str
    nearest_mode: str  # one of NEAREST_MODES, or "legacy" (before opset 11)
    cubic_coeff_a: float
    exclude_outside: bool
    antialias: bool
    extrapolation_value: float


@dataclass
class AxisTable:
    """Taps of one resized axis: input index and weight of tap k for output position o."""

    index: np.ndarray  # (out, taps) int64, inside [0, in)
    weight: np.ndarray | None  # (out, taps) float64; None for nearest (one tap of weight 1)
    extrapolated: np.ndarray | None  # (out,) bool: output positions tf_crop_and_resize fills


# -- coefficients (ratio in (0, 1]: distance from the tap left of the sample point) ---------------

def _linear(ratio: float, scale: float, antialias: bool) -> np.ndarray:
    if not antialias:
        return np.array([1.0 - ratio, ratio])
    scale = min(scale, 1.0)  # the filter widens only when downsampling
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    coeffs = np.clip(1 - np.abs(args), 0, 1)
    return coeffs / coeffs.sum()


def _cubic(ratio: float, scale: float, antialias: bool, a: float) -> np.ndarray:
    if not antialias:
        r1, r0 = ratio + 1, 1 - ratio
        return np.array([
            ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
            ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * r0 - (a + 3)) * r0 * r0 + 1,
            ((a * (r0 + 1) - 5 * a) * (r0 + 1) + 8 * a) * (r0 + 1) - 4 * a,
        ])
    scale = min(scale, 1.0)

    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    start = int(np.floor(-2 / scale) + 1)
    coeffs = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
    return coeffs / coeffs.sum()


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float,
                       roi: tuple[float, float]) -> np.ndarray:
    """Where each output position samples the input (float64), per coordinate_transformation_mode."""
    y = np.arange(out_size, dtype=np.float64)
    out_width = scale * in_size  # the unrounded output length
    if mode == "align_corners":
        return np.zeros(out_size) if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        # roi is float32 data: its width and the crop start (start * (length - 1)) are float32
        # computations in the reference, which decides ties of nearest rounding.
        start, end = np.float32(roi[0]), np.float32(roi[1])
        width = float(end - start)
        if out_width == 1:
            x = np.full(out_size, width * (in_size - 1) / 2)
        else:
            x = y * width * (in_size - 1) / (out_width - 1)
        return x + float(start * np.float32(in_size - 1))
    if mode == "pytorch_half_pixel":
        return np.full(out_size, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    raise ValueError(mode)


def axis_table(p: ResizeParams, in_size: int, out_size: int, scale: float, roi: tuple[float, float]) -> AxisTable:
    x = source_coordinates(p.coordinate_mode, out_size, in_size, scale, roi)
    extrapolated = None
    if p.coordinate_mode == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_size - 1)
        extrapolated = outside if outside.any() else None
    floor = np.floor(x)
    if p.mode == "nearest":
        frac = x - floor
        if p.nearest_mode == "legacy":
            pick = np.ceil(x) if scale < 1 else floor
        elif p.nearest_mode == "round_prefer_floor":
            pick = np.where(frac <= 0.5, floor, floor + 1)
        elif p.nearest_mode == "round_prefer_ceil":
            pick = np.where(frac < 0.5, floor, floor + 1)
        elif p.nearest_mode == "floor":
            pick = floor
        else:
            pick = np.ceil(x)
        index = np.clip(pick.astype(np.int64), 0, in_size - 1)[:, None]
        return AxisTable(index, None, extrapolated)

    coeff: Callable[[float], np.ndarray]
    if p.mode == "linear":
        def coeff(r: float) -> np.ndarray:
            return _linear(r, scale, p.antialias)
    else:
        def coeff(r: float) -> np.ndarray:
            return _cubic(r, scale, p.antialias, p.cubic_coeff_a)
    # The tap left of the sample point; at an integer point the point itself is the right tap.
    ratio = np.where(x == floor, 1.0, x - floor)
    weight = np.stack([coeff(float(r)) for r in ratio])
    taps = weight.shape[1]
    # The `taps` input positions nearest to x, ties to the smaller index (edge-padded indexing).
    pad = int(math.ceil(taps / 2))
    x_pad = x + pad
    p_pad = np.floor(x_pad)
    frac = x_pad - p_pad
    if taps % 2 == 0:
        shift = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        base = -((taps - 1) // 2)
        shift = np.where(frac <= 0.5, base, base + 1)
    index = (p_pad.astype(np.int64) + shift)[:, None] + np.arange(taps)[None, :] - pad
    if p.exclude_outside:
        weight = np.where((index < 0) | (index >= in_size), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return AxisTable(np.clip(index, 0, in_size - 1), weight, extrapolated)


# -- reading the node -----------------------------------------------------------------------------

def _floats(node: Node, index: int, what: str) -> list[float] | None:
    value = constant_input(node, index, what)
    if value is None or value.size == 0:
        return None
    return [float(v) for v in value.reshape(-1)]


def _params(node: Node, legacy: bool) -> ResizeParams:
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic") or (legacy and mode == "cubic"):
        raise fail(node, f"unsupported mode {mode!r}")
    coordinate_mode = "asymmetric" if legacy else node.attr("coordinate_transformation_mode", "half_pixel")
    if coordinate_mode not in COORDINATE_MODES:
        raise fail(node, f"unknown coordinate_transformation_mode {coordinate_mode!r}")
    nearest_mode = "legacy" if legacy else node.attr("nearest_mode", "round_prefer_floor")
    if not legacy and nearest_mode not in NEAREST_MODES:
        raise fail(node, f"unknown nearest_mode {nearest_mode!r}")
    antialias = bool(node.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise fail(node, "antialias applies to linear and cubic modes only")
    return ResizeParams(mode, coordinate_mode, nearest_mode, float(node.attr("cubic_coeff_a", -0.75)),
                        bool(node.attr("exclude_outside", 0)), antialias,
                        float(node.attr("extrapolation_value", 0.0)))


def _scales_and_roi(node: Node, x: Tensor, legacy: bool,
                    params: ResizeParams) -> tuple[list[float], list[tuple[float, float]]]:
    """Per input axis: the scale the coordinate mapping divides by, and the roi (start, end)."""
    rank = x.rank
    if node.op_type == "Upsample" and node.opset < 9:
        scales = [float(s) for s in node.attr("scales", [])] or None
        sizes = None
    elif legacy:
        scales, sizes = _floats(node, 1, "scales"), None
    else:
        scales = _floats(node, 2, "scales")
        sizes_value = constant_input(node, 3, "sizes")
        sizes = [int(v) for v in sizes_value.reshape(-1)] if sizes_value is not None and sizes_value.size else None
    if (scales is None) == (sizes is None):
        raise fail(node, "exactly one of scales and sizes must be given (as a compile-time constant)")
    axes_attr = node.attr("axes")
    axes = [normalize_axis(node, int(a), rank) for a in axes_attr] if axes_attr is not None else list(range(rank))
    given = scales if scales is not None else sizes
    assert given is not None
    if len(given) != len(axes):
        raise fail(node, f"{'scales' if scales is not None else 'sizes'} has {len(given)} values for {len(axes)} axes")
    full_scales = [1.0] * rank
    if scales is not None:
        for a, s in zip(axes, scales):
            if not s > 0:
                raise fail(node, f"scale {s} must be positive")
            full_scales[a] = s
    else:
        assert sizes is not None
        ratios = {a: n / x.shape[a] for a, n in zip(axes, sizes)}
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, r in ratios.items():
                full_scales[a] = r
        elif policy in ("not_larger", "not_smaller"):
            common = min(ratios.values()) if policy == "not_larger" else max(ratios.values())
            for a in axes:
                full_scales[a] = common
        else:
            raise fail(node, f"unknown keep_aspect_ratio_policy {policy!r}")
    roi = [(0.0, 1.0)] * rank
    if params.coordinate_mode == "tf_crop_and_resize":
        values = _floats(node, 1, "roi")
        if values is None or len(values) != 2 * len(axes):
            raise fail(node, f"tf_crop_and_resize needs a constant roi of {2 * len(axes)} values")
        for i, a in enumerate(axes):
            roi[a] = (values[i], values[len(axes) + i])
    return full_scales, roi


# Scales, sizes and roi decide the output shape and the tables: they must be compile-time
# constants (Resize-10 and Upsample-9 read scales from input 1, Resize-11+ roi/scales/sizes
# from inputs 1-3).
@register("Resize", constant_inputs=(1, 2, 3))
@register("Upsample", constant_inputs=(1,))
def lower_resize(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "X")
    y = node.outputs[0]
    assert y is not None
    legacy = node.op_type == "Upsample" or node.opset < 11
    params = _params(node, legacy)
    if params.mode != "nearest" and x.dtype.kind != "f":
        raise fail(node, f"{params.mode} mode is implemented for float types, X has dtype {x.dtype}")
    if y.rank != x.rank or y.dtype != x.dtype:
        raise fail(node, f"output {list(y.shape)} {y.dtype} does not match X {list(x.shape)} {x.dtype}")
    scales, roi = _scales_and_roi(node, x, legacy, params)
    tables: dict[int, AxisTable] = {}
    for a in range(x.rank):
        identity = (math.isclose(scales[a], 1.0) and y.shape[a] == x.shape[a]
                    and math.isclose(roi[a][0], 0.0) and math.isclose(roi[a][1], 1.0))
        if not identity and y.shape[a] > 0:
            if x.shape[a] == 0:
                raise fail(node, f"axis {a} of X is empty but the output's is {y.shape[a]}")
            _check_table_size(node, params, a, y.shape[a], scales[a])
            tables[a] = axis_table(params, x.shape[a], y.shape[a], scales[a], roi[a])
    if y.size == 0:
        return
    _emit_resize(ctx, node, x, y, tables, params)


# The per-axis tables are computed in float64 with a few temporaries per entry and stored as
# weights: above this many entries (output positions x taps; 1M took 280 MB and 16 s to compile)
# the Resize is refused rather than computed (an output axis of 2^30 asked for 8 GiB at once).
_TABLE_MAX_ENTRIES = 1 << 20


def _check_table_size(node: Node, params: ResizeParams, axis: int, out_size: int, scale: float) -> None:
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[params.mode]
    if params.antialias and 0 < scale < 1:
        taps *= math.ceil(1 / scale) + 1  # the filter widens by 1/scale when downsampling
    entries = out_size * taps
    if entries > _TABLE_MAX_ENTRIES:
        raise fail(node, f"axis {axis}: {out_size} output positions x {taps} taps need a table of {entries} "
                         f"entries, more than the {_TABLE_MAX_ENTRIES} aot computes at compile time")


def _emit_resize(ctx: LoweringContext, node: Node, x: Tensor, y: Tensor, tables: dict[int, AxisTable],
                 params: ResizeParams) -> None:
    dt = y.dtype.name
    strides = contiguous_strides(x.shape)
    kb = ctx.builder(node)
    xb = kb.input(x).buffer
    yv = kb.output(y)
    # Constant tables: input offsets (index * stride) and weights, one row of taps per output
    # position; tf_crop_and_resize's extrapolation masks.
    offsets: dict[int, Buffer] = {}
    weights: dict[int, Buffer] = {}
    masks: dict[int, Buffer] = {}
    for a, table in tables.items():
        offset_table = (table.index * strides[a]).astype(np.int32)
        offsets[a] = kb.input(ctx.constant(offset_table, f"{node.name}_offsets{a}")).buffer
        if table.weight is not None:
            weights[a] = kb.input(ctx.constant(table.weight.astype(y.dtype), f"{node.name}_weights{a}")).buffer
        if table.extrapolated is not None:
            masks[a] = kb.input(ctx.constant(table.extrapolated.astype(np.bool_), f"{node.name}_outside{a}")).buffer
    tap_counts = {a: table.index.shape[1] for a, table in tables.items()}

    def body(idx: list[Expr]) -> list[Stmt]:
        base: Expr = const(0, INDEX)
        for a, (i, s) in enumerate(zip(idx, strides)):
            if a not in tables and x.shape[a] > 1:
                base = base + i * s

        def row(a: int, tap: Expr) -> Expr:
            return idx[a] * tap_counts[a] + tap

        stmts: list[Stmt] = []
        resized = sorted(tables)
        if not weights:
            # Nearest: one tap per axis, weight 1.
            flat = base
            for a in resized:
                flat = flat + cast(Load(offsets[a], row(a, const(0, INDEX))), INDEX)
            value: Expr = Load(xb, flat)
        else:
            acc = kb.var("acc", dt)
            stmts.append(Declare(acc, const(0.0, dt)))

            def nest(level: int, flat: Expr, w: Expr | None) -> list[Stmt]:
                """Taps of axis resized[level] inside those of the axes before it, carrying the
                partial offset and weight product in locals."""
                if level == len(resized):
                    term = Load(xb, flat)
                    return [Assign(acc, acc + (term * w if w is not None else term))]
                a = resized[level]

                def tap(t: list[Expr]) -> list[Stmt]:
                    off, inner = kb.var("off", INDEX), []
                    inner.append(Declare(off, flat + cast(Load(offsets[a], row(a, t[0])), INDEX)))
                    w_next = w
                    if a in weights:
                        wv = kb.var("w", dt)
                        factor = Load(weights[a], row(a, t[0]))
                        inner.append(Declare(wv, factor * w if w is not None else factor))
                        w_next = wv
                    return inner + nest(level + 1, off, w_next)

                return kb.loops([tap_counts[a]], tap, prefix="t")

            stmts += nest(0, base, None)
            value = acc
        if masks:
            outside: Expr | None = None
            for a, m in masks.items():
                flag = Load(m, idx[a])
                outside = flag if outside is None else logical_or(outside, flag)
            assert outside is not None
            value = select(outside, const(params.extrapolation_value, dt), value)
        stmts.append(yv.store(idx, value))
        return stmts

    ctx.emit(kb, kb.loops(y.shape, body))
