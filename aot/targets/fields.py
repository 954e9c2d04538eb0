"""What each field of a target .toml file may hold.

A target file may come from anyone (a board vendor, a download). Its strings end up in file
names (`<name>.<triple>.o`), in the package's Makefile and CMake files, and on compiler and
emulator command lines, so each field is held to the narrowest type and character set its real
values need: a triple cannot climb out of the output folder, a description cannot end its
Makefile comment, a C flag cannot expand `$(shell ...)` or redirect the compiler's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_ALIGNMENT = 4096   # a page: more than any cache line or vector load needs
MAX_TEXT = 200         # characters of a description
MAX_WORD = 64          # characters of a triple, a CPU name, a compiler flag
MAX_LIST = 512         # characters of a feature list or a compiler flag
MAX_CFLAGS = 64
MAX_CACHE_BYTES = 1 << 30

# arch-vendor-os[-environment], each part a plain word: no "/" and no "..", it names a file.
TRIPLE = re.compile(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+){2,3}")
_CPU = re.compile(r"[A-Za-z0-9_.+-]+")
_FEATURES = re.compile(r"([+-][A-Za-z0-9_.-]+(,[+-][A-Za-z0-9_.-]+)*)?")
_ZIG_TARGET = re.compile(r"([A-Za-z0-9_.]+(-[A-Za-z0-9_.]+){1,3})?")
# Programs are looked up on the user's PATH, never named by path: a board file may pick which
# cross GCC ("arm-none-eabi-" + "gcc") or which qemu-user runs, not any program on the disk.
_GCC_PREFIX = re.compile(r"([A-Za-z0-9_.+]+-)*")
_QEMU = re.compile(r"(qemu-[A-Za-z0-9_.+-]+)?")
# qemu's -cpu value: a model and its properties ("rv64,v=true,vlen=256"), one argument that cannot
# be read as an option (it starts with a letter or digit) and holds no blank, quote or path.
_QEMU_CPU = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.,=+-]*)?")
_TOOLCHAINS = ("gcc", "zig")
# One compiler flag: no blanks, quotes, `$`, `#`, `;`, backslash, backtick, brackets or globs, so
# it means the same to make, CMake, a shell and an argument list.
_CFLAG = re.compile(r"-[A-Za-z0-9_.,=+:/-]+")
# Flags that would make the compiler write elsewhere than its -o (output, dependency files,
# dumps, profiles) or run or load other programs (plugins, specs, wrappers, tool paths, flags
# passed on to the assembler, linker or preprocessor). A target's flags choose the ISA and ABI.
_FORBIDDEN_CFLAG_PREFIXES = (
    "-o", "--output", "-M", "-dump", "-save-temps", "-aux-info", "-fdump-", "-fprofile-generate",
    "-fprofile-dir", "-fcallgraph-info", "-fstack-usage", "-B", "-fplugin", "-specs", "--specs", "-wrapper",
    "-fuse-ld", "--ld-path", "-ccc-", "-Wl,", "-Wa,", "-Wp,", "-X", "--for-linker", "--for-assembler",
)
_FLOAT_ABIS = ("hard", "soft", "softfp")
_OSES = ("linux", "none")
_VECTOR_BITS = (0, 128, 256, 512)
# The int8 tiles' dot-product step (aot/ops/quantized/integer_tiles.py): x86's vpdpbusd (AVX-512
# VNNI or AVX-VNNI), AVX2's exact vpmaddwd sequence, NEON's exact sequences on aarch64 and armv7
# ("neon": signed bytes' products summed in 16 bits, pairwise widening adds; runtime_c/aot_kernels.h
# AOT_I32X4_PAIR_DOTADD and AOT_I32X4_DOTADD), aarch64's sdot where the preset has the dot-product
# extension ("sdot": +dotprod, rpi5; AOT_I32X4_SDOTADD), or "portable": the plain integer loops.
# Cortex-M's smlad (the DSP extension) is to come.
INT8_DOTS = ("vpdpbusd", "vpmaddwd", "sdot", "neon", "portable")

Check = Callable[[Any], "str | None"]  # the problem with a value, None when it is fine


def _shown(value: Any) -> str:
    """A value as an error message quotes it: repr (control characters escaped), cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _word(pattern: re.Pattern[str], what: str, longest: int = MAX_WORD) -> Check:
    def check(value: str) -> str | None:
        if len(value) > longest:
            return f"is {len(value)} characters long (at most {longest})"
        if not pattern.fullmatch(value) or ".." in value:
            return f"{_shown(value)} is not {what}"
        return None

    return check


def _one_of(choices: tuple[Any, ...]) -> Check:
    return lambda value: None if value in choices else f"{_shown(value)} must be one of {list(choices)}"


def _description(value: str) -> str | None:
    if len(value) > MAX_TEXT:
        return f"is {len(value)} characters long (at most {MAX_TEXT})"
    if not value.isprintable():
        return f"{_shown(value)} must be one line of printable text (no control characters)"
    bad = sorted(set(value) & set("$`\\"))
    if bad:
        return f"{_shown(value)} must not contain {' '.join(bad)} (it is copied into build files)"
    return None


def _alignment(value: int) -> str | None:
    if not 1 <= value <= MAX_ALIGNMENT or value & (value - 1):
        return f"{value} must be a power of two from 1 to {MAX_ALIGNMENT}"
    return None


def _vector_registers(value: int) -> str | None:
    return None if 1 <= value <= 64 else f"{value} must be between 1 and 64"


def _cache_bytes(value: int) -> str | None:
    return None if 0 <= value <= MAX_CACHE_BYTES else f"{value} must be between 0 and {MAX_CACHE_BYTES}"


def _cflags(value: list[Any]) -> str | None:
    if len(value) > MAX_CFLAGS:
        return f"has {len(value)} flags (at most {MAX_CFLAGS})"
    for flag in value:
        if not isinstance(flag, str):
            return f"must be a list of strings, not {_toml_type(flag)} {_shown(flag)}"
        if len(flag) > MAX_LIST or not _CFLAG.fullmatch(flag):
            return (f"flag {_shown(flag)} is not one compiler option: '-' then letters, digits and _ . , = + : / - "
                    "(no spaces, quotes, $, #, ; or backslashes)")
        if flag.startswith(_FORBIDDEN_CFLAG_PREFIXES):
            return (f"flag {_shown(flag)} is not allowed in a target: its flags choose the instruction set and ABI, "
                    "they may not redirect the compiler's output or run other programs")
    return None


# field -> (type, check of a value of that type)
REQUIRED_FIELDS: dict[str, tuple[type, Check]] = {
    "description": (str, _description),
    "triple": (str, _word(TRIPLE, "an arch-vendor-os[-environment] triple of letters, digits, _ and .")),
    "cpu": (str, _word(_CPU, "a CPU name of letters, digits and _ . + -")),
    "features": (str, _word(_FEATURES, "a comma-separated list of +feature / -feature",
                             MAX_LIST)),
    "float_abi": (str, _one_of(_FLOAT_ABIS)),
    "os": (str, _one_of(_OSES)),
    "alignment": (int, _alignment),
    "cflags": (list, _cflags),
}
OPTIONAL_FIELDS: dict[str, tuple[type, Check]] = {
    "gcc_prefix": (str, _word(_GCC_PREFIX, "a cross compiler's name prefix ending in '-' (letters, digits, _ . + -; "
                                           "no path: the compiler is found on PATH)")),
    "zig_target": (str, _word(_ZIG_TARGET, "a zig target (arch-os[-abi])")),
    "qemu": (str, _word(_QEMU, "a qemu-user program name, qemu-<arch> (no path: it is found on PATH)")),
    "qemu_cpu": (str, _word(_QEMU_CPU, "a qemu -cpu value: a CPU model and its properties, comma-separated "
                                       "(letters, digits and _ . , = + -)", MAX_LIST)),
    # The toolchain `--toolchain auto` tries first when both are installed: zig where the
    # distribution's cross GCC does not vectorise for the target's vector ISA.
    "preferred_toolchain": (str, _one_of(_TOOLCHAINS)),
    "vector_bits": (int, _one_of(_VECTOR_BITS)),
    "vector_registers": (int, _vector_registers),
    "int8_dot": (str, _one_of(INT8_DOTS)),
    "l2_cache_bytes": (int, _cache_bytes),
}
_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list"}


def field_problem(key: str, value: Any) -> str | None:
    """What is wrong with `value` for field `key` (None: nothing). TOML booleans are Python ints
    (`alignment = true` would be 1), so they are refused where an integer is expected."""
    kind, check = REQUIRED_FIELDS.get(key) or OPTIONAL_FIELDS[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        return f"must be {_TYPE_NAMES[kind]}, not {_toml_type(value)} {_shown(value)}"
    return check(value)


def _toml_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)
