"""onnxruntime's own aarch64 build, counted under qemu-aarch64 like our packages.

A sysroot in the cache folder holds Debian's arm64 python3.11 (its .debs unpacked, nothing
installed) and the manylinux aarch64 wheels of onnxruntime and numpy (unzipped, the same
onnxruntime version as the host's when it has one). benchmarks/qemu_insn/ort_driver.py runs in
it: one session (one thread, all graph optimisations, as `aot bench`) and N inferences.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from benchmarks.arm_apt import ArmBenchError, PrivateApt, cache_root
from benchmarks.arm_qemu import QEMU_CPU, Counts, count, per_inference

DRIVER = Path(__file__).parent / "qemu_insn" / "ort_driver.py"
PYTHON = "usr/bin/python3.11"
SITE = "ort-site"
# python3.11 and the shared libraries that it, numpy and onnxruntime load (the stdlib modules
# needing curses, readline, sqlite or Berkeley DB are never imported, so their libraries are left out).
DEBIAN_PACKAGES = ["python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libgcc-s1",
                   "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libssl3", "libbz2-1.0", "liblzma5",
                   "libcrypt1", "libuuid1"]
WHEEL_PLATFORMS = ["manylinux2014_aarch64", "manylinux_2_27_aarch64", "manylinux_2_28_aarch64"]
# qemu-user shows the guest the host's /proc/cpuinfo, and onnxruntime's CPU detection (cpuinfo)
# crashes on an x86 one; files under the sysroot shadow the host's, so the guest reads this one,
# written after a Raspberry Pi 4's (four Cortex-A72 cores).
RPI4_CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n"
    for i in range(4)) + "Hardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n"
# The guest's whole environment: no telemetry thread (it made counts racy), a fixed hash seed
# (dict and set order, hence the work done, stay the same from run to run), no .pyc writing.
GUEST_ENV = {"ORT_DISABLE_TELEMETRY": "1", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
             "PYTHONNOUSERSITE": "1", "LANG": "C", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
# onnxruntime's start-up count is not always the same: two of some twenty runs of tiny_cnn were
# off (by 50 K and by about 4.5 M instructions) while the inferences counted the same each time.
# Enough inferences between the two runs make such a difference at most about 1% of the total.
ORT_MIN_DIFFERENCE = 5e8


def onnxruntime_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


def _pip_download(requirements: list[str], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
    result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", *platforms,
                             "--python-version", "3.11", "--implementation", "cp", "-d", str(dest), *requirements],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise ArmBenchError(f"pip download {' '.join(requirements)} (aarch64 wheels) failed: "
                            f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    return sorted(dest.glob("*.whl"))


class OrtSysroot:
    """The sysroot; built on first use, then reused (a stamp file marks it complete)."""

    def __init__(self, root: Path | None = None) -> None:
        self.version = onnxruntime_version()
        # A new folder when what goes into it changes (an old one stays until removed by hand).
        recipe = hashlib.sha256("\n".join([*DEBIAN_PACKAGES, RPI4_CPUINFO]).encode()).hexdigest()[:8]
        self.root = root or cache_root() / f"sysroot-aarch64-ort-{self.version or 'latest'}-{recipe}"

    @property
    def site(self) -> Path:
        return self.root / SITE

    def ensure(self, plugin: Path) -> None:
        stamp = self.root / ".complete"
        if stamp.is_file():
            return
        debs = PrivateApt(cache_root() / "apt-arm64", "arm64").download(DEBIAN_PACKAGES, cache_root() / "debs-arm64")
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(self.root)], check=True)
        requirement = f"onnxruntime=={self.version}" if self.version else "onnxruntime"
        for wheel in _pip_download([requirement, "numpy"], cache_root() / "wheels-aarch64"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(self.site)
        (self.root / "proc").mkdir(exist_ok=True)
        (self.root / "proc" / "cpuinfo").write_text(RPI4_CPUINFO)
        # Precompiled .pyc files: without them every run compiles the modules it imports, and
        # the counts of short and long runs differ by more than their inferences.
        self._python(["-m", "compileall", "-q", "-j", "1", str(self.root / "usr/lib/python3.11"), str(self.site)],
                     plugin=None)
        stamp.touch()

    def _python(self, args: list[str], plugin: Path | None) -> Counts | None:
        command = [str(self.root / PYTHON), *args]
        qemu_args = ("-L", str(self.root))
        if plugin is not None:
            return count("qemu-aarch64", plugin, command, qemu_args, env=GUEST_ENV)
        result = subprocess.run(["nice", "-n", "10", "qemu-aarch64", *QEMU_CPU["qemu-aarch64"], *qemu_args, *command],
                                capture_output=True,
                                text=True, env=GUEST_ENV)
        if result.returncode != 0:
            raise ArmBenchError(f"python3.11 {' '.join(args)} in {self.root}: "
                                f"{(result.stderr.strip().splitlines() or [f'exit code {result.returncode}'])[-1]}")
        return None

    def counts(self, plugin: Path, model: Path, feeds: Path) -> Counts:
        """onnxruntime's counts of one inference of `model` on the inputs in `feeds` (.npz)."""
        self.ensure(plugin)

        def run(n: int) -> Counts:
            counts = self._python([str(DRIVER), str(self.site), str(model), str(feeds), str(n)], plugin)
            assert counts is not None
            return counts

        return per_inference(run, min_difference=ORT_MIN_DIFFERENCE)
