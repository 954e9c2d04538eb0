"""Turning arbitrary ONNX strings into safe C: identifiers, comments and string literals.

ONNX names are arbitrary unicode. In generated C they must become valid, unique identifiers,
and text copied into comments or strings must not be able to end them or inject code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aot.codegen.reserved_names import is_reserved_public, needs_prefix

C_KEYWORDS = frozenset([
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "_Bool", "_Complex", "_Imaginary", "_Alignas", "_Alignof", "_Atomic", "_Generic",
    "_Noreturn", "_Static_assert", "_Thread_local", "bool", "true", "false", "asm", "fortran", "main",
    "NULL",
])


def c_identifier(name: str, fallback: str = "t", public: bool = False,
                 own_macro_prefix: str | tuple[str, ...] = "") -> str:
    """A valid C identifier resembling `name` (not yet unique).

    `public`: the identifier is part of the package's API (a field of <name>_inputs), so it also
    avoids every name a C or C++ program including the header might see as something else
    (aot/codegen/reserved_names.py): "class" becomes "class_", "INT32_MAX" "INT32_MAX_". A name
    reserved by its start ("AOT_...", "__...") gets `fallback` in front. `own_macro_prefix`: the
    model's macro prefix ("TINY_CNN_"), whose macros (TINY_CNN_ARENA_SIZE ...) are reserved too."""
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name)
    ident = re.sub(r"_+", "_", ident).strip("_")
    if not ident:
        ident = fallback
    if ident[0].isdigit():
        ident = f"{fallback}_{ident}"
    if ident in C_KEYWORDS:
        ident = f"{ident}_"
    if public and needs_prefix(ident):
        ident = f"{fallback}_{ident}"
    if public and is_reserved_public(ident, own_macro_prefix):
        ident = f"{ident}_"
    return ident


class UniqueNames:
    """Hands out distinct identifiers; a name that collides after sanitising gets a suffix.

    `public`: the names are public identifiers (see `c_identifier`, also for `own_macro_prefix`)."""

    def __init__(self, reserved: set[str] | None = None, public: bool = False,
                 own_macro_prefix: str | tuple[str, ...] = "") -> None:
        self._used: set[str] = set(reserved or ())
        self._public = public
        self._own_macro_prefix = own_macro_prefix

    def make(self, name: str, fallback: str = "t") -> str:
        base = c_identifier(name, fallback, self._public, self._own_macro_prefix)
        ident, n = base, 1
        while ident in self._used:
            ident = f"{base}_{n}"
            if self._public and is_reserved_public(ident, self._own_macro_prefix):
                ident += "_"  # M_PI_1 is a <math.h>-style name; M_PI_1_ is not (see reserved_names)
            n += 1
        self._used.add(ident)
        return ident


# LoweringContext.constant names the tensors it makes "<hint>__aot<N>": the number only makes the
# tensor name unique, the hint is what it is (a packed weight keeps its initializer's name).
_MADE_BY_LOWERING = re.compile(r"__aot[0-9]+$")


def short_tensor_name(name: str) -> str:
    """The part of a tensor's name an identifier needs: tf2onnx names a tensor after every op fused
    into it, joined by ';' ("model/conv2d_5/BiasAdd;model/conv2d_5/Conv2D;..."), and the first
    says what it is; a hint a lowering appended ("...__strided") is kept."""
    first, *rest = name.split(";")
    if not rest:
        return name
    hint = rest[-1][rest[-1].index("__"):] if "__" in rest[-1] else ""
    return first + hint


def weight_member_names(tensor_names: Sequence[str], own_macro_prefix: str | tuple[str, ...] = "") -> list[str]:
    """The members of the weights struct, one per tensor, named after the tensors (their ONNX
    initializers): sanitised like public fields (the struct is seen after the standard headers and
    the model's own macros, `own_macro_prefix`), unique, and none of the struct's padding members
    (templates/c/weights.h.j2: pad<N>, none)."""
    padding = {f"pad{i}" for i in range(len(tensor_names))} | {"none"}
    members = UniqueNames(padding, public=True, own_macro_prefix=own_macro_prefix)
    return [members.make(_MADE_BY_LOWERING.sub("", short_tensor_name(name)), "w") for name in tensor_names]


def model_identifier(name: str) -> str:
    """The prefix of every exported symbol: lower-case C identifier (macros use it upper-cased)."""
    ident = c_identifier(name, "model").lower()
    if len(ident) > 48:
        ident = ident[:48].rstrip("_")
    return ident


def c_comment(text: str) -> str:
    """Text safe inside /* ... */: one line, no comment terminator, no trigraphs, ASCII only."""
    safe = text.encode("ascii", "backslashreplace").decode("ascii")
    safe = safe.replace("\\", "\\\\").replace("*/", "*\\/").replace("/*", "/\\*").replace("??", "?\\?")
    safe = re.sub(r"[\x00-\x1f\x7f]", " ", safe)
    return safe


def c_string(text: str) -> str:
    """A C string literal with the same bytes (UTF-8) as `text`, safe against trigraphs."""
    out = ['"']
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)
