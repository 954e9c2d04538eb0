"""The packed weights of weight-only matrix products (aot/ops/quantized/weight_only.py).

Two sources give a float product int4/int8 weights: com.microsoft MatMulNBits (B as
[N, n_blocks, blob] bytes, two 4-bit values a byte, low nibble first) and a DequantizeLinear of a
constant int4/uint4/int8/uint8 weight read by MatMul or Gemm. Both become one form, MatMulNBits'
meaning: unsigned codes u in [0, 2^bits), and per block of `block` rows of K and per column a
scale s and a zero point z, the weight being (u - z) * s. Signed codes are shifted by 2^(bits-1),
their zero points too, which keeps every value exact.

The kernel reads `PackedWeight`: the codes as [K][N] bytes (4-bit: [ceil(K/2)][N], row 2p in the
low nibble and 2p + 1 in the high one) so that its innermost loop along N reads them in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PackedWeight:
    bits: int
    block: int  # rows of K sharing one scale (and zero point)
    k: int
    n: int
    codes: np.ndarray  # uint8, see the module comment
    scales: np.ndarray  # float32 [n_blocks, N]
    zero: np.ndarray | float  # uint8 or float32 [n_blocks, N], or one value for all

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block)

    def stored_bytes(self) -> int:
        zero = self.zero.nbytes if isinstance(self.zero, np.ndarray) else 0
        return self.codes.nbytes + self.scales.nbytes + zero


def pack(unsigned: np.ndarray, bits: int, block: int, scales: np.ndarray,
         zero: np.ndarray | None) -> PackedWeight:
    """PackedWeight of codes [K, N] in [0, 2^bits), scales and zero points [n_blocks, N]
    (zero None: 2^(bits-1), MatMulNBits' default)."""
    k, n = unsigned.shape
    codes = unsigned.astype(np.uint8)
    if bits == 4:
        if k % 2:
            codes = np.concatenate([codes, np.zeros((1, n), np.uint8)])
        codes = (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)
    if zero is None:
        zero_value: np.ndarray | float = float(1 << (bits - 1))
    elif zero.size and np.all(zero == zero.reshape(-1)[0]):
        zero_value = float(zero.reshape(-1)[0])  # one zero point for all: a constant in the kernel
    else:
        zero_value = np.ascontiguousarray(zero.astype(np.uint8 if zero.dtype.kind in "iu" else np.float32))
    return PackedWeight(bits, block, k, n, np.ascontiguousarray(codes),
                        np.ascontiguousarray(scales.astype(np.float32)), zero_value)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """Bytes [..., m] holding two 4-bit values each, low nibble first, as [..., 2m] values."""
    out = np.empty((*packed.shape[:-1], packed.shape[-1] * 2), np.uint8)
    out[..., 0::2] = packed & 0x0F
    out[..., 1::2] = packed >> 4
    return out


def pack_nibbles(values: np.ndarray) -> np.ndarray:
    """Values [..., m] below 16 as bytes of two, low nibble first (an odd m padded with a zero)."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros((*values.shape[:-1], 1), values.dtype)], axis=-1)
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def from_matmul_nbits(b: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, *, k: int, n: int, bits: int,
                      block: int) -> PackedWeight:
    """MatMulNBits' B [N, n_blocks, blob], scales [N * n_blocks] and zero points (uint8, 4-bit
    packed two a byte along the blocks of a column, or of the scales' float type)."""
    blocks = -(-k // block)
    flat = b.reshape(n, -1)
    codes = (unpack_nibbles(flat) if bits == 4 else flat)[:, :k]
    scale = scales.reshape(n, blocks).T
    zero_kn = None
    if zero is not None:
        if zero.dtype == np.uint8:
            columns = zero.reshape(n, -1)
            zero_kn = (unpack_nibbles(columns) if bits == 4 else columns)[:, :blocks].T
        else:
            zero_kn = zero.reshape(n, blocks).T.astype(np.float32)
    return pack(codes.T, bits, block, scale, zero_kn)


def matmul_nbits_arrays(codes: np.ndarray, scales: np.ndarray, zero: np.ndarray | None, *, bits: int,
                        block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """MatMulNBits' (B, scales, zero_points) of unsigned codes [K, N], scales and uint8 zero
    points [n_blocks, N] (K padded to whole blocks with code z, which the products never read)."""
    k, n = codes.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), np.uint8)
    padded[:k] = codes
    rows = padded.T.reshape(n, blocks, block)
    b = pack_nibbles(rows) if bits == 4 else rows
    zero_points = None
    if zero is not None:
        columns = zero.T.astype(np.uint8)
        zero_points = (pack_nibbles(columns) if bits == 4 else columns).reshape(-1)
    return np.ascontiguousarray(b), np.ascontiguousarray(scales.T.reshape(-1).astype(np.float32)), zero_points
