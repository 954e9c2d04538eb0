"""Names from a model or a target file, made safe to print on a terminal.

ONNX tensor and node names, file names and target fields are arbitrary text. Printed raw, an
ESC starts a terminal escape sequence (colours, cursor moves, window titles), a CR overwrites the
line already printed, a newline splits aot's one-line error messages, and bidirectional controls
reorder what the reader sees. Every such name printed by aot goes through `printable`.
"""

from __future__ import annotations


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object) -> str:
    """`text` with every character that is not printable (control characters, line and paragraph
    separators, format characters such as bidirectional overrides, unassigned code points)
    written as a \\x.., \\u.... or \\U........ escape. Printable text, any script, is unchanged."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(text: object) -> str:
    """`printable` line by line, keeping the line breaks: for messages that quote a compiler's
    output over several lines (its own escape sequences and CRs are escaped all the same)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))
