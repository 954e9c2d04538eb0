"""The polynomial float32 exp / tanh / erf / log of aot/kernel/transcendentals.py: within the error
bounds its docstring documents, against float64, with the special values it promises, both in
its numpy model and through compiled packages of both backends (whose results must be the
model's, fused or unfused: the printers print the formula, nothing else)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from aot.kernel import transcendentals as tr
from tests.helpers import make_model, run_aot

# Max error in ulp (of the float32 nearest the exact value), as the module docstring states.
BOUNDS = {"exp": 1.01, "tanh": 1.5, "erf": 1.5, "log": 1.0, "sigmoid": 2.5, "expm1": 1.5, "log1p": 1.75}
ONNX_OPS = {"exp": "Exp", "tanh": "Tanh", "erf": "Erf", "log": "Log", "sigmoid": "Sigmoid"}
FLT_MIN = np.float32(tr.FLT_MIN)


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """float64 values of the function at float32 points."""
    with np.errstate(all="ignore"):  # casting signalling NaNs
        wide = x.astype(np.float64)
        if name == "erf":
            return np.frompyfunc(math.erf, 1, 1)(wide).astype(np.float64)
        if name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-wide))
        return {"exp": np.exp, "tanh": np.tanh, "log": np.log, "expm1": np.expm1, "log1p": np.log1p}[name](wide)


def ulp_errors(name: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Errors in ulp where the exact result is a finite float32 (a normal one for exp and
    sigmoid, which flush below FLT_MIN), and the points they are at."""
    exact = reference(name, x)
    with np.errstate(all="ignore"):
        nearest = exact.astype(np.float32)
        checked = np.isfinite(nearest) & np.isfinite(x)
        if name in ("exp", "sigmoid"):
            checked &= nearest >= FLT_MIN
        if name in ("expm1", "log1p"):  # subnormal results: x itself, not measured in ulp of FLT_MIN
            checked &= np.abs(nearest) >= FLT_MIN
        spacing = np.spacing(np.abs(nearest[checked])).astype(np.float64)
        return np.abs(y[checked].astype(np.float64) - exact[checked]) / spacing, x[checked]


def model_values(name: str, x: np.ndarray, fused: bool) -> np.ndarray:
    alg = tr.NumpyAlgebra(fused)
    with np.errstate(all="ignore"):
        if name == "sigmoid":  # as aot/ops/elementwise.py lowers it: 1 / (1 + exp(-x))
            return alg.div(alg.f(1.0), alg.add(alg.f(1.0), tr.exp(alg, alg.neg(x))))
        return tr.FUNCTIONS[name](alg, x)


def sample(count: int, seed: int = 0) -> np.ndarray:
    """Bit patterns drawn uniformly (every exponent equally often), then the special values."""
    bits = np.random.default_rng(seed).integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45, 1e-40, FLT_MIN,
                         tr.EXP_MAX, np.nextafter(np.float32(tr.EXP_MAX), np.float32(np.inf)), tr.EXP_MIN,
                         np.nextafter(np.float32(tr.EXP_MIN), np.float32(-np.inf)), 3.4028235e38, -3.4028235e38,
                         tr.TANH_SMALL, tr.ERF_SMALL, tr.ERF_SATURATE, 9.0, -9.0, 44.5, -44.5], np.float32)
    return np.concatenate([bits.view(np.float32), specials])


def strided_sweep(step: int) -> np.ndarray:
    """Every step-th float32 bit pattern (a prime step visits every exponent and sign)."""
    return np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)


SPECIALS = {
    "exp": [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, 0.0), (0.0, 1.0), (-0.0, 1.0), (88.8, np.inf),
            (1e30, np.inf), (-87.5, 0.0), (-1e30, 0.0)],
    "tanh": [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (50.0, 1.0), (-50.0, -1.0),
             (1e-40, 1e-40)],
    "erf": [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (4.0, 1.0), (1e30, 1.0),
            (-1e30, -1.0)],
    "log": [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, np.nan), (0.0, -np.inf), (-0.0, -np.inf), (-1.0, np.nan),
            (1.0, 0.0)],
    "sigmoid": [(np.nan, np.nan), (np.inf, 1.0), (-np.inf, 0.0), (0.0, 0.5), (100.0, 1.0), (-100.0, 0.0)],
    "expm1": [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, -1.0), (0.0, 0.0), (88.8, np.inf), (1e30, np.inf),
              (-20.0, -1.0), (-1e30, -1.0), (1e-30, 1e-30), (-1e-30, -1e-30)],
    "log1p": [(np.nan, np.nan), (np.inf, np.inf), (-np.inf, np.nan), (-1.0, -np.inf), (-2.0, np.nan), (0.0, 0.0),
              (1e-30, 1e-30), (-1e-30, -1e-30), (3.4028235e38, 88.72284)],
}


def assert_specials(name: str, results: np.ndarray) -> None:
    """`results`: the function at the points of SPECIALS[name], in order."""
    for (x, want), y in zip(SPECIALS[name], results.tolist(), strict=True):
        if math.isnan(want):
            assert math.isnan(y), f"{name}({x}) = {y}, want NaN"
        else:
            want32 = float(np.float32(want))
            assert y == want32 and math.copysign(1, y) == math.copysign(1, want32), f"{name}({x}) = {y}, want {want32}"


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", list(BOUNDS))
def test_model_is_within_its_bound(name: str, fused: bool) -> None:
    """The numpy model of the formula on every 997th float32 bit pattern (4.3 million, spread
    over the whole range), and at the special values."""
    x = strided_sweep(997)
    errors, at = ulp_errors(name, x, model_values(name, x, fused))
    worst = int(errors.argmax())
    assert errors[worst] <= BOUNDS[name], f"{name}: {errors[worst]:.3f} ulp at x = {at[worst]!r}"
    points = np.array([x for x, _ in SPECIALS[name]], np.float32)
    assert_specials(name, model_values(name, points, fused))


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("name", list(ONNX_OPS))
def test_compiled_op_is_the_model_within_its_bound(name: str, backend: str) -> None:
    """A one-op model compiled and run: every output is the model's value (fused or unfused,
    as the compiler contracts the multiply-adds), so within the bound; specials as documented."""
    x = np.concatenate([sample(1 << 20), np.array([p for p, _ in SPECIALS[name]], np.float32)])
    model = make_model([helper.make_node(ONNX_OPS[name], ["x"], ["y"])], {"x": x}, ["y"])
    y = run_aot(model, {"x": x}, backend=backend)["y"]
    assert y.dtype == np.float32 and y.shape == x.shape
    same = np.zeros(x.shape, bool)
    for fused in (False, True):
        expected = model_values(name, x, fused)
        same |= (y.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(y) & np.isnan(expected))
    assert same.all(), f"{name}: {(~same).sum()} outputs differ from the model, e.g. at x = {x[~same][:5]}"
    errors, at = ulp_errors(name, x, y)
    worst = int(errors.argmax())
    assert errors[worst] <= BOUNDS[name], f"{name}: {errors[worst]:.3f} ulp at x = {at[worst]!r}"
    assert_specials(name, y[-len(SPECIALS[name]):])


def test_float64_keeps_the_c_library() -> None:
    """Only float32 is rewritten: float64 results are the C library's, as Python's math.exp."""
    x = np.linspace(-5, 5, 101)
    model = make_model([helper.make_node("Exp", ["x"], ["y"])], {"x": x}, ["y"])
    libm = np.frompyfunc(math.exp, 1, 1)(x).astype(np.float64)
    assert np.array_equal(run_aot(model, {"x": x}, backend="c")["y"], libm)


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_built_model_calls_no_float_transcendental_from_libm(tmp_path, backend: str) -> None:  # noqa: ANN001
    """Conv+SiLU, Gemm+GELU (Erf form), Softmax, Tanh and Log in one model: the built library's
    model code leaves no expf / tanhf / erff / logf undefined (`nm -u`), on either backend."""
    import shutil
    import subprocess

    from aot.compiler import compile as compile_model
    from aot.host.run import host_variant

    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils)")
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["cs"]), helper.make_node("Mul", ["c", "cs"], ["silu"]),
        helper.make_node("GlobalAveragePool", ["silu"], ["pool"]), helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "g", "gb"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["hd"]), helper.make_node("Erf", ["hd"], ["he"]),
        helper.make_node("Add", ["he", "one"], ["h1"]), helper.make_node("Mul", ["h", "h1"], ["h2"]),
        helper.make_node("Mul", ["h2", "half"], ["gelu"]),
        helper.make_node("Softmax", ["gelu"], ["p"], axis=1), helper.make_node("Tanh", ["p"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["t1"]), helper.make_node("Log", ["t1"], ["y"]),
    ]
    model = make_model(nodes, {"x": np.zeros((1, 8, 12, 12), np.float32)}, ["y"], {
        "w": rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2,
        "g": rng.standard_normal((16, 32)).astype(np.float32) * 0.2,
        "gb": rng.standard_normal(32).astype(np.float32) * 0.1,
        "sqrt2": np.array(math.sqrt(2), np.float32), "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32)})
    package = compile_model(model, name="libm_free", backend=backend)
    folder = package.write(tmp_path / "pkg")
    variant, target = host_variant(package)
    extra = [f"BACKEND={variant}", f"TARGET={target or ''}"] if backend == "llvm" else []
    subprocess.run(["make", "-s", "-C", str(folder), *extra, "liblibm_free.a"], check=True, capture_output=True)
    undefined = subprocess.run(["nm", "-u", str(folder / "liblibm_free.a")], check=True, capture_output=True,
                               text=True).stdout.split()
    assert not {"expf", "tanhf", "erff", "logf"} & set(undefined), undefined
    inputs = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    from tests.helpers import run_onnxruntime

    np.testing.assert_allclose(package.run(inputs)["y"], run_onnxruntime(model, inputs)["y"], rtol=1e-5, atol=1e-5)


# Activations whose exp / expm1 / log1p are polynomials in eager selects, and Pow by constants,
# against onnxruntime (whose exp and log1p are its own: a few ulp apart), with their extremes.
ACTIVATIONS = {
    "Elu": ({"alpha": 0.7}, 10), "Selu": ({}, 10), "Celu": ({"alpha": 1.3}, 12), "Softplus": ({}, 13),
    "Mish": ({}, 18),
}


def activation_inputs() -> np.ndarray:
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(4000) * 4, rng.uniform(-100, 100, 2000), rng.uniform(-1e-3, 1e-3, 500),
                        [0.0, -0.0, np.inf, -np.inf, 1e-30, -1e-30, 88.0, -88.0, 100.0, -100.0, 20.0, -17.5, 1e30,
                         np.nan]])
    return x.astype(np.float32)


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_activation_matches_onnxruntime(op: str, backend: str) -> None:
    from tests.helpers import run_onnxruntime

    attrs, opset = ACTIVATIONS[op]
    x = activation_inputs()
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=opset)
    ours, ref = run_aot(model, {"x": x}, backend=backend)["y"], run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)  # NaN where onnxruntime has NaN


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("exponent", [2.0, 3.0, 4.0, 0.5, 1.0, -1.0, -2.0, 2.5])
def test_pow_by_a_constant_matches_onnxruntime(exponent: float, backend: str) -> None:
    """Pow by the constants written as multiplications (or sqrt), and by another one (2.5,
    the C library's powf), within an ulp or two of onnxruntime, infinities and -0 as pow has them."""
    from tests.helpers import run_onnxruntime

    x = np.concatenate([np.abs(activation_inputs()) if exponent in (0.5, 2.5) else activation_inputs(),
                        [-0.0, np.inf, -np.inf]]).astype(np.float32)
    model = make_model([helper.make_node("Pow", ["x", "p"], ["y"])], {"x": x}, ["y"],
                       {"p": np.array(exponent, np.float32)})
    ours, ref = run_aot(model, {"x": x}, backend=backend)["y"], run_onnxruntime(model, {"x": x})["y"]
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(ours, ref, rtol=3e-7, atol=0)
    assert (np.signbit(ours) == np.signbit(ref))[np.isfinite(ref) & (ref == 0)].all()


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_activations_and_pow_call_nothing_from_libm(tmp_path, backend: str) -> None:  # noqa: ANN001
    """Elu, Selu, Celu, Softplus, Mish and Pow by 2, 0.5 and 3 in one model: no expf / expm1f /
    log1pf / powf / tanhf / logf left undefined in the built library (`nm -u`)."""
    import shutil
    import subprocess

    from aot.compiler import compile as compile_model
    from aot.host.run import host_variant

    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils)")
    nodes = [helper.make_node("Elu", ["x"], ["a"]), helper.make_node("Selu", ["a"], ["b"]),
             helper.make_node("Celu", ["b"], ["c"]), helper.make_node("Softplus", ["c"], ["d"]),
             helper.make_node("Mish", ["d"], ["e"]), helper.make_node("Pow", ["e", "two"], ["f"]),
             helper.make_node("Pow", ["f", "half"], ["g"]), helper.make_node("Pow", ["g", "three"], ["y"])]
    x = activation_inputs()[:4000].reshape(40, 100)
    model = make_model(nodes, {"x": x}, ["y"], {"two": np.array(2, np.float32), "half": np.array(0.5, np.float32),
                                               "three": np.array(3, np.float32)}, opset=18)
    package = compile_model(model, name="act_free", backend=backend)
    folder = package.write(tmp_path / "pkg")
    variant, target = host_variant(package)
    extra = [f"BACKEND={variant}", f"TARGET={target or ''}"] if backend == "llvm" else []
    subprocess.run(["make", "-s", "-C", str(folder), *extra, "libact_free.a"], check=True, capture_output=True)
    undefined = subprocess.run(["nm", "-u", str(folder / "libact_free.a")], check=True, capture_output=True,
                               text=True).stdout.split()
    assert not {"expf", "expm1f", "log1pf", "powf", "tanhf", "logf"} & set(undefined), undefined
