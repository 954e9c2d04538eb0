"""`aot quantize`: the int8 file it writes for the bundled examples (QDQ and QOperator), the
accuracy figures it prints (recomputed here with onnxruntime), its one-line errors, and the QDQ
files compiled by aot matching onnxruntime's own int8 run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from aot.commands.exact_int8_reference import reference_model
from tests.markdown_sections import code_blocks, markdown_section
from tests.test_cli import REPO, aot, assert_user_error

EXAMPLES = REPO / "examples"
# model: (file, input, shape of one sample, --input-shape options)
MODELS = {
    "tiny_cnn": (EXAMPLES / "tiny_cnn.onnx", "image", (1, 3, 32, 32), ()),
    "keyword_cnn": (EXAMPLES / "keyword_cnn.onnx", "features", (1, 40, 98), ("--input-shape", "features=1x40x98")),
}
SAMPLES = 20


def calibration(folder: Path, model: str, seed: int = 0, count: int = SAMPLES) -> Path:
    """folder/<model>_calibration.npz: `count` seeded standard-normal samples of the model's input."""
    _, name, shape, _ = MODELS[model]
    path = folder / f"{model}_calibration.npz"
    np.savez(path, **{name: np.random.default_rng(seed).standard_normal((count, *shape), dtype=np.float32)})
    return path


def quantize(folder: Path, model: str, *options: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    source, _, _, shape_options = MODELS[model]
    out = folder / f"{model}_int8.onnx"
    result = aot("quantize", str(source), "--calibration", str(calibration(folder, model)), "-o", str(out),
                 *shape_options, *options)
    assert result.returncode == 0, result.stderr
    return out, result


def ort_outputs(model: str | bytes, samples: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's outputs of `model` on each sample (first axis), stacked; int8 products exact
    where its own saturate (aot/commands/exact_int8_reference.py, tested in test_exact_int8_reference.py)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    exact = reference_model(onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model))
    session = ort.InferenceSession(exact.model.SerializeToString() if exact else model, options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    count = len(next(iter(samples.values())))
    runs = []
    for i in range(count):
        feeds = {k: v[i] for k, v in samples.items()}
        runs.append(session.run(names, exact.feeds(feeds) if exact else feeds))
    return {name: np.stack([exact.result(name, r[k]) if exact else r[k] for r in runs]) for k, name in enumerate(names)}


def op_types(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize("quant_format", ["qdq", "qoperator"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_quantize_writes_an_int8_model_and_prints_the_measured_change(tmp_path: Path, model: str,
                                                                      quant_format: str) -> None:
    out, result = quantize(tmp_path, model, "--format", quant_format, "--json")
    assert result.stderr == ""
    onnx.checker.check_model(str(out))
    ops = op_types(out)
    if quant_format == "qdq":
        assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops and "QLinearConv" not in ops
    else:
        assert {"QLinearConv", "QuantizeLinear", "DequantizeLinear"} <= ops and "Conv" not in ops
    # Figures recomputed here: the float model and the written file, run by onnxruntime on the samples.
    samples = dict(np.load(tmp_path / f"{model}_calibration.npz"))
    floats, int8 = ort_outputs(str(MODELS[model][0]), samples), ort_outputs(str(out), samples)
    payload = json.loads(result.stdout)
    assert (payload["format"], payload["samples"], payload["per_channel"]) == (quant_format, SAMPLES, True)
    assert payload["int8_bytes"] == out.stat().st_size and payload["int8_bytes"] < payload["float_bytes"]
    assert [o["name"] for o in payload["outputs"]] == list(floats)
    text = aot("quantize", str(MODELS[model][0]), "--calibration", str(tmp_path / f"{model}_calibration.npz"),
               "-o", str(out), *MODELS[model][3], "--format", quant_format, "--force")
    assert text.returncode == 0 and text.stderr == "", text.stderr
    for entry in payload["outputs"]:
        f, q = floats[entry["name"]].astype(np.float64), int8[entry["name"]].astype(np.float64)
        err = np.abs(q - f)
        assert entry["max_abs_err"] == pytest.approx(err.max(), rel=1e-6, abs=1e-9)
        assert entry["mean_abs_err"] == pytest.approx(err.mean(), rel=1e-6, abs=1e-9)
        assert 0 < entry["max_abs_err"] < 0.1 * np.abs(f).max()  # int8 moved the outputs, by little
        agree = int((f.argmax(-1) == q.argmax(-1)).sum())  # each run's output: [1, classes]
        assert (entry["top1_agree"], entry["top1_rows"]) == (agree, SAMPLES)
        line = (f"  {entry['name']}: max abs err {err.max():.3g}, mean abs err {err.mean():.3g} "
                f"(float outputs up to {np.abs(f).max():.3g}), top-1 agreement {agree}/{SAMPLES} "
                f"({100 * agree / SAMPLES:.1f}%)")
        assert line in text.stdout.splitlines(), text.stdout


def test_quantize_options_reach_the_quantiser(tmp_path: Path) -> None:
    """Per channel by default (a scale per output channel of each Conv weight), --per-tensor one
    scale; int8 weights always; --activation-type sets the activations' zero-point type."""
    per_channel = onnx.load(str(quantize(tmp_path, "tiny_cnn")[0]))
    (tmp_path / "per_tensor").mkdir()
    per_tensor = onnx.load(str(quantize(tmp_path / "per_tensor", "tiny_cnn", "--per-tensor",
                                        "--activation-type", "uint8")[0]))
    for model, channels, activation in ((per_channel, True, np.int8), (per_tensor, False, np.uint8)):
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        producers = {o: n for n in model.graph.node for o in n.output}
        conv_weights = [producers[n.input[1]] for n in model.graph.node if n.op_type == "Conv"]
        assert conv_weights and all(dq.op_type == "DequantizeLinear" for dq in conv_weights)
        for dq in conv_weights:
            assert inits[dq.input[0]].dtype == np.int8
            scale = inits[dq.input[1]]
            assert scale.shape == ((inits[dq.input[0]].shape[0],) if channels else ())
        quantizers = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
        assert quantizers and all(inits[q.input[2]].dtype == activation for q in quantizers)


def test_quantize_is_deterministic_and_replaces_only_its_own_file(tmp_path: Path) -> None:
    out, _ = quantize(tmp_path, "keyword_cnn")
    first = out.read_bytes()
    quantize(tmp_path, "keyword_cnn", "--force")  # -o is a file aot quantize wrote: replaced
    assert out.read_bytes() == first
    other = tmp_path / "notes.onnx"
    other.write_bytes(b"not mine")
    source, _, _, shapes = MODELS["keyword_cnn"]
    result = aot("quantize", str(source), "--calibration", str(tmp_path / "keyword_cnn_calibration.npz"),
                 "-o", str(other), *shapes)
    assert_user_error(result, str(other), "is not a model aot quantize wrote")
    assert other.read_bytes() == b"not mine"


def test_python_api_returns_the_figures_the_command_prints(tmp_path: Path) -> None:
    import aot as aot_api

    out, result = quantize(tmp_path, "tiny_cnn", "--json")
    cli = json.loads(result.stdout)
    for attempt in ("api.onnx", "again.onnx"):  # the function stays aot.quantize once its module is imported
        summary = aot_api.quantize(MODELS["tiny_cnn"][0], tmp_path / "tiny_cnn_calibration.npz", tmp_path / attempt)
        assert (tmp_path / attempt).read_bytes() == out.read_bytes()
        api = summary.to_json()
        assert {k: v for k, v in api.items() if k != "output"} == {k: v for k, v in cli.items() if k != "output"}


def test_help_shows_the_fixed_choices_the_quantiser_accepts() -> None:
    from aot.commands.quantizer import ACTIVATION_TYPES, FORMATS

    result = aot("quantize", "--help")
    assert result.returncode == 0, result.stderr
    for option, values in (("--format", FORMATS), ("--activation-type", ACTIVATION_TYPES)):
        match = re.search(rf"^\s+{re.escape(option)} (\S+)", result.stdout, re.MULTILINE)
        assert match and set(match.group(1).split("|")) == set(values), result.stdout


def _npz(folder: Path, name: str, **arrays: np.ndarray) -> Path:
    np.savez(folder / name, **arrays)
    return folder / name


def _custom_op_model(folder: Path) -> Path:
    """A model onnxruntime cannot load, so cannot quantize: an op of an unknown domain."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mystery", ["x"], ["y"], domain="example.custom")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, folder / "custom.onnx")
    return folder / "custom.onnx"


IMAGES = np.zeros((2, 1, 3, 32, 32), np.float32)
NAN_IMAGES = IMAGES.copy()
NAN_IMAGES[1, 0, 0, 0, 0] = np.nan
# case: (model, calibration maker, extra options, -o maker, fragments of the one error line)
BAD_INPUTS = {
    "missing_model": (lambda d: d / "nope.onnx", None, (), None, ("nope.onnx", "no such file")),
    "missing_calibration": (None, lambda d: d / "nope.npz", (), None, ("--calibration", "nope.npz", "no such file")),
    "npy_not_npz": (None, lambda d: (np.save(d / "c.npy", IMAGES), d / "c.npy")[1], (), None,
                    ("--calibration", "is an .npy file")),
    "no_array_for_the_input": (None, lambda d: _npz(d, "c.npz", other=IMAGES), (), None,
                               ("--calibration", "['other'] name no model inputs", "image")),
    "empty_npz": (None, lambda d: _npz(d, "c.npz"), (), None,
                  ("--calibration", "no array for model input(s) ['image']")),
    "no_sample_axis": (None, lambda d: _npz(d, "c.npz", image=IMAGES[0]), (), None,
                       ("--calibration", "shape [1, 3, 32, 32]", "[samples, 1, 3, 32, 32]")),
    "wrong_dtype": (None, lambda d: _npz(d, "c.npz", image=IMAGES.astype(np.float64)), (), None,
                    ("--calibration", "dtype float64", "float32")),
    "no_samples": (None, lambda d: _npz(d, "c.npz", image=IMAGES[:0]), (), None, ("--calibration", "no samples")),
    "nan_sample": (None, lambda d: _npz(d, "c.npz", image=NAN_IMAGES), (), None, ("--calibration", "NaN or Inf")),
    "onnxruntime_cannot_quantize": (_custom_op_model, lambda d: _npz(d, "c.npz", x=np.zeros((2, 1, 3), np.float32)),
                                    (), None, ("custom.onnx", "onnxruntime could not quantize")),
    "output_is_a_folder": (None, None, (), lambda d: (d / "dir").mkdir() or d / "dir", ("dir", "is a directory")),
    "output_is_someone_elses_file": (None, None, (), lambda d: (d / "x.onnx").write_bytes(b"mine") and d / "x.onnx",
                                     ("x.onnx", "is not a model aot quantize wrote")),
    "output_folder_missing": (None, None, (), lambda d: d / "no" / "m.onnx", ("m.onnx", "does not exist")),
    "output_is_the_calibration": (None, None, (), lambda d: d / "c.npz", ("c.npz", "is the input")),
    "bad_format": (None, None, ("--format", "qint"), None, ("--format 'qint'", "qdq or qoperator")),
    "bad_activation_type": (None, None, ("--activation-type", "int4"), None, ("--activation-type 'int4'",)),
    "symbolic_dims_unset": (lambda d: EXAMPLES / "keyword_cnn.onnx",
                            lambda d: _npz(d, "c.npz", features=np.zeros((2, 1, 40, 98), np.float32)), (), None,
                            ("'features' dimension 2 (frames)", "--input-shape")),
    "input_shape_of_no_input": (None, None, ("--input-shape", "pixels=1x3x32x32"), None, ("--input-shape", "pixels")),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_inputs_are_one_line_errors_and_write_nothing(tmp_path: Path, case: str) -> None:
    make_model, make_calibration, options, make_output, fragments = BAD_INPUTS[case]
    model = make_model(tmp_path) if make_model else MODELS["tiny_cnn"][0]
    calib = make_calibration(tmp_path) if make_calibration else _npz(tmp_path, "c.npz", image=IMAGES)
    out = make_output(tmp_path) if make_output else tmp_path / "out.onnx"
    before = {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}
    assert_user_error(aot("quantize", str(model), "--calibration", str(calib), "-o", str(out), *options), *fragments)
    after = {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}
    assert after == before, "the failed command left or changed files"


def test_calibration_bomb_is_refused_from_its_headers(tmp_path: Path) -> None:
    """2.2 GB of samples deflated to 2 MB: the sample count is the file's to say, so the total is
    bounded (1 GiB) before any data is inflated."""
    from tests.test_hostile_files import PEAK_LIMIT, _npz_bomb, aot_measured

    bomb = _npz_bomb(tmp_path / "bomb.npz", (180000, 1, 3, 32, 32))
    assert bomb.stat().st_size < 4 * 2**20
    result, peak = aot_measured("quantize", str(MODELS["tiny_cnn"][0]), "--calibration", str(bomb),
                                "-o", str(tmp_path / "out.onnx"))
    assert_user_error(result, "--calibration", "take 2211840000 bytes, more than the 1073741824")
    assert peak < PEAK_LIMIT and not (tmp_path / "out.onnx").exists()


# --- the QDQ files compiled by aot, against onnxruntime's own run of the same int8 file ---

def output_steps(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Each graph output's quantisation step: the scale of the DequantizeLinear that produces it."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for output in model.graph.output:
        node = producers[output.name]
        assert node.op_type == "DequantizeLinear", f"{output.name} is not dequantized"
        steps[output.name] = inits[node.input[1]].astype(np.float64)
    return steps


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_quantized_qdq_model_compiled_by_aot_matches_onnxruntime_within_one_step(tmp_path: Path, model: str,
                                                                                   backend: str) -> None:
    """200 seeded inputs other than the calibration's: |aot - onnxruntime| <= 1 output step on
    >= 99.9% of the elements (aot runs float between each DequantizeLinear and QuantizeLinear,
    onnxruntime integer kernels, so a value on a rounding boundary may land one step away)."""
    from aot.compiler import compile as compile_model
    from aot.host.run import HostModel

    out, _ = quantize(tmp_path, model)
    int8 = onnx.load(str(out))
    _, name, shape, _ = MODELS[model]
    samples = {name: np.random.default_rng(1).standard_normal((200, *shape), dtype=np.float32)}
    package = compile_model(int8, backend=backend)
    host = HostModel.build(package, opt="-O1", extra_cflags="-pedantic")
    assert host.backend == backend
    ours = {k: np.stack([host.run({name: x})[k] for x in samples[name]]) for k in output_steps(int8)}
    reference = ort_outputs(str(out), samples)
    for output, step in output_steps(int8).items():
        steps_off = np.abs(ours[output].astype(np.float64) - reference[output]) / step
        exact, within_one = float(np.mean(steps_off < 1e-3)), float(np.mean(steps_off <= 1 + 1e-3))
        print(f"{model} {backend} {output}: exact {exact:.2%}, within one step {within_one:.2%} "
              f"of {steps_off.size} elements")
        assert within_one >= 0.999, (output, within_one, float(steps_off.max()))


# --- the docs' walkthrough, as written ---

DOCS_PAGE, DOCS_SECTION = "docs/int8.md", "## Quantising a float model"


def test_readme_int8_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """docs/int8.md's commands, literally, from a copy of the examples with this checkout's aot
    and python on PATH: the quantized file, the cross-built package and the verification."""
    for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    section = markdown_section(DOCS_PAGE, DOCS_SECTION)
    ((_, commands),) = code_blocks(section, "sh")
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("digits", "cpp_app"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, run in (("aot", f'"{sys.executable}" -m aot'), ("python", f'"{sys.executable}"')):
        (bin_dir / tool).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + commands], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    quantized = re.findall(r"aot quantize \S+ --calibration \S+ -o (\S+)", commands)
    assert quantized and {"QuantizeLinear", "DequantizeLinear"} <= op_types(tmp_path / quantized[0])
    assert result.stdout.rstrip().endswith("PASSED")
    figures = re.search(r"max abs err (\S+), mean abs err (\S+) .*top-1 agreement (\d+)/(\d+)", result.stdout)
    assert figures, result.stdout
    prose = " ".join(section.split())  # the figures the page gives are the ones printed
    assert f"at most {float(figures[1]):.2g} (mean {float(figures[2]):.2g})" in prose
    assert figures[3] == figures[4] and f"all {figures[4]} samples keep their top-1 class" in prose
    (package,) = re.findall(r"aot build \S+ --target rpi4 -o (\S+)", commands)
    runners = list((tmp_path / package).glob("*_runner"))
    assert runners and runners[0].read_bytes()[18] == 183  # e_machine EM_AARCH64


def test_an_old_opset_model_with_a_broadcast_bias_quantizes_and_compiles(tmp_path: Path) -> None:
    """Opset 11 (no per-channel axis before opset 13: the model is upgraded first) and a Gemm
    whose bias is [1, N], which onnxruntime 1.32's int32-bias adjustment trips over (CNTK's
    MNIST has one): the int8 file loads, compiles and matches onnxruntime."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal((1, 4)).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    path = tmp_path / "old.onnx"
    onnx.save(model, path)
    samples = _npz(tmp_path, "calibration.npz", x=rng.standard_normal((4, 1, 16)).astype(np.float32))
    out = tmp_path / "old_int8.onnx"
    result = aot("quantize", str(path), "--calibration", str(samples), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert max(o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")) >= 13
    verified = aot("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr
