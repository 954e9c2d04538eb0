"""The table of supported ops that `aot ops` prints and docs/ops.md holds: derived from the op
registry (aot/lowering/registry.py), the ONNX schemas for each op's opset versions and input names, and
a short list of limits the lowerings enforce (each one is an error naming the node)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import onnx.defs

import aot.ops  # noqa: F401  (importing the package registers every op)
from aot.frontend.loader import MIN_OPSET
from aot.ir.graph import DEFAULT_DOMAINS
from aot.lowering.registry import constant_inputs, registered_op_types

# Limits stated by the lowerings (their errors name the node), in one line per op.
_LIMITS: dict[str, str] = {
    "Attention": "float32; one kernel holding the scores of one block of queries at a time",
    "com.microsoft::MultiHeadAttention": "float32; separate query, key and value; key_padding_mask [batch, keys]; "
                                         "no cache_indirection, no qk output, no bias with a past cache",
    "AveragePool": "float types",
    "BatchNormalization": "inference only: no running-statistics outputs (export in eval mode)",
    "Cast": "no float8 casts",
    "Conv": "float types; 3x3 convolutions may run as Winograd (`--conv-algorithm direct` to avoid it)",
    "ConvTranspose": "register tiles for 1-D and 2-D with constant float32 weights; a gather loop otherwise",
    "DequantizeLinear": "per tensor, per axis or in blocks; float32 scales only",
    "Dropout": "inference only (training_mode must be false): an identity",
    "Einsum": "numeric types",
    "Gather": "run-time indices out of range are clamped; constant ones are refused",
    "GatherElements": "run-time indices out of range are clamped; constant ones are refused",
    "GatherND": "int64 indices; run-time indices out of range are clamped",
    "Gemm": "float types (int8: QGemm, MatMulInteger, or QDQ groups)",
    "GRU": "sequence_lens clamped to the sequence",
    "LSTM": "sequence_lens clamped to the sequence",
    "MatMul": "float types (int8: QLinearMatMul, MatMulInteger, or QDQ groups)",
    "MaxPool": "float types, int8 and uint8",
    "Pad": "modes constant, reflect, edge, wrap; reflect pads wider than the axis less one are refused",
    "QuantizeLinear": "per tensor, per axis or in blocks; int8, uint8, int16, uint16 outputs; float32 scales",
    "Resize": "modes nearest, linear, cubic (float types for linear and cubic)",
    "RNN": "sequence_lens clamped to the sequence",
    "Upsample": "modes nearest and linear",
    "com.microsoft::QLinearAveragePool": "no dilations",
    "com.microsoft::QLinearSoftmax": "onnxruntime's exp table, bit for bit; the opset attribute is required",
}


@dataclass(frozen=True)
class OpRow:
    """One supported op: its domain, name, the ONNX opsets that define it and what it requires."""

    domain: str
    op: str
    opsets: str
    notes: str


def _split(qualified: str) -> tuple[str, str]:
    domain, _, op = qualified.rpartition("::")
    return domain or "ai.onnx", op


def _schemas(domain: str, op: str) -> list[onnx.defs.OpSchema]:
    onnx_domain = "" if domain in DEFAULT_DOMAINS else domain
    return sorted((s for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == onnx_domain),
                  key=lambda s: s.since_version)


def _opsets(schemas: list[onnx.defs.OpSchema]) -> str:
    """`7+`, or `1-9` for an op ONNX deprecated; empty for ops without an ONNX schema."""
    if not schemas:
        return ""
    first = schemas[0].since_version
    if schemas[-1].deprecated:
        return f"{first}-{schemas[-1].since_version - 1}"
    return f"{first}+"


def _constant_note(qualified: str, schemas: list[onnx.defs.OpSchema]) -> str:
    domain, op = _split(qualified)
    positions = constant_inputs(op, "" if domain == "ai.onnx" else domain)
    if not positions:
        return ""
    formal = schemas[-1].inputs if schemas else []
    names = [formal[i].name if i < len(formal) else f"input {i}" for i in positions]
    return "compile-time constant " + ", ".join(f"`{name}`" for name in names)


def op_rows() -> list[OpRow]:
    """Every registered op, ai.onnx first, then the other domains, each sorted by name."""
    rows = []
    for qualified in registered_op_types():
        domain, op = _split(qualified)
        schemas = _schemas(domain, op)
        notes = [n for n in (_constant_note(qualified, schemas), _LIMITS.get(qualified, "")) if n]
        rows.append(OpRow(domain, op, _opsets(schemas) or "1", "; ".join(notes)))
    return sorted(rows, key=lambda r: (r.domain != "ai.onnx", r.domain, r.op))


def limited_ops() -> list[str]:
    """The ops _LIMITS describes (each must be registered: tests/test_docs.py checks it)."""
    return sorted(_LIMITS)


def markdown(rows: list[OpRow]) -> str:
    """The table as a markdown page: a title, the command that writes it, what the columns mean."""
    lines = [
        "# Supported ops",
        "",
        "Generated from the op registry by `aot ops > docs/ops.md` (`aot ops --json` for scripts).",
        "",
        f"{len(rows)} ops. *Opsets*: the ONNX opset versions that define the op (`7+`: from opset 7 to the",
        "newest the installed onnx knows); models older than opset "
        f"{MIN_OPSET} are upgraded by onnx's version converter",
        "first. *Notes*: inputs that must be compile-time constants (they decide shapes), and the limits",
        "the compiler checks (each refused with an error naming the node).",
        "",
        "| domain | op | opsets | notes |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r.domain} | {r.op} | {r.opsets} | {r.notes} |" for r in rows]
    return "\n".join(lines) + "\n"


def as_json(rows: list[OpRow]) -> list[dict[str, str]]:
    return [asdict(r) for r in rows]


def ops_command(as_json_output: bool) -> None:
    """`aot ops`: print the table as markdown (docs/ops.md is this output), or as one JSON list."""
    import json

    rows = op_rows()
    print(json.dumps(as_json(rows)) if as_json_output else markdown(rows), end="" if not as_json_output else "\n")
