"""Which algorithm computes a convolution: the whole decision, in one place (choose_algorithm).

* winograd (winograd.py): 3x3, unit stride, float32 on a vector target, enough channels;
* im2col (tiled.py): strided convolutions with rows narrower than a vector, as a matrix product
  over the column matrix's flattened pixels;
* tiled (tiled.py): register tiles for every other 1-D/2-D convolution with constant float
  weights, in one of five modes (tile_mode), over the input, its padded copy or its
  column-phase-split copy (copies.py);
* rows (rows.py): vectorisable row updates, for 1-D/2-D convolutions whose weights are not
  constants or not floats;
* direct (direct.py): the loop nest with a bounds check per tap, for 3-D and higher
  convolutions and negative padding (cropping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from aot.lowering.tiles import TileConfig
from aot.ops.contraction.register_tiles import vector_starts
from aot.ops.conv.geometry import ConvGeometry, ConvSpec
from aot.ops.conv.winograd import F2X2_3X3

Kind = Literal["winograd", "im2col", "tiled", "rows", "direct"]
Copy = Literal["none", "padded", "strided"]
TileMode = Literal["", "channels", "flat", "pointwise", "grid", "rows"]


@dataclass(frozen=True)
class ConvAlgorithm:
    kind: Kind
    copy: Copy = "none"  # which copy of the input the kernels read (tiled, rows)
    mode: TileMode = ""  # how the register tiles run (tiled, im2col)
    channel_tiles: bool = False  # vectors over output channels, not pixels (see channel_tiles_pay)
    rows_first: bool = False  # whether the copy is row-interleaved (see interleave_rows)
    pointwise: bool = False  # rows: a 1x1 unit-stride convolution, a matrix product per image
    lean: bool = False  # flat mode: one channel's shifted copies at a time (least scratch, --max-arena)
    # rows, depthwise: each channel's rows go to a one-channel scratch plane, copied out once the
    # channel is done, so the output can be written over the input (in place, --max-arena)
    via_plane: bool = False


def choose_algorithm(geometry: ConvGeometry, weights: np.ndarray | None, dtype: str, tiles: TileConfig,
                     allow_winograd: bool) -> ConvAlgorithm:
    """The algorithm for a validated convolution: `weights` are its constant weights (None when
    computed at run time), `dtype` its output type; `allow_winograd` is False under
    `--conv-algorithm direct` (every tap summed directly)."""
    if geometry.nd > 2 or min(geometry.pad_begin + geometry.pad_end) < 0:
        return ConvAlgorithm("direct")
    if allow_winograd and weights is not None and _winograd_fits(geometry, tiles, dtype) \
            and _winograd_accurate(weights):
        return ConvAlgorithm("winograd")
    planar = geometry.planar()
    if weights is None or np.dtype(dtype).kind != "f":
        spec = planar.spec(over_padded_copy=False)
        return ConvAlgorithm("rows", copy="padded" if planar.padded else "none",
                             pointwise=spec.k_h == spec.k_w == 1 and spec.s_h == spec.s_w == 1)
    if use_im2col(planar, tiles, np.dtype(dtype).itemsize):
        return _im2col_algorithm(planar, tiles, dtype)
    return _tiled_algorithm(planar, tiles, dtype)


def _im2col_algorithm(planar: ConvGeometry, tiles: TileConfig, dtype: str) -> ConvAlgorithm:
    spec = im2col_spec(planar)
    channel_tiles = channel_tiles_pay(1, spec.out_channels, (spec.out_h, spec.out_w), (1, 1), (1, 1), spec.out_w,
                                      tiles, dtype, reduction=spec.channels)
    return ConvAlgorithm("im2col", mode=tile_mode(spec, tiles, dtype, channel_tiles), channel_tiles=channel_tiles)


def im2col_spec(planar: ConvGeometry) -> ConvSpec:
    """The 1x1 convolution over the column matrix that im2col computes: one "input channel" per
    (channel, kernel row, kernel column), one "pixel" per output pixel."""
    (out_h, out_w), (k_h, k_w) = planar.out_spatial, planar.kernel
    rows = planar.channels * k_h * k_w
    return ConvSpec(
        batch=planar.batch, channels=rows, groups=1, group_in=rows, per_group=planar.out_channels,
        out_channels=planar.out_channels, in_h=out_h, in_w=out_w, out_h=out_h, out_w=out_w, k_h=1, k_w=1,
        s_h=1, s_w=1, d_h=1, d_w=1, p_h=0, p_w=0, nd=planar.nd)


def _tiled_algorithm(planar: ConvGeometry, tiles: TileConfig, dtype: str) -> ConvAlgorithm:
    spec = planar.spec(over_padded_copy=False)
    channel_tiles = channel_tiles_pay(
        spec.groups, spec.out_channels, (spec.out_h, spec.out_w), (spec.k_h, spec.k_w), (spec.s_h, spec.s_w),
        planar.padded_hw[1], tiles, dtype, reduction=spec.group_in * spec.k_h * spec.k_w)
    if not channel_tiles and flat_depthwise_fits(spec, tiles, dtype):
        # Depthwise with 'same' padding: the flat mode makes its own shifted copies.
        return ConvAlgorithm("tiled", mode="flat")
    copied = planar.spec(over_padded_copy=True)
    return _tiled_with_copy(planar, spec, tile_mode(copied, tiles, dtype, channel_tiles), channel_tiles)


def _tiled_with_copy(planar: ConvGeometry, spec: ConvSpec, mode: TileMode, channel_tiles: bool) -> ConvAlgorithm:
    """The tiled algorithm in `mode`, over the copy of the input the geometry needs."""
    if spec.s_w > 1 and not channel_tiles:
        copy: Copy = "strided"
    elif planar.padded:
        # A zero-bordered copy of the input: then every tap of every output column reads inside
        # the image, each output row is one unbroken vector loop (no border pieces, which cost
        # scalar remainders on short rows), and the copy is cheap next to the k_h * k_w *
        # out_channels passes over the input that the convolution makes.
        copy = "padded"
    else:
        return ConvAlgorithm("tiled", mode=mode, channel_tiles=channel_tiles)
    return ConvAlgorithm("tiled", copy=copy, mode=mode, channel_tiles=channel_tiles,
                         rows_first=interleave_rows(spec, mode))


def conv_forms(geometry: ConvGeometry, weights: np.ndarray | None, dtype: str, tiles: TileConfig,
               allow_winograd: bool) -> list[ConvAlgorithm]:
    """Every algorithm a --max-arena plan may give this convolution (aot/planner/budget.py), the
    one choose_algorithm picks first, then forms that need less scratch: without Winograd (its
    transforms), register tiles instead of im2col (a copy of the input, not the larger column
    matrix), register tiles over the input itself where they need no copy of it (rows mode: no
    grid scratch), row updates over the input (the padding skipped by compile-time bounds, no
    copy) and the direct loop nest (no scratch at all, every geometry)."""
    forms = [choose_algorithm(geometry, weights, dtype, tiles, allow_winograd)]
    if forms[0].mode == "flat":
        forms.append(ConvAlgorithm("tiled", mode="flat", lean=True))
    if geometry.nd <= 2 and min(geometry.pad_begin + geometry.pad_end) >= 0:
        planar = geometry.planar()
        spec = planar.spec(over_padded_copy=False)
        pointwise = spec.k_h == spec.k_w == 1 and spec.s_h == spec.s_w == 1 and not planar.padded
        forms.append(choose_algorithm(geometry, weights, dtype, tiles, allow_winograd=False))
        if forms[-1].kind == "im2col":
            forms.append(_tiled_algorithm(planar, tiles, dtype))
        if (weights is not None and np.dtype(dtype).kind == "f" and not planar.padded and spec.s_w == 1
                and not flat_depthwise_fits(spec, tiles, dtype)):  # (that geometry has only the flat mode)
            forms.append(ConvAlgorithm("tiled", mode="pointwise" if pointwise else "rows"))
        forms.append(ConvAlgorithm("rows", pointwise=pointwise))
        if geometry.groups == geometry.channels == geometry.out_channels > 1:
            forms.append(ConvAlgorithm("rows", via_plane=True))
    forms.append(ConvAlgorithm("direct"))
    return list(dict.fromkeys(forms))  # in order, each once


def form_label(algorithm: ConvAlgorithm) -> str:
    """How `aot inspect --max-arena` names a convolution's form."""
    if algorithm.kind == "tiled":
        over = {"none": "the input", "padded": "a padded copy", "strided": "a column-phase copy"}[algorithm.copy]
        lean = ", a channel at a time" if algorithm.lean else ""
        return f"tiled {algorithm.mode or 'rows'} over {over}{lean}"
    if algorithm.kind == "rows":
        if algorithm.via_plane:
            return "row updates into a channel plane, written over the input"
        return "row updates over a padded copy" if algorithm.copy == "padded" else "row updates over the input"
    return algorithm.kind


def adopt_algorithm(geometry: ConvGeometry, weights: np.ndarray | None, dtype: str, tiles: TileConfig,
                    allow_winograd: bool, preferred: ConvAlgorithm) -> ConvAlgorithm | None:
    """`preferred` (the choice for the same convolution at another input shape) made to fit this
    geometry, or None where it cannot run here. Shape variants of one model adopt the first
    shape's choices, so their kernels read the weights in the same packed layout and the package
    stores them once (SqueezeNet at 224 and 320: 2 of 26 weights were packed two ways). Only the
    choices made for speed follow `preferred`; what the geometry forces (direct, rows, the copy
    of the input) is decided here as choose_algorithm decides it."""
    own = choose_algorithm(geometry, weights, dtype, tiles, allow_winograd)
    if own.kind in ("direct", "rows") or weights is None or preferred.kind in ("direct", "rows"):
        return None
    planar = geometry.planar()
    if preferred.kind == "winograd":
        fits = (allow_winograd and _winograd_shape_fits(geometry, tiles, dtype) and _winograd_accurate(weights)
                and min(geometry.out_spatial) >= 2)
        return ConvAlgorithm("winograd") if fits else None
    if preferred.kind == "im2col":
        column_bytes = (planar.group_in * planar.kernel[0] * planar.kernel[1] * planar.out_spatial[0]
                        * planar.out_spatial[1] * np.dtype(dtype).itemsize)
        channels_fit = _channel_tiles_fit(planar.groups, planar.out_channels, tiles, dtype)
        fits = (planar.groups == 1 and max(planar.strides) > 1 and column_bytes <= IM2COL_LIMIT_BYTES
                and preferred.mode == ("channels" if preferred.channel_tiles else "pointwise")
                and (channels_fit or not preferred.channel_tiles))
        return ConvAlgorithm("im2col", mode=preferred.mode, channel_tiles=preferred.channel_tiles) if fits else None
    return _adopt_tiled(planar, tiles, dtype, preferred)


def _adopt_tiled(planar: ConvGeometry, tiles: TileConfig, dtype: str, preferred: ConvAlgorithm) -> ConvAlgorithm | None:
    """_tiled_algorithm with `preferred`'s channel tiles and mode, where this geometry allows them."""
    spec = planar.spec(over_padded_copy=False)
    channel_tiles = preferred.channel_tiles
    if channel_tiles and not _channel_tiles_fit(spec.groups, spec.out_channels, tiles, dtype):
        return None
    if preferred.mode == "flat":
        return ConvAlgorithm("tiled", mode="flat") if not channel_tiles and flat_depthwise_fits(spec, tiles, dtype) \
            else None
    if not channel_tiles and flat_depthwise_fits(spec, tiles, dtype):
        return None  # this geometry takes the flat mode's own copies: no other mode is written for it
    copied = planar.spec(over_padded_copy=True)
    pointwise = copied.s_h == copied.s_w == 1 and copied.k_h == copied.k_w == 1
    unit_stride = copied.s_h == copied.s_w == 1
    allowed = {"channels": channel_tiles, "pointwise": not channel_tiles and pointwise,
               "grid": not channel_tiles and unit_stride and copied.out_h > 1 and not pointwise,
               "rows": not channel_tiles and not pointwise}
    if not allowed.get(preferred.mode, False):
        return None
    return _tiled_with_copy(planar, spec, preferred.mode, channel_tiles)


def _channel_tiles_fit(groups: int, out_channels: int, tiles: TileConfig, dtype: str) -> bool:
    """What channel tiles need of a convolution, whether or not they pay (see channel_tiles_pay)."""
    return groups == 1 and tiles.lanes > 1 and dtype == "float32" and out_channels >= tiles.lanes


def _winograd_fits(geometry: ConvGeometry, tiles: TileConfig, dtype: str) -> bool:
    """Whether a 2-D convolution runs as Winograd F(2x2, 3x3): 3x3, unit stride and dilation,
    one group, float32 on a vector target, with channels enough that the multiply-adds saved
    outweigh the transforms (a transform costs about 2 additions per input or output element
    and channel: an RGB stem saves little), and at least a vector of 2x2 tiles: the products
    run over tiles, and fewer than a vector's lanes run narrow (measured on AVX-512: 256 -> 256
    channels on a 3x3 image, 4 tiles, 184 us against 176 direct; 16 -> 16 on 6x6, 9 tiles, 3.0
    against 2.4 us; 8 -> 8 on 8x8, 16 tiles, 1.42 against 1.58)."""
    out_h, out_w = geometry.out_spatial if geometry.nd == 2 else (0, 0)
    tile_count = -(-out_h // F2X2_3X3.m) * -(-out_w // F2X2_3X3.m)
    return _winograd_shape_fits(geometry, tiles, dtype) and tile_count >= tiles.lanes \
        and not _winograd_weight_bound(geometry, tile_count)


# Transformed weights beyond this many bytes are read from memory on every run of a model (no
# L2 keeps them from one run to the next) ...
WINOGRAD_COLD_WEIGHT_BYTES = 4 << 20
# ... and then each of their bytes must serve at least this many 2x2 tiles' multiply-adds.
WINOGRAD_MIN_COLD_TILES = 32


def _winograd_weight_bound(geometry: ConvGeometry, tile_count: int) -> bool:
    """Whether Winograd would leave the convolution waiting on its weights: F(2x2, 3x3) stores
    16 transformed taps per filter for 9 (1.8x the bytes) and does 2.25x fewer multiply-adds, so
    on small images with many channels the weights, read from memory each run, bound the time
    (AVX-512 Xeon, a chain of six 512 -> 512 convs at 7x7, 16 tiles and 16.8 MB of transformed
    weights each: Winograd 1.52x onnxruntime's time, direct 1.05; at 14x14, 49 tiles: Winograd
    0.97, direct 1.17)."""
    transformed_bytes = F2X2_3X3.alpha ** 2 * geometry.channels * geometry.out_channels * 4
    return transformed_bytes > WINOGRAD_COLD_WEIGHT_BYTES and tile_count < WINOGRAD_MIN_COLD_TILES


def _winograd_shape_fits(geometry: ConvGeometry, tiles: TileConfig, dtype: str) -> bool:
    """What Winograd F(2x2, 3x3) needs of a convolution, whatever its image size."""
    return (geometry.nd == 2 and geometry.groups == 1 and geometry.kernel == (3, 3) and geometry.strides == (1, 1)
            and geometry.dilations == (1, 1) and dtype == "float32" and tiles.lanes > 1
            and geometry.channels >= 8 and geometry.out_channels >= 8)


# Largest ratio of a filter's largest tap to its median one (nonzero taps, magnitudes) that
# Winograd is trusted with. Trained 3x3 filters stay far below (the shared models: 38 at most,
# after BatchNorm folding); a weight with damaged bytes (2^30 times its neighbours) made
# tiny_cnn's output 5.7e-4 off against a tolerance of 1e-4, where a direct sum stays at 1e-8.
WINOGRAD_MAX_TAP_RANGE = 1024.0


def _winograd_accurate(weights: np.ndarray) -> bool:
    """Whether Winograd's rounding stays at a direct sum's on these weights. G g G^T mixes every
    tap of a filter into its 16 transformed taps, so each tap's rounding error scales with the
    filter's largest tap: one Inf weight makes all of them Inf or NaN (Inf - Inf), and every
    output of that channel NaN, where a direct sum gives Inf or NaN only where the products do;
    one huge finite weight leaves an error the size of its product in outputs where the direct
    sum multiplies it by a zero (after a Relu, in the padding)."""
    if not np.isfinite(weights).all():
        return False
    magnitudes = np.abs(weights.astype(np.float64)).reshape(weights.shape[0], -1)
    for taps in magnitudes:
        nonzero = taps[taps > 0]
        if nonzero.size and nonzero.max() > WINOGRAD_MAX_TAP_RANGE * np.median(nonzero):
            return False
    return True


# Largest column matrix (input channels x kernel taps by output pixels) worth materialising.
IM2COL_LIMIT_BYTES = 256 * 1024


def use_im2col(planar: ConvGeometry, tile: TileConfig, itemsize: int) -> bool:
    """Strided convolutions whose output rows are narrower than a vector tile poorly row by row
    and cannot use the padded grid (its rows advance by the stride): for those, when the column
    matrix is small (e.g. a keyword-spotting stem: 1 channel x 10x4 taps by 25x5 pixels), copy it
    out once and run the matrix product over the flattened pixels."""
    k = planar.group_in * planar.kernel[0] * planar.kernel[1]
    pixels = planar.out_spatial[0] * planar.out_spatial[1]
    if planar.groups != 1 or max(planar.strides) == 1:
        return False
    if strided_pointwise(planar):
        # Its column matrix is the subsampled image, and the product over it runs as tiles over
        # the flattened pixels (tiled.py reads it through pixel_tiles.py's packed panel instead
        # of storing it). ResNet-50's downsampling convs on AVX2, times onnxruntime's, against
        # rows over a column-phase copy: 256 -> 512 at 56x56 1.21 -> 0.85, 512 -> 1024 at
        # 28x28 1.22 -> 0.82.
        return True
    return planar.out_spatial[1] < 2 * tile.lanes and k * pixels * itemsize <= IM2COL_LIMIT_BYTES


def strided_pointwise(planar: ConvGeometry) -> bool:
    """A 1x1 convolution with a stride above 1, no padding or dilation and one group: one input
    pixel in stride_h * stride_w is read, each by every output channel."""
    return (planar.groups == 1 and planar.kernel == (1, 1) and max(planar.strides) > 1 and not planar.padded
            and planar.dilations == (1, 1))


def _lanes_used(length: int, cols: int, lanes: int, narrow_costs_full: bool = False,
                scalar_costs_full: bool = False) -> int:
    """Lanes computed to cover `length` outputs with tiles of `cols` (a ragged last tile takes
    overlapping vectors, narrower ones for a tail shorter than a register; scalars one lane each).
    With `narrow_costs_full`, a narrower vector counts as a full one (it takes the same issue
    slot), which is the fair measure for rows that are all tail (8 outputs on 16-lane AVX-512);
    with `scalar_costs_full`, so does each scalar of a tail too short for a vector."""
    full, tail = divmod(length, cols)
    width = TileConfig(lanes).width_for(tail)
    if width == 1:
        return full * cols + tail * (lanes if scalar_costs_full else 1)
    return full * cols + len(vector_starts(tail, width)) * (lanes if narrow_costs_full else width)


def pixel_waste(out_hw: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int], padded_w: int,
                tile: TileConfig) -> float:
    """Lanes computed per output pixel when tiles run over pixels (flattened for a 1x1 unit-stride
    conv, on the padded grid or row by row for other unit-stride ones, row by row when strided)."""
    out_h, out_w = out_hw
    pixels = out_h * out_w
    unit = strides == (1, 1)
    if unit and kernel == (1, 1):
        # A tail of 1-3 pixels runs as scalar multiply-adds, each an issue slot of a whole vector:
        # a 256-tap STFT conv over 3 frames (the im2col of a 1-D strided conv) ran scalar at 8
        # channels x 3 frames per tile, 47% of a voice-activity model's time.
        return _lanes_used(pixels, tile.cols, tile.lanes, scalar_costs_full=True) / pixels
    # Row by row, a row shorter than a register runs at a fraction of the machine's width.
    rows = out_h * _lanes_used(out_w, tile.cols, tile.lanes, narrow_costs_full=True)
    if not unit:  # strided: row by row over a column-phase copy
        return rows / pixels
    grid = _lanes_used((out_h - 1) * padded_w + out_w, tile.cols, tile.lanes)
    return min(rows, grid) / pixels


def channel_tiles_pay(groups: int, out_channels: int, out_hw: tuple[int, int], kernel: tuple[int, int],
                      strides: tuple[int, int], padded_w: int, tile: TileConfig, dtype: str,
                      *, reduction: int) -> bool:
    """Whether to vectorise over output channels (see channel_tiles.ChannelTiles._init_channels): the pixels
    would fill vectors badly and there are channels enough for whole tiles. Channel tiles pay a
    scalar, channel-major write of every output (about one cycle each); the lanes they save cost
    `reduction` / lanes vector multiply-adds per output each, so they only win when that saving is
    larger, by a margin (an RGB stem of 27 taps is faster row by row; a ResNet-50's 3x3 convs at
    28x28 gain from channel tiles and at 56x56 do not: `python -m benchmarks.layers` shows
    each)."""
    if groups != 1 or tile.lanes == 1 or dtype != "float32" or out_channels < tile.lanes:
        return False
    waste = pixel_waste(out_hw, kernel, strides, padded_w, tile)
    return (waste - 1.0) * reduction / tile.lanes > 2.0




def flat_depthwise_fits(spec: ConvSpec, tile: TileConfig, dtype: str) -> bool:
    """A depthwise convolution (one input and one output channel per group) with unit stride and
    dilation and 'same' padding (output the size of the input), over at least one vector of
    pixels: TiledConv's flat mode."""
    return (spec.group_in == 1 and spec.per_group == 1 and dtype == "float32" and tile.lanes > 1
            and spec.s_h == spec.s_w == spec.d_h == spec.d_w == 1
            and (spec.out_h, spec.out_w) == (spec.in_h, spec.in_w)
            and 0 <= spec.p_w < spec.in_w and spec.k_w - 1 - spec.p_w < spec.in_w
            and spec.p_h >= 0 and spec.k_h - 1 - spec.p_h >= 0
            and spec.out_h * spec.out_w >= tile.lanes)


def _grid_pays(spec: ConvSpec, tile: TileConfig) -> bool:
    """Whether computing on the padded grid wastes less than tiling each output row: rows pay
    for their ragged ends (55 outputs take 64 lanes), the grid for its junk columns (2 of every
    57 for a padded 3x3) plus the pass that compacts it."""
    if spec.out_w < tile.lanes:
        return True
    rows_work = spec.out_h * _lanes_used(spec.out_w, tile.cols, tile.lanes)
    grid_work = _lanes_used((spec.out_h - 1) * spec.in_w + spec.out_w, tile.cols, tile.lanes)
    return grid_work * 1.05 < rows_work


def tile_mode(spec: ConvSpec, tile: TileConfig, dtype: str, channel_tiles: bool) -> TileMode:
    """How TiledConv computes the convolution `spec` (over its padded or phase-split input)."""
    if channel_tiles:
        return "channels"
    if flat_depthwise_fits(spec, tile, dtype):
        return "flat"
    unit_stride = spec.s_h == spec.s_w == 1
    if unit_stride and spec.k_h == spec.k_w == 1:
        return "pointwise"
    if unit_stride and spec.out_h > 1 and _grid_pays(spec, tile):
        # Rows that tile badly (narrower than a vector, or a ragged end in every row): compute
        # on the padded grid instead (see TiledConv._grid).
        return "grid"
    return "rows"




def interleave_rows(spec: ConvSpec, mode: str) -> bool:
    """Whether the scratch copy of a convolution's input should be row-interleaved, [n][row][c][...]
    (every channel's row ih, then every channel's row ih + 1): in rows mode with one group and
    no row dilation, kernel row kh of channel c then sits (kh * C + c) rows of the scratch after
    the output row's first input row, so a tile's whole reduction reads one contiguous slab of
    k_h * C rows, a few dozen pages, instead of k_h rows in each of C planes a plane apart (C *
    k_h pages, more than the first-level TLB holds). With output rows outermost
    (TiledConv._streams_input) it took light VGG-19 from 1.21 to 1.06 times onnxruntime's time."""
    return mode == "rows" and spec.groups == 1 and spec.d_h == 1


