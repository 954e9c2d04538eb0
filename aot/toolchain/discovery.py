"""Finding a C compiler that builds for a target.

Order of preference: the host compiler when the target is the host; a cross GCC from the
distribution (e.g. aarch64-linux-gnu-gcc); `ziglang` from PyPI (a cross C compiler and linker for
every target, `pip install ziglang`); clang (bare-metal compile only, it brings no libc). A
bare-metal compiler is used only if it finds the C library headers the package includes (newlib's
math.h): clang has none of its own, nor a GCC without newlib, and the build would fail deep in the
first source file.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

from aot.errors import BuildError
from aot.targets import Target
from aot.targets.architectures import architecture_of, host_architecture


@dataclass(frozen=True)
class Toolchain:
    kind: str                 # "host", "gcc", "zig" or "clang"
    cc: tuple[str, ...]       # the compiler command, possibly with fixed leading arguments
    ar: tuple[str, ...]
    static_ok: bool           # can link fully static Linux binaries
    libc: str                 # "glibc", "musl" or "none"

    def target_cflags(self, target: Target) -> list[str]:
        """The preset's GCC-style flags in the dialect of this compiler. zig's clang takes CPU
        names with underscores and gets the float ABI and instruction set from its -target."""
        if self.kind != "zig":
            return list(target.cflags)
        flags = []
        for flag in target.cflags:
            if flag.startswith("-mcpu="):
                flags.append("-mcpu=" + flag[len("-mcpu="):].replace("-", "_"))
            elif flag.startswith("-march=rv"):
                # zig takes no RISC-V ISA string: the CPU and the preset's extensions say the same.
                flags.append("-mcpu=" + target.cpu.replace("-", "_") + target.features.replace(",", ""))
            elif flag.startswith("-march="):
                flags.append("-mcpu=" + flag[len("-march="):].replace("-", "_").replace("x86_64", "x86_64"))
            elif not flag.startswith(("-mfpu=", "-mfloat-abi=", "-mthumb", "-mabi=")):
                flags.append(flag)
        return flags

    @property
    def cc_text(self) -> str:
        return shlex.join(self.cc)

    @property
    def ar_text(self) -> str:
        return shlex.join(self.ar)


def is_host(target: Target) -> bool:
    own = architecture_of(target.arch)
    return target.os == "linux" and own is not None and own == host_architecture()


def _zig_available() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def find_toolchain(target: Target, prefer: str | None = None) -> Toolchain:
    """The best toolchain installed for `target`; `prefer` ("gcc", "zig", "clang") forces a kind."""
    candidates: list[Toolchain] = []
    if is_host(target) and prefer in (None, "host"):
        cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
        if cc:
            candidates.append(Toolchain("host", (cc,), ("ar",), True, "glibc"))
    gcc = f"{target.gcc_prefix}gcc" if target.gcc_prefix else ""
    if gcc and shutil.which(gcc) and prefer in (None, "gcc"):
        ar = f"{target.gcc_prefix}ar"
        candidates.append(Toolchain("gcc", (gcc,), (ar if shutil.which(ar) else "ar",), True,
                                    "none" if target.bare_metal else "glibc"))
    # zig brings a libc for Linux targets only; bare-metal code needs newlib's math.h from a GCC.
    if target.zig_target and not target.bare_metal and _zig_available() and prefer in (None, "zig"):
        zig_target = target.zig_target
        if not target.bare_metal:
            # musl links fully static binaries that run on any kernel, old boards included
            zig_target = zig_target.replace("-gnueabihf", "-musleabihf").replace("-gnu", "-musl")
        zig = (sys.executable, "-m", "ziglang")
        candidates.append(Toolchain("zig", (*zig, "cc", "-target", zig_target), (*zig, "ar"), True,
                                    "none" if target.bare_metal else "musl"))
    if target.bare_metal and shutil.which("clang") and prefer in (None, "clang"):
        candidates.append(Toolchain("clang", ("clang", f"--target={target.triple}"), ("llvm-ar",), False, "none"))
    if target.preferred_toolchain:
        candidates.sort(key=lambda t: t.kind != target.preferred_toolchain)
    if target.bare_metal and candidates:
        return _with_c_library(target, candidates)
    if candidates:
        return candidates[0]
    wanted = f" ({prefer})" if prefer else ""
    raise BuildError(f"--target {target.name}: no C toolchain{wanted} found for {target.triple}; "
                     + _install_hint(target))


# The C library headers the package's sources include (the compiler's own headers, stdint.h and
# stddef.h, come with every compiler).
_C_LIBRARY_HEADERS = ("math.h", "string.h")


def _missing_header(toolchain: Toolchain, target: Target) -> str | None:
    """The first C library header that `toolchain` does not find when compiling for `target`."""
    for header in _C_LIBRARY_HEADERS:
        try:
            probe = subprocess.run([*toolchain.cc, *toolchain.target_cflags(target), "-E", "-x", "c", "-o",
                                    os.devnull, "-"], input=f"#include <{header}>\n", capture_output=True,
                                   text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return header
        if probe.returncode != 0:
            return header
    return None


def _with_c_library(target: Target, candidates: list[Toolchain]) -> Toolchain:
    """The first bare-metal candidate that has a C library for `target`, else one line naming each
    compiler tried, the header it lacks and what to install."""
    lacking = []
    for toolchain in candidates:
        header = _missing_header(toolchain, target)
        if header is None:
            return toolchain
        lacking.append(f"{toolchain.cc_text} finds no {header}")
    raise BuildError(f"--target {target.name}: no C library for {target.triple} ({'; '.join(lacking)}); "
                     + _install_hint(target))


# The Debian packages of each preset's cross GCC (for bare metal with its C library, newlib).
_GCC_PACKAGES = {"aarch64-linux-gnu-": "gcc-aarch64-linux-gnu", "arm-linux-gnueabihf-": "gcc-arm-linux-gnueabihf",
                 "arm-none-eabi-": "gcc-arm-none-eabi", "x86_64-linux-gnu-": "gcc-x86-64-linux-gnu",
                 "riscv64-linux-gnu-": "gcc-riscv64-linux-gnu"}
_LIBC_PACKAGES = {"arm-none-eabi-": "libnewlib-arm-none-eabi", "riscv64-linux-gnu-": "libc6-dev-riscv64-cross"}


def _install_hint(target: Target) -> str:
    """What to install so that find_toolchain finds a compiler for `target`: only what it would use."""
    hints = []
    if target.gcc_prefix:
        packages = [p for p in (_GCC_PACKAGES.get(target.gcc_prefix), _LIBC_PACKAGES.get(target.gcc_prefix)) if p]
        debian = f" (Debian: apt-get install {' '.join(packages)})" if packages else ""
        libc = " with newlib" if target.bare_metal else ""
        hints.append(f"install {target.gcc_prefix}gcc{libc}{debian}")
    if target.zig_target and not target.bare_metal:
        hints.append("pip install ziglang")
    text = " or ".join(hints) or "give a target .toml with gcc_prefix or zig_target"
    if target.bare_metal:
        # find_toolchain skips zig here: it brings no newlib, whose math.h the kernels include.
        text += "; zig is not used for bare-metal targets, as it has no C library for them"
    return text


def qemu_for(target: Target) -> list[str]:
    """How to run a target's Linux binary here: directly on the host, else under qemu-user."""
    if is_host(target):
        return []
    if target.bare_metal:
        raise BuildError(f"--target {target.name}: bare-metal binaries cannot be run here")
    if not target.qemu or not shutil.which(target.qemu):
        name = target.qemu or "qemu-user"
        raise BuildError(f"--target {target.name}: running its binaries needs {name}: apt-get install qemu-user")
    return [target.qemu, *(["-cpu", target.qemu_cpu] if target.qemu_cpu else [])]

