"""A compiled model: its package files in memory, its manifest, and writing them out.

Running it is the host tool's (aot/host/run.py): aot.compile returns a HostPackage, this data
with a run() that builds it for this machine, so the data does not depend on the tool."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aot.package.blob import FileData, file_sha256
from aot.package.writer import write_tree_atomically

MANIFEST = "manifest.json"


@dataclass
class Package:
    name: str
    # bytes, or a WeightsBlob for <name>_weights.bin (streamed to disk, see aot/package/blob.py)
    files: dict[str, FileData]
    manifest: dict[str, Any]

    @property
    def library(self) -> str:
        """The library the model is in: lib<library>.a (the package's, which may hold several models)."""
        return str(self.manifest.get("library", self.name))

    @property
    def model_names(self) -> list[str]:
        """The package's models: its own name, or the names of the several it holds."""
        return [m["name"] for m in self.manifest["models"]] if "models" in self.manifest else [self.name]

    @property
    def library_models(self) -> list[str]:
        """Every model in the library this package (or model of a package) is in."""
        return list(self.manifest.get("library_models", self.model_names))

    def model_manifest(self, model: str) -> dict[str, Any]:
        """One model's view of the manifest: the package's keys, then the model's own (inputs, arena
        ...), "library", the package's name, and "library_models", the names of all its models."""
        if "models" not in self.manifest:
            if model != self.name:
                raise KeyError(model)
            return self.manifest
        entry = next(m for m in self.manifest["models"] if m["name"] == model)
        common = {k: v for k, v in self.manifest.items() if k not in ("models", "name", "targets", "target",
                                                                       "triple", "weights_bytes")}
        return {**common, **entry, "library": self.name, "library_models": self.model_names}

    @property
    def arena_bytes(self) -> int:
        return int(self.manifest["arena_bytes"])

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return list(self.manifest["inputs"])

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return list(self.manifest["outputs"])

    def write(self, out_dir: str | os.PathLike[str], force: bool = False,
              inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
        """Write the package folder; `force` replaces only a folder aot wrote, never one holding
        `inputs` (see aot/package/output_dir.py)."""
        return write_tree_atomically(self.files, out_dir, force=force, inputs=inputs)


def finalize_manifest(files: dict[str, FileData], manifest: dict[str, Any]) -> bytes:
    """Record the sha256 of every file; the manifest itself is written last, with sorted keys."""
    manifest["files"] = {path: file_sha256(files[path]) for path in sorted(files)}
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
