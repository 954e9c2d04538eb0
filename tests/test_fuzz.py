"""A fixed sample of the differential fuzzer's random graphs (the long run: python -m tests.fuzz_graphs)."""

from __future__ import annotations

import pytest

from tests.fuzz_graphs import check, random_model


def test_generator_makes_valid_varied_graphs() -> None:
    ops = set()
    for seed in range(30):
        model, _ = random_model(seed)
        ops |= {n.op_type for n in model.graph.node}
    assert {"Conv", "Concat", "Gemm", "Softmax", "MaxPool"} <= ops


# 155: a one-channel im2col convolution's column matrix looked like a depthwise conv, whose flat
# form TiledConv.emit did not know (KeyError 'flat').
# 194: a Concat part copied inside its own output (nested Concats sharing a part) once gave a
# kernel two restrict pointers to the same memory.
@pytest.mark.parametrize("seed", [*range(60), 155, 194])
def test_random_graph_matches_onnxruntime(seed: int) -> None:
    problem = check(seed)
    assert problem is None, problem
