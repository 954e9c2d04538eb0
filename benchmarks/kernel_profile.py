"""Where a compiled package spends its time, kernel by kernel, under `perf record`: the package's
runner built with every kernel out of line (noinline, no identical-code folding) so that perf
attributes each sample to one kernel, fed aot's seeded verify inputs. The Python form of
benchmarks/profile_kernels.sh, for a package already compiled (any input shapes, any preset this
machine runs, built with the given machine flags).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aot.codegen.kernel_names import kernel_stems
from aot.commands.verify import random_inputs
from aot.host.build import host_cc
from aot.package.package import Package


@dataclass(frozen=True)
class KernelShare:
    percent: float  # of the runner's samples, start-up and file I/O included (small at many repeats)
    kernel: str  # k<N>, the kernel's position in the run (manifest.json kernel_order)
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
    table = kernel_table(package.name, package.manifest)
    shares: dict[str, float] = {}
    for line in report.splitlines():
        m = re.match(r"\s*([0-9.]+)%.*\s(\S+)\s*$", line)
        kernel = kernel_of(m.group(2), table) if m and not line.startswith("#") else None
        if m and kernel:
            shares[kernel] = shares.get(kernel, 0.0) + float(m.group(1))
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])[:top]
    descriptions = {kernel: description for kernel, description in table.values()}
    return [KernelShare(percent, kernel, descriptions[kernel]) for kernel, percent in ranked]


def kernel_table(model: str, manifest: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each kernel function's symbol (aot/codegen/kernel_names.py) -> (k<N>, its position in the run,
    and the op and ONNX nodes it implements, every name whole), from the package's manifest."""
    order = manifest["kernel_order"]
    stems = kernel_stems((k["sources"], k["op"]) for k in order)
    return {f"{model}_{stem}": (f"k{i}", f"{k['op']} <- ONNX {', '.join(repr(s) for s in k['sources'])}")
            for i, (stem, k) in enumerate(zip(stems, order, strict=True))}


def kernel_of(symbol: str, table: Mapping[str, tuple[str, str]]) -> str | None:
    """The k<N> of a profiled symbol: a kernel's function, one of its parallel segments
    (<function>_<n>) or its serial copy (<function>_serial), with any suffix gcc added (.isra.0)."""
    symbol = symbol.split(".")[0]
    while symbol:
        if symbol in table:
            return table[symbol][0]
        trimmed = re.sub(r"_(serial|[0-9]+|k)$", "", symbol)
        if trimmed == symbol:
            return None
        symbol = trimmed
    return None


def main(argv: list[str]) -> int:
    """`perf report --stdio` on stdin -> `<share>% k<N>: <op and ONNX nodes>` per kernel, for
    benchmarks/profile_kernels.sh: argv is the package directory, the top count and a width."""
    directory, top, width = Path(argv[0]), int(argv[1]), int(argv[2])
    manifest = json.loads((directory / "manifest.json").read_text())
    table = kernel_table(manifest["name"], manifest)
    descriptions = dict(table.values())
    shown = 0
    for line in sys.stdin:
        m = re.match(r"\s*([0-9.]+%).*\s(\S+)\s*$", line)
        kernel = kernel_of(m.group(2), table) if m and not line.startswith("#") else None
        if kernel and shown < top:
            print(f"{m.group(1)} {kernel}: {descriptions[kernel]}"[:width + len(m.group(1)) + 1])
            shown += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
