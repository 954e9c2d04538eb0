"""The fastest plan whose arena fits a budget (`--max-arena BYTES`).

The default plan's arena is the largest set of buffers live at one step (aot/planner/memory.py
reaches that lower bound on every model we have), so a smaller arena needs less live at the peak.
Part of what is live there is scratch a fast convolution makes for itself, live only while its
one kernel runs: a padded or column-phase copy of its input (copies.py), Winograd's transformed
tiles (winograd.py), im2col's column matrix, the flat depthwise mode's shifted copies, the grid
mode's rows. The same convolution has slower forms with less or no scratch
(algorithm.conv_forms: without Winograd, tiles over the input itself, row updates over the
input, the direct loop nest), so when its kernel runs at the peak, another form lowers the peak.

The search is greedy. From today's plan, while the arena exceeds the budget: take the kernel at
the peak step; if it is a convolution with a form needing less scratch, give it the fastest
such form that saves what the budget asks for (or, when none does, the one with the least
scratch), lower and plan again, and keep the change unless the arena grew or the kernel is still
at a peak as high as before (another form can cost an in-place pair: aot/planner/in_place.py);
then the next form is tried. It stops when the plan fits, or when the kernel at the peak has no
form left to try: that plan's arena is the smallest aot can reach, and the error names it.
A node changes form only when its kernel is at the peak, so every other keeps today's choice.

The cost of a plan is estimated as MACs times a factor per form, measured (FORM_FACTORS).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from aot.analysis import node_macs
from aot.errors import AotError
from aot.ir.graph import Graph, Node
from aot.ir.internal_attrs import BAND_OF
from aot.lowering.program import Program
from aot.lowering.tiles import TileConfig
from aot.ops.conv.lowering import conv_key
from aot.ops.conv_forms import FORMED_OPS, Form, factor_key, forms_of, label_of
from aot.planner.arena import PlannedProgram
from aot.planner.memory import align_up

# Time per MAC of each form, relative to the register tiles (tiled or im2col, the default forms
# without Winograd: 1.0), by the kind of convolution (layer_class). Measured with
# `python -m benchmarks.max_arena factors` on the 34 distinct convolutions of VWW, ResNet-8,
# DS-CNN and examples/tiny_cnn.onnx, each alone with its Relu, compiled for the host (AVX-512,
# x86_64-v4) and timed in every form, one thread: the median of the ratios (their range in
# the comments). Row updates read the input itself (no copy) and pay for it in unaligned,
# bounds-split rows, most on dense convolutions with few pixels per row; on strided depthwise
# ones they beat the tiles over the column-phase copy (which the copy costs). The direct loop
# nest is scalar. Ratios vary with the shape (rows 1.1-15x on dense ones), so these rank the
# forms and estimate the whole plan's cost; they do not predict one layer's time.
FORM_FACTORS: dict[tuple[str, str], float] = {
    ("winograd", "dense"): 0.78,  # 4 convolutions, 0.75-1.24
    ("rows", "dense"): 2.87,  # 23 convolutions, 1.12-15.45
    ("rows", "depthwise"): 2.29,  # 7, 0.84-6.14
    ("rows", "strided depthwise"): 0.85,  # 4, 0.84-0.87
    ("direct", "dense"): 45.8,  # 23, 1.04-1716
    ("direct", "depthwise"): 7.6,  # 7, 2.4-18.4
    ("direct", "strided depthwise"): 2.23,  # 4, 0.66-2.78
    # The integer convolutions' forms, relative to the fastest one each convolution has: the same
    # command on the int8 QDQ forms of those models (`aot quantize`), the 36 distinct QLinearConvs,
    # host preset x86_64-v4-vnni (AVX-512 VNNI).
    ("int8 dot", "dense"): 9.56,  # 23, 1.91-70.05
    ("int8 flat_depthwise", "dense"): 9.79,  # 1 (a one-channel first layer)
    ("int8 flat_depthwise", "depthwise"): 2.31,  # 8, 1.17-5.43
    ("int8 flat_depthwise", "strided depthwise"): 2.00,  # 4, 1.61-2.80
    ("int8 depthwise", "dense"): 48.9,  # 1
    ("int8 depthwise", "depthwise"): 7.10,  # 8, 3.32-14.59
    ("int8 depthwise", "strided depthwise"): 3.62,  # 4, 2.63-6.83
    ("int8 direct", "dense"): 47.7,  # 24, 7.75-197.9
    ("int8 direct", "depthwise"): 18.0,  # 8, 5.21-25.88
    ("int8 direct", "strided depthwise"): 6.27,  # 4, 2.21-11.56
}
DEFAULT_FACTOR = 1.0  # the register tiles (tiled, im2col)


def form_factor(form: object, layer: str) -> float:
    """The estimated time per MAC of `form` on a convolution of class `layer` (layer_class),
    relative to the register tiles (FORM_FACTORS)."""
    return FORM_FACTORS.get((factor_key(form), layer), DEFAULT_FACTOR)


def layer_class(node: Node) -> str:
    """"depthwise" (one input channel per group), "strided depthwise" or "dense" (the rest)."""
    w = node.input(3 if node.op_type == "QLinearConv" else 1)
    if w is None or w.rank < 3 or w.shape[1] != 1 or int(node.attr("group", 1)) <= 1:
        return "dense"
    strides = node.attr("strides", None)
    return "strided depthwise" if strides is not None and max(strides) > 1 else "depthwise"


def parse_arena_bytes(value: int | str) -> int:
    """--max-arena's value: a positive integer number of bytes, or one with a k/K (x1024) or M
    (x1048576) suffix, as text or int."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value > 0:
            return value
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]+)\s*([kKM]?)\s*", value)
        if match and int(match[1]) > 0:
            return int(match[1]) * {"": 1, "k": 1024, "K": 1024, "M": 1024 * 1024}[match[2]]
    raise AotError(f"--max-arena {value!r}: give a positive number of bytes, e.g. 200000, 200k or 2M")


@dataclass(frozen=True)
class FormChange:
    """A node the budgeted plan computes in another form than today's plan."""

    node: str  # the ONNX node
    op: str  # its kernel's op
    default: str  # form_label of today's form
    chosen: str
    scratch_saved: int  # bytes of scratch the chosen form does without (aligned), and the input
    # it writes over when it lets the planner write in place
    macs: int
    default_cost: float  # MACs x the form's factor
    cost: float

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "op": self.op, "default_form": self.default, "form": self.chosen,
                "scratch_saved_bytes": self.scratch_saved, "macs": self.macs,
                "default_cost_macs": round(self.default_cost), "cost_macs": round(self.cost)}


@dataclass(frozen=True)
class BudgetedPlan:
    """The plan for a --max-arena budget, and how it differs from today's plan."""

    planned: PlannedProgram
    budget: int
    default: PlannedProgram  # today's plan, without the budget
    default_arena: int
    default_cost: float  # estimated, in MACs at the tiled forms' speed (FORM_FACTORS)
    cost: float
    changes: tuple[FormChange, ...] = ()
    # The segment run in bands of rows (aot/planner/patch_search.py: PatchCandidate.to_json),
    # when no choice of forms alone fits.
    patches: dict[str, object] | None = None
    # The arena the convolution forms alone reached (the plan itself, unless bands of rows were
    # needed): what each technique saved, for the reports.
    forms_arena: int | None = None

    @staticmethod
    def unchanged(planned: PlannedProgram, budget: int) -> BudgetedPlan:
        cost = plan_cost(planned.program)
        return BudgetedPlan(planned, budget, planned, planned.memory.arena_bytes, cost, cost)

    def to_json(self) -> dict[str, object]:
        return {"max_arena": self.budget, "arena_bytes": self.planned.memory.arena_bytes,
                "default_arena_bytes": self.default_arena, "estimated_cost_macs": round(self.cost),
                "default_estimated_cost_macs": round(self.default_cost),
                "changed_forms": [c.to_json() for c in self.changes], "patches": self.patches,
                "forms_only_arena_bytes": self.forms_arena if self.forms_arena is not None else
                self.planned.memory.arena_bytes}


def plan_cost(program: Program) -> float:
    """Estimated cost of a lowered program: every node's MACs, a convolution's times its form's
    factor (FORM_FACTORS)."""
    seen: set[int] = set()
    total = 0.0
    for node in program.nodes:
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        key = _formed_key(node, program)
        total += node_macs(node) * _node_factor(node, program.forms[key] if key is not None else None)
    return total


def _node_factor(node: Node, form: object) -> float:
    return form_factor(form, layer_class(node)) if form is not None else 1.0


def kernel_scratch(program: Program, alignment: int) -> dict[int, int]:
    """Bytes (aligned) of the scratch each kernel owns: the arena tensors a lowering made for
    itself (not in the graph) that no other kernel binds."""
    graph_tensors = program.graph.tensors
    arena = set(program.arena_tensors)
    users = Counter(t for bindings in program.bindings for t in set(bindings) if t in arena)
    scratch: dict[int, int] = {}
    for k, bindings in enumerate(program.bindings):
        own = [t for t in set(bindings) if users.get(t) == 1 and t.name not in graph_tensors]
        if own:
            scratch[k] = sum(align_up(max(t.nbytes, 1), alignment) for t in own)
    return scratch


def _scratch_by_key(program: Program, alignment: int) -> dict[str, int]:
    """kernel_scratch, by the key of the convolution each kernel was lowered for."""
    by_key: dict[str, int] = {}
    for k, size in kernel_scratch(program, alignment).items():
        key = _formed_key(program.nodes[k] if k < len(program.nodes) else None, program)
        if key is not None:
            by_key[key] = by_key.get(key, 0) + size
    return by_key


def _formed_key(node: Node | None, program: Program) -> str | None:
    """The key of `node` when it is a node with several forms (Program.forms), else None."""
    if node is None or node.op_type not in FORMED_OPS or not node.outputs or node.outputs[0] is None:
        return None
    key = conv_key(node)
    return key if key in program.forms else None


Overrides = tuple[tuple[str, object], ...]


class BudgetSearch:
    """The greedy search of the module docstring over one graph (after the graph passes)."""

    def __init__(self, graph: Graph, tiles: TileConfig, conv_algorithm: str, alignment: int,
                 lower: Callable[[Overrides], Program], plan: Callable[[Program], PlannedProgram]) -> None:
        self.graph, self.tiles, self.conv_algorithm, self.alignment = graph, tiles, conv_algorithm, alignment
        self.lower, self.plan = lower, plan
        self.layers: dict[str, str] = {}
        self.smallest: PlannedProgram | None = None  # after fit failed: the smallest plan it reached
        self.nodes: Mapping[str, Node] = {}  # the convolutions with several forms, by key

    def fit(self, default: PlannedProgram, budget: int, model: str) -> BudgetedPlan:
        """The plan for `budget` from today's plan `default`; AotError naming the smallest arena
        reachable when no plan fits."""
        nodes = {key: n for n in default.program.nodes if (key := _formed_key(n, default.program)) is not None}
        forms = {key: forms_of(node, self.tiles, self.conv_algorithm) for key, node in nodes.items()}
        self.layers = {key: layer_class(node) for key, node in nodes.items()}
        self.nodes = nodes
        self.bands: dict[str, list[str]] = {}  # a band's original node -> the keys of all its bands
        for key, node in nodes.items():
            if node.attr(BAND_OF) is not None:
                self.bands.setdefault(node.attr(BAND_OF), []).append(key)
        self.band_of = {key: node.attr(BAND_OF) for key, node in nodes.items()}
        scratch = self._form_scratch(forms)
        current, current_scratch = self._descend(default, budget, forms, scratch, budget)
        if current.memory.arena_bytes > budget:
            # Stuck: the forms chosen for speed saved less than they promised. The path that
            # always takes the least scratch reaches the smallest arena (what the error names).
            current, current_scratch = self._descend(default, budget, forms, scratch, 0)
        if current.memory.arena_bytes > budget:
            self.smallest = current
            raise AotError(self._no_fit(budget, model, current))
        return self._result(default, current, budget, nodes, scratch, current_scratch)

    def _descend(self, default: PlannedProgram, budget: int, forms: Mapping[str, Sequence[Form]],
                 scratch: Mapping[tuple[str, Form], int],
                 aim: int) -> tuple[PlannedProgram, dict[str, int]]:
        """The greedy walk from `default` until the arena fits `budget` or the kernel at the peak
        has no form left; each step saves what `aim` asks for (0: as much as it can)."""
        chosen: dict[str, Form] = {}
        rejected: set[tuple[str, Form]] = set()
        current = default
        current_scratch = _scratch_by_key(default.program, self.alignment)
        while current.memory.arena_bytes > budget:
            key = self._peak_key(current)
            need = current.memory.arena_bytes - aim
            form = self._next_form(key, forms, scratch, current_scratch, rejected, need) if key else None
            if form is None:
                break
            step = self._with_bands(key, form, forms, scratch, current_scratch)
            trial = self.plan(self.lower(tuple(sorted({**chosen, **step}.items(), key=lambda kv: kv[0]))))
            if self._better(trial, current, key):
                chosen.update(step)
                current, current_scratch = trial, _scratch_by_key(trial.program, self.alignment)
            else:
                rejected.add((key, form))
        return current, current_scratch

    def _with_bands(self, key: str, form: Form, forms: Mapping[str, Sequence[Form]],
                    scratch: Mapping[tuple[str, Form], int],
                    current_scratch: Mapping[str, int]) -> dict[str, Form]:
        """`key` in `form`, and the other bands of the same node (aot/passes/row_patches.py) in
        the form of the same kind where it has less scratch than theirs now: the bands all run
        at the peak in turn, so changing one at a time would take a lowering per band."""
        step = {key: form}
        label, node = label_of(form), self.band_of.get(key)
        for other in self.bands.get(node, []) if node is not None else []:
            have = current_scratch.get(other, 0)
            same = [f for f in forms[other] if label_of(f) == label and scratch[other, f] < have]
            if other != key and same:
                step[other] = same[0]
        return step

    def _form_scratch(self, forms: Mapping[str, Sequence[Form]]) -> dict[tuple[str, Form], int]:
        """The scratch of every form of every convolution: one lowering per position in the
        lists of forms (each convolution takes its i-th form in the i-th), not one per form."""
        scratch: dict[tuple[str, Form], int] = {}
        for i in range(max((len(f) for f in forms.values()), default=0)):
            level = {key: f[i] for key, f in forms.items() if len(f) > i}
            program = self.lower(tuple(sorted(level.items(), key=lambda kv: kv[0])))
            found = _scratch_by_key(program, self.alignment)
            scratch.update({(key, form): found.get(key, 0) - self._in_place_gain(key, form)
                            for key, form in level.items()})
        return scratch

    def _in_place_gain(self, key: str, form: Form) -> int:
        """The bytes a form that lets the planner write the output over the input saves (the
        input, when it dies at this convolution: an arena tensor read by it alone), counted as
        negative scratch so the search weighs it with the rest."""
        node = self.nodes.get(key)
        if not getattr(form, "via_plane", False) or node is None:
            return 0
        x = node.inputs[0]
        if x is None or x.producer is None or len(x.consumers) != 1 or self.graph.is_output(x):
            return 0
        return align_up(x.nbytes, self.alignment)

    def _peak_key(self, planned: PlannedProgram) -> str | None:
        """The key of the convolution whose kernel runs at the arena's peak, if it is one."""
        nodes = planned.program.nodes
        step = planned.memory.peak_step
        return _formed_key(nodes[step] if step < len(nodes) else None, planned.program)

    def _next_form(self, key: str, forms: Mapping[str, Sequence[Form]],
                   scratch: Mapping[tuple[str, Form], int], current_scratch: Mapping[str, int],
                   rejected: set[tuple[str, Form]], need: int) -> Form | None:
        """The form to try for the convolution `key` at the peak: of its untried forms with less
        scratch than it has now, the fastest that saves `need` bytes, else the one with the
        least scratch (the fastest of those)."""
        have = current_scratch.get(key, 0)
        node_cost = {f: form_factor(f, self.layers[key]) for f in forms[key]}
        options = [f for f in forms[key] if scratch[key, f] < have and (key, f) not in rejected]
        if not options:
            return None
        enough = [f for f in options if have - scratch[key, f] >= need]
        if enough:
            return min(enough, key=lambda f: (node_cost[f], forms[key].index(f)))
        return min(options, key=lambda f: (scratch[key, f], node_cost[f], forms[key].index(f)))

    def _better(self, trial: PlannedProgram, current: PlannedProgram, key: str) -> bool:
        """Whether the changed form helps: the arena shrank, or it stayed and that convolution's
        kernel is no longer the peak (another step of the same size is)."""
        if trial.memory.arena_bytes != current.memory.arena_bytes:
            return trial.memory.arena_bytes < current.memory.arena_bytes
        return self._peak_key(trial) != key

    @staticmethod
    def _no_fit(budget: int, model: str, smallest: PlannedProgram) -> str:
        step = smallest.memory.peak_step
        kernels = smallest.program.kernels
        node = smallest.program.nodes[step] if step < len(smallest.program.nodes) else None
        where = (f"node {node.name!r}, op {kernels[step].op}" if node is not None else
                 f"kernel {step}, op {kernels[step].op}" if kernels else "no kernel")
        return (f"--max-arena {budget}: the smallest arena aot can plan for {model} is "
                f"{smallest.memory.arena_bytes} bytes (peak at {where})")

    def _result(self, default: PlannedProgram, planned: PlannedProgram, budget: int, nodes: Mapping[str, Node],
                scratch: Mapping[tuple[str, Form], int], chosen_scratch: Mapping[str, int]) -> BudgetedPlan:
        default_scratch = _scratch_by_key(default.program, self.alignment)
        changes = []
        for key, node in nodes.items():
            before, after = default.program.forms[key], planned.program.forms[key]
            if before == after:
                continue
            macs, layer = node_macs(node), layer_class(node)
            kernel = next(k for k, n in zip(planned.program.kernels, planned.program.nodes) if n is node)
            changes.append(FormChange(node.name, kernel.op, label_of(before), label_of(after),
                                      default_scratch.get(key, 0) - chosen_scratch.get(key, 0)
                                      + self._in_place_gain(key, after), macs,
                                      macs * form_factor(before, layer), macs * form_factor(after, layer)))
        return BudgetedPlan(planned, budget, default, default.memory.arena_bytes, plan_cost(default.program),
                            plan_cost(planned.program), tuple(changes))
