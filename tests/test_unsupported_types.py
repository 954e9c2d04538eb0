"""Models whose inputs or outputs are strings or complex numbers are refused in one line that
names the file, the tensor and what the type is, before anything is written."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.test_cli import aot, assert_user_error


def _model(path: Path, input_type: int, output_type: int, nodes: list[onnx.NodeProto]) -> Path:
    graph = helper.make_graph(nodes, "typed", [helper.make_tensor_value_info("s", input_type, [2])],
                              [helper.make_tensor_value_info("y", output_type, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("command", ["compile", "inspect"])
def test_a_string_input_is_named_as_strings(tmp_path: Path, command: str) -> None:
    model = _model(tmp_path / "tokens.onnx", TensorProto.STRING, TensorProto.FLOAT,
                   [helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)])
    args = [command, str(model)] + (["-o", str(tmp_path / "pkg")] if command == "compile" else [])
    result = aot(*args)
    assert_user_error(result, "tokens.onnx", "input 's' is a tensor of strings", "token ids")
    assert "object" not in result.stderr
    assert not (tmp_path / "pkg").exists()


def test_a_complex_output_is_named(tmp_path: Path) -> None:
    model = _model(tmp_path / "spectrum.onnx", TensorProto.FLOAT, TensorProto.COMPLEX64,
                   [helper.make_node("Cast", ["s"], ["y"], to=TensorProto.COMPLEX64)])
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "spectrum.onnx", "output 'y' is a tensor of complex numbers")
