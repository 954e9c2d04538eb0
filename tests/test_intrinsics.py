"""The table of special kernel-IR operations (aot/kernel/intrinsics.py) against what uses it.

Each operation has a numpy meaning, an LLVM builder and C macros; runtime_c/aot_kernels.h (written
by hand) defines those macros on every ISA branch and the portable one, which a small evaluator of
the header's #if tree checks per ISA (tests/intrinsics_header.py). And each operation runs in a
tiny kernel through both backends, on this machine and under qemu for the Arm boards, against the
numpy meaning on random inputs.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import aot.kernel.ir as core
from aot.backends.llvm.intrinsics import LLVM_BUILDERS
from aot.compiler import compile as compile_model
from aot.errors import BuildError
from aot.host.run import HostModel
from aot.kernel.intrinsics import (
    INTRINSICS,
    DotAdd,
    ExtendLoad,
    LaneSplat,
    PairDotAdd,
    PairHalvesLoad,
    PairHalvesPart,
    PairHalvesSplat,
    PairLoad,
    PairSplat,
    QuadLoad,
    QuadSplat,
    TapProducts,
    VecRoundEven,
    VecZip,
    WidenAdd,
    WidenLoad,
    intrinsic_of,
)
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, MulAdd, VecArith, VecConvert, VecLoad, VecStore, const
from aot.lowering import registry
from aot.lowering.registry import qualified_op_type
from aot.targets import load_target
from tests.helpers import host_runs, make_model
from tests.intrinsics_header import ISA_CONFIGURATIONS, defined_macros, header_configurations

HEADER = Path(__file__).resolve().parent.parent / "runtime_c" / "aot_kernels.h"

# ------------------------------------------------------------------------------------------------
# Probes: tiny kernels that make each operation's value observable. An operand-only node (the
# pair-order loads, whose register layout is the ISA's) is observed through the dot step reading it.

Stores = list[tuple[int, Expr]]  # (offset in the output, the vector stored there)


@dataclass(frozen=True)
class Probe:
    """`model`: the graph the kernel stands in for, which fixes its buffers' types: "u8" / "s8"
    (a: 4x64 uint8 / int8, b: 64x16 int8, y: 64 int32), "f32" (a, y: 64 float32), "i8f" / "i16f"
    (a: 64 int8 / int16, y: 64 float32). `full_weights`: b may hold -128."""

    model: str
    stores: Callable[[dict[str, Buffer]], Stores]
    full_weights: bool = False


def _at(n: int) -> Expr:
    return const(n, INDEX)


def _quads(buf: Buffer, at: int, lanes: int) -> QuadLoad:
    return QuadLoad(buf, _at(at), 4 * lanes)


def _lane_counts(stores: Callable[[int, int], Expr], start: int = 0) -> Stores:
    """One store of 16, 8 and 4 lanes, each from its own offsets."""
    out, offset = [], start
    for n in (16, 8, 4):
        out.append((offset, stores(n, offset)))
        offset += n
    return out


def _dot_unsigned(b: dict[str, Buffer]) -> Stores:
    return _lane_counts(lambda n, at: DotAdd(_quads(b["a"], at, n), _quads(b["a"], 4 * n + at, n),
                                             QuadSplat(b["b"], _at(4 * at + 12), 4, n)))


def _dot_signed(b: dict[str, Buffer]) -> Stores:
    stores: Stores = [(0, DotAdd(_quads(b["a"], 0, 8), _quads(b["a"], 32, 8), QuadSplat(b["b"], _at(40), 4, 8), True)),
                      (8, DotAdd(_quads(b["a"], 64, 4), _quads(b["a"], 80, 4), QuadSplat(b["b"], _at(8), 4, 4), True))]
    by_lane = [(12 + 4 * lane, DotAdd(_quads(b["a"], 96, 4), _quads(b["a"], 112 + 4 * lane, 4),
                                      LaneSplat(_quads(b["b"], 200, 4), lane), True)) for lane in range(4)]
    return stores + by_lane


def _pairs(b: dict[str, Buffer]) -> Stores:
    return [(4 * k, PairDotAdd(_quads(b["a"], 16 * k, 4), PairLoad(b["a"], _at(64 + 16 * k), 16),
                               PairSplat(b["b"], _at(4 * k + 20), 4))) for k in range(4)]


def _pair_halves(b: dict[str, Buffer]) -> Stores:
    a, w = b["a"], b["b"]
    quads = PairHalvesLoad(a, _at(64), 32)
    stores: Stores = [(4 * half, PairDotAdd(_quads(a, 16 * half, 4), quads, PairHalvesSplat(w, _at(12), 4), half))
                      for half in (0, 1)]
    both = PairHalvesSplat(w, _at(36), 8)
    stores += [(8 + 4 * part, PairDotAdd(_quads(a, 128 + 16 * part, 4), PairHalvesLoad(a, _at(160), 32),
                                         PairHalvesPart(both, part), 1 - part)) for part in (0, 1)]
    return stores


def _taps(b: dict[str, Buffer]) -> Stores:
    a, w = b["a"], b["b"]
    pair = TapProducts(VecLoad(a, _at(0), 8), Load(w, _at(3)), VecLoad(a, _at(8), 8), Load(w, _at(70)))
    single = TapProducts(VecLoad(a, _at(16), 8), Load(w, _at(129)))
    return [(4 * k, WidenAdd(_quads(a, 64 + 16 * k, 4), taps, half))
            for k, (taps, half) in enumerate([(pair, 0), (pair, 1), (single, 0), (single, 1)])]


def _extend(b: dict[str, Buffer]) -> Stores:
    """Through float and back (exact): the header defines the extending loads beside the float
    vectors of their width (an int8 depthwise loop requantises in them)."""
    return _lane_counts(lambda n, at: VecConvert(VecConvert(ExtendLoad(b["a"], _at(3 * at + 5), n), f"float32x{n}"),
                                                 f"int32x{n}"))


def _widen(b: dict[str, Buffer]) -> Stores:
    return _lane_counts(lambda n, at: WidenLoad(b["a"], _at(at), n))


def _round_even(b: dict[str, Buffer]) -> Stores:
    """Rounded as floats, and rounded into int32 (VecConvert of a VecRoundEven: one macro)."""
    out, offset = [], 0
    for n in (16, 8, 4):
        values = VecLoad(b["a"], _at(offset), n)
        out.append((offset, VecRoundEven(values)))
        out.append((offset + n, VecConvert(VecConvert(VecRoundEven(VecLoad(b["a"], _at(offset + n), n)),
                                                      f"int32x{n}"), f"float32x{n}")))
        offset += 2 * n
    return out


def _lanes(b: dict[str, Buffer]) -> Stores:
    x = b["a"]
    splats: Stores = [(4 * lane, LaneSplat(VecLoad(x, _at(20), 4), lane)) for lane in range(4)]
    return splats + [(16 + 4 * lane, MulAdd(VecLoad(x, _at(24), 4), LaneSplat(VecLoad(x, _at(28), 4), lane),
                                            VecLoad(x, _at(32 + 4 * lane), 4))) for lane in range(4)]


def _zip(b: dict[str, Buffer]) -> Stores:
    x = b["a"]
    return [(4 * high, VecZip(VecLoad(x, _at(8), 4), VecLoad(x, _at(40), 4), bool(high))) for high in (0, 1)]


PROBES: dict[type[Expr], list[Probe]] = {
    WidenLoad: [Probe("i8f", _widen), Probe("i16f", _widen)],
    ExtendLoad: [Probe("s8", _extend), Probe("u8", _extend)],
    QuadLoad: [Probe("u8", lambda b: _lane_counts(lambda n, at: _quads(b["a"], 4 * at, n)))],
    QuadSplat: [Probe("s8", lambda b: _lane_counts(lambda n, at: QuadSplat(b["b"], _at(4 * n + 1), 4, n)),
                      full_weights=True)],
    DotAdd: [Probe("u8", _dot_unsigned, full_weights=True), Probe("s8", _dot_signed)],
    PairLoad: [Probe("s8", _pairs)],
    PairSplat: [Probe("s8", _pairs)],
    PairDotAdd: [Probe("s8", _pairs), Probe("s8", _pair_halves)],
    PairHalvesLoad: [Probe("s8", _pair_halves)],
    PairHalvesSplat: [Probe("s8", _pair_halves)],
    PairHalvesPart: [Probe("s8", _pair_halves)],
    TapProducts: [Probe("s8", _taps)],
    WidenAdd: [Probe("s8", _taps)],
    LaneSplat: [Probe("f32", _lanes), Probe("s8", _dot_signed)],
    VecZip: [Probe("f32", _zip)],
    VecRoundEven: [Probe("f32", _round_even)],
}
NAMES = sorted(spec.name for spec in INTRINSICS.values())
BY_NAME = {spec.name: spec for spec in INTRINSICS.values()}

# ------------------------------------------------------------------------------------------------
# The numpy side: a probe's stores evaluated with the table's meanings (and the few core nodes
# the probes use around them).


def evaluate(e: Expr, memory: dict[str, np.ndarray]) -> Any:
    spec = intrinsic_of(e)
    if spec is not None and spec.is_load:
        assert isinstance(e, VecLoad)
        return spec.semantics(e, memory=memory[e.buffer.name][int(evaluate(e.index, memory)):])
    if spec is not None:
        operands = {f.name: evaluate(getattr(e, f.name), memory) for f in dataclasses.fields(e)
                    if isinstance(getattr(e, f.name), Expr)}
        return spec.semantics(e, **operands)
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Load):
        return memory[e.buffer.name][int(evaluate(e.index, memory))]
    if isinstance(e, VecLoad):
        start = int(evaluate(e.index, memory))
        return memory[e.buffer.name][start:start + e.lanes].copy()
    if isinstance(e, VecConvert):
        return evaluate(e.a, memory).astype(np.float32 if e.dtype.startswith("float") else np.int32)
    if isinstance(e, MulAdd):
        return evaluate(e.acc, memory) + evaluate(e.a, memory) * evaluate(e.b, memory)
    if isinstance(e, VecArith):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply}[e.op](evaluate(e.a, memory),
                                                                             evaluate(e.b, memory))
    raise TypeError(f"the probes' evaluator has no meaning for {e!r}")


def probe_inputs(probe: Probe, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = -128 if probe.full_weights else -127
    if probe.model in ("u8", "s8"):
        a = rng.integers(0, 256, (4, 64)).astype(np.uint8)
        return {"a": a if probe.model == "u8" else a.view(np.int8),
                "b": rng.integers(low, 128, (64, 16)).astype(np.int8)}
    if probe.model == "f32":  # quarters (ties to round), small enough for exact products and sums
        values = np.round(rng.uniform(-1000.0, 1000.0, 64) * 4) / 4
        values[:6] = [0.5, -0.5, 1.5, 2.5, -2.5, -0.25]
        return {"a": values.astype(np.float32)}
    dtype = np.int8 if probe.model == "i8f" else np.int16
    info = np.iinfo(dtype)
    return {"a": rng.integers(info.min, info.max + 1, 64).astype(dtype)}


def probe_model(probe: Probe, inputs: dict[str, np.ndarray]) -> Any:
    if probe.model in ("u8", "s8"):
        return make_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], inputs, ["y"])
    if probe.model == "f32":
        return make_model([helper.make_node("Identity", ["a"], ["y"])], inputs, ["y"])
    # int16 inputs stand in as int32 arrays (the helpers' type map has no int16), then retyped
    example = inputs["a"] if probe.model == "i8f" else inputs["a"].astype(np.int32)
    model = make_model([helper.make_node("Cast", ["a"], ["y"], to=TensorProto.FLOAT)], {"a": example}, ["y"])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT8 if probe.model == "i8f" else TensorProto.INT16
    return model


def install_probe(monkeypatch: pytest.MonkeyPatch, probe: Probe, written: Stores, bound: dict[str, Buffer]) -> None:
    """The probe's kernel stands in (for this test only) for the lowering of its model's node;
    `written` and `bound` receive its stores and its buffers by input name."""
    def lower(graph_node: Any, ctx: Any) -> None:
        kb = ctx.builder(graph_node)
        views = [kb.input(t) for t in graph_node.inputs]
        y = kb.output(graph_node.outputs[0])
        bound.update({name: v.buffer for name, v in zip("ab", views)})
        written[:] = probe.stores({"y": y.buffer, **bound})
        ctx.emit(kb, [VecStore(y.buffer, _at(offset), value) for offset, value in written])

    op = {"u8": "MatMulInteger", "s8": "MatMulInteger", "f32": "Identity"}.get(probe.model, "Cast")
    monkeypatch.setitem(registry._LOWERINGS, qualified_op_type("", op), lower)


def expected_and_got(written: Stores, memory: dict[str, np.ndarray],
                     outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stored lanes as numpy computes them and as the kernel did."""
    want, got = [], []
    flat = outputs.reshape(-1)
    for offset, value in written:
        lanes = np.asarray(evaluate(value, memory)).reshape(-1)
        want.append(lanes)
        got.append(flat[offset:offset + len(lanes)])
    return np.concatenate(want), np.concatenate(got)


def run_probe(monkeypatch: pytest.MonkeyPatch, op: str, index: int, backend: str, target: str | None,
              *, qemu: bool = False) -> None:
    probe = PROBES[BY_NAME[op].node][index]
    inputs = probe_inputs(probe, zlib.crc32(f"{op}{index}".encode()))
    written: Stores = []
    bound: dict[str, Buffer] = {}
    install_probe(monkeypatch, probe, written, bound)
    package = compile_model(probe_model(probe, inputs), backend=backend, target=target)
    if qemu:
        from aot.toolchain.target_build import TargetModel

        outputs = TargetModel.build(package, load_target(target)).run(dict(inputs))["y"]
    else:
        host = HostModel.build(package, opt="-O1", extra_cflags="-pedantic -DAOT_ALLOW_SLOW_VECTORS")
        assert host.backend == backend, f"built the {host.backend} variant for backend={backend}"
        outputs = host.run(dict(inputs))["y"]
    memory = {bound[name].name: array.reshape(-1) for name, array in inputs.items()}
    want, got = expected_and_got(written, memory, outputs)
    np.testing.assert_array_equal(got, want, err_msg=f"{op} probe {index} ({backend}, {target or 'host'})")


def _cases(ops: list[str]) -> list[tuple[str, int]]:
    return [(op, i) for op in ops for i in range(len(PROBES[BY_NAME[op].node]))]


# ------------------------------------------------------------------------------------------------
# The table itself.


def test_every_special_operation_has_a_meaning_a_builder_macros_and_a_probe() -> None:
    for spec in INTRINSICS.values():
        assert callable(spec.semantics), spec.name
        assert spec.llvm in LLVM_BUILDERS, f"{spec.name}: no LLVM builder {spec.llvm!r}"
        assert spec.c_forms and all(form.macros and form.wants for form in spec.c_forms), spec.name
        assert {form.lanes for form in spec.c_forms} <= set(spec.lanes), spec.name
        assert PROBES.get(spec.node), f"{spec.name}: no probe runs it"
    assert set(PROBES) == set(INTRINSICS)


def test_the_core_ir_declares_no_special_node() -> None:
    """aot/kernel/ir.py holds the core; a special node lives in the table's module, in the table."""
    import aot.kernel.intrinsics as special

    core_nodes = {obj for obj in vars(core).values() if isinstance(obj, type) and issubclass(obj, Expr)}
    assert not core_nodes & set(INTRINSICS)
    declared = {obj for obj in vars(special).values() if isinstance(obj, type) and issubclass(obj, Expr)
                and obj.__module__ == special.__name__}
    assert declared == set(INTRINSICS)


def test_the_numpy_meanings_refuse_inputs_outside_their_domain() -> None:
    acc = np.zeros(4, np.int32)
    quads = np.full(16, -128, np.int8).view(np.int32)
    a = Buffer("a", "int8", 64, False)
    with pytest.raises(ValueError, match="domain"):
        BY_NAME["PairDotAdd"].semantics(PairDotAdd(Const(0, "int32"), Const(0, "int32"), Const(0, "int32")),
                                        acc=acc, a=quads, b=quads)
    with pytest.raises(ValueError, match="domain"):
        BY_NAME["TapProducts"].semantics(TapProducts(VecLoad(a, _at(0), 8), Const(-128, "int8")),
                                         a=np.ones(8, np.int8), w=np.int8(-128))


@pytest.mark.parametrize("op", NAMES)
def test_the_c_backend_prints_the_macros_the_table_names(monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """The C printer and the table agree: the operation's probes print every macro of its forms
    (so the header check below covers what the C backend prints)."""
    spec = BY_NAME[op]
    printed: set[str] = set()
    for probe in PROBES[spec.node]:
        inputs = probe_inputs(probe, 0)
        install_probe(monkeypatch, probe, [], {})
        package = compile_model(probe_model(probe, inputs), backend="c")
        source = next(data.decode() for name, data in package.files.items() if name.endswith(".c"))
        printed |= set(re.findall(r"\b(AOT_\w+)\(", source))
    named = {macro for form in spec.c_forms for macro in form.macros}
    assert named <= printed, f"{op}: the table names {sorted(named - printed)}, which its probes do not print"


# ------------------------------------------------------------------------------------------------
# The header: every macro of every form defined on every ISA branch.


@pytest.mark.parametrize("isa", sorted(header_configurations(HEADER.read_text())))
def test_the_header_defines_every_macro_the_table_prints(isa: str) -> None:
    text = HEADER.read_text()
    predefined = header_configurations(text)[isa]
    missing = []
    for spec in INTRINSICS.values():
        for form in spec.c_forms:
            defined = defined_macros(text, predefined | {f"AOT_WANT_{want}" for want in form.wants})
            missing += [f"{spec.name} ({form.lanes} lanes): {macro}" for macro in form.macros if macro not in defined]
    assert not missing, f"runtime_c/aot_kernels.h for {isa} lacks: {missing}"


def test_the_header_check_sees_new_isa_branches() -> None:
    """A branch for an ISA the configurations do not name (a RISC-V vector form, say) gets a
    configuration of its own, so its macros are checked too."""
    text = "#if defined(__riscv_vector)\n#define AOT_X 1\n#endif\n"
    configurations = header_configurations(text)
    riscv = [name for name in configurations if "riscv" in name]
    assert riscv and "AOT_X" in defined_macros(text, configurations[riscv[0]])
    assert set(ISA_CONFIGURATIONS) <= set(configurations)


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
@pytest.mark.parametrize("flags", ["", "-march=x86-64-v3", "-march=x86-64-v4", "-DAOT_NO_VECTOR_EXTENSIONS"])
def test_the_header_evaluator_agrees_with_gcc(flags: str) -> None:
    """The #if evaluator's macros are the preprocessor's, where this machine's gcc can tell."""
    wants = [f"-DAOT_WANT_{w}{n}" for w in ("F32X", "I32X") for n in (4, 8, 16)]
    listing = subprocess.run(["gcc", "-E", "-dM", *flags.split(), *wants, str(HEADER)], capture_output=True,
                             text=True, check=True).stdout
    gcc = {line.split()[1].split("(")[0] for line in listing.splitlines() if line.startswith("#define AOT_")}
    predefined = {line.split()[1] for line in subprocess.run(
        ["gcc", "-E", "-dM", *flags.split(), "-x", "c", "/dev/null"], capture_output=True, text=True,
        check=True).stdout.splitlines() if line.startswith("#define ")}
    ours = {m for m in defined_macros(HEADER.read_text(), predefined | {w[2:] for w in wants}) if m.startswith("AOT_")}
    assert ours - {w[2:] for w in wants} == gcc - {w[2:] for w in wants}


# ------------------------------------------------------------------------------------------------
# Each operation through both backends against its numpy meaning.


@pytest.mark.parametrize("target", [None, "x86_64-v3", "x86_64-v4-vnni"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize(("op", "probe"), _cases(NAMES))
def test_each_operation_matches_its_numpy_meaning(monkeypatch: pytest.MonkeyPatch, op: str, probe: int,
                                                  backend: str, target: str | None) -> None:
    if target is not None and not host_runs(target):
        pytest.skip(f"this machine does not run {target}")
    run_probe(monkeypatch, op, probe, backend, target)


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3", "riscv64-rvv256"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize(("op", "probe"), _cases(NAMES))
def test_each_operation_matches_its_numpy_meaning_under_qemu(monkeypatch: pytest.MonkeyPatch, op: str, probe: int,
                                                             backend: str, target: str) -> None:
    from tests.conformance import cross_unavailable

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    try:
        run_probe(monkeypatch, op, probe, backend, target, qemu=True)
    except BuildError as e:
        if "decode_save_opc" not in str(e):
            raise
        # qemu 7.2 (Debian 12) aborts translating RVV's vfncvt.rtz; qemu 8.1 translates it
        pytest.xfail("qemu-riscv64 7.2 crashes translating a vector conversion (vfncvt.rtz)")


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize(("op", "probe"), _cases(["DotAdd", "LaneSplat"]))
def test_sdot_matches_its_numpy_meaning_under_qemu(monkeypatch: pytest.MonkeyPatch, op: str, probe: int,
                                                   backend: str) -> None:
    """rpi5's dot-product extension: sdot, and sdot by a lane."""
    from tests.conformance import cross_unavailable

    problem = cross_unavailable("rpi5")
    if problem:
        pytest.skip(problem)
    run_probe(monkeypatch, op, probe, backend, "rpi5", qemu=True)
