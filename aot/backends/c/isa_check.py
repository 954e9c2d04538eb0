"""A compile-time check in <name>.c that the compiler may use the vector registers the register
tiles were sized for.

GNU C vector types wider than what the compiler's flags enable are split into narrower pieces, and
on x86 gcc splits 8- and 16-float vectors without AVX into scalar code, many times slower (the
example model built with a plain `gcc -O2`). So a package never builds slow without a word: the C stops
with an #error that names the flags to add. The package's Makefile and CMakeLists pass them;
AOT_ALLOW_SLOW_VECTORS builds anyway (a correctness check on a machine without the ISA).

Only x86 needs it: aarch64 has NEON in its baseline, and narrower targets (4 floats, SSE or NEON
sized) and scalar ones (Cortex-M) get tiles that fit any compiler's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Lanes of float32 -> what x86 needs for them: the predefined macros and the flags that give them.
_X86_NEEDS = {
    8: (("__AVX2__", "__FMA__"), "-mavx2 -mfma", "AVX2 and FMA"),
    16: (("__AVX512F__", "__FMA__"), "-mavx512f -mfma", "AVX-512"),
}


def vector_lanes(helpers: Iterable[str]) -> list[int]:
    """The widths (in lanes) of the float vector types among the printed code's helpers
    (aot_f32x8 ...), narrowest first."""
    return sorted(int(m.group(1)) for h in helpers if (m := re.fullmatch(r"aot_f32x(\d+)", h)))


def widest_vector(helpers: Iterable[str]) -> int:
    """The widest float vector (in lanes) among the printed code's helpers (aot_f32x8 ...)."""
    return max(vector_lanes(helpers), default=1)


def vector_isa_check(file_name: str, lanes: int) -> str:
    """C preprocessor lines that stop the build of `file_name` when its `lanes`-wide vectors
    would be split into scalar code; empty when any compiler's default flags suit them."""
    if lanes not in _X86_NEEDS:
        return ""
    macros, flags, isa = _X86_NEEDS[lanes]
    have = " && ".join(f"defined({m})" for m in macros)
    message = f"{file_name}: its register tiles need {isa}: compile with -march=native or {flags}"
    if lanes > 8:  # a package compiled without --target on an AVX-512 machine, built on another
        message += " (for a CPU without AVX-512, compile the model with --target x86_64-v3)"
    return f"""\
/* {lanes}-float register tiles need {isa} on x86, or the compiler splits them into scalar code. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) \\
    && !({have}) && !defined(AOT_ALLOW_SLOW_VECTORS)
#error "{message} (or define AOT_ALLOW_SLOW_VECTORS)"
#endif"""
