"""`aot build`: the package of MODEL... built with a target's toolchain, published to -o with its
library and runner only once the build succeeded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aot.commands.compile import compile_package
from aot.commands.model_options import files_read, host_preset, value_files, with_dims
from aot.progress import Progress
from aot.terminal import printable


def build_command(model: list[Path], output: Path, *, target: str | None, toolchain: str, input_shape: list[str] | None,
                  dim: list[str] | None, input_value: list[str] | None, name: list[str] | None,
                  package_name: str | None, shared_arena: bool, backend: str, dynamic: bool, force: bool,
                  as_json: bool, progress: Progress, **options: Any) -> None:
    """Compile MODEL... for `target` (default: this machine's preset), build it and write the package
    and its artefacts to `output`. `options` are compile_models()' (weights_format, parallel,
    conv_algorithm, max_arena)."""
    import tempfile

    from aot.package.output_dir import check_output_folder
    from aot.targets import load_target
    from aot.toolchain.discovery import find_toolchain
    from aot.toolchain.elf import read_elf
    from aot.toolchain.target_build import build_package_dir

    target = target or host_preset()
    read = [f for m in model for f in files_read(m, output, force, [target])] + value_files(input_value)
    check_output_folder(output, force, read)  # before compiling and building: a refusal costs nothing
    input_shape = with_dims(model, input_shape, input_value, dim)
    preset = load_target(target)
    tools = find_toolchain(preset, None if toolchain == "auto" else toolchain)
    package = compile_package(model, name, package_name, shared_arena, input_shape, input_value,
                              progress=progress, backend=backend, target=target, **options)
    # Build in a staging copy, then publish package and artefacts together: no half-built folder,
    # and nothing made next to -o (not even its parent folders) if the build fails.
    with tempfile.TemporaryDirectory(prefix="aot-build-") as tmp:
        staging = package.write(Path(tmp) / "pkg")
        progress.start(f"cross build for {preset.name} ({tools.kind}: {tools.cc_text})")
        built = build_package_dir(staging, package, preset, tools, static=not dynamic,
                                  llvm=backend == "llvm")
        progress.finish()
        files = {str(p.relative_to(staging)): p.read_bytes() for p in staging.rglob("*")
                 if p.is_file() and not p.name.endswith(".o") or p.name in package.files}
        artefacts = [(p.name, read_elf(p).describe() if p.suffix != ".a" else "static library", p.stat().st_size)
                     for p in built]
    from aot.package.writer import write_tree_atomically

    written = write_tree_atomically(files, output, force=force, inputs=read)
    for artefact, _, _ in artefacts:
        if not artefact.endswith(".a"):
            (written / artefact).chmod(0o755)
    _print_build(model, written, preset, tools, artefacts=artefacts, as_json=as_json)


def _print_build(model: list[Path], written: Path, preset: Any, tools: Any, *,
                 artefacts: list[tuple[str, str, int]], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"package": str(written), "target": preset.name, "triple": preset.triple,
                          "toolchain": tools.kind, "cc": tools.cc_text,
                          "artefacts": [{"file": a, "kind": k, "bytes": b} for a, k, b in artefacts]},
                         sort_keys=True))
        return
    print(printable(f"built {', '.join(map(str, model))} for {preset.name} ({preset.triple}) with {tools.kind}: "
                    f"{tools.cc_text}"))
    for artefact, kind, size in artefacts:
        print(printable(f"  {written / artefact}: {kind}, {size} bytes"))
