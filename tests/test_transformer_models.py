"""Transformer blocks as the exporters write them (tests/transformer_graphs.py: ViT, BERT with a
padded attention mask, Whisper's encoder, GPT-2's causal block with a Where or an added mask,
torch's scaled_dot_product_attention export) compiled by aot and verified against onnxruntime
with both backends on the host, in float and with int8/int4 weight-only quantized projections
(DequantizeLinear per column or blocked, com.microsoft MatMulNBits: each on every block with C,
each on one block with LLVM); the quantized packages hold the quantized bytes. One long-sequence
Whisper layer (1500 frames) runs with the C backend, and a ViT and a GPT-2 block are cross-built
for rpi4 and rpi3 and run under qemu.

The reference is `aot verify`'s onnxruntime run: for weight-only models it keeps onnxruntime's
basic optimizations, as its extended ones would quantize the activations too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from aot.commands.verify import compare, onnxruntime_outputs
from aot.compiler import compile as compile_model
from aot.targets import load_target
from aot.toolchain.target_build import TargetModel
from tests import transformer_graphs as tg
from tests.conformance import cross_unavailable
from tests.helpers import assert_outputs_match, run_aot

BACKENDS = ["c", "llvm"]
TOLERANCE = 1e-4  # assert_outputs_match's default

FLOAT_BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "vit": lambda: tg.vit_block(tokens=17, width=64, heads=2),
    "vit_fused_qkv": lambda: tg.vit_block(tokens=24, width=64, heads=4, fused_qkv=True),
    "bert": lambda: tg.bert_encoder(layers=2, tokens=32, width=64, heads=4, vocab=100),
    "whisper": lambda: tg.whisper_encoder_block(frames=40, width=64, heads=2),
    "causal_where": lambda: tg.causal_decoder_block(tokens=32, width=64, heads=4),
    "causal_add": lambda: tg.causal_decoder_block(tokens=32, width=64, heads=4, mask_style="add"),
    "sdpa": lambda: tg.sdpa_export_block(tokens=32, width=64, heads=2),
    "sdpa_mask": lambda: tg.sdpa_export_block(tokens=48, width=64, heads=2, mask=True),
}

QUANTIZED_BASES = ["vit", "bert", "causal_where"]
QUANTIZERS: dict[str, Callable[[onnx.ModelProto], onnx.ModelProto]] = {
    "int8_column": lambda m: tg.quantize_weights(m, bits=8, block=0),
    "int8_blocked": lambda m: tg.quantize_weights(m, bits=8, block=32),
    "int4_blocked": lambda m: tg.quantize_weights(m, bits=4, block=32),
    "nbits4": lambda m: tg.matmul_nbits(m, bits=4, block=32),
    "nbits8": lambda m: tg.matmul_nbits(m, bits=8, block=32),
}


# Every quantizer on every base with C; with LLVM each quantizer once, on the bases in turn.
QUANTIZED_CASES = [pytest.param(base, quantizer, "c", id=f"{base}-{quantizer}-c")
                   for base in QUANTIZED_BASES for quantizer in QUANTIZERS] + [
    pytest.param(QUANTIZED_BASES[i % len(QUANTIZED_BASES)], quantizer, "llvm",
                 id=f"{QUANTIZED_BASES[i % len(QUANTIZED_BASES)]}-{quantizer}-llvm")
    for i, quantizer in enumerate(QUANTIZERS)]


def quantized_block(base: str, quantizer: str) -> onnx.ModelProto:
    return QUANTIZERS[quantizer](FLOAT_BLOCKS[base]())


def assert_matches_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray], folder: Path,
                             backend: str) -> None:
    """aot's outputs (built and run on the host by run_aot) against `aot verify`'s onnxruntime run."""
    path = folder / "model.onnx"
    onnx.save(model, path)
    expected = onnxruntime_outputs(str(path), inputs, [o.name for o in model.graph.output])
    ours = run_aot(model, inputs, backend=backend)
    for name, reference in expected.items():
        result = compare(name, ours[name], reference, TOLERANCE)
        assert result.passed, f"output {name!r}: max abs err {result.max_abs_err:.3g} (scale {result.scale:.3g})"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(FLOAT_BLOCKS))
def test_float_block_matches_onnxruntime(name: str, backend: str, tmp_path: Path) -> None:
    model = FLOAT_BLOCKS[name]()
    assert_matches_reference(model, tg.example_inputs(model), tmp_path, backend)


@pytest.mark.parametrize("builder", [tg.vit_block, tg.bert_encoder, tg.whisper_encoder_block,
                                     tg.causal_decoder_block, tg.sdpa_export_block])
def test_default_sizes_are_valid_models(builder: Callable[[], onnx.ModelProto]) -> None:
    """At their default sizes (ViT-Tiny, BERT of 128 tokens, Whisper-tiny's 1500 frames, ...) the
    builders write models that onnx's checker and strict shape inference accept."""
    model = builder()
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    (output,) = inferred.graph.output
    assert output.name == "last_hidden_state" and output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_whisper_block_of_1500_frames_matches_onnxruntime(tmp_path: Path) -> None:
    """Whisper's full 30-second window: scores of [2, 1500, 1500] per layer."""
    model = tg.whisper_encoder_block(frames=1500, width=64, heads=2)
    assert_matches_reference(model, tg.example_inputs(model), tmp_path, "c")


@pytest.mark.parametrize(("base", "quantizer", "backend"), QUANTIZED_CASES)
def test_weight_only_block_matches_onnxruntime(base: str, quantizer: str, backend: str, tmp_path: Path) -> None:
    model = quantized_block(base, quantizer)
    assert_matches_reference(model, tg.example_inputs(model), tmp_path, backend)


@pytest.mark.parametrize("quantizer", list(QUANTIZERS))
@pytest.mark.parametrize("base", QUANTIZED_BASES)
def test_weight_only_package_holds_the_quantized_payload(base: str, quantizer: str) -> None:
    """The package's weights are within 5% of the model's initializers as stored (4-bit codes two
    to a byte): the projections stay integers, never float32."""
    model = quantized_block(base, quantizer)
    payload = tg.payload_bytes(model)
    manifest = compile_model(model).manifest
    stored = int(manifest["weights_bytes"])
    assert stored <= 1.05 * payload, (stored, payload)
    assert manifest["model_weights_bytes"] <= payload  # `aot inspect` counts 4-bit codes two to a byte too
    assert stored < 0.6 * tg.payload_bytes(FLOAT_BLOCKS[base]()), stored


def test_quantizers_replace_every_projection_and_only_those() -> None:
    """Every constant-weight MatMul is quantized; the attention's own products stay float."""
    model = FLOAT_BLOCKS["causal_where"]()
    projections = len(tg.matmul_weights(model))
    assert projections == 4
    dequantized = op_types(tg.quantize_weights(model, bits=4, block=32))
    assert dequantized.count("DequantizeLinear") == projections and dequantized.count("MatMul") == 6
    nbits = op_types(tg.matmul_nbits(model, bits=4, block=32))
    assert nbits.count("MatMulNBits") == projections and nbits.count("MatMul") == 2


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


QEMU_BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "vit": lambda: tg.vit_block(tokens=16, width=32, heads=2),
    "causal_where": lambda: tg.causal_decoder_block(tokens=16, width=32, heads=2),
}


@pytest.mark.qemu
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(QEMU_BLOCKS))
def test_block_matches_onnxruntime_under_qemu(name: str, backend: str, target: str) -> None:
    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    model = QEMU_BLOCKS[name]()
    inputs = tg.example_inputs(model)
    built = TargetModel.build(compile_model(model, backend=backend, target=target), load_target(target))
    assert_outputs_match(built.run(dict(inputs)), model, inputs, what=f"{name} on {target} ")
