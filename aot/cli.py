"""The `aot` command line: compile, verify and inspect ONNX models.

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


def _check_name(name: str | None) -> None:
    from aot.frontend.input_shapes import is_utf8

    if name is not None and not is_utf8(name):
        raise AotError(f"--name {name!r}: not valid UTF-8")


def _max_arena(value: str | None) -> int | None:
    """--max-arena in bytes, checked before any work (aot/planner/budget.py parses it)."""
    from aot.planner.budget import parse_arena_bytes

    return parse_arena_bytes(value) if value is not None else None


def _shapes(options: list[str] | None) -> dict[str, tuple[int, ...]]:
    from aot.frontend.input_shapes import parse_input_shapes

    return parse_input_shapes(options or [])


def _with_dims(models: list[Path], input_shape: list[str] | None, input_value: list[str] | None,
               dim: list[str] | None) -> list[str]:
    """The --input-shape options plus the shapes --dim gives the models' other inputs."""
    from aot.frontend.dim_options import dim_shape_options

    return dim_shape_options(models, input_shape or [], input_value or [], dim or [])


def _with_array_shapes(model: Path, inputs: Path | None, input_shape: list[str] | None,
                       input_value: list[str] | None) -> list[str]:
    """verify and bench --inputs: the model's symbolic dimensions take the arrays' sizes."""
    if inputs is None:
        return list(input_shape or [])
    from aot.commands.verify import array_shape_options

    return array_shape_options(model, inputs, input_shape or [], input_value or [])


def _host_preset() -> str:
    """The preset `aot targets` finds for this CPU: build's target without --target."""
    from aot.targets import host_preset_name

    return host_preset_name()


def _model_shapes(model: Path, input_shape: list[str] | None, input_value: list[str] | None,
                  dim: list[str] | None) -> dict[str, tuple[int, ...]]:
    """One model's input shapes from --input-shape and --dim."""
    return _shapes(_with_dims([model], input_shape, input_value, dim))


def _refuse_existing(output: Path, force: bool) -> None:
    """report and quantize, as compile and build: an existing -o file is replaced only with --force."""
    if not force and os.path.lexists(output):
        raise AotError(f"-o {output}: already exists; give --force to replace it")


def _values(options: list[str] | None) -> dict[str, str]:
    from aot.frontend.input_values import parse_input_values

    return parse_input_values(options or [])


def _value_files(options: list[str] | None) -> list[Path]:
    """--input-value .npy files: an existing -o holding one is never replaced, as for the model."""
    from aot.frontend.input_values import value_files

    return value_files(_values(options))


def _files_read(model: Path, output: Path, force: bool, targets: list[str]) -> list[Path]:
    """The files a command reads (the model, its external data, a --target .toml): an existing
    -o that holds one is never replaced. Listed only when -o exists and may be replaced, as
    listing external data parses the model once more."""
    if not (force and os.path.lexists(output)):
        return []
    from aot.frontend.loader import external_data_files

    tomls = [Path(t) for t in targets if t.endswith(".toml") or os.sep in t]
    return [model, *external_data_files(model), *tomls]


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


def _compile_package(models: list[Path], names: list[str] | None, package_name: str | None, shared_arena: bool,
                     input_shape: list[str] | None, input_value: list[str] | None, **options: Any) -> Any:
    """compile, build and verify: the package of MODEL... (one or several, or one at several shapes);
    its .models are in the order of the model files' specs (aot/model_set.py)."""
    from aot.compiler import compile_models
    from aot.model_set import default_package_name, model_specs

    for n in [*(names or []), *([package_name] if package_name is not None else [])]:
        _check_name(n)
    specs = model_specs(models, names or [], input_shape or [], input_value or [])
    return compile_models(specs, package_name or default_package_name(models, names or [], specs),
                          shared_arena=shared_arena, progress=_progress(), **options)


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
    from aot.package.output_dir import check_output_folder

    budget = _max_arena(max_arena)

    read = [f for m in model for f in _files_read(m, output, force, target or [])] + _value_files(input_value)
    check_output_folder(output, force, read)  # before compiling: a refusal costs nothing
    input_shape = _with_dims(model, input_shape, input_value, dim)
    package = _compile_package(model, name, package_name, shared_arena, input_shape, input_value,
                               backend=backend, target=target or None, weights_format=weights_format,
                               parallel=parallel, conv_algorithm=conv_algorithm, max_arena=budget)
    with _progress().step("writing the package"):
        written = package.write(output, force=force, inputs=read)
    m = package.manifest
    if as_json:
        print(json.dumps({"package": str(written), **{k: v for k, v in m.items() if k != "files"}}, sort_keys=True))
        return
    print(f"compiled {', '.join(printable(p) for p in model)} -> {printable(written)}/")
    for view in package.models:
        _print_model_summary(view.manifest, len(package.models) > 1)
    if "models" in m:
        arena = (f"one arena of {m['arena_bytes']} bytes (--shared-arena)" if m["shared_arena"]
                 else "an arena per model")
        print(f"  package: {len(m['models'])} models, {arena}, weights {m['weights_bytes']} bytes "
              "(each distinct array once)")
    print(f"  C API: {package.name}.h  build: make -C {printable(written)}")
    for entry in m.get("targets", []):
        objects = entry.get("objects", [entry.get("object")])
        print(printable(f"  LLVM object{'s' if len(objects) > 1 else ''} for {entry['name']} ({entry['triple']}, "
                        f"cpu {entry['cpu']}): {', '.join(objects)}"))


def _print_model_summary(m: dict[str, Any], named: bool) -> None:
    prefix = f"  {printable(m['name'])}: " if named else "  "
    print(f"{prefix}{m['onnx_nodes']} ONNX nodes -> {m['kernels']} kernels")
    print(f"{' ' * len(prefix) if named else '  '}arena {m['arena_bytes']} bytes (lower bound "
          f"{m['arena_lower_bound_bytes']}, unshared {m['arena_unshared_bytes']}), weights {m['weights_bytes']} bytes")
    grown = m["weights_bytes"] - m.get("model_weights_bytes", m["weights_bytes"])
    if grown > 0 and any("/winograd" in k["op"] for k in m.get("kernel_order", [])):
        print(f"{' ' * len(prefix) if named else '  '}weights {_size(m['weights_bytes'])} "
              f"({_size(m['model_weights_bytes'])} as in the model; Winograd layers add {_size(grown)}: "
              "--conv-algorithm direct keeps them as is)")


def _size(n: int) -> str:
    """Bytes as a user reads them: 17.3 MB, 25.9 kB."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} bytes"


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
    from aot.model_set import model_specs

    _check_tolerance(tolerance)
    _check_seed(seed)
    budget = _max_arena(max_arena)
    if target and len(target) > 1:
        raise AotError("--target: verify checks one target at a time")
    if len(model) == 1:
        input_shape = _with_array_shapes(model[0], inputs, input_shape, input_value)
    input_shape = _with_dims(model, input_shape, input_value, dim)
    specs = model_specs(model, [], input_shape or [], input_value or [])
    if len(specs) > 1 and (per_layer or inputs is not None or expected is not None):
        option = "--per-layer" if per_layer else "--inputs" if inputs is not None else "--expected"
        raise AotError(f"{option}: the package has {len(specs)} models; give one model (and one shape) with it")
    if per_layer and budget is not None:
        raise AotError("--max-arena: --per-layer exposes every node's output, which changes the arena; "
                       "verify the budgeted package without --per-layer")
    if per_layer:
        _verify_per_layer(model[0], _shapes(input_shape), backend, target[0] if target else None, inputs,
                          tolerance, seed, as_json, conv_algorithm, _values(input_value))
        return
    package = _compile_package(model, None, None, shared_arena, input_shape, input_value, backend=backend,
                               target=target or None, conv_algorithm=conv_algorithm, max_arena=budget)
    from aot.npz import load_npz

    built = None  # the package is built once; each model runs from that build
    results = []
    for view, spec in zip(package.models, specs):
        # Each array's header is checked against the model before its data is read, and before building.
        given = load_npz(inputs, "--inputs", view.inputs) if inputs is not None else None
        want = (load_npz(expected, "--expected", view.outputs, role="output", exact_dtype=False)
                if expected is not None else None)
        built = _build_to_run(view, target[0] if target else None, backend, built)
        results.append(_verify_model(view, Path(spec.model), backend, built, given, want, tolerance, seed, as_json))
    if as_json:
        payloads = [payload for _, payload in results]
        print(json.dumps(payloads[0] if len(payloads) == 1 else
                         {"passed": all(p["passed"] for p in payloads), "package": package.name,
                          "shared_arena": shared_arena, "models": payloads}, sort_keys=True))
    if not all(passed for passed, _ in results):
        raise typer.Exit(EXIT_MISMATCH)


def _verify_model(package: Any, model: Path, backend: str, built: Any, given: dict[str, Any] | None,
                  want: dict[str, Any] | None, tolerance: float, seed: int,
                  as_json: bool) -> tuple[bool, dict[str, Any]]:
    """Verify one model of a package, `built` (printing its result unless --json); (passed, its JSON)."""
    from aot.commands.verify import verify_package

    result = verify_package(package, str(model), given, want, tolerance, seed, built=built, progress=_progress())
    where = getattr(built, "where", "host")
    payload = result.to_json()
    payload.update({"model": str(model), "backend": backend, "arena_bytes": package.arena_bytes,
                    "target": package.manifest.get("target", "host"), "ran_on": where})
    if package.library != package.name:
        payload["name"] = package.name
    if not as_json:
        label = printable(model) + (f" as {printable(package.name)}" if package.library != package.name else "")
        print(f"verify {label} (backend {backend}, {printable(where)}) against {result.reference}, "
              f"tolerance {tolerance:g}")
        for o in result.outputs:
            status = "ok  " if o.passed else "FAIL"
            extra = f"  ({o.detail})" if o.detail else ""
            print(f"  {status} {printable(o.name)}: max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}"
                  f"{printable(extra)}")
        print("PASSED" if result.passed else "FAILED")
    return result.passed, payload


def _verify_per_layer(model: Path, shapes: dict[str, tuple[int, ...]], backend: str, target: str | None,
                      inputs: Path | None, tolerance: float, seed: int, as_json: bool, conv_algorithm: str,
                      input_values: dict[str, str]) -> None:
    from aot.commands.per_layer import compare_layers
    from aot.npz import load_npz

    # Read once the debug package's inputs are known, so each header is checked before its data.
    given = (lambda specs: load_npz(inputs, "--inputs", specs)) if inputs is not None else None
    _progress().start("per-layer comparison (compile, build and run with every node's output exposed)")
    results, culprit = compare_layers(model, shapes, lambda pkg: _build_to_run(pkg, target, backend), given,
                                      tolerance, seed, backend, target, conv_algorithm, input_values)
    _progress().finish()
    if as_json:
        print(json.dumps({
            "passed": culprit is None, "first_failing_node": culprit.node if culprit else None,
            "layers": [{"node": r.node, "op": r.op, "tensor": r.tensor, "max_abs_err": r.comparison.max_abs_err,
                        "max_rel_err": r.comparison.max_rel_err, "passed": r.comparison.passed} for r in results],
        }, sort_keys=True))
    else:
        width = max((len(printable(r.node)) for r in results), default=4)
        print(f"per-layer comparison of {printable(model)} with onnxruntime, tolerance {tolerance:g}")
        for r in results:
            mark = "ok  " if r.comparison.passed else "FAIL"
            print(f"  {mark} {printable(r.node):{width}} {printable(r.op):18} "
                  f"max abs err {r.comparison.max_abs_err:.3g}")
        print(printable(f"first failing node: {culprit.node!r} ({culprit.op}), tensor {culprit.tensor!r}") if culprit
              else "PASSED: every layer within tolerance")
    if culprit is not None:
        raise typer.Exit(EXIT_MISMATCH)


def _build_to_run(package: Any, target_name: str | None, backend: str, built_before: Any = None) -> Any:
    """The package built to run here: natively for the host, else cross-built and run under qemu-user.
    `built_before`: another model of the same package, already built: this one runs from that build."""
    from aot.host.run import HostModel, host_variant
    from aot.targets import load_target
    from aot.toolchain.discovery import is_host
    from aot.toolchain.target_build import TargetModel

    if isinstance(built_before, HostModel):
        built = HostModel(package, built_before.directory, keep=built_before)
        built.where = built_before.where
        return built
    if isinstance(built_before, TargetModel):
        built = TargetModel(package, built_before.target, built_before.directory, keep=built_before)
        built.where = built_before.where
        return built
    target = load_target(target_name) if target_name else None
    if target is None or (is_host(target) and (backend != "llvm" or host_variant(package)[0] == "llvm")):
        with _progress().step("host build"):
            built = HostModel.build(package)
        built.where = "host"
        return built
    built = TargetModel.build(package, target, progress=_progress())
    built.where = f"{target.name} under {' '.join(built.command([])[:-1]) or 'native'}"
    return built


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
    force: Annotated[bool, typer.Option("--force", help="Replace the -o file if it exists and aot quantize "
                                        "wrote it (never the input model).")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Quantize MODEL to int8 with onnxruntime.quantization (int8 weights, MinMax calibration on the
    --calibration samples), write it to -o and print how far its outputs move from the float model's
    on those samples."""
    from aot.commands.quantizer import is_aot_quantized_model, quantize
    from aot.package.output_dir import check_output_file

    # The input and foreign-file checks first, as quantize() makes them again when it writes.
    check_output_file(output, [model, calibration], replaceable=is_aot_quantized_model,
                      kind="a model aot quantize wrote")
    _refuse_existing(output, force)
    summary = quantize(model, calibration, output, quant_format=quant_format, per_channel=not per_tensor,
                       activation_type=activation_type, input_shapes=_model_shapes(model, input_shape, None, dim),
                       progress=_progress())
    if as_json:
        print(json.dumps(summary.to_json(), sort_keys=True))
        return
    _print_quantize_summary(summary)


def _print_quantize_summary(s: Any) -> None:
    weights = "per-channel" if s.per_channel else "per-tensor"
    print(printable(f"quantized {s.model} -> {s.output} ({s.quant_format}, {weights} int8 weights, "
                    f"{s.activation_type} activations)"))
    added = ", ".join(f"{op} {n}" for op, n in s.new_ops.items())
    print(f"  {s.float_nodes} ONNX nodes -> {sum(s.ops.values())} ({printable(added)})")
    print(f"  model file {s.float_bytes} bytes -> {s.int8_bytes} bytes")
    print(f"accuracy change on the {s.samples} calibration samples (int8 against float, both run by onnxruntime):")
    for o in s.outputs:
        top1 = (f", top-1 agreement {o.top1_agree}/{o.top1_rows} ({100 * o.top1_agree / o.top1_rows:.1f}%)"
                if o.top1_rows else "")
        print(f"  {printable(o.name)}: max abs err {o.max_abs_err:.3g}, mean abs err {o.mean_abs_err:.3g} "
              f"(float outputs up to {o.max_abs_float:.3g}){top1}")


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
    import tempfile

    from aot.package.output_dir import check_output_folder
    from aot.targets import load_target
    from aot.toolchain.discovery import find_toolchain
    from aot.toolchain.elf import read_elf
    from aot.toolchain.target_build import build_package_dir

    if toolchain not in ("auto", "gcc", "zig", "clang", "host"):
        raise AotError(f"--toolchain {toolchain!r}: use auto, gcc, zig or clang")
    budget = _max_arena(max_arena)
    target = target or _host_preset()
    read = [f for m in model for f in _files_read(m, output, force, [target])] + _value_files(input_value)
    check_output_folder(output, force, read)  # before compiling and building: a refusal costs nothing
    input_shape = _with_dims(model, input_shape, input_value, dim)
    preset = load_target(target)
    tools = find_toolchain(preset, None if toolchain == "auto" else toolchain)
    package = _compile_package(model, name, package_name, shared_arena, input_shape, input_value,
                               backend=backend, target=target, weights_format=weights_format,
                               parallel=parallel, conv_algorithm=conv_algorithm, max_arena=budget)
    # Build in a staging copy, then publish package and artefacts together: no half-built folder,
    # and nothing made next to -o (not even its parent folders) if the build fails.
    with tempfile.TemporaryDirectory(prefix="aot-build-") as tmp:
        staging = package.write(Path(tmp) / "pkg")
        _progress().start(f"cross build for {preset.name} ({tools.kind}: {tools.cc_text})")
        built = build_package_dir(staging, package, preset, tools, static=not dynamic,
                                  llvm=backend == "llvm")
        _progress().finish()
        files = {str(p.relative_to(staging)): p.read_bytes() for p in staging.rglob("*")
                 if p.is_file() and not p.name.endswith(".o") or p.name in package.files}
        artefacts = [(p.name, read_elf(p).describe() if p.suffix != ".a" else "static library", p.stat().st_size)
                     for p in built]
    from aot.package.writer import write_tree_atomically

    written = write_tree_atomically(files, output, force=force, inputs=read)
    for artefact, _, _ in artefacts:
        if not artefact.endswith(".a"):
            (written / artefact).chmod(0o755)
    if as_json:
        print(json.dumps({"package": str(written), "target": preset.name, "triple": preset.triple,
                          "toolchain": tools.kind, "cc": tools.cc_text,
                          "artefacts": [{"file": a, "kind": k, "bytes": b} for a, k, b in artefacts]},
                         sort_keys=True))
        return
    print(printable(f"built {', '.join(map(str, model))} for {preset.name} ({preset.triple}) with {tools.kind}: "
                    f"{tools.cc_text}"))
    for artefact, kind, size in artefacts:
        print(printable(f"  {written / artefact}: {kind}, {size} bytes"))


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
    from aot.commands.bench import bench

    if threads < 1 or rounds < 1:
        raise AotError("--threads and --rounds must be at least 1")
    if threads > 1024:
        raise AotError(f"--threads {threads}: give at most 1024, as the runner's -t")
    budget = _max_arena(max_arena)
    input_shape = _with_array_shapes(model, inputs, input_shape, input_value)
    with _progress().step(f"bench ({rounds} rounds)"):
        result = bench(str(model), _model_shapes(model, input_shape, input_value, dim), inputs=inputs,
                       threads=threads, rounds=rounds,
                       conv_algorithm=conv_algorithm, input_values=_values(input_value), target=target,
                       max_arena=budget, onnxruntime_isa=onnxruntime_isa)
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
    from aot.commands.report import build_report, render_report
    from aot.package.output_dir import check_output_file
    from aot.package.writer import write_file_atomically

    budget = _max_arena(max_arena)
    read = _files_read(model, output, True, [])
    check_output_file(output, read)  # before the analysis: a refusal costs nothing
    _refuse_existing(output, force)
    with _progress().step("analysis and rendering"):
        page = render_report(build_report(model, _model_shapes(model, input_shape, input_value, dim),
                                                 _values(input_value), budget))
    Path(os.path.abspath(output)).parent.mkdir(parents=True, exist_ok=True)  # as compile makes -o's parents
    write_file_atomically(output, page.encode(), inputs=read)
    print(f"wrote {printable(output)}")


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
    from aot.commands.inspect import inspect_model, show

    budget = _max_arena(max_arena)
    report = inspect_model(model, _model_shapes(model, input_shape, input_value, dim), progress=_progress(),
                           input_values=_values(input_value),
                           max_arena=budget)
    if as_json:
        print(json.dumps(report, sort_keys=True))
    else:
        show(report)


@app.command("targets")
@_report_errors
def targets_cmd(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List the target presets (use with --target NAME, or give a path to your own .toml)."""
    from aot.targets import list_targets

    targets = list_targets()
    if as_json:
        print(json.dumps([t.to_json() for t in targets], sort_keys=True))
        return
    width = max(len(t.name) for t in targets)
    for t in targets:
        print(printable(f"{t.name:{width}}  {t.triple:32} {t.description}"))


@app.command("ops")
@_report_errors
def ops_cmd(as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List the supported ONNX ops as a markdown table (domain, op, opsets, limits); docs/ops.md is this output."""
    from aot.commands.op_table import as_json as rows_json
    from aot.commands.op_table import markdown, op_rows

    rows = op_rows()
    print(json.dumps(rows_json(rows)) if as_json else markdown(rows), end="" if not as_json else "\n")


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
