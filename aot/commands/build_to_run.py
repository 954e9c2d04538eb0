"""The package verify runs: built natively for the host, else cross-built and run under qemu-user."""

from __future__ import annotations

from typing import Any

from aot.progress import Progress


def build_to_run(package: Any, target_name: str | None, backend: str, built_before: Any = None, *,
                 progress: Progress) -> Any:
    """The package built to run here: natively for the host, else cross-built and run under qemu-user.
    `built_before`: another model of the same package, already built: this one runs from that build."""
    from aot.host.run import HostModel, host_variant
    from aot.targets import load_target
    from aot.toolchain.discovery import is_host
    from aot.toolchain.target_build import TargetModel

    if isinstance(built_before, HostModel):
        built = HostModel(package, built_before.directory, keep=built_before)
        built.where = built_before.where
        return built
    if isinstance(built_before, TargetModel):
        built = TargetModel(package, built_before.target, built_before.directory, keep=built_before)
        built.where = built_before.where
        return built
    target = load_target(target_name) if target_name else None
    if target is None or (is_host(target) and (backend != "llvm" or host_variant(package)[0] == "llvm")):
        with progress.step("host build"):
            built = HostModel.build(package)
        built.where = "host"
        return built
    built = TargetModel.build(package, target, progress=progress)
    built.where = f"{target.name} under {' '.join(built.command([])[:-1]) or 'native'}"
    return built
