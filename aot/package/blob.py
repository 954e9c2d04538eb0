"""The raw image of the `<name>_weights` object, as a package file that is streamed, never joined.

A package's files are normally bytes in memory; the binary weights of a big model (VGG-19: 575 MB)
are instead a `WeightsBlob` that writes the tensors' own numpy buffers to the file and hashes them
in place, so no copy of the weights is ever made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

# Writing and hashing go through the tensors in slices of this many bytes at most.
_CHUNK = 1 << 22


class WeightsBlob:
    """`size` bytes: each array at its byte offset (little-endian, C order), zeros elsewhere.

    Little-endian because every target aot supports is (big-endian targets are not supported),
    whatever the byte order of the machine compiling.
    """

    def __init__(self, parts: Sequence[tuple[int, np.ndarray]], size: int) -> None:
        end = 0
        for offset, array in parts:
            if offset < end:
                raise ValueError(f"weights blob: part at offset {offset} overlaps the previous one (ends at {end})")
            end = offset + array.nbytes
        if end > size:
            raise ValueError(f"weights blob: parts end at {end}, past its size {size}")
        self.parts = [(offset, _little_endian_bytes(array)) for offset, array in parts]
        self.size = size
        self._digest: str | None = None

    def __len__(self) -> int:
        return self.size

    def chunks(self) -> Iterator[memoryview | bytes]:
        """The content in order, as views of the arrays and runs of zero bytes."""
        position = 0
        for offset, data in self.parts:
            if offset > position:
                yield bytes(offset - position)
            for start in range(0, len(data), _CHUNK):
                yield data[start:start + _CHUNK]
            position = offset + len(data)
        if self.size > position:
            yield bytes(self.size - position)

    def write_to(self, f: BinaryIO) -> None:
        for chunk in self.chunks():
            f.write(chunk)

    def sha256(self) -> str:
        if self._digest is None:
            h = hashlib.sha256()
            for chunk in self.chunks():
                h.update(chunk)
            self._digest = h.hexdigest()
        return self._digest

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WeightsBlob):
            return self.size == other.size and self.sha256() == other.sha256()
        if isinstance(other, (bytes, bytearray, memoryview)):
            return self.size == len(other) and self.sha256() == hashlib.sha256(other).hexdigest()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking value type: compared, never hashed

    def __repr__(self) -> str:
        return f"WeightsBlob({self.size} bytes, {len(self.parts)} parts)"


FileData = bytes | WeightsBlob


def _little_endian_bytes(array: np.ndarray) -> memoryview:
    """The array's bytes, little-endian and C-ordered, without a copy when it already is."""
    dtype = array.dtype.newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
    flat = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
    return memoryview(flat.view(np.uint8))


def file_sha256(data: FileData) -> str:
    if isinstance(data, WeightsBlob):
        return data.sha256()
    return hashlib.sha256(data).hexdigest()


def write_file_data(path: Path, data: FileData) -> None:
    if isinstance(data, WeightsBlob):
        with open(path, "wb") as f:
            data.write_to(f)
    else:
        path.write_bytes(data)
