"""Trains a small digit classifier on scikit-learn's digits dataset (8x8 images, ships with
scikit-learn: no download) and exports it to ONNX; saves the test split as .npy for the C program.

    python train.py OUTDIR      -> OUTDIR/digits.onnx, test_x.npy, test_y.npy, python_accuracy.txt,
                                   calibration.npz (20 training images, for the int8 variant)

The network is a 64-32-10 MLP (Gemm, Relu, Gemm, Softmax) trained with Adam in numpy, so the
example needs no deep-learning framework.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def train(x: np.ndarray, y: np.ndarray, hidden: int = 32, epochs: int = 300, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal((64, hidden)) * np.sqrt(2 / 64), np.zeros(hidden),
              rng.standard_normal((hidden, 10)) * np.sqrt(2 / hidden), np.zeros(10)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    onehot = np.eye(10)[y]
    for step in range(1, epochs + 1):
        w1, b1, w2, b2 = params
        h = np.maximum(x @ w1 + b1, 0)
        logits = h @ w2 + b2
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        d_logits = (p - onehot) / len(x)
        d_h = (d_logits @ w2.T) * (h > 0)
        grads = [x.T @ d_h, d_h.sum(0), h.T @ d_logits, d_logits.sum(0)]
        for i, g in enumerate(grads):  # Adam
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            params[i] -= 0.01 * (m[i] / (1 - 0.9**step)) / (np.sqrt(v[i] / (1 - 0.999**step)) + 1e-8)
    return [p.astype(np.float32) for p in params]


def export(params: list[np.ndarray], path: Path) -> None:
    w1, b1, w2, b2 = params
    nodes = [helper.make_node("Gemm", ["image", "w1", "b1"], ["h"], name="hidden"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], name="classifier"),
             helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1)]
    graph = helper.make_graph(
        nodes, "digits", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(a, n) for a, n in zip(params, ["w1", "b1", "w2", "b2"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="aot-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.3, random_state=0,
                                                        stratify=digits.target)
    params = train(x_train.astype(np.float64), y_train)
    export(params, out / "digits.onnx")
    # Python's accuracy: the same float32 network evaluated by numpy.
    w1, b1, w2, b2 = params
    predicted = (np.maximum(x_test @ w1 + b1, 0) @ w2 + b2).argmax(axis=1)
    accuracy = float((predicted == y_test).mean())
    np.save(out / "test_x.npy", x_test.astype(np.float32))
    # 20 training images for `aot quantize` to calibrate the int8 variant: [samples, 1, 64].
    np.savez(out / "calibration.npz", image=x_train[:20].reshape(20, 1, 64).astype(np.float32))
    np.save(out / "test_y.npy", y_test.astype(np.int64))
    (out / "python_accuracy.txt").write_text(f"{accuracy:.6f}\n")
    print(f"python: {int((predicted == y_test).sum())}/{len(y_test)} correct, accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/digits"))
