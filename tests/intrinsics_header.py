"""Which macros runtime_c/aot_kernels.h defines for a set of predefined macros: a small evaluator
of its preprocessor tree (#if / #ifdef / #ifndef / #elif / #else / #endif over defined(), !, &&,
|| and integers; #define and #undef), so that each ISA branch can be checked without a compiler
for that ISA (tests/test_intrinsics.py; test_the_header_evaluator_agrees_with_gcc checks it
against gcc where this machine can tell).

ISA_CONFIGURATIONS names the predefined macros of each ISA the header has a branch for. A branch
for an ISA none of them names (a macro such as __riscv_vector in a condition) gets a
configuration of its own from header_configurations: GNU C with every such macro of that ISA
defined.
"""

from __future__ import annotations

import re

_GNU = frozenset({"__GNUC__"})
_X86 = _GNU | {"__x86_64__", "__SSE2__"}
_V3 = _X86 | {"__AVX__", "__AVX2__", "__FMA__"}
_V4 = _V3 | {"__AVX512F__", "__AVX512BW__", "__AVX512VL__", "__AVX512DQ__"}
_A64 = _GNU | {"__aarch64__", "__ARM_NEON"}
_ARMV7 = _GNU | {"__arm__", "__ARM_NEON"}

ISA_CONFIGURATIONS: dict[str, frozenset[str]] = {
    "portable C99 (no GNU C)": frozenset(),
    "GNU C without vector extensions": _X86 | {"AOT_NO_VECTOR_EXTENSIONS"},
    "GNU C vectors, no known ISA": _GNU,
    "x86-64": _X86,
    "x86-64-v3": _V3,
    "x86-64-v3 AVX-VNNI": _V3 | {"__AVXVNNI__"},
    "x86-64-v4": _V4,
    "x86-64-v4 VNNI": _V4 | {"__AVX512VNNI__"},
    "aarch64": _A64,
    "aarch64 clang": _A64 | {"__clang__"},
    "aarch64 dotprod": _A64 | {"__ARM_FEATURE_DOTPROD"},
    "armv7 NEON": _ARMV7,
    "armv7 NEON without intrinsics": _ARMV7 | {"AOT_NO_NEON_INTRINSICS"},
    "armv8 32-bit NEON": _ARMV7 | {"__ARM_FEATURE_DIRECTED_ROUNDING", "__ARM_FEATURE_NUMERIC_MAXMIN",
                                   "__ARM_FEATURE_FMA"},
    "Arm without NEON (Cortex-M)": _GNU | {"__arm__", "__thumb__"},
}

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_DEFINED = re.compile(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)")
# Macros of the header itself or of the compiler, never of an ISA.
_NOT_ISA = re.compile(r"^(AOT_\w+|__GNUC__|__clang__)$")


def _logical_lines(text: str) -> list[str]:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return text.replace("\\\n", " ").splitlines()


def _condition(expression: str, defined: set[str] | frozenset[str]) -> bool:
    python = _DEFINED.sub(lambda m: " 1 " if (m.group(1) or m.group(2)) in defined else " 0 ", expression)
    python = python.replace("&&", " and ").replace("||", " or ")
    python = re.sub(r"!(?!=)", " not ", python)
    python = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: m.group(0) if m.group(0) in ("and", "or", "not") else "0", python)
    python = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", python)
    return bool(eval(python, {"__builtins__": {}}))  # noqa: S307 - only digits, operators and and/or/not remain


def defined_macros(text: str, predefined: set[str] | frozenset[str]) -> set[str]:
    """The macros defined after the header, with `predefined` defined before it."""
    defined = set(predefined)
    # One frame per open #if: (the enclosing code is live, this branch is taken, one was taken)
    stack: list[tuple[bool, bool, bool]] = []
    live = True
    for line in _logical_lines(text):
        match = _DIRECTIVE.match(line)
        if not match:
            continue
        word, rest = match.group(1), match.group(2).strip()
        if word in ("if", "ifdef", "ifndef"):
            holds = (_condition(rest, defined) if word == "if"
                     else (rest.split()[0] in defined) == (word == "ifdef")) if live else False
            stack.append((live, holds, holds))
            live = live and holds
        elif word in ("elif", "else"):
            outer, _, taken = stack.pop()
            holds = outer and not taken and (word == "else" or _condition(rest, defined))
            stack.append((outer, holds, taken or holds))
            live = holds
        elif word == "endif":
            live = stack.pop()[0]
        elif live and word == "define":
            defined.add(re.match(r"\w+", rest).group(0))
        elif live and word == "undef":
            defined.discard(rest.split()[0])
    assert not stack, "unbalanced #if in the header"
    return defined


def _condition_macros(text: str) -> set[str]:
    """The macros the header's conditions test."""
    names: set[str] = set()
    for line in _logical_lines(text):
        match = _DIRECTIVE.match(line)
        if match and match.group(1) in ("if", "elif"):
            names |= {a or b for a, b in _DEFINED.findall(match.group(2))}
        elif match and match.group(1) in ("ifdef", "ifndef"):
            names.add(match.group(2).split()[0])
    return names


def header_configurations(text: str) -> dict[str, frozenset[str]]:
    """ISA_CONFIGURATIONS, and one more per ISA whose macros the header tests but none of them
    defines (grouped by the name after the leading underscores: __riscv, __riscv_vector -> riscv)."""
    known = set().union(*ISA_CONFIGURATIONS.values())
    unnamed: dict[str, set[str]] = {}
    for name in _condition_macros(text) - known:
        if not _NOT_ISA.match(name):
            unnamed.setdefault(name.strip("_").split("_")[0].lower(), set()).add(name)
    configurations = dict(ISA_CONFIGURATIONS)
    for isa, macros in sorted(unnamed.items()):
        configurations[f"{isa} (a branch no configuration names)"] = _GNU | macros
    return configurations
