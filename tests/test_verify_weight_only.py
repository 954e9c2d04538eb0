"""`aot verify` on a weight-only quantized model compares with what the graph says: onnxruntime's
extended optimizations would quantize the activations on the fly, 0.2 off on these outputs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tests.test_cli import aot
from tests.test_ops_weight_only import _dq_model


@pytest.mark.parametrize(("dtype", "layout"), [("int8", "column"), ("int4", "block")])
def test_verify_passes_a_weight_only_model(tmp_path: Path, dtype: str, layout: str) -> None:
    model, _ = _dq_model(dtype, layout)
    path = tmp_path / "weight_only.onnx"
    onnx.save(model, str(path))
    result = aot("verify", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("PASSED")
