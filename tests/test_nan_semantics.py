"""NaN, infinities, signed zeros and denormals through the max/min-like ops (docs/numerics.md).

aot's rules, the same on both backends and every vector ISA:
* MaxPool, GlobalMaxPool, Max, Min, Relu and Clip propagate NaN: a NaN anywhere in a window, or
  in either operand, gives NaN (IEEE 754-2019 maximum/minimum, as PyTorch's max_pool2d);
* ReduceMax, ReduceMin, ArgMax and ArgMin keep the first element and replace it only by a strictly
  greater (smaller) one, so a NaN counts only where it comes first (onnxruntime's scalar paths);
* TopK orders NaN above every number.
Each case is checked against a numpy statement of the rule, and against onnxruntime where
onnxruntime's CPU kernels follow one rule for every position (every op but MaxPool and
GlobalMaxPool, whose kernels drop a NaN depending on where it sits in the window).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import make_model, run_aot, run_onnxruntime

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3e38, -1.0], np.float32)


def _rows(count: int, width: int) -> np.ndarray:
    """`count` rows of `width` values cycling through SPECIAL, each row shifted by one more."""
    return np.stack([np.resize(np.roll(SPECIAL, r), width) for r in range(count)]).astype(np.float32)


def _window_max(x: np.ndarray, kernel: int, pad: int) -> np.ndarray:
    """1-D max pooling along the last axis, stride 1, NaN-propagating (np.max)."""
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=-1)
    return windows.max(axis=-1)


def _first_wins(x: np.ndarray, better: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """The reduction along the last axis that keeps the first element until a strictly better one."""
    acc = x[..., 0].copy()
    for k in range(1, x.shape[-1]):
        v = x[..., k]
        acc = np.where(better(v, acc), v, acc)
    return acc


def _first_best_index(x: np.ndarray) -> np.ndarray:
    """ArgMax along the last axis by the first-element rule of _first_wins."""
    acc, best = x[..., 0].copy(), np.zeros(x.shape[:-1], np.int64)
    for k in range(1, x.shape[-1]):
        v = x[..., k]
        better = v > acc
        acc, best = np.where(better, v, acc), np.where(better, k, best)
    return best


def _cases() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray, bool]]:
    """name -> (model, inputs, expected output "y", whether onnxruntime agrees at every position)."""
    x1 = _rows(8, 24)[None]                       # [1, 8, 24]
    x2 = np.stack([_rows(8, 24), _rows(8, 24)[::-1]])[None]  # [1, 2, 8, 24]
    long = _rows(4, 40)[None]                     # rows longer than any vector
    cases = {
        "MaxPool 1-D": (make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3], pads=[1, 1])],
                                   {"x": x1}, ["y"]), {"x": x1}, _window_max(x1, 3, 1), False),
        "MaxPool 2-D": (make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 3], pads=[0, 1, 0, 1])],
                                   {"x": x2}, ["y"]), {"x": x2}, _window_max(x2, 3, 1), False),
        "GlobalMaxPool": (make_model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], {"x": x2}, ["y"]),
                          {"x": x2}, x2.max(axis=(2, 3), keepdims=True), False),
        "Relu": (make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": long}, ["y"]), {"x": long},
                 np.where(np.isnan(long), long, np.maximum(long, 0)), True),
    }
    other = np.ascontiguousarray(long[..., ::-1])
    for op, fn in (("Max", np.maximum), ("Min", np.minimum)):
        cases[op] = (make_model([helper.make_node(op, ["x", "z"], ["y"])], {"x": long, "z": other}, ["y"]),
                     {"x": long, "z": other}, fn(long, other), True)
    lo, hi = np.float32(-1.0), np.float32(1.0)
    clip = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    cases["Clip"] = (make_model([clip], {"x": long}, ["y"], {"lo": lo, "hi": hi}), {"x": long},
                     np.where(np.isnan(long), long, np.clip(long, lo, hi)), True)
    for op, better in (("ReduceMax", np.greater), ("ReduceMin", np.less)):
        node = helper.make_node(op, ["x"], ["y"], axes=[2], keepdims=0)
        cases[op] = (make_model([node], {"x": long}, ["y"]), {"x": long}, _first_wins(long, better),
                     op == "ReduceMax")
    arg = helper.make_node("ArgMax", ["x"], ["y"], axis=2, keepdims=0)
    cases["ArgMax"] = (make_model([arg], {"x": x1}, ["y"]), {"x": x1}, _first_best_index(x1), True)
    return cases


CASES = _cases()


def _same(ours: np.ndarray, expected: np.ndarray) -> bool:
    """Equal values and NaN where NaN (a zero's sign after max(0, -0) is not part of the rules, as
    with C's fmax)."""
    if ours.dtype.kind != "f":
        return np.array_equal(ours, expected)
    return np.array_equal(ours, expected.astype(ours.dtype), equal_nan=True)


def _flushed(x: np.ndarray) -> np.ndarray:
    """`x` with its denormals as zeros (32-bit NEON's flush-to-zero)."""
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x).astype(x.dtype)


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("target", [None, "x86_64-v3", "x86_64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_max_min_ops_follow_the_nan_rules(name: str, target: str | None, backend: str) -> None:
    model, inputs, expected, _ = CASES[name]
    ours = run_aot(model, inputs, backend=backend, target=target)["y"]
    assert _same(ours, expected), f"{name}: ours {ours.ravel()[:12]}, rule {expected.ravel()[:12]}"


@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[3]))
def test_onnxruntime_follows_the_same_rules_where_its_kernels_have_one(name: str) -> None:
    model, inputs, expected, _ = CASES[name]
    assert _same(run_onnxruntime(model, inputs)["y"], expected)


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("target", ["rpi4", "rpi3", "riscv64-rvv256", "riscv64"])
def test_the_rules_hold_on_arm_and_riscv_under_qemu(target: str, backend: str) -> None:
    """On Arm and RISC-V too; 32-bit NEON flushes denormals to zero in its vector float instructions, so on
    rpi3 a denormal may read as a zero of the same sign there (docs/numerics.md)."""
    from aot.compiler import compile as compile_model
    from aot.targets import load_target
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    for name, (model, inputs, expected, _) in sorted(CASES.items()):
        package = compile_model(model, backend=backend, target=target)
        ours = TargetModel.build(package, load_target(target)).run(dict(inputs))["y"]
        if target == "rpi3" and ours.dtype.kind == "f":
            ours, expected = _flushed(ours), _flushed(expected)
        assert _same(ours, expected), f"{name} on {target}: ours {ours.ravel()[:12]}, rule {expected.ravel()[:12]}"
