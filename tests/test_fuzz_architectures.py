"""A fixed sample of the architecture fuzzer (the long run: python -m tests.fuzz_architectures)."""

from __future__ import annotations

import pytest

from tests.fuzz_architectures import check, random_architecture


def test_the_generator_writes_every_block_and_both_families() -> None:
    ops: set[str] = set()
    quantized = 0
    for seed in range(40):
        model, _, quantize = random_architecture(seed)
        ops |= {n.op_type for n in model.graph.node}
        quantized += quantize
    # residual/SE/MBConv/C2f/FPN/shuffle blocks, attention, LayerNorm and GELU all appear
    assert {"Conv", "GlobalAveragePool", "Split", "Concat", "Resize", "Transpose", "Softmax", "MatMul",
            "LayerNormalization", "Erf", "HardSigmoid", "BatchNormalization"} <= ops
    assert 0 < quantized < 40


# The sample: float and int8 (QDQ) graphs of both families, on both backends.
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("seed", range(10))
def test_random_architecture_matches_onnxruntime(seed: int, backend: str) -> None:
    problem = check(seed, backend)
    assert problem is None, problem
