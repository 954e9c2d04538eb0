"""The model classes of benchmarks/model_classes.py (benchmarks/class_graphs.py: a DBNet-like FPN text detector with
ConvTranspose and Resize at 320x320, a YOLOv8-like C2f block with SiLU, Split and Concat, a
BERT-like encoder layer with int64 input_ids and attention_mask, a Conv + LSTM voice-activity
model with its state in and out), each verified against onnxruntime with both backends, on the
host and cross-built for rpi4 under qemu-aarch64. Their fused kernels are checked too: the
ConvTranspose runs its BatchNorm and Relu in its epilogue, and SiLU runs in its Conv's."""

from __future__ import annotations

import pytest

from aot.compiler import compile as compile_model
from aot.targets import load_target
from aot.toolchain.target_build import TargetModel
from benchmarks.class_graphs import CLASS_GRAPHS
from tests.conformance import cross_unavailable
from tests.helpers import assert_outputs_match, run_aot
from tests.test_ops_conv_transpose import kernel_ops  # ops per kernel: "ConvTranspose+Relu" is one kernel

BACKENDS = ["c", "llvm"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CLASS_GRAPHS))
def test_model_class_matches_onnxruntime_on_the_host(name: str, backend: str) -> None:
    model, inputs = CLASS_GRAPHS[name]()
    assert_outputs_match(run_aot(model, inputs, backend=backend), model, inputs, what=f"{name} ")


@pytest.mark.qemu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CLASS_GRAPHS))
def test_model_class_matches_onnxruntime_on_rpi4_under_qemu(name: str, backend: str) -> None:
    problem = cross_unavailable("rpi4")
    if problem:
        pytest.skip(problem)
    model, inputs = CLASS_GRAPHS[name]()
    built = TargetModel.build(compile_model(model, backend=backend, target="rpi4"), load_target("rpi4"))
    assert_outputs_match(built.run(dict(inputs)), model, inputs, what=f"{name} ")


def test_fpn_upsampling_runs_batchnorm_and_relu_in_the_conv_transpose_epilogue() -> None:
    kernels = kernel_ops(CLASS_GRAPHS["fpn_text_detector"]()[0])
    # BatchNorm folds into the weights and bias; Relu and Sigmoid run on the tile's accumulators.
    assert kernels[-2:] == ["ConvTranspose+Relu", "ConvTranspose+Sigmoid"], kernels
    assert not {"BatchNormalization", "Relu", "Sigmoid", "HardSigmoid", "Mul"} & set(kernels), kernels


def test_c2f_silu_runs_in_every_conv_epilogue() -> None:
    kernels = kernel_ops(CLASS_GRAPHS["c2f_block"]()[0])
    convs = [k for k in kernels if k.startswith("Conv")]
    assert convs and all("Sigmoid+Mul" in k for k in convs), kernels
    assert not any(k in ("Sigmoid", "Mul") for k in kernels), kernels
