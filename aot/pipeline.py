"""From a graph to a planned program: the one path `aot compile`, `aot inspect` (and its footprint
per target) and `aot report` all take, so they show the same plan for the same options.

    graph (after aot/passes) --lower--> Program (kernels in ONNX order) --plan--> PlannedProgram

Lowering leaves the graph as it is, so one graph can be lowered for several targets' register
tiles; planning returns its result and leaves the lowered Program as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass, replace

import aot.ops  # noqa: F401  (importing the package registers every op lower_graph looks up)
from aot.errors import AotError
from aot.ir.graph import Graph
from aot.lowering.program import Program, lower_graph
from aot.lowering.tiles import TileConfig
from aot.passes.row_patches import apply_patches, copied_graph
from aot.planner.arena import PlannedProgram, plan_program
from aot.planner.budget import BudgetedPlan, BudgetSearch, parse_arena_bytes, plan_cost
from aot.planner.patch_search import candidates, ranked
from aot.progress import SILENT, Progress
from aot.targets import Target, common_capabilities, host_preset_name, load_target

CONV_ALGORITHMS = ("auto", "direct")
DEFAULT_ALIGNMENT = 64


@dataclass(frozen=True)
class PipelineOptions:
    """What lowering and planning depend on. `targets`: the targets the package is for (none: any
    target); they decide the register tiles, the arena alignment and whether there are threads.
    The defaults are those of `aot compile` without options."""

    targets: tuple[Target, ...] = ()
    # Parallel loops only when asked for (each split kernel is also kept whole for runs without
    # threads, so the code grows; per-slot scratch grows the arena).
    parallel: bool = False
    conv_algorithm: str = "auto"
    # Another shape's choices (Program.choices), adopted where they fit: shape variants of one
    # model then pack their weights alike, and the package stores them once.
    preferred: tuple[tuple[Hashable, object], ...] = ()
    # --max-arena: the largest arena, in bytes, the plan may have (aot/planner/budget.py finds the
    # fastest plan that fits); None: today's fastest plan, whatever its arena.
    max_arena: int | None = None
    # Forms imposed on some nodes, by node key (LoweringContext.overrides): what a --max-arena
    # plan chose; they win over `preferred` and over the lowerings' own choices.
    overrides: tuple[tuple[str, object], ...] = ()
    # The backend whose compiler builds the kernels ("c" or "llvm"): the loops it vectorises by
    # itself are left to it (TileConfig.vectorises_loops).
    backend: str = "c"

    def __post_init__(self) -> None:
        if self.conv_algorithm not in CONV_ALGORITHMS:
            raise AotError(f"--conv-algorithm {self.conv_algorithm!r}: use {' or '.join(CONV_ALGORITHMS)}")
        if self.max_arena is not None:
            object.__setattr__(self, "max_arena", parse_arena_bytes(self.max_arena))

    @property
    def tiles(self) -> TileConfig:
        return tiles_for(self.targets, self.backend)

    @property
    def alignment(self) -> int:
        """The strictest arena alignment any of the targets asks for (64 bytes by default)."""
        return max((t.alignment for t in self.targets), default=DEFAULT_ALIGNMENT)

    @property
    def threads(self) -> bool:
        """Whether kernels get parallel loops: when asked for, and never for bare-metal targets
        (no threads)."""
        return self.parallel and not any(t.bare_metal for t in self.targets)


def tiles_for(targets: tuple[Target, ...] | list[Target], backend: str = "c") -> TileConfig:
    """Register tiles for what the targets can all do (common_capabilities: one C source serves
    them all). A package for no particular target is for the machine that compiles it, whose
    build files pass -march=native: its tiles are those of this machine's preset
    (host_preset_name: 16 floats on an AVX-512 CPU, 8 on an AVX2 one), as `aot bench` times them.
    Plain `make` on the default package ran 1.2-1.5x slower than `aot bench` with the 8-float
    tiles on an AVX-512 Xeon (benchmarks/build_paths.py). `backend`: the llvm backend vectorises
    fewer plain loops by itself than gcc (TileConfig.vectorises_loops)."""
    if not targets:
        return replace(_host_tiles(), vectorises_loops=backend != "llvm")
    return TileConfig.for_capabilities(common_capabilities(targets), backend)


@functools.cache
def _host_tiles() -> TileConfig:
    return tiles_for([load_target(host_preset_name())])


def lower(graph: Graph, options: PipelineOptions) -> Program:
    """`graph`'s kernels for the options' tiles, threads and convolution algorithm."""
    return lower_graph(graph, tiles=options.tiles, parallel=options.threads, conv_algorithm=options.conv_algorithm,
                       preferred=dict(options.preferred), overrides=dict(options.overrides))


def plan(program: Program, options: PipelineOptions) -> PlannedProgram:
    """The kernel order, in-place pairs and arena offsets of `program` for the options' alignment."""
    return plan_program(program, options.alignment)


def lower_and_plan(graph: Graph, options: PipelineOptions | None = None,
                   progress: Progress | None = None, model: str | None = None) -> PlannedProgram:
    """`graph` (after the graph passes, aot/passes/pipeline.py) lowered and planned; with
    options.max_arena, the fastest plan whose arena fits it (`model` names the model in the error
    when none does; default: the graph's name)."""
    options = options or PipelineOptions()
    if options.max_arena is not None:
        return lower_and_plan_budgeted(graph, options, progress, model).planned
    progress = progress or SILENT
    progress.start("lowering to kernels")
    program = lower(graph, options)
    progress.start("memory planning")
    return plan(program, options)


def lower_and_plan_budgeted(graph: Graph, options: PipelineOptions, progress: Progress | None = None,
                            model: str | None = None) -> BudgetedPlan:
    """lower_and_plan for options.max_arena, with what the search changed against the plan
    without a budget: other convolution forms (aot/planner/budget.py), and when those cannot fit,
    an early segment run in bands of rows (aot/planner/patch_search.py)."""
    assert options.max_arena is not None
    default = lower_and_plan(graph, replace(options, max_arena=None), progress)
    if default.memory.arena_bytes <= options.max_arena:
        return BudgetedPlan.unchanged(default, options.max_arena)
    (progress or SILENT).start(f"searching for a plan within --max-arena {options.max_arena}")
    search = _form_search(graph, options)
    try:
        return search.fit(default, options.max_arena, model or graph.name)
    except AotError:
        assert search.smallest is not None
        smallest = search.smallest
    forms_smallest = smallest.memory.arena_bytes
    best: BudgetedPlan | None = None
    for candidate in ranked(candidates(graph, options.alignment), options.max_arena):
        if best is not None and candidate.macs >= best.cost:
            continue  # it cannot be cheaper, whatever forms it needs
        patched = copied_graph(graph)
        apply_patches(patched, candidate.segment, candidate.count)
        search = _form_search(patched, options)
        try:
            fitted = search.fit(plan(lower(patched, options), options), options.max_arena, model or graph.name)
        except AotError:
            assert search.smallest is not None
            if search.smallest.memory.arena_bytes < smallest.memory.arena_bytes:
                smallest = search.smallest
            continue
        if best is None or fitted.cost < best.cost:
            best = replace(fitted, default=default, default_arena=default.memory.arena_bytes,
                           default_cost=plan_cost(default.program), patches=candidate.to_json(graph),
                           forms_arena=forms_smallest)
    if best is None:
        raise AotError(BudgetSearch._no_fit(options.max_arena, model or graph.name, smallest))
    return best


def _form_search(graph: Graph, options: PipelineOptions) -> BudgetSearch:
    return BudgetSearch(graph, options.tiles, options.conv_algorithm, options.alignment,
                        lambda overrides: lower(graph, replace(options, overrides=overrides)),
                        lambda lowered: plan(lowered, options))
