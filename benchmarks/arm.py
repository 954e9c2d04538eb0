"""Guest instructions per inference on the Raspberry Pi targets, counted under qemu-user: aot's
package (C and LLVM backends) beside onnxruntime's own aarch64 build, printed as one markdown table.

    python -m benchmarks.arm MODEL.onnx ... [--targets rpi4 rpi3]

rpi4 runs under qemu-aarch64, rpi3 (armv7 hard-float) under qemu-arm, the RISC-V presets under
qemu-riscv64 with their preset's qemu_cpu (the vector length). onnxruntime has no armv7 build, so
rpi3 rows compare each backend with its own rpi4 count instead. Instructions are counted
by our TCG plugin (benchmarks/qemu_insn/insn_count.c, which also says what counts as SIMD); one
inference's count is a run doing 11 minus a run doing 1, over 10. Everything downloaded or built
(the plugin, Debian's arm64 python, the onnxruntime and numpy wheels) goes to $AOT_ARM_CACHE,
else ~/.cache/aot-bench-arm, and is reused. Needs qemu-user, the cross compilers of
tests/setup_env.sh, apt-get (Debian or Ubuntu) and pip.

A count is not a time: no caches, memory or pipelines are modelled (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aot.commands.verify import random_inputs
from aot.package.package import Package as AotPackage
from aot.targets import load_target
from aot.toolchain.discovery import find_toolchain
from benchmarks.arm_apt import ArmBenchError
from benchmarks.arm_ort import OrtSysroot
from benchmarks.arm_qemu import TARGET_CPU, Counts, build_plugin, count, per_inference

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"rpi4": ("qemu-aarch64", "aarch64-linux-gnu-gcc"), "rpi3": ("qemu-arm", "arm-linux-gnueabihf-gcc"),
           "rpi5": ("qemu-aarch64", "aarch64-linux-gnu-gcc"),
           **{riscv: ("qemu-riscv64", "riscv64-linux-gnu-gcc") for riscv in ("riscv64-rvv256", "riscv64-rvv128",
                                                                           "riscv64")}}
BACKENDS = ("c", "llvm")


@dataclass
class Package:
    """A compiled, statically linked package and the inputs its runner reads."""

    directory: Path
    runner: Path
    target: str
    inputs: list[Path]


def missing_tools(target: str) -> list[str]:
    return [tool for tool in TARGETS[target] if shutil.which(tool) is None]


def _run(command: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise ArmBenchError(f"{what}: {lines[-1] if lines else f'exit code {result.returncode}'}")
    return result


def write_inputs(manifest: dict, folder: Path, seed: int = 0) -> tuple[list[Path], Path]:
    """`aot verify`'s reproducible inputs for the package, in its order: one .npy each for our
    runner, and all of them in one .npz by name for onnxruntime."""
    arrays = random_inputs(AotPackage(manifest["name"], {}, manifest), seed)
    paths = []
    for i, spec in enumerate(manifest["inputs"]):
        paths.append(folder / f"input{i}.npy")
        np.save(paths[-1], arrays[spec["name"]])
    np.savez(folder / "feeds.npz", **arrays)
    return paths, folder / "feeds.npz"


def build_package(model: Path, target: str, backend: str, folder: Path) -> Package:
    """`aot compile --target TARGET [--backend llvm]`, then its Makefile with the cross compiler
    and static linking (qemu-user then needs no sysroot for our runner)."""
    directory = folder / f"{target}-{backend}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "aot", "compile", str(model), "--target", target, "-o", str(directory)]
    if backend == "llvm":
        command += ["--backend", "llvm"]
    _run(command, f"aot compile {model} --target {target} --backend {backend}", env=env)
    return made_package(directory, target)


def made_package(directory: Path, target: str) -> Package:
    """A compiled package's folder (perhaps with its C edited by hand) made with the cross
    compiler and static linking, with seeded inputs written beside it."""
    _run(["make", "-s", "-C", str(directory), "LDFLAGS=-static", *toolchain_variables(target)], f"make -C {directory}")
    manifest = json.loads((directory / "manifest.json").read_text())
    inputs, _ = write_inputs(manifest, directory)
    return Package(directory, directory / f"{manifest['name']}_runner", target, inputs)


def toolchain_variables(target: str) -> list[str]:
    """make variables for the compiler `aot build --target` picks where it is not the package's
    default cross GCC (zig for the RVV presets: Debian's GCC 12 does not vectorise for RVV)."""
    preset = load_target(target)
    toolchain = find_toolchain(preset)
    if toolchain.kind == "gcc":
        return []
    return [f"CC={toolchain.cc_text}", f"AR={toolchain.ar_text}",
            f"TARGET_CFLAGS={' '.join(toolchain.target_cflags(preset))}", f"AOT_CFLAGS_{target}="]


def qemu_cpu(target: str) -> tuple[str, ...] | None:
    """qemu's -cpu arguments for `target`: TARGET_CPU's, else its preset's qemu_cpu, else None
    (QEMU_CPU's default for its qemu)."""
    preset_cpu = load_target(target).qemu_cpu
    return TARGET_CPU.get(target) or (("-cpu", preset_cpu) if preset_cpu else None)


def runner_counts(plugin: Path, package: Package, runs: int) -> Counts:
    """The counts of the package's runner doing 1 + `runs` inferences (no warm-up runs)."""
    qemu = TARGETS[package.target][0]
    with tempfile.TemporaryDirectory(prefix="aot-arm-out-") as out:
        return count(qemu, plugin, [str(package.runner), "-r", str(runs), "-w", "0", "-o", out,
                                    *map(str, package.inputs)], cpu=qemu_cpu(package.target))


def aot_counts(plugin: Path, package: Package) -> Counts:
    return per_inference(lambda runs: runner_counts(plugin, package, runs))


@dataclass
class ModelCounts:
    model: str
    aot: dict[tuple[str, str], Counts]  # (target, backend) -> counts of one inference
    onnxruntime: Counts | None  # rpi4 only


def measure(model: Path, targets: list[str], plugin: Path, sysroot: OrtSysroot | None) -> ModelCounts:
    aot = {}
    with tempfile.TemporaryDirectory(prefix="aot-arm-") as tmp:
        feeds = None
        for target in targets:
            for backend in BACKENDS:
                package = build_package(model, target, backend, Path(tmp))
                feeds = feeds or package.directory / "feeds.npz"
                aot[target, backend] = aot_counts(plugin, package)
        ort = sysroot.counts(plugin, model, feeds) if sysroot is not None and feeds is not None else None
    return ModelCounts(model.stem, aot, ort)


def _millions(c: Counts | None) -> str:
    if c is None:
        return "—"
    millions = c.insns / 1e6
    return f"{millions:.0f}" if millions >= 100 else f"{millions:.3g}"


def _ratio(a: Counts | None, b: Counts | None) -> str:
    return "—" if a is None or b is None or not b.insns else f"{a.insns / b.insns:.2f}"


def _shares(*counts: Counts | None) -> str:
    return " / ".join("—" if c is None else f"{100 * c.simd_share:.0f}" for c in counts)


HEADER = ("| model | target | aot C (M insns) | aot LLVM (M insns) | onnxruntime (M insns) | C / onnxruntime | "
          "LLVM / onnxruntime | SIMD % C / LLVM / onnxruntime | rpi3 / rpi4 C / LLVM |\n"
          "|---|---|---|---|---|---|---|---|---|")


def table_rows(m: ModelCounts, targets: list[str]) -> list[str]:
    rows = []
    for target in targets:
        c, llvm = m.aot[target, "c"], m.aot[target, "llvm"]
        ort = m.onnxruntime if target == "rpi4" else None
        versus_rpi4 = "—"
        if target != "rpi4" and ("rpi4", "c") in m.aot:
            versus_rpi4 = f"{_ratio(c, m.aot['rpi4', 'c'])} / {_ratio(llvm, m.aot['rpi4', 'llvm'])}"
        rows.append(f"| {m.model} | {target} | {_millions(c)} | {_millions(llvm)} | {_millions(ort)} | "
                    f"{_ratio(c, ort)} | {_ratio(llvm, ort)} | {_shares(c, llvm, ort)} | {versus_rpi4} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--targets", nargs="+", default=["rpi4", "rpi3"], choices=sorted(TARGETS))
    parser.add_argument("--no-onnxruntime", action="store_true", help="count aot's packages only")
    parser.add_argument("--json", type=Path, help="also write every count (instructions, SIMD, scalar FP) here")
    args = parser.parse_args(argv)
    try:
        for path in args.models:
            if not path.is_file():
                raise ArmBenchError(f"{path}: no such file")
        for target in args.targets:
            if missing_tools(target):
                raise ArmBenchError(f"--targets {target} needs {' and '.join(missing_tools(target))}: "
                                    "install them with tests/setup_env.sh (qemu-user and the cross GCCs)")
        plugin = build_plugin()
        assert plugin is not None
        with_ort = "rpi4" in args.targets and not args.no_onnxruntime
        sysroot = OrtSysroot() if with_ort else None
        if sysroot is not None:
            sysroot.ensure(plugin)
        peer = f"onnxruntime {sysroot.version or '(latest)'} aarch64 build on rpi4" if sysroot else "no onnxruntime"
        print(f"Guest instructions per inference under qemu-user (one thread; C, LLVM: aot's backends; {peer})\n")
        print(HEADER, flush=True)
        results = []
        for path in args.models:
            m = measure(path.resolve(), args.targets, plugin, sysroot)
            results.append(m)
            print("\n".join(table_rows(m, args.targets)), flush=True)
    except ArmBenchError as e:
        print(f"arm: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps([{"model": m.model, "onnxruntime_rpi4": m.onnxruntime and vars(m.onnxruntime),
                                          "aot": {f"{t}-{b}": vars(c) for (t, b), c in m.aot.items()}}
                                         for m in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
