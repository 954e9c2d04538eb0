"""QDQ graphs become integer ops.

A QDQ model (onnxruntime.quantization's default format) keeps float ops and marks where values
are int8: `DequantizeLinear -> Conv -> QuantizeLinear`, with the weights stored as int8 behind
a DequantizeLinear of their own. Run as written, every such op reads and writes float. This pass
does what onnxruntime's QDQ transformer does: it rewrites each group whose scales and zero points
are compile-time constants into the integer op that means the same,

    DQ(x) -> Conv(DQ(w), DQ(b)) -> Q      becomes  QLinearConv(x, w, b)
    DQ(a) -> MatMul(DQ(b)) -> Q           becomes  QLinearMatMul(a, b)
    DQ(x) -> MaxPool / Reshape ... -> Q   becomes  the op on the int8 tensor itself, when Q
                                          uses DQ's scale and zero point (a max and a view
                                          commute with the monotonic mapping)
    DQ(a), DQ(b) -> Add -> Q              becomes  com.microsoft QLinearAdd, and likewise Mul,
                                          Sigmoid, LeakyRelu, the average pools, Concat and
                                          Gemm (QGemm), the ops onnxruntime's QOperator format
                                          has for them

so the kernels read and write 8-bit values and accumulate in int32. What does not match stays
float between its DequantizeLinear and QuantizeLinear. A float MatMul or Gemm over a
DequantizeLinear of constant int4/int8 weights becomes com.microsoft MatMulNBits, which keeps
the weights quantised, and a Gather of rows of a dequantised 8-bit table gathers the integers and
scales them after. Last, a DequantizeLinear of a constant (weights feeding an op that stays
float) is folded into a float constant, as the frontend folds any constant expression.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import aot.ops  # noqa: F401  (importing the package registers every op is_supported looks up)
from aot.ir.graph import Graph, Node, Tensor
from aot.lowering.registry import is_supported
from aot.ops.quantized.tensor_params import MS_DOMAIN
from aot.ops.quantized.weight_only_match import dequantized_gather, weight_only_node
from aot.ops.quantized.weights import kept_quantized

QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))
# Ops that move or select int8 values without arithmetic: DQ -> op -> Q with one scale and zero
# point on both sides is the op on the int8 tensor.
PASS_THROUGH = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"}
# Float ops with an onnxruntime QOperator op of the same meaning over quantised operands: each
# quantised input comes as (values, scale, zero point), the output's scale and zero point last.
QOPERATOR_UNARY = {"Sigmoid": "QLinearSigmoid", "LeakyRelu": "QLinearLeakyRelu",
                   "GlobalAveragePool": "QLinearGlobalAveragePool", "AveragePool": "QLinearAveragePool"}
QOPERATOR_BINARY = {"Add": "QLinearAdd", "Mul": "QLinearMul"}


@dataclass(frozen=True)
class Quantization:
    """One DequantizeLinear or QuantizeLinear node's integer tensor, scale and zero point."""

    node: Node
    values: Tensor  # the int8 side
    scale: Tensor
    zero_point: Tensor | None
    # A Relu or Clip between the op and its QuantizeLinear, and its real bounds: after the integer
    # op it is a Clip of the int8 values to the bounds quantised (Q is monotonic and Q(0) = zp).
    activation: Node | None = None
    bounds: tuple[float, float] = (-np.inf, np.inf)

    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def axis(self, rank: int) -> int:
        axis = int(self.node.attr("axis", 1))
        return axis + rank if axis < 0 else axis

    def same_mapping(self, other: Quantization) -> bool:
        """Whether both map integers to reals alike (per-tensor, equal scale and zero point)."""
        return self.per_tensor() and other.per_tensor() and _value(self.scale) == _value(other.scale) \
            and _zero_value(self) == _zero_value(other) and self.values.dtype == other.values.dtype


def _value(t: Tensor) -> float | int:
    assert t.data is not None
    return t.data.reshape(-1)[0].item()


def _zero_value(q: Quantization) -> int:
    return 0 if q.zero_point is None else int(_value(q.zero_point))


def _constant_params(node: Node) -> bool:
    """Scale and zero point known at compile time, and no blocked quantization."""
    params = [t for t in node.inputs[1:3] if t is not None]
    return bool(params) and all(t.is_constant for t in params) and int(node.attr("block_size", 0)) == 0


def dequantized(t: Tensor | None) -> Quantization | None:
    """The DequantizeLinear that produces `t` from int8/uint8, with constant parameters."""
    node = t.producer if t is not None else None
    if node is None or node.op_type != "DequantizeLinear" or not _constant_params(node):
        return None
    x = node.input(0)
    if x is None or x.dtype not in QUANTIZED and not (x.dtype == np.int32 and x.is_constant):
        return None
    scale = node.input(1)
    assert scale is not None
    return Quantization(node, x, scale, node.input(2))


def quantized_by(graph: Graph, t: Tensor | None, activation: bool = True) -> Quantization | None:
    """The QuantizeLinear that alone reads `t` (a tensor no one else needs in float), directly or
    (with `activation`) through a Relu or a Clip with constant bounds."""
    reader = _only_reader(graph, t)
    if reader is None:
        return None
    if activation and reader.op_type in ("Relu", "Clip"):
        bounds = _activation_bounds(reader)
        found = quantized_by(graph, reader.outputs[0], activation=False) if bounds is not None else None
        return dataclasses.replace(found, activation=reader, bounds=bounds) if found and bounds else None
    if reader.op_type != "QuantizeLinear" or reader.input(0) is not t or not _constant_params(reader):
        return None
    y = reader.outputs[0]
    if y is None or y.dtype not in QUANTIZED:
        return None
    scale = reader.input(1)
    assert scale is not None
    return Quantization(reader, y, scale, reader.input(2))


def _only_reader(graph: Graph, t: Tensor | None) -> Node | None:
    if t is None or graph.is_output(t) or len(t.consumers) != 1:
        return None
    return t.consumers[0]


def _activation_bounds(node: Node) -> tuple[float, float] | None:
    """Relu's [0, inf), or a Clip's constant [min, max] (attributes before opset 11)."""
    if node.op_type == "Relu":
        return (0.0, np.inf)
    if node.opset < 11:
        return (float(node.attr("min", -np.inf)), float(node.attr("max", np.inf)))
    found = []
    for index, default in ((1, -np.inf), (2, np.inf)):
        t = node.input(index)
        if t is not None and not t.is_constant:
            return None
        found.append(default if t is None else float(_value(t)))
    return found[0], found[1]


def quantize_bound(value: float, q: Quantization) -> int:
    """A real bound as q's integer: round half to even, saturated (QuantizeLinear's meaning)."""
    lo, hi = np.iinfo(q.values.dtype).min, np.iinfo(q.values.dtype).max
    if not np.isfinite(value):
        return int(lo if value < 0 else hi)
    scaled = np.float32(value) / np.float32(_value(q.scale))
    return int(np.clip(np.rint(scaled) + _zero_value(q), lo, hi))


class _Rewriter:
    """Matches the groups of one graph and swaps each for its integer op."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.replaced: list[Node] = []

    def zero_point(self, q: Quantization) -> Tensor:
        """q's zero point, or a zero of its integer type where the model left it out."""
        if q.zero_point is not None:
            return q.zero_point
        return self.graph.add_constant(np.zeros((), dtype=q.values.dtype), f"{q.values.name}_zero_point")

    def swap(self, old: Node, new: Node) -> None:
        """`new` takes `old`'s place in the schedule (its inputs are all ready there)."""
        index = self.graph.nodes.index(old)
        self.graph.remove_node(old)
        self.graph.add_node(new)
        self.graph.nodes.insert(index, self.graph.nodes.pop())
        self.replaced.append(old)

    def run(self) -> None:
        for node in list(self.graph.nodes):
            if node not in self.graph.nodes:
                continue
            if node.op_type == "Conv":
                self.conv(node)
            elif node.op_type == "MatMul":
                self.matmul(node)
                self.weight_only(node)
            elif node.op_type == "Gemm":
                self.gemm(node)
                self.weight_only(node)
            elif node.op_type == "Gather":
                self.gather(node)
            elif node.op_type in PASS_THROUGH:
                self.pass_through(node)
            elif node.op_type in QOPERATOR_UNARY or node.op_type in QOPERATOR_BINARY or node.op_type == "Concat":
                self.qoperator(node)

    def conv(self, node: Node) -> None:
        x, w, out = dequantized(node.input(0)), dequantized(node.input(1)), quantized_by(self.graph, node.outputs[0])
        bias = node.input(2)
        b = dequantized(bias) if bias is not None else None
        if x is None or w is None or out is None or (bias is not None and b is None):
            return
        if x.values.dtype not in QUANTIZED or not w.values.is_constant or w.values.dtype not in QUANTIZED:
            return
        if not x.per_tensor() or not out.per_tensor() or not (w.per_tensor() or w.axis(w.values.rank) == 0):
            return
        if b is not None and not (b.values.dtype == np.int32 and _zero_value(b) == 0):
            return
        inputs = [x.values, x.scale, self.zero_point(x), w.values, w.scale, self.zero_point(w), out.scale,
                  self.zero_point(out)]
        if b is not None:
            inputs.append(self.bias_at_product_scale(b, x, w))
        self.replace_group(node, "QLinearConv", inputs, out, dict(node.attrs))

    def bias_at_product_scale(self, bias: Quantization, x: Quantization, w: Quantization) -> Tensor:
        """The int32 bias in units of x_scale * w_scale, which the integer op adds to its sums:
        the bias's own values when its scale is that product (as quantisers write it), else
        rescaled to it and rounded (an error below half a unit of the sums' scale)."""
        assert bias.values.data is not None and bias.scale.data is not None
        product = np.float32(_value(x.scale)) * np.asarray(w.scale.data, np.float32).reshape(-1)
        scale = np.asarray(bias.scale.data, np.float32).reshape(-1)
        if np.allclose(scale, product, rtol=1e-6, atol=0.0):
            return bias.values
        real = bias.values.data.astype(np.float64).reshape(-1) * scale
        rescaled = np.clip(np.rint(real / product), np.iinfo(np.int32).min, np.iinfo(np.int32).max)
        return self.graph.add_constant(rescaled.astype(np.int32).reshape(bias.values.shape),
                                       f"{bias.values.name}_at_product_scale")

    def matmul(self, node: Node) -> None:
        a, b, out = dequantized(node.input(0)), dequantized(node.input(1)), quantized_by(self.graph, node.outputs[0])
        if a is None or b is None or out is None or a.values.dtype not in QUANTIZED \
                or b.values.dtype not in QUANTIZED:
            return
        per_column = b.values.rank == 2 and b.axis(2) == 1
        if not a.per_tensor() or not out.per_tensor() or not (b.per_tensor() or per_column):
            return
        inputs = [a.values, a.scale, self.zero_point(a), b.values, b.scale, self.zero_point(b), out.scale,
                  self.zero_point(out)]
        self.replace_group(node, "QLinearMatMul", inputs, out, {})

    def gemm(self, node: Node) -> None:
        """Gemm with int8 A and constant int8 B (per column when transB=0 gives axis 1, or
        transB=1 axis 0) and an optional int32 bias, to QGemm."""
        a, b, out = dequantized(node.input(0)), dequantized(node.input(1)), quantized_by(self.graph, node.outputs[0])
        bias = node.input(2)
        c = dequantized(bias) if bias is not None else None
        if a is None or b is None or out is None or (bias is not None and c is None):
            return
        if a.values.dtype not in QUANTIZED or b.values.dtype not in QUANTIZED or not b.values.is_constant:
            return
        column_axis = 0 if int(node.attr("transB", 0)) else 1
        if not a.per_tensor() or not out.per_tensor() or not (b.per_tensor() or b.axis(2) == column_axis):
            return
        if float(node.attr("beta", 1.0)) != 1.0 or (c is not None and (c.values.dtype != np.int32 or _zero_value(c))):
            return
        bias = self.bias_at_product_scale(c, a, b) if c is not None else None
        inputs: list[Tensor | None] = [a.values, a.scale, self.zero_point(a), b.values, b.scale, self.zero_point(b),
                                       bias, out.scale, self.zero_point(out)]
        attrs = {k: v for k, v in node.attrs.items() if k in ("alpha", "transA", "transB")}
        self.replace_group(node, "QGemm", inputs, out, attrs, MS_DOMAIN)

    def weight_only(self, node: Node) -> None:
        """A float product left over dequantised int4/int8 weights: MatMulNBits, which keeps them
        quantised (aot/ops/quantized/weight_only_match.py)."""
        if node not in self.graph.nodes:
            return
        new = weight_only_node(self.graph, node)
        if new is not None:
            self.swap(node, new)

    def gather(self, node: Node) -> None:
        """Rows of a dequantised 8-bit table: gathered as integers, then scaled
        (aot/ops/quantized/weight_only_match.py)."""
        nodes = dequantized_gather(self.graph, node)
        if nodes is None:
            return
        index = self.graph.nodes.index(node)
        self.graph.remove_node(node)
        self.replaced.append(node)
        for offset, new in enumerate(nodes):
            self.graph.add_node(new)
            self.graph.nodes.insert(index + offset, self.graph.nodes.pop())

    def qoperator(self, node: Node) -> None:
        """Add, Mul, Sigmoid, LeakyRelu, the average pools, Concat over dequantised operands."""
        out = quantized_by(self.graph, node.outputs[0])
        operands = [dequantized(t) for t in node.inputs]
        if out is None or not operands or any(q is None or q.values.dtype not in QUANTIZED or not q.per_tensor()
                                               for q in operands) or not out.per_tensor():
            return
        quantized = [q for q in operands if q is not None]
        if any(q.values.dtype != out.values.dtype for q in quantized):
            return
        triples = [t for q in quantized for t in (q.values, q.scale, self.zero_point(q))]
        result = [out.scale, self.zero_point(out)]
        if node.op_type == "Concat":
            self.replace_group(node, "QLinearConcat", [*result, *triples], out, dict(node.attrs), MS_DOMAIN)
            return
        op_type = QOPERATOR_UNARY.get(node.op_type) or QOPERATOR_BINARY[node.op_type]
        if len(quantized) != (1 if node.op_type in QOPERATOR_UNARY else 2):
            return
        self.replace_group(node, op_type, [*triples, *result], out, dict(node.attrs), MS_DOMAIN)

    def pass_through(self, node: Node) -> None:
        x, out = dequantized(node.input(0)), quantized_by(self.graph, node.outputs[0], activation=False)
        if x is None or out is None or x.values.dtype not in QUANTIZED or not x.same_mapping(out):
            return
        if len([o for o in node.outputs if o is not None]) != 1:
            return  # MaxPool's Indices
        self.replace_group(node, node.op_type, [x.values, *node.inputs[1:]], out, dict(node.attrs))

    def replace_group(self, node: Node, op_type: str, inputs: list[Tensor | None], out: Quantization,
                      attrs: dict[str, object], domain: str = "") -> None:
        """`node` and the QuantizeLinear after it become one `op_type` node writing the int8
        tensor; the DequantizeLinears before it stay for any other reader (pruned if none)."""
        if not is_supported(domain, op_type):
            return
        for old in (out.node, out.activation):
            if old is not None:
                self.graph.remove_node(old)
                self.replaced.append(old)
        result = out.values
        if out.activation is not None:
            result = self.graph.add_tensor(Tensor(self.graph.unique_name(f"{out.values.name}_unclipped"),
                                                  out.values.dtype, out.values.shape))
        new = Node(op_type, node.name, list(inputs), [result], attrs, domain, 1 if domain else node.opset)
        self.swap(node, new)
        if out.activation is not None:
            self.clip_after(new, result, out)

    def clip_after(self, op: Node, unclipped: Tensor, out: Quantization) -> None:
        """The Relu/Clip of the group as a Clip of the int8 values, right after the integer op."""
        assert out.activation is not None
        dtype = out.values.dtype
        bounds = [self.graph.add_constant(np.array(quantize_bound(b, out), dtype=dtype),
                                          f"{out.activation.name}_quantized_{which}")
                  for b, which in zip(out.bounds, ("min", "max"))]
        clip = Node("Clip", out.activation.name, [unclipped, *bounds], [out.values], {}, "", 13)
        self.graph.add_node(clip)
        self.graph.nodes.insert(self.graph.nodes.index(op) + 1, self.graph.nodes.pop())


def fold_constant_dequantize(graph: Graph) -> None:
    """DequantizeLinear of constant int8 weights that feed a float op: a float constant, as the
    frontend folds every constant expression (it leaves these to this pass)."""
    folded = []
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear" or not all(t is None or t.is_constant for t in node.inputs):
            continue
        if kept_quantized(node):
            continue  # a Gemm or MatMul reads the int8 weights itself
        out = node.outputs[0]
        if out is None or graph.is_output(out):
            continue
        out.data = _dequantize_array(node)
        folded.append(node)
    graph.remove_nodes(folded)


def _dequantize_array(node: Node) -> np.ndarray:
    x, scale, zero = (t.data if t is not None else None for t in (node.input(0), node.input(1), node.input(2)))
    assert x is not None and scale is not None
    rank = x.ndim
    axis = int(node.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    block = int(node.attr("block_size", 0))

    def spread(p: np.ndarray) -> np.ndarray:
        if p.size == 1:
            return p.reshape(())
        if block > 0:
            return np.repeat(p, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        return p.reshape([-1 if d == axis else 1 for d in range(rank)])

    zero_f = spread(zero).astype(np.float32) if zero is not None else np.float32(0)
    return ((x.astype(np.float32) - zero_f) * spread(scale)).astype(scale.dtype)


def integer_ops(graph: Graph) -> None:
    """The pass: QDQ groups into integer ops, then the leftover constant DequantizeLinears folded."""
    _Rewriter(graph).run()
    graph.prune()
    fold_constant_dequantize(graph)
