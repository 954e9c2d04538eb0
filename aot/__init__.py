"""aot: ahead-of-time compiler that packages static-shape ONNX models as standalone C.

    import aot
    pkg = aot.compile("model.onnx", input_shapes={"input": (1, 3, 224, 224)})
    pkg.write("model_pkg")             # header, C sources, runtime, Makefile, CMakeLists, manifest
    outputs = pkg.run({"input": x})    # builds for the host and runs through ctypes
"""

from aot.version import __version__


def compile(model, input_shapes=None, name=None, backend="c", target=None,  # noqa: A001, ANN001, ANN201
            weights_format="auto", progress=None, conv_algorithm="auto", input_values=None,  # noqa: ANN001
            parallel=False):  # noqa: ANN001
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
    threads of <name>_run_parallel's executor (Linux targets).
    """
    from aot.compiler import compile as _compile

    return _compile(model, input_shapes=input_shapes, name=name, backend=backend, target=target,
                    weights_format=weights_format, progress=progress, conv_algorithm=conv_algorithm,
                    input_values=input_values, parallel=parallel)


__all__ = ["__version__", "compile"]
