"""aot: ahead-of-time compiler that packages static-shape ONNX models as standalone C.

    import aot
    pkg = aot.compile("model.onnx", input_shapes={"input": (1, 3, 224, 224)})
    pkg.write("model_pkg")             # header, C sources, runtime, Makefile, CMakeLists, manifest
    outputs = pkg.run({"input": x})    # builds for the host and runs through ctypes
    summary = aot.quantize("model.onnx", "calibration.npz", "model_int8.onnx")  # int8 ONNX file
"""

from aot.version import __version__


def compile(model, input_shapes=None, name=None, backend="c", target=None,  # noqa: A001, ANN001, ANN201
            weights_format="auto", *, progress=None, conv_algorithm="auto", input_values=None,  # noqa: ANN001
            parallel=False, max_arena=None, dims=None):  # noqa: ANN001
    """Compile an ONNX model (path or ModelProto) into an aot.package.package.Package (an
    aot.host.run.HostPackage: its run() builds the package for this machine and runs it).

    backend="llvm" also puts an object file for each `target` into the package: a preset name
    (`aot targets`) or a target .toml path, or a list of them; default: this machine.
    weights_format: "c" (C text), "binary" (raw bytes + a .incbin assembler file) or "auto"
    (binary above 16 MiB of weights). `progress` (an aot.progress.Progress) hears of each stage;
    by default nothing is reported. conv_algorithm: "auto" (Winograd for the 3x3 convolutions
    where it pays) or "direct". input_values={"name": array} binds graph inputs at compile time
    (--input-value): they become constants, so the shapes they decide are static, and the package
    no longer has those inputs. parallel=True (--parallel) splits large kernels' loops over the
    threads of <name>_run_parallel's executor (Linux targets). max_arena (--max-arena): the
    largest arena in bytes (an int, or text such as "200k" or "2M"): aot plans the fastest it finds
    within it, or raises AotError naming the smallest arena it can reach. dims={"sequence": 128}
    (--dim) gives a named symbolic dimension one size in every input that has it (an input's own
    input_shapes entry wins).
    """
    from aot.compiler import compile as _compile

    return _compile(model, input_shapes=input_shapes, name=name, backend=backend, target=target,
                    weights_format=weights_format, progress=progress, conv_algorithm=conv_algorithm,
                    input_values=input_values, parallel=parallel, max_arena=max_arena, dims=dims)


def compile_models(models, package_name=None, shared_arena=False, **options):  # noqa: ANN001, ANN003, ANN201
    """Compile several models into one package (`aot compile a.onnx b.onnx -o pkg`): `models` is a
    list of aot.model_set.ModelSpec (model, input_shapes, name, input_values), one per model, or
    one per input shape of the same model (shape variants: the weights are stored once).
    shared_arena=True declares one arena for models that never run at the same time. The other
    options are compile()'s. The result's .models are the models, each with run()."""
    from aot.compiler import compile_models as _compile_models

    return _compile_models(models, package_name=package_name, shared_arena=shared_arena, **options)


def quantize(model, calibration, output, quant_format="qdq", per_channel=True, activation_type="int8",  # noqa: ANN001, ANN201
             input_shapes=None, progress=None):  # noqa: ANN001
    """Quantize a float ONNX model to int8 (`aot quantize`) with onnxruntime.quantization's
    quantize_static: int8 weights (per channel unless per_channel=False), `activation_type` "int8"
    or "uint8", quant_format "qdq" or "qoperator", MinMax calibration on the samples of the
    `calibration` .npz (one array per model input, named by it; the first axis counts the
    samples, one run each). Writes `output` and returns an aot.commands.quantizer.QuantizeSummary: per
    output the max and mean abs error of the int8 model against the float one on those samples,
    and top-1 agreement for class scores ([N, C] outputs). input_shapes fixes symbolic dims."""
    from aot.commands.quantizer import quantize as _quantize

    return _quantize(model, calibration, output, quant_format=quant_format, per_channel=per_channel,
                     activation_type=activation_type, input_shapes=input_shapes, progress=progress)


__all__ = ["__version__", "compile", "compile_models", "quantize"]
