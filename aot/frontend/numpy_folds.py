"""numpy implementations of the ops whose onnx reference implementation cannot fold every valid
input, used by shape_folding in its place.

onnx's GatherElements goes through np.choose, which takes at most 32 (numpy 1) or 64 (numpy 2)
choices: a position table gathered over 512 entries (BERT's token-type buffer as transformers
exports it) failed to fold though the model is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def _normalised_indices(indices: np.ndarray, extent: int, op: str) -> np.ndarray:
    """`indices` with negative entries counted from the end; ValueError naming `op` when any
    lies outside [-extent, extent - 1]."""
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (indices.min() < -extent or indices.max() >= extent):
        bad = indices[(indices < -extent) | (indices >= extent)].flat[0]
        raise ValueError(f"{op}: index {int(bad)} is out of range for an axis of {extent} entries")
    return np.where(indices < 0, indices + extent, indices)


def gather_elements(inputs: Sequence[np.ndarray | None], attributes: dict[str, object]) -> list[np.ndarray]:
    data, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
    if data.ndim != indices.ndim or data.ndim == 0:
        raise ValueError(f"GatherElements: data has rank {data.ndim} and indices rank {indices.ndim}")
    axis = int(attributes.get("axis", 0))  # type: ignore[call-overload]
    if not -data.ndim <= axis < data.ndim:
        raise ValueError(f"GatherElements: axis {axis} is out of range for rank {data.ndim}")
    axis %= data.ndim
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise ValueError(f"GatherElements: indices shape {list(indices.shape)} exceeds data shape "
                         f"{list(data.shape)} outside axis {axis}")
    # Outside the axis the output covers the leading part of data (the indices' extent).
    window = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))
    positions = _normalised_indices(indices, data.shape[axis], "GatherElements")
    return [np.take_along_axis(data[window], positions, axis=axis)]


NUMPY_FOLDS: dict[str, Callable[[Sequence[np.ndarray | None], dict[str, object]], list[np.ndarray]]] = {
    "GatherElements": gather_elements,
}
