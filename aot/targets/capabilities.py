"""What a target's CPU can do, derived once from its preset: the one record code generation reads.

Lowerings and form choosers ask this record (through the lowering's TileConfig,
aot/lowering/tiles.py) whether the CPU multiplies by a lane, which int8 dot-product step it has,
whether its compilers vectorise plain float loops; they never look at an architecture's name.
Only this module and the backends' instruction selection know which ISA gives which answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from aot.targets.presets import Target

# The L2 cache per core assumed where a preset does not give `l2_cache_bytes`: 512-bit vector
# cores (Skylake-SP, Ice Lake, Zen 4) have 1 MiB or more, the others 512 KiB or less.
WIDE_CORE_L2_BYTES = 1024 * 1024
CORE_L2_BYTES = 512 * 1024


@dataclass(frozen=True)
class Int8Dot:
    """The int8 dot-product step of a target's vector unit (targets/*.toml `int8_dot`,
    aot/targets/fields.py INT8_DOTS), by what the kernels built on it need to know. "auto": a
    package for targets with different steps, each picked by its C compiler's flags."""

    kind: str = "auto"

    @property
    def vectorised(self) -> bool:
        """Whether the int8 tiles run on vectors (else the plain integer loops)."""
        return self.kind != "portable"

    @property
    def chosen(self) -> bool:
        """Whether one step, known when compiling, serves every target of the package."""
        return self.kind not in ("portable", "auto")

    @property
    def signed_bytes(self) -> bool:
        """Whether the step multiplies signed bytes by signed bytes (else unsigned by signed)."""
        return self.kind in ("sdot", "neon")

    @property
    def unsigned_by_signed(self) -> bool:
        """Whether the step multiplies unsigned bytes by signed ones (a uint8 operand)."""
        return self.kind in ("vpdpbusd", "vpmaddwd")

    @property
    def one_instruction(self) -> bool:
        """Whether each step is one instruction, needing no registers for partial products."""
        return self.kind in ("vpdpbusd", "sdot")

    @property
    def pairwise(self) -> bool:
        """Whether the step sums two 16-bit products per lane with widening pairwise adds
        (PairDotAdd): it takes its operands in pair order, and weights of -128 overflow it."""
        return self.kind == "neon"

    @property
    def signed_when_pairs_fit(self) -> bool:
        """Whether the step reads signed bytes when the weights fit int8 pairs (its exact
        sequence of 16-bit products then needs no unsigned operand)."""
        return self.kind in ("neon", "vpmaddwd")

    @property
    def by_lane(self) -> bool:
        """Whether the step may take one 4-byte lane of a register as its broadcast operand."""
        return self.kind == "sdot"

    def int32_lanes(self, float_lanes: int) -> int:
        """int32 accumulators per vector of the tiles: the 4 of a 128-bit step, else the float
        lanes with at least 8 (a package for no particular target)."""
        return 4 if self.signed_bytes else max(8, float_lanes)


@dataclass(frozen=True)
class Capabilities:
    """What code generation may assume of every CPU a package is for."""

    vector_bits: int = 256                 # float vector registers' width (0: scalar code)
    vector_registers: int = 16
    # The vector multiply-add takes one lane of a register as a factor (NEON's by-element forms).
    multiply_by_lane: bool = False
    # That multiply-add rounds once (aarch64's fmla by element); armv7's vmla by scalar rounds
    # after the product, so its tiles take a different shape (TileConfig.by_scalar).
    lane_multiply_fused: bool = True
    # The C compilers vectorise plain float loops by themselves: not on 32-bit NEON, which flushes
    # denormals, so gcc and LLVM need unsafe-math flags to use it for floats.
    compilers_vectorise_floats: bool = True
    int8_dot: Int8Dot = field(default_factory=Int8Dot)
    fp16_arithmetic: bool = False          # vector float16 arithmetic (ARMv8.2 fullfp16)
    l2_bytes: int = CORE_L2_BYTES          # L2 cache per core, for blocking

    @property
    def float_lanes(self) -> int:
        return self.vector_bits // 32 if self.vector_bits else 1


@dataclass(frozen=True)
class InstructionSet:
    """A target's instruction-set family and the extensions instruction selection picks by
    (the LLVM backend's kernel emitter, the toolchain); not for lowerings."""

    family: str              # "x86", "arm" (32-bit Arm and Thumb), "aarch64", "riscv", "other"
    neon: bool = False       # Advanced SIMD
    dot_product: bool = False    # aarch64 sdot/udot (+dotprod)
    avx2: bool = False
    fp_armv8: bool = False   # 32-bit Arm's ARMv8 float instructions (vrint*: lanes rounded in one)
    vector: bool = False     # RISC-V V 1.0


def instruction_set(arch: str, features: str) -> InstructionSet:
    """The family and extensions of an architecture (a triple's first part) with `features`."""
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    if arch in ("x86_64", "i686", "i386"):
        family = "x86"
    elif arch == "aarch64":
        family = "aarch64"
    elif arch.startswith(("arm", "thumb")):
        family = "arm"
    elif arch.startswith("riscv"):
        family = "riscv"
    else:
        family = "other"
    return InstructionSet(family, neon=family in ("arm", "aarch64") and "neon" in enabled,
                          dot_product=family == "aarch64" and "dotprod" in enabled,
                          avx2=family == "x86" and "avx2" in enabled,
                          fp_armv8=family == "arm" and "fp-armv8" in enabled,
                          vector=family == "riscv" and "v" in enabled)


def capabilities(target: Target) -> Capabilities:
    """The record of one target, from its preset's fields and instruction-set extensions."""
    isa = instruction_set(target.arch, target.features)
    neon_128 = isa.neon and target.vector_bits == 128
    enabled = {f[1:] for f in target.features.split(",") if f.startswith("+")}
    default_l2 = WIDE_CORE_L2_BYTES if target.vector_bits >= 512 else CORE_L2_BYTES
    return Capabilities(
        vector_bits=target.vector_bits, vector_registers=target.vector_registers,
        multiply_by_lane=neon_128 and isa.family in ("aarch64", "arm"),
        lane_multiply_fused=isa.family != "arm",
        compilers_vectorise_floats=not (isa.family == "arm" and isa.neon),
        int8_dot=Int8Dot(target.int8_dot),
        fp16_arithmetic=isa.family == "aarch64" and "fullfp16" in enabled,
        l2_bytes=target.l2_cache_bytes or default_l2)


def common_capabilities(targets: Sequence[Target]) -> Capabilities:
    """What every one of `targets` can do (one C source serves them all): the narrowest vectors
    and fewest registers, a property only where all have it, the int8 step they share (else
    "auto", each target's own picked by its compiler flags, or the plain loops where one has
    no vector step)."""
    records = [capabilities(t) for t in targets]
    kinds = {r.int8_dot.kind for r in records}
    kind = kinds.pop() if len(kinds) == 1 else "portable" if "portable" in kinds else "auto"
    return Capabilities(
        vector_bits=min(r.vector_bits for r in records),
        vector_registers=min(r.vector_registers for r in records),
        multiply_by_lane=all(r.multiply_by_lane for r in records),
        lane_multiply_fused=all(r.lane_multiply_fused for r in records),
        compilers_vectorise_floats=all(r.compilers_vectorise_floats for r in records),
        int8_dot=Int8Dot(kind),
        fp16_arithmetic=all(r.fp16_arithmetic for r in records),
        l2_bytes=min(r.l2_bytes for r in records))
