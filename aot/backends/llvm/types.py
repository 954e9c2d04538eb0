"""Kernel-IR dtypes as LLVM types, with C's value semantics.

The LLVM backend must compute exactly what the C backend's output computes, so expressions follow
C's rules rather than a "natural" LLVM typing:

* Every dtype has a *storage* type (what a buffer element or a local variable holds: i8 for
  uint8/int8/bool, i16, i32, i64, float, double) and a *value* type (what an expression of that
  dtype evaluates to in C). Integer types narrower than int are promoted to int before any
  arithmetic or comparison, so their value type is i32; everything else keeps its storage type.
* Promotion sign- or zero-extends according to the storage type (int8_t -> sext, uint8_t -> zext),
  and the promoted value is a *signed* int, so `uint8 - uint8` is signed arithmetic in C and here.
  Only uint32 and uint64 values are unsigned (division, remainder, comparisons, conversions).
* Storing into a narrower variable or buffer truncates (modulo 2^n), like the C assignment.
* C comparisons and logical operators yield int 0/1, so bool-valued expressions are i32 as well;
  `condition()` in the kernel emitter turns them into i1 where a branch or select needs one.
"""

from __future__ import annotations

from llvmlite import ir

from aot.kernel.ir import INDEX, VECTOR_DTYPES

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_STORAGE: dict[str, ir.Type] = {
    "float32": F32, "float64": F64,
    "int8": I8, "uint8": I8, "bool": I8,
    "int16": I16, "uint16": I16,
    "int32": I32, "uint32": I32, INDEX: I32,
    "int64": I64, "uint64": I64,
}
_BITS = {"int8": 8, "uint8": 8, "bool": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, INDEX: 32,
         "int64": 64, "uint64": 64}
# Narrow types whose storage is zero-extended on promotion (the rest of the narrow ones sign-extend).
_ZERO_EXTENDED = {"uint8", "uint16", "bool"}
_NARROW = {"int8", "uint8", "bool", "int16", "uint16"}
_UNSIGNED_VALUES = {"uint32", "uint64"}


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")


def storage_type(dtype: str) -> ir.Type:
    """The LLVM type of one buffer element or local variable of `dtype` (its C type)."""
    if dtype in VECTOR_DTYPES:
        element, lanes = VECTOR_DTYPES[dtype]
        return ir.VectorType(storage_type(element), lanes)
    try:
        return _STORAGE[dtype]
    except KeyError:
        raise TypeError(f"the LLVM backend has no type for dtype {dtype!r}") from None


def value_type(dtype: str) -> ir.Type:
    """The LLVM type of an expression of `dtype` after C's integer promotions."""
    return I32 if dtype in _NARROW else storage_type(dtype)


def is_narrow(dtype: str) -> bool:
    """Stored narrower than int, so promoted (extended) on every read."""
    return dtype in _NARROW


def zero_extends(dtype: str) -> bool:
    return dtype in _ZERO_EXTENDED


def unsigned_value(dtype: str) -> bool:
    """Whether C treats a *value* of this dtype (after promotion) as unsigned."""
    return dtype in _UNSIGNED_VALUES


def unsigned_storage(dtype: str) -> bool:
    """Whether the C type that stores this dtype is unsigned (uint8_t for bool)."""
    return dtype in _ZERO_EXTENDED or dtype in _UNSIGNED_VALUES


def bits(dtype: str) -> int:
    return _BITS[dtype]


def itemsize(dtype: str) -> int:
    if is_float(dtype):
        return 4 if dtype == "float32" else 8
    return _BITS[dtype] // 8


def int_constant(value: int, typ: ir.IntType) -> ir.Constant:
    """An integer constant from a Python int that may be given as unsigned (uint64 max etc.)."""
    width = typ.width
    value &= (1 << width) - 1
    if value >= 1 << (width - 1):
        value -= 1 << width
    return ir.Constant(typ, value)
