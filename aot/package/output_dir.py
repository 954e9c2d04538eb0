"""Which output locations aot may write, and which existing ones it may replace.

`--force` deletes what is at -o, so it is only allowed on what aot itself wrote: a package folder
holding aot's manifest.json (or an empty folder), or a report page aot rendered. Never the
current folder, one of its parents, the home folder, the root, or a location holding the files
the command reads (the model, its external data, --inputs ...). Every refusal happens before
anything is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from aot.errors import OutputError

MANIFEST = "manifest.json"
# A manifest larger than this is not one aot wrote (they list a few dozen files).
_MANIFEST_LIMIT = 16 * 2**20
_REPORT_SNIFF = 4096


def is_aot_package(folder: Path) -> bool:
    """True when `folder` holds a manifest.json written by aot: its keys say so."""
    manifest = folder / MANIFEST
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > _MANIFEST_LIMIT:
            return False
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict):
        return False
    compiler = data.get("compiler")
    return (isinstance(compiler, dict) and compiler.get("name") == "aot" and isinstance(data.get("files"), dict)
            and isinstance(data.get("name"), str))


def is_aot_report(path: Path) -> bool:
    """True when `path` is an HTML page rendered by `aot report` (templates/report/report.html.j2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_REPORT_SNIFF)
    except OSError:
        return False
    return head.startswith(b"<!DOCTYPE html>") and b"<title>aot report: " in head


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise OutputError(f"{path}: cannot resolve the path: {e}") from e


def _protected_ancestors() -> dict[Path, str]:
    """Folders that are never replaced, with the words that say why."""
    protected: dict[Path, str] = {}
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        protected.setdefault(folder, "the current folder" if folder == cwd else "a parent of the current folder")
    home = Path.home().resolve()
    for folder in (home, *home.parents):
        protected.setdefault(folder, "the home folder" if folder == home else "a parent of the home folder")
    return protected


def _inputs_inside(target: Path, inputs: Iterable[os.PathLike[str] | str]) -> str | None:
    """The first input file at or below `target` (or whose folder is `target`), if any."""
    for item in inputs:
        path = _resolved(Path(item))
        if path == target or target in path.parents:
            return str(item)
    return None


def check_output_folder(out_dir: str | os.PathLike[str], force: bool,
                        inputs: Iterable[os.PathLike[str] | str] = ()) -> None:
    """Refuse, with one line naming the folder, any -o that writing would wrongly replace.

    `inputs` are the files the command reads; a folder holding one of them is never replaced,
    nor is the model's own folder (give the model itself among `inputs`).
    """
    target = Path(out_dir)
    if not os.path.lexists(target):
        return
    if not force:
        raise OutputError(f"{target}: already exists; choose another -o folder or pass --force to replace it")
    if target.is_symlink():
        raise OutputError(f"{target}: is a symbolic link; --force replaces only a folder aot wrote")
    if not target.is_dir():
        raise OutputError(f"{target}: exists and is not a folder; --force replaces only a folder aot wrote")
    real = _resolved(target)
    why = _protected_ancestors().get(real)
    if why is not None:
        raise OutputError(f"{target}: is {why}; --force never replaces it, choose a new -o folder")
    inside = _inputs_inside(real, inputs)
    if inside is not None:
        raise OutputError(f"{target}: holds the input {inside}; --force never replaces it, choose another -o folder")
    try:
        empty = not any(target.iterdir())
    except OSError as e:
        raise OutputError(f"{target}: cannot list the folder: {e.strerror or e}") from e
    if not empty and not is_aot_package(target):
        raise OutputError(f"{target}: not a package aot wrote (no aot {MANIFEST}); --force replaces only "
                          "those: remove it yourself or choose another -o folder")


def check_output_file(path: str | os.PathLike[str], inputs: Iterable[os.PathLike[str] | str] = (),
                      replaceable: Callable[[Path], bool] = is_aot_report, kind: str = "a report aot wrote") -> None:
    """An -o file (the report page, a quantized model) may be created, or may replace an empty
    file or one aot wrote (`replaceable` tells, `kind` says what it is); nothing else."""
    target = Path(path)
    for item in list(inputs):
        if os.path.lexists(target) and _resolved(Path(item)) == _resolved(target):
            raise OutputError(f"{target}: is the input {item}; choose another -o file")
    if not os.path.lexists(target):
        return
    if target.is_symlink():
        raise OutputError(f"{target}: is a symbolic link; choose another -o file")
    if target.is_dir():
        raise OutputError(f"{target}: is a directory")
    if not target.is_file() or (target.stat().st_size > 0 and not replaceable(target)):
        raise OutputError(f"{target}: already exists and is not {kind}; remove it yourself or "
                          "choose another -o file")
