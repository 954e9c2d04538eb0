"""Per-channel affine maps y = x * a + b, as the graph pass that folds them into weights
(aot/passes/fold_affine.py) and the lowering that fuses them into epilogues (aot/lowering/
fusion.py, aot/ops/normalization.py) both see them."""

from __future__ import annotations

import numpy as np

# The contractions (ops with weights) that a following per-channel affine map folds into and
# that a following elementwise chain fuses into as an epilogue.
ANCHORS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def batchnorm_affine(scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
                     epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """BatchNormalization in inference mode as (a, b), y = x * a + b per channel: computed in
    float64 (the caller rounds once), from the flat per-channel parameters."""
    scale, bias, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in (scale, bias, mean, var))
    a = scale / np.sqrt(var + epsilon)
    return a, bias - mean * a
