"""The C API every package shares, for the Python side: status and dtype codes, entry points.

runtime_c/aot_runtime.h is the one definition of the status and dtype codes. It is what C callers
compile against and it goes into every package byte for byte, so it stays a real C header in the
repository (readable and compilable on its own) instead of becoming the output of a template;
this module reads its two enums, so the LLVM backend (which writes the numbers into its objects),
the templates (which write the names) and the host runner (which reads the numbers back) all take
them from the header. A table here checked against the header by a test would be a second
definition that a change must remember to make twice.

The entry points a model exports are per model (declared in templates/c/model.h.j2), so they are
defined here, by suffix, and the templates and the LLVM backend take their names from here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from aot.resources import resource_dir

RUNTIME_HEADER = "aot_runtime.h"

# The model's entry points, `<name>_<suffix>`: the four run functions and the info function.
RUN = "run"
RUN_PTRS = "run_ptrs"
RUN_PARALLEL = "run_parallel"
RUN_PARALLEL_PTRS = "run_parallel_ptrs"
INFO = "info"
ENTRY_POINTS = (RUN, RUN_PTRS, RUN_PARALLEL, RUN_PARALLEL_PTRS, INFO)
# The run functions with a last `const aot_executor *executor` parameter.
TAKES_EXECUTOR = frozenset({RUN_PARALLEL, RUN_PARALLEL_PTRS})


def entry_point(model: str, suffix: str) -> str:
    """The C name of one of `model`'s entry points (`suffix` one of ENTRY_POINTS)."""
    if suffix not in ENTRY_POINTS:
        raise ValueError(f"{suffix!r} is not an entry point of the C API")
    return f"{model}_{suffix}"


def entry_points(model: str) -> dict[str, str]:
    """Every entry point's C name by suffix, as the templates use them ({{ entry.run_ptrs }})."""
    return {suffix: entry_point(model, suffix) for suffix in ENTRY_POINTS}


@dataclass(frozen=True)
class DtypeCode:
    enum: str   # the aot_dtype constant, e.g. AOT_DTYPE_FLOAT32
    value: int  # its number (ONNX's TensorProto.DataType)


def _enum(header: str, name: str) -> dict[str, int]:
    """The constants of `typedef enum <name> { ... } <name>;` in `header`, in order."""
    body = re.search(rf"typedef enum {name} \{{(.*?)\}} {name};", header, re.DOTALL)
    if body is None:
        raise AssertionError(f"runtime_c/{RUNTIME_HEADER} defines no enum {name}")
    return {constant: int(value) for constant, value in re.findall(r"\b(AOT_\w+) = (\d+)", body.group(1))}


@functools.cache
def _header_enums() -> tuple[dict[str, int], dict[str, int]]:
    header = (resource_dir("runtime_c") / RUNTIME_HEADER).read_text(encoding="utf-8")
    return _enum(header, "aot_status"), _enum(header, "aot_dtype")


def status_codes() -> dict[str, int]:
    """aot_status: constant name (AOT_OK, AOT_ERROR_NULL_POINTER, ...) -> number."""
    return dict(_header_enums()[0])


def status_code(constant: str) -> int:
    return _header_enums()[0][constant]


def dtype_codes() -> dict[str, DtypeCode]:
    """aot_dtype by the dtype's numpy name (AOT_DTYPE_FLOAT32 is "float32")."""
    prefix = "AOT_DTYPE_"
    return {constant[len(prefix):].lower(): DtypeCode(constant, value)
            for constant, value in _header_enums()[1].items()}
