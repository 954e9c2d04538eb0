"""Target presets: one small TOML file per target in targets/, validated on load
(aot/targets/fields.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aot.errors import AotError
from aot.resources import resource_dir
from aot.targets.architectures import architecture_of, host_architecture
from aot.targets.fields import OPTIONAL_FIELDS, REQUIRED_FIELDS, field_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    triple: str
    cpu: str
    features: str
    float_abi: str
    os: str
    alignment: int
    cflags: tuple[str, ...]
    gcc_prefix: str = ""
    zig_target: str = ""
    qemu: str = ""
    qemu_cpu: str = ""             # qemu's -cpu for the target's extensions ("": its default CPU)
    preferred_toolchain: str = ""  # "zig" or "gcc": tried first by find_toolchain ("": gcc)
    # The float vector registers the register tiles are sized for (0: none; scalar tiles).
    vector_bits: int = 128
    vector_registers: int = 16
    # The int8 tiles' dot-product instruction (aot/targets/fields.py INT8_DOTS); "" in a file:
    # derived from `features` (default_int8_dot).
    int8_dot: str = ""
    # L2 cache per core in bytes, for blocking (0 in a file: aot/targets/capabilities.py's default).
    l2_cache_bytes: int = 0
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.int8_dot:
            object.__setattr__(self, "int8_dot", default_int8_dot(self.arch, self.features))

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def pointer_bits(self) -> int:
        """The width of pointers and size_t (aot/targets/architectures.py; for an architecture aot
        does not know, 64 where its name says so)."""
        known = architecture_of(self.arch)
        if known is not None:
            return known.pointer_bits
        return 64 if "64" in self.arch or self.arch == "s390x" else 32

    @property
    def max_object_bytes(self) -> int:
        """The largest array the target's C compilers accept and its pointer arithmetic can span
        (PTRDIFF_MAX): 2 GiB - 1 on 32-bit targets."""
        return 2 ** (self.pointer_bits - 1) - 1

    @property
    def bare_metal(self) -> bool:
        return self.os == "none"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "triple": self.triple, "cpu": self.cpu,
                "features": self.features, "float_abi": self.float_abi, "os": self.os,
                "alignment": self.alignment, "cflags": list(self.cflags), "vector_bits": self.vector_bits,
                "vector_registers": self.vector_registers, "int8_dot": self.int8_dot,
                "l2_cache_bytes": self.l2_cache_bytes}


def default_int8_dot(arch: str, features: str) -> str:
    """The int8 dot-product step a preset's features give: vpdpbusd with AVX-512 VNNI (and VL,
    for its 256-bit form) or AVX-VNNI, the exact AVX2 sequence with AVX2, sdot on aarch64 with the
    dot-product extension, the exact NEON sequences with NEON (aarch64, and armv7 where the
    preset enables it), else the portable loops."""
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    if arch == "aarch64" and {"neon", "dotprod"} <= enabled:
        return "sdot"
    if arch == "aarch64" or arch.startswith("arm") or arch.startswith("thumb"):
        return "neon" if "neon" in enabled else "portable"
    if arch not in ("x86_64", "i686", "i386"):
        return "portable"
    if {"avx512vnni", "avx512vl"} <= enabled or "avxvnni" in enabled:
        return "vpdpbusd"
    return "vpmaddwd" if "avx2" in enabled else "portable"


def _validate(name: str, data: dict[str, Any], source: str) -> Target:
    """The Target a TOML file describes, once every field has the type and the values that a
    build file, a command line or a file name can safely hold (aot/targets/fields.py)."""
    where = f"target {source}"
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise AotError(f"{where}: missing key {key!r}")
    unknown = sorted(set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise AotError(f"{where}: unknown key(s) {unknown}")
    for key, value in data.items():
        problem = field_problem(key, value)
        if problem:
            raise AotError(f"{where}: {key!r} {problem}")
    return Target(name=name, cflags=tuple(data["cflags"]), source=source,
                  **{k: v for k, v in data.items() if k != "cflags"})


def _read(path: Path, name: str) -> Target:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AotError(f"target {path}: cannot read: {e.strerror}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AotError(f"target {path}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start}); "
                       "TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AotError(f"target {path}: not valid TOML: {e}") from e
    return _validate(name, data, str(path))


def preset_names() -> list[str]:
    return sorted(p.stem for p in resource_dir("targets").glob("*.toml"))


def list_targets() -> list[Target]:
    return [load_target(n) for n in preset_names()]


def host_target_name() -> str:
    """The preset named after this machine's architecture (x86_64, aarch64, riscv64), else x86_64."""
    host = host_architecture()
    return host.family if host is not None and host.family in preset_names() else "x86_64"


def host_preset_name() -> str:
    """The preset that best fits this machine's CPU (for benchmarks built with -march=native)."""
    name = host_target_name()
    if name != "x86_64":
        return name
    try:
        flags = set(next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return name
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "x86_64-v4-vnni" if "avx512_vnni" in flags else "x86_64-v4"
    if {"avx2", "fma"} <= flags:
        return "x86_64-v3"
    return name


def load_target(spec: str | os.PathLike[str]) -> Target:
    """A preset by name ("host": the preset of this machine's architecture) or a user's TOML file
    by path. No --target is not a target: see resolve_targets."""
    if str(spec) == "host":
        spec = host_target_name()
    text = str(spec)
    if text.endswith(".toml") or os.sep in text:
        path = Path(text)
        if not path.is_file():
            raise AotError(f"--target {text}: no such file")
        return _read(path, path.stem)
    preset = resource_dir("targets") / f"{text}.toml"
    if not preset.is_file():
        raise AotError(f"--target {text!r}: unknown target (available: {', '.join(preset_names())}, "
                       "or a path to a .toml file)")
    return _read(preset, text)


def resolve_targets(names: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[Target]:
    """The targets `--target` names (preset names or .toml paths), each once, in the order given.
    None or an empty list: the package is for any target; a part that needs one machine (an LLVM
    object, a run on this machine) takes the host's (aot/backends/llvm/__init__.py)."""
    if not names:
        return []
    targets: list[Target] = []
    for name in [names] if isinstance(names, (str, os.PathLike)) else names:
        target = load_target(name)
        if target not in targets:
            targets.append(target)
    return targets
