"""Fold shape-computing subgraphs and constant expressions into initializers.

Exporters emit Shape -> Gather -> Concat -> Reshape chains, ConstantOfShape, Range and friends
that only compute sizes. Once every input shape is fixed they are constants. We evaluate them
with onnx's own reference implementation (so their meaning is the ONNX spec's, not a second
copy of ours), replace them by initializers and run shape inference again, until nothing changes.
What remains is a static graph of tensor ops.

Sizes are checked before anything is allocated: every shape onnx infers is counted in Python
integers against MAX_ELEMENTS, and a node is folded only when its outputs' shapes are known
(onnx infers them from the constant inputs without computing anything) and fit the folding
budget: FOLD_MAX_ELEMENTS elements and FOLD_MAX_BYTES bytes per output, or no more than the
node's constant inputs hold. Larger constant results stay nodes and are computed at run time:
a 100M-element Expand of a scalar costs a loop in the package, not 400 MB of weights.

onnx's shape inference runs without data propagation: with it, onnx keeps one protobuf entry
per element of every 1-D tensor that reaches Add, Cast, Concat, Gather, Slice or the like,
about 140 bytes an element (a 1-D input of 3M floats followed by an Add took 460 MB; a
ConstantOfShape of 2^31 elements computed from Shape(x) ran out of memory). The values it
would propagate are computed here instead, node by node in graph order: a node whose output
shape is still unknown is inferred alone, with the constants folded so far as its inputs, so a
Shape -> ... -> Reshape -> Shape -> ... chain folds in one pass, as with data propagation.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from aot.errors import ModelLoadError
from aot.frontend.contrib_shapes import contrib_extra_output_types, contrib_output_type, has_rule
from aot.frontend.initializers import initializer_array
from aot.frontend.loader import default_opset, one_line
from aot.frontend.numpy_folds import NUMPY_FOLDS
from aot.ir.sizes import element_count, too_many_elements

# Ops whose result is not a function of their inputs, or that carry subgraphs.
NEVER_FOLD = {
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "Optional",
}
# Ops that read a weight an integer kernel can take quantised: a DequantizeLinear of a constant
# read only by them is left to aot/passes/quantized_ops.py, which either turns the group into an
# integer op (reading the int8 weight) or folds the DequantizeLinear itself. A Gather of rows of
# an 8-bit table gathers its integers there (the table stays 8-bit).
INTEGER_WEIGHT_READERS = {"Conv", "MatMul", "Gemm", "Gather"}
# The inputs through which a kernel reads a weight it repacks at compile time (op -> positions).
# A constant read only through them folds whatever its size: the model holds that weight anyway
# (the light models ship theirs as ConstantOfShape nodes), and left to run time it would be
# filled on every run and reach the kernel unpacked (light AlexNet's 151 MB fc6 weight was a
# 144 MiB arena written each run, 2x onnxruntime's time).
WEIGHT_INPUTS = {"Conv": {1}, "ConvTranspose": {1}, "Gemm": {1}, "MatMul": {1}}
# Ops whose reference implementation in onnx starts at a later opset than the op, whose later
# versions only added types: evaluated at that opset (onnx 1.23 has no DequantizeLinear-13).
REFERENCE_SINCE = {"DequantizeLinear": 19, "QuantizeLinear": 19}
# Ops whose output size is set by the values of their inputs, not bounded by the inputs' sizes:
# folded only when onnx could tell the output shape beforehand.
VALUE_SIZED = {
    "ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample", "OneHot",
    "Col2Im", "CenterCropPad",
}
# The folding budget per output tensor; larger constant results are computed at run time.
FOLD_MAX_ELEMENTS = 1 << 24  # 16M elements
FOLD_MAX_BYTES = 64 << 20  # 64 MiB
# Constants up to this many elements are given by value when one node is inferred alone (shape
# inputs are a handful of integers); larger ones (weights) by their type only.
_BY_VALUE_MAX_ELEMENTS = 1 << 12
_MAX_ROUNDS = 32


def node_label(node: onnx.NodeProto, index: int) -> str:
    """ONNX node names are optional; unnamed nodes are referred to by op type and position."""
    return node.name if node.name else f"{node.op_type}#{index}"


def infer_shapes(model: onnx.ModelProto, source: str, strict: bool = False) -> onnx.ModelProto:
    """onnx's shape inference (without data propagation, see the module doc), then every
    inferred shape checked against MAX_ELEMENTS."""
    inferred = _run_inference(model, source, strict)
    check_sizes(inferred, source)
    return inferred


def _run_inference(model: onnx.ModelProto, source: str, strict: bool = False) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=strict, data_prop=False)
    except Exception as e:  # onnx raises InferenceError, ValidationError or RuntimeError
        raise ModelLoadError(f"{source}: shape inference failed: {one_line(str(e)) or type(e).__name__}") from e


def check_sizes(model: onnx.ModelProto, source: str) -> None:
    """Refuse any tensor whose known shape has more than MAX_ELEMENTS elements, naming it and
    the node that produces it."""
    producers = {out: (node_label(n, i), n.op_type) for i, n in enumerate(model.graph.node) for out in n.output}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        shape = _static_shape(vi.type)
        why = too_many_elements(shape) if shape is not None else None
        if why is None:
            continue
        if vi.name in producers:
            label, op = producers[vi.name]
            raise ModelLoadError(f"{source}: node {label!r} ({op}): output {vi.name!r}: {why}")
        raise ModelLoadError(f"{source}: input {vi.name!r}: {why}")


def forget_stale_shapes(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Drop the shapes stored for intermediate tensors and the negative dimensions of graph
    outputs, and return the dropped intermediate ones. Shape inference recomputes them, and onnx
    stops at a stored shape that disagrees with its own (Paddle exports write -1 for a dynamic
    dimension; onnxruntime runs those models); fold_static_subgraphs takes back a stored static
    shape only for a tensor onnx cannot size (an op fed a shape at run time). Graph inputs keep
    their declared shapes, which are what the caller feeds, and outputs their concrete
    dimensions, which check_declared_outputs compares with the graph's."""
    stored = [onnx.ValueInfoProto() for _ in model.graph.value_info]
    for copy, vi in zip(stored, model.graph.value_info):
        copy.CopyFrom(vi)
    del model.graph.value_info[:]
    for vi in model.graph.output:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for dim in vi.type.tensor_type.shape.dim:
                if dim.HasField("dim_value") and dim.dim_value < 0:
                    dim.Clear()
    return stored


def _restore_stored_shapes(model: onnx.ModelProto, stored: list[onnx.ValueInfoProto]) -> bool:
    """Give back the stored static shape of each tensor onnx could not size, where it agrees
    with what onnx did infer (rank, known dimensions, element type); True if any came back."""
    types = _known_types(model)
    restored = []
    for vi in stored:
        shape = _static_shape(vi.type)
        known = types.get(vi.name)
        if shape is None or (known is not None and _static_shape(known) is not None):
            continue
        if known is not None and not _compatible(known, vi.type, shape):
            continue
        restored.append(vi)
    if not restored:
        return False
    names = {vi.name for vi in restored}
    infos = [vi for vi in model.graph.value_info if vi.name not in names] + restored
    del model.graph.value_info[:]
    model.graph.value_info.extend(infos)
    return True


def _compatible(inferred: onnx.TypeProto, stored: onnx.TypeProto, shape: tuple[int, ...]) -> bool:
    if not inferred.HasField("tensor_type"):
        return False
    tt = inferred.tensor_type
    if tt.elem_type and tt.elem_type != stored.tensor_type.elem_type:
        return False
    if not tt.HasField("shape"):
        return True
    dims = tt.shape.dim
    return len(dims) == len(shape) and all(not d.HasField("dim_value") or d.dim_value == s
                                           for d, s in zip(dims, shape))


def check_declared_outputs(model: onnx.ModelProto, source: str) -> None:
    """Refuse a graph output whose declared shape is not the one its node computes. onnx keeps a
    wrong concrete output shape without a word, so each producing node is inferred again on its
    own; where that cannot tell (a shape fed at run time) the declared shape stands."""
    state = _FoldState(model, source)
    index_of = {out: i for i, n in enumerate(model.graph.node) for out in n.output if out}
    for vi in model.graph.output:
        declared = _static_shape(vi.type)
        if declared is None or vi.name not in index_of:
            continue
        node = model.graph.node[index_of[vi.name]]
        inputs = [name for name in node.input if name]
        if node.domain not in ("", "ai.onnx") or not all(name in state.types for name in inputs):
            continue
        found = _infer_one_node(model, node, inputs, state.types, state.constants).get(vi.name)
        if found is None:
            continue
        label = node_label(node, index_of[vi.name])
        computed = _static_shape(found)
        if computed is not None and computed != declared:
            raise ModelLoadError(
                f"{source}: node {label!r} ({node.op_type}): graph output {vi.name!r} is declared "
                f"{list(declared)} but the node computes {list(computed)}")
        declared_type, computed_type = vi.type.tensor_type.elem_type, found.tensor_type.elem_type
        if declared_type and computed_type and declared_type != computed_type:
            raise ModelLoadError(
                f"{source}: node {label!r} ({node.op_type}): graph output {vi.name!r} is declared "
                f"{onnx_type_name(declared_type)} but the node computes {onnx_type_name(computed_type)}")


def onnx_type_name(elem_type: int) -> str:
    """An ONNX element type as its schemas spell it inside tensor(...): float, int64, float8e4m3fn."""
    if elem_type in onnx.TensorProto.DataType.values():
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    return f"type {elem_type}"


def fold_static_subgraphs(model: onnx.ModelProto, source: str, keep_nodes: bool = False,
                          stored: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    """The model with every constant-computable node folded into an initializer and every shape
    inferred. With `keep_nodes` nothing is folded: the values are only used to infer shapes (for
    tests of the ops' own lowerings, and for outputs of every tensor). `stored`: the value_info
    forget_stale_shapes dropped, taken back where inference cannot size a tensor."""
    for _ in range(_MAX_ROUNDS):
        model = _infer_with_contrib(model, source)
        if stored and _restore_stored_shapes(model, stored):
            model = _infer_with_contrib(model, source)
        if not _fold_once(model, source, keep_nodes):
            return model
    return _infer_with_contrib(model, source)


def _infer_with_contrib(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """onnx's inference, then, where the model has com.microsoft ops it cannot size, one pass in
    graph order that sizes each of them by its rule (contrib_shapes.py) and each ai.onnx node
    after them alone (_FoldState.complete_output_types), and onnx's inference again over the
    whole. (Alternating whole-model inference with the rules took 27 s for 200 QLinearAdd ->
    Identity pairs beside 20 MB of weights: one inference per pair.)"""
    model = infer_shapes(model, source)
    if any(has_rule(node) for node in model.graph.node) and _size_in_order(model, source):
        model = infer_shapes(model, source)
    return model


def _size_in_order(model: onnx.ModelProto, source: str) -> bool:
    """Size every node whose outputs onnx left unsized, in graph order; True if any was."""
    state = _FoldState(model, source)
    outputs = {vi.name: vi for vi in model.graph.output}
    for index, node in enumerate(model.graph.node):
        if not has_rule(node):
            state.complete_output_types(node, node_label(node, index))
            continue
        name = node.output[0]
        found = contrib_output_type(node, node_label(node, index), state.types, source)
        if found is not None and state.shape(name) is None:
            state.types[name] = state.learned[name] = found
        for extra, extra_type in contrib_extra_output_types(node, node_label(node, index), state.types, source).items():
            if state.shape(extra) is None:
                state.types[extra] = state.learned[extra] = extra_type
    changed = _record_learned_types(model, state.learned)
    for name, vi in outputs.items():
        if name in state.learned and _static_shape(vi.type) is None:
            vi.type.CopyFrom(state.learned[name])  # a graph output onnx leaves as declared
            changed = True
    return changed


def _static_shape(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if not all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
        return None
    return tuple(int(d.dim_value) for d in dims)


def _known_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    graph = model.graph
    types = {vi.name: vi.type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    for init in graph.initializer:
        types[init.name] = _tensor_type(init.data_type, init.dims)
    return types


def _tensor_type(elem_type: int, dims: Iterable[int]) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem_type, [int(d) for d in dims])


class _FoldState:
    """What one pass over the nodes knows: constant values and the types of tensors so far."""

    def __init__(self, model: onnx.ModelProto, source: str) -> None:
        self.model = model
        self.source = source
        self.opset = default_opset(model)
        self.constants: dict[str, onnx.TensorProto] = {t.name: t for t in model.graph.initializer}
        self.types = _known_types(model)
        self.learned: dict[str, onnx.TypeProto] = {}  # static types found in this pass
        readers: dict[str, set[tuple[str, int]]] = {}
        for node in model.graph.node:
            op = node.op_type if node.domain in ("", "ai.onnx") else ""
            for position, name in enumerate(node.input):
                readers.setdefault(name, set()).add((op, position))
        self.readers = readers
        self.graph_outputs = {vi.name for vi in model.graph.output}

    def left_to_passes(self, node: onnx.NodeProto) -> bool:
        """A DequantizeLinear whose output only integer-capable weight readers read (see
        INTEGER_WEIGHT_READERS)."""
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            return False
        read_by = {op for op, _ in self.readers.get(node.output[0], set())} if node.output else set()
        return bool(read_by) and read_by <= INTEGER_WEIGHT_READERS

    def read_only_as_weights(self, node: onnx.NodeProto) -> bool:
        """Whether every output of `node` is read, and only through WEIGHT_INPUTS."""
        outputs = [name for name in node.output if name]
        if not outputs or any(name in self.graph_outputs for name in outputs):
            return False
        for name in outputs:
            read_by = self.readers.get(name, set())
            if not read_by or any(position not in WEIGHT_INPUTS.get(op, ()) for op, position in read_by):
                return False
        return True

    def shape(self, name: str) -> tuple[int, ...] | None:
        return _static_shape(self.types[name]) if name in self.types else None

    def complete_output_types(self, node: onnx.NodeProto, label: str) -> None:
        """Infer `node` alone when an output's shape is still unknown, with the constants known
        so far as its inputs: this is the data propagation onnx is not asked to do."""
        outputs = [name for name in node.output if name]
        if all(self.shape(name) is not None for name in outputs):
            return
        if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD:
            return
        inputs = [name for name in node.input if name]
        if not all(name in self.types for name in inputs):
            return
        inferred = _infer_one_node(self.model, node, inputs, self.types, self.constants)
        for name in outputs:
            found = inferred.get(name)
            if found is None or _static_shape(found) is None or self.shape(name) is not None:
                continue
            why = too_many_elements(_static_shape(found) or ())
            if why is not None:
                raise ModelLoadError(f"{self.source}: node {label!r} ({node.op_type}): output {name!r}: {why}")
            self.types[name] = found
            self.learned[name] = found

    def record_constant(self, name: str, value: np.ndarray) -> onnx.TensorProto:
        tensor = numpy_helper.from_array(np.asarray(value), name)
        if name not in self.types or self.shape(name) is None:
            self.learned[name] = _tensor_type(tensor.data_type, tensor.dims)
        self.constants[name] = tensor
        self.types[name] = _tensor_type(tensor.data_type, tensor.dims)
        return tensor


def _check_folded_shape(state: _FoldState, node: onnx.NodeProto, label: str, name: str, value: np.ndarray) -> None:
    """A folded value must have the shape the model gives its tensor: onnx's evaluator computes
    whatever broadcasting yields from parameters the op does not allow (a DequantizeLinear with
    4 scales along an axis of length 1), which would otherwise reach the compiler as a mismatch."""
    known = state.shape(name)
    if known is not None and tuple(np.shape(value)) != known:
        raise ModelLoadError(f"{state.source}: node {label!r} ({node.op_type}): its constant inputs give output "
                             f"{name!r} the shape {list(np.shape(value))}, but the model declares {list(known)}")


def _fold_once(model: onnx.ModelProto, source: str, keep_nodes: bool) -> bool:
    """One pass over the nodes in order; True if it folded a node (or, with keep_nodes, learned
    a shape), so that inference has to run again."""
    graph = model.graph
    state = _FoldState(model, source)
    kept: list[onnx.NodeProto] = []
    new_initializers: list[onnx.TensorProto] = []
    for index, node in enumerate(graph.node):
        label = node_label(node, index)
        state.complete_output_types(node, label)
        values = _try_fold(node, label, state)
        if values is None or keep_nodes:
            kept.append(node)
        for name, value in zip(node.output, values or []):
            if name:
                _check_folded_shape(state, node, label, name, value)
                tensor = state.record_constant(name, value)
                if not keep_nodes:
                    new_initializers.append(tensor)
    if keep_nodes:
        return _record_learned_types(model, state.learned)
    if not new_initializers:
        return False
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_initializers)
    # Value infos of folded tensors would now shadow the initializers' own types.
    folded = {t.name for t in new_initializers}
    infos = [vi for vi in graph.value_info if vi.name not in folded]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return True


def _record_learned_types(model: onnx.ModelProto, learned: dict[str, onnx.TypeProto]) -> bool:
    graph = model.graph
    declared = {vi.name for vi in list(graph.input) + list(graph.output)} | {t.name for t in graph.initializer}
    new = {name: t for name, t in learned.items() if name not in declared}
    if not new:
        return False
    infos = [vi for vi in graph.value_info if vi.name not in new]
    infos += [helper.make_value_info(name, t) for name, t in new.items()]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return True


def _infer_one_node(
    model: onnx.ModelProto, node: onnx.NodeProto, inputs: list[str],
    types: dict[str, onnx.TypeProto], constants: dict[str, onnx.TensorProto],
) -> dict[str, onnx.TypeProto]:
    """The output types onnx infers for `node` alone; {} if it cannot."""
    by_value = [constants[name] for name in dict.fromkeys(inputs)
                if name in constants and element_count(constants[name].dims) <= _BY_VALUE_MAX_ELEMENTS]
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_value_info(name, types[name]) for name in dict.fromkeys(inputs)],
        [helper.make_empty_tensor_value_info(name) for name in node.output if name],
        by_value,
    )
    single = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        inferred = shape_inference.infer_shapes(single, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # the whole-model inference reports the model's errors with their context
        return {}
    return {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}


def _try_fold(node: onnx.NodeProto, label: str, state: _FoldState) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD or state.left_to_passes(node):
        return None
    if node.op_type in ("Shape", "Size") and node.input and state.shape(node.input[0]) is not None:
        shape = state.shape(node.input[0]) or ()
        if node.op_type == "Size":
            return [np.array(element_count(shape), dtype=np.int64)]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end")
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    inputs = [name for name in node.input if name]
    if not all(name in state.constants for name in inputs) or not _within_budget(node, inputs, state):
        return None
    feeds = {name: initializer_array(state.constants[name], state.source) for name in inputs}
    try:
        return _evaluate(node, feeds, state.opset)
    except Exception as e:
        raise ModelLoadError(
            f"{state.source}: node {label!r} ({node.op_type}): cannot evaluate its constant inputs: {e}"
        ) from e


def _within_budget(node: onnx.NodeProto, inputs: list[str], state: _FoldState) -> bool:
    """Whether folding `node` stays within the folding budget, known before computing anything
    from its outputs' inferred shapes: each output within FOLD_MAX_ELEMENTS and FOLD_MAX_BYTES,
    or no larger than the node's constant inputs together (a Transpose or Cast of a big weight
    folds: the file already holds that much), or read only as weights (WEIGHT_INPUTS). Where
    onnx cannot infer the shapes (NonZero, Unique: sizes that depend on the values, but no
    larger than the inputs) the inputs' total size is the bound."""
    in_elements = sum(element_count(state.constants[name].dims) for name in inputs)
    in_bytes = sum(element_count(state.constants[name].dims) * _itemsize(state.constants[name].data_type)
                   for name in inputs)
    outputs = [name for name in node.output if name]
    shapes = [state.shape(name) for name in outputs]
    if any(shape is None for shape in shapes):
        return node.op_type not in VALUE_SIZED and in_elements <= FOLD_MAX_ELEMENTS
    if state.read_only_as_weights(node) and all(too_many_elements(shape or ()) is None for shape in shapes):
        return True
    for name, shape in zip(outputs, shapes):
        count = element_count(shape or ())
        nbytes = count * _itemsize(state.types[name].tensor_type.elem_type)
        if count > max(FOLD_MAX_ELEMENTS, in_elements) or nbytes > max(FOLD_MAX_BYTES, in_bytes):
            return False
    return True


def _itemsize(elem_type: int) -> int:
    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # undefined or string types: count 8 bytes an element
        return 8


def _evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """Run one node with onnx's reference implementation at the model's opset; the result lists
    one value per entry of node.output (an empty array where the output is omitted).

    The node goes in a one-node model that imports the opset: given a bare NodeProto,
    ReferenceEvaluator ignores `opsets` and runs the newest version of the op, whose meaning may
    differ (Unsqueeze-13 reads axes from an input, Unsqueeze-1 from an attribute). Ops the
    reference cannot evaluate for every valid input run aot/frontend/numpy_folds.py instead."""
    if node.op_type in NUMPY_FOLDS:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        values = NUMPY_FOLDS[node.op_type]([feeds[name] if name else None for name in node.input], attributes)
        return [np.asarray(value) for value in values]
    outputs = [name for name in node.output if name]
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_empty_tensor_value_info(name) for name in feeds],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
    )
    opset = max(opset, REFERENCE_SINCE.get(node.op_type, opset))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    results = dict(zip(outputs, ReferenceEvaluator(model).run(None, feeds), strict=True))
    return [np.asarray(results[name]) if name else np.zeros(0) for name in node.output]
