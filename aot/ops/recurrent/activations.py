"""The gate activations of RNN, GRU and LSTM, with their activation_alpha/activation_beta.

Each is a kernel-IR expression of the gate's pre-activation. Sigmoid, Tanh, Elu and Softplus
use exp / tanh / log, which aot/kernel/transcendentals.py expands into polynomials, and every
select is eager (a blend, both sides computed): so a gate loop has no branch and no libm call,
and the compilers vectorise it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.ir.graph import Node
from aot.kernel.ir import Expr, const, gt, lt, maximum, minimum, select, unary
from aot.ops.attrs import fail

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}

# Which activations take alpha / beta, and their defaults when the attribute lists run out
# (onnxruntime's table: the ones not listed default to 0).
_TAKES = {"affine": (True, True), "relu": (False, False), "leakyrelu": (True, False),
          "thresholdedrelu": (True, False), "tanh": (False, False), "scaledtanh": (True, True),
          "sigmoid": (False, False), "hardsigmoid": (True, True), "elu": (True, False),
          "softsign": (False, False), "softplus": (False, False)}
_DEFAULTS = {"leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}


@dataclass(frozen=True)
class Activation:
    name: str  # lower case
    alpha: float
    beta: float

    def __call__(self, x: Expr) -> Expr:
        dt = x.dtype

        def f(v: float) -> Expr:
            return const(v, dt)

        zero, one = f(0.0), f(1.0)
        if self.name == "sigmoid":
            return one / (one + unary("exp", -x))
        if self.name == "tanh":
            return unary("tanh", x)
        if self.name == "relu":
            return select(lt(x, zero), zero, x, eager=True)
        if self.name == "affine":
            return f(self.alpha) * x + f(self.beta)
        if self.name == "leakyrelu":
            return select(lt(x, zero), f(self.alpha) * x, x, eager=True)
        if self.name == "thresholdedrelu":
            return select(gt(x, f(self.alpha)), x, zero, eager=True)
        if self.name == "scaledtanh":
            return f(self.alpha) * unary("tanh", f(self.beta) * x)
        if self.name == "hardsigmoid":
            return maximum(zero, minimum(one, f(self.alpha) * x + f(self.beta)))
        if self.name == "elu":
            return select(lt(x, zero), f(self.alpha) * (unary("exp", x) - one), x, eager=True)
        if self.name == "softsign":
            return x / (one + unary("abs", x))
        if self.name == "softplus":
            # log(1 + e^x) without overflowing for large x: max(x, 0) + log(1 + e^-|x|).
            return maximum(x, zero) + unary("log", one + unary("exp", -unary("abs", x)))
        raise AssertionError(self.name)


def parse_activations(node: Node, directions: int) -> list[list[Activation]]:
    """The gate activations of each direction, with their alpha/beta."""
    count = len(DEFAULT_ACTIVATIONS[node.op_type])
    names = node.attr("activations")
    if names is None:
        names = DEFAULT_ACTIVATIONS[node.op_type] * directions
    names = list(names)
    if len(names) == count and directions == 2:
        names = names * 2  # one set given for a bidirectional node: both directions use it
    if len(names) != count * directions:
        raise fail(node, f"activations lists {len(names)} functions, expected {count} per direction "
                         f"for {directions} direction(s)")
    alphas = iter(float(a) for a in node.attr("activation_alpha", []))
    betas = iter(float(b) for b in node.attr("activation_beta", []))
    parsed = []
    for raw in names:
        name = str(raw).lower()
        if name not in _TAKES:
            raise fail(node, f"unsupported activation {raw!r} (supported: Affine, Relu, LeakyRelu, ThresholdedRelu, "
                             "Tanh, ScaledTanh, Sigmoid, HardSigmoid, Elu, Softsign, Softplus)")
        takes_alpha, takes_beta = _TAKES[name]
        default_alpha, default_beta = _DEFAULTS.get(name, (0.0, 0.0))
        alpha = next(alphas, default_alpha) if takes_alpha else 0.0
        beta = next(betas, default_beta) if takes_beta else 0.0
        parsed.append(Activation(name, alpha, beta))
    return [parsed[d * count:(d + 1) * count] for d in range(directions)]
