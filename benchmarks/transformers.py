"""Real transformer architectures, built from their transformers configs with seeded random weights
(nothing downloaded), exported by torch.onnx, compiled by aot, verified against onnxruntime and
timed against it with aot's own bench (aot.commands.bench: one process, one thread, interleaved
rounds, medians) for the host's preset (-march=native) and for x86_64-v3 (AVX2 code built with
-march=x86-64-v3). Printed as one markdown table per target, then Whisper-tiny's encoder arena
at 250 to 1500 frames; a model that fails to export, compile, build or verify is a row with its
one-line error.

    python -m benchmarks.transformers [--only NAME ...] [--targets host,x86_64-v3] [--rounds N]
                                      [--onnxruntime-isa native|target]

Needs the transformers-bench extra (pip install -e '.[transformers-bench]': torch 2.13.0,
transformers, onnx_ir for onnxruntime's weight quantizer, openvino). Models:

- ViT-tiny: 12 layers, hidden 192, 3 heads, 224x224 in patches of 16 (197 tokens);
- BERT-mini: 4 layers, hidden 256, 4 heads, 128 tokens of which the last 28 are padding
  (attention_mask 0);
- Whisper-tiny encoder: 4 layers, d_model 384, 6 heads, input_features [1, 80, 3000] (1500 frames);
- MiniLM-L6 (BertModel: 6 layers, hidden 384, 12 heads, 128 tokens, padded as BERT-mini): float;
  with int8 weights (every MatMul weight an int8 initializer behind a per-column symmetric
  DequantizeLinear, written here: onnxruntime 1.32's MatMulNBitsQuantizer makes no 8-bit QDQ for
  MatMul); and with int4 weights (com.microsoft MatMulNBits, block 32, onnxruntime's quantizer).

The export is torch.onnx.export(dynamo=False), the TorchScript exporter (torch 2.13 still has it;
its default, dynamo=True, needs onnxscript), at opset 18, batch 1, static shapes, with transformers'
"eager" attention (MatMul, Softmax, MatMul; "sdpa" adds Reshapes and, under a mask, IsNaN/Where).
Exported models are cached in $AOT_BENCH_MODELS (default ~/.cache/aot-bench-models)/transformers.
OpenVINO, where it imports, is timed on the host's own vector features (f32 precision, one
thread, its own timing loop, not interleaved) and shown in the host table only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aot.commands.bench import bench
from aot.commands.verify import verify_package
from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.host.run import HostModel
from aot.targets import host_preset_name
from benchmarks.model_classes import _machine_flags, _one_line, cache_root

OPSET = 18
ATTENTION = "eager"
TOKENS = 128
PADDING = 28  # BERT inputs' trailing padding tokens, masked out by attention_mask
WHISPER_FRAMES = (250, 500, 1000, 1500)

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Transformer:
    name: str
    slug: str  # the cached .onnx file's name
    inputs: Callable[[], Inputs]
    export: Callable[[], tuple[Any, tuple[Any, ...]]] | None = None  # (torch module, example args)
    base: str | None = None  # a quantized variant: the slug of the float model it rewrites
    quantize: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None


def _last_hidden_state(model: Any, names: tuple[str, ...]) -> Any:
    """`model` as a torch module of positional inputs (`names`, in order) that returns only
    last_hidden_state: no pooler output, no dict, nothing for the exporter to flatten."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args))).last_hidden_state

    return LastHiddenState().eval()


def _token_inputs() -> Inputs:
    """A [CLS] ... [SEP] sentence of TOKENS - PADDING wordpieces, then padding (id 0, mask 0)."""
    ids = np.zeros((1, TOKENS), np.int64)
    mask = np.zeros((1, TOKENS), np.int64)
    real = TOKENS - PADDING
    ids[0, :real] = np.random.default_rng(0).integers(1000, 30000, real)
    ids[0, 0], ids[0, real - 1] = 101, 102
    mask[0, :real] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _image_inputs() -> Inputs:
    return {"pixel_values": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}


def _mel_inputs(frames: int) -> Inputs:
    """Log-mel-like features in [-1, 1], two mel samples per encoder frame (conv2 has stride 2)."""
    return {"input_features": np.random.default_rng(0).uniform(-1, 1, (1, 80, 2 * frames)).astype(np.float32)}


def _torch_args(inputs: Inputs) -> tuple[Any, ...]:
    import torch

    return tuple(torch.from_numpy(a) for a in inputs.values())


def _vit_tiny() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                       image_size=224, patch_size=16, attn_implementation=ATTENTION)
    model = ViTModel(config, add_pooling_layer=False)
    return _last_hidden_state(model, ("pixel_values",)), _torch_args(_image_inputs())


def _bert(*, layers: int, hidden: int, heads: int, intermediate: int) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate, attn_implementation=ATTENTION)
    model = BertModel(config, add_pooling_layer=False)
    return _last_hidden_state(model, tuple(_token_inputs())), _torch_args(_token_inputs())


def _whisper_encoder(frames: int) -> tuple[Any, tuple[Any, ...]]:
    """Whisper-tiny's encoder; max_source_positions=frames sizes its positional embedding (and the
    input length it accepts) for a shorter clip than the 30 s (1500 frames) it was trained on."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                           num_mel_bins=80, max_source_positions=frames, attn_implementation=ATTENTION)
    return _last_hidden_state(WhisperEncoder(config), ("input_features",)), _torch_args(_mel_inputs(frames))


def _int8_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every MatMul whose B is a 2-D float initializer reads it through DequantizeLinear from an
    int8 initializer, with one symmetric scale per output column (axis 1)."""
    weights = {i.name: i for i in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        source = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if source is None or source.data_type != TensorProto.FLOAT or len(source.dims) != 2:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(source)
        scale = (np.maximum(np.abs(w).max(axis=0), 1e-12) / 127).astype(np.float32)
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        name = node.input[1]
        model.graph.initializer.extend([numpy_helper.from_array(q, f"{name}_int8"),
                                        numpy_helper.from_array(scale, f"{name}_scale")])
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_int8", f"{name}_scale"], [f"{name}_dequantized"],
                                      name=f"{node.name}_weight_dequantize", axis=1))
        node.input[1] = f"{name}_dequantized"
        nodes.append(node)
    used = {i for n in nodes for i in n.input}
    kept = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _int4_matmulnbits(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's weight-only quantizer: MatMul -> com.microsoft MatMulNBits, 4 bits, block 32."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True)
    quantizer.process()
    return quantizer.model.model


_MINILM = dict(layers=6, hidden=384, heads=12, intermediate=1536)
MODELS = [
    Transformer("ViT-tiny 224x224 (197 tokens)", "vit_tiny", _image_inputs, export=_vit_tiny),
    Transformer(f"BERT-mini seq {TOKENS} ({PADDING} padded)", "bert_mini", _token_inputs,
                export=lambda: _bert(layers=4, hidden=256, heads=4, intermediate=1024)),
    Transformer("Whisper-tiny encoder 1500 frames", "whisper_tiny_encoder_1500", lambda: _mel_inputs(1500),
                export=lambda: _whisper_encoder(1500)),
    Transformer(f"MiniLM-L6 seq {TOKENS} float", "minilm_l6", _token_inputs, export=lambda: _bert(**_MINILM)),
    Transformer(f"MiniLM-L6 seq {TOKENS} int8 weights (DequantizeLinear)", "minilm_l6_int8", _token_inputs,
                base="minilm_l6", quantize=_int8_weights),
    Transformer(f"MiniLM-L6 seq {TOKENS} int4 weights (MatMulNBits block 32)", "minilm_l6_int4", _token_inputs,
                base="minilm_l6", quantize=_int4_matmulnbits),
]
MODELS_BY_SLUG = {m.slug: m for m in MODELS}


def _whisper_at(frames: int) -> Transformer:
    return Transformer(f"Whisper-tiny encoder {frames} frames", f"whisper_tiny_encoder_{frames}",
                       lambda: _mel_inputs(frames), export=lambda: _whisper_encoder(frames))


def _exported(model: Transformer) -> onnx.ModelProto:
    """The model's ONNX: exported from torch, or its float base's, rewritten by model.quantize."""
    if model.quantize is not None:
        assert model.base is not None
        return model.quantize(onnx.load(model_path(MODELS_BY_SLUG[model.base])))
    import torch

    assert model.export is not None
    module, args = model.export()
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), warnings.catch_warnings():
        # The tracer's notes that shape checks become constants: at one static shape, as intended.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        exported = Path(tmp) / "model.onnx"
        torch.onnx.export(module, args, os.fspath(exported), input_names=list(model.inputs()),
                          output_names=["last_hidden_state"], opset_version=OPSET, dynamo=False)
        return onnx.load(os.fspath(exported))


def model_path(model: Transformer) -> Path:
    """The model's static-shape .onnx in the cache, exported on first use."""
    path = cache_root() / "transformers" / f"{model.slug}.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    onnx.save(_exported(model), os.fspath(staging))
    staging.replace(path)  # whole or not at all: a half-written model is never taken from the cache
    return path


@dataclass
class Row:
    model: str
    ours_us: float = float("nan")
    onnxruntime_us: float = float("nan")
    onnxruntime_rss_bytes: int = 0  # the growth of onnxruntime's peak resident memory over its run
    openvino: str = "-"
    arena_bytes: int = 0
    weights_bytes: int = 0
    verify: str = ""
    error: str = ""


def _openvino_us(path: Path, inputs: Inputs, rounds: int) -> str:
    """OpenVINO's median time per run in microseconds (f32, one thread, the host's vector
    features), or why there is none."""
    try:
        import openvino
    except ImportError:
        return "not installed"
    try:
        config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                  "INFERENCE_PRECISION_HINT": "f32"}  # f32: bf16 by default on CPUs with AVX-512 BF16
        request = openvino.Core().compile_model(os.fspath(path), "CPU", config).create_infer_request()
    except Exception as e:  # OpenVINO's exception types are not part of its public API
        return f"error: {_one_line(e)[:120]}"
    feeds = list(inputs.values())
    for _ in range(3):
        request.infer(feeds)
    samples = []
    for _ in range(rounds):
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < 0.05 or runs < 2:
            request.infer(feeds)
            runs += 1
        samples.append((time.perf_counter() - start) / runs)
    return f"{statistics.median(samples) * 1e6:.0f}"


def measure(model: Transformer, target: str, rounds: int, onnxruntime_isa: str = "native") -> Row:
    """Export (cached), compile, build, verify and time one model for one target ("host": this
    machine's preset with -march=native, as `aot bench` without --target)."""
    preset = host_preset_name() if target == "host" else target
    row = Row(model.name)
    try:
        path = model_path(model)
        inputs = model.inputs()
        package = compile_model(path, None, target=preset)
        row.arena_bytes, row.weights_bytes = package.arena_bytes, int(package.manifest["weights_bytes"])
        with HostModel.build(package, opt="-O3", target_cflags=_machine_flags(target)) as built:
            result = verify_package(package, os.fspath(path), inputs=inputs, built=built)
        worst = max(result.outputs, key=lambda o: o.max_abs_err)
        row.verify = ("ok" if result.passed else "FAILED") + f" (max abs err {worst.max_abs_err:.2g})"
        timed = bench(os.fspath(path), None, rounds=rounds, target=None if target == "host" else target,
                      inputs=inputs, onnxruntime_isa=onnxruntime_isa)
        row.ours_us, row.onnxruntime_us = timed.ours_ms * 1e3, timed.onnxruntime_ms * 1e3
        row.onnxruntime_rss_bytes = timed.onnxruntime_peak_rss_delta_bytes
        if target == "host":
            row.openvino = _openvino_us(path, inputs, rounds)
    except Exception as e:  # an export, compile, build or onnxruntime failure is this model's row
        row.error = f"{type(e).__name__}: {_one_line(e)}" if not isinstance(e, AotError) else _one_line(e)
    return row


def table(rows: list[Row]) -> str:
    lines = ["| model | aot us | onnxruntime us | ratio | openvino us | arena bytes | weights bytes | "
             "onnxruntime bytes (peak RSS growth) | verify |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if np.isnan(r.ours_us):
            lines.append(f"| {r.model} | - | - | - | - | {r.arena_bytes or '-'} | {r.weights_bytes or '-'} | - | "
                         f"{r.verify or 'error'}: {r.error} |")
        else:
            lines.append(f"| {r.model} | {r.ours_us:.0f} | {r.onnxruntime_us:.0f} | "
                         f"{r.ours_us / r.onnxruntime_us:.2f} | {r.openvino} | {r.arena_bytes} | "
                         f"{r.weights_bytes} | {r.onnxruntime_rss_bytes} | {r.verify} |")
    return "\n".join(lines)


def whisper_arena_table(targets: list[str]) -> str:
    """Whisper-tiny encoder's arena (aot's one buffer for every intermediate tensor) by clip length."""
    presets = [host_preset_name() if t == "host" else t for t in targets]
    lines = ["| frames | input_features | " + " | ".join(f"arena bytes ({p})" for p in presets) + " | weights bytes |",
             "|---|---|" + "---|" * len(presets) + "---|"]
    for frames in WHISPER_FRAMES:
        try:
            path = model_path(_whisper_at(frames))
            packages = [compile_model(path, None, target=p) for p in presets]
            arenas = " | ".join(str(p.arena_bytes) for p in packages)
            lines.append(f"| {frames} | [1, 80, {2 * frames}] | {arenas} | {packages[0].manifest['weights_bytes']} |")
        except Exception as e:  # this clip length's row carries its error
            lines.append(f"| {frames} | [1, 80, {2 * frames}] | {type(e).__name__}: {_one_line(e)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="host,x86_64-v3")
    parser.add_argument("--only", nargs="*", help="substrings of the model names to run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--onnxruntime-isa", default="native", choices=["native", "target"],
                        help="target: onnxruntime's kernels for each target's vector features (aot bench)")
    args = parser.parse_args(argv)
    models = [m for m in MODELS if not args.only or any(s.lower() in m.name.lower() for s in args.only)]
    targets = args.targets.split(",")
    for target in targets:
        rows = []
        for model in models:
            rows.append(measure(model, target, args.rounds, args.onnxruntime_isa))
            print(f"measured {model.name} ({target})", file=sys.stderr, flush=True)
        title = f"host ({host_preset_name()})" if target == "host" else target
        kernels = ", onnxruntime with the target's kernels" if args.onnxruntime_isa == "target" else ""
        print(f"\n### {title}, one thread{kernels}\n\n{table(rows)}", flush=True)
    if not args.only or any("whisper" in s.lower() for s in args.only):
        print(f"\n### Whisper-tiny encoder arena by clip length\n\n{whisper_arena_table(targets)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
