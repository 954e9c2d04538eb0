"""Writing a package folder atomically: all files appear at once, or none do."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from aot.errors import OutputError
from aot.package.blob import FileData, write_file_data


def write_tree_atomically(files: dict[str, FileData], out_dir: str | os.PathLike[str], force: bool = False) -> Path:
    target = Path(out_dir)
    if target.exists() and not force:
        raise OutputError(f"{target}: already exists; choose another -o folder or pass --force to replace it")
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target}: exists and is not a folder")
    parent = target.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)  # like `mkdir -p`: -o build/model just works
    except OSError as e:
        raise OutputError(f"{target}: cannot create its parent folder {parent}: {e.strerror or e}") from e
    if not parent.is_dir():
        raise OutputError(f"{target}: parent {parent} is not a folder")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    except OSError as e:
        raise OutputError(f"{target}: cannot write in {parent}: {e.strerror}") from e
    try:
        for rel, data in sorted(files.items()):
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file_data(path, data)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
            os.rename(target, old / "pkg")
            os.rename(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, target)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"{target}: cannot write package: {e.strerror or e}") from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def write_file_atomically(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write a single file through a temporary sibling and a rename."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"{target}: is a directory")
    if not target.resolve().parent.is_dir():
        raise OutputError(f"{target}: parent folder does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.resolve().parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; give it a normal file's mode
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from e
    return target
