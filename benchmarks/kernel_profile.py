"""Where a compiled package spends its time, kernel by kernel, under `perf record`: the package's
runner built with every kernel out of line (noinline, no identical-code folding) so that perf
attributes each sample to one kernel, fed aot's seeded verify inputs. The Python form of
benchmarks/profile_kernels.sh, for a package already compiled (any input shapes, any preset this
machine runs, built with the given machine flags).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.host.build import host_cc
from aot.package.package import Package
from aot.verify import random_inputs


@dataclass(frozen=True)
class KernelShare:
    percent: float  # of the runner's samples, start-up and file I/O included (small at many repeats)
    kernel: str  # k<N>
    description: str  # the op and ONNX nodes the kernel implements, from its comment in the C source


def _noinline(source: Path) -> None:
    text = re.sub(r"^((AOT_[A-Z_]+ )*)static void ", r"\1__attribute__((noinline)) static void ",
                  source.read_text(), flags=re.M)
    source.write_text(text)


def profile(package: Package, machine_flags: str, repeat: int = 50, top: int = 8,
            inputs: Mapping[str, np.ndarray] | None = None) -> list[KernelShare]:
    """The `top` kernels by share of `repeat` runs on `inputs` (default: aot verify's seeded random
    ones). Needs perf, make and a C compiler."""
    with tempfile.TemporaryDirectory(prefix="aot-profile-") as tmp:
        directory = package.write(Path(tmp) / "pkg")
        source = directory / f"{package.name}.c"
        _noinline(source)
        runner = f"{package.name}_runner"
        subprocess.run(["make", "-s", "-C", str(directory), f"CC={host_cc()}", "AR=ar", "OPT=-O3 -fno-ipa-icf",
                        f"TARGET_CFLAGS={machine_flags}", runner], check=True, capture_output=True)
        inputs = []
        for i, (name, value) in enumerate((inputs or random_inputs(package)).items()):
            path = directory / f"in{i:02d}_{name.replace('/', '_')}.npy"
            np.save(path, value)
            inputs.append(str(path))
        subprocess.run(["perf", "record", "-q", "-o", str(directory / "perf.data"), str(directory / runner),
                        "-o", str(directory), "-r", str(repeat), *inputs], check=True, capture_output=True)
        report = subprocess.run(["perf", "report", "-i", str(directory / "perf.data"), "--stdio"],
                                check=True, capture_output=True, text=True).stdout
        comments = dict(re.findall(r"/\* (k\d+): (.*?) \*/", source.read_text()))
    shares: dict[str, float] = {}
    for line in report.splitlines():
        m = re.match(r"\s*([0-9.]+)%.*\s\S*_(k\d+)\b", line)
        if m and not line.startswith("#"):
            shares[m.group(2)] = shares.get(m.group(2), 0.0) + float(m.group(1))
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])[:top]
    return [KernelShare(percent, kernel, comments.get(kernel, "")) for kernel, percent in ranked]
