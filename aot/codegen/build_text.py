"""Text copied into the package's Makefile and CMake files, made unable to change their meaning.

The target fields are validated (aot/targets/fields.py) and names are C identifiers before they
get here; these filters are the second line of defence: whatever reaches them, a comment stays
one comment line and a value stays one value (make cannot expand `$(shell ...)` in it, CMake
cannot end its quoted argument or expand `${...}`).
"""

from __future__ import annotations

import re

from aot.terminal import printable

_CMAKE_REFERENCE = re.compile(r"\$(?=(ENV|CACHE)?\{)")


def _one_line(text: str) -> str:
    """Printable text on one line: control characters (newlines too) as \\x.. escapes."""
    return printable(str(text))


def make_comment(text: str) -> str:
    """Text for the rest of a Makefile `# ...` line: one line that does not end in a backslash
    (which would continue the comment onto the next line of the Makefile)."""
    return _one_line(text).rstrip("\\")


def make_value(text: str) -> str:
    """One word of a make variable's value: `$` doubled (no expansion), `#` escaped (no comment),
    blanks and a trailing backslash dropped (no second word, no continued line)."""
    word = "".join(_one_line(text).split()).rstrip("\\")
    return word.replace("$", "$$").replace("#", "\\#")


def cmake_comment(text: str) -> str:
    """Text for the rest of a CMake `# ...` line comment."""
    return _one_line(text)


def cmake_quoted(text: str) -> str:
    """The inside of a CMake quoted argument ("..."): no end quote, no escape sequence, no
    ${...}, $ENV{...} or $CACHE{...} expansion (a `$` elsewhere is literal and stays as it is)."""
    out = _one_line(text).replace("\\", "\\\\").replace('"', '\\"')
    return _CMAKE_REFERENCE.sub(r"\\$", out)


FILTERS = {"make_comment": make_comment, "make_value": make_value, "cmake_comment": cmake_comment,
           "cmake_quoted": cmake_quoted}
