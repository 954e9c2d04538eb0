"""Just enough ELF header reading to tell what a built file is for (machine, class, ARM float
ABI, static or dynamic), so `aot build` can report it and tests can check it without binutils."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from aot.targets.architectures import elf_machine_name

EF_ARM_ABI_FLOAT_HARD = 0x400
EF_ARM_EABI_MASK = 0xFF000000
PT_INTERP = 3
ET_NAMES = {1: "relocatable", 2: "executable", 3: "shared object or PIE"}


@dataclass(frozen=True)
class ElfInfo:
    machine: str
    bits: int
    kind: str
    arm_eabi_version: int | None
    arm_hard_float: bool | None
    static: bool

    def describe(self) -> str:
        parts = [f"ELF{self.bits}", self.machine, self.kind]
        if self.arm_eabi_version is not None:
            parts.append(f"EABI{self.arm_eabi_version}")
            parts.append("hard-float" if self.arm_hard_float else "soft-float")
        if self.kind != "relocatable":
            parts.append("static" if self.static else "dynamic")
        return ", ".join(parts)


def read_elf(path: str | Path) -> ElfInfo:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path}: not an ELF file")
    bits = 64 if data[4] == 2 else 32
    endian = "<" if data[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(endian + "HH", data, 16)
    if bits == 64:
        e_phoff, = struct.unpack_from(endian + "Q", data, 32)
        e_flags, = struct.unpack_from(endian + "I", data, 48)
        e_phentsize, e_phnum = struct.unpack_from(endian + "HH", data, 54)
    else:
        e_phoff, = struct.unpack_from(endian + "I", data, 28)
        e_flags, = struct.unpack_from(endian + "I", data, 36)
        e_phentsize, e_phnum = struct.unpack_from(endian + "HH", data, 42)
    has_interp = any(struct.unpack_from(endian + "I", data, e_phoff + i * e_phentsize)[0] == PT_INTERP
                     for i in range(e_phnum))
    machine = elf_machine_name(e_machine)
    arm = machine == "arm"
    return ElfInfo(
        machine=machine, bits=bits, kind=ET_NAMES.get(e_type, f"type {e_type}"),
        arm_eabi_version=(e_flags & EF_ARM_EABI_MASK) >> 24 if arm else None,
        arm_hard_float=bool(e_flags & EF_ARM_ABI_FLOAT_HARD) if arm else None,
        static=not has_interp,
    )
