"""Reading the .npz archives a user gives (verify --inputs / --expected) without trusting them.

An .npz is a zip of .npy members, and a zip member can inflate a thousandfold (a 2 MB file grew
to 2.1 GB before its shape was checked). So every member's .npy header is read first, from the
zip stream, and its shape and dtype checked against what the model takes, together with the
member's declared size; only then is any array data read. Pickled objects are never loaded.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

from aot.errors import VerifyError

# numpy's own default bound on a .npy header
MAX_HEADER_BYTES = 10000
# A user's archive with more members than this is not a model's inputs.
MAX_MEMBERS = 4096


@dataclass(frozen=True)
class Member:
    key: str
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran_order: bool
    data_offset: int


def load_npz(path: str | os.PathLike[str], what: str, specs: Sequence[Mapping[str, Any]] | None = None,
             role: str = "input", exact_dtype: bool = True, samples: bool = False,
             max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path` (`what` names the option, e.g. --inputs). With `specs`
    (the model's inputs or outputs: `role`) arrays are keyed by ONNX name (numpy's arr_0, arr_1 ...
    mean model order) and each one's shape, and with `exact_dtype` its dtype, is checked from its
    header before its data is read. With `samples` each array stacks several values on a first
    axis of any length (one sample per run, as --calibration holds them), each of the spec's
    shape; as their count is not the model's to bound, `max_bytes` bounds the arrays' total size.
    Without `specs` nothing bounds the arrays' sizes but the archive's own declarations."""
    p = Path(path)
    where = f"{what} {p}"
    if specs is not None and len(specs) == 1 and not samples and _is_npy(p):
        return {str(specs[0]["name"]): _load_npy(p, where, specs[0], role, exact_dtype)}
    _check_is_zip(p, where)
    try:
        with zipfile.ZipFile(p) as archive:
            members = _read_headers(archive, where)
            if specs is not None:
                members = _match(members, specs, where, role)
                by_name = {str(s["name"]): s for s in specs}
                for key, member in members.items():
                    _check_against(member, by_name[key], where, role, exact_dtype, samples)
            if max_bytes is not None:
                _check_total(members, where, max_bytes)
            return {key: _read_data(archive, member, where) for key, member in members.items()}
    except VerifyError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, EOFError, ValueError) as e:
        raise VerifyError(f"{where}: not a readable .npz file ({e})") from e


def _is_npy(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(6) == b"\x93NUMPY"
    except OSError:
        return False  # _check_is_zip names the problem


def _load_npy(p: Path, where: str, spec: Mapping[str, Any], role: str, exact_dtype: bool) -> np.ndarray:
    """A one-input model's array from an .npy file, checked from its header before its data is read."""
    try:
        with open(p, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            info = zipfile.ZipInfo(p.name)
            info.file_size = p.stat().st_size
            member = Member(str(spec["name"]), info, shape, dtype, fortran, f.tell())
            _check_against(member, spec, where, role, exact_dtype)
            nbytes = _data_bytes(member)
            if info.file_size != member.data_offset + nbytes:
                raise VerifyError(f"{where}: holds {info.file_size - member.data_offset} bytes of data, its shape "
                                  f"{list(shape)} and dtype {dtype} need {nbytes}")
            raw = np.fromfile(f, dtype=np.uint8, count=nbytes)
    except (ValueError, EOFError, OSError, SyntaxError) as e:
        raise VerifyError(f"{where}: not a readable .npy file ({e})") from e
    return raw.view(dtype).reshape(shape, order="F" if fortran else "C")


def array_shapes(path: str | os.PathLike[str], what: str, names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The shape of each array of an .npz (or, for one name, an .npy), by model input name, read
    from the headers alone."""
    p = Path(path)
    where = f"{what} {p}"
    if len(names) == 1 and _is_npy(p):
        try:
            with open(p, "rb") as f:
                return {names[0]: read_npy_header(f)[0]}
        except (ValueError, EOFError, OSError, SyntaxError) as e:
            raise VerifyError(f"{where}: not a readable .npy file ({e})") from e
    _check_is_zip(p, where)
    try:
        with zipfile.ZipFile(p) as archive:
            members = _match(_read_headers(archive, where), [{"name": n} for n in names], where, "input")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, EOFError, ValueError) as e:
        raise VerifyError(f"{where}: not a readable .npz file ({e})") from e
    return {key: member.shape for key, member in members.items()}


def _check_is_zip(p: Path, where: str) -> None:
    if not p.is_file():
        raise VerifyError(f"{where}: no such file" if not p.exists() else f"{where}: not a regular file")
    try:
        with open(p, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise VerifyError(f"{where}: cannot read: {e.strerror or e}") from e
    if head == b"\x93NUMPY":
        raise VerifyError(f"{where}: is an .npy file (one array, for a one-input model); give an .npz archive "
                          "of named arrays, written with np.savez(path, name=array, ...)")
    if not zipfile.is_zipfile(p):
        raise VerifyError(f"{where}: not an .npz file (expected a zip archive of .npy arrays from np.savez)")


def _read_headers(archive: zipfile.ZipFile, where: str) -> dict[str, Member]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise VerifyError(f"{where}: {len(infos)} members, more than {MAX_MEMBERS}: not a model's arrays")
    members: dict[str, Member] = {}
    for info in infos:
        if info.is_dir():
            continue
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if key in members:
            raise VerifyError(f"{where}: array {key!r} appears twice")
        with archive.open(info) as stream:
            members[key] = _header(stream, info, key, where)
    return members


def read_npy_header(stream: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype from an .npy header, read within MAX_HEADER_BYTES; the stream
    is left at the first data byte. ValueError/EOFError/SyntaxError when it is not one."""
    version = npy_format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = npy_format.read_array_header_1_0(stream, max_header_size=MAX_HEADER_BYTES)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = npy_format.read_array_header_2_0(stream, max_header_size=MAX_HEADER_BYTES)
    else:
        raise ValueError(f"unknown .npy version {version}")
    return tuple(int(d) for d in shape), bool(fortran), np.dtype(dtype)


def _header(stream: IO[bytes], info: zipfile.ZipInfo, key: str, where: str) -> Member:
    try:
        shape, fortran, dtype = read_npy_header(stream)
    except (ValueError, EOFError, OSError, SyntaxError) as e:
        raise VerifyError(f"{where}: member {info.filename!r} is not a readable .npy array ({e})") from e
    return Member(key, info, shape, dtype, fortran, stream.tell())


def _match(members: dict[str, Member], specs: Sequence[Mapping[str, Any]], where: str,
           role: str) -> dict[str, Member]:
    """Keys are the ONNX names; numpy's default keys arr_0, arr_1 ... mean model order."""
    names = [str(s["name"]) for s in specs]
    if set(members) <= set(names):
        return members
    keys = list(members)
    if all(k == f"arr_{i}" for i, k in enumerate(keys)) and len(keys) <= len(names):
        return {names[i]: members[f"arr_{i}"] for i in range(len(keys))}
    unknown = sorted(set(members) - set(names))
    raise VerifyError(f"{where}: arrays {unknown} name no model {role}s (expected {names})")


def _check_against(member: Member, spec: Mapping[str, Any], where: str, role: str, exact_dtype: bool,
                   samples: bool = False) -> None:
    name, want_shape, want_dtype = spec["name"], list(spec["shape"]), np.dtype(spec["dtype"])
    if member.dtype.hasobject or member.dtype.kind not in "biuf":
        raise VerifyError(f"{where}: array {member.key!r} has dtype {_dtype_text(member.dtype)}; {role} {name!r} "
                          f"needs {want_dtype} numbers")
    if samples:
        _check_samples(member, name, want_shape, where, role)
    elif list(member.shape) != want_shape:
        raise VerifyError(f"{where}: {role} {name!r}: shape {list(member.shape)}, the model needs {want_shape}")
    if exact_dtype and member.dtype != want_dtype:
        raise VerifyError(f"{where}: {role} {name!r}: dtype {member.dtype}, the model needs {want_dtype}")


def _check_samples(member: Member, name: str, want_shape: list[int], where: str, role: str) -> None:
    """An array of samples: [count, *want_shape], count >= 1."""
    shape = list(member.shape)
    if not shape or shape[1:] != want_shape:
        needed = ", ".join(["samples", *map(str, want_shape)])
        raise VerifyError(f"{where}: {role} {name!r}: shape {shape}; the first axis counts the samples (one run "
                          f"each), so the model needs [{needed}]")
    if shape[0] == 0:
        raise VerifyError(f"{where}: {role} {name!r}: holds no samples (its first axis is 0)")


def _check_total(members: dict[str, Member], where: str, max_bytes: int) -> None:
    total = sum(_data_bytes(m) for m in members.values())
    if total > max_bytes:
        raise VerifyError(f"{where}: its arrays take {total} bytes, more than the {max_bytes} read at most; "
                          "give fewer samples")


def _data_bytes(member: Member) -> int:
    count = 1
    for d in member.shape:
        count *= d
    return count * member.dtype.itemsize


def _dtype_text(dtype: np.dtype[Any]) -> str:
    if dtype.hasobject:
        return "object (Python objects)"
    if dtype.kind in "SU":
        return f"{dtype} (strings)"
    return str(dtype)


def _read_data(archive: zipfile.ZipFile, member: Member, where: str) -> np.ndarray:
    if member.dtype.hasobject:
        raise VerifyError(f"{where}: array {member.key!r} holds Python objects, which are never loaded")
    nbytes = _data_bytes(member)
    if member.info.file_size != member.data_offset + nbytes:
        raise VerifyError(f"{where}: array {member.key!r} holds {member.info.file_size - member.data_offset} bytes "
                          f"of data, its shape {list(member.shape)} and dtype {member.dtype} need {nbytes}")
    raw = np.empty(nbytes, dtype=np.uint8)  # read straight into the array: no second copy
    view = memoryview(raw)
    filled = 0
    with archive.open(member.info) as stream:
        stream.seek(member.data_offset)
        while filled < nbytes:
            got = stream.readinto(view[filled:])
            if not got:
                raise VerifyError(f"{where}: array {member.key!r} is truncated ({filled} of {nbytes} bytes)")
            filled += got
    order = "F" if member.fortran_order else "C"
    return raw.view(member.dtype).reshape(member.shape, order=order)
