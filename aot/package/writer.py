"""Writing a package folder atomically: all files appear at once, or none do."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from aot.errors import OutputError
from aot.package.blob import FileData, write_file_data
from aot.package.output_dir import check_output_file, check_output_folder, is_aot_report


def write_tree_atomically(files: dict[str, FileData], out_dir: str | os.PathLike[str], force: bool = False,
                          inputs: Iterable[os.PathLike[str] | str] = ()) -> Path:
    """Write `files` as the folder `out_dir`. With `force` an existing folder is replaced, but only
    one aot wrote (see aot/package/output_dir.py); `inputs` are the files the command read, which
    are never inside what is replaced. On failure nothing is left behind: no staging folder, no
    parent folder made for it."""
    target = Path(out_dir)
    inputs = list(inputs)  # checked twice below
    check_output_folder(target, force, inputs)
    parent = Path(os.path.abspath(target)).parent
    made = _make_parents(target, parent)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{_base_name(target)}.tmp-", dir=parent))
    except OSError as e:
        _remove_empty(made)
        raise OutputError(f"{target}: cannot write in {parent}: {e.strerror or e}") from e
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; give it a normal folder's mode
        for rel, data in sorted(files.items()):
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file_data(path, data)
        # Checked again just before replacing: the folder may have changed during a long compile.
        check_output_folder(target, force, inputs)
        if os.path.lexists(target):
            _replace(staging, target, parent)
        else:
            os.rename(staging, target)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        raise OutputError(f"{target}: cannot write package: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        raise
    return target


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _base_name(target: Path) -> str:
    return Path(os.path.abspath(target)).name or "out"


def _make_parents(target: Path, parent: Path) -> list[Path]:
    """Like `mkdir -p` (-o build/model just works); returns the folders made, outermost last."""
    missing = []
    folder = parent
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    try:
        for folder in reversed(missing):
            folder.mkdir()
    except OSError as e:
        _remove_empty(missing)
        raise OutputError(f"{target}: cannot create its parent folder {parent}: {e.strerror or e}") from e
    if not parent.is_dir():
        raise OutputError(f"{target}: parent {parent} is not a folder")
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # innermost first
        with contextlib.suppress(OSError):
            folder.rmdir()


def _replace(staging: Path, target: Path, parent: Path) -> None:
    """Swap the staged folder in for the existing package; the old one goes last."""
    old = Path(tempfile.mkdtemp(prefix=f".{_base_name(target)}.old-", dir=parent))
    try:
        os.rename(target, old / "pkg")
    except OSError:
        old.rmdir()
        raise
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(old / "pkg", target)  # put the old package back: a failed write changes nothing
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_file_atomically(path: str | os.PathLike[str], data: bytes,
                          inputs: Iterable[os.PathLike[str] | str] = (),
                          replaceable: Callable[[Path], bool] = is_aot_report,
                          kind: str = "a report aot wrote") -> Path:
    """Write a single file through a temporary sibling and a rename; an existing file is replaced
    only when aot wrote it (see check_output_file: `replaceable` tells, `kind` names what it is)."""
    target = Path(path)
    check_output_file(target, inputs, replaceable, kind)
    parent = Path(os.path.abspath(target)).parent
    if not parent.is_dir():
        raise OutputError(f"{target}: parent folder does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{_base_name(target)}.", dir=parent)
    except OSError as e:
        raise OutputError(f"{target}: cannot write in {parent}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; give it a normal file's mode
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from e
    return target
