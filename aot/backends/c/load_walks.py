"""Runs of consecutive 4-float vector loads in a straight-line block, printed as a pointer that
walks them (AOT_F32X4_LOAD_STEP: the vector at the pointer, then the pointer moves past it).

A register tile reads its operand vectors at base, base + 4, base + 8, ... and, tap after tap,
on through packed weights. On armv7 `vld1` has no offset form, and gcc computes each of those
addresses with an `add` (a quarter of a conv kernel's instructions on rpi3) where a walking
pointer loads with post-increment (`vld1.32 {d0-d1}, [r0]!`), as LLVM does by itself. Elsewhere
the walk is plain pointer arithmetic, which compilers fold back into offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aot.kernel.affine import affine
from aot.kernel.ir import Assign, Declare, Stmt, VecLoad

LANES = 4


@dataclass(frozen=True)
class WalkStep:
    """A load of a walk: `pointer` names the walk; the first step declares it."""

    pointer: str
    first: bool


@dataclass
class _Run:
    positions: list[int] = field(default_factory=list)
    next_offset: int = 0
    variables: frozenset[str] = frozenset()


def _walkable(s: Stmt) -> tuple[tuple[str, tuple[tuple[str, int], ...]], int] | None:
    """(buffer and index terms, constant offset) of a `Declare(v, VecLoad(float32 x 4))`."""
    if not (isinstance(s, Declare) and type(s.init) is VecLoad):
        return None
    load = s.init
    if load.lanes != LANES or load.buffer.dtype != "float32":
        return None
    form = affine(load.index)
    if form is None:
        return None
    terms, offset = form
    return (load.buffer.name, terms), offset


def load_walks(block: list[Stmt], pointer_name: Callable[[str], str]) -> dict[int, WalkStep]:
    """The walk steps of `block`, by statement position; `pointer_name(buffer)` names a new
    walk's pointer. Only loads with the same index terms
    whose offsets go up by 4 at each step, with none of the terms' variables assigned between
    them and no loop or branch between them, join a walk; a walk has two loads at least."""
    runs: list[_Run] = []
    open_runs: dict[tuple[str, tuple[tuple[str, int], ...]], _Run] = {}
    for position, s in enumerate(block):
        key_offset = _walkable(s)
        if key_offset is not None:
            key, offset = key_offset
            run = open_runs.get(key)
            if run is None or run.next_offset != offset:
                run = _Run(variables=frozenset(name for name, _ in key[1]))
                runs.append(run)
                open_runs[key] = run
            run.positions.append(position)
            run.next_offset = offset + LANES
        elif isinstance(s, Assign):
            open_runs = {k: r for k, r in open_runs.items() if s.var.name not in r.variables}
        elif not isinstance(s, Declare):
            open_runs = {}  # a loop, a branch or a store: runs restart after it
    steps: dict[int, WalkStep] = {}
    for run in runs:
        if len(run.positions) < 2:
            continue
        load = block[run.positions[0]]
        assert isinstance(load, Declare) and isinstance(load.init, VecLoad)
        pointer = pointer_name(load.init.buffer.name)
        for i, position in enumerate(run.positions):
            steps[position] = WalkStep(pointer, first=i == 0)
    return steps
