"""The shape of register tiles (aot/ops/contraction/register_tiles.py) for a target's vector registers.

A lowering parameter like the target itself: the compiler derives it from the --target presets
(vector_bits, vector_registers) and the Conv/Gemm/MatMul lowerings read it from the context.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from aot.targets.capabilities import CORE_L2_BYTES, Capabilities, Int8Dot

# The reduction steps from which a register-tight tile loops over its taps (steps_in_a_loop).
LOOPED_STEPS_FROM = 32
# The int8 step of a package for no particular target: each compiler's flags pick it.
AUTO_INT8_DOT = Int8Dot("auto")


@dataclass(frozen=True)
class TileConfig:
    """Register tiles sized for a target's vector registers, with what else of the target's
    capabilities record (aot/targets/capabilities.py) the lowerings read."""

    lanes: int = 8           # float32 lanes per vector register
    accumulators: int = 12   # vector accumulators a tile may keep live
    # The int8 tiles' dot-product step; "auto" (a package for no particular target) uses the
    # tiles with the instruction the C compiler's flags allow (runtime_c/aot_kernels.h).
    int8_dot: Int8Dot = AUTO_INT8_DOT
    registers: int = 16      # the target's vector registers
    # Whether the target multiplies by one lane of a vector register in its multiply-add: a
    # tile's broadcast operands, four consecutive floats, are then one vector load instead of
    # four (register_tiles.py). x86 broadcasts from memory for free.
    lane_broadcasts: bool = False
    # Whether that multiply by lane is fused (Capabilities.lane_multiply_fused).
    lane_multiply_fused: bool = True
    # Whether the target's compilers vectorise plain float loops (Capabilities.compilers_vectorise_floats).
    compilers_vectorise_floats: bool = True
    # Whether the code's compiler vectorises the kernels' plain float loops (transforms, copies)
    # by itself: gcc does on aarch64; LLVM (the llvm backend) left Winograd's output transform,
    # whose vectors zip into pairs of output columns, scalar (loops_in_vectors).
    vectorises_loops: bool = True
    l2_bytes: int = CORE_L2_BYTES  # L2 cache per core

    @classmethod
    def for_registers(cls, vector_bits: int, registers: int, int8_dot: Int8Dot = AUTO_INT8_DOT,
                      lane_broadcasts: bool = False, vectorises_loops: bool = True) -> TileConfig:
        # A quarter of the registers stays free for the operand vectors, the broadcasts and the
        # compiler's own use (measured: 24 of AVX-512's 32 beat 16 and 28 on SqueezeNet).
        return cls(lanes=vector_bits // 32 if vector_bits else 1, accumulators=max(4, registers * 3 // 4),
                   int8_dot=int8_dot, registers=registers, lane_broadcasts=lane_broadcasts,
                   vectorises_loops=vectorises_loops)

    @classmethod
    def for_capabilities(cls, caps: Capabilities, backend: str = "c") -> TileConfig:
        """The tiles of a capabilities record, for the C backend (compiled by gcc or clang) or
        the llvm backend, which vectorises fewer plain loops by itself than gcc."""
        return replace(cls.for_registers(caps.vector_bits, caps.vector_registers, caps.int8_dot,
                                         lane_broadcasts=caps.multiply_by_lane, vectorises_loops=backend != "llvm"),
                       lane_multiply_fused=caps.lane_multiply_fused,
                       compilers_vectorise_floats=caps.compilers_vectorise_floats, l2_bytes=caps.l2_bytes)

    @property
    def cols(self) -> int:
        """Outputs along the contiguous axis per tile: at least 16, two vectors on wide targets;
        two vectors where the tiles multiply by an unfused lane (by_scalar)."""
        return 2 * self.lanes if self.by_scalar else max(16, 2 * self.lanes)

    @property
    def by_scalar(self) -> bool:
        """armv7 NEON (16 registers of 4 floats) with broadcasts by lane: its multiply-accumulate
        by a lane (`vmla.f32 q, q, d[i]`, rounded after the product, not fused) lets a tile of
        4 rows x 2 vectors load 3 operands per 8 multiply-adds, where 2 rows x 4 vectors with
        broadcasts loaded 6 (a hand-written loop of each: 11 instructions against 14 per 8)."""
        return self.lane_broadcasts and not self.lane_multiply_fused

    @property
    def loops_in_vectors(self) -> int:
        """Lanes in which a kernel writes out the plain float loops (transforms, copies) that
        compilers vectorise by themselves elsewhere (1: left to them): armv7 NEON, where gcc
        vectorises no float loop without -funsafe-math-optimizations (NEON flushes denormals)
        and LLVM none without fast-math flags, so Winograd's transforms would run as scalar VFP
        instructions. On aarch64 too where the compiler leaves them scalar (vectorises_loops: the
        llvm backend), not for gcc, whose own vectors run fewer instructions
        (`python -m benchmarks.arm` shows both)."""
        if self.lane_broadcasts and not (self.compilers_vectorise_floats and self.vectorises_loops):
            return self.lanes
        return 1

    @property
    def lanes_across_steps(self) -> bool:
        """Whether a tile's written-out reduction steps share the vectors their broadcasts are
        lanes of: a conv's kernel row, whose taps' pixels are one run of consecutive floats (a
        5x5 conv's 2 pixels x 5 taps: 2 vector loads for 10 broadcasts). Not with gcc on aarch64,
        whose scheduling of long multiply-add bodies before register allocation hoists the shared
        loads and spills its 6-row tiles (`python -m benchmarks.arm` on MNIST shows both)."""
        return self.lane_broadcasts and (self.by_scalar or not self.vectorises_loops)

    @property
    def wide_cols(self) -> int:
        """`cols` for the tiles of long reductions (pointwise, rows and Winograd convolutions,
        pixel_tiles.WIDE_TILE_REDUCTION): three vectors on 512-bit targets, where 8 rows of 3
        vectors load 11 operands per 24 multiply-adds where 12 rows of 2 load 14 (`python -m
        benchmarks.layers` on ResNet-50 shows the convolutions' time). Elsewhere `cols`."""
        return 3 * self.lanes if self.lanes >= 16 else self.cols

    def one_by_one(self) -> TileConfig:
        """These tiles for broadcast operands that are not consecutive floats (a matrix's rows
        K apart, pixels across an image's rows): armv7's by-lane shape does not pay there, so
        it keeps its broadcast tiles (4 x 8 by lane ran more instructions on MNIST's 5x5 conv in
        channel tiles, `python -m benchmarks.arm`)."""
        return replace(self, lane_broadcasts=False) if self.by_scalar else self

    def steps_in_a_loop(self, rows: int, cols: int, steps: int) -> bool:
        """Whether a tile of `rows` x `cols` runs its reduction steps (a convolution's taps) as a
        loop over a table of operand offsets rather than written out: where its accumulators,
        one step's operand vectors and a broadcast leave fewer than two registers spare. Both gcc
        and clang then interleave the written-out steps' loads and rotate the accumulators
        through the registers, spilling some to the stack on every step (AVX2's 12-accumulator
        tiles of the FPN class graph's stride-2 3x3 convs; `python -m benchmarks.layers` on
        benchmarks/class_graphs.py's FPN shows their time). Not for short reductions (fewer than
        LOOPED_STEPS_FROM steps, an RGB stem's 27), where the loop's own work per step weighs
        more than the spills. Not with lane broadcasts (armv7, aarch64 LLVM), whose loads are
        shared across written-out steps."""
        if self.lanes == 1 or self.lane_broadcasts or steps < LOOPED_STEPS_FROM:
            return False
        vectors = -(-cols // self.width_for(cols))
        return rows * vectors + vectors + 1 > self.registers - 2

    def cols_for_rows(self, cols: int, rows: int, longest: int) -> int:
        """Columns per tile for a reduction with only `rows` output rows: `cols`, or where the
        accumulator budget holds more rows than there are (a depthwise conv, a one-channel
        map), up to 4 vectors, at most `longest`, or their few accumulators leave the
        multiply-adds waiting on each other."""
        if rows < self.rows_for(cols, rows + 1):
            return min(longest, self.lanes * max(1, min(4, self.accumulators // rows)))
        return cols

    def width_for(self, cols: int) -> int:
        """Lanes of the vectors covering `cols` columns: the register width, or a narrower vector
        for rows shorter than a register (1: scalars)."""
        width = self.lanes
        while width > 4 and width > cols:
            width //= 2
        return width if 1 < width <= cols else 1

    def rows_for(self, cols: int, limit: int) -> int:
        """Output rows per tile for tiles `cols` wide, covering `limit` rows in all: as many as
        the accumulator budget allows (the FMA latency needs about 8 independent accumulators in
        flight), then evened out so the last block is not a thin one (16 rows under a budget of
        12 go as 8 + 8, not 12 + 4). The accumulators, one row's operand vectors and a broadcast
        must fit the registers together: armv7's 16 registers of 4 floats hold 3 rows of 16
        columns' accumulators (12) but not their 4 operand vectors too, and such a tile spills
        heavily, so there the tiles have 2 rows."""
        vectors = max(1, -(-cols // self.width_for(cols)))
        fitting = (self.registers - vectors - 1) // vectors
        most = max(1, min(limit, self.accumulators // vectors, fitting, 4 if self.by_scalar else 16))
        count = -(-limit // most)
        evened = -(-limit // count)
        if self.by_scalar and most == 4 and limit > 4 and fitting >= 5:
            return _by_lane_rows(limit, vectors, evened)
        return evened


def _by_lane_rows(limit: int, vectors: int, evened: int) -> int:
    """armv7's rows per tile: its by-lane multiply-adds take their broadcasts four rows per load,
    so blocks of 3 rows (9 pixels evened out) loaded an operand per row. The rows whose blocks
    issue the fewest instructions per reduction step (operand loads, broadcast loads, multiply-
    adds, the loop's own 3), 5 rows only where they beat 4 by a tenth: 10 accumulators leave
    the registers tight (VWW's 1x1 convs over 3x3 pixels go as 5 + 4 rows; `python -m
    benchmarks.arm --targets rpi3` counts them)."""
    def cost(rows: int) -> int:
        full, rest = divmod(limit, rows)
        return full * _step(rows, vectors) + (_step(rest, vectors) if rest else 0)

    best = min((evened, 4), key=cost)
    return 5 if cost(5) * 10 < cost(best) * 9 else best


def _step(rows: int, vectors: int) -> int:
    broadcasts = -(-rows // 4) if rows >= 4 else rows
    return vectors + broadcasts + rows * vectors + 3


# AVX2-sized tiles (16 registers of 8 floats), the lowering's default where no target is given
# (tests lowering a graph directly). A package compiled without --target gets this machine's
# preset's tiles instead (aot/pipeline.py tiles_for).
DEFAULT_TILES = TileConfig()
