"""The C (and LLVM) function names of a model's kernels, after the ONNX nodes they implement.

A kernel k<i> (aot/lowering/context.py) becomes `<model>_<nodes>`: the first node's name, then the
last part of each further node's name while the name stays short (`tiny_cnn_stem_conv_relu6` for
'stem/conv' + 'stem/relu6'), sanitised and capped at STEM_CHARS. Parallel segments and serial
copies of a kernel (aot/kernel/parallel.py: k<i>_<n>, k<i>s) keep their suffix. The same kernels
always get the same names: duplicates are numbered in kernel order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from aot.codegen.c_names import UniqueNames, c_comment, c_identifier
from aot.kernel.ir import Kernel

STEM_CHARS = 48
COMMENT_CHARS = 100  # a kernel's comment, /* and */ included

# The model's other symbols, <model>_<suffix> (templates/c/model.c.j2, model.h.j2, aot/c_api.py,
# aot/backends/llvm/module.py).
_FILE_SYMBOLS = {"run", "run_ptrs", "run_parallel", "run_parallel_ptrs", "info", "run_body", "run_impl", "context",
                 "model_info", "model_name", "input_info", "output_info", "input_none", "output_none", "inputs",
                 "outputs", "weights", "runs_serially", "parallel_for"}
_OTHER_SYMBOL = re.compile(r"(input|output)[0-9]+_(dims|name)|(input|output)_pointers_[0-9]+|.*_task")
_INTERNAL = re.compile(r"k([0-9]+)(s|_[0-9]+)?")


def _node_part(name: str) -> str:
    """The part of a node name that names it: tf2onnx joins every op fused into a node by ';'."""
    return name.split(";")[0]


def _shared_scopes(first_names: list[str]) -> tuple[str, ...]:
    """The leading scopes ("model/") that a quarter or more of the kernels' first node names share,
    where the names stay distinct without them: they name the model, not the kernel (tf2onnx's
    "model/conv2d_3/...", "TFLITE2ONNX_FAF_model/...")."""
    scopes: list[str] = []
    names = list(first_names)
    for _ in range(3):
        heads = Counter(n.split("/")[0] + "/" for n in names if "/" in n.strip("/"))
        common = sorted(h for h, count in heads.items() if 4 * count >= len(names) and count >= 2)
        stripped = [n[len(_head(n, common)):] for n in names]
        if not common or len(set(stripped)) < len(set(names)):
            break
        scopes += common
        names = stripped
    return tuple(scopes)


def _head(name: str, scopes: Iterable[str]) -> str:
    return next((h for h in scopes if name.startswith(h)), "")


def kernel_stem(sources: list[str], op: str, scopes: tuple[str, ...] = ()) -> str:
    """The identifier part naming a kernel after its ONNX nodes (`sources`, without the model's
    `scopes`), or its op when they have no names."""
    names = [_node_part(s) for s in sources if _node_part(s)]
    for _ in scopes:
        names = [n[len(_head(n, scopes)):] or n for n in names]
    if not names:
        return c_identifier(op.split("+")[0].split("/")[0], "kernel").lower()
    stem = c_identifier(names[0], "n").lower()
    for name in names[1:]:
        last = c_identifier(re.split(r"[/.:]", name.rstrip("/"))[-1], "n").lower()
        if last in stem.split("_") or len(stem) + 1 + len(last) > STEM_CHARS:
            continue
        stem = f"{stem}_{last}"
    if len(stem) > STEM_CHARS:
        stem = stem[:STEM_CHARS].rstrip("_")
    if stem in _FILE_SYMBOLS or _OTHER_SYMBOL.fullmatch(stem):
        stem = f"{stem}_kernel"
    return stem


def kernel_stems(kernels: Iterable[tuple[list[str], str]]) -> list[str]:
    """The unique stems of kernels given as (sources, op) in run order, as in the manifest's
    kernel_order (a benchmark maps profiled symbols back to kernels with it)."""
    kernels = list(kernels)
    scopes = _shared_scopes([_node_part(sources[0]) for sources, _ in kernels if sources and _node_part(sources[0])])
    names = UniqueNames(_FILE_SYMBOLS)
    return [names.make(kernel_stem(sources, op, scopes), "kernel") for sources, op in kernels]


def kernel_symbols(model: str, kernels: Iterable[Kernel]) -> dict[str, str]:
    """Kernel name (k<i>, or k<i>s and k<i>_<n> for a serial copy and parallel segments of k<i>)
    -> its function's symbol `<model>_<stem>[_serial|_<n>]`, for the kernels given in run order."""
    bases: dict[str, Kernel] = {}
    variants: list[tuple[str, str, str]] = []  # (kernel name, base, suffix)
    for kernel in kernels:
        found = _INTERNAL.fullmatch(kernel.name)
        base, suffix = (f"k{found.group(1)}", found.group(2) or "") if found else (kernel.name, "")
        bases.setdefault(base, kernel)
        variants.append((kernel.name, base, "_serial" if suffix == "s" else suffix))
    stems = dict(zip(bases, kernel_stems((k.sources, k.op) for k in bases.values()), strict=True))
    taken = set(stems.values())
    symbols: dict[str, str] = {}
    for name, base, suffix in variants:
        stem = stems[base] + suffix
        while suffix and name not in symbols and stem in taken:  # a node named like another's segment
            stem += "_k"
        taken.add(stem)
        symbols.setdefault(name, f"{model}_{stem}")
    return symbols


def kernel_comment(sources: list[str], op: str) -> str:
    """The text of a kernel's one-line comment, its op kinds and ONNX nodes: `Conv+Clip <- ONNX
    'stem/conv', 'stem/relu6'`, the nodes that do not fit in COMMENT_CHARS counted ("... +3 more")."""
    text = f"{c_comment(op)} <- ONNX"
    room = COMMENT_CHARS - len("/*  */")
    for i, source in enumerate(sources):
        name = f"{',' if i else ''} '{c_comment(_node_part(source))}'"
        more = f"... +{len(sources) - i} more" if i else ""
        last = i == len(sources) - 1
        if len(text) + len(name) <= room - (0 if last else len(f"... +{len(sources) - i - 1} more")):
            text += name
            continue
        if i == 0:  # not even the first name fits: its start
            cut = room - len(text) - len(f" ''... +{len(sources) - 1} more") if len(sources) > 1 else \
                room - len(text) - len(" ''...")
            text += f" '{name[2:2 + max(cut, 0)]}'..." + (f" +{len(sources) - 1} more" if len(sources) > 1 else "")
        else:
            text += more
        break
    return text
