"""The LLVM backend: kernel IR -> LLVM IR (llvmlite.ir) -> relocatable ELF objects per target.

No C compiler touches the model code: the package's C sources stay as the portable fallback,
and the build files link `<name>.<triple>.o` with the C-compiled weights when they build for
that target.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aot.backends.llvm.module import build_model_module
from aot.backends.llvm.target import LlvmTarget, emit_object, from_preset, get_target, host_target, runs_on_host
from aot.backends.run_plan import RunPlan
from aot.errors import AotError
from aot.targets import Target
from aot.targets.fields import TRIPLE

_BUILD_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def object_name(model: str, spec: LlvmTarget) -> str:
    # The triple is validated when the target file is read; checked again because it becomes
    # part of a file name inside the package (a "/" or ".." would leave the -o folder).
    if not TRIPLE.fullmatch(spec.triple) or ".." in spec.triple:
        raise AotError(f"target {spec.name}: triple {spec.triple!r} cannot be part of a file name")
    return f"{model}.{spec.triple}.o"


def llvm_targets(targets: Sequence[Target]) -> list[LlvmTarget]:
    """The targets to build objects for, as the LLVM backend sees them (aot/backends/llvm/
    target.py): the host's when the package is for any target (an object is for one machine).
    Objects are named by triple, so two targets sharing one (x86_64 and x86_64-v3, rpi3 and
    rpi-zero2) cannot go into the same package."""
    if not targets:
        return [host_target()]
    seen: dict[str, str] = {}
    unique = []
    for spec in map(from_preset, targets):
        if not _BUILD_NAME.fullmatch(spec.name):
            # The name becomes part of make and CMake variable names in the package.
            raise AotError(f"--target {spec.name!r}: target names may only use letters, digits and _ . + -")
        if spec.triple in seen:
            if seen[spec.triple] == spec.name:
                continue
            raise AotError(f"--target {spec.name} and --target {seen[spec.triple]} both build {spec.triple} "
                           "objects; one package holds one object per triple (compile two packages)")
        seen[spec.triple] = spec.name
        unique.append(spec)
    return unique


def compile_objects(run: RunPlan, specs: Sequence[LlvmTarget]) -> dict[str, bytes]:
    """`<name>.<triple>.o` for each target."""
    objects = {}
    for spec in specs:
        text, hidden = build_model_module(run, spec)
        objects[object_name(run.name, spec)] = emit_object(text, spec, hidden)
    return objects


__all__ = ["LlvmTarget", "compile_objects", "get_target", "host_target", "llvm_targets", "object_name",
           "runs_on_host"]
