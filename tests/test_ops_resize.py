"""Resize (opsets 10-19) and Upsample (7-9) against onnxruntime: modes, coordinate
transformations, nearest roundings, cubic parameters, tf_crop_and_resize, antialias, axes and
keep_aspect_ratio_policy, with scales or sizes.

Where onnxruntime refuses a combination (e.g. cubic on a 3-D tensor) or departs from the
specification's reference, the check runs against onnx's reference implementation
(onnx/reference/ops/op_resize.py), which generated the ONNX conformance data: with a scale whose
output length scale * length is fractional, align_corners and tf_crop_and_resize divide by that
fractional length minus 1 in the reference and by the integer output length minus 1 in
onnxruntime; pytorch_half_pixel with a one-pixel output samples at -0.5 in the reference and at
0 in onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import Fail as OrtFail
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

from aot.commands.verify import compare
from aot.compiler import compile as compile_model
from aot.errors import AotError
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

COORDINATE_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def resize_model(x: np.ndarray, scales: list[float] | None = None, sizes: list[int] | None = None,
                 roi: list[float] | None = None, opset: int = 19, **attrs: object) -> onnx.ModelProto:
    inits: dict[str, np.ndarray] = {}
    names = ["x", "", "", ""]
    if roi is not None:
        inits["roi"], names[1] = np.array(roi, np.float32), "roi"
    if scales is not None:
        inits["scales"], names[2] = np.array(scales, np.float32), "scales"
    if sizes is not None:
        inits["sizes"], names[3] = np.array(sizes, np.int64), "sizes"
    if opset == 11 and not names[1]:
        inits["roi"], names[1] = np.zeros(0, np.float32), "roi"  # roi is not optional in Resize-11
    if opset == 11 and not names[2]:
        inits["scales"], names[2] = np.zeros(0, np.float32), "scales"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attrs)
    return make_model([node], {"x": x}, ["y"], inits, opset=opset)


def fractional_length(shape: tuple[int, ...], scales: list[float]) -> bool:
    return any(float(np.float32(s)) * n != int(float(np.float32(s)) * n) for s, n in zip(scales, shape))


def assert_matches_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    ours = run_aot(model, feeds)["y"]
    result = compare("y", ours, expected, 1e-4)
    assert result.passed, result


def assert_matches(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """onnxruntime, or the reference where onnxruntime refuses the case outright (it restricts
    linear and cubic to some ranks and has no int64 Resize); never where it merely disagrees."""
    try:
        run_onnxruntime(model, feeds)
    except (OrtFail, OrtNotImplemented) as e:
        if "only support" not in str(e) and "Could not find an implementation" not in str(e):
            raise
        assert_matches_reference(model, feeds)
        return
    assert_matches_onnxruntime(model, feeds)


# 4-D NCHW images (onnxruntime's linear/cubic want the outer two scales to be 1).
SCALE_CASES = {"up2": [1, 1, 2, 2], "up_frac": [1, 1, 1.7, 2.4], "down": [1, 1, 0.5, 0.5],
               "down_frac": [1, 1, 0.6, 0.8], "mixed": [1, 1, 2.5, 0.7]}


@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("scales", list(SCALE_CASES))
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_scales(mode: str, scales: str, coordinate_mode: str) -> None:
    x = rand(1, 2, 6, 5)
    model = resize_model(x, scales=SCALE_CASES[scales], mode=mode, coordinate_transformation_mode=coordinate_mode)
    if coordinate_mode == "align_corners" and fractional_length(x.shape, SCALE_CASES[scales]):
        assert_matches_reference(model, {"x": x})
    else:
        assert_matches_onnxruntime(model, {"x": x})


SIZE_CASES = {"up": [1, 2, 9, 13], "down": [1, 2, 4, 3], "one": [1, 2, 1, 1], "same": [1, 2, 6, 5]}


@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("sizes", list(SIZE_CASES))
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_sizes(mode: str, sizes: str, coordinate_mode: str) -> None:
    x = rand(1, 2, 6, 5)
    model = resize_model(x, sizes=SIZE_CASES[sizes], mode=mode, coordinate_transformation_mode=coordinate_mode)
    if mode == "cubic" and coordinate_mode == "pytorch_half_pixel" and sizes == "one":
        # A 1-pixel output: the spec samples at -0.5, onnxruntime at 0 (cubic weights differ).
        assert_matches_reference(model, {"x": x})
    else:
        assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn"])
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("sizes", [[1, 1, 9, 7], [1, 1, 3, 2], [1, 1, 8, 10]], ids=str)
def test_resize_nearest_modes(sizes: list[int], nearest_mode: str, coordinate_mode: str) -> None:
    x = rand(1, 1, 4, 5)
    opset = 11 if coordinate_mode == "tf_half_pixel_for_nn" else 19  # removed after opset 12
    model = resize_model(x, sizes=sizes, mode="nearest", nearest_mode=nearest_mode,
                         coordinate_transformation_mode=coordinate_mode, opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("a", [-0.75, -0.5, -0.6])
@pytest.mark.parametrize("scales", [[1, 1, 1.6, 2.0], [1, 1, 0.7, 0.5]], ids=str)
def test_resize_cubic_parameters(scales: list[float], a: float, exclude_outside: int) -> None:
    x = rand(2, 1, 5, 6)
    model = resize_model(x, scales=scales, mode="cubic", cubic_coeff_a=a, exclude_outside=exclude_outside)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi,extrapolation", [
    ([0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8], None),
    ([0, 0, -0.2, 0.1, 1, 1, 1.3, 0.9], 10.0),  # samples outside the input take extrapolation_value
    ([0, 0, 0.9, 0.2, 1, 1, 0.1, 0.7], -1.5),  # a flipped crop
], ids=str)
def test_resize_tf_crop_and_resize(mode: str, roi: list[float], extrapolation: float | None) -> None:
    x = rand(1, 2, 5, 6)
    attrs = {} if extrapolation is None else {"extrapolation_value": extrapolation}
    model = resize_model(x, sizes=[1, 2, 4, 7], roi=roi, mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                         **attrs)
    assert_matches_onnxruntime(model, {"x": x})


def test_resize_tf_crop_and_resize_with_axes() -> None:
    x = rand(1, 1, 6, 6)
    model = resize_model(x, sizes=[5, 3], roi=[0.6, 0.1, 1.1, 0.8], axes=[3, 2], mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.0)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("target", [{"scales": [1, 1, 0.6, 0.4]}, {"sizes": [1, 1, 3, 5]},
                                    {"scales": [1, 1, 1.5, 0.5]}], ids=str)
def test_resize_antialias(mode: str, target: dict) -> None:
    x = rand(1, 1, 8, 9)
    model = resize_model(x, mode=mode, antialias=1, opset=18, **target)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("axes,target", [
    ([2, 3], {"scales": [2.0, 1.5]}), ([3, 2], {"sizes": [7, 3]}), ([-1], {"scales": [0.5]}),
    ([2], {"sizes": [11]}),
], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes(mode: str, axes: list[int], target: dict) -> None:
    x = rand(2, 3, 5, 6)
    model = resize_model(x, mode=mode, axes=axes, opset=18, **target)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller", "stretch"])
@pytest.mark.parametrize("sizes,axes", [([1, 1, 7, 8], None), ([9, 4], [2, 3]), ([3, 10], [3, 2])], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_keep_aspect_ratio(mode: str, sizes: list[int], axes: list[int] | None, policy: str) -> None:
    x = rand(1, 1, 4, 6)
    attrs: dict[str, object] = {"keep_aspect_ratio_policy": policy}
    if axes is not None:
        attrs["axes"] = axes
    model = resize_model(x, sizes=sizes, mode=mode, opset=18, **attrs)
    assert_matches(model, {"x": x})  # without axes the policy scales N and C as well


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_opsets(mode: str, opset: int) -> None:
    x = rand(1, 3, 4, 4)
    model = resize_model(x, scales=[1, 1, 1.5, 2], mode=mode, opset=opset,
                         coordinate_transformation_mode="align_corners" if opset == 11 else "half_pixel")
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.int8])
def test_resize_nearest_integers(dtype: type) -> None:
    x = (rand(1, 2, 3, 4) * 20).astype(dtype)
    model = resize_model(x, scales=[1, 1, 2, 1.5], mode="nearest")
    assert_matches(model, {"x": x})


@pytest.mark.parametrize("shape,scales,mode", [
    ((2, 7), [1.5, 0.6], "linear"),  # 2-D
    ((1, 2, 5), [1, 1, 2.5], "linear"),  # 1-D spatial
    ((1, 1, 3, 4, 5), [1, 1, 2, 1.5, 0.5], "linear"),  # trilinear
    ((1, 2, 5), [1, 1, 1.8], "cubic"),
    ((2, 3, 4), [2, 1, 0.5], "nearest"),  # every axis, including batch
    ((1, 1, 3, 4, 5), [1, 1, 2, 1.5, 0.5], "cubic"),
], ids=str)
def test_resize_other_ranks(shape: tuple[int, ...], scales: list[float], mode: str) -> None:
    x = rand(*shape)
    model = resize_model(x, scales=scales, mode=mode)
    assert_matches(model, {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 3, 1.5], [1, 1, 0.5, 0.6]], ids=str)
def test_resize_opset10(mode: str, scales: list[float]) -> None:
    x = rand(1, 2, 4, 5)
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode=mode)
    model = make_model([node], {"x": x}, ["y"], {"scales": np.array(scales, np.float32)}, opset=10)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("opset", [7, 8, 9])
def test_upsample(opset: int, mode: str) -> None:
    x = rand(1, 2, 3, 4)
    scales = [1.0, 1.0, 2.0, 1.5]
    if opset < 9:
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)
        model = make_model([node], {"x": x}, ["y"], opset=opset)
    else:
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
        model = make_model([node], {"x": x}, ["y"], {"scales": np.array(scales, np.float32)}, opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


def test_resize_runtime_scales_are_refused() -> None:
    x = rand(1, 1, 2, 2)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", name="dyn_resize")
    model = make_model([node], {"x": x, "scales": np.array([1, 1, 2, 2], np.float32)}, ["y"],
                       output_shapes={"y": [1, 1, 4, 4]})
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 4, 4]))
    with pytest.raises(AotError, match="dyn_resize.*scales.*compile-time constant"):
        compile_model(model)
