"""`aot inspect` (and the report and bench's share of peak, which read the same counts) counts
the multiply-accumulates of recurrent ops: every step multiplies its input by W and its hidden
state by R, for every gate and direction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_cli import aot

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_inspect_counts_recurrent_macs(tmp_path: Path, op: str, direction: str, layout: int) -> None:
    steps, batch, inputs, hidden = 10, 2, 16, 32
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((dirs, GATES[op] * hidden, inputs)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((dirs, GATES[op] * hidden, hidden)).astype(np.float32), "R")
    x_shape = [batch, steps, inputs] if layout else [steps, batch, inputs]
    h_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    node = helper.make_node(op, ["x", "W", "R"], ["", "y_h"], hidden_size=hidden, direction=direction, layout=layout)
    graph = helper.make_graph([node], "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y_h", TensorProto.FLOAT, h_shape)], [w, r])
    path = tmp_path / "recurrent.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                                       ir_version=8).SerializeToString())
    result = aot("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    expected = steps * batch * dirs * GATES[op] * hidden * (inputs + hidden)
    assert json.loads(result.stdout)["macs"] == expected


def test_inspect_counts_matmul_nbits_macs(tmp_path: Path) -> None:
    """A 4-bit weight-only MatMul does the multiply-adds of the float MatMul it stands for."""
    from tests.test_ops_weight_only import _nbits_model

    path = tmp_path / "nbits.onnx"
    path.write_bytes(_nbits_model((1, 8, 64), 48, bits=4, block=32, zero=True).SerializeToString())
    result = aot("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["macs"] == 8 * 64 * 48
