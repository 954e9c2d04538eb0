"""Building a package for a target with its toolchain, and running its runner (under qemu-user
when the target is not the host)."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aot.errors import AotError, BuildError
from aot.host.build import STRICT_CFLAGS
from aot.host.run import prepare_inputs
from aot.progress import SILENT, Progress
from aot.targets import Target
from aot.toolchain.discovery import Toolchain, find_toolchain, qemu_for

if TYPE_CHECKING:
    from aot.package.package import Package


def build_package_dir(package_dir: Path, package: Package, target: Target, toolchain: Toolchain,
                      opt: str = "-O3", static: bool = True, extra_cflags: str = "",
                      llvm: bool = False) -> list[Path]:
    """Run the package's Makefile for `target`; returns the artefacts built (library, a runner per
    model). With `llvm`, the model code comes from the package's LLVM object for the target."""
    cflags = " ".join([opt, STRICT_CFLAGS, *toolchain.target_cflags(target), extra_cflags]).strip()
    runners = [] if target.bare_metal else [f"{model}_runner" for model in package.library_models]
    goals = [f"lib{package.library}.a", *runners]
    ldflags = "-static" if static and not target.bare_metal and toolchain.static_ok else ""
    # TARGET_CFLAGS and the LLVM object's C flags are cleared: the package's defaults are GCC
    # spellings (zig takes no -march=rv64gcv), already translated above.
    variables = ["BACKEND=llvm", f"TARGET={target.name}", f"AOT_CFLAGS_{target.name}="] if llvm else []
    cmd = ["make", "-s", "-C", str(package_dir), f"CC={toolchain.cc_text}", f"AR={toolchain.ar_text}",
           f"CFLAGS={cflags}", "TARGET_CFLAGS=", f"LDFLAGS={ldflags}", *variables, *goals]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[:20])
        raise BuildError(f"{package_dir}: building for {target.name} with {toolchain.kind} "
                         f"({toolchain.cc_text}) failed:\n{detail}")
    return [package_dir / g for g in goals]


class TargetModel:
    """A package built for a target; `run` executes its runner (natively or under qemu-user)."""

    def __init__(self, package: Package, target: Target, directory: Path, keep: Any = None) -> None:
        self.package = package
        self.target = target
        self.directory = directory
        self.runner = directory / f"{package.name}_runner"
        self._keep = keep
        self._launcher = qemu_for(target)

    @classmethod
    def build(cls, package: Package, target: Target, toolchain: Toolchain | None = None,
              build_dir: Path | None = None, opt: str = "-O3", progress: Progress | None = None,
              extra_cflags: str = "") -> TargetModel:
        if target.bare_metal:
            raise AotError(f"--target {target.name}: bare-metal targets build a library only; nothing to run here")
        toolchain = toolchain or find_toolchain(target)
        keep = None
        if build_dir is None:
            keep = tempfile.TemporaryDirectory(prefix=f"aot-{package.library}-{target.name}-")
            directory = Path(keep.name) / "pkg"
            package.write(directory)
        else:
            directory = package.write(build_dir, force=True)
        llvm = package.manifest.get("backend") == "llvm"
        progress = progress or SILENT
        progress.start(f"cross build for {target.name} ({toolchain.kind}: {toolchain.cc_text})")
        build_package_dir(directory, package, target, toolchain, opt=opt, extra_cflags=extra_cflags, llvm=llvm)
        progress.finish()
        return cls(package, target, directory, keep)

    def _what(self) -> str:
        return f"{self.runner.name} ({self.target.name}{', under ' + self._launcher[0] if self._launcher else ''})"

    def command(self, args: Sequence[str]) -> list[str]:
        return [*self._launcher, str(self.runner), *args]

    def run(self, inputs: Mapping[str, Any] | Sequence[Any], repeat: int = 0,
            timeout: float | None = None) -> dict[str, np.ndarray]:
        """Run the runner on `inputs`; a failure, a crash or (with `timeout`, seconds) a hang is an AotError."""
        arrays = prepare_inputs(self.package.inputs, inputs)
        with tempfile.TemporaryDirectory(prefix="aot-run-") as tmp:
            paths = []
            for i, (spec, arr) in enumerate(zip(self.package.inputs, arrays)):
                path = Path(tmp) / f"input{i}.npy"
                # The runner checks each .npy's rank, and prepare_inputs' ascontiguousarray turns a
                # 0-d array (a scalar input: Clip's min, Trilu's k) into a 1-d one.
                np.save(path, arr.reshape(spec["shape"]))
                paths.append(str(path))
            args = ["-o", tmp, *(["-r", str(repeat)] if repeat else []), *paths]
            cmd = self.command(args)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                raise BuildError(f"{self._what()} did not finish within {timeout:g} s\n"
                               f"  command: {shlex.join(cmd)}") from e
            if proc.returncode != 0:
                code = proc.returncode
                status = f"signal {-code}" if code < 0 else f"exit {code}"
                # What the runner (or qemu) said first: the first line is the one-line reason.
                said = " ".join((proc.stderr or proc.stdout).strip().splitlines()[:5])
                raise BuildError(f"{self._what()} failed ({status}): {said}\n  command: {shlex.join(cmd)}")
            self.last_stdout = proc.stdout
            return {o["name"]: np.load(Path(tmp) / f"output{i}.npy") for i, o in enumerate(self.package.outputs)}
