"""Backends print the kernel IR: `c` as C99 source, `llvm` as object files (via llvmlite)."""
