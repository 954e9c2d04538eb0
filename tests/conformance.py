"""ONNX backend conformance for aot: the cases the installed onnx package ships, run through aot.

Sources of cases:
  * node cases, generated in memory by onnx.backend.test.case.node.collect_testcases(None): one
    ONNX node per model, with numpy inputs and expected outputs; inputs an op needs at compile
    time (axes, k, pads, Resize scales...) are bound with each data set's values, as
    `--input-value` binds them (aot.compile(input_values=...); see compile_time_inputs);
  * model folders under onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}: a
    model.onnx and test_data_set_N/{input,output}_K.pb;
  * light models, onnx/backend/test/data/light/light_X.onnx: real architectures whose weights are
    ConstantOfShape nodes. onnx ships only the expected output; its backend runner feeds each
    runtime input arange(n)/n in the input's shape (symbolic dims as 1), and so do we.

Each case is classified as
  out_of_scope  a graph input or output is not a tensor of float32/int32/int64/bool, a node is in a
                non-default domain (ML, training, contrib), or the case needs training behaviour;
  unsupported   aot.compile raises UnsupportedError; the missing op types are recorded;
  passed        every data set matches the expected outputs (aot.commands.verify.compare, tolerance 1e-4);
  failed        anything else, with a one-line reason.

Where a case runs: by default built as a shared library for this machine and called through
ctypes; with a target (`--target rpi4`, run_case(..., target="rpi4")) compiled for that preset
(its register tiles, its LLVM object with --backend llvm), cross-built into the package's static
runner with the toolchain `aot verify --target` uses (aot.toolchain) and run under qemu-user, the
data sets as .npy files in and out.

No pytest in here: `python -m tests.conformance` prints the summary, and tests/test_conformance.py
(tests/test_conformance_cross.py for the targets) turns the cases into tests.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import json
import multiprocessing as mp
import os
import resource
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import onnx
import onnx.backend.test
from onnx import TensorProto, numpy_helper

from aot.commands.verify import compare
from aot.compiler import compile as compile_model
from aot.errors import AotError, UnsupportedError
from aot.frontend.shape_folding import NEVER_FOLD
from aot.host.run import HostModel
from aot.lowering.registry import constant_inputs, is_supported
from aot.targets import Target, load_target
from aot.toolchain.discovery import Toolchain, find_toolchain, qemu_for
from aot.toolchain.target_build import TargetModel

DATA_DIR = Path(onnx.backend.test.__file__).resolve().parent / "data"
NODE = "node"
FOLDER_SUITES = ("pytorch-converted", "pytorch-operator", "simple")
LIGHT = "light"
SUITES = (NODE, *FOLDER_SUITES, LIGHT)
TOLERANCE = 1e-4
# How tests/helpers.py builds packages: strict warnings (-Werror comes with the host build) and -pedantic.
DEFAULT_OPT, DEFAULT_CFLAGS = "-O1", "-pedantic"
# Light models are built in a child process with this much address space (python, make and cc
# each). VGG-19 (575 MB of weights) peaks at about 3 GiB, in ONNX loading; `-n auto` runs two at once.
LIGHT_MEMORY_LIMIT = 10 * 2**30
BACKENDS = ("c", "llvm")
# Cross sweeps: the longest one run of a case's runner under qemu-user may take (the slowest node
# case takes well under a second; a hang must not stop the sweep).
CROSS_RUN_TIMEOUT = 120.0

PASSED, FAILED, UNSUPPORTED, OUT_OF_SCOPE = "passed", "failed", "unsupported", "out_of_scope"
STATUSES = (PASSED, FAILED, UNSUPPORTED, OUT_OF_SCOPE)

# The element types a compiled model's inputs and outputs may have for a case to be in scope.
IN_SCOPE_DTYPES = {TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.INT8,
                   TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16}
DEFAULT_DOMAINS = ("", "ai.onnx")

DataSet = tuple[list[np.ndarray], list[np.ndarray]]


@dataclass
class Case:
    """One conformance case: a model and where its data sets come from."""

    suite: str
    name: str
    model: onnx.ModelProto
    node_data: list[DataSet] | None = None  # node cases carry their data in memory
    # Runtime inputs an op needs at compile time: bound with each data set's value (--input-value).
    bound: tuple[str, ...] = ()
    folder: Path | None = None  # model folders: test_data_set_N/ inside
    light_output: Path | None = None  # light models: the expected output_0 TensorProto

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"

    def data_sets(self) -> list[DataSet]:
        if self.node_data is not None:
            return self.node_data
        if self.folder is not None:
            return [_read_data_set(d) for d in sorted(self.folder.glob("test_data_set_*"), key=_set_number)]
        if self.light_output is not None:
            inputs = [light_input(vi) for vi in runtime_inputs(self.model)]
            return [(inputs, [_read_tensor(self.light_output)])]
        return []


@dataclass
class CaseResult:
    case: str  # Case.id
    suite: str
    status: str
    reason: str = ""
    unsupported_ops: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        detail = self.reason or ", ".join(self.unsupported_ops)
        return f"{self.case}: {detail}" if detail else self.case


# ---------------------------------------------------------------------------------------------
# Enumerating cases


def node_cases() -> list[Case]:
    """onnx's node cases. Generating them runs numpy reference code that warns about the overflows
    and infinities it produces on purpose; those warnings say nothing about aot."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            raw = collect_testcases(None)
    cases = []
    for tc in sorted(raw, key=lambda t: t.name):
        data = [([_as_array(v) for v in ins], [_as_array(v) for v in outs]) for ins, outs in tc.data_sets]
        cases.append(Case(NODE, tc.name, tc.model, node_data=data, bound=compile_time_inputs(tc.model)))
    return cases


def compile_time_inputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """Node cases feed every input at run time, even those that decide shapes: Reduce axes,
    TopK's k, Slice starts/ends, Pad pads, Resize scales, CumSum's axis... A static-shape compiler
    needs those at compile time, as a deployed model has them (initializers, values folded from
    shapes, or inputs bound with --input-value); the registry lists them per op
    (aot.lowering.registry.constant_inputs). The graph inputs such a value is computed from are bound,
    each data set compiled with its own values (onnx-mlir's backend tests freeze the same inputs).
    Everything else stays a run-time input."""
    runtime = [vi.name for vi in runtime_inputs(model)]
    producers = {out: node for node in model.graph.node for out in node.output if out}
    wanted: set[str] = set()
    seen: set[str] = set()

    def trace(name: str) -> None:
        """The graph inputs `name` is computed from (expanded function cases compute k or pads
        from them); Shape and Size read only the static shape of their input, not its values."""
        if not name or name in seen:
            return
        seen.add(name)
        if name in runtime:
            wanted.add(name)
        producer = producers.get(name)
        if producer is not None and producer.op_type not in ("Shape", "Size"):
            for source in producer.input:
                trace(source)

    for node in model.graph.node:
        if node.domain in DEFAULT_DOMAINS and is_supported(node.domain, node.op_type):
            for i in constant_inputs(node.op_type):
                if i < len(node.input):
                    trace(node.input[i])
    return tuple(name for name in runtime if name in wanted)


def folder_cases(suite: str) -> list[Case]:
    base = DATA_DIR / suite
    cases = []
    for folder in sorted(p for p in base.iterdir() if (p / "model.onnx").is_file()):
        cases.append(Case(suite, folder.name, onnx.load(str(folder / "model.onnx")), folder=folder))
    return cases


def light_cases() -> list[Case]:
    cases = []
    for path in sorted((DATA_DIR / LIGHT).glob("light_*.onnx")):
        output = path.with_name(f"{path.stem}_output_0.pb")
        if output.is_file():
            cases.append(Case(LIGHT, path.stem, onnx.load(str(path)), light_output=output))
    return cases


def cases_of(suite: str) -> list[Case]:
    if suite == NODE:
        return node_cases()
    if suite == LIGHT:
        return light_cases()
    if suite in FOLDER_SUITES:
        return folder_cases(suite)
    raise ValueError(f"unknown suite {suite!r} (suites: {', '.join(SUITES)})")


@functools.cache
def _cases_once(suite: str) -> tuple[Case, ...]:
    return tuple(cases_of(suite))


def all_cases(suites: Iterable[str] = SUITES) -> list[Case]:
    """The cases of `suites`, enumerated once per process (the node cases take seconds to generate,
    and test modules share them)."""
    return [c for s in suites for c in _cases_once(s)]


def light_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """What onnx's backend runner feeds a light model (Runner.generate_dummy_data, random=False):
    arange(n)/n in float32, symbolic dimensions taken as 1. The expected outputs onnx ships were
    computed from exactly this input."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _set_number(path: Path) -> int:
    """N in test_data_set_N or input_N.pb, so that 10 sorts after 9."""
    return int(path.name.split(".")[0].rsplit("_", 1)[1])


def _read_tensor(path: Path) -> np.ndarray:
    tensor = TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _read_data_set(folder: Path) -> DataSet:
    def read(prefix: str) -> list[np.ndarray]:
        files = sorted(folder.glob(f"{prefix}_*.pb"), key=_set_number)
        return [_read_tensor(f) for f in files]

    return read("input"), read("output")


def _as_array(value: object) -> np.ndarray:
    """Node-case data holds numpy arrays, and sometimes TensorProtos (or sequences and optionals,
    which only appear in out-of-scope cases and are kept as they are)."""
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Classifying


def runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs the caller feeds: those without an initializer (older exporters list weights
    among the graph inputs too)."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_nodes(g)


def _type_problem(kind: str, vi: onnx.ValueInfoProto) -> str | None:
    t = vi.type
    which = t.WhichOneof("value")
    if which != "tensor_type":
        return f"{kind} {vi.name!r} is not a tensor but {(which or 'untyped').replace('_type', '')}"
    elem = t.tensor_type.elem_type
    if elem not in IN_SCOPE_DTYPES:
        name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)
        return f"{kind} {vi.name!r} has element type {name}"
    return None


def scope_problem(model: onnx.ModelProto) -> str | None:
    """Why a case is out of scope for a static-shape inference compiler of float32/int32/int64/bool
    tensors, or None if it is in scope."""
    for node in _all_nodes(model.graph):
        if node.domain not in DEFAULT_DOMAINS:
            return f"op {node.domain}::{node.op_type} is in a non-default domain"
    for vi in runtime_inputs(model):
        problem = _type_problem("input", vi)
        if problem:
            return problem
    for vi in model.graph.output:
        problem = _type_problem("output", vi)
        if problem:
            return problem
    graph_inputs = {vi.name for vi in runtime_inputs(model)}
    for node in model.graph.node:
        # Dropout with training_mode fed at run time draws a random mask: training, not inference.
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2] in graph_inputs:
            return "Dropout with training_mode fed at run time (training behaviour: a random mask)"
        # BatchNormalization(training_mode=1) normalizes by batch statistics and outputs updated
        # running statistics: a training step, not inference.
        if any(a.name == "training_mode" and a.i for a in node.attribute):
            return f"{node.op_type} with training_mode=1"
    return None


def _foldable_nodes(model: onnx.ModelProto, bound: Iterable[str] = ()) -> set[int]:
    """Indices of top-level nodes that aot's frontend folds into constants: nodes computing only
    from initializers and other folded values, and Shape/Size of a declared static shape. (The
    frontend also folds what shape inference reveals; this cheap look needs no evaluation, which
    matters for the light models whose ConstantOfShape nodes make hundreds of MB of weights.)"""
    graph = model.graph
    constant = {t.name for t in graph.initializer} | set(bound)
    static = set(constant)
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") and all(
                d.HasField("dim_value") for d in tt.shape.dim):
            static.add(vi.name)
    folded = set()
    for i, node in enumerate(graph.node):
        if node.domain not in DEFAULT_DOMAINS or node.op_type in NEVER_FOLD:
            continue
        inputs = [name for name in node.input if name]
        if (node.op_type in ("Shape", "Size") and inputs and inputs[0] in static) or all(
                name in constant for name in inputs):
            folded.add(i)
            constant.update(name for name in node.output if name)
            static.update(name for name in node.output if name)
    return folded


def registry_missing_ops(model: onnx.ModelProto, bound: Iterable[str] = ()) -> list[str]:
    """Op types aot would have to lower that are not in its registry (nodes it folds into
    constants at compile time, from initializers and the `bound` inputs, need no lowering)."""
    folded = _foldable_nodes(model, bound)
    missing = {n.op_type for i, n in enumerate(model.graph.node)
               if i not in folded and not is_supported(n.domain, n.op_type)}
    for node in model.graph.node:  # ops inside subgraphs, were any to be reached
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for g in graphs:
                missing.update(n.op_type for n in _all_nodes(g) if not is_supported(n.domain, n.op_type))
    return sorted(missing)


def statically_supported(model: onnx.ModelProto, bound: Iterable[str] = ()) -> bool:
    """Whether every op aot has to lower (after folding constants) is in its registry."""
    return not registry_missing_ops(model, bound)


def in_scope(case: Case) -> bool:
    return scope_problem(case.model) is None


def is_test_target(case: Case) -> bool:
    """In scope and using only registered ops: these cases must pass."""
    return in_scope(case) and statically_supported(case.model, case.bound)


# ---------------------------------------------------------------------------------------------
# Running


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    # Build errors put the compiler's diagnostics after a heading line: show the first one too.
    if first.endswith(":") and len(lines) > 1:
        first = f"{first} {lines[1]}"
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _describe_internal(e: BaseException) -> str:
    if isinstance(e, MemoryError):
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        return "out of memory" + (f" (address-space limit {limit / 2**30:.0f} GiB)" if limit > 0 else "")
    text = _one_line(str(e))
    return f"internal {type(e).__name__}" + (f": {text}" if text else "")


def default_backend() -> str:
    """$AOT_TEST_BACKEND=llvm runs the native sweep through the LLVM objects instead of C."""
    return os.environ.get("AOT_TEST_BACKEND") or "c"


@functools.cache
def cross_setup(target: str) -> tuple[Target, Toolchain, list[str]]:
    """The preset, its C toolchain and how to launch its programs here (qemu-user), looked up
    once per process; raises AotError naming what to install when something is missing."""
    preset = load_target(target)
    return preset, find_toolchain(preset), qemu_for(preset)


def cross_unavailable(target: str) -> str | None:
    """Why cases cannot be cross-built for `target` and run here, or None when they can."""
    try:
        cross_setup(target)
    except AotError as e:
        return str(e)
    return None


def run_case(case: Case, opt: str = DEFAULT_OPT, extra_cflags: str = DEFAULT_CFLAGS,
             backend: str | None = None, target: str | None = None) -> CaseResult:
    """Run one case: natively (target None) or cross-built for the preset `target` and run under
    qemu-user; with `backend` (default default_backend())."""
    start = time.perf_counter()
    result = _run_case(case, opt, extra_cflags, backend or default_backend(), target)
    result.seconds = time.perf_counter() - start
    return result


def symbolic_inputs(model: onnx.ModelProto) -> list[str]:
    """Runtime inputs whose declared shape is not fully static."""
    names = []
    for vi in runtime_inputs(model):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            names.append(vi.name)
    return names


def _run_case(case: Case, opt: str, extra_cflags: str, backend: str, target: str | None) -> CaseResult:
    def result(status: str, reason: str = "", ops: Sequence[str] = ()) -> CaseResult:
        return CaseResult(case.id, case.suite, status, reason, list(ops))

    problem = scope_problem(case.model)
    if problem:
        return result(OUT_OF_SCOPE, problem)
    names_in = [vi.name for vi in runtime_inputs(case.model)]
    names_out = [vi.name for vi in case.model.graph.output]
    try:
        data_sets = case.data_sets()
    except Exception as e:
        return result(FAILED, f"test data: {type(e).__name__}: {_one_line(str(e))}")
    if not data_sets:
        return result(FAILED, "no test data sets")
    symbolic = symbolic_inputs(case.model)
    hosts: dict[tuple, HostModel | TargetModel] = {}
    for k, (inputs, expected) in enumerate(data_sets):
        where = f"data set {k}: " if len(data_sets) > 1 else ""
        if len(inputs) != len(names_in) or len(expected) != len(names_out):
            return result(FAILED, f"{where}{len(inputs)} inputs/{len(expected)} outputs given, the model "
                                  f"has {len(names_in)}/{len(names_out)}")
        feeds = dict(zip(names_in, inputs, strict=True))
        # Inputs an op needs at compile time are bound with this data set's values (--input-value).
        values = {name: np.asarray(feeds.pop(name)) for name in case.bound}
        # A static-shape compiler is told the sizes of symbolic dimensions (as `--input-shape` does
        # on the command line); the data set's own arrays say what they are.
        shapes = {name: tuple(np.shape(feeds[name])) for name in symbolic if name not in values}
        key = (tuple(sorted(shapes.items())),
               tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(values.items())))
        if key not in hosts:
            try:
                package = compile_model(case.model, input_shapes=shapes or None, backend=backend, target=target,
                                        input_values=values or None)
            except UnsupportedError as e:
                return result(UNSUPPORTED, "", sorted(e.unsupported))
            except AotError as e:
                return result(FAILED, f"{where}compile: {_one_line(str(e))}")
            except Exception as e:  # an internal error is a failure to report, not a crash of the sweep
                return result(FAILED, f"{where}compile: {_describe_internal(e)}")
            try:
                if target is None:
                    hosts[key] = HostModel.build(package, opt=opt, extra_cflags=extra_cflags)
                else:
                    preset, toolchain, _ = cross_setup(target)
                    hosts[key] = TargetModel.build(package, preset, toolchain, opt=opt, extra_cflags=extra_cflags)
            except AotError as e:
                return result(FAILED, f"{where}build: {_one_line(str(e))}")
        try:
            model = hosts[key]
            ours = model.run(feeds) if isinstance(model, HostModel) else model.run(feeds, timeout=CROSS_RUN_TIMEOUT)
        except AotError as e:
            return result(FAILED, f"{where}run: {_one_line(str(e))}")
        for name, want in zip(names_out, expected, strict=True):
            got = ours[name]
            cmp = compare(name, got, want, TOLERANCE)
            if not cmp.passed:
                if cmp.detail:
                    why = cmp.detail
                else:
                    why = f"max abs err {cmp.max_abs_err:.3g}"
                    if cmp.scale:
                        why += f" (max |expected| {cmp.scale:.3g})"
                if got.dtype != np.asarray(want).dtype:
                    why += f"; dtype {got.dtype} vs expected {np.asarray(want).dtype}"
                return result(FAILED, f"{where}output {name!r}: {why}")
    return result(PASSED)


def _run_quietly(case: Case, opt: str = DEFAULT_OPT, extra_cflags: str = DEFAULT_CFLAGS,
                 backend: str | None = None, target: str | None = None) -> CaseResult:
    # onnx's reference evaluator (used for folding) and numpy may print or warn; keep the report clean.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return run_case(case, opt, extra_cflags, backend, target)


def run_cases(cases: Sequence[Case], jobs: int = 1, opt: str = DEFAULT_OPT,
              extra_cflags: str = DEFAULT_CFLAGS, backend: str | None = None,
              target: str | None = None) -> list[CaseResult]:
    run = functools.partial(_run_quietly, opt=opt, extra_cflags=extra_cflags, backend=backend, target=target)
    if jobs <= 1 or len(cases) <= 1:
        return [run(c) for c in cases]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run, cases, chunksize=1))


def _isolated_child(case: Case, memory_limit: int | None, opt: str, extra_cflags: str, backend: str | None,
                    target: str | None, conn: Connection) -> None:
    if memory_limit is not None:
        # Inherited by make and the C compiler too: a model too big for the budget fails in
        # this child (MemoryError, or the compiler's out-of-memory) instead of swapping the host.
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    try:
        conn.send(_run_quietly(case, opt, extra_cflags, backend, target))
    finally:
        conn.close()


def run_case_isolated(case: Case, memory_limit: int | None = None, timeout: float | None = None,
                      opt: str = DEFAULT_OPT, extra_cflags: str = DEFAULT_CFLAGS, backend: str | None = None,
                      target: str | None = None) -> CaseResult:
    """run_case in a child process with an address-space limit and a deadline, for big models:
    running out of either, or crashing, is reported as a failure with the reason."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    receive, send = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    child = ctx.Process(target=_isolated_child, args=(case, memory_limit, opt, extra_cflags, backend, target, send),
                        daemon=True)
    child.start()
    send.close()
    try:
        if receive.poll(timeout):
            result: CaseResult = receive.recv()
            child.join()
            return result
    except EOFError:
        pass  # the child died before sending its result
    finally:
        receive.close()
    if child.is_alive():
        child.kill()
        child.join()
        reason = f"did not finish within {timeout:.0f} s"
    else:
        child.join()
        code = child.exitcode
        reason = f"runner process died ({f'signal {-code}' if code and code < 0 else f'exit {code}'})"
        if memory_limit is not None:
            reason += f" under a {memory_limit / 2**30:.0f} GiB memory limit"
    return CaseResult(case.id, case.suite, FAILED, reason, seconds=time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# Reporting


def summarize(results: Sequence[CaseResult], title: str = "ONNX conformance") -> str:
    counts = Counter(r.status for r in results)
    lines = [f"{title}: {len(results)} cases: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)]
    in_scope_count = counts[PASSED] + counts[FAILED] + counts[UNSUPPORTED]
    attempted = counts[PASSED] + counts[FAILED]
    if attempted:
        lines.append(f"  in scope {in_scope_count}, of which {counts[UNSUPPORTED]} need unsupported ops; "
                     f"of the other {attempted}, {counts[PASSED]} passed ({counts[PASSED] / attempted:.1%})")
    suites = sorted({r.suite for r in results}, key=lambda s: SUITES.index(s) if s in SUITES else 99)
    if len(suites) > 1:
        for suite in suites:
            c = Counter(r.status for r in results if r.suite == suite)
            lines.append(f"  {suite}: " + ", ".join(f"{c[s]} {s}" for s in STATUSES))
    failed = [r for r in results if r.status == FAILED]
    if failed:
        lines.append(f"failed ({len(failed)}):")
        lines += [f"  {r.line()}" for r in failed]
    unsupported = [r for r in results if r.status == UNSUPPORTED]
    if unsupported:
        ops = Counter(op for r in unsupported for op in r.unsupported_ops)
        lines.append(f"unsupported ({len(unsupported)} cases; op types by number of cases needing them):")
        tally = [f"{op} {n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))]
        shown = 40
        more = f", ... and {len(tally) - shown} more op types" if len(tally) > shown else ""
        lines.append("  " + ", ".join(tally[:shown]) + more)
        lines += [f"  {r.line()}" for r in unsupported]
    out = [r for r in results if r.status == OUT_OF_SCOPE]
    if out:
        reasons = Counter(_reason_kind(r.reason) for r in out)
        lines.append(f"out of scope ({len(out)} cases): "
                     + ", ".join(f"{k} {n}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])))
    return "\n".join(lines)


NODE_TARGET_COUNT = "node-targets.txt"


def record_result(directory: Path, result: CaseResult, target: bool) -> None:
    """Leave `result` in `directory` (one file per case, so parallel test workers never share a file)
    for the run's summary (recorded_summary); `target`: a case that must pass (is_test_target)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(result.case.encode()).hexdigest()[:24]
    (directory / f"{name}.json").write_text(json.dumps({"target": target, "result": asdict(result)}))


def record_node_target_count(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NODE_TARGET_COUNT).write_text(f"{count}\n")


def recorded_summary(directory: Path) -> str | None:
    """The summary of the results recorded in `directory`, headed by the node cases that must pass,
    or None when nothing was recorded."""
    records = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    if not records:
        return None
    results = [CaseResult(**r["result"]) for r in records]
    targets = [CaseResult(**r["result"]) for r in records if r["target"] and r["result"]["suite"] == NODE]
    passed = sum(r.status == PASSED for r in targets)
    count_file = directory / NODE_TARGET_COUNT
    count = int(count_file.read_text()) if count_file.is_file() else len(targets)
    ran = "" if len(targets) == count else f" (the suite has {count}: the others did not run)"
    headline = f"node cases in scope with registry-supported ops: {passed}/{len(targets)} passed{ran}"
    return f"{headline}\n{summarize(sorted(results, key=lambda r: r.case))}"


def _reason_kind(reason: str) -> str:
    if "non-default domain" in reason:
        return "non-default domain"
    if "element type" in reason:
        return reason.rsplit(" ", 1)[-1]
    if "not a tensor" in reason:
        return reason.rsplit(" ", 1)[-1] + " I/O"
    return reason


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", choices=SUITES,
                        help="suites to run (repeatable; default: all but light)")
    parser.add_argument("-k", dest="pattern", default="", help="only cases whose id contains this text")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--opt", default=DEFAULT_OPT, help=f"C optimisation flag (default {DEFAULT_OPT})")
    parser.add_argument("--cflags", default=DEFAULT_CFLAGS, help=f"extra C flags (default {DEFAULT_CFLAGS})")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="code generator (default: $AOT_TEST_BACKEND, else c)")
    parser.add_argument("--target", default=None,
                        help="a preset (rpi4, rpi3, ... see `aot targets`) or .toml: compile for it, cross-build "
                             "the runner and run it under qemu-user (default: this machine, through ctypes)")
    parser.add_argument("--every", type=int, default=1, metavar="N",
                        help="only every N-th case (after -k), from --offset: a quick sample")
    parser.add_argument("--offset", type=int, default=0, help="first case of --every (default 0)")
    parser.add_argument("--show-out-of-scope", action="store_true", help="list every out-of-scope case")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error("--every must be at least 1")
    backend = args.backend or default_backend()
    where = "this machine"
    if args.target:
        problem = cross_unavailable(args.target)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        preset, toolchain, launcher = cross_setup(args.target)
        where = f"{preset.name}, {toolchain.cc_text}" + (f", under {' '.join(launcher)}" if launcher else "")
    suites = args.suite or [NODE, *FOLDER_SUITES]
    cases = [c for c in all_cases(suites) if args.pattern in c.id][args.offset::args.every]
    small = [c for c in cases if c.suite != LIGHT]
    start = time.perf_counter()
    results = run_cases(small, args.jobs, args.opt, args.cflags, backend, args.target)
    # Light models one at a time, each in a memory-limited child: they take gigabytes.
    for case in (c for c in cases if c.suite == LIGHT):
        results.append(run_case_isolated(case, LIGHT_MEMORY_LIMIT, None, args.opt, args.cflags, backend,
                                         args.target))
        print(f"{results[-1].line() or case.id} [{results[-1].status}, {results[-1].seconds:.0f} s]", flush=True)
    title = f"ONNX conformance ({backend} backend, {where}, {args.opt})"
    print(summarize(results, title))
    print(f"{time.perf_counter() - start:.0f} s wall time, {sum(r.seconds for r in results):.0f} s summed "
          f"over cases, {args.jobs} jobs")
    if args.show_out_of_scope:
        for r in results:
            if r.status == OUT_OF_SCOPE:
                print(f"  {r.line()}")
    return 0 if not any(r.status == FAILED for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
