"""Errors a user can act on.

Every message names the culprit: the file, the ONNX node or the option at fault. The CLI prints
an AotError as one line and exits non-zero; anything else is an internal error.
"""

from __future__ import annotations


class AotError(Exception):
    """Base class for errors caused by the user's input, not by a bug in aot."""


class ModelLoadError(AotError):
    """The model file cannot be read, parsed or checked."""


class InputShapeError(AotError):
    """An --input-shape option is wrong, or a dimension is left symbolic."""


class InputValueError(AotError):
    """An --input-value option is wrong or does not fit the input it binds."""


class UnsupportedError(AotError):
    """The model uses ops or features aot cannot compile; lists every one at once."""

    def __init__(self, message: str, unsupported: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.unsupported = unsupported or {}


class NodeError(AotError):
    """A specific node cannot be compiled (bad attributes, non-constant shape input, ...)."""

    def __init__(self, node_desc: str, message: str) -> None:
        super().__init__(f"{node_desc}: {message}")


class OutputError(AotError):
    """The output location cannot be written."""


class BuildError(AotError):
    """The C toolchain, or a program it built, failed on a generated package; the message quotes
    the tool's output over several lines (the only errors that are not one line)."""


class VerifyError(AotError):
    """Inputs or expected outputs given for verification do not fit the model."""


class ModelInputError(AotError, ValueError):
    """A value given to a compiled model's run() does not fit its inputs (name, count, shape, dtype)."""


class ModelInputTypeError(AotError, TypeError):
    """run() was given inputs of a kind it does not take (neither arrays nor a dict of them)."""
