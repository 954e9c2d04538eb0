"""Side-by-side latency of aot and onnxruntime on this machine, in one process.

Both run the same inputs, interleaved in rounds (so drift in machine load hits both alike), one
thread each unless asked otherwise (`threads`: onnxruntime's intra-op threads, and our
<name>_run_parallel on a pool of that many threads), many repetitions after warm-up; we report medians and their
ratio. Our model is called through ctypes and onnxruntime through its Python API, so both pay a
small per-call overhead from Python.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aot.analysis import model_stats
from aot.commands.verify import RANDOM_INPUTS_HINT, random_inputs
from aot.compiler import compile as compile_model
from aot.compiler import load
from aot.errors import AotError
from aot.frontend.input_values import InputValue
from aot.host.cpu_mask import HiddenBits, hidden_for, hide_cpu_features
from aot.host.peak import peak_gflops
from aot.host.run import HostModel, aligned_array
from aot.progress import Progress
from aot.targets import Target, host_preset_name, load_target


@dataclass
class BenchResult:
    model: str
    ours_ms: float
    onnxruntime_ms: float
    ratio: float
    ours_min_ms: float
    onnxruntime_min_ms: float
    runs: int
    threads: int
    macs: int
    ours_gflops: float
    onnxruntime_gflops: float
    arena_bytes: int
    weights_bytes: int
    ours_memory_bytes: int
    onnxruntime_peak_rss_delta_bytes: int
    peak_gflops: float  # this core's measured fp32 peak (aot/host/peak.py), times the threads
    ours_percent_of_peak: float
    target: str = ""  # the preset aot's code was compiled and built for
    # "native", or the preset whose vector features were all onnxruntime's CPU checks saw
    onnxruntime_isa: str = "native"
    # The multiply-adds aot's code runs: the model's, but Winograd layers' 16 per 4 outputs instead of 36.
    macs_done: int = 0
    ours_done_gflops: float = 0.0  # macs_done over aot's time: the arithmetic it does
    ours_done_percent_of_peak: float = 0.0  # of peak_gflops: at most 100, unlike ours_percent_of_peak

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _status_bytes(field: str) -> int | None:
    """A memory figure of this process from /proc/self/status (Linux), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak_rss() -> int:
    """Start a new peak-memory measurement; returns the resident size it starts from. On Linux
    the kernel's high-water mark is reset (so a second model benchmarked in the same process is
    measured from its own start, not from the first one's peak); elsewhere the process's peak
    so far is the baseline."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        current = _status_bytes("VmRSS")
        if current is not None:
            return current
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _peak_rss() -> int:
    peak = _status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_MEMORY_SCRIPT = """
import sys
import numpy as np
from aot.host.cpu_mask import HiddenBits, hide_cpu_features
hide_cpu_features(HiddenBits(*map(int, sys.argv[4:])))
import onnxruntime  # loaded before the measurement starts: its code is not the session's memory
from aot.commands.bench import _peak_rss, _reset_peak_rss, onnxruntime_session
model, feeds_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
feeds = dict(np.load(feeds_path))
start = _reset_peak_rss()
onnxruntime_session(model, threads).run(None, feeds)
print(max(0, _peak_rss() - start))
"""


def onnxruntime_session(model_path: str, threads: int, profile: bool = False):  # noqa: ANN201
    """The onnxruntime side of every comparison: CPU provider, all graph optimisations, `threads`
    intra-op threads and one inter-op thread (`profile`: with its per-node profiler on)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_profiling = profile
    # Fatal messages only: an error is reported once, in aot's one line (its logger repeats it).
    options.log_severity_level = 4
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def _onnxruntime_peak_memory(model_path: str, feeds: Mapping[str, np.ndarray], threads: int,
                             hidden: HiddenBits) -> int:
    """How much onnxruntime's session adds to a process's peak resident memory (weights, its
    arena, prepacked kernels) from creating it to the end of its first run: measured in a fresh
    process, since in this one memory freed by earlier work (compiling, other models) is reused
    and would hide it."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        feeds_path = Path(tmp) / "feeds.npz"
        np.savez(feeds_path, **feeds)
        result = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, model_path, str(feeds_path), str(threads),
                                 *map(str, hidden.masks())], capture_output=True, text=True)
    if result.returncode != 0:
        raise AotError(f"{model_path}: measuring onnxruntime's memory failed: "
                       f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}")
    return int(result.stdout.split()[-1])


def native_target(name: str) -> Target:
    """The preset (or .toml) `--target` names, if this machine runs its code natively: timing
    code under an emulator says nothing about the target, so bench refuses it."""
    from aot.backends.llvm.target import runs_on_host

    target = load_target(name)
    if not runs_on_host(target.triple, target.cpu, target.features):
        raise AotError(f"--target {name}: this machine ({host_preset_name()}) cannot run {target.name}'s code "
                       "natively, and timings under an emulator say nothing about the target: bench it on "
                       "such a machine (or count instructions under qemu: python -m benchmarks.arm)")
    return target


# Pause before each round of a multi-threaded comparison (see bench).
SETTLE_SECONDS = 0.2


ONNXRUNTIME_ISAS = ("native", "target")


def bench(model_path: str, input_shapes: Mapping[str, tuple[int, ...]] | None = None, threads: int = 1,
          rounds: int = 15, min_round_seconds: float = 0.05, warmup: int = 10, seed: int = 0,
          opt: str | None = None, *, conv_algorithm: str = "auto",
          input_values: Mapping[str, InputValue] | None = None, target: str | None = None,
          inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None = None, max_arena: int | None = None,
          onnxruntime_isa: str = "native") -> BenchResult:
    """`target`: a preset this machine runs (native_target), compiled with its register tiles and
    built with its own flags (x86_64-v3: AVX2 code, -march=x86-64-v3, on an AVX-512 machine). By
    default the host's preset, built with -march=native. `inputs`: the arrays both sides run on
    (default: aot verify's seeded random ones; a model whose inputs have a meaning, an attention
    mask of 0s and 1s, token ids, needs its own: random ones can make every output NaN; a path:
    the .npz, or .npy for a one-input model, of `aot bench --inputs`).
    `onnxruntime_isa`: "native", onnxruntime picks its kernels for this CPU; "target", its CPU
    checks see only the vector features `target`'s code may use (aot.host.cpu_mask), as on a
    machine of that target. onnxruntime reads them once, when it is loaded: if it already is in
    this process, the comparison runs in a fresh one."""
    if onnxruntime_isa not in ONNXRUNTIME_ISAS:
        raise AotError(f"--onnxruntime-isa {onnxruntime_isa}: give one of {', '.join(ONNXRUNTIME_ISAS)}")
    preset = native_target(target) if target else None
    hidden = hidden_for(preset or load_target(host_preset_name())) if onnxruntime_isa == "target" else HiddenBits()
    if hidden.any() and "onnxruntime" in sys.modules:
        return _bench_in_fresh_process(dict(
            model_path=model_path, input_shapes=input_shapes, threads=threads, rounds=rounds,
            min_round_seconds=min_round_seconds, warmup=warmup, seed=seed, opt=opt, conv_algorithm=conv_algorithm,
            input_values=input_values, target=target, inputs=inputs, max_arena=max_arena,
            onnxruntime_isa=onnxruntime_isa))
    hide_cpu_features(hidden)
    # Register tiles sized for this CPU's vector registers, as the build uses -march=native.
    package = compile_model(model_path, input_shapes, target=target or host_preset_name(),
                            parallel=threads > 1, conv_algorithm=conv_algorithm, input_values=input_values,
                            max_arena=max_arena)
    graph, _ = load(model_path, input_shapes, input_values)
    stats = model_stats(graph)
    macs = stats.macs
    macs_done = macs - round(_winograd_macs(stats.per_node_macs, package.manifest) * (1 - 1 / WINOGRAD_SAVING))
    ours = _build_ours(package, preset, opt, threads)
    hint = RANDOM_INPUTS_HINT if inputs is None else ""
    inputs = _given_or_random(package, inputs, seed)
    # Both sides get the same cache-line-aligned arrays (see HostModel.runner_for).
    feeds = {k: aligned_array(np.asarray(v)) for k, v in inputs.items()}
    feeds.update(package.bound_inputs)  # onnxruntime runs the original model: it is fed what aot bound
    session = _onnxruntime_side(model_path, feeds, threads, ours, hint)
    ort_rss = _onnxruntime_peak_memory(os.fspath(model_path), feeds, threads, hidden)
    samples = _interleaved_samples(ours.runner_for(inputs), lambda: session.run(None, feeds), threads,
                                   rounds, min_round_seconds, warmup)
    # Measured after the timing, so that its busy loop does not warm the core for one side only.
    peak = peak_gflops(preset=target) * threads
    ours.close()
    return _result(model_path, package, samples, threads=threads, macs=(macs, macs_done), peak=peak,
                   ort_rss=ort_rss, preset=preset, hidden=hidden)


def _build_ours(package: Any, preset: Target | None, opt: str | None, threads: int) -> HostModel:
    """aot's side built for this machine: -march=native, or `preset`'s own flags."""
    if preset is None:
        return HostModel.build(package, opt=opt or "-O3 -march=native", threads=threads)
    return HostModel.build(package, opt=opt or "-O3", threads=threads, target_cflags=" ".join(preset.cflags))


def _onnxruntime_side(model_path: str, feeds: dict[str, np.ndarray], threads: int, ours: HostModel,
                      hint: str) -> Any:
    """onnxruntime's session for the model, run once on `feeds`; an AotError (with `ours` closed)
    when onnxruntime cannot run it."""
    try:
        session = onnxruntime_session(os.fspath(model_path), threads)
        session.run(None, feeds)
    except Exception as e:  # onnxruntime's own exception types are not part of its public API
        ours.close()
        raise AotError(f"{model_path}: onnxruntime, the side aot is compared with, could not run the model: "
                       f"{str(e).splitlines()[0]}{hint}") from e
    return session


def _result(model_path: str, package: Any, samples: dict[str, list[float]], *, threads: int,
            macs: tuple[int, int], peak: float, ort_rss: int, preset: Target | None, hidden: HiddenBits) -> BenchResult:
    """The comparison's figures from the timed `samples`; `macs`: the model's multiply-adds, and
    those aot computes (fewer in Winograd convolutions)."""
    macs, macs_done = macs
    ours_ms = statistics.median(samples["ours"])
    ort_ms = statistics.median(samples["ort"])
    io_bytes = sum(i["bytes"] for i in package.inputs) + sum(o["bytes"] for o in package.outputs)
    return BenchResult(
        model=os.fspath(model_path), ours_ms=ours_ms, onnxruntime_ms=ort_ms, ratio=ours_ms / ort_ms,
        ours_min_ms=min(samples["ours"]), onnxruntime_min_ms=min(samples["ort"]),
        runs=len(samples["ours"]), threads=threads, macs=macs,
        ours_gflops=2 * macs / (ours_ms * 1e6), onnxruntime_gflops=2 * macs / (ort_ms * 1e6),
        arena_bytes=package.arena_bytes, weights_bytes=int(package.manifest["weights_bytes"]),
        ours_memory_bytes=package.arena_bytes + int(package.manifest["weights_bytes"]) + io_bytes,
        onnxruntime_peak_rss_delta_bytes=ort_rss,
        peak_gflops=peak, ours_percent_of_peak=100 * (2 * macs / (ours_ms * 1e6)) / peak,
        target=preset.name if preset else host_preset_name(),
        onnxruntime_isa=(preset.name if preset else host_preset_name()) if hidden.any() else "native",
        macs_done=macs_done, ours_done_gflops=2 * macs_done / (ours_ms * 1e6),
        ours_done_percent_of_peak=100 * (2 * macs_done / (ours_ms * 1e6)) / peak,
    )


# F(2x2, 3x3) Winograd: 16 multiply-adds per 4 outputs of a 3x3 convolution instead of 36.
WINOGRAD_SAVING = 36 / 16


def _winograd_macs(per_node: list[tuple[str, str, int]], manifest: Mapping[str, Any]) -> int:
    """The model's multiply-adds in the convolutions aot computes as Winograd (by ONNX node name)."""
    winograd = {k["sources"][0] for k in manifest.get("kernel_order", []) if "/winograd" in k["op"] and k["sources"]}
    return sum(m for name, op, m in per_node if op == "Conv" and name in winograd)


def _given_or_random(package: Any, inputs: Mapping[str, np.ndarray] | str | os.PathLike[str] | None,
                     seed: int) -> dict[str, np.ndarray]:
    """bench's inputs: the arrays given, those of an .npz/.npy file (checked against the package's
    inputs), or verify's seeded random ones."""
    if isinstance(inputs, (str, os.PathLike)):
        from aot.npz import load_npz

        return load_npz(inputs, "--inputs", package.inputs)
    return dict(inputs) if inputs is not None else random_inputs(package, seed)


def _interleaved_samples(run_ours: Callable[[], object], run_ort: Callable[[], object], threads: int,
                         rounds: int, min_round_seconds: float, warmup: int) -> dict[str, list[float]]:
    """Milliseconds per call of each side, in `rounds` alternating rounds of about
    min_round_seconds each, after `warmup` calls of each."""
    for _ in range(warmup):
        run_ours()
        run_ort()
    # Calibrate how many calls make one round of about min_round_seconds for each side.
    per_round = {}
    for label, fn in (("ours", run_ours), ("ort", run_ort)):
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < min_round_seconds / 5:
            fn()
            n += 1
        per_call = (time.perf_counter() - start) / n
        per_round[label] = max(1, int(min_round_seconds / per_call))
    samples: dict[str, list[float]] = {"ours": [], "ort": []}
    for r in range(rounds):
        order = (("ours", run_ours), ("ort", run_ort)) if r % 2 == 0 else (("ort", run_ort), ("ours", run_ours))
        for label, fn in order:
            if threads > 1:
                # Let the other side's idle workers stop spinning first: onnxruntime's keep a core
                # busy for tens of milliseconds after a run, which would slow our threaded round
                # that follows it (`aot bench --threads 2` on SqueezeNet shows it).
                time.sleep(SETTLE_SECONDS)
            for _ in range(per_round[label]):
                t0 = time.perf_counter_ns()
                fn()
                samples[label].append((time.perf_counter_ns() - t0) / 1e6)
    return samples


_FRESH_PROCESS_SCRIPT = """
import pickle
import sys
from aot.commands.bench import bench
from aot.errors import AotError
with open(sys.argv[1], "rb") as f:
    kwargs = pickle.load(f)
try:
    result = bench(**kwargs)
except AotError as e:
    result = e
with open(sys.argv[1], "wb") as f:
    pickle.dump(result, f)
"""


def _bench_in_fresh_process(kwargs: dict[str, Any]) -> BenchResult:
    """bench(**kwargs) in a new Python process, where onnxruntime is not loaded yet."""
    import pickle
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        exchange = Path(tmp) / "bench.pickle"
        exchange.write_bytes(pickle.dumps(kwargs))
        done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS_SCRIPT, str(exchange)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise AotError(f"{kwargs['model_path']}: bench in a fresh process failed: "
                           f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        result = pickle.loads(exchange.read_bytes())
    if isinstance(result, AotError):
        raise result
    return result


def bench_command(model: Path, *, input_shape: list[str] | None, dim: list[str] | None,
                  input_value: list[str] | None, inputs: Path | None, threads: int, rounds: int, conv_algorithm: str,
                  max_arena: int | None, target: str | None, onnxruntime_isa: str, as_json: bool,
                  progress: Progress) -> None:
    """`aot bench`: time MODEL against onnxruntime and print the medians, ratio and share of peak."""
    from aot.commands.model_options import model_shapes, values, with_array_shapes
    from aot.terminal import printable

    input_shape = with_array_shapes(model, inputs, input_shape, input_value)
    with progress.step(f"bench ({rounds} rounds)"):
        result = bench(str(model), model_shapes(model, input_shape, input_value, dim), inputs=inputs,
                       threads=threads, rounds=rounds,
                       conv_algorithm=conv_algorithm, input_values=values(input_value), target=target,
                       max_arena=max_arena, onnxruntime_isa=onnxruntime_isa)
    if as_json:
        print(json.dumps(result.to_json(), sort_keys=True))
        return
    print(f"bench {printable(model)}: {result.runs} runs each, {threads} thread(s) each, medians, "
          f"aot built for {printable(result.target)}")
    print(f"  aot          {result.ours_ms:9.4f} ms  {result.ours_gflops:7.2f} GFLOP/s  "
          f"memory {result.ours_memory_bytes / 1024:.1f} KiB (arena {result.arena_bytes / 1024:.1f} KiB)")
    kernels = "" if result.onnxruntime_isa == "native" else f"  (kernels for {printable(result.onnxruntime_isa)})"
    print(f"  onnxruntime  {result.onnxruntime_ms:9.4f} ms  {result.onnxruntime_gflops:7.2f} GFLOP/s  "
          f"peak RSS growth {result.onnxruntime_peak_rss_delta_bytes / 1024:.0f} KiB{kernels}")
    print(f"  ratio aot/onnxruntime {result.ratio:.3f}")
    effective = ("" if result.macs_done == result.macs else
                 f"; {result.ours_percent_of_peak:.0f}% effective (the model's own: Winograd layers do 2.25x fewer)")
    print(f"  aot runs at {result.ours_done_percent_of_peak:.0f}% of this machine's measured fp32 peak "
          f"({result.peak_gflops:.1f} GFLOP/s, {threads} core(s)) in the multiply-adds it does{effective}")
