"""The instruction-set architectures aot builds for: what a target's triple implies beyond its
preset's fields (ELF machine, pointer width, the hosts that run it, how C compilers for it name
themselves). The LLVM backend, the toolchain search and the ELF reader read it from here; a new
architecture is one entry (docs/adding-a-target.md).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    family: str                     # the name the LLVM backend and the package's Makefile use
    elf_machine: int                # ELF e_machine
    elf_name: str                   # how `aot build` names the machine of a built file
    pointer_bits: int
    host_machines: tuple[str, ...]  # platform.machine() of the hosts that run it
    # `$(CC) -dumpmachine` architecture patterns (make `%` wildcards) of its C compilers
    compiler_arches: tuple[str, ...]
    llvm_backend: bool = True       # the LLVM backend builds objects for it


ARCHITECTURES = (
    Architecture("x86_64", 62, "x86_64", 64, ("x86_64", "amd64"), ("x86_64%",)),
    Architecture("aarch64", 183, "aarch64", 64, ("aarch64", "arm64"), ("aarch64%",)),
    Architecture("arm", 40, "arm", 32, ("armv7l", "armv8l"), ("arm%", "thumb%")),
    Architecture("riscv64", 243, "riscv", 64, ("riscv64",), ("riscv64%",)),
    Architecture("i386", 3, "x86", 32, ("i386", "i686"), ("i%86%",), llvm_backend=False),
)


def architecture_of(arch: str) -> Architecture | None:
    """The architecture of a triple's first part (x86_64, aarch64, armv7, thumbv7em, riscv64 ...),
    or None for one aot does not know."""
    if arch.startswith(("arm", "thumb")) and not arch.startswith("arm64"):
        return _BY_FAMILY["arm"]
    if arch in ("i386", "i486", "i586", "i686"):
        return _BY_FAMILY["i386"]
    return _BY_FAMILY.get({"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch))


def host_architecture() -> Architecture | None:
    """The architecture of the machine aot runs on."""
    machine = platform.machine().lower()
    return next((a for a in ARCHITECTURES if machine in a.host_machines), None)


def elf_machine_name(machine: int) -> str:
    return next((a.elf_name for a in ARCHITECTURES if a.elf_machine == machine), f"machine {machine}")


_BY_FAMILY = {a.family: a for a in ARCHITECTURES}
