"""A MiniLM-class transformer encoder layer, token ids in: an int64 graph input gathers rows of
an embedding table, then LayerNorm, multi-head attention (MatMul Q/K/V, Transpose, MatMul,
Softmax, MatMul), a residual Add, an Erf GELU and an output MatMul. `aot verify` builds it
under -Werror (a Gather on run-time indices once left 'k0' unused) and compares both backends
with onnxruntime, on ids that include negative ones (counted from the end of the table)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.helpers import make_model, rand
from tests.test_cli import aot

SEQ, VOCAB, DIM, HEADS = 16, 100, 32, 4


def token_ids() -> np.ndarray:
    """Every kind of index: first and last rows, negative ones (-1 is the last row, -VOCAB the
    first) and the rest spread over the table."""
    ids = (np.arange(SEQ, dtype=np.int64) * 37) % VOCAB
    ids[:4] = [0, VOCAB - 1, -1, -VOCAB]
    return ids.reshape(1, SEQ)


def minilm_encoder_layer() -> onnx.ModelProto:
    head_dim = DIM // HEADS
    f32 = np.float32
    nodes = [
        helper.make_node("Gather", ["word_embeddings", "input_ids"], ["embedded"], axis=0),  # [1, S, D]
        helper.make_node("LayerNormalization", ["embedded", "ln_gamma", "ln_beta"], ["hidden"], axis=-1,
                         epsilon=1e-12),
    ]
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            helper.make_node("MatMul", ["hidden", f"w_{name}"], [f"{name}_flat"]),
            helper.make_node("Reshape", [f"{name}_flat", "heads_shape"], [f"{name}_heads"]),  # [1, S, H, dh]
            helper.make_node("Transpose", [f"{name}_heads"], [name], perm=perm),  # k: [1, H, dh, S]
        ]
    nodes += [
        helper.make_node("MatMul", ["q", "k"], ["scores_raw"]),  # [1, H, S, S]
        helper.make_node("Mul", ["scores_raw", "inv_sqrt_dh"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attention"], axis=-1),
        helper.make_node("MatMul", ["attention", "v"], ["context_heads"]),  # [1, H, S, dh]
        helper.make_node("Transpose", ["context_heads"], ["context_seq"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_seq", "model_shape"], ["context"]),
        helper.make_node("Add", ["context", "hidden"], ["residual"]),
        # GELU(x) = x * (1 + erf(x / sqrt(2))) * 0.5, as BERT exports spell it
        helper.make_node("Div", ["residual", "sqrt2"], ["scaled"]),
        helper.make_node("Erf", ["scaled"], ["erf"]),
        helper.make_node("Add", ["erf", "one"], ["erf_plus_1"]),
        helper.make_node("Mul", ["residual", "erf_plus_1"], ["gelu_2x"]),
        helper.make_node("Mul", ["gelu_2x", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "w_out"], ["last_hidden_state"]),
    ]
    scale = 1 / math.sqrt(DIM)
    inits = {
        "word_embeddings": rand(VOCAB, DIM, seed=1), "ln_gamma": 1 + rand(DIM, seed=2) * 0.1,
        "ln_beta": rand(DIM, seed=3) * 0.1, "w_out": rand(DIM, DIM, seed=7) * scale,
        "heads_shape": np.array([1, SEQ, HEADS, head_dim], np.int64), "model_shape": np.array([1, SEQ, DIM], np.int64),
        "inv_sqrt_dh": np.array(1 / math.sqrt(head_dim), f32), "sqrt2": np.array(math.sqrt(2), f32),
        "one": np.array(1, f32), "half": np.array(0.5, f32),
    }
    for seed, name in enumerate("qkv", start=4):
        inits[f"w_{name}"] = rand(DIM, DIM, seed=seed) * scale
    return make_model(nodes, {"input_ids": token_ids()}, ["last_hidden_state"], inits, opset=17)


@pytest.fixture(scope="module")
def encoder_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("minilm")
    onnx.save(minilm_encoder_layer(), folder / "encoder.onnx")
    np.savez(folder / "ids.npz", input_ids=token_ids())
    return folder / "encoder.onnx", folder / "ids.npz"


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_minilm_encoder_verifies_against_onnxruntime(encoder_files: tuple[Path, Path], backend: str) -> None:
    model, ids = encoder_files
    result = aot("verify", str(model), "--backend", backend, "--inputs", str(ids), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True and report["backend"] == backend, report
    (output,) = report["outputs"]
    assert output["name"] == "last_hidden_state" and output["max_abs_err"] < 1e-4, output
