"""The `aot` command line: compile, verify and inspect ONNX models. This module parses the options;
each command's work is a function in aot/commands/.

Exit codes: 0 success; 1 verification ran and an output is out of tolerance; 2 the command line,
the model or an input file is at fault (one line on stderr names the culprit); 3 internal error.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from aot.errors import AotError, BuildError
from aot.progress import SILENT, Progress, StepReporter
from aot.terminal import printable, printable_lines
from aot.version import __version__

EXIT_MISMATCH, EXIT_USER_ERROR, EXIT_INTERNAL = 1, 2, 3


def _click_exceptions() -> Any:
    """click's exception classes: typer 0.29+ vendors click as typer._click, older typer uses click."""
    try:
        from typer._click import exceptions
    except ImportError:  # typer < 0.29
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


class _OneLineUsageErrors(TyperGroup):
    """Every command line error (unknown option or command, missing argument or option value, a
    value its type rejects) as one line on stderr and exit 2, like any other bad input: click would
    print the usage block and an "Error:" line. It is the group's main, so `python -m aot`, the
    `aot` script and a test's `app(...)` all get it."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:  # the caller handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        errors = _click_exceptions()
        # click < 8.2 prints the help of a bare `aot` itself, without this exception.
        no_args_is_help = getattr(errors, "NoArgsIsHelpError", ())
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except no_args_is_help as e:  # bare `aot`: the help text is the answer
            e.show()
            sys.exit(e.exit_code)
        except errors.ClickException as e:
            print(f"aot: error: {_usage_error_text(e)}", file=sys.stderr)
            sys.exit(EXIT_USER_ERROR if isinstance(e, errors.UsageError) else e.exit_code)
        except typer.Abort:  # click's Abort: typer's own class since typer 0.29, re-exported before
            print("aot: aborted", file=sys.stderr)
            sys.exit(1)
        # Without standalone mode click returns an Exit's code, or the command's return value (None).
        sys.exit(code if isinstance(code, int) else 0)


    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_arguments(command)
        return command


def _plain_arguments(command: Any) -> None:
    """Arguments in --help by their metavar alone (MODEL...): typer 0.29 writes the usage line's
    {MODEL} and a Python type (<list[Path]>) after it, which tell a user nothing."""
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "argument" and param.metavar:
            shown = param.metavar + ("..." if param.nargs != 1 else "")
            param._usage_display_name = param._rich_display_name = lambda shown=shown: shown
            param.display_type_rich = lambda ctx: None


def _usage_error_text(error: Exception) -> str:
    """click's message, prefixed by the subcommand it is about, in aot's style: `compile: no such
    option: --bogus`. Escaped, so an option name with a newline cannot start a second line."""
    message = str(error.format_message()).rstrip(".")  # type: ignore[attr-defined]
    message = message[:1].lower() + message[1:]
    ctx = getattr(error, "ctx", None)
    if ctx is not None and ctx.parent is not None and ctx.info_name:
        message = f"{ctx.info_name}: {message}"
    return printable(message)


app = typer.Typer(
    cls=_OneLineUsageErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="aot: compile static-shape ONNX models into standalone C packages for edge devices.",
)

F = TypeVar("F", bound=Callable[..., Any])

ModelArg = Annotated[Path, typer.Argument(metavar="MODEL", help="The ONNX model file.", show_default=False)]
InputShapeOpt = Annotated[
    list[str] | None,
    typer.Option("--input-shape", metavar="NAME=1x3x224x224",
                 help="Fix an input's shape, e.g. input=1x3x224x224 (repeatable).",
                 show_default=False),
]
DimOpt = Annotated[
    list[str] | None,
    typer.Option("--dim", metavar="NAME=SIZE",
                 help="Give a named (symbolic) dimension one size for every input that has it, e.g. "
                      "sequence=128 (repeatable); an input's own --input-shape wins.", show_default=False),
]
# The long explanation of --input-value is compile's; the other commands say it in one line.
InputValueLongOpt = Annotated[
    list[str] | None,
    typer.Option("--input-value", metavar="NAME=VALUE",
                 help="Bind an input at compile time: NAME=FILE.npy, NAME=1,2,3 (a small vector) "
                      "or NAME=16000 (a scalar), in the dtype and shape the model declares for it "
                      "(repeatable). It becomes a constant, so the shapes it decides (Resize "
                      "scales, Slice starts, TopK k, Pad pads...) are static, and it is no longer "
                      "an input of the package: the C API's NAME_inputs struct has no field for it.",
                 show_default=False),
]
InputValueOpt = Annotated[
    list[str] | None,
    typer.Option("--input-value", metavar="NAME=VALUE",
                 help="Bind an input to a constant: NAME=FILE.npy, NAME=1,2,3 or NAME=16000 (repeatable; "
                      "see aot compile --help).", show_default=False),
]
# Fixed sets of values are shown as their metavar (c|llvm) but checked where they are used
# (aot.compile, aot/pipeline.py ...), which names the option in its one-line error; test_cli_ux checks
# that each metavar lists exactly those modules' values.
BackendOpt = Annotated[str, typer.Option("--backend", metavar="c|llvm", help="Code generator: c (C sources), or "
                                         "llvm (object files for --target, plus the C sources).")]
TargetOpt = Annotated[
    list[str] | None,
    typer.Option("--target", metavar="NAME|FILE.toml",
                 help="The CPU the package is for: a preset name (see `aot targets`) or a target .toml file. "
                      "C backend: one target; the package gets its register tiles, and its Makefile and "
                      "CMakeLists cross-compile with its toolchain and flags. Without it the package is for "
                      "the machine that compiles it: its register tiles fit this CPU's vector registers "
                      "(16 floats with AVX-512, 8 with AVX2) and its build files pass -march=native. "
                      "--backend llvm: repeatable, one object file per target (default: this machine).",
                 show_default=False),
]
VerifyTargetOpt = Annotated[
    list[str] | None,
    typer.Option("--target", metavar="NAME|FILE.toml",
                 help="The CPU to compile for, build for and run on: a preset name (see `aot targets`) or a "
                      "target .toml file; another CPU's build runs under qemu-user. The package gets its "
                      "register tiles and flags. Default: this machine (a package for any target, built "
                      "with -march=native).",
                 show_default=False),
]
WeightsFormatOpt = Annotated[str, typer.Option(
    "--weights-format", metavar="auto|c|binary",
    help="How the package holds the weights: c (NAME_weights.c, C text), binary "
    "(NAME_weights.bin + NAME_weights.S, assembled with .incbin) or auto (binary above 16 MiB).")]
ParallelOpt = Annotated[bool, typer.Option(
    "--parallel", help="Split large kernels into parallel loops for NAME_run_parallel and the package's "
    "thread pool (Linux targets; split kernels are also kept whole for single-thread runs, so the "
    "code grows, which is why it is off by default).")]
ConvAlgorithmOpt = Annotated[str, typer.Option(
    "--conv-algorithm", metavar="auto|direct",
    help="auto: 3x3 unit-stride convolutions with 8+ channels and a vector's width of "
    "2x2 output tiles as Winograd F(2x2, 3x3) (2.25x fewer multiply-adds; results within rounding of a "
    "direct sum); direct: every convolution sums its taps directly.")]
MaxArenaOpt = Annotated[str | None, typer.Option(
    "--max-arena", metavar="BYTES",
    help="The largest arena the package may have: bytes, or with a k (x1024) or M (x1048576) suffix, e.g. "
    "200000 or 200k. aot plans the fastest it finds within it (the convolutions at the arena's peak computed "
    "in forms with less scratch) and fails, naming the smallest arena it can reach, when none fits. "
    "Default: the fastest plan, whatever its arena.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show step timings on stderr, and details "
                                                                  "(the exception chain) on errors.")]

_PROGRESS: contextvars.ContextVar[Progress] = contextvars.ContextVar("aot_progress", default=SILENT)


def _progress() -> Progress:
    """The running command's progress reporter (see aot/progress.py)."""
    return _PROGRESS.get()


def _report_errors(fn: F) -> F:
    """Turn every failure into one line on stderr and an exit code: never a bare traceback. Also
    runs the command with a progress reporter: a spinner when stderr is a terminal, step timings
    with --verbose, nothing otherwise."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        verbose = bool(kwargs.get("verbose"))
        as_json = bool(kwargs.get("as_json"))
        reporter = StepReporter.for_cli(verbose)
        token = _PROGRESS.set(reporter)
        try:
            result = fn(*args, **kwargs)
            reporter.close()
            return result
        except typer.Exit:
            reporter.close()
            raise
        except AotError as e:
            reporter.stop()
            if as_json:
                print(json.dumps({"passed": False, "error": str(e)}))
            # One line, control characters escaped (a name with a newline must not start a second
            # line); only a toolchain's quoted output keeps its lines.
            text = printable_lines(e) if isinstance(e, BuildError) else printable(e)
            print(f"aot: error: {text}", file=sys.stderr)
            if verbose:
                _print_detail(e)
            reporter.close(failed=True)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            reporter.stop()
            print("aot: interrupted", file=sys.stderr)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `aot ... | head`: the reader left; nothing more to say
            reporter.stop()
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(141) from None
        except Exception as e:  # a bug in aot: say so, keep it to one line unless asked
            reporter.stop()
            if as_json:
                print(json.dumps({"passed": False, "error": f"internal error: {type(e).__name__}: {e}"}))
            first = printable(str(e).splitlines()[0]) if str(e) else ""
            print(f"aot: internal error: {type(e).__name__}: {first} (rerun with --verbose for the traceback; "
                  "please report it)", file=sys.stderr)
            if verbose:
                _print_detail(e)
            reporter.close(failed=True)
            raise typer.Exit(EXIT_INTERNAL) from None
        finally:
            _PROGRESS.reset(token)

    return wrapper  # type: ignore[return-value]


def _print_detail(error: BaseException) -> None:
    """--verbose on an error: the exception chain (each cause on one line), then the traceback."""
    seen: set[int] = set()
    cause = error.__cause__ or error.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        text = printable(str(cause).splitlines()[0]) if str(cause) else ""
        print(f"aot: caused by {type(cause).__name__}: {text}", file=sys.stderr)
        cause = cause.__cause__ or cause.__context__
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _check_tolerance(tolerance: float) -> None:
    if not math.isfinite(tolerance) or tolerance <= 0:
        raise AotError(f"--tolerance {tolerance}: must be a positive finite number, e.g. 1e-4")


def _check_seed(seed: int) -> None:
    if not 0 <= seed < 2**64:
        raise AotError(f"--seed {seed}: must be an integer from 0 to 2**64 - 1")


def _max_arena(value: str | None) -> int | None:
    """--max-arena in bytes, checked before any work (aot/planner/budget.py parses it)."""
    from aot.planner.budget import parse_arena_bytes

    return parse_arena_bytes(value) if value is not None else None


ModelsArg = Annotated[list[Path], typer.Argument(
    metavar="MODEL", help="The ONNX model file; several make one package (one header and entry points per "
         "model, one library, weights stored once).", show_default=False)]
ModelNamesOpt = Annotated[list[str] | None, typer.Option(
    "--name", metavar="NAME", help="Model name: prefix of every C symbol (default: the file name). With several "
                   "models, one --name per model, in order.", show_default=False)]
PackageNameOpt = Annotated[str | None, typer.Option(
    "--package-name", metavar="NAME", help="With several models (or shapes): the library's name, libNAME.a, and its "
                           "header NAME.h, which includes the models' (default: their names joined by _; "
                           "a model's own name for its shape variants).", show_default=False)]
SharedArenaOpt = Annotated[bool, typer.Option(
    "--shared-arena", help="With several models that never run at the same time: one arena for them all, "
                           "of the largest model's size (PACKAGE_DECLARE_ARENA in the package's header).")]


InputShapesOpt = Annotated[list[str] | None, typer.Option(
    "--input-shape", metavar="NAME=1x3x224x224",
    help="Fix an input's shape, e.g. input=1x3x224x224 (repeatable). Several shapes for "
                          "one input compile the model at each, with one entry point per shape "
                          "(NAME_1x3x224x224_run ...) and the weights stored once. With several "
                          "models it applies to each model with that input.", show_default=False)]


@app.command("compile")
@_report_errors
def compile_cmd(
    model: ModelsArg,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="DIR", help="Package folder to create.",
                                         show_default=False)],
    input_shape: InputShapesOpt = None,
    dim: DimOpt = None,
    input_value: InputValueLongOpt = None,
    name: ModelNamesOpt = None,
    package_name: PackageNameOpt = None,
    shared_arena: SharedArenaOpt = False,
    *,
    backend: BackendOpt = "c",
    target: TargetOpt = None,
    weights_format: WeightsFormatOpt = "auto",
    parallel: ParallelOpt = False,
    conv_algorithm: ConvAlgorithmOpt = "auto",
    max_arena: MaxArenaOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the output folder if it exists.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Compile MODEL into a C package (header, sources, weights, runtime, Makefile, CMakeLists)."""
    from aot.commands.compile import compile_command

    budget = _max_arena(max_arena)
    compile_command(model, output, input_shape=input_shape, dim=dim, input_value=input_value, name=name,
                    package_name=package_name, shared_arena=shared_arena, target=target, force=force,
                    as_json=as_json, progress=_progress(), backend=backend, weights_format=weights_format,
                    parallel=parallel, conv_algorithm=conv_algorithm, max_arena=budget)


@app.command("verify")
@_report_errors
def verify_cmd(
    model: ModelsArg,
    input_shape: InputShapesOpt = None,
    dim: DimOpt = None,
    input_value: InputValueOpt = None,
    shared_arena: SharedArenaOpt = False,
    backend: BackendOpt = "c",
    target: VerifyTargetOpt = None,
    inputs: Annotated[Path | None, typer.Option(
        "--inputs", metavar="FILE.npz", help=".npz of input arrays by name, or .npy for a one-input model "
        "(default: random, seeded); they also fix the model's symbolic dimensions.", show_default=False)] = None,
    *,
    expected: Annotated[Path | None, typer.Option(
        "--expected", metavar="FILE.npz", help=".npz of expected outputs by name (default: run onnxruntime).",
        show_default=False)] = None,
    tolerance: Annotated[float, typer.Option("--tolerance", metavar="TOL", help="Pass when max abs error is at most "
                                             "tolerance * max(1, max |expected|).")] = 1e-4,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed for random inputs.")] = 0,
    conv_algorithm: ConvAlgorithmOpt = "auto",
    max_arena: MaxArenaOpt = None,
    per_layer: Annotated[bool, typer.Option("--per-layer", help="Compare every node's output with "
                                            "onnxruntime's and name the first node out of tolerance.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Compile MODEL, build it for this machine (or --target, run under qemu-user), run it and compare
    every output with onnxruntime. Several models (or shapes) are verified as one package, each model
    in turn."""
    from aot.commands.verify_command import verify_command

    _check_tolerance(tolerance)
    _check_seed(seed)
    budget = _max_arena(max_arena)
    if target and len(target) > 1:
        raise AotError("--target: verify checks one target at a time")
    passed = verify_command(model, input_shape=input_shape, dim=dim, input_value=input_value,
                            shared_arena=shared_arena, backend=backend, target=target, inputs=inputs,
                            expected=expected, tolerance=tolerance, seed=seed, conv_algorithm=conv_algorithm,
                            max_arena=budget, per_layer=per_layer, as_json=as_json, progress=_progress())
    if not passed:
        raise typer.Exit(EXIT_MISMATCH)


@app.command("quantize")
@_report_errors
def quantize_cmd(
    model: ModelArg,
    calibration: Annotated[Path, typer.Option(
        "--calibration", metavar="INPUTS.npz",
        help=".npz of calibration samples: one array per model input, named by it, whose first axis counts "
             "the samples (one run each): an input of shape 1x3x32x32 takes [N, 1, 3, 32, 32].",
        show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE.onnx", help="The int8 .onnx file to write.",
                                         show_default=False)],
    quant_format: Annotated[str, typer.Option(
        "--format", metavar="qdq|qoperator",
        help="qdq: DequantizeLinear -> float op -> QuantizeLinear groups; qoperator: QLinearConv, "
             "QLinearMatMul, QGemm ... ops.")] = "qdq",
    per_tensor: Annotated[bool, typer.Option("--per-tensor", help="One scale per weight tensor instead of "
                                             "one per output channel.")] = False,
    activation_type: Annotated[str, typer.Option("--activation-type", metavar="int8|uint8",
                                                 help="Type of the quantised activations.")] = "int8",
    input_shape: InputShapeOpt = None,
    dim: DimOpt = None,
    *,
    force: Annotated[bool, typer.Option("--force", help="Replace the -o file if it exists and aot quantize "
                                        "wrote it (never the input model).")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Quantize MODEL to int8 with onnxruntime.quantization (int8 weights, MinMax calibration on the
    --calibration samples), write it to -o and print how far its outputs move from the float model's
    on those samples."""
    from aot.commands.quantizer import quantize_command

    quantize_command(model, calibration, output, quant_format=quant_format, per_tensor=per_tensor,
                     activation_type=activation_type, input_shape=input_shape, dim=dim, force=force,
                     as_json=as_json, progress=_progress())


@app.command("build")
@_report_errors
def build_cmd(
    model: ModelsArg,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="DIR", help="Package folder to create.",
                                         show_default=False)],
    target: Annotated[str | None, typer.Option(
        "--target", metavar="NAME|FILE.toml", help="Target preset (see `aot targets`) or target .toml file "
        "(default: this machine's preset).", show_default=False)] = None,
    input_shape: InputShapesOpt = None,
    dim: DimOpt = None,
    input_value: InputValueOpt = None,
    name: ModelNamesOpt = None,
    package_name: PackageNameOpt = None,
    *,
    shared_arena: SharedArenaOpt = False,
    backend: BackendOpt = "c",
    weights_format: WeightsFormatOpt = "auto",
    parallel: ParallelOpt = False,
    conv_algorithm: ConvAlgorithmOpt = "auto",
    max_arena: MaxArenaOpt = None,
    toolchain: Annotated[str, typer.Option("--toolchain", metavar="auto|gcc|zig|clang",
                                           help="auto, gcc (cross GCC), zig (pip install "
                                           "ziglang) or clang (bare metal).")] = "auto",
    dynamic: Annotated[bool, typer.Option("--dynamic", help="Link the runner against the target's libc "
                                          "instead of statically.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the output folder if it exists.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Compile MODEL for a target (default: this machine) and build it with the target's toolchain:
    the package, its static library and, for Linux targets, the runner program."""
    from aot.commands.build import build_command

    if toolchain not in ("auto", "gcc", "zig", "clang", "host"):
        raise AotError(f"--toolchain {toolchain!r}: use auto, gcc, zig or clang")
    budget = _max_arena(max_arena)
    build_command(model, output, target=target, toolchain=toolchain, input_shape=input_shape, dim=dim,
                  input_value=input_value, name=name, package_name=package_name, shared_arena=shared_arena,
                  backend=backend, dynamic=dynamic, force=force, as_json=as_json, progress=_progress(),
                  weights_format=weights_format, parallel=parallel, conv_algorithm=conv_algorithm,
                  max_arena=budget)


@app.command("bench")
@_report_errors
def bench_cmd(
    model: ModelArg,
    input_shape: InputShapeOpt = None,
    dim: DimOpt = None,
    input_value: InputValueOpt = None,
    inputs: Annotated[Path | None, typer.Option(
        "--inputs", metavar="FILE.npz", help="The input arrays both sides run on, as for verify "
        "(default: random, seeded).", show_default=False)] = None,
    threads: Annotated[int, typer.Option("--threads", metavar="N", help="Threads for aot and onnxruntime.")] = 1,
    rounds: Annotated[int, typer.Option("--rounds", metavar="N", help="Interleaved rounds of each side.")] = 15,
    conv_algorithm: ConvAlgorithmOpt = "auto",
    *,
    max_arena: MaxArenaOpt = None,
    target: Annotated[str | None, typer.Option(
        "--target", metavar="NAME|FILE.toml",
        help="Time the code for this preset, built with its own flags (e.g. x86_64-v3: AVX2 code on an "
             "AVX-512 machine); it must run natively here. Default: this machine's preset, -march=native.",
        show_default=False)] = None,
    onnxruntime_isa: Annotated[str, typer.Option(
        "--onnxruntime-isa", metavar="native|target",
        help="native: onnxruntime runs the kernels it picks for this CPU. target: its CPU checks see only the "
             "vector features --target's code may use (x86_64-v3 on an AVX-512 machine: its AVX2 kernels), as "
             "on a machine of that target (x86 Linux, CPUID faulting).")] = "native",
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Time MODEL compiled by aot against onnxruntime, side by side in one process: medians and ratio.

    GFLOP/s count the model's multiply-adds (2 FLOPs each). The share of peak is of this core's fp32 FMA
    peak (best of many short runs), counting the multiply-adds aot's code does: a Winograd layer does
    2.25x fewer than the model's; the "effective" share counts the model's own, and can pass 100%."""
    from aot.commands.bench import bench_command

    if threads < 1 or rounds < 1:
        raise AotError("--threads and --rounds must be at least 1")
    if threads > 1024:
        raise AotError(f"--threads {threads}: give at most 1024, as the runner's -t")
    budget = _max_arena(max_arena)
    bench_command(model, input_shape=input_shape, dim=dim, input_value=input_value, inputs=inputs, threads=threads,
                  rounds=rounds, conv_algorithm=conv_algorithm, max_arena=budget, target=target,
                  onnxruntime_isa=onnxruntime_isa, as_json=as_json, progress=_progress())


@app.command("report")
@_report_errors
def report_cmd(
    model: ModelArg,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE.html",
                                         help="HTML file to write (its folders are created).",
                                         show_default=False)],
    input_shape: InputShapeOpt = None,
    dim: DimOpt = None,
    input_value: InputValueOpt = None,
    max_arena: MaxArenaOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the -o file if it exists and is a report "
                                        "aot wrote.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Write one self-contained HTML page: memory plan chart, kernels with their ONNX nodes and MACs, sizes."""
    from aot.commands.report import report_command

    budget = _max_arena(max_arena)
    report_command(model, output, input_shape=input_shape, dim=dim, input_value=input_value, max_arena=budget,
                   force=force, progress=_progress())


@app.command("inspect")
@_report_errors
def inspect_cmd(
    model: ModelArg,
    input_shape: InputShapeOpt = None,
    dim: DimOpt = None,
    input_value: InputValueOpt = None,
    max_arena: MaxArenaOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Show MODEL's ops (and which are unsupported), parameters, MACs and memory plan."""
    from aot.commands.inspect import inspect_command

    budget = _max_arena(max_arena)
    inspect_command(model, input_shape=input_shape, dim=dim, input_value=input_value, max_arena=budget,
                    as_json=as_json, progress=_progress())


@app.command("targets")
@_report_errors
def targets_cmd(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List the target presets (use with --target NAME, or give a path to your own .toml)."""
    from aot.commands.targets import targets_command

    targets_command(as_json)


@app.command("ops")
@_report_errors
def ops_cmd(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List the supported ONNX ops as a markdown table (domain, op, opsets, limits); docs/ops.md is this output."""
    from aot.commands.op_table import ops_command

    ops_command(as_json)


def _print_version(requested: bool) -> None:
    if requested:
        print(f"aot {__version__}")
        raise typer.Exit(0)


def _print_cmake_dir(requested: bool) -> None:
    if requested:
        # The CMake module (aotConfig.cmake) ships inside the package, next to this file.
        print(Path(__file__).resolve().parent / "cmake")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the aot version and exit.")] = False,
    cmake_dir: Annotated[bool, typer.Option("--cmake-dir", callback=_print_cmake_dir, is_eager=True,
                                            help="Print the folder of aot's CMake module (for -Daot_DIR=...) "
                                                 "and exit.")] = False,
) -> None:
    del version, cmake_dir  # handled by their eager callbacks, before any command runs


@app.command("version")
def version_cmd() -> None:
    """Print the aot version."""
    print(f"aot {__version__}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
