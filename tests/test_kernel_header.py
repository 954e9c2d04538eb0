"""runtime_c/aot_kernels.h: the vector types and min/max the generated kernels use, checked as C.

Every macro of every width is run, through GNU C vector types, through the plain-C struct
fallback (AOT_NO_VECTOR_EXTENSIONS) and, under qemu, through armv7 NEON intrinsics, and compared
with the scalar result; and a model asks for exactly the widths its kernels use."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import aot
from aot.host.build import STRICT_CFLAGS
from aot.resources import resource_dir

EXAMPLE = Path(__file__).parent.parent / "examples" / "tiny_cnn.onnx"
LANES = (4, 8, 16)

# One check per lane width: every macro, lane by lane against the scalar expression. NaN in a
# propagates through MAX and MIN (onnxruntime's rule), as does the NaN b holds in lane 1. The
# reductions must give exactly the halving tree's float (the order is part of their meaning).
_CHECK = """
static int check_f32x{n}(void)
{{
    float a[{n}], b[{n}], c[{n}], out[{n}];
    int8_t narrow[{n}];
    int16_t wide[{n}];
    int i, bad = 0;
    for (i = 0; i < {n}; ++i) {{
        a[i] = (float)(i % 5) - 2.0f;
        b[i] = (float)(i % 3) - 1.0f;
        c[i] = 0.5f * (float)i;
        narrow[i] = (int8_t)(i * 37 - 128);
        wide[i] = (int16_t)(i * 3001 - 32768);
    }}
    a[{n} - 1] = NAN;
    b[1] = NAN;
#define LANES_EQUAL(expr, scalar) \\
    AOT_F32X{n}_STORE(out, expr); \\
    for (i = 0; i < {n}; ++i) {{ float want = (scalar); \\
        if (!(out[i] == want || (out[i] != out[i] && want != want))) {{ bad = 1; \\
            printf("f32x{n} %s lane %d: %g, want %g\\n", #expr, i, (double)out[i], (double)want); }} }}
    {{
        aot_f32x{n} va = AOT_F32X{n}_LOAD(a), vb = AOT_F32X{n}_LOAD(b), vc = AOT_F32X{n}_LOAD(c);
        LANES_EQUAL(AOT_F32X{n}_SPLAT(3.0f), 3.0f)
        LANES_EQUAL(AOT_F32X{n}_SPLAT_LOAD(&c[3]), c[3])
        LANES_EQUAL(AOT_F32X{n}_WIDEN(narrow), (float)narrow[i])
        LANES_EQUAL(AOT_F32X{n}_WIDEN(wide), (float)wide[i])
        LANES_EQUAL(AOT_F32X{n}_MULADD(vc, va, vb), c[i] + a[i] * b[i])
        LANES_EQUAL(AOT_F32X{n}_MAX(va, vb), (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i])
        LANES_EQUAL(AOT_F32X{n}_MIN(va, vb), (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i])
        LANES_EQUAL(AOT_F32X{n}_ADD(va, vb), a[i] + b[i])
        LANES_EQUAL(AOT_F32X{n}_SUB(va, vb), a[i] - b[i])
        LANES_EQUAL(AOT_F32X{n}_MUL(va, vb), a[i] * b[i])
        LANES_EQUAL(AOT_F32X{n}_DIV(vc, AOT_F32X{n}_SPLAT(2.0f)), c[i] / 2.0f)
        LANES_EQUAL(AOT_F32X{n}_SELECT_LT(va, vb, vc, va), a[i] < b[i] ? c[i] : a[i])
        LANES_EQUAL(AOT_F32X{n}_SELECT_LE(va, vb, vc, va), a[i] <= b[i] ? c[i] : a[i])
        LANES_EQUAL(AOT_F32X{n}_SELECT_GT(va, vb, vc, va), a[i] > b[i] ? c[i] : a[i])
        LANES_EQUAL(AOT_F32X{n}_SELECT_GE(va, vb, vc, va), a[i] >= b[i] ? c[i] : a[i])
        LANES_EQUAL(AOT_F32X{n}_PICK_LESS(va, vb), a[i] < b[i] ? a[i] : b[i])
        LANES_EQUAL(AOT_F32X{n}_PICK_GREATER(va, vb), a[i] > b[i] ? a[i] : b[i])
        {{  /* the reductions: VecReduce's halving tree, recomputed lane by lane (c: no NaN; a: one) */
            float tree[{n}], want_sum, want_max, want_nan, got_sum, got_max, got_nan;
            int w;
            for (i = 0; i < {n}; ++i) tree[i] = c[i] * 1.1f + 1e-7f * (float)i;
            for (w = {n} / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) tree[i] = tree[i] + tree[i + w];
            want_sum = tree[0];
            for (i = 0; i < {n}; ++i) tree[i] = b[(i * 5) % {n}] == b[(i * 5) % {n}] ? b[(i * 5) % {n}] : 0.0f;
            for (w = {n} / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) tree[i] = aot_max_float32(tree[i], tree[i + w]);
            want_max = tree[0];
            want_nan = NAN;
            for (i = 0; i < {n}; ++i) {{ out[i] = c[i] * 1.1f + 1e-7f * (float)i; }}
            got_sum = AOT_F32X{n}_REDUCE_ADD(AOT_F32X{n}_LOAD(out));
            for (i = 0; i < {n}; ++i) out[i] = b[(i * 5) % {n}] == b[(i * 5) % {n}] ? b[(i * 5) % {n}] : 0.0f;
            got_max = AOT_F32X{n}_REDUCE_MAX(AOT_F32X{n}_LOAD(out));
            got_nan = AOT_F32X{n}_REDUCE_MAX(va);
            if (got_sum != want_sum || got_max != want_max || got_nan == got_nan || want_nan == want_nan) {{
                bad = 1;
                printf("f32x{n} REDUCE: sum %g want %g, max %g want %g, max with NaN %g\\n", (double)got_sum,
                       (double)want_sum, (double)got_max, (double)want_max, (double)got_nan);
            }}
        }}
    }}
#undef LANES_EQUAL
    return bad;
}}
"""


# The 4-lane walk (aot/backends/c/load_walks.py): three steps read three consecutive vectors and
# leave the pointer past them (armv7 gcc: a post-increment vld1 as inline assembly; LOAD2_STEP two
# at once, one vld1 of four d registers).
_CHECK_WALK = """
static int check_f32x4_walk(void)
{
    float data[24], out[20];
    const float *walk = &data[2];
    aot_f32x4 v0, v1, v2, v3, v4;
    int i, bad = 0;
    for (i = 0; i < 24; ++i) data[i] = 0.25f * (float)i - 1.0f;
    v0 = AOT_F32X4_LOAD_STEP(walk);
    v1 = AOT_F32X4_LOAD_STEP(walk);
    v2 = AOT_F32X4_LOAD_STEP(walk);
    AOT_F32X4_LOAD2_STEP(walk, v3, v4);
    AOT_F32X4_STORE(&out[0], v0);
    AOT_F32X4_STORE(&out[4], v1);
    AOT_F32X4_STORE(&out[8], v2);
    AOT_F32X4_STORE(&out[12], v3);
    AOT_F32X4_STORE(&out[16], v4);
    for (i = 0; i < 20; ++i) if (out[i] != data[2 + i]) { bad = 1; printf("walk lane %d: %g\\n", i, (double)out[i]); }
    if (walk != &data[22]) { bad = 1; puts("walk: the pointer did not move past the five vectors"); }
    return bad;
}
"""


# The 4-lane products by lane (register_tiles.py: broadcasts loaded four at a time): lane l of v
# in every lane, and acc + b * that (armv7: vmla by scalar; the values make every product exact,
# so fused and unfused agree).
_CHECK_LANES = """
static int check_f32x4_lanes(void)
{
    float v[4] = { -2.0f, 0.5f, 3.0f, -0.25f }, acc[4] = { 1.0f, 2.0f, -3.0f, 0.5f };
    float b[4] = { 4.0f, -1.0f, 0.5f, 2.0f }, out[4];
    aot_f32x4 vv = AOT_F32X4_LOAD(v), va = AOT_F32X4_LOAD(acc), vb = AOT_F32X4_LOAD(b);
    int i, bad = 0;
#define LANE_CHECK(l) \
    AOT_F32X4_STORE(out, AOT_F32X4_LANE(vv, l)); \
    for (i = 0; i < 4; ++i) if (out[i] != v[l]) { bad = 1; printf("LANE %d lane %d: %g\\n", l, i, (double)out[i]); } \
    AOT_F32X4_STORE(out, AOT_F32X4_MULADD_LANE(va, vb, vv, l)); \
    for (i = 0; i < 4; ++i) if (out[i] != acc[i] + b[i] * v[l]) { \
        bad = 1; printf("MULADD_LANE %d lane %d: %g\\n", l, i, (double)out[i]); }
    LANE_CHECK(0) LANE_CHECK(1) LANE_CHECK(2) LANE_CHECK(3)
#undef LANE_CHECK
    AOT_F32X4_STORE(out, AOT_F32X4_ZIP_LO(vv, vb));
    for (i = 0; i < 4; ++i) if (out[i] != (i % 2 ? b : v)[i / 2]) { bad = 1; printf("ZIP_LO lane %d\\n", i); }
    AOT_F32X4_STORE(out, AOT_F32X4_ZIP_HI(vv, vb));
    for (i = 0; i < 4; ++i) if (out[i] != (i % 2 ? b : v)[2 + i / 2]) { bad = 1; printf("ZIP_HI lane %d\\n", i); }
    return bad;
}
"""


def _program(tmp_path: Path) -> Path:
    checks = "".join(_CHECK.format(n=n) for n in LANES) + _CHECK_WALK + _CHECK_LANES
    calls = " | ".join(f"check_f32x{n}()" for n in LANES) + " | check_f32x4_walk() | check_f32x4_lanes()"
    source = tmp_path / "vectors.c"
    source.write_text(
        "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n"
        + "".join(f"#define AOT_WANT_F32X{n}\n" for n in LANES)
        + '#include "aot_kernels.h"\n' + checks
        + "int main(void)\n{\n"
        + "    int bad = !isnan(aot_min_float32(NAN, 1.0f)) || !isnan(aot_max_float64(1.0, NAN))\n"
        + "              || aot_max_int8(-3, 2) != 2 || aot_min_uint64(7u, 9u) != 7u;\n"
        + f"    bad |= {calls};\n    puts(bad ? \"FAIL\" : \"OK\");\n    return bad;\n}}\n")
    return source


@pytest.mark.parametrize("cc,flags", [
    ("gcc", "-march=native"), ("clang", "-march=native"), ("gcc", "-DAOT_NO_VECTOR_EXTENSIONS"),
    ("clang", "-mno-avx"), ("arm-linux-gnueabihf-gcc", "-mfpu=neon -mfloat-abi=hard"),
    # rpi3's flags: NEON with FMA; the comparisons as inline assembly (gcc) or intrinsics (clang)
    ("arm-linux-gnueabihf-gcc", "-mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard"),
    ("clang", "--target=arm-linux-gnueabihf -mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard"),
])
def test_every_vector_macro_gives_the_scalar_result(tmp_path: Path, cc: str, flags: str) -> None:
    runner = _runner(cc, flags)
    _assert_prints_ok(tmp_path, cc, flags, _program(tmp_path), runner, ["-lm"])


# Cross compilers' programs run under qemu-user with the Debian cross sysroot.
_QEMU = {"arm": ["qemu-arm", "-L", "/usr/arm-linux-gnueabihf"],
         "aarch64": ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]}


def _runner(cc: str, flags: str) -> list[str]:
    """How to run what `cc flags` builds (skipping the test when this machine cannot): natively,
    or under qemu-user for an Arm cross compiler or clang --target."""
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    for arch, runner in _QEMU.items():
        if cc.startswith(f"{arch}-") or f"--target={arch}-" in flags:
            if not shutil.which(runner[0]):
                pytest.skip(f"{runner[0]} not installed")
            return runner
    return []


def _assert_prints_ok(tmp_path: Path, cc: str, flags: str, source: Path, runner: list[str],
                      libs: list[str]) -> None:
    """`source` builds warning-free with the header and prints OK when run."""
    program = tmp_path / source.stem
    build = subprocess.run([cc, *STRICT_CFLAGS.split(), "-pedantic", "-O1", *flags.split(),
                            "-I", str(resource_dir("runtime_c")), str(source), "-o", str(program), *libs],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    result = subprocess.run([*runner, str(program)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("target,lanes", [("x86_64-v4", [8, 16]), ("x86_64-v3", [8]), ("rpi3", [4]),
                                          ("cortex-m4f", [])])
def test_a_model_asks_for_exactly_the_vector_widths_its_kernels_use(target: str, lanes: list[int]) -> None:
    package = aot.compile(EXAMPLE, target=target)
    source = package.files["tiny_cnn.c"].decode()
    wanted = [int(line.rsplit("X", 1)[1]) for line in source.splitlines() if line.startswith("#define AOT_WANT_F32X")]
    used = [n for n in LANES if f"AOT_F32X{n}_" in source]
    assert wanted == used == lanes
    assert package.files["runtime/aot_kernels.h"] == (resource_dir("runtime_c") / "aot_kernels.h").read_bytes()
    assert "typedef float aot_f32x" not in source  # the types come from the header only


# The int8 tiles' int32 vectors (aot/ops/quantized/integer_tiles.py): DOTADD lane by lane against
# the plain sum of four products of unsigned by signed bytes, with the extremes (255 * -128 four
# times in a lane: -130560, past what 16 bits hold), and accumulators at both ends of int32, where
# the sum wraps.
_CHECK_DOTADD = """
static int check_i32x{n}_dotadd(void)
{{
    uint8_t a[4 * {n}];
    int8_t b[4 * {n}], quad[4] = {{ -128, 127, -128, -1 }};
    int32_t acc[{n}], out[{n}];
    int i, j, bad = 0;
    for (i = 0; i < 4 * {n}; ++i) {{
        a[i] = (uint8_t)(i < 8 ? 255 : (i * 67 + 11) % 256);
        b[i] = (int8_t)(i < 4 ? -128 : i < 8 ? 127 : (i * 89 + 5) % 256 - 128);
    }}
    for (i = 0; i < {n}; ++i) acc[i] = i == 1 ? INT32_MAX : i == 2 ? INT32_MIN : (int32_t)(i * 1000003 - 7);
    {{
        aot_i32x{n} va = AOT_I32X{n}_QUADS(a), vacc = AOT_I32X{n}_QUADS((const uint8_t *)acc);
        AOT_I32X{n}_STORE(out, AOT_I32X{n}_DOTADD(vacc, va, AOT_I32X{n}_QUADS((const uint8_t *)b)));
        for (i = 0; i < {n}; ++i) {{
            uint32_t want = (uint32_t)acc[i];
            for (j = 0; j < 4; ++j) want += (uint32_t)((int32_t)a[4 * i + j] * (int32_t)b[4 * i + j]);
            if ((uint32_t)out[i] != want) {{ bad = 1; printf("i32x{n} DOTADD lane %d: %ld\\n", i, (long)out[i]); }}
        }}
        AOT_I32X{n}_STORE(out, AOT_I32X{n}_DOTADD(AOT_I32X{n}_SPLAT(-5), va, AOT_I32X{n}_SPLAT_QUAD(quad)));
        for (i = 0; i < {n}; ++i) {{
            int32_t want = -5;
            for (j = 0; j < 4; ++j) want += (int32_t)a[4 * i + j] * (int32_t)quad[j];
            if (out[i] != want) {{ bad = 1; printf("i32x{n} DOTADD of SPLAT_QUAD lane %d: %ld\\n", i, (long)out[i]); }}
        }}
    }}
    return bad;
}}
"""


# PAIR_DOTADD (4 lanes): signed bytes, the weights never -128; -128 * -127 twice in each 16-bit sum.
_CHECK_PAIR_DOTADD = """
static int check_i32x4_pair_dotadd(void)
{
    int8_t a[16], quad[4] = { -127, -127, 127, -1 };
    int32_t acc[4] = { 7, INT32_MAX, INT32_MIN, -3 }, out[4];
    int i, j, bad = 0;
    for (i = 0; i < 16; ++i) a[i] = (int8_t)(i < 6 || i % 4 == 1 ? -128 : (i * 67 + 11) % 256 - 128);
    AOT_I32X4_STORE(out, AOT_I32X4_PAIR_DOTADD(AOT_I32X4_QUADS((const uint8_t *)acc), AOT_I32X4_PAIRS(a),
                                               AOT_I32X4_SPLAT_PAIRS(quad)));
    for (i = 0; i < 4; ++i) {
        uint32_t want = (uint32_t)acc[i];
        for (j = 0; j < 4; ++j) want += (uint32_t)((int32_t)a[4 * i + j] * (int32_t)quad[j]);
        if ((uint32_t)out[i] != want) { bad = 1; printf("i32x4 PAIR_DOTADD lane %d: %ld\\n", i, (long)out[i]); }
    }
    {   /* SDOTADD: any signed weight, -128 * -128 four times */
        int8_t w[16];
        for (i = 0; i < 16; ++i) w[i] = (int8_t)(i < 4 ? -128 : (i * 89 + 5) % 256 - 128);
        aot_i32x4 va = AOT_I32X4_QUADS((const uint8_t *)a), vw = AOT_I32X4_QUADS((const uint8_t *)w);
        AOT_I32X4_STORE(out, AOT_I32X4_SDOTADD(AOT_I32X4_QUADS((const uint8_t *)acc), va, vw));
        for (i = 0; i < 4; ++i) {
            uint32_t want = (uint32_t)acc[i];
            for (j = 0; j < 4; ++j) want += (uint32_t)((int32_t)a[4 * i + j] * (int32_t)w[4 * i + j]);
            if ((uint32_t)out[i] != want) { bad = 1; printf("i32x4 SDOTADD lane %d: %ld\\n", i, (long)out[i]); }
        }
    }
    return bad;
}
"""


# SDOTADD (8 lanes, AVX2's vpmaddubsw form): signed bytes, the weights never -128; -128 * -127
# twice in each 16-bit pair sum (32512, just under where vpmaddubsw saturates), -128 * 127 too.
_CHECK_SDOTADD_8 = """
static int check_i32x8_sdotadd(void)
{
    int8_t a[32], w[32], quad[4] = { -127, -127, 127, -1 };
    int32_t acc[8] = { 7, INT32_MAX, INT32_MIN, -3, 0, 1, -1, 99 }, out[8];
    int i, j, bad = 0;
    for (i = 0; i < 32; ++i) {
        a[i] = (int8_t)(i < 6 || i % 4 == 1 ? -128 : (i * 67 + 11) % 256 - 128);
        w[i] = (int8_t)(i < 4 ? -127 : i < 8 ? 127 : (i * 89 + 5) % 255 - 127);
    }
    AOT_I32X8_STORE(out, AOT_I32X8_SDOTADD(AOT_I32X8_QUADS((const uint8_t *)acc), AOT_I32X8_QUADS((const uint8_t *)a),
                                           AOT_I32X8_QUADS((const uint8_t *)w)));
    for (i = 0; i < 8; ++i) {
        uint32_t want = (uint32_t)acc[i];
        for (j = 0; j < 4; ++j) want += (uint32_t)((int32_t)a[4 * i + j] * (int32_t)w[4 * i + j]);
        if ((uint32_t)out[i] != want) { bad = 1; printf("i32x8 SDOTADD lane %d: %ld\\n", i, (long)out[i]); }
    }
    AOT_I32X8_STORE(out, AOT_I32X8_SDOTADD(AOT_I32X8_SPLAT(-5), AOT_I32X8_QUADS((const uint8_t *)a),
                                           AOT_I32X8_SPLAT_QUAD(quad)));
    for (i = 0; i < 8; ++i) {
        int32_t want = -5;
        for (j = 0; j < 4; ++j) want += (int32_t)a[4 * i + j] * (int32_t)quad[j];
        if (out[i] != want) { bad = 1; printf("i32x8 SDOTADD of SPLAT_QUAD lane %d: %ld\\n", i, (long)out[i]); }
    }
    return bad;
}
"""


def _dotadd_program(tmp_path: Path, lanes: tuple[int, ...]) -> Path:
    source = tmp_path / "dotadd.c"
    checks = [f"check_i32x{n}_dotadd()" for n in lanes] + ["check_i32x4_pair_dotadd()"]
    checks += ["check_i32x8_sdotadd()"] if 8 in lanes else []
    source.write_text("#include <stdint.h>\n#include <stdio.h>\n"
                      + "".join(f"#define AOT_WANT_I32X{n}\n" for n in lanes)
                      + '#include "aot_kernels.h"\n' + "".join(_CHECK_DOTADD.format(n=n) for n in lanes)
                      + _CHECK_PAIR_DOTADD + (_CHECK_SDOTADD_8 if 8 in lanes else "")
                      + "int main(void)\n{\n    int bad = " + " | ".join(checks)
                      + ";\n    puts(bad ? \"FAIL\" : \"OK\");\n    return bad;\n}\n")
    return source


@pytest.mark.parametrize("cc,flags", [
    ("gcc", "-march=native"), ("clang", "-march=native"), ("gcc", "-mavx2"), ("gcc", "-DAOT_NO_VECTOR_EXTENSIONS"),
    ("gcc", "-march=x86-64-v3"), ("clang", "-march=x86-64-v3"), ("gcc", "-march=x86-64"),
    # aarch64 NEON (rpi4): the 16-bit products and pairwise adds, under qemu
    ("aarch64-linux-gnu-gcc", "-mcpu=cortex-a72"), ("clang", "--target=aarch64-linux-gnu -mcpu=cortex-a72"),
    ("aarch64-linux-gnu-gcc", "-DAOT_NO_VECTOR_EXTENSIONS"),
    # rpi5: sdot
    ("aarch64-linux-gnu-gcc", "-mcpu=cortex-a76"), ("clang", "--target=aarch64-linux-gnu -mcpu=cortex-a76"),
    # armv7 NEON (rpi3): the same with vmul.i16 and vpadal.s16
    ("arm-linux-gnueabihf-gcc", "-mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard"),
    ("clang", "--target=arm-linux-gnueabihf -mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard"),
])
def test_every_dotadd_gives_the_exact_wrapping_sum(tmp_path: Path, cc: str, flags: str) -> None:
    runner = _runner(cc, flags)
    lanes = (4,) if runner else (4, 8, 16)
    _assert_prints_ok(tmp_path, cc, flags, _dotadd_program(tmp_path, lanes), runner, [])


# The int8 tiles' requantisation in registers (4, 8 and 16 lanes): round half to even at the
# halves and past 2^22, as a float and converted to int32 (ROUND_CONVERT), conversions both
# ways, the lanes narrowed to bytes at an odd address.
_REQUANTIZE_PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#define AOT_WANT_F32X@
#define AOT_WANT_I32X@
#include "aot_kernels.h"
#define LANES @
int main(void)
{
    static const float in[16] = { 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 4194303.5f, 1e9f,
                                  -4194304.5f, 8388607.0f, 127.49f, -128.5f, 3.5f, -3.5f, 0.49f, -0.0f };
    static const float want[16] = { 0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 4194304.0f, 1e9f,
                                    -4194304.0f, 8388607.0f, 127.0f, -128.0f, 4.0f, -4.0f, 0.0f, -0.0f };
    static const int32_t pattern[4] = { 16777217, -7, INT32_MAX, 0 };
    static const float converted[4] = { 16777218.0f, -6.0f, -2147483648.0f, 1.0f };
    static const float values[4] = { -128.0f, 127.0f, 0.0f, -1.0f };
    static const uint8_t narrowed[4] = { 0x80, 0x7f, 0, 0xff };
    int32_t ints[LANES], back[LANES], rounded[LANES];
    float out[LANES], floats[LANES];
    uint8_t bytes[LANES + 5] = { 0 };
    int i, j, bad = 0;
    for (i = 0; i < LANES; ++i) { ints[i] = pattern[i % 4]; floats[i] = values[i % 4]; }
    for (i = 0; i < 16; i += LANES) {
        AOT_F32X@_STORE(out, AOT_F32X@_ROUND_EVEN(AOT_F32X@_LOAD(&in[i])));
        for (j = 0; j < LANES; ++j)
            if (out[j] != want[i + j]) { bad = 1; printf("ROUND_EVEN(%.2f) = %.2f\n", in[i + j], out[j]); }
        AOT_I32X@_STORE(rounded, AOT_I32X@_ROUND_CONVERT(AOT_F32X@_LOAD(&in[i])));
        for (j = 0; j < LANES; ++j)
            if (rounded[j] != (int32_t)want[i + j]) { bad = 1; printf("ROUND_CONVERT(%.2f)\n", in[i + j]); }
    }
    AOT_F32X@_STORE(out, AOT_F32X@_CONVERT(AOT_I32X@_ADD(AOT_I32X@_QUADS((const uint8_t *)ints), AOT_I32X@_SPLAT(1))));
    for (j = 0; j < LANES; ++j)
        if (out[j] != converted[j % 4]) { bad = 1; printf("CONVERT to float: lane %d %.1f\n", j, out[j]); }
    {
        aot_i32x@ v = AOT_I32X@_CONVERT(AOT_F32X@_LOAD(floats));
        AOT_I32X@_STORE(back, v);
        AOT_I32X@_STORE_NARROW(&bytes[3], v);
        for (j = 0; j < LANES; ++j) {
            if (back[j] != (int32_t)values[j % 4]) { bad = 1; puts("CONVERT to int32"); }
            if (bytes[3 + j] != narrowed[j % 4]) { bad = 1; puts("STORE_NARROW"); }
        }
        if (bytes[2] != 0 || bytes[3 + LANES] != 0) { bad = 1; puts("STORE_NARROW past its bytes"); }
#if LANES > 4
        for (j = 0; j < LANES + 5; ++j) bytes[j] = 0x55;
        AOT_I32X@_STORE_NARROW_FIRST(&bytes[1], v, LANES - 3);
        for (j = 0; j < LANES + 5; ++j) {
            int inside = j >= 1 && j < LANES - 2;
            if (bytes[j] != (inside ? narrowed[(j - 1) % 4] : 0x55)) { bad = 1; printf("FIRST byte %d\n", j); }
        }
#endif
    }
    {   /* bytes widened to int32 lanes, read from an odd address (x86: vpmovsxbd / vpmovzxbd) */
        static const uint8_t raw[4] = { 0x80, 0x7f, 0xff, 0x01 };
        static const int32_t as_i8[4] = { -128, 127, -1, 1 }, as_u8[4] = { 128, 127, 255, 1 };
        int32_t wide[LANES];
        for (j = 0; j < LANES; ++j) bytes[1 + j] = raw[j % 4];
        AOT_I32X@_STORE(wide, AOT_I32X@_EXTEND_I8((const int8_t *)&bytes[1]));
        for (j = 0; j < LANES; ++j) if (wide[j] != as_i8[j % 4]) { bad = 1; printf("EXTEND_I8 lane %d\n", j); }
        AOT_I32X@_STORE(wide, AOT_I32X@_EXTEND_U8(&bytes[1]));
        for (j = 0; j < LANES; ++j) if (wide[j] != as_u8[j % 4]) { bad = 1; printf("EXTEND_U8 lane %d\n", j); }
    }
    puts(bad ? "FAIL" : "OK");
    return bad;
}
"""


@pytest.mark.parametrize("cc,flags", [
    ("gcc", "-march=native"), ("clang", "-march=native"), ("gcc", "-DAOT_NO_VECTOR_EXTENSIONS"),
    ("gcc", "-march=x86-64-v3"), ("clang", "-march=x86-64-v3"), ("gcc", "-march=x86-64"),
    ("aarch64-linux-gnu-gcc", "-mcpu=cortex-a72"), ("clang", "--target=aarch64-linux-gnu -mcpu=cortex-a72"),
    # rpi3's flags (vrintn), and armv7 NEON without the ARMv8 rounding (the 1.5 * 2^23 form)
    ("arm-linux-gnueabihf-gcc", "-mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard"),
    ("arm-linux-gnueabihf-gcc", "-mfpu=neon -mfloat-abi=hard"),
    ("clang", "--target=arm-linux-gnueabihf -mcpu=cortex-a7 -mfpu=neon -mfloat-abi=hard"),
])
def test_the_requantisation_in_registers_is_exact(tmp_path: Path, cc: str, flags: str) -> None:
    runner = _runner(cc, flags)
    for lanes in (4,) if runner else (4, 8, 16):  # x86's tiles: 8 and 16 lanes too
        source = tmp_path / f"requantize{lanes}.c"
        source.write_text(_REQUANTIZE_PROGRAM.replace("@", str(lanes)))
        _assert_prints_ok(tmp_path, cc, flags, source, runner, [])
    if "neon-fp-armv8" in flags or "cortex-a7 " in flags:  # the instruction each armv7 form takes
        disassembly = subprocess.run(["arm-linux-gnueabihf-objdump", "-d", str(tmp_path / "requantize4")],
                                     capture_output=True, text=True, check=True).stdout
        assert ("vrintn.f32" in disassembly) == ("neon-fp-armv8" in flags)


def test_llvm_rounds_armv8_lanes_with_vrintn(tmp_path: Path) -> None:
    """The llvm backend's rpi3 code (an ARMv8 core's 32-bit NEON: +fp-armv8) rounds an int8
    convolution's requantisation with vrintn, neither calling roundevenf per lane nor adding 2^23."""
    from tests.test_int8_tiles import QLINEAR_CONV_INPUTS, model_of, values_for

    if shutil.which("arm-linux-gnueabihf-objdump") is None:
        pytest.skip("arm-linux-gnueabihf-objdump not installed")
    values, attrs = values_for("depthwise_3x3", "int8", "int8")
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    package = aot.compile(model, backend="llvm", target="rpi3")
    (name,) = [n for n in package.files if n.endswith(".o")]
    (tmp_path / "model.o").write_bytes(package.files[name])
    disassembly = subprocess.run(["arm-linux-gnueabihf-objdump", "-dr", str(tmp_path / "model.o")],
                                 capture_output=True, text=True, check=True).stdout
    assert "vrintn.f32" in disassembly and "roundevenf" not in disassembly
