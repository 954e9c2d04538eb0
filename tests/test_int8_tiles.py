"""The int8 register tiles of QLinearConv and ConvInteger (aot/ops/quantized/integer_tiles.py)
against onnxruntime, for each dot-product instruction a preset may choose (targets/*.toml
int8_dot): vpdpbusd (x86_64-v4-vnni: AVX-512 VNNI), the exact vpmaddwd sequence (x86_64-v3:
AVX2), for a package for no particular target the GNU C vectors, and the NEON sequences (rpi4
aarch64, rpi3 armv7: 4 lanes, both backends, under qemu-user): DotAdd's unsigned-by-signed bytes
where a weight is -128, PairDotAdd's signed bytes where none is. Shapes that are ragged
everywhere: channels not a multiple of 4 (the quad's padding), output channels not a multiple
of the tile's, rows shorter and longer than a tile, padding, strides 2 and 3 with dilation."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.host.run import HostModel
from aot.ops.quantized.integer_tiles import TileShape, tile_shape
from aot.pipeline import PipelineOptions
from aot.targets import default_int8_dot, load_target
from tests.helpers import run_aot, run_onnxruntime, selected_backend
from tests.test_ops_quantized_integer import QLINEAR_CONV_INPUTS, assert_quantized_match, model_of, quantized

BACKEND = selected_backend()
# None: a package for any target (the C header then picks by the compiler's flags)
TARGETS = [None, "x86_64-v3", "x86_64-v4-vnni"]

CASES = {
    # name: (x shape, w shape, attrs)
    "3x3_ragged": ((1, 13, 11, 23), (19, 13, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2_batch2": ((2, 6, 17, 35), (10, 6, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "5x3_dilated_s3": ((1, 8, 12, 40), (12, 8, 5, 3), {"pads": [2, 2, 2, 2], "strides": [1, 3], "dilations": [1, 2]}),
    "pointwise_small_plane": ((1, 10, 5, 5), (7, 10, 1, 1), {}),
    "pointwise_wide_row": ((1, 64, 3, 56), (64, 64, 1, 1), {}),
    # pointwise convolutions copy their input in bands of a tile's pixels (integer_tiles.banded):
    # two images, channels past a quad, a ragged last band; a strided one copies the whole image
    "pointwise_batch2_ragged": ((2, 6, 7, 9), (5, 6, 1, 1), {}),
    "pointwise_s2": ((1, 8, 9, 13), (6, 8, 1, 1), {"strides": [2, 2]}),
    # three vectors of 16 lanes (integer_tiles.tile_shape): a 6x6 plane's 36 pixels (VWW's
    # 128-channel stage), a 48-pixel row with a ragged block of output channels
    "pointwise_6x6_plane": ((1, 20, 6, 6), (24, 20, 1, 1), {}),
    "pointwise_48_row": ((1, 12, 2, 48), (9, 12, 1, 1), {}),
    # planes of few pixels: the channels in the lanes (pixel_rows.py), then transposed; 1-D; a
    # count of channels that fills no whole vector keeps the pixel tiles
    "pointwise_3x3_plane": ((1, 20, 3, 3), (32, 20, 1, 1), {}),
    "pointwise_1d_5": ((1, 12, 5), (16, 12, 1), {}),
    "pointwise_3x3_ragged_channels": ((1, 8, 3, 3), (12, 8, 1, 1), {}),
    "1d": ((1, 5, 37), (9, 5, 3), {"pads": [1, 1]}),
    # one input channel: a 1x1 convolution over the taps (ops/quantized/conv/tiles.py tap_columns), with padding
    # on every side and strides (DS-CNN's first layer), without padding, dilated, and 1-D
    "one_channel_10x4_s2": ((1, 1, 49, 10), (20, 1, 10, 4), {"pads": [4, 1, 5, 2], "strides": [2, 2]}),
    "one_channel_3x3_batch2": ((2, 1, 9, 12), (8, 1, 3, 3), {}),
    "one_channel_dilated": ((1, 1, 13, 15), (6, 1, 3, 2), {"pads": [0, 2, 1, 0], "dilations": [2, 3]}),
    "one_channel_1d": ((1, 1, 40), (5, 1, 7), {"pads": [3, 2], "strides": [3]}),
}

CHANNELS_IN_LANES = {"pointwise_3x3_plane", "pointwise_1d_5"}  # on x86 (pixel_rows.py)


def values_for(case: str, x_dtype: str, w_dtype: str, seed: int = 0,
               symmetric: bool = False) -> tuple[dict[str, np.ndarray], dict]:
    """Inputs of `case`; `symmetric`: int8 weights in -127..127 (onnxruntime.quantization's
    symmetric weights, which NEON's PairDotAdd multiplies), the input at its least value in
    places, so two products of -128 * -127 meet in 16 bits."""
    x_shape, w_shape, attrs = {**CASES, **DEPTHWISE, **SHIFTED, **EIGHT_QUADS}[case]
    rng = np.random.default_rng(seed)
    m, taps = w_shape[0], int(np.prod(w_shape[1:]))
    x_scale, w_scale = np.float32(0.02), (0.001 + 0.01 * rng.random(m)).astype(np.float32)
    y_scale = np.float32(x_scale * float(w_scale.mean()) * 74 * 74 * np.sqrt(taps) / 50)
    w = quantized(rng, w_shape, w_dtype)
    if symmetric:
        w = np.clip(w, -127, 127)
        w[0].flat[:2], w[-1].flat[-1] = -127, 127
    elif w_dtype == "int8":
        w[0].flat[0], w[-1].flat[-1] = -128, 127  # the extremes of the signed bytes
    values = {
        "x": quantized(rng, x_shape, x_dtype), "x_scale": x_scale,
        "x_zero_point": np.array(rng.integers(-10, 10) + (128 if x_dtype == "uint8" else 0), x_dtype),
        "w": w, "w_scale": w_scale,
        "w_zero_point": np.array(0 if w_dtype == "int8" else 128, w_dtype),
        "y_scale": y_scale, "y_zero_point": np.array(3 + (128 if x_dtype == "uint8" else 0), x_dtype),
        "B": rng.integers(-20000, 20000, size=m).astype(np.int32),
    }
    values["x"].flat[:4] = np.iinfo(x_dtype).max  # 255 * -128 overflows 16 bits: exact only with a real dot
    if symmetric:
        values["x"][:, :2] = np.iinfo(x_dtype).min  # signed -128 in the first quad's pair
    return values, attrs


def check_tiled(model, feeds: dict[str, np.ndarray], target: str | None) -> None:
    assert_quantized_match(run_aot(model, feeds, backend=BACKEND, target=target), run_onnxruntime(model, feeds))


# Depthwise convolutions (not tiles: ops/quantized/conv/flat_depthwise.py loops, whose requantisation
# armv7 writes as vectors of 4 pixels; with gcc the integer sums are a loop of their own before it)
DEPTHWISE = {
    "depthwise_3x3": ((1, 6, 9, 13), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
    "depthwise_5x5_batch2": ((2, 3, 12, 7), (3, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 3}),
    "depthwise_3x3_s2": ((1, 5, 11, 10), (5, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 5}),
    # TensorFlow's pads for stride 2 (VWW's strided depthwise convolutions)
    "depthwise_3x3_s2_tf_pads": ((1, 8, 12, 12), (8, 1, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2], "group": 8}),
}


def check_under_qemu(model, feeds: dict[str, np.ndarray], target: str, backend: str) -> None:
    """Cross-built for `target` with `backend`, run under qemu-user."""
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    package = compile_model(model, backend=backend, target=target)
    built = TargetModel.build(package, load_target(target))
    assert_quantized_match(built.run(dict(feeds)), run_onnxruntime(model, feeds))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi5", "rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_arm_depthwise_tap_pairs_match_onnxruntime_under_qemu(case: str, backend: str, target: str,
                                                              tmp_path: Path) -> None:
    """int8 input, weights in -127..127: two taps' products summed in int16 before the int32 sum
    (integer_terms.tap_sum's pairs: smull + smlal; on armv7 vectors of 8 pixels written out,
    vmull.s8 + vmlal.s8 of d registers and vaddw.s16, in the sums' own loop, both backends), with
    -128 inputs against -127 weights in both; a -128 weight keeps the int32 products."""
    values, attrs = values_for(case, "int8", "int8", symmetric=True)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    pairs = "AOT_I16X8_TAP_PAIR(" if target == "rpi3" else "(int16_t)"
    assert pairs in generated_c(model, target)
    if target == "rpi3" and backend == "llvm":
        disassembly = _arm_disassembly(model, tmp_path, backend, target)
        assert re.search(r"vmlal\.s8\tq\d+, d", disassembly) and "vaddw.s16\t" in disassembly
    check_under_qemu(model, feeds, target, backend)
    values["w"][0].flat[0] = -128
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    assert pairs not in generated_c(model, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_qlinear_conv_tiles_match_onnxruntime(case: str, x_dtype: str, target: str | None) -> None:
    values, attrs = values_for(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    check_tiled(model, feeds, target)


@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_avx2_signed_tiles_match_onnxruntime(case: str, x_dtype: str) -> None:
    """AVX2 (x86_64-v3) with weights in -127..127: the signed-byte step (AOT_I32X8_SDOTADD:
    vpabsb, vpsignb, vpmaddubsw, vpmaddwd; LLVM the same intrinsics), with the input's least
    value against -127 in both halves of a quad; weights with a -128 keep DOTADD."""
    values, attrs = values_for(case, x_dtype, "int8", symmetric=True)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    if case not in CHANNELS_IN_LANES:  # (integer_gemm's tiles, which read A unsigned)
        assert "AOT_I32X8_SDOTADD" in generated_c(model, "x86_64-v3")
    check_tiled(model, feeds, "x86_64-v3")
    values["w"][0].flat[0] = -128
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    assert "SDOTADD" not in generated_c(model, "x86_64-v3")


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_neon_tiles_match_onnxruntime_under_qemu(case: str, x_dtype: str, backend: str, target: str) -> None:
    """The 4-lane NEON tiles of aarch64 (rpi4) and armv7 (rpi3): AOT_I32X4_DOTADD; LLVM the same
    16-bit products and sadalp / vpadal.s16, cross-built and run."""
    values, attrs = values_for(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    check_under_qemu(model, feeds, target, backend)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_neon_pair_tiles_match_onnxruntime_under_qemu(case: str, x_dtype: str, backend: str, target: str) -> None:
    """Weights in -127..127 take PairDotAdd (signed bytes: vmull.s8 / smull, vmlal.s8 / smlal2,
    vpadal.s16 / sadalp), with the input's least value against -127 in both halves of a quad."""
    values, attrs = values_for(case, x_dtype, "int8", symmetric=True)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    source = compile_model(model, backend="c", target=target).files["test_graph.c"]
    text = source.decode() if isinstance(source, bytes) else source
    assert "AOT_I32X4_PAIR_DOTADD" in text
    if case == "pointwise_wide_row":  # whole tiles: requantised in registers, stored 4 bytes at a time
        assert "AOT_I32X4_STORE_NARROW" in text and "AOT_I32X4_ROUND_CONVERT" in text
    check_under_qemu(model, feeds, target, backend)


# NEON's pair tiles read eight quads at a time (integer_tiles.pair_halves_step): rows of 12
# pixels make tiles of three vectors (the third the high half of a load one vector back); 5 output
# channels pairs of weight quads (ld4r, vld4.16) and, on rpi4 (one block of 5; rpi3's tiles take 4,
# then a ragged block), one alone (ld2r, vld2.16), which one output channel makes on both.
EIGHT_QUADS = {"three_vectors_five_channels": ((1, 9, 5, 12), (5, 9, 3, 3), {"pads": [1, 1, 1, 1]}),
               "three_vectors_one_channel": ((1, 9, 5, 12), (1, 9, 3, 3), {"pads": [1, 1, 1, 1]})}
# What the LLVM object of each target loads them with: aarch64's ld2, ld4r, ld2r; armv7's vld2.16
# of four d registers (two q registers) and vld4.16 to all lanes.
EIGHT_QUAD_LOADS = {"rpi4": ("ld2\t", "ld4r\t", "ld2r\t"), "rpi3": (re.compile(r"vld2\.16\t\{d(\d+)-d\d+\}"),
                                                             re.compile(r"vld4\.16\t\{d\d+\[\]-d\d+\[\]\}"))}


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(EIGHT_QUADS))
def test_neon_pair_tiles_read_eight_quads_under_qemu(case: str, x_dtype: str, backend: str, target: str,
                                                     tmp_path: Path) -> None:
    """rpi4's and rpi3's tiles load two vectors' quads in one ld2 (vld2.16 of four d registers)
    and two weight quads in one ld4r (vld4.16), not each four in a load and a tbl or a load each
    (C: AOT_I16X16_PAIRS, AOT_I16X32_SPLAT_PAIRS; LLVM: the instructions themselves). Exact
    against onnxruntime under qemu."""
    values, attrs = values_for(case, x_dtype, "int8", symmetric=True)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    if backend == "c":
        text = generated_c(model, target)
        forms = ["AOT_I16X16_PAIRS(", "AOT_I32X4_PAIR_DOTADD_LOW(", "AOT_I32X4_PAIR_DOTADD_HIGH("]
        pairs, single = case.endswith("five_channels"), case.endswith("one_channel") or target == "rpi4"
        forms += ["AOT_I16X32_SPLAT_PAIRS(", "AOT_I16X32_PART("] if pairs else []
        forms += ["AOT_I16X16_SPLAT_PAIRS("] if single else []
        for form in forms:
            assert form in text, form
        assert "AOT_I32X4_PAIRS(" not in text
    elif case.endswith("five_channels"):
        disassembly = _arm_disassembly(model, tmp_path, target=target)
        for form in EIGHT_QUAD_LOADS[target]:
            assert (form in disassembly) if isinstance(form, str) else form.search(disassembly), form
    check_under_qemu(model, feeds, target, backend)


@pytest.mark.skipif(BACKEND != "c", reason="the C header's forms")
@pytest.mark.parametrize("target", ["rpi3", "rpi4", "rpi5"])
@pytest.mark.parametrize("flags", ["", "-DAOT_NO_VECTOR_EXTENSIONS"])
@pytest.mark.parametrize("case", ["three_vectors_five_channels", "depthwise_3x3"])
def test_arm_tile_operands_compile_anywhere(case: str, flags: str, target: str) -> None:
    """An rpi3 or rpi4 package's eight-quad operands, an rpi5 package's weights by lane, rpi3's
    depthwise tap pairs (AOT_I16X8_TAP_PAIR, AOT_I32X4_ADD_WIDE_*), built for this machine: the
    header keeps them as four-quad ones and splats, and 16-bit products (GNU C vectors, or the
    struct-and-loops form), with the same sums."""
    values, attrs = values_for(case, "int8", "int8", symmetric=True, seed=2)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    host = HostModel.build(compile_model(model, backend="c", target=target), opt="-O1",
                           extra_cflags=f"-pedantic {flags}")
    assert_quantized_match(host.run(dict(feeds)), run_onnxruntime(model, feeds))


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("case", ["depthwise_3x3", "pointwise_wide_row"])
def test_arm_requantisation_clamps_with_minnm(case: str, backend: str, target: str, tmp_path: Path) -> None:
    """The requantisation's clamps (of numbers: an int32 sum times a constant) are fminnm and
    fmaxnm on aarch64 (rpi4), vminnm and vmaxnm on rpi3's ARMv8 NEON in 32-bit mode, both
    backends: in the depthwise loop and in the tiles' requantisation in registers (VecSelect)."""
    values, attrs = values_for(case, "int8", "int8", symmetric=True)
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    disassembly = _arm_disassembly(model, tmp_path, backend, target)
    if target == "rpi4":
        assert "fminnm\tv" in disassembly and "fmaxnm\tv" in disassembly
    else:
        assert "vminnm.f32\tq" in disassembly and "vmaxnm.f32\tq" in disassembly


def _arm_disassembly(model, tmp_path: Path, backend: str = "llvm", target: str = "rpi5") -> str:
    """The target's LLVM object, or the runner gcc builds from the C package."""
    import shutil
    import subprocess

    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable

    objdump = "arm-linux-gnueabihf-objdump" if target == "rpi3" else "aarch64-linux-gnu-objdump"
    if shutil.which(objdump) is None or (backend == "c" and cross_unavailable(target)):
        pytest.skip(f"no {target} cross toolchain")
    package = compile_model(model, backend=backend, target=target)
    if backend == "c":
        binary = TargetModel.build(package, load_target(target), build_dir=tmp_path / "build").runner
    else:
        (name,) = [n for n in package.files if n.endswith(".o")]
        binary = tmp_path / "model.o"
        binary.write_bytes(package.files[name])
    return subprocess.run([objdump, "-d", str(binary)], capture_output=True, text=True, check=True).stdout


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_neon_depthwise_matches_onnxruntime_under_qemu(case: str, x_dtype: str, backend: str, target: str) -> None:
    values, attrs = values_for(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    if target == "rpi3":  # armv7: requantised as vectors of 4 pixels from the sums' loop (gcc), strided too
        source = compile_model(model, backend="c", target=target).files["test_graph.c"]
        text = source.decode() if isinstance(source, bytes) else source
        assert "AOT_I32X4_LOAD(&sums[" in text and "AOT_I32X4_STORE_NARROW" in text
        assert "AOT_I32X4_EXTEND" not in text  # the sums are gcc's own vectors
    check_under_qemu(model, feeds, target, backend)


# Depthwise convolutions on x86 (aot/ops/quantized/conv/shifted_depthwise.py, masked_depthwise.py for unit
# strides over rows as wide as the input's): float sums over copies
# of each plane by row phase, column phase and column shift, whose padding and wrapped columns
# hold the zero point; vectors of 16 output pixels (8 on AVX2, and on AVX-512 for planes under 16
# pixels), a ragged end as one more overlapping vector; under 8 pixels the padded-plane loops.
# Unit strides copy runs of the plane, the others gather: stride 2 with TensorFlow's pads (VWW),
# uneven strides, dilation, no padding, 1-D.
SHIFTED = {
    "shifted_3x3_ragged": ((1, 6, 9, 13), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),
    "shifted_5x5_batch2": ((2, 3, 12, 7), (3, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 3}),
    "shifted_multiplier": ((1, 4, 7, 11), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
    "shifted_asymmetric_2x4": ((1, 5, 6, 10), (5, 1, 2, 4), {"pads": [0, 1, 1, 2], "group": 5}),
    "shifted_12_pixels": ((1, 7, 3, 4), (7, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 7}),
    "shifted_ragged_blocks": ((1, 20, 5, 6), (20, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 20}),
    "shifted_wide_plane": ((1, 2, 40, 45), (2, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
    "under_8_pixels": ((1, 3, 2, 3), (3, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 3}),
    "shifted_s2_tf_pads": ((1, 6, 12, 11), (6, 1, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2], "group": 6}),
    "shifted_s2_dilated": ((2, 6, 13, 12), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "dilations": [2, 2],
                                                          "pads": [2, 1, 1, 2]}),
    "shifted_s2x1": ((1, 5, 9, 11), (5, 1, 3, 3), {"group": 5, "strides": [2, 1], "pads": [0, 1, 1, 0]}),
    "shifted_s1x2_multiplier": ((1, 4, 8, 20), (8, 1, 3, 3), {"group": 4, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    "shifted_s3_5x5": ((1, 3, 30, 31), (3, 1, 5, 5), {"group": 3, "strides": [3, 3], "pads": [2, 2, 2, 2]}),
    "shifted_valid": ((1, 8, 7, 9), (8, 1, 3, 3), {"group": 8}),
    "shifted_dilated": ((1, 8, 11, 10), (8, 1, 3, 3), {"group": 8, "dilations": [2, 2], "pads": [2, 1, 2, 3]}),
    "shifted_1d_s2": ((1, 4, 40), (4, 1, 5), {"group": 4, "pads": [2, 2], "strides": [2]}),
    # unit strides over rows as wide as the input's take one copy and column masks
    # (aot/ops/quantized/conv/masked_depthwise.py): rows cut short at the top and bottom (no vertical
    # padding), and a width whose masks' period (lcm(129, 8) = 1032) is past MAX_PERIOD: shifted
    "masked_valid_rows": ((1, 5, 9, 8), (5, 1, 3, 3), {"group": 5, "pads": [0, 1, 0, 1]}),
    "masked_2x3_top_only": ((1, 3, 6, 5), (3, 1, 2, 3), {"group": 3, "pads": [1, 1, 0, 1]}),
    "shifted_period_past_cap": ((1, 2, 3, 129), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    # stride 2 with TensorFlow's pads over an even width (VWW's downsampling layers): the output
    # grid covers the input's columns in both phases (an odd width's does not: shifted_s2_tf_pads)
    "masked_s2_tf_pads": ((1, 6, 12, 12), (6, 1, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2], "group": 6}),
}
# The SHIFTED cases the masked form takes.
MASKED = {"shifted_3x3_ragged", "shifted_5x5_batch2", "shifted_multiplier", "shifted_asymmetric_2x4",
          "shifted_12_pixels", "shifted_ragged_blocks", "shifted_wide_plane", "shifted_dilated", "masked_valid_rows",
          "masked_2x3_top_only", "masked_s2_tf_pads", "shifted_s2_dilated", "shifted_s1x2_multiplier", "shifted_s3_5x5",
          "shifted_1d_s2"}


def generated_c(model, target: str | None) -> str:
    source = compile_model(model, backend="c", target=target).files[f"{model.graph.name}.c"]
    return source.decode() if isinstance(source, bytes) else source


@pytest.mark.parametrize("target", ["x86_64-v3", "x86_64-v4-vnni"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(SHIFTED))
def test_shifted_depthwise_matches_onnxruntime(case: str, x_dtype: str, target: str) -> None:
    values, attrs = values_for(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    text = generated_c(model, target)
    assert ("float *restrict shifted" in text) == (case not in MASKED and case != "under_8_pixels")
    assert ("float *restrict masked" in text) == (case in MASKED)
    pixels = run_onnxruntime(model, feeds)["y"][0, 0].size
    lanes = 16 if target == "x86_64-v4-vnni" and pixels >= 16 else 8
    if case != "under_8_pixels":
        assert f"AOT_I32X{lanes}_STORE_NARROW" in text
    check_tiled(model, feeds, target)


@pytest.mark.parametrize("target", ["x86_64-v3", "x86_64-v4-vnni"])
def test_masked_depthwise_starts_from_the_bias_in_float_only_where_exact(target: str) -> None:
    """Sums start from the bias in float where bias + the largest sum stays below 2**24; one
    channel's bias of 2**24 keeps every channel's start in int32, and the others still match."""
    values, attrs = values_for("shifted_3x3_ragged", "int8", "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    assert "= (float)start" in generated_c(model, target)
    values["B"][1] = 2**24
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    text = generated_c(model, target)
    assert "float *restrict masked" in text and "= (float)start" not in text
    check_tiled(model, feeds, target)


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sdot_tiles_match_onnxruntime_under_qemu(case: str, x_dtype: str, backend: str) -> None:
    """rpi5's sdot (the dot-product extension: signed bytes, any int8 weight, -128 included)."""
    values, attrs = values_for(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    check_under_qemu(model, feeds, "rpi5", backend)


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_sdot_tiles_take_weights_by_lane(backend: str, tmp_path: Path) -> None:
    """rpi5's tiles load four channels' weight quads at once and multiply by each lane (`sdot
    v.4s, v.16b, v.4b[i]`); the fifth channel of five, alone, is still a splat quad. Exact
    against onnxruntime under qemu, with a -128 weight."""
    values, attrs = values_for("three_vectors_five_channels", "int8", "int8")
    values["w"].flat[0] = -128
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    if backend == "c":
        text = generated_c(model, "rpi5")
        assert "AOT_I32X4_SDOTADD_LANE(" in text and "AOT_I32X4_SPLAT_QUAD(" in text
    else:  # (over this model's one block of channels LLVM hoists every weight out of the loops)
        values, attrs = values_for("3x3_ragged", "int8", "int8")
        ragged, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
        assert re.search(r"sdot\tv\d+\.4s, v\d+\.16b, v\d+\.4b\[3\]", _arm_disassembly(ragged, tmp_path))
    check_under_qemu(model, feeds, "rpi5", backend)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3", "rpi5"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_neon_conv_integer_tiles_give_exact_int32_under_qemu(backend: str, target: str) -> None:
    values, attrs = values_for("3x3_s2_batch2", "int8", "int8", seed=2)
    model, feeds = model_of("ConvInteger", ["x", "w", "x_zero_point", "w_zero_point"], values, {"x"}, ["y"], **attrs)
    check_under_qemu(model, feeds, target, backend)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["3x3_ragged", "pointwise_small_plane"])
def test_uint8_weights_with_a_zero_point_take_the_tiles(case: str, target: str | None) -> None:
    """uint8 weights about a zero point of 128: w - w_zero_point fits the signed bytes."""
    values, attrs = values_for(case, "uint8", "uint8", seed=1)
    values["w_scale"] = values["w_scale"][:1]
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS[:8], values, {"x"}, ["y"], **attrs)
    check_tiled(model, feeds, target)


@pytest.mark.parametrize("target", TARGETS)
def test_conv_integer_tiles_give_exact_int32(target: str | None) -> None:
    values, attrs = values_for("3x3_s2_batch2", "int8", "int8", seed=2)
    model, feeds = model_of("ConvInteger", ["x", "w", "x_zero_point", "w_zero_point"], values, {"x"}, ["y"], **attrs)
    check_tiled(model, feeds, target)


@pytest.mark.parametrize("target, macro", [("x86_64-v4-vnni", "AOT_I32X16_DOTADD"), ("x86_64-v3", "AOT_I32X8_DOTADD"),
                                           (None, "this machine's"), ("x86_64", None), ("rpi4", "AOT_I32X4_DOTADD"),
                                           ("rpi3", "AOT_I32X4_DOTADD"), ("rpi5", "AOT_I32X4_SDOTADD"),
                                           ("cortex-m7", None)])
def test_each_preset_takes_its_int8_dot_step(target: str | None, macro: str | None) -> None:
    """Presets with a dot-product instruction get the tiles; the others keep the integer loops."""
    values, attrs = values_for("3x3_ragged", "int8", "int8")
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    source = compile_model(model, backend="c", target=target).files["test_graph.c"]
    text = source.decode() if isinstance(source, bytes) else source
    if target is None:  # the machine that compiles it: its preset's step
        tiles = PipelineOptions().tiles
        macro = None if not tiles.int8_dot.vectorised else f"AOT_I32X{tiles.lanes}_DOTADD"
    if macro is None:
        assert "DOTADD" not in text
    else:
        assert macro in text


def test_tiles_take_three_vectors_where_they_waste_fewer_lanes() -> None:
    """16 lanes and 24 accumulators (AVX-512): 36 and 48 pixels in one tile of three vectors (two
    would compute 64), 32 and 125 (flattened DS-CNN planes: 128 against 144) in two; AVX2's eight
    accumulators keep two vectors (three would leave two channels a tile)."""
    assert tile_shape(16, 24, 36, 128) == TileShape(16, 3, 8)
    assert tile_shape(16, 24, 48, 9) == TileShape(16, 3, 8)
    assert tile_shape(16, 24, 32, 128) == TileShape(16, 2, 8)
    assert tile_shape(16, 24, 125, 64) == TileShape(16, 2, 8)
    assert tile_shape(8, 8, 36, 128) == TileShape(8, 2, 4)
    values, attrs = values_for("pointwise_6x6_plane", "int8", "int8")
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    text = compile_model(model, backend="c", target="x86_64-v4-vnni").files["test_graph.c"]
    text = text.decode() if isinstance(text, bytes) else text
    assert "acc23 = AOT_I32X16_DOTADD" in text and "acc24" not in text  # one tile: 8 channels x 3 vectors


@pytest.mark.parametrize("target", ["x86_64-v4-vnni", "x86_64-v3"])
def test_planes_of_few_pixels_put_the_channels_in_the_lanes(target: str) -> None:
    """A 3x3 plane's 9 pixels would fill 16 lanes: the output channels take them (pixel_rows.py);
    12 channels fill no whole vector of them, and a 6x6 plane wastes too little."""
    def text_of(case: str) -> str:
        values, attrs = values_for(case, "uint8", "int8")
        model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
        source = compile_model(model, backend="c", target=target).files["test_graph.c"]
        return source.decode() if isinstance(source, bytes) else source

    assert "pixel_rows" in text_of("pointwise_3x3_plane") and "pixel_rows" in text_of("pointwise_1d_5")
    assert "pixel_rows" not in text_of("pointwise_3x3_ragged_channels")
    assert "pixel_rows" not in text_of("pointwise_6x6_plane")


def test_int8_dot_defaults_from_the_features_and_is_validated(tmp_path: Path) -> None:
    assert load_target("x86_64-v4-vnni").int8_dot == "vpdpbusd"
    assert load_target("x86_64-v3").int8_dot == "vpmaddwd"
    assert [load_target(t).int8_dot for t in ("rpi4", "aarch64", "rpi3", "rpi-zero2")] == ["neon"] * 4
    assert load_target("rpi5").int8_dot == "sdot"
    assert default_int8_dot("armv7", "+neon,+vfp4") == "neon"
    assert [load_target(t).int8_dot for t in ("cortex-m4f", "cortex-m7", "x86_64")] == ["portable"] * 3
    assert default_int8_dot("x86_64", "+avx2,+fma,+avxvnni") == "vpdpbusd"
    assert default_int8_dot("x86_64", "+avx2,+fma") == "vpmaddwd"
    assert default_int8_dot("aarch64", "+neon,+dotprod") == "sdot"
    assert default_int8_dot("aarch64", "-neon") == "portable"
    text = Path(load_target("x86_64-v3").source).read_text().replace('int8_dot = "vpmaddwd"', 'int8_dot = "sdot4"')
    board = tmp_path / "board.toml"
    board.write_text(text)
    with pytest.raises(AotError, match="'int8_dot' 'sdot4' must be one of"):
        load_target(str(board))


@pytest.mark.skipif(BACKEND != "c", reason="the C header's forms")
@pytest.mark.parametrize("flags", ["-DAOT_NO_VECTOR_EXTENSIONS", "-mavxvnni"])
def test_the_header_s_other_forms_are_exact(flags: str) -> None:
    """The struct-and-loops form (C99 compilers without GNU vectors) and AVX-VNNI's vpdpbusd
    (where this machine has it)."""
    if flags == "-mavxvnni" and "avx_vnni" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this machine has no AVX-VNNI")
    values, attrs = values_for("3x3_ragged", "int8", "int8", seed=3)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    package = compile_model(model, backend="c", target="x86_64-v3" if flags == "-mavxvnni" else None)
    host = HostModel.build(package, opt="-O1", extra_cflags=f"-pedantic {flags}")
    assert_quantized_match(host.run(dict(feeds)), run_onnxruntime(model, feeds))


# QGemm with constant B: register tiles with the output columns in the lanes (integer_gemm.py).
# (rows, depth, columns): one row (a fully connected layer of batch 1) and a ragged block of
# rows past the tile's 4, depth past whole quads; columns fill whole vectors of 16 (and so 8, 4).
GEMMS = {"one_row": (1, 130, 32), "rows_5_depth_37": (5, 37, 48), "rows_9_wide": (9, 64, 16 * 9)}


def qgemm_tile_model(shape: tuple[int, int, int], dtype: str, float_out: bool = False, trans_a: bool = False):
    """A QGemm of constant B (transB, per-column scales and zero points) and a per-column bias."""
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = shape
    rng = np.random.default_rng(k + n)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.integers(-120, 121, (n, k)).astype(np.int8)  # b - b_zero_point within int8: the tiles
    inits = {"as": np.float32(0.021), "az": np.array(5 if dtype == "int8" else 131, dtype), "b": b,
             "bs": rng.uniform(0.002, 0.004, n).astype(np.float32), "bz": rng.integers(-3, 4, n).astype(np.int8),
             "c": rng.integers(-20000, 20000, n).astype(np.int32), "ys": np.float32(1.7),
             "yz": np.array(-7 if dtype == "int8" else 120, dtype)}
    names = ["a", "as", "az", "b", "bs", "bz", "c"] + ([] if float_out else ["ys", "yz"])
    out = TensorProto.FLOAT if float_out else (TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8)
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=1, transA=int(trans_a), alpha=0.75)
    a_type = TensorProto.INT8 if dtype == "int8" else TensorProto.UINT8
    graph = helper.make_graph(
        [node], "test_graph", [helper.make_tensor_value_info("a", a_type, list(a.shape))],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(inits[name]), name) for name in names[1:]])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model, {"a": a}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(GEMMS))
def test_qgemm_tiles_match_onnxruntime(case: str, dtype: str, target: str | None) -> None:
    model, feeds = qgemm_tile_model(GEMMS[case], dtype, trans_a=case == "rows_5_depth_37")
    if target is not None:  # the tiles, not the dot product per output
        assert "_DOTADD(" in generated_c(model, target) and "row_quads" in generated_c(model, target)
    check_tiled(model, feeds, target)


@pytest.mark.parametrize("target", TARGETS)
def test_qgemm_tiles_give_float_outputs(target: str | None) -> None:
    model, feeds = qgemm_tile_model(GEMMS["rows_5_depth_37"], "int8", float_out=True)
    ours, ref = run_aot(model, feeds, backend=BACKEND, target=target), run_onnxruntime(model, feeds)
    np.testing.assert_allclose(ours["y"], ref["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi5", "rpi4", "rpi3"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qgemm_tiles_match_onnxruntime_under_qemu(dtype: str, backend: str, target: str) -> None:
    """rpi5: the tiles' sdot step (signed bytes: uint8 A read as A - 128); rpi4 and rpi3: NEON's
    PairDotAdd (aarch64, armv7), the weights never -128."""
    model, feeds = qgemm_tile_model(GEMMS["rows_5_depth_37"], dtype)
    text = generated_c(model, target)
    assert "row_quads" in text and ("SDOTADD" in text if target == "rpi5" else "PAIR_DOTADD" in text)
    check_under_qemu(model, feeds, target, backend)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
@pytest.mark.parametrize("op", ["QLinearMatMul", "MatMulInteger"])
@pytest.mark.parametrize("dtypes", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")],
                         ids=["u8s8", "s8s8", "u8u8"])
def test_integer_matmul_tiles_match_onnxruntime(dtypes: tuple[str, str], op: str, batched: bool,
                                                target: str | None) -> None:
    """A constant b whose b - b_zero_point fits int8 (per-column zero points) takes the QGemm
    tiles; a batch of a's rows ([4, 16, 96] times [96, 48]) runs as one block of 64 rows."""
    from tests.test_ops_quantized_integer import QLINEAR_MATMUL_INPUTS, matmul_values

    values = matmul_values("2d", *dtypes, seed=3)
    rng = np.random.default_rng(7)
    zero = values["b_zero_point"].astype(np.int64).reshape(1, -1)
    values["b"] = (zero + rng.integers(-100, 101, values["b"].shape)).astype(dtypes[1])
    if batched:
        values["a"] = values["a"].reshape(4, 16, 96)
    inputs = QLINEAR_MATMUL_INPUTS if op == "QLinearMatMul" else ["a", "b", "a_zero_point", "b_zero_point"]
    model, feeds = model_of(op, inputs, values, {"a"}, ["y"])
    if target is not None:
        assert "row_quads" in generated_c(model, target)
    check_tiled(model, feeds, target)


def residual_add_model(dtype: str = "int8") -> tuple[object, dict[str, np.ndarray]]:
    """QLinearConv (1x1, 3 output channels) then QLinearAdd of its output and a second input, as
    int8 ResNet-8's residual Adds: 3 x 7 x 11 = 231 elements, 57 vectors of 4 and 3 more."""
    from onnx import helper

    from tests.test_ops_quantized_contrib import MS, ONNX_TYPES, contrib_model, integers, zero

    np_dtype = np.dtype(dtype).type
    rng = np.random.default_rng(7)
    inputs = {"x": integers(np_dtype, 1, 5, 7, 11, seed=3), "r": integers(np_dtype, 1, 3, 7, 11, seed=4)}
    inits = {"xs": np.float32(0.02), "xz": zero(np_dtype, -5, 123),
             "w": rng.integers(-127, 128, (3, 5, 1, 1)).astype(np.int8), "ws": np.float32(0.004),
             "wz": np.array(0, np.int8), "cs": np.float32(0.011), "cz": zero(np_dtype, 2, 130),
             "rs": np.float32(0.0137), "rz": zero(np_dtype, -9, 119), "ys": np.float32(0.0193),
             "yz": zero(np_dtype, -128, 0)}
    conv = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "cs", "cz"], ["c"])
    add = helper.make_node("QLinearAdd", ["c", "cs", "cz", "r", "rs", "rz", "ys", "yz"], ["y"], domain=MS)
    return contrib_model([conv, add], inputs, {"y": ONNX_TYPES[np.dtype(dtype)]}, inits), inputs


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_armv7_requantising_loops_run_in_vectors_under_qemu(dtype: str, backend: str) -> None:
    """On rpi3 (armv7, whose compilers vectorise no float loop) an Add of two int8 tensors is
    written as vectors of 4 requantised bytes with a scalar tail (aot/lowering/lane_loops.py);
    rpi4's is left to its compiler. Its values as onnxruntime's QLinearAdd gives them (which
    rounds along another float path: the exact share of test_ops_quantized_contrib)."""
    from tests.conformance import cross_unavailable
    from tests.test_ops_quantized_contrib import MIN_EXACT_SHARE

    model, feeds = residual_add_model(dtype)
    add_kernel = generated_c(model, "rpi3").split("QLinearAdd")[-1]
    assert "AOT_I32X4_STORE_NARROW(" in add_kernel and "AOT_F32X4_DIV(" in add_kernel
    assert "AOT_I32X4_STORE_NARROW(" not in generated_c(model, "rpi4").split("QLinearAdd")[-1]
    problem = cross_unavailable("rpi3")
    if problem:
        pytest.skip(problem)
    from aot.toolchain.target_build import TargetModel

    built = TargetModel.build(compile_model(model, backend=backend, target="rpi3"), load_target("rpi3"))
    got, want = built.run(dict(feeds))["y"], run_onnxruntime(model, feeds)["y"]
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1 and (diff == 0).mean() >= MIN_EXACT_SHARE, (int((diff > 0).sum()), diff.max())
    assert len(np.unique(want)) > 32
