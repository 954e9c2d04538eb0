"""RNN, GRU and LSTM against onnxruntime: directions, initial states, sequence_lens, peepholes,
linear_before_reset, activations with alpha/beta, clip, layout 0 and 1, and output subsets.

onnxruntime rejects layout=1 (batch-major); those cases compare against onnxruntime running the
same node in layout 0 on transposed inputs, which is what layout=1 means.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.commands.verify import compare
from aot.compiler import compile as compile_model
from aot.errors import AotError
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass
class Rnn:
    """One recurrent node with its weights; optional inputs are included when set."""

    kind: str
    direction: str = "forward"
    seq: int = 5
    batch: int = 3
    input_size: int = 4
    hidden: int = 6
    bias: bool = True
    initial_h: bool = False
    initial_c: bool = False
    peepholes: bool = False
    lens: list[int] | None = None
    runtime_lens: bool = False
    runtime_weights: bool = False
    outputs: tuple[str, ...] = ("y", "y_h", "y_c")
    attrs: dict = field(default_factory=dict)
    opset: int = 14

    @property
    def directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def build(self, layout: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        g, d, h = GATES[self.kind], self.directions, self.hidden
        # Data is drawn in layout 0 and transposed for layout 1, so both layouts of a case hold
        # the same values.
        def major(a: np.ndarray) -> np.ndarray:
            return a.transpose(1, 0, 2).copy() if layout == 1 else a

        x = major(rand(self.seq, self.batch, self.input_size) * 1.5)
        state = (d, self.batch, h)
        feeds = {"x": x}
        inits: dict[str, np.ndarray] = {}
        names = ["x"]

        def add(name: str, value: np.ndarray | None, runtime: bool = False) -> None:
            if value is None:
                names.append("")
                return
            (feeds if runtime else inits)[name] = value
            names.append(name)

        # Weights scaled so that gates are neither saturated nor linear.
        add("w", rand(d, g * h, self.input_size, seed=1) * 0.6, self.runtime_weights)
        add("r", rand(d, g * h, h, seed=2) * 0.4, self.runtime_weights)
        add("b", rand(d, 2 * g * h, seed=3) * 0.5 if self.bias else None, self.runtime_weights)
        add("lens", np.array(self.lens, np.int32) if self.lens is not None else None, self.runtime_lens)
        add("h0", major(rand(*state, seed=4)) if self.initial_h else None)
        if self.kind == "LSTM":
            add("c0", major(rand(*state, seed=5)) if self.initial_c else None)
            add("p", rand(d, 3 * h, seed=6) * 0.5 if self.peepholes else None)
        while names[-1] == "":
            names.pop()
        outputs = list(self.outputs if self.kind == "LSTM" else self.outputs[:2])
        attrs = {"hidden_size": h, "direction": self.direction, **self.attrs}
        if layout == 1:
            attrs["layout"] = 1
        node = helper.make_node(self.kind, names, outputs, **attrs)
        model = make_model([node], feeds, [o for o in outputs if o], inits, opset=self.opset)
        return model, feeds


def check(case: Rnn) -> None:
    model, feeds = case.build()
    assert_matches_onnxruntime(model, feeds)


KINDS = ["RNN", "GRU", "LSTM"]
DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize("initial", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_directions_states_bias(kind: str, direction: str, bias: bool, initial: bool) -> None:
    check(Rnn(kind, direction, bias=bias, initial_h=initial, initial_c=initial))


@pytest.mark.parametrize("opset", [7, 14, 21])
@pytest.mark.parametrize("kind", KINDS)
def test_opsets(kind: str, opset: int) -> None:
    check(Rnn(kind, "bidirectional", initial_h=True, opset=opset))


OUTPUT_SUBSETS = [("y", "", ""), ("", "y_h", ""), ("", "", "y_c"), ("y", "", "y_c"), ("", "y_h", "y_c"),
                  ("y", "y_h", "")]


@pytest.mark.parametrize("kind,outputs", [(k, o) for k in KINDS for o in OUTPUT_SUBSETS
                                          if k == "LSTM" or any(o[:2])], ids=str)
def test_output_subsets(kind: str, outputs: tuple[str, ...]) -> None:
    check(Rnn(kind, "bidirectional", outputs=outputs))


@pytest.mark.parametrize("runtime", [False, True], ids=["constant_lens", "runtime_lens"])
@pytest.mark.parametrize("lens", [[5, 3, 1], [2, 5, 4], [5, 5, 5], [0, 4, 2]], ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_sequence_lens(kind: str, direction: str, lens: list[int], runtime: bool) -> None:
    check(Rnn(kind, direction, lens=lens, runtime_lens=runtime, initial_h=True, initial_c=True))


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes(direction: str) -> None:
    check(Rnn("LSTM", direction, peepholes=True, initial_h=True, initial_c=True))


@pytest.mark.parametrize("peepholes", [False, True])
def test_lstm_input_forget(peepholes: bool) -> None:
    check(Rnn("LSTM", "bidirectional", peepholes=peepholes, attrs={"input_forget": 1}))


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction: str, bias: bool) -> None:
    check(Rnn("GRU", direction, bias=bias, initial_h=True, attrs={"linear_before_reset": 1}))


ACTIVATION_CASES = {
    "RNN": [
        {"activations": ["Relu"]},
        {"activations": ["Sigmoid"]},
        {"activations": ["Softsign"]},
        {"activations": ["Softplus"]},
        {"activations": ["Affine"], "activation_alpha": [0.4], "activation_beta": [0.2]},
        {"activations": ["LeakyRelu"], "activation_alpha": [0.3]},
        {"activations": ["LeakyRelu"]},  # default alpha 0.01
        {"activations": ["ThresholdedRelu"], "activation_alpha": [0.25]},
        {"activations": ["ScaledTanh"], "activation_alpha": [1.5], "activation_beta": [0.7]},
        {"activations": ["HardSigmoid"], "activation_alpha": [0.3], "activation_beta": [0.6]},
        {"activations": ["HardSigmoid"]},  # defaults 0.2, 0.5
        {"activations": ["Elu"], "activation_alpha": [0.8]},
        {"activations": ["Elu"]},
    ],
    "GRU": [
        {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.45]},
        {"activations": ["Sigmoid", "Relu"]},
        {"activations": ["Sigmoid", "ScaledTanh"], "activation_alpha": [0.9], "activation_beta": [1.1]},
        {"activations": ["Affine", "Elu"], "activation_alpha": [0.2, 0.5], "activation_beta": [0.5]},
    ],
    "LSTM": [
        {"activations": ["Sigmoid", "Affine", "ScaledTanh"], "activation_alpha": [0.5, 0.7],
         "activation_beta": [0.1, 1.3]},
        {"activations": ["HardSigmoid", "LeakyRelu", "Elu"]},
        {"activations": ["HardSigmoid", "Tanh", "Softplus"], "activation_alpha": [0.25], "activation_beta": [0.4]},
        {"activations": ["Sigmoid", "Softsign", "ThresholdedRelu"], "activation_alpha": [0.1]},
        {"activations": ["sigmoid", "tanh", "relu"]},  # names are case-insensitive
    ],
}


@pytest.mark.parametrize("kind,attrs", [(k, a) for k, cases in ACTIVATION_CASES.items() for a in cases], ids=str)
def test_activations(kind: str, attrs: dict) -> None:
    check(Rnn(kind, attrs=attrs))


@pytest.mark.parametrize("kind", KINDS)
def test_bidirectional_activations_per_direction(kind: str) -> None:
    forward = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
    backward = {"RNN": ["LeakyRelu"], "GRU": ["HardSigmoid", "Softsign"],
                "LSTM": ["HardSigmoid", "Elu", "ScaledTanh"]}[kind]
    attrs = {"activations": forward + backward, "activation_alpha": [0.3, 0.9], "activation_beta": [0.4, 1.2]}
    check(Rnn(kind, "bidirectional", attrs=attrs))


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("kind", KINDS)
def test_clip(kind: str, direction: str) -> None:
    check(Rnn(kind, direction, initial_h=True, attrs={"clip": 0.6}))


@pytest.mark.parametrize("kind", KINDS)
def test_runtime_weights(kind: str) -> None:
    check(Rnn(kind, "bidirectional", runtime_weights=True, initial_h=True))


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 4, 3, 2), (7, 1, 2, 3), (3, 2, 16, 32)], ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_sizes(kind: str, shape: tuple[int, int, int, int]) -> None:
    seq, batch, input_size, hidden = shape
    check(Rnn(kind, "bidirectional", seq=seq, batch=batch, input_size=input_size, hidden=hidden))


def _to_layout0(name: str, value: np.ndarray) -> np.ndarray:
    """A layout-1 tensor in layout 0: X and states swap their first two axes, Y goes from
    (batch, seq, dir, hidden) to (seq, dir, batch, hidden)."""
    if value.ndim == 4:
        return value.transpose(1, 2, 0, 3)
    return value.transpose(1, 0, 2)


@pytest.mark.parametrize("opset", [14, 21])
@pytest.mark.parametrize("case", [
    Rnn("RNN", "bidirectional", initial_h=True),
    Rnn("GRU", "reverse", initial_h=True, lens=[4, 5, 2]),
    Rnn("GRU", "forward", attrs={"linear_before_reset": 1}),
    Rnn("LSTM", "forward", initial_h=True, initial_c=True, peepholes=True),
    Rnn("LSTM", "bidirectional", initial_h=True, initial_c=True, lens=[3, 1, 5]),
    Rnn("LSTM", "reverse", outputs=("", "y_h", "y_c")),
], ids=lambda c: f"{c.kind}-{c.direction}-{'lens' if c.lens else 'full'}")
def test_layout_batch_major(case: Rnn, opset: int) -> None:
    case.opset = opset
    model1, feeds1 = case.build(layout=1)
    model0, _ = case.build(layout=0)
    feeds0 = {k: (_to_layout0(k, v) if k == "x" else v) for k, v in feeds1.items()}
    expected = run_onnxruntime(model0, feeds0)
    ours = run_aot(model1, feeds1)
    for name, want in expected.items():
        got = _to_layout0(name, ours[name])
        result = compare(name, got, want, 1e-4)
        assert result.passed, (name, result)


def test_unsupported_activation_is_reported() -> None:
    model, _ = Rnn("RNN", attrs={"activations": ["Gelu"]}).build()
    with pytest.raises(AotError, match="unsupported activation 'Gelu'"):
        compile_model(model)


@pytest.mark.parametrize("kind", KINDS)
def test_single_step_with_lens_final_state_only(kind: str) -> None:
    """Found by onnx's test_lstm_with_peepholes: one time step, runtime sequence_lens and no Y
    left the reverse/forward time index unused (a -Werror build failure)."""
    check(Rnn(kind, seq=1, batch=2, lens=[1, 0], runtime_lens=True, initial_h=True, initial_c=True,
              peepholes=True, outputs=("", "y_h", "y_c")))


# The register-tiled steps (aot/ops/recurrent/recurrence.py): a hidden size of vector width
# multiples (128: a batch-1 tile spans several gate panels), and ragged ones (20, 33: the last
# vector of a panel overlaps the one before, or the panel is narrower than a vector); batch 1
# (one tile row) and 3 (three rows sharing each load of R). The tolerance stays the default
# 1e-4 of the outputs' scale: our gates are the polynomials of aot/kernel/transcendentals.py
# (sigmoid within 2.5 ulp, tanh within 1.5 ulp), onnxruntime's are its own approximations of a
# few ulp, and the dot products over the hidden state round differently (fused multiply-adds,
# another order), about 1e-7 relative per step; the gates are contractions, so over these
# sequences the differences stay near 1e-6, far under the tolerance.
TILED_SIZES = [(128, 1), (128, 3), (20, 1), (33, 3)]


@pytest.mark.parametrize("hidden,batch", TILED_SIZES, ids=lambda v: str(v))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_tiled_steps(kind: str, direction: str, hidden: int, batch: int) -> None:
    check(Rnn(kind, direction, seq=6, batch=batch, input_size=24, hidden=hidden, initial_h=True, initial_c=True))


@pytest.mark.parametrize("hidden,batch", [(128, 3), (33, 3)], ids=lambda v: str(v))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_tiled_steps_sequence_lens(kind: str, direction: str, hidden: int, batch: int) -> None:
    check(Rnn(kind, direction, seq=6, batch=batch, input_size=24, hidden=hidden, lens=[6, 2, 4],
              runtime_lens=True, initial_h=True))


@pytest.mark.parametrize("hidden,batch", TILED_SIZES, ids=lambda v: str(v))
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_tiled_gru_linear_before_reset(linear_before_reset: int, hidden: int, batch: int) -> None:
    check(Rnn("GRU", "bidirectional", seq=6, batch=batch, input_size=24, hidden=hidden, initial_h=True,
              attrs={"linear_before_reset": linear_before_reset}))


@pytest.mark.parametrize("kind", KINDS)
def test_tiled_steps_runtime_weights_clip_peepholes(kind: str) -> None:
    """Weights given at run time are packed for the tiles by the kernel itself (ragged panels)."""
    check(Rnn(kind, "bidirectional", seq=5, batch=3, input_size=24, hidden=33, runtime_weights=True,
              peepholes=kind == "LSTM", initial_h=True, attrs={"clip": 0.8}))


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_recurrence_calls_no_libm(tmp_path, backend: str) -> None:  # noqa: ANN001
    """LSTM, GRU and RNN with their default activations (Sigmoid, Tanh) and a Relu RNN: the built
    library leaves no float exp / tanh / log of the C library undefined (`nm -u`): the gates are
    the polynomials, so the time loop vectorises."""
    import shutil
    import subprocess

    from aot.host.run import host_variant

    if shutil.which("nm") is None:
        pytest.skip("needs nm (binutils)")
    cases = [Rnn("LSTM", "bidirectional", hidden=20), Rnn("GRU", "forward", hidden=20),
             Rnn("GRU", "reverse", hidden=20, attrs={"linear_before_reset": 1}), Rnn("RNN", hidden=20),
             Rnn("RNN", hidden=20, attrs={"activations": ["Relu"]})]
    for n, case in enumerate(cases):
        model, feeds = case.build()
        package = compile_model(model, name=f"rnn{n}", backend=backend)
        folder = package.write(tmp_path / f"pkg{n}")
        variant, target = host_variant(package)
        extra = [f"BACKEND={variant}", f"TARGET={target or ''}"] if backend == "llvm" else []
        subprocess.run(["make", "-s", "-C", str(folder), *extra, f"librnn{n}.a"], check=True, capture_output=True)
        undefined = set(subprocess.run(["nm", "-u", str(folder / f"librnn{n}.a")], check=True, capture_output=True,
                                       text=True).stdout.split())
        assert not {"expf", "tanhf", "logf", "expm1f", "log1pf", "powf"} & undefined, (case.kind, undefined)
