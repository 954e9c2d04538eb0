"""Transformer blocks as the exporters write them, built with onnx.helper and seeded weights (no
torch, no downloads), so tests can compile them with aot and check them against onnxruntime:

- vit_block: a pre-LN ViT encoder layer (TorchScript exporter, HF eager attention): Q, K, V as
  three MatMul + Add (or one to 3*width and a Split), heads split by Reshape + Transpose, K
  transposed straight to [1, H, D, S], scores Div by sqrt(D), Softmax, Erf-GELU MLP, residuals;
- bert_encoder: int64 input_ids and attention_mask, word and position embeddings by Gather,
  post-LN layers, HF's extended mask (1 - mask) * finfo(float32).min added after the scale Div;
- whisper_encoder_block: q_proj(x) * D**-0.5 (a Mul after the projection, none on the scores),
  K without bias, transposed in two steps ([0, 2, 1, 3] then [0, 1, 3, 2]), pre-LN, GELU MLP;
- causal_decoder_block: GPT-2's block: fused c_attn and Split, a constant causal mask applied by
  Where(mask, scores, finfo.min) (or added as a 0 / -inf float mask, as torch's SDPA export
  does), tanh-GELU MLP written with Pow;
- sdpa_export_block: F.scaled_dot_product_attention as torch's exporter writes it: q and K^T each
  multiplied by sqrt(scale), MatMul, an optional float mask input added, Softmax, MatMul(v).

quantize_weights turns every constant MatMul weight into int8 or int4 integers behind a
DequantizeLinear (per column, or in blocks along K); matmul_nbits turns the MatMuls into
com.microsoft MatMulNBits with onnxruntime's own quantizer. example_inputs gives inputs that
exercise a model (token ids in range, a padded attention mask).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT32_MIN = -3.4028234663852886e38  # torch.finfo(torch.float32).min, as HF's masks write it
_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


class _Block:
    """Nodes and seeded initializers of a graph under construction."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def constant(self, prefix: str, value: np.ndarray) -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attrs: object) -> list[str]:
        names = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=self.name(f"/{op}"), **attrs))
        return names

    def op(self, op: str, *inputs: str, **attrs: object) -> str:
        return self.node(op, list(inputs), **attrs)[0]

    def scalar(self, value: float) -> str:
        return self.constant("scalar", np.array(value, np.float32))

    def ints(self, *values: int) -> str:
        return self.constant("ints", np.array(values, np.int64))

    def vector(self, size: int, mean: float = 0.0, spread: float = 0.1) -> str:
        return self.constant("vector", (mean + spread * self.rng.standard_normal(size)).astype(np.float32))

    def matmul(self, x: str, rows: int, cols: int, *, bias: bool = True) -> str:
        """x @ W (+ b): a torch Linear as the exporter writes it, W [rows, cols] scaled to keep O(1)."""
        weight = (self.rng.standard_normal((rows, cols)) / math.sqrt(rows)).astype(np.float32)
        y = self.op("MatMul", x, self.constant("weight", weight))
        return self.op("Add", y, self.vector(cols)) if bias else y

    def layer_norm(self, x: str, width: int, epsilon: float = 1e-5) -> str:
        return self.op("LayerNormalization", x, self.vector(width, 1.0), self.vector(width), axis=-1, epsilon=epsilon)

    def erf_gelu(self, x: str) -> str:
        erf = self.op("Erf", self.op("Div", x, self.scalar(math.sqrt(2.0))))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.scalar(1.0))), self.scalar(0.5))

    def tanh_gelu(self, x: str) -> str:
        """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
        cube = self.op("Mul", self.op("Pow", x, self.scalar(3.0)), self.scalar(0.044715))
        inner = self.op("Mul", self.op("Add", x, cube), self.scalar(math.sqrt(2.0 / math.pi)))
        return self.op("Mul", self.op("Mul", x, self.scalar(0.5)), self.op("Add", self.op("Tanh", inner),
                                                                            self.scalar(1.0)))

    def mlp(self, x: str, width: int, gelu: str = "erf") -> str:
        up = self.matmul(x, width, 4 * width)
        return self.matmul(self.erf_gelu(up) if gelu == "erf" else self.tanh_gelu(up), 4 * width, width)

    def split_heads(self, x: str, shape: tuple[int, int, int], perm: list[int]) -> str:
        """[1, S, W] -> Reshape [1, S, H, D] (`shape` is S, H, D) -> Transpose `perm` ([0, 2, 1, 3]:
        [1, H, S, D]; [0, 2, 3, 1]: K transposed, [1, H, D, S])."""
        return self.op("Transpose", self.op("Reshape", x, self.ints(1, *shape)), perm=perm)

    def merge_heads(self, context: str, seq: int, width: int) -> str:
        return self.op("Reshape", self.op("Transpose", context, perm=[0, 2, 1, 3]), self.ints(1, seq, width))

    def qkv(self, x: str, width: int, *, fused: bool) -> list[str]:
        if not fused:
            return [self.matmul(x, width, width) for _ in range(3)]
        return self.node("Split", [self.matmul(x, width, 3 * width), self.ints(width, width, width)], outputs=3,
                         axis=2)

    def finish(self, name: str, inputs: dict[str, tuple[int, list[int]]], output: str, *, shape: list[int],
               opset: int = 18) -> onnx.ModelProto:
        self.nodes[-1].output[0] = output  # the last node computes the graph's output
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="tests.transformer_graphs")
        model.ir_version = 8 if opset < 21 else 10
        onnx.checker.check_model(model, full_check=True)
        return model


def _float_input(seq: int, width: int) -> dict[str, tuple[int, list[int]]]:
    return {"hidden_states": (TensorProto.FLOAT, [1, seq, width])}


def _eager_attention(g: _Block, x: str, seq: int, width: int, *, heads: int, fused_qkv: bool = False,
                     mask: str | None = None) -> str:
    """HF eager attention as the TorchScript exporter writes it: Q, K, V projections, K straight to
    [1, H, D, S], MatMul, Div by sqrt(D), the additive mask, Softmax, MatMul(v), output projection."""
    q, k, v = g.qkv(x, width, fused=fused_qkv)
    shape = (seq, heads, width // heads)
    q, v = g.split_heads(q, shape, [0, 2, 1, 3]), g.split_heads(v, shape, [0, 2, 1, 3])
    kt = g.split_heads(k, shape, [0, 2, 3, 1])
    scores = g.op("Div", g.op("MatMul", q, kt), g.scalar(math.sqrt(width // heads)))
    if mask is not None:
        scores = g.op("Add", scores, mask)
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    return g.matmul(g.merge_heads(context, seq, width), width, width)


def vit_block(tokens: int = 197, width: int = 192, heads: int = 3, *, fused_qkv: bool = False,
              seed: int = 0) -> onnx.ModelProto:
    """A pre-LN ViT encoder layer: x + attn(LN(x)), then + MLP(LN(.)) with the Erf GELU."""
    g = _Block(seed)
    attended = _eager_attention(g, g.layer_norm("hidden_states", width, 1e-12), tokens, width, heads=heads,
                                fused_qkv=fused_qkv)
    residual = g.op("Add", attended, "hidden_states")
    g.op("Add", g.mlp(g.layer_norm(residual, width, 1e-12), width), residual)
    return g.finish("vit_block", _float_input(tokens, width), "last_hidden_state", shape=[1, tokens, width])


def _extended_mask(g: _Block) -> str:
    """HF's get_extended_attention_mask: mask[:, None, None, :], to float, (1 - m) * finfo.min."""
    mask = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.ints(1, 2)), to=TensorProto.FLOAT)
    return g.op("Mul", g.op("Sub", g.scalar(1.0), mask), g.scalar(FLOAT32_MIN))


def bert_encoder(layers: int = 2, tokens: int = 128, width: int = 256, heads: int = 4, *, vocab: int = 1000,
                 seed: int = 0) -> onnx.ModelProto:
    """Word and position embeddings (Gather), LayerNorm, then post-LN layers: LN(x + attn(x)),
    LN(. + MLP(.)), each attention masked by the padded attention_mask."""
    g = _Block(seed)
    words = g.constant("word_embeddings", (0.5 * g.rng.standard_normal((vocab, width))).astype(np.float32))
    positions = g.constant("position_embeddings", (0.1 * g.rng.standard_normal((2 * tokens, width))).astype(np.float32))
    embedded = g.op("Add", g.op("Gather", words, "input_ids", axis=0),
                    g.op("Gather", positions, g.constant("position_ids", np.arange(tokens, dtype=np.int64)[None]),
                         axis=0))
    hidden = g.layer_norm(embedded, width, 1e-12)
    mask = _extended_mask(g)
    for _ in range(layers):
        hidden = g.layer_norm(g.op("Add", _eager_attention(g, hidden, tokens, width, heads=heads, mask=mask), hidden),
                              width, 1e-12)
        hidden = g.layer_norm(g.op("Add", g.mlp(hidden, width), hidden), width, 1e-12)
    ids = {name: (TensorProto.INT64, [1, tokens]) for name in ("input_ids", "attention_mask")}
    return g.finish("bert_encoder", ids, "last_hidden_state", shape=[1, tokens, width])


def whisper_encoder_block(frames: int = 1500, width: int = 384, heads: int = 6, *, seed: int = 0) -> onnx.ModelProto:
    """Whisper's encoder layer: pre-LN, q_proj(x) * D**-0.5, k_proj without bias, scores unscaled,
    then a GELU MLP of 4 * width; both residuals."""
    g = _Block(seed)
    x = g.layer_norm("hidden_states", width)
    head = width // heads
    shape = (frames, heads, head)
    q = g.split_heads(g.op("Mul", g.matmul(x, width, width), g.scalar(head ** -0.5)), shape, [0, 2, 1, 3])
    k = g.split_heads(g.matmul(x, width, width, bias=False), shape, [0, 2, 1, 3])
    v = g.split_heads(g.matmul(x, width, width), shape, [0, 2, 1, 3])
    scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    residual = g.op("Add", "hidden_states", g.matmul(g.merge_heads(context, frames, width), width, width))
    g.op("Add", residual, g.mlp(g.layer_norm(residual, width), width))
    return g.finish("whisper_encoder_block", _float_input(frames, width), "last_hidden_state", shape=[1, frames, width])


def _causal_scores(g: _Block, scores: str, tokens: int, mask_style: str) -> str:
    lower = np.tril(np.ones((tokens, tokens), bool))[None, None]
    if mask_style == "where":
        return g.op("Where", g.constant("causal_mask", lower), scores, g.scalar(FLOAT32_MIN))
    if mask_style == "add":
        additive = np.where(lower, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
        return g.op("Add", scores, g.constant("causal_mask", additive))
    raise ValueError(f"mask_style {mask_style!r}: 'where' or 'add'")


def causal_decoder_block(tokens: int = 64, width: int = 256, heads: int = 4, *, mask_style: str = "where",
                         seed: int = 0) -> onnx.ModelProto:
    """GPT-2's block: LN, c_attn to 3 * width and Split, K to [1, H, D, S], Div by sqrt(D), the
    causal mask (Where with finfo.min, or an added 0 / -inf mask), Softmax, c_proj, residual, LN,
    tanh-GELU MLP, residual."""
    g = _Block(seed)
    q, k, v = g.qkv(g.layer_norm("hidden_states", width), width, fused=True)
    shape = (tokens, heads, width // heads)
    q, v = g.split_heads(q, shape, [0, 2, 1, 3]), g.split_heads(v, shape, [0, 2, 1, 3])
    scores = g.op("Div", g.op("MatMul", q, g.split_heads(k, shape, [0, 2, 3, 1])),
                  g.scalar(math.sqrt(width // heads)))
    probs = g.op("Softmax", _causal_scores(g, scores, tokens, mask_style), axis=-1)
    attended = g.matmul(g.merge_heads(g.op("MatMul", probs, v), tokens, width), width, width)
    residual = g.op("Add", attended, "hidden_states")
    g.op("Add", residual, g.mlp(g.layer_norm(residual, width), width, gelu="tanh"))
    return g.finish("causal_decoder_block", _float_input(tokens, width), "last_hidden_state", shape=[1, tokens, width])


def sdpa_export_block(tokens: int = 64, width: int = 128, heads: int = 2, *, mask: bool = False,
                      seed: int = 0) -> onnx.ModelProto:
    """x + out_proj(sdpa(q, k, v)) of LN(x), the attention as torch's exporter writes
    F.scaled_dot_product_attention: Mul(q, sqrt(scale)), Mul(Transpose(k, [0, 1, 3, 2]),
    sqrt(scale)), MatMul, + attn_mask (a float input [1, 1, S, S]) when `mask`, Softmax, MatMul(v)."""
    g = _Block(seed)
    q, k, v = (g.split_heads(t, (tokens, heads, width // heads), [0, 2, 1, 3])
               for t in g.qkv(g.layer_norm("hidden_states", width), width, fused=False))
    root_scale = g.scalar(math.sqrt(1.0 / math.sqrt(width // heads)))
    scores = g.op("MatMul", g.op("Mul", q, root_scale), g.op("Mul", g.op("Transpose", k, perm=[0, 1, 3, 2]),
                                                              root_scale))
    if mask:
        scores = g.op("Add", scores, "attn_mask")
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    g.op("Add", "hidden_states", g.matmul(g.merge_heads(context, tokens, width), width, width))
    inputs = _float_input(tokens, width)
    if mask:
        inputs["attn_mask"] = (TensorProto.FLOAT, [1, 1, tokens, tokens])
    return g.finish("sdpa_export_block", inputs, "last_hidden_state", shape=[1, tokens, width])


# -- weight-only quantisation -----------------------------------------------------------------

_CODES = {8: (-128, 127), 4: (-8, 7)}  # the signed codes' range per bit width


def _quantized(weight: np.ndarray, bits: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric codes of `weight` [K, N], with scales and zero points per column (block 0) or
    per block of `block` rows and column ([ceil(K / block), N])."""
    low, high = _CODES[bits]
    k = weight.shape[0]
    rows = block or k
    blocks = -(-k // rows)
    padded = np.zeros((blocks * rows, weight.shape[1]), np.float32)
    padded[:k] = weight
    grouped = padded.reshape(blocks, rows, -1)
    lo = np.minimum(grouped.min(axis=1), 0.0)
    hi = np.maximum(grouped.max(axis=1), 0.0)
    scale = np.maximum((hi - lo) / (high - low), 1e-8).astype(np.float32)
    zero = np.clip(np.round(low - lo / scale), low, high)
    codes = np.clip(np.round(grouped / scale[:, None]) + zero[:, None], low, high).reshape(-1, weight.shape[1])[:k]
    if not block:
        scale, zero = scale[0], zero[0]
    return codes.astype(np.int8), scale, zero.astype(np.int8)


def _integer_tensor(name: str, values: np.ndarray, bits: int) -> onnx.TensorProto:
    if bits == 8:
        return numpy_helper.from_array(values.astype(np.int8), name)
    return helper.make_tensor(name, TensorProto.INT4, list(values.shape), values.reshape(-1).tolist())


def matmul_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The float32 2-D initializers read as a MatMul's second input."""
    initializers = {t.name: t for t in model.graph.initializer}
    weights = {}
    for node in model.graph.node:
        tensor = initializers.get(node.input[1]) if node.op_type == "MatMul" else None
        if tensor is not None and tensor.data_type == TensorProto.FLOAT and len(tensor.dims) == 2:
            weights[tensor.name] = numpy_helper.to_array(tensor)
    return weights


def _with_opset(model: onnx.ModelProto, opset: int) -> None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version < opset:
            entry.version = opset
    model.ir_version = max(model.ir_version, 10 if opset >= 21 else 8)


def quantize_weights(model: onnx.ModelProto, bits: int = 8, block: int = 32) -> onnx.ModelProto:
    """A copy of `model` whose MatMul weights are int8 (`bits` 8) or int4 (4) codes with scales and
    zero points, dequantized by a DequantizeLinear feeding the MatMul: per column with `block` 0,
    else in blocks of `block` rows (opset 21, as int4 needs too)."""
    if bits not in _CODES or block < 0 or (bits == 4 and not block):
        raise ValueError(f"bits={bits} block={block}: bits 8 (per column or blocked) or 4 (blocked)")
    quantized = onnx.ModelProto()
    quantized.CopyFrom(model)
    weights = matmul_weights(model)
    kept = [t for t in quantized.graph.initializer if t.name not in weights]
    del quantized.graph.initializer[:]
    quantized.graph.initializer.extend(kept)
    dequantize = []
    for name, weight in weights.items():
        codes, scale, zero = _quantized(weight, bits, block)
        quantized.graph.initializer.extend([_integer_tensor(f"{name}_q", codes, bits),
                                            numpy_helper.from_array(scale, f"{name}_scale"),
                                            _integer_tensor(f"{name}_zero", zero, bits)])
        attrs = {"axis": 0, "block_size": block} if block else {"axis": 1}
        dequantize.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zero"],
                                           [name], name=f"/DequantizeLinear_{name}", **attrs))
    nodes = dequantize + list(quantized.graph.node)
    del quantized.graph.node[:]
    quantized.graph.node.extend(nodes)
    _with_opset(quantized, 21 if block else 13)
    onnx.checker.check_model(quantized, full_check=True)
    return quantized


def matmul_nbits(model: onnx.ModelProto, bits: int = 4, block: int = 32) -> onnx.ModelProto:
    """A copy of `model` whose constant-weight MatMuls are com.microsoft MatMulNBits, quantized and
    packed by onnxruntime's MatMulNBitsQuantizer (asymmetric, blocks of `block` along K)."""
    from onnxruntime.quantization import matmul_nbits_quantizer

    matmul_nbits_quantizer.logger.setLevel(logging.WARNING)  # else a line per node skipped or quantized
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    quantizer = matmul_nbits_quantizer.MatMulNBitsQuantizer(copy, bits=bits, block_size=block, is_symmetric=False,
                                                            op_types_to_quantize=("MatMul",))
    quantizer.process()
    return quantizer.model.model


def payload_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the model's initializers as stored: 4-bit integers two to a byte."""
    total = 0
    for tensor in model.graph.initializer:
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if tensor.data_type in (TensorProto.INT4, TensorProto.UINT4):
            total += -(-count // 2)
        else:
            total += count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return total


def example_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for `model`'s graph inputs: hidden states of standard normal floats, token ids within
    the word embeddings' rows, an attention_mask of ones then a quarter of padding zeros, an
    attn_mask of 0 with the last quarter of the keys at -inf."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    vocab = next((t.dims[0] for t in model.graph.initializer if t.name.startswith("word_embeddings")), 1)
    inputs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        padded = shape[-1] - shape[-1] // 4
        if value.name == "input_ids":
            inputs[value.name] = rng.integers(0, vocab, shape).astype(np.int64)
        elif value.name == "attention_mask":
            inputs[value.name] = (np.arange(shape[-1]) < padded).astype(np.int64).reshape(shape)
        elif value.name == "attn_mask":
            inputs[value.name] = np.where(np.arange(shape[-1]) < padded, 0.0, -np.inf).astype(np.float32) * \
                np.ones(shape, np.float32)
        else:
            inputs[value.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs
