"""Guest instruction counts under qemu-user, from our TCG plugin (benchmarks/qemu_insn/insn_count.c).

The plugin is built once per qemu version into the cache folder, against the qemu-plugin.h of
the installed qemu: from $QEMU_PLUGIN_HEADER, the system's include folders, the cache, or else
taken out of Debian's qemu source package for the installed version (fetched with apt-get).

A count of one inference is the count of a program doing N+10 of them minus the count of the
same program doing N, over 10: start-up, loading and file I/O cancel out.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks.arm_apt import ArmBenchError, PrivateApt, cache_root

PLUGIN_SOURCE = Path(__file__).parent / "qemu_insn" / "insn_count.c"
HEADER = "qemu-plugin.h"
SYSTEM_HEADER_DIRS = (Path("/usr/include"), Path("/usr/include/qemu"), Path("/usr/local/include"),
                      Path("/usr/local/include/qemu"))
INSTALL_HINT = ("install qemu-user (apt-get install qemu-user), and give the plugin header of its version "
                "with QEMU_PLUGIN_HEADER=/path/to/qemu-plugin.h if apt-get cannot fetch Debian's qemu source")
# The CPU qemu shows the guest, through the feature bits (HWCAP) that programs pick code paths
# by: the default "max" has SVE, with which glibc's memcpy and onnxruntime's kernels take SVE
# paths that no Raspberry Pi has. qemu-arm has no AArch32 Cortex-A53, so rpi3 keeps "max" (an
# ARMv8 in AArch32 state: NEON, VFPv4 and the ARMv8 AArch32 additions, like the A53).
QEMU_CPU = {"qemu-aarch64": ("-cpu", "cortex-a72"), "qemu-arm": (), "qemu-riscv64": ()}
# Targets whose core is not their qemu's default above: rpi5's Cortex-A76 (the dot-product
# extension, which the A72 lacks: its sdot would be an illegal instruction there).
TARGET_CPU = {"rpi5": ("-cpu", "cortex-a76")}


@dataclass(frozen=True)
class Counts:
    """Executed guest instructions, and how many were SIMD (vector) or scalar floating-point."""

    insns: float
    simd: float
    fp: float

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.insns - other.insns, self.simd - other.simd, self.fp - other.fp)

    def scaled(self, factor: float) -> Counts:
        return Counts(self.insns * factor, self.simd * factor, self.fp * factor)

    @property
    def simd_share(self) -> float:
        return self.simd / self.insns if self.insns else 0.0


def qemu_version() -> str:
    """The installed qemu-user's Debian version (its source package's version)."""
    result = subprocess.run(["dpkg-query", "-W", "-f=${source:Version}", "qemu-user"], capture_output=True, text=True)
    if result.returncode == 0 and result.stdout.strip():
        return result.stdout.strip()
    result = subprocess.run(["qemu-aarch64", "--version"], capture_output=True, text=True)
    if result.returncode != 0:
        raise ArmBenchError(f"qemu-aarch64 not found: {INSTALL_HINT}")
    return result.stdout.split()[2]


def _header_from_debian_source(version: str, dest: Path) -> Path:
    # The arm64 lists hold the source packages too (deb-src lines); one apt state serves both.
    apt = PrivateApt(cache_root() / "apt-arm64", "arm64")
    tarballs = apt.source("qemu", version, cache_root() / "qemu-source")
    if not tarballs:
        raise ArmBenchError(f"Debian's qemu {version} source has no .orig tarball")
    with tarfile.open(tarballs[0]) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith("/include/qemu/" + HEADER):
                source = tar.extractfile(member)
                assert source is not None
                dest.mkdir(parents=True, exist_ok=True)
                (dest / HEADER).write_bytes(source.read())
                return dest / HEADER
    raise ArmBenchError(f"{tarballs[0]}: no include/qemu/{HEADER} inside")


def find_plugin_header(version: str, fetch: bool = True) -> Path | None:
    """qemu-plugin.h for the installed qemu; None when it is nowhere and `fetch` is False."""
    env = os.environ.get("QEMU_PLUGIN_HEADER")
    if env:
        if not Path(env).is_file():
            raise ArmBenchError(f"QEMU_PLUGIN_HEADER={env}: no such file")
        return Path(env)
    for folder in SYSTEM_HEADER_DIRS:
        if (folder / HEADER).is_file():
            return folder / HEADER
    cached = cache_root() / "qemu-plugin" / version.replace(":", "_") / HEADER
    if cached.is_file():
        return cached
    if not fetch:
        return None
    try:
        return _header_from_debian_source(version, cached.parent)
    except ArmBenchError as e:
        raise ArmBenchError(f"{e}; {INSTALL_HINT}") from e


def build_plugin(fetch: bool = True) -> Path | None:
    """The plugin .so for the installed qemu, built once into the cache (rebuilt when its source or
    the header changes); None when the header is missing and `fetch` is False."""
    version = qemu_version()
    header = find_plugin_header(version, fetch)
    if header is None:
        return None
    digest = hashlib.sha256(PLUGIN_SOURCE.read_bytes() + header.read_bytes()).hexdigest()[:16]
    plugin = cache_root() / "qemu-plugin" / version.replace(":", "_") / f"insn_count-{digest}.so"
    if plugin.is_file():
        return plugin
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ArmBenchError("no C compiler (cc) to build the qemu plugin: apt-get install gcc")
    plugin.parent.mkdir(parents=True, exist_ok=True)
    partial = plugin.with_suffix(".partial")
    # gnu11: qemu-plugin.h has an anonymous union.
    result = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                             "-I", str(header.parent), str(PLUGIN_SOURCE), "-o", str(partial)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise ArmBenchError(f"building {PLUGIN_SOURCE.name} against {header} failed: "
                            f"{(result.stderr.strip().splitlines() or ['no output'])[0]}")
    partial.replace(plugin)
    return plugin


def count(qemu: str, plugin: Path, command: list[str], qemu_args: tuple[str, ...] = (),
          env: Mapping[str, str] | None = None, cwd: Path | None = None,
          cpu: tuple[str, ...] | None = None) -> Counts:
    """Run `command` under `qemu` with the plugin and return the whole run's counts (`cpu`: the
    -cpu arguments, else QEMU_CPU's for that qemu)."""
    with tempfile.TemporaryDirectory(prefix="aot-arm-count-") as tmp:
        out = Path(tmp) / "counts.txt"
        # nice: the counted runs are long and the machine is shared; the counts do not depend on it.
        result = subprocess.run(["nice", "-n", "10", qemu, *(QEMU_CPU[qemu] if cpu is None else cpu), *qemu_args,
                                 "-plugin", f"{plugin},out={out}", *command],
                                capture_output=True, text=True, env=dict(env) if env is not None else None, cwd=cwd)
        if result.returncode != 0 or not out.is_file():
            last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
            raise ArmBenchError(f"{qemu} {' '.join(command[:1])}: {last}")
        fields = dict(line.split() for line in out.read_text().splitlines())
    return Counts(float(fields["insns"]), float(fields["simd"]), float(fields["fp"]))


def per_inference(run: Callable[[int], Counts], base: int = 1, extra: int = 10, min_difference: float = 0) -> Counts:
    """Counts of one inference: run(base + extra) - run(base), over `extra`. With `min_difference`,
    `extra` grows until the difference is at least that many instructions (measured from the first
    estimate), for programs whose start-up count is not exactly the same from run to run."""
    start = run(base)
    estimate = (run(base + extra) - start).scaled(1.0 / extra)
    if estimate.insns <= 0 or extra * estimate.insns >= min_difference:
        return estimate
    extra = math.ceil(min_difference / estimate.insns)
    return (run(base + extra) - start).scaled(1.0 / extra)
