"""Building a written package with the host C toolchain through its own Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from aot.errors import BuildError
from aot.targets import host_preset_name

STRICT_CFLAGS = "-std=c99 -Wall -Wextra -Werror"


def host_cc() -> str:
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if not cc:
        raise BuildError("no C compiler found: install gcc or clang (Debian: apt-get install gcc), or set CC")
    return cc


def host_target_cflags() -> str:
    """TARGET_CFLAGS for a package built to run on this machine, whatever its --target: the vector
    ISA this CPU has (-march=native: a package for x86_64-v3 runs with AVX2 here, as it would on
    its target), and no stop where the package's tiles are wider than this CPU's registers (an
    AVX-512 package checked on an AVX2 machine runs, slower; see aot/backends/c/isa_check.py).
    On an AVX-512 CPU the compiler's own vector loops get 512-bit registers too, as the x86_64-v4
    presets' flags ask (gcc and clang default to 256 there: the int8 depthwise loops of DS-CNN
    ran 1.37x slower)."""
    if host_preset_name().startswith("x86_64-v4"):  # x86_64-v4 and x86_64-v4-vnni
        return "-march=native -mprefer-vector-width=512"
    return "-march=native -DAOT_ALLOW_SLOW_VECTORS"


def run_make(package_dir: Path, targets: list[str], opt: str = "-O3", extra_cflags: str = "",
             variables: Mapping[str, str] | None = None, target_cflags: str | None = None) -> None:
    """`variables` are extra make variables, e.g. BACKEND=llvm TARGET=x86_64 for an LLVM package.
    `target_cflags` replaces host_target_cflags() (e.g. a preset's own -march, to time its code here)."""
    if not shutil.which("make"):
        raise BuildError("`make` not found: install it (Debian: apt-get install make)")
    cflags = f"{opt} {STRICT_CFLAGS} {extra_cflags}".strip()
    extra = [f"{k}={v}" for k, v in (variables or {}).items()]
    # CC, AR and TARGET_CFLAGS are set explicitly: a package compiled for a --target defaults to
    # that target's cross compiler and flags, and this builds it to run here, with this CPU's.
    machine_flags = host_target_cflags() if target_cflags is None else target_cflags
    cmd = ["make", "-s", "-C", str(package_dir), f"CC={host_cc()}", "AR=ar",
           f"TARGET_CFLAGS={machine_flags}", f"CFLAGS={cflags}", *extra, *targets]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        shown = "\n".join(detail[:20])
        raise BuildError(f"{package_dir}: building {' '.join(targets)} failed:\n{shown}")
