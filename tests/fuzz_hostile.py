"""Hostile-model fuzzing: valid models' protobufs mutated (dims, dtypes, names, attributes,
initializers, external-data fields, nodes, opsets, raw bytes), then run through the command line.

    python -m tests.fuzz_hostile --count 2000 [--seed 0] [--jobs 2]

For every mutated model, `aot compile m.onnx -o out` must either succeed, and then `aot verify
m.onnx` must pass, or exit 2 with exactly one `aot: error:` line, no traceback and nothing written.
Each case runs in a child forked from a warmed-up parent (imports done once, so a case costs what
aot spends on it, not Python's start-up), under an address-space cap and a time cap; the parent
reads the child's peak memory from wait4. A case that breaks the cap, the clock or the process
counts as a failure like a traceback does.

tests/test_hostile_fuzz.py runs a sample through hypothesis; this module is also the long run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import make_model

REPO = Path(__file__).resolve().parent.parent
MEMORY_CAP_BYTES = 1 << 30        # peak RSS a case may reach on top of the warmed-up parent
ADDRESS_SPACE_SLACK = 3 << 30     # RLIMIT_AS on top of the parent's virtual size (threads reserve stacks)
CASE_SECONDS = 120                # compile + verify of one small mutated model

# Values that break assumptions: zero, negative, 32-bit edges, 64-bit edges.
HOSTILE_INTS = [0, -1, -2, 1, 2, 3, 7, 255, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63)]
HOSTILE_FLOATS = [0.0, -0.0, 1e-45, -1.0, 1e38, -1e38, math.inf, -math.inf, math.nan]
HOSTILE_NAMES = ["", " ", "x", "\x1b[31mred\x1b[0m", "a\r\nb", "a/../../b", "../escape", "/abs", "INT32_MAX",
                 "SIZE_MAX", "EOF", "errno", "stdin", "class", "new", "this", "namespace", "linux", "unix",
                 "main", "NULL", "__x", "_X", "[bold]markup[/bold]", "$(shell touch X)", "`touch X`", "a;b",
                 "\u00e9\u4e2d\U0001f600", "*/", "??=", "n" * 3000, "0digit", "k0", "model"]


class Chooser:
    """Where a mutation's choices come from: a seeded generator (the long run) or hypothesis (the
    test, which can then shrink a failing case)."""

    def integer(self, lo: int, hi: int) -> int:  # inclusive bounds
        raise NotImplementedError

    def pick(self, options: Sequence):  # noqa: ANN201 - any element type
        return options[self.integer(0, len(options) - 1)]


class RandomChooser(Chooser):
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi, endpoint=True))


# -- seed models ---------------------------------------------------------------------------


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _chain() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Neg", ["a"], ["b"], name="neg"),
             helper.make_node("Add", ["b", "c"], ["y"], name="add")]
    return make_model(nodes, {"x": _f32(1, 4, 5, 5)}, ["y"], {"c": _f32(4, 1, 1, seed=1)})


def _conv_net() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "g", "gb"], ["y"], name="gemm", transB=1)]
    inits = {"w": _f32(8, 3, 3, 3, seed=1), "b": _f32(8, seed=2), "g": _f32(10, 8 * 4 * 4, seed=3),
             "gb": _f32(10, seed=4)}
    return make_model(nodes, {"x": _f32(1, 3, 8, 8)}, ["y"], inits)


def _movement() -> onnx.ModelProto:
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], name="concat", axis=1),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[0, 2, 1]),
             helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=-1)]
    return make_model(nodes, {"x": _f32(1, 2, 3, 4)}, ["y"], {"shape": np.array([1, 4, 12], np.int64)})


def _indexing() -> onnx.ModelProto:
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Slice", ["g", "starts", "ends", "axes"], ["s"], name="slice"),
             helper.make_node("Pad", ["s", "pads"], ["p"], name="pad", mode="reflect"),
             helper.make_node("ReduceMean", ["p"], ["y"], name="mean", axes=[2], keepdims=1)]
    inits = {"idx": np.array([0, 2, 1], np.int64), "starts": np.array([1], np.int64),
             "ends": np.array([5], np.int64), "axes": np.array([2], np.int64),
             "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}
    return make_model(nodes, {"x": _f32(1, 3, 6, 5)}, ["y"], inits, opset=17)


def _generators() -> onnx.ModelProto:
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["z"], name="zeros",
                              value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["z", "rf"], ["zr"], name="add"),
             helper.make_node("Tile", ["x", "reps"], ["t"], name="tile"),
             helper.make_node("Expand", ["zr", "eshape"], ["e"], name="expand"),
             helper.make_node("Mul", ["t", "e"], ["y"], name="mul")]
    inits = {"shape": np.array([2, 4], np.int64), "start": np.array(0, np.int64), "limit": np.array(4, np.int64),
             "delta": np.array(1, np.int64), "reps": np.array([1, 2], np.int64),
             "eshape": np.array([2, 4], np.int64)}
    return make_model(nodes, {"x": _f32(2, 2)}, ["y"], inits)


def _resize() -> onnx.ModelProto:
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize", mode="nearest"),
             helper.make_node("AveragePool", ["r"], ["y"], name="avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return make_model(nodes, {"x": _f32(1, 2, 4, 4)}, ["y"], {"scales": np.array([1, 1, 2, 2], np.float32)})


SEED_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "chain": _chain, "conv_net": _conv_net, "movement": _movement, "indexing": _indexing,
    "generators": _generators, "resize": _resize,
    "tiny_cnn": lambda: onnx.load(str(REPO / "examples" / "tiny_cnn.onnx")),
}


# -- mutations -----------------------------------------------------------------------------


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def mutate_dim(model: onnx.ModelProto, c: Chooser) -> str:
    infos = [vi for vi in _value_infos(model) if vi.type.tensor_type.HasField("shape")]
    if not infos:
        return "dim: none"
    vi = c.pick(infos)
    dims = vi.type.tensor_type.shape.dim
    if not dims or c.integer(0, 5) == 0:
        dims.add().dim_value = c.pick(HOSTILE_INTS[:8])
        return f"dim: {vi.name!r} gains a dim"
    d = dims[c.integer(0, len(dims) - 1)]
    how = c.integer(0, 3)
    if how == 0:
        d.dim_param = c.pick(["N", "", "batch", "-1", "2**31"])
        return f"dim: {vi.name!r} symbolic"
    if how == 1:
        d.Clear()
        return f"dim: {vi.name!r} unknown"
    value = c.pick(HOSTILE_INTS)
    d.dim_value = value
    return f"dim: {vi.name!r} = {value}"


def mutate_dtype(model: onnx.ModelProto, c: Chooser) -> str:
    infos = [vi for vi in _value_infos(model) if vi.type.HasField("tensor_type")]
    inits = list(model.graph.initializer)
    value = c.integer(0, 26)
    if inits and (not infos or c.integer(0, 1)):
        t = c.pick(inits)
        t.data_type = value
        return f"dtype: initializer {t.name!r} = {value}"
    if not infos:
        return "dtype: none"
    vi = c.pick(infos)
    vi.type.tensor_type.elem_type = value
    return f"dtype: {vi.name!r} = {value}"


def _all_names(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names = [vi.name for vi in _value_infos(model)] + [t.name for t in g.initializer]
    names += [n for node in g.node for n in [*node.input, *node.output] if n]
    return sorted(set(names))


def mutate_name(model: onnx.ModelProto, c: Chooser) -> str:
    names = _all_names(model)
    if not names:
        return "name: none"
    old, new = c.pick(names), c.pick(HOSTILE_NAMES + names)
    everywhere = c.integer(0, 3) != 0  # mostly a consistent rename; sometimes a dangling one
    g = model.graph
    for vi in _value_infos(model):
        if vi.name == old and (everywhere or c.integer(0, 1)):
            vi.name = new
    for t in g.initializer:
        if t.name == old and (everywhere or c.integer(0, 1)):
            t.name = new
    for node in g.node:
        for field in (node.input, node.output):
            for i, n in enumerate(field):
                if n == old and (everywhere or c.integer(0, 1)):
                    field[i] = new
    if c.integer(0, 4) == 0 and g.node:
        c.pick(list(g.node)).name = c.pick(HOSTILE_NAMES)
    if c.integer(0, 6) == 0:
        g.name = c.pick(HOSTILE_NAMES)
    return f"name: {old!r} -> {new[:40]!r} ({'all' if everywhere else 'some'})"


def mutate_attribute(model: onnx.ModelProto, c: Chooser) -> str:
    nodes = [n for n in model.graph.node]
    if not nodes:
        return "attribute: none"
    node = c.pick(nodes)
    if not node.attribute or c.integer(0, 5) == 0:
        name = c.pick(["axis", "perm", "pads", "strides", "kernel_shape", "dilations", "group", "mode", "to",
                       "keepdims", "axes", "alpha", "bogus"])
        node.attribute.append(helper.make_attribute(name, c.pick([c.pick(HOSTILE_INTS), [c.pick(HOSTILE_INTS)] * 2,
                                                                  "reflect", 0.5])))
        return f"attribute: {node.name}.{name} added"
    attr = c.pick(list(node.attribute))
    how = c.integer(0, 4)
    if how == 0:
        node.attribute.remove(attr)
        return f"attribute: {node.name}.{attr.name} removed"
    if attr.type == onnx.AttributeProto.INT or how == 1:
        attr.type, attr.i = onnx.AttributeProto.INT, c.pick(HOSTILE_INTS)
        del attr.ints[:]
    elif attr.type == onnx.AttributeProto.INTS:
        if attr.ints and how == 2:
            attr.ints[c.integer(0, len(attr.ints) - 1)] = c.pick(HOSTILE_INTS)
        else:
            attr.ints.extend([c.pick(HOSTILE_INTS)] * c.integer(1, 3))
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = c.pick(HOSTILE_FLOATS)
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = c.pick(HOSTILE_NAMES).encode("utf-8")
    elif attr.type == onnx.AttributeProto.TENSOR:
        attr.t.dims[:] = [c.pick(HOSTILE_INTS[:8])]
    else:
        attr.type = c.pick([onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING])
    return f"attribute: {node.name}.{attr.name} changed"


def mutate_initializer(model: onnx.ModelProto, c: Chooser) -> str:
    inits = list(model.graph.initializer)
    if not inits:
        return "initializer: none"
    t = c.pick(inits)
    how = c.integer(0, 5)
    if how == 0:
        t.dims[:] = [c.pick(HOSTILE_INTS) for _ in range(c.integer(0, 3))]
        return f"initializer: {t.name} dims {list(t.dims)}"
    if how == 1 and t.raw_data:
        t.raw_data = t.raw_data[: c.integer(0, len(t.raw_data))]
        return f"initializer: {t.name} raw_data truncated"
    if how == 2:
        arr = numpy_helper.to_array(t).copy() if t.data_type == TensorProto.FLOAT else None
        if arr is not None and arr.size:
            arr.flat[c.integer(0, arr.size - 1)] = c.pick(HOSTILE_FLOATS)
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
            return f"initializer: {t.name} hostile value"
        if t.data_type == TensorProto.INT64:
            arr = numpy_helper.to_array(t).copy()
            if arr.size:
                arr.flat[c.integer(0, arr.size - 1)] = c.pick(HOSTILE_INTS)
                t.CopyFrom(numpy_helper.from_array(arr, t.name))
                return f"initializer: {t.name} hostile int"
    return _to_external(t, c)


def _to_external(t: TensorProto, c: Chooser) -> str:
    """Mark an initializer as external with hostile fields (its data file may or may not exist)."""
    fields = {"location": c.pick(["w.bin", "../w.bin", "/etc/passwd", "w\x00.bin", "", "sub/../w.bin",
                                  "x" * 5000, "w.bin"]),
              "offset": c.pick(["0", "-1", "7", "1.5", "x", str(2**63), "0"]),
              "length": c.pick(["", "-4", str(len(t.raw_data)), str(2**40), "abc"])}
    keep = [k for k in fields if c.integer(0, 3) != 0 or k == "location"]
    if c.integer(0, 5) == 0:
        keep.remove("location")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key in keep:
        if fields[key] != "":
            entry = t.external_data.add()
            entry.key, entry.value = key, fields[key]
    t.ClearField("raw_data")
    return f"initializer: {t.name} external {({k: fields[k][:20] for k in keep})}"


def mutate_node(model: onnx.ModelProto, c: Chooser) -> str:
    g = model.graph
    if not g.node:
        return "node: none"
    i = c.integer(0, len(g.node) - 1)
    node = g.node[i]
    how = c.integer(0, 5)
    if how == 0:
        node.op_type = c.pick(["Relu", "Conv", "Gather", "Loop", "If", "QuantizeLinear", "NoSuchOp", "Pad",
                               "Reshape", "Resize", "Identity", "Sum", "Einsum"])
        return f"node: {node.name} becomes {node.op_type}"
    if how == 1 and node.input:
        del node.input[c.integer(0, len(node.input) - 1)]
        return f"node: {node.name} loses an input"
    if how == 2:
        node.input.append(c.pick(_all_names(model) + ["", "nowhere"]))
        return f"node: {node.name} gains an input"
    if how == 3 and node.output:
        node.input.append(node.output[0])  # a cycle through itself
        return f"node: {node.name} reads its own output"
    if how == 4:
        g.node.insert(c.integer(0, len(g.node)), node)  # two producers of one tensor
        return f"node: {node.name} duplicated"
    del g.node[i]
    return f"node: {node.name} removed"


def mutate_opset(model: onnx.ModelProto, c: Chooser) -> str:
    imp = model.opset_import[0] if model.opset_import else model.opset_import.add()
    how = c.integer(0, 3)
    if how == 0:
        imp.domain = c.pick(["com.microsoft", "bogus", "ai.onnx.ml"])
    else:
        imp.version = c.pick([1, 5, 6, 7, 11, 13, 18, 21, 22, 23, 99, 0, -1])
    if c.integer(0, 4) == 0:
        model.ir_version = c.pick([0, 1, 3, 7, 10, 11, 99, -1])
    return f"opset: {imp.domain or 'ai.onnx'} {imp.version} ir {model.ir_version}"


MUTATIONS: dict[str, Callable[[onnx.ModelProto, Chooser], str]] = {
    "dim": mutate_dim, "dtype": mutate_dtype, "name": mutate_name, "attribute": mutate_attribute,
    "initializer": mutate_initializer, "node": mutate_node, "opset": mutate_opset,
}


def flip_bytes(data: bytes, c: Chooser) -> bytes:
    """Raw byte damage: what a truncated download or a bad disk gives."""
    buf = bytearray(data)
    for _ in range(c.integer(1, 8)):
        buf[c.integer(0, len(buf) - 1)] = c.integer(0, 255)
    if c.integer(0, 3) == 0:
        del buf[c.integer(0, len(buf) - 1):]
    return bytes(buf)


@dataclass
class Case:
    seed_model: str
    steps: list[str]
    data: bytes
    external: bytes | None  # contents of w.bin next to the model, when the mutation made one


def mutated_case(c: Chooser) -> Case:
    seed_name = c.pick(sorted(SEED_MODELS))
    model = SEED_MODELS[seed_name]()
    steps = []
    for _ in range(c.integer(1, 3)):
        kind = c.pick(sorted(MUTATIONS))
        try:
            steps.append(MUTATIONS[kind](model, c))
        except Exception as e:  # noqa: BLE001 - protobuf or onnx refused to apply it: a different case
            steps.append(f"{kind}: skipped ({type(e).__name__})")
    try:
        data = model.SerializeToString()
    except Exception as e:  # noqa: BLE001 - a mutation the protobuf library cannot serialise
        steps.append(f"serialise failed ({type(e).__name__}); seed model used")
        data = SEED_MODELS[seed_name]().SerializeToString()
    if c.integer(0, 9) == 0:
        data = flip_bytes(data, c)
        steps.append("bytes flipped")
    external = bytes(c.integer(0, 4096)) if c.integer(0, 1) else None
    return Case(seed_name, steps, data, external)


# -- running a case ------------------------------------------------------------------------


def _snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _cli(args: list[str], cwd: Path) -> tuple[int, str]:
    """`aot ARGS` in this process (it is a forked child): exit code and everything written to
    stderr, by Python (sys.stderr, which pytest may have replaced) or by a library writing to file
    descriptor 2 itself (onnxruntime's logger)."""
    from aot.cli import app

    code = 0
    previous = os.getcwd()
    os.chdir(cwd)
    python_err = io.StringIO()
    saved = os.dup(2), os.dup(1)
    with tempfile.TemporaryFile() as native_err, open(os.devnull, "wb") as null:
        os.dup2(native_err.fileno(), 2)
        os.dup2(null.fileno(), 1)
        try:
            with contextlib.redirect_stderr(python_err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    app(args=args, prog_name="aot")
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        finally:
            os.dup2(saved[0], 2)
            os.dup2(saved[1], 1)
            os.close(saved[0])
            os.close(saved[1])
            os.chdir(previous)
        native_err.seek(0)
        return code, native_err.read().decode("utf-8", "replace") + python_err.getvalue()


def _one_line_error(stderr: str) -> str | None:
    lines = stderr.strip().splitlines()
    if "Traceback" in stderr:
        return "traceback"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr"
    if not lines[0].startswith("aot: error: "):
        return f"not an aot: error line: {lines[0][:200]}"
    return None


def check_case(case: Case, folder: Path) -> str | None:
    """Run one case in `folder` (this process); None when aot behaved, else what went wrong."""
    model = folder / "m.onnx"
    model.write_bytes(case.data)
    if case.external is not None:
        (folder / "w.bin").write_bytes(case.external)
    before = _snapshot(folder)
    code, stderr = _cli(["compile", "m.onnx", "-o", "out"], folder)
    after = _snapshot(folder)
    if code == 2:
        problem = _one_line_error(stderr)
        if problem:
            return f"compile exit 2, {problem}: {stderr.strip()[-300:]}"
        if after != before:
            return f"compile failed but left {sorted(after - before)[:5]}"
        return None
    if code != 0:
        return f"compile exit {code}: {stderr.strip()[-300:]}"
    if not (folder / "out" / "manifest.json").is_file():
        return "compile exit 0 without a package"
    stray = sorted(p for p in after - before if not p.startswith("out"))
    if stray:
        return f"compile wrote outside -o: {stray[:5]}"
    code, stderr = _cli(["verify", "m.onnx"], folder)
    if code == 0:
        return None
    if code == 2 and "onnxruntime could not run the model" in stderr and not _one_line_error(stderr):
        return None  # aot accepts what onnxruntime refuses: there is no reference to compare with
    return f"verify exit {code}: {stderr.strip()[-300:]}"


@dataclass
class Outcome:
    problem: str | None
    peak_bytes: int
    seconds: float


def _virtual_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def run_isolated(case: Case, root: Path) -> Outcome:
    """check_case in a forked child under the address-space and time caps; its peak RSS measured."""
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    read_end, write_end = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        try:
            limit = _virtual_size() + ADDRESS_SPACE_SLACK
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            signal.alarm(CASE_SECONDS)
            problem = check_case(case, folder)
        except MemoryError:
            problem = "MemoryError (address-space cap)"
        except BaseException as e:  # noqa: BLE001 - report anything, from any depth
            problem = f"harness saw {type(e).__name__}: {str(e)[:200]}"
        os.write(write_end, json.dumps({"problem": problem}).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read()
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - start
    peak = usage.ru_maxrss * 1024
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        problem = "time cap" if sig == signal.SIGALRM else f"killed by signal {sig}"
    else:
        problem = json.loads(message or b'{"problem": "child died silently"}')["problem"]
    if problem is None and peak > _baseline_rss() + MEMORY_CAP_BYTES:
        problem = f"peak memory {peak / 2**20:.0f} MiB"
    shutil.rmtree(folder, ignore_errors=True)
    return Outcome(problem, peak, seconds)


def _baseline_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def warm_up() -> None:
    """Import what a case needs once, in the parent, so forked children start warm."""
    import onnxruntime  # noqa: F401

    import aot.cli  # noqa: F401
    import aot.commands.verify  # noqa: F401
    import aot.compiler  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warm_up()
    failures: list[tuple[int, Case, str]] = []
    kinds: Counter[str] = Counter()
    peak = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aot-fuzz-hostile-") as tmp:
        for seed in range(args.seed, args.seed + args.count):
            case = mutated_case(RandomChooser(seed))
            outcome = run_isolated(case, Path(tmp))
            peak = max(peak, outcome.peak_bytes)
            kinds[case.seed_model] += 1
            if outcome.problem:
                failures.append((seed, case, outcome.problem))
                print(f"seed {seed} ({case.seed_model}; {'; '.join(case.steps)}): {outcome.problem}", flush=True)
        leftovers = sorted(os.listdir(tmp))
    print(f"{args.count} mutated models in {time.monotonic() - started:.0f} s, {len(failures)} failures, "
          f"peak RSS {peak / 2**20:.0f} MiB, leftovers {leftovers[:5]}")
    return 1 if failures or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
