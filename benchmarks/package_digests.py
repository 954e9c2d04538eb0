"""Digests of every file of the packages aot writes for a set of models, backends and targets.

A refactor that must not change the generated code records the digests before and compares
after:

    python -m benchmarks.package_digests --save before.json
    python -m benchmarks.package_digests --compare before.json

Models: examples/*.onnx, and ../shared/models/*.onnx when that folder exists (a user's clone
lacks it), plus any given with `--models` (int8 ones, say, from `aot quantize`). `--quick` compiles
the examples and `--models` only. Prints one line per package whose files differ,
naming the files; exit code 1 when any differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from aot.compiler import compile as compile_package

REPO = Path(__file__).resolve().parent.parent
SHARED_MODELS = REPO.parent / "shared" / "models"
# (backend, target, parallel): the packages whose code paths differ most, every int8 dot-product
# kind among them (portable, neon, sdot, vpmaddwd, vpdpbusd).
CONFIGS: tuple[tuple[str, str | None, bool], ...] = (
    ("c", None, False), ("c", "rpi4", False), ("c", "rpi3", False), ("c", "cortex-m4f", False),
    ("c", "x86_64-v3", False), ("c", None, True), ("llvm", "rpi4", False), ("llvm", "x86_64-v4", False),
    ("c", "rpi5", False), ("c", "x86_64-v4-vnni", False), ("llvm", "rpi3", False), ("llvm", "rpi5", False),
    ("llvm", "x86_64-v3", False), ("llvm", "x86_64-v4-vnni", False),
)


def models(quick: bool, extra: list[Path]) -> list[Path]:
    found = sorted((REPO / "examples").glob("*.onnx"))
    if not quick and SHARED_MODELS.is_dir():
        found += sorted(SHARED_MODELS.glob("*.onnx"))
    return found + extra


# Example models with free input dimensions, and the shapes they are compiled at.
FREE_INPUTS: dict[str, dict[str, tuple[int, ...]]] = {"keyword_cnn.onnx": {"features": (1, 40, 98)}}


def package_key(model: Path, backend: str, target: str | None, parallel: bool) -> str:
    return f"{model.name} {backend} {target or '-'}{' parallel' if parallel else ''}"


def digests(quick: bool, extra: list[Path]) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for model in models(quick, extra):
        for backend, target, parallel in CONFIGS:
            key = package_key(model, backend, target, parallel)
            package = compile_package(str(model), FREE_INPUTS.get(model.name), backend=backend, target=target,
                                      parallel=parallel)
            result[key] = {name: hashlib.sha256(data).hexdigest()[:16] for name, data in sorted(package.files.items())}
            print(f"{key}: {len(result[key])} files", file=sys.stderr, flush=True)
    return result


def compare(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> int:
    differing = 0
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key, {}), after.get(key, {})
        changed = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
        if changed:
            differing += 1
            print(f"{key}: differs in {', '.join(changed)}")
    print(f"{len(after)} packages, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write the digests to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare against digests saved before")
    parser.add_argument("--quick", action="store_true", help="examples/ and --models only")
    parser.add_argument("--models", type=Path, nargs="*", default=[], help="more .onnx files to compile")
    args = parser.parse_args()
    current = digests(args.quick, args.models)
    if args.save:
        args.save.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    if args.compare:
        saved = json.loads(args.compare.read_text())
        if args.quick:
            saved = {k: v for k, v in saved.items() if k in current}
        return compare(saved, current)
    return 0


if __name__ == "__main__":
    sys.exit(main())
