"""A package depends on the model and the options only: compiling in two processes that differ in
hash seed, working folder, output path, time zone and locale gives byte-identical trees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import make_model

REPO = Path(__file__).resolve().parent.parent


def many_node_model() -> onnx.ModelProto:
    """34 nodes: parallel branches (convs of several shapes, activations, BN, pools) joined by a
    Concat, shared and duplicate constants, a Gemm head and a second output, so that any ordering
    by hash or by address would show up in kernel order, names, the memory plan or the weights."""
    rng = np.random.default_rng(7)
    nodes: list[onnx.NodeProto] = []
    inits: dict[str, np.ndarray] = {}

    def const(name: str, *shape: int) -> str:
        inits[name] = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        return name

    x = rng.standard_normal((1, 6, 12, 12)).astype(np.float32)
    branches = []
    acts = ["Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Elu"]
    for i, act in enumerate(acts):
        k = 1 + 2 * (i % 2)
        nodes.append(helper.make_node("Conv", ["x", const(f"w{i}", 4, 6, k, k), const(f"b{i}", 4)], [f"conv{i}"],
                                      name=f"conv{i}", pads=[k // 2] * 4))
        nodes.append(helper.make_node(act, [f"conv{i}"], [f"act{i}"], name=f"act{i}"))
        bn = [const(f"bn{i}_{p}", 4) for p in ("scale", "bias", "mean")]
        inits[f"bn{i}_var"] = (np.abs(rng.standard_normal(4)) + 0.5).astype(np.float32)
        nodes.append(helper.make_node("BatchNormalization", [f"act{i}", *bn, f"bn{i}_var"], [f"bn{i}"], name=f"bn{i}"))
        # the same per-channel constant value under two names in every branch: CSE merges them
        inits[f"shift{i}"] = np.full((4, 1, 1), 0.25, np.float32)
        nodes.append(helper.make_node("Add", [f"bn{i}", f"shift{i}"], [f"br{i}"], name=f"shift{i}"))
        branches.append(f"br{i}")
    nodes.append(helper.make_node("Concat", branches, ["cat"], name="cat", axis=1))
    nodes.append(helper.make_node("Conv", ["cat", const("wmix", 8, 24, 1, 1)], ["mix"], name="mix"))
    nodes.append(helper.make_node("MaxPool", ["mix"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Mul", ["pool", const("gain", 1, 8, 1, 1)], ["scaled"], name="gain"))
    nodes.append(helper.make_node("GlobalAveragePool", ["scaled"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    nodes.append(helper.make_node("Gemm", ["flat", const("fc_w", 5, 8), const("fc_b", 5)], ["logits"], name="fc",
                                  transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))
    nodes.append(helper.make_node("Transpose", ["scaled"], ["nhwc"], name="nhwc", perm=[0, 2, 3, 1]))
    nodes.append(helper.make_node("ReduceMean", ["nhwc"], ["pooled_hw"], name="mean", axes=[1, 2], keepdims=0))
    return make_model(nodes, {"x": x}, ["probs", "pooled_hw"], inits)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("backend,targets", [("c", ["rpi4"]), ("llvm", ["rpi4", "x86_64"])])
def test_package_is_byte_identical_across_environments(tmp_path: Path, backend: str, targets: list[str]) -> None:
    model = many_node_model()
    assert len(model.graph.node) >= 30
    results = []
    settings = [("0", "UTC", "POSIX", "a"), ("4242", "Asia/Kathmandu", "C.utf8", "somewhere/much/deeper")]
    for hash_seed, tz, locale, where in settings:
        home = tmp_path / where
        (home / "cwd").mkdir(parents=True)
        # the same file name (the package names its source file), in another folder
        onnx.save(model, home / "net.onnx")
        out = home / "out" / "pkg"
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": hash_seed, "TZ": tz, "LC_ALL": locale,
               "LANG": locale}
        targets_args = [a for t in targets for a in ("--target", t)]
        proc = subprocess.run([sys.executable, "-m", "aot", "compile", str(home / "net.onnx"), "-o", str(out),
                               "--name", "net", "--backend", backend, *targets_args],
                              cwd=home / "cwd", env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert not any((home / "cwd").iterdir()), "compile wrote into the working folder"
        results.append(tree(out))
    first, second = results
    assert sorted(first) == sorted(second)
    if backend == "llvm":
        assert any(p.endswith(".o") for p in first) and sum(p.endswith(".o") for p in first) == len(targets)
    differing = sorted(p for p in first if first[p] != second[p])
    assert differing == [], f"files differ between environments: {differing}"
    for data in first.values():  # no path of either environment leaked into the package
        assert b"somewhere" not in data and str(tmp_path).encode() not in data

